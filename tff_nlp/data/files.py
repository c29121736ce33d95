"""Reading a data file, with one clear error for every way it can fail."""

from tff_nlp import errors


def read_file_bytes(path: str, expected: str) -> bytes:
  """The bytes of the file `path`; an `InputError` if it cannot be read.

  The readers of `tff_nlp.data` (`text_classification.read_tsv`,
  `nmt.read_parallel`, `text2sql.read_queries`, `text2sql.read_schema`) read
  their files through this, so that a missing file, a directory or an
  unreadable path is one line naming the path, not an `OSError` traceback.

  Args:
    path: The file.
    expected: What the file should be, for the message (e.g. 'a UTF-8 text
      file of lines "label<TAB>text"').

  Returns:
    The file's content.

  Raises:
    InputError: If `path` does not exist, is a directory, or cannot be read
      (no permission, a path through a file, ...); the message names `path`
      and says what was expected.
  """
  try:
    with open(path, 'rb') as f:
      return f.read()
  except FileNotFoundError:
    raise errors.InputError(f'{path}: file not found.') from None
  except IsADirectoryError:
    raise errors.InputError(
        f'{path}: is a directory; expected {expected}.') from None
  except OSError as e:  # NotADirectoryError, PermissionError, ...
    raise errors.InputError(
        f'{path}: cannot be read ({e.strerror or e}); expected {expected}.'
    ) from None
