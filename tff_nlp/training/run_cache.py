"""Runs cached under their configuration: `<parent>/<name>-<digest>/`.

A benchmark or experiment of many runs (text-to-SQL methods x seeds, NMT
engines, FCL methods x datasets) keeps each run in a directory named after
what defines it (`run_dir`: a readable name and `config_digest` of a key),
and a run is finished once it has written its results file
(`finished_results`). Running the benchmark again then reads the finished
runs back and resumes the unfinished one (its own checkpoints), and a changed
configuration starts a new run instead of mixing two.

What the key holds is the caller's choice: everything that changes a run's
result, and nothing else (so that, e.g., a new NMT `local_steps` starts new
federated engines but keeps the generic one).
"""

from collections.abc import Callable, Mapping, Sequence
import glob
import gzip
import json
import os
import shutil
from typing import Any, Optional

from tff_nlp import errors
from tff_nlp.training import release

RESULTS_FILE = 'results.json'


def run_dir(parent: str, name: str, key: Any) -> str:
  """`parent/<name>-<config_digest(key)>`: the directory of one cached run.

  Args:
    parent: The folder of the cached runs (e.g. `<output_dir>/runs`).
    name: A readable name of the run (method, engine, dataset), which need
      not be unique: the digest tells runs of one name apart.
    key: What defines the run: any value `training.to_json_value` takes
      (dataclasses, mappings, sequences, numbers, strings).

  Returns:
    The run's directory (not created).
  """
  return os.path.join(parent, f'{name}-{release.config_digest(key)}')


def finished_results(
    directory: str, *, results_file: str = RESULTS_FILE,
    is_complete: Optional[Callable[[Mapping[str, Any]], bool]] = None,
) -> Optional[dict[str, Any]]:
  """A cached run's results if it finished, else None.

  Args:
    directory: The run's directory (`run_dir`).
    results_file: The file a run writes last, when it has finished (written
      atomically, e.g. by `training.write_json`).
    is_complete: If given, also required of the results (e.g. that they are
      those of as many rounds as asked for now).

  Returns:
    The parsed results file, or None if there is none or `is_complete`
    refuses it.
  """
  path = os.path.join(directory, results_file)
  if not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    results = json.load(f)
  if is_complete is not None and not is_complete(results):
    return None
  return results


# Files of a finished run that `archive` keeps by default: enough for a
# report to read the run back as finished.
ARCHIVED_FILES = (RESULTS_FILE, 'config.json')
# The name a run's results file has in an archive: one run (one seed), a
# report's input, not a result on its own (those are the reports' own
# `results.json`, with every seed and their intervals).
ARCHIVED_RESULTS_FILE = 'run.json'
# Text that is large and compresses well (translations) is archived gzipped.
_COMPRESSED_SUFFIXES = ('.jsonl',)


def archive(runs_dir: str, archive_dir: str, *,
            files: Sequence[str] = ARCHIVED_FILES,
            exclude: Sequence[str] = ()) -> list[str]:
  """Copies every finished run's small files into `archive_dir`.

  A benchmark's run folder holds checkpoints of gigabytes and is lost with
  the machine; its finished runs' results are small. `archive` keeps them in
  a folder that can be committed (e.g. `records/<bench>`), and
  `restore` puts them back on another machine, where the benchmark then
  reads those runs as finished (`finished_results`) and trains only the
  others.

  Args:
    runs_dir: The folder of the cached runs (`run_dir`'s `parent`).
    archive_dir: Where `<run name>/<file>` go (created).
    files: Glob patterns, relative to a run's folder, of what to keep.
      Files ending in `.jsonl` are stored gzipped (`<file>.gz`); the results
      file as `ARCHIVED_RESULTS_FILE`.
    exclude: Prefixes of run names not to archive: runs whose weights later
      runs start from (a restored result without its weights would let
      them start from nothing).

  Returns:
    The names of the runs archived (finished ones only, sorted).
  """
  archived = []
  if not os.path.isdir(runs_dir):
    return archived
  for name in sorted(os.listdir(runs_dir)):
    source = os.path.join(runs_dir, name)
    if (any(name.startswith(p) for p in exclude)
        or not os.path.isfile(os.path.join(source, RESULTS_FILE))):
      continue
    for pattern in files:
      for path in sorted(glob.glob(os.path.join(source, pattern))):
        relative = os.path.relpath(path, source)
        if relative == RESULTS_FILE:
          relative = ARCHIVED_RESULTS_FILE
        target = os.path.join(archive_dir, name, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if path.endswith(_COMPRESSED_SUFFIXES):
          # mtime=0: the same file archives to the same bytes.
          with open(path, 'rb') as f, open(target + '.gz', 'wb') as raw:
            with gzip.GzipFile(fileobj=raw, mode='wb', mtime=0) as out:
              shutil.copyfileobj(f, out)
        else:
          shutil.copyfile(path, target)
    archived.append(name)
  return archived


def restore(archive_dir: str, runs_dir: str) -> list[str]:
  """Puts `archive`d runs back into `runs_dir` (see `archive`).

  A run that already has its results file in `runs_dir` is left as it is.

  Args:
    archive_dir: A folder `archive` wrote.
    runs_dir: The benchmark's folder of cached runs.

  Returns:
    The names of the runs restored (sorted).

  Raises:
    errors.InputError: An archived run has no results file.
  """
  restored = []
  if not os.path.isdir(archive_dir):
    return restored
  for name in sorted(os.listdir(archive_dir)):
    source = os.path.join(archive_dir, name)
    if not os.path.isdir(source):
      continue
    if not os.path.isfile(os.path.join(source, ARCHIVED_RESULTS_FILE)):
      raise errors.InputError(
          f'{source}: an archived run without its {ARCHIVED_RESULTS_FILE}.')
    target_dir = os.path.join(runs_dir, name)
    if os.path.isfile(os.path.join(target_dir, RESULTS_FILE)):
      continue
    for root, _, names in os.walk(source):
      for file_name in names:
        path = os.path.join(root, file_name)
        target = os.path.join(target_dir, os.path.relpath(path, source))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if path.endswith(tuple(s + '.gz' for s in _COMPRESSED_SUFFIXES)):
          with gzip.open(path, 'rb') as f, open(target[:-3], 'wb') as out:
            shutil.copyfileobj(f, out)
        elif os.path.relpath(path, source) != ARCHIVED_RESULTS_FILE:
          shutil.copyfile(path, target)
    # The results file last: until it is there, the run is unfinished.
    shutil.copyfile(os.path.join(source, ARCHIVED_RESULTS_FILE),
                    os.path.join(target_dir, RESULTS_FILE))
    restored.append(name)
  return restored
