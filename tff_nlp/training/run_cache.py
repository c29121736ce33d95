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

from collections.abc import Callable, Mapping
import json
import os
from typing import Any, Optional

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
