"""The output directory of a run: checked before training, tied to a config.

A run directory holds `config.json`. Starting a run in a directory that
already has one resumes that run, which is only right if the experiment is
the same: `prepare_run_dir` compares the parts of the config that define the
experiment and refuses a mismatch, naming the differing keys, instead of
silently mixing two experiments' checkpoints and metrics.
"""

from collections.abc import Mapping
import json
import os
import shutil
from typing import Any

from tff_nlp import errors
from tff_nlp.training import release

CONFIG_FILE = 'config.json'
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


def prepare_run_dir(output_dir: str, config: Mapping[str, Any]) -> bool:
  """Creates or checks `output_dir` and writes `config.json`.

  Args:
    output_dir: The run directory.
    config: The run's configuration; `config['experiment']` must match that
      of an existing run in `output_dir`, the rest (e.g. the number of
      rounds, runtime settings) may change between invocations.

  Returns:
    Whether `output_dir` already held this experiment (the run resumes).

  Raises:
    InputError: If `output_dir` cannot be created or written, or is on a
      nearly full file system (`check_output_dir`).
    CheckpointError: If it holds a different experiment, or a
      `config.json` that is unreadable or records no experiment.
  """
  if EXPERIMENT_KEY not in config:
    raise ValueError(f'config needs an {EXPERIMENT_KEY!r} entry.')
  config = release.to_json_value(config)
  check_output_dir(output_dir)

  path = os.path.join(output_dir, CONFIG_FILE)
  resumed = os.path.exists(path)
  if resumed:
    try:
      with open(path, encoding='utf-8') as f:
        previous = json.load(f)
    except (OSError, ValueError) as e:
      raise errors.CheckpointError(
          f'{path}: cannot be read ({e}); it describes the run in '
          f'{output_dir!r}. Fix or remove it, or use another output '
          'directory.') from e
    if not isinstance(previous, Mapping) or EXPERIMENT_KEY not in previous:
      # E.g. written before the experiment wrote its config here: nothing
      # tells whether it is the same experiment.
      raise errors.CheckpointError(
          f'{path}: has no {EXPERIMENT_KEY!r} entry, so whether '
          f'{output_dir!r} holds a run of this experiment cannot be checked. '
          'Use another output directory, or remove this one to start over.')
    diffs = _differences(previous.get(EXPERIMENT_KEY),
                         config[EXPERIMENT_KEY])
    if diffs:
      raise errors.CheckpointError(
          f'{path}: {output_dir!r} holds a run of a different experiment '
          f'({"; ".join(diffs)}). Use another output directory, or remove '
          'this one to start over.')
  temp_path = path + '.tmp'
  with open(temp_path, 'w', encoding='utf-8') as f:
    json.dump(config, f, indent=2)
    f.write('\n')
  os.replace(temp_path, path)
  return resumed
