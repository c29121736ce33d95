"""Errors that report bad input from users, not bugs in tff_nlp.

Binaries turn an `InputError` into one line on stderr and exit status 2 (see
`apps.common.binary.run`); anything else is a bug and keeps its traceback.
"""


class InputError(ValueError):
  """Bad input: a data file, a directory, a flag value or a checkpoint.

  The message names the file (and line), directory or argument and says what
  was expected. A `ValueError`, so code catching `ValueError` keeps working.
  """


class CheckpointError(InputError):
  """A checkpoint or run directory that cannot be resumed from as asked."""
