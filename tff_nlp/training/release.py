"""Release managers and JSON conversion for per-round training records.

`JsonLinesReleaseManager` is a `tff.program.ReleaseManager` writing one JSON
object per round to a `.jsonl` file. Like `tff.program.CSVFileReleaseManager`,
releasing round `k` first drops every line with a key >= `k`, so a run that
resumes from a checkpoint and replays rounds never records a round twice.
Unlike CSV it keeps nested and non-scalar values (e.g. per-client lists).
"""

import asyncio
import collections
from collections.abc import Mapping, Sequence
import dataclasses
import enum
import hashlib
import json
import os
import platform
from typing import Any

import attrs
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import errors

KEY_FIELD = 'round'
# Field metadata of a dataclass field that `to_json_value` leaves out while it
# has its default: a field added to a configuration later then keeps the
# records and cache keys (`config_digest`) of the runs made before it.
OMIT_IF_DEFAULT = 'tff_nlp_omit_if_default'
_LEGACY = 'tff_nlp_legacy_value'


def field_added_later(default: Any, *, legacy: Any = None) -> Any:
  """A dataclass field with `default` that `to_json_value` omits at `legacy`.

  `legacy` (default: `default`) is the value the runs made before the field
  existed had: records and cache keys keep omitting it. A new default that
  differs from it (a changed protocol) is then recorded, and so never
  collides with an old run's cache key.
  """
  return dataclasses.field(default=default, metadata={
      OMIT_IF_DEFAULT: True, _LEGACY: default if legacy is None else legacy})


def to_json_value(value: Any) -> Any:
  """Converts numpy/TF/attrs/dataclass structures to JSON-serializable values.

  A dataclass becomes a mapping of its fields, in order, without the fields
  made by `field_added_later` that hold their default.
  """
  if isinstance(value, Mapping):
    return collections.OrderedDict(
        (str(k), to_json_value(v)) for k, v in value.items()
    )
  if attrs.has(type(value)):
    return to_json_value(attrs.asdict(value, recurse=False))
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return to_json_value(collections.OrderedDict(
        (f.name, getattr(value, f.name)) for f in dataclasses.fields(value)
        if not (f.metadata.get(OMIT_IF_DEFAULT) and getattr(
            value, f.name) == f.metadata.get(_LEGACY, f.default))))
  if isinstance(value, enum.Enum):
    return value.value
  if isinstance(value, (list, tuple)):
    return [to_json_value(v) for v in value]
  if hasattr(value, 'numpy'):
    value = value.numpy()
  if isinstance(value, (np.ndarray, np.generic)):
    value = value.tolist()
  if isinstance(value, float) and not np.isfinite(value):
    return str(value)  # JSON has no NaN/Inf; keep them visible as strings.
  return value


def config_digest(value: Any) -> str:
  """10 hex digits of SHA-256 over `to_json_value(value)` (keys sorted): the
  name of a run cached under its configuration."""
  return hashlib.sha256(json.dumps(
      to_json_value(value), sort_keys=True).encode()).hexdigest()[:10]


def weights_digest(weights: Sequence[Any]) -> str:
  """SHA-256 (hex) over a list of arrays' dtypes, shapes and bytes: which
  trained weights a run started from, comparable across runs."""
  digest = hashlib.sha256()
  for weight in weights:
    weight = np.ascontiguousarray(weight)
    digest.update(f'{weight.dtype.str}{weight.shape};'.encode())
    digest.update(weight.tobytes())
  return digest.hexdigest()


def machine_info() -> collections.OrderedDict:
  """What a measurement ran on: cores and library versions, for its JSON."""
  return collections.OrderedDict(
      cpus=os.cpu_count(), python=platform.python_version(),
      tensorflow=tf.__version__, tff=tff.__version__)


def write_json(path: str, value: Any, *, compact: bool = False) -> None:
  """Writes `to_json_value(value)` to `path` as UTF-8 JSON.

  The file is written beside `path` and then renamed over it, so a reader
  never sees half a file, even if the writer dies.

  Args:
    path: The file.
    value: What to write.
    compact: One line without spaces (a large report kept in the
      repository: about 30 % smaller) instead of indented.
  """
  temp = f'{path}.tmp'
  with open(temp, 'w', encoding='utf-8') as f:
    if compact:
      json.dump(to_json_value(value), f, separators=(',', ':'))
    else:
      json.dump(to_json_value(value), f, indent=1)
    f.write('\n')
  os.replace(temp, path)


def read_json_lines(path: str) -> list[dict[str, Any]]:
  """Reads a `.jsonl` file written by `JsonLinesReleaseManager`.

  Args:
    path: The file.

  Returns:
    The records in file order; `[]` if the file does not exist.

  Raises:
    ValueError: If a line is not a JSON object, naming the file and line.
  """
  if not os.path.exists(path):
    return []
  with open(path, 'rb') as f:
    return read_json_lines_from(path, f.read())


def read_json_lines_from(path: str, content: bytes) -> list[dict[str, Any]]:
  """Parses `content` of the `.jsonl` file `path` (named in errors)."""
  records = []
  for line_num, line in enumerate(content.split(b'\n'), start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise errors.InputError(
          f'{path}:{line_num}: not a valid JSON line ({e}).'
      ) from e
    if not isinstance(record, dict) or KEY_FIELD not in record:
      raise errors.InputError(
          f'{path}:{line_num}: expected a JSON object with a '
          f'"{KEY_FIELD}" key.'
      )
    records.append(record)
  return records


class JsonLinesReleaseManager(tff.program.ReleaseManager[Any, int]):
  """Releases one JSON object per key (round) to a `.jsonl` file.

  Each line is `{"round": key, ...value}` (`value` must be a mapping). A
  release with a key above every recorded one appends a line; otherwise the
  file is rewritten without the lines it replaces (to a temporary file, then
  renamed). A line cut short by a kill is dropped when the file is opened.
  """

  def __init__(self, path: str):
    if not path:
      raise ValueError('path must be a non-empty string.')
    self._path = path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if os.path.exists(path):
      with open(path, 'rb') as f:
        content = f.read()
      if content and not content.endswith(b'\n'):
        self._write(read_json_lines_from(
            path, content[:content.rfind(b'\n') + 1]))
    self._keys = [r[KEY_FIELD] for r in read_json_lines(path)]

  @property
  def path(self) -> str:
    return self._path

  def _write(self, records) -> None:
    temp_path = self._path + '.tmp'
    with open(temp_path, 'w', encoding='utf-8') as f:
      for r in records:
        f.write(json.dumps(r) + '\n')
    os.replace(temp_path, self._path)

  def _release(self, value, key: int) -> None:
    if not isinstance(value, Mapping):
      raise TypeError(f'Expected a mapping to release, got {type(value)}.')
    record = collections.OrderedDict([(KEY_FIELD, int(key))])
    record.update(to_json_value(value))
    if all(k < key for k in self._keys):
      with open(self._path, 'a', encoding='utf-8') as f:
        f.write(json.dumps(record) + '\n')
    else:
      kept = [r for r in read_json_lines(self._path) if r[KEY_FIELD] < key]
      self._write(kept + [record])
      self._keys = [r[KEY_FIELD] for r in kept]
    self._keys.append(int(key))

  async def release(self, value, key: int) -> None:
    value = await tff.program.materialize_value(value)
    await asyncio.get_running_loop().run_in_executor(
        None, self._release, value, key
    )
