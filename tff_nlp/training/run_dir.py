"""The output directory of a run: checked before training, tied to a config.

A run directory holds `config.json` and `data_fingerprint.json`. Starting a
run in a directory that already has them resumes that run, which is only
right if the experiment and its data are the same: `prepare_run_dir`
compares the parts of the config that define the experiment and refuses a
mismatch, naming the differing keys, and the run refuses to start if a data
file it read has changed since the run started (naming the file), instead of
silently mixing two experiments' (or two data sets') checkpoints and metrics.

Both files are written only once the run starts, after its flags and data
were checked (the end of the `with prepare_run_dir(...)` block), so a run
refused for a typo or a bad data file leaves nothing behind that would
refuse the corrected run. `restart=True` (the binaries' `--restart`) removes
the run a directory holds and starts over.

    with training.prepare_run_dir(output_dir, config) as run_dir:
      task = load_the_data(...)  # Data files read here are fingerprinted.
    # The run has started: config.json and data_fingerprint.json are written.
    training.run_training(...)
"""

from collections.abc import Mapping
import json
import os
import shutil
from typing import Any, Optional

from absl import logging

from tff_nlp import errors
from tff_nlp.data import data_root as data_root_lib
from tff_nlp.data import files
from tff_nlp.training import release

CONFIG_FILE = 'config.json'
# The data files a run read (`files.recording_reads`): {'files': {name:
# sha256}}, a name relative to the data folder (`shared/data`) when the file
# is inside it. Beside `config.json`, not in it: what names cached runs
# (`run_cache.run_dir`, digests of `config.json`) stays as it was.
DATA_FINGERPRINT_FILE = 'data_fingerprint.json'
# What a run directory holds before its run trained anything: such a
# directory is no run to resume (e.g. a refused run's, written by versions
# that recorded the config before checking the data).
_RECORD_FILES = frozenset(
    name + suffix for name in (CONFIG_FILE, DATA_FINGERPRINT_FILE)
    for suffix in ('', '.tmp'))
# Where `--restart` sets the old run aside until the new one starts.
_REPLACED_RUN_DIR = '.replaced_run'
# The changed files a refusal lists at most.
_MAX_LISTED_CHANGES = 5
# The key of `config.json` whose value must match for a run to be resumed.
EXPERIMENT_KEY = 'experiment'
# Free space `check_output_dir` requires by default: room for a few
# checkpoints of our cpu presets' models (tens of MB each) and the results.
MIN_FREE_BYTES = 256 * 2**20


def _differences(old, new, prefix=''):
  if isinstance(old, Mapping) and isinstance(new, Mapping):
    diffs = []
    for key in sorted(set(old) | set(new)):
      diffs += _differences(old.get(key), new.get(key), f'{prefix}{key}.')
    return diffs
  return [] if old == new else [f'{prefix[:-1]}: {old!r} -> {new!r}']


_START_OVER = ('Pass --restart (restart=True) to remove this run and start '
               'over, or use another output directory.')


def check_output_dir(output_dir: str,
                     min_free_bytes: int = MIN_FREE_BYTES) -> None:
  """Creates `output_dir` if needed; fails now if a run could not write it.

  Called before any data is read or model built, so that a bad output
  directory is reported at once, not after hours of training at the first
  checkpoint.

  Args:
    output_dir: The run (or benchmark) directory.
    min_free_bytes: Free space the file system must have.

  Raises:
    InputError: If `output_dir` cannot be created or written, or its file
      system has less than `min_free_bytes` free.
  """
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    raise errors.InputError(
        f'Output directory {output_dir!r} cannot be created: {e.strerror}.'
    ) from e
  probe = os.path.join(output_dir, '.write_test')
  try:
    with open(probe, 'w') as f:
      f.write('ok')
    os.remove(probe)
  except OSError as e:
    raise errors.InputError(
        f'Output directory {output_dir!r} is not writable: {e.strerror}.'
    ) from e
  free = shutil.disk_usage(output_dir).free
  if free < min_free_bytes:
    raise errors.InputError(
        f'Output directory {output_dir!r}: its file system has '
        f'{free / 2**20:.1f} MiB free, less than the '
        f'{min_free_bytes / 2**20:.0f} MiB a run needs for its checkpoints '
        'and results. Free some space or use another output directory.'
    )


def _first_missing(path: str) -> Optional[str]:
  """The outermost folder of `path` that does not exist yet, if any."""
  path = os.path.abspath(path)
  missing = None
  while not os.path.exists(path):
    missing = path
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  return missing


def _only_record(output_dir: str) -> bool:
  return set(os.listdir(output_dir)) <= _RECORD_FILES


def _remove(path: str) -> None:
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path)
  else:
    os.remove(path)


def _read_json(path: str, output_dir: str) -> Any:
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise errors.CheckpointError(
        f'{path}: cannot be read ({e}); it describes the run in '
        f'{output_dir!r}. Fix or remove it, or use another output '
        'directory.') from e


def _write_json(path: str, value: Any) -> None:
  temp_path = path + '.tmp'
  with open(temp_path, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=2)
    f.write('\n')
  os.replace(temp_path, path)


def _root(data_root: Optional[str]) -> str:
  return os.path.realpath(data_root if data_root is not None
                          else data_root_lib.locate_data_dir().path)


def data_fingerprint(reads: Mapping[str, str],
                     data_root: Optional[str] = None) -> dict[str, str]:
  """The data files of `reads` by name: {name: sha256}, sorted.

  Args:
    reads: Real path -> SHA-256 (`files.recording_reads`).
    data_root: The data folder the names are relative to (a file outside it
      is named by its real path); None: the `shared/data` folder
      (`data_root.locate_data_dir`). Relative names keep the fingerprint of
      a run the same wherever the data folder is.

  Returns:
    The fingerprint `data_fingerprint.json` records.
  """
  root = _root(data_root)
  named = {}
  for path, digest in reads.items():
    inside = path.startswith(root + os.sep)
    named[os.path.relpath(path, root).replace(os.sep, '/') if inside
          else path] = digest
  return dict(sorted(named.items()))


def check_data_fingerprint(run_dir: str, fingerprint: Mapping[str, str],
                           data_root: Optional[str] = None
                           ) -> dict[str, str]:
  """Refuses to continue the run in `run_dir` if its data changed.

  Compares `fingerprint` (the data files this invocation read) with the one
  the run recorded when it started (`DATA_FINGERPRINT_FILE`; none: nothing
  to compare, e.g. a run recorded by an older version). A file the run read
  then but not now (e.g. served from a cache this time) is hashed again.

  Args:
    run_dir: The run's directory.
    fingerprint: `data_fingerprint` of the files read now.
    data_root: What the names are relative to (as for `data_fingerprint`).

  Returns:
    The run's fingerprint: `fingerprint` and the files recorded before that
    were not read now (unchanged), sorted.

  Raises:
    CheckpointError: If a file differs, is gone, or is read now but was not
      then; the message names each (at most 5) with both digests.
  """
  path = os.path.join(run_dir, DATA_FINGERPRINT_FILE)
  if not os.path.exists(path):
    return dict(sorted(fingerprint.items()))
  recorded = _read_json(path, run_dir)
  if not isinstance(recorded, Mapping) or not isinstance(
      recorded.get('files'), Mapping):
    raise errors.CheckpointError(
        f"{path}: has no 'files' entry, so whether the data of the run in "
        f'{run_dir!r} changed cannot be checked. {_START_OVER}')
  recorded = recorded['files']
  root = _root(data_root)
  changes = []
  for name in sorted(set(recorded) | set(fingerprint)):
    old, new = recorded.get(name), fingerprint.get(name)
    if old == new:
      continue
    if new is None:
      file_path = name if os.path.isabs(name) else os.path.join(root, name)
      if not os.path.isfile(file_path):
        changes.append(f'{name} was removed since this run started')
        continue
      new = files.sha256_of_file(file_path)
      if new == old:
        continue
    if old is None:
      changes.append(f'{name} is read now but was not when this run started')
    else:
      changes.append(f'{name} changed since this run started (sha256 '
                     f'{old[:12]}… -> {new[:12]}…)')
  if changes:
    more = len(changes) - _MAX_LISTED_CHANGES
    listed = '; '.join(changes[:_MAX_LISTED_CHANGES]) + (
        f'; and {more} more' if more > 0 else '')
    raise errors.CheckpointError(
        f'{path}: the data of the run in {run_dir!r} changed: {listed}. '
        'Resuming would train one run on two versions of the data. '
        f'{_START_OVER}')
  return dict(sorted({**recorded, **fingerprint}.items()))


def write_data_fingerprint(run_dir: str,
                           fingerprint: Mapping[str, str]) -> None:
  """Writes `DATA_FINGERPRINT_FILE` (atomically)."""
  _write_json(os.path.join(run_dir, DATA_FINGERPRINT_FILE),
              {'files': dict(fingerprint)})


class RunDir:
  """A run directory, checked for a run that has not started yet.

  Made by `prepare_run_dir`. Used as a context manager, it records the data
  files read inside the block (`files.recording_reads`) and, when the block
  ends without an exception, starts the run (`start`). When the block
  raises (a bad flag, a bad data file), a directory that held no run is left
  as it was before `prepare_run_dir` (what the block wrote removed, the
  directory itself if `prepare_run_dir` made it), so the corrected run finds
  nothing that refuses it.

  Attributes:
    path: The run directory.
    config: The run's configuration, as JSON values.
    resumed: Whether the directory holds this experiment's run, which this
      one continues.
    started: Whether `start` has recorded the run.
    data_files: The data fingerprint recorded by `start`.
  """

  def __init__(self, path: str, config: Mapping[str, Any], *, resumed: bool,
               data_root: Optional[str], created: Optional[str],
               entries_before: frozenset[str],
               replaced: Optional[str] = None):
    self.path = path
    self.config = config
    self.resumed = resumed
    self.data_root = data_root
    self.started = False
    self.data_files = None
    self._created = created
    self._entries_before = entries_before
    self._replaced = replaced
    self._recording = None
    self._reads = {}

  def __enter__(self) -> 'RunDir':
    self._recording = files.recording_reads()
    self._reads = self._recording.__enter__()
    return self

  def __exit__(self, exc_type, exc, traceback) -> bool:
    self._recording.__exit__(exc_type, exc, traceback)
    if exc_type is None:
      try:
        self.start()
      except BaseException:
        self.discard()
        raise
    else:
      self.discard()
    return False

  def start(self, reads: Optional[Mapping[str, str]] = None) -> None:
    """Checks the data, then records the run: it has started.

    Args:
      reads: The data files read (real path -> SHA-256); default: those
        read inside the `with` block.

    Raises:
      CheckpointError: If the run resumed and a data file changed since it
        started (`check_data_fingerprint`).
    """
    if self.started:
      return
    fingerprint = data_fingerprint(
        self._reads if reads is None else reads, self.data_root)
    if self.resumed:
      fingerprint = check_data_fingerprint(self.path, fingerprint,
                                           self.data_root)
    _write_json(os.path.join(self.path, CONFIG_FILE), self.config)
    write_data_fingerprint(self.path, fingerprint)
    self.data_files = fingerprint
    self.started = True
    if self._replaced is not None:  # --restart: the old run goes now.
      _remove(self._replaced)
      self._replaced = None

  def discard(self) -> None:
    """Removes what this attempt wrote, if the directory held no run."""
    if self.started or self.resumed or not os.path.isdir(self.path):
      return
    for name in sorted(set(os.listdir(self.path)) - self._entries_before):
      _remove(os.path.join(self.path, name))
    if self._replaced is not None:  # A refused --restart keeps the old run.
      for name in os.listdir(self._replaced):
        os.rename(os.path.join(self._replaced, name),
                  os.path.join(self.path, name))
      os.rmdir(self._replaced)
      self._replaced = None
      return
    if self._created is None:
      return
    # The folders `prepare_run_dir` made, innermost first, while empty.
    folder = os.path.abspath(self.path)
    while True:
      try:
        os.rmdir(folder)
      except OSError:
        return
      if folder == self._created:
        return
      folder = os.path.dirname(folder)


def prepare_run_dir(output_dir: str, config: Mapping[str, Any], *,
                    restart: bool = False,
                    data_root: Optional[str] = None) -> RunDir:
  """Checks `output_dir` for the run of `config`, before any data is read.

  Records nothing: the run's `config.json` and `data_fingerprint.json` are
  written when it starts (`RunDir.start`, at the end of a `with` block over
  the returned `RunDir`, in which the run reads and checks its data).

  Args:
    output_dir: The run directory.
    config: The run's configuration; `config['experiment']` must match that
      of an existing run in `output_dir`, the rest (e.g. the number of
      rounds, runtime settings) may change between invocations.
    restart: Start over: the run `output_dir` holds (every file in it, if
      it has a `config.json`) is set aside and removed when the new run
      starts, or put back if the new run is refused.
    data_root: The data folder the data fingerprint's names are relative to
      (see `data_fingerprint`); None: the `shared/data` folder.

  Returns:
    The `RunDir`; its `resumed` tells whether `output_dir` holds this
    experiment's run (the run resumes).

  Raises:
    InputError: If `output_dir` cannot be created or written, or is on a
      nearly full file system (`check_output_dir`).
    CheckpointError: If it holds a different experiment, or a
      `config.json` that is unreadable or records no experiment.
  """
  if EXPERIMENT_KEY not in config:
    raise ValueError(f'config needs an {EXPERIMENT_KEY!r} entry.')
  config = release.to_json_value(config)
  created = _first_missing(output_dir)
  check_output_dir(output_dir)

  path = os.path.join(output_dir, CONFIG_FILE)
  replaced = None
  if restart and os.path.exists(path):
    # Set aside, not deleted: if the new run is refused (a typo, a bad data
    # file), `RunDir.discard` puts the old run back; `RunDir.start` deletes
    # it once the new run has started.
    names = sorted(os.listdir(output_dir))
    replaced = os.path.join(output_dir, _REPLACED_RUN_DIR)
    if os.path.exists(replaced):  # Left by a process killed meanwhile.
      _remove(replaced)
      names.remove(_REPLACED_RUN_DIR)
    logging.warning('%s: restart: the run it holds (%s) is removed when the '
                    'new run starts.', output_dir, ', '.join(names))
    os.mkdir(replaced)
    for name in names:
      os.rename(os.path.join(output_dir, name), os.path.join(replaced, name))
  # A directory with nothing but a config has no run to resume.
  resumed = os.path.exists(path) and not _only_record(output_dir)
  if resumed:
    previous = _read_json(path, output_dir)
    if not isinstance(previous, Mapping) or EXPERIMENT_KEY not in previous:
      # E.g. written before the experiment wrote its config here: nothing
      # tells whether it is the same experiment.
      raise errors.CheckpointError(
          f'{path}: has no {EXPERIMENT_KEY!r} entry, so whether '
          f'{output_dir!r} holds a run of this experiment cannot be checked. '
          f'{_START_OVER}')
    diffs = _differences(previous.get(EXPERIMENT_KEY),
                         config[EXPERIMENT_KEY])
    if diffs:
      raise errors.CheckpointError(
          f'{path}: {output_dir!r} holds a run of a different experiment '
          f'({"; ".join(diffs)}). {_START_OVER}')
  return RunDir(output_dir, config, resumed=resumed, data_root=data_root,
                created=created,
                entries_before=frozenset(os.listdir(output_dir)),
                replaced=replaced)
