"""Reading a data file, with one clear error for every way it can fail.

`read_file_bytes` is the one way the readers of `tff_nlp.data` read a data
file, so it is also where a run learns which files it read: inside
`recording_reads()`, every file read is recorded with the SHA-256 of the
bytes read (`training.prepare_run_dir` keeps them as the run's data
fingerprint, and refuses to resume a run whose data changed).
"""

from collections.abc import Iterator
import contextlib
import contextvars
import hashlib
import os

from tff_nlp import errors

# The dicts of the `recording_reads` blocks open in this context.
_RECORDERS: contextvars.ContextVar[tuple[dict[str, str], ...]] = (
    contextvars.ContextVar('tff_nlp_data_recorders', default=()))


@contextlib.contextmanager
def recording_reads() -> Iterator[dict[str, str]]:
  """Records every file `read_file_bytes` reads inside the block.

  Blocks may nest; each records what is read inside it.

  Yields:
    A dict, filled as files are read: the real path (`os.path.realpath`) of
    each file read -> the hex SHA-256 of its bytes.
  """
  reads = {}
  token = _RECORDERS.set(_RECORDERS.get() + (reads,))
  try:
    yield reads
  finally:
    _RECORDERS.reset(token)


def sha256_of_file(path: str) -> str:
  """The hex SHA-256 of the file `path` (read in chunks, not recorded)."""
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      digest.update(chunk)
  return digest.hexdigest()


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
      content = f.read()
  except FileNotFoundError:
    raise errors.InputError(f'{path}: file not found.') from None
  except IsADirectoryError:
    raise errors.InputError(
        f'{path}: is a directory; expected {expected}.') from None
  except OSError as e:  # NotADirectoryError, PermissionError, ...
    raise errors.InputError(
        f'{path}: cannot be read ({e.strerror or e}); expected {expected}.'
    ) from None
  recorders = _RECORDERS.get()
  if recorders:
    digest = hashlib.sha256(content).hexdigest()
    real_path = os.path.realpath(path)
    for reads in recorders:
      reads[real_path] = digest
  return content
