"""An FCL benchmark's finished runs, read for a report that trains nothing.

`train_fcl --report_only` (`experiments.fcl.run_fcl(report_only=True)`)
writes a benchmark's report again from runs that have finished: when the
report changes (issue 65: one verdict rule, "What the model saw"), hours of
archived CPU runs are reported anew in seconds, and a run that never
finished is named rather than started. `FinishedRuns` reads each run from

1.  its folder `<output_dir>/runs/<dataset>-<method>-<digest>`, where
    `apps.common.bin.run_archive --action=restore` puts the runs archived in
    `records/fcl/`; else
2.  the per-seed results of the report already in `<output_dir>/results.json`
    whose settings give the run the same folder name (the same cache key,
    `experiments.fcl.run_key`): runs whose folders were lost survive there
    (docs/results/fcl.md's first setting). Reports written before `--seeds`
    existed hold one run per method, of the training seed.
"""

from collections.abc import Callable, Mapping
import json
import os
from typing import Any, Optional

from tff_nlp import errors
from tff_nlp.training import run_cache

# (dataset, method, data settings, training settings, seed or None) of a run
# in an earlier report -> its run folder's name (`experiments.fcl.run_dir`).
RunName = Callable[[str, str, Mapping[str, Any], Mapping[str, Any],
                    Optional[int]], str]


def _earlier_runs(path: str, run_name: RunName) -> dict[str, dict[str, Any]]:
  """Run folder name -> run results, from the report at `path`."""
  with open(path, encoding='utf-8') as f:
    report = json.load(f)
  runs = {}
  try:
    # Whether seed s is `experiments.fcl.replicate(..., s)` or the settings
    # as given (no --seeds); reports before the key had it iff seeds.
    with_seeds = report.get('seeds_are_replicates', bool(report.get('seeds')))
    for dataset, by_method in report['results'].items():
      for method, summary in by_method.items():
        per_seed = (summary['seeds'] if 'seeds' in summary
                    else {None: summary})  # One run, before --seeds.
        for seed, run in per_seed.items():
          name = run_name(dataset, method, report['data'],
                          report['training'],
                          int(seed) if with_seeds else None)
          runs[name] = run
  except (KeyError, TypeError, ValueError, AttributeError) as e:
    raise errors.InputError(
        f'{path}: not a results.json of train_fcl ({type(e).__name__}: '
        f'{e}).') from e
  return runs


class FinishedRuns:
  """The finished runs of one benchmark folder, and the ones missing."""

  def __init__(self, output_dir: str, run_name: RunName):
    """Reads the earlier report of `output_dir`, if any.

    Args:
      output_dir: The benchmark's folder.
      run_name: The run folder name of a run of the earlier report.
    """
    path = os.path.join(output_dir, run_cache.RESULTS_FILE)
    self._earlier = {}
    self.earlier_command = None
    if os.path.exists(path):
      self._earlier = _earlier_runs(path, run_name)
      with open(path, encoding='utf-8') as f:
        earlier = json.load(f)
      # A report written by --report_only names the training command too.
      self.earlier_command = (earlier.get('trained_by')
                              or earlier.get('command') or None)
    self.missing = []
    self.from_report = 0

  def get(self, directory: str) -> Optional[dict[str, Any]]:
    """The results of the run whose folder is `directory`, or None (then
    listed in `missing`)."""
    results = run_cache.finished_results(directory)
    if results is None:
      results = self._earlier.get(os.path.basename(directory))
      self.from_report += results is not None
    if results is None:
      self.missing.append(directory)
    return results

  def check(self) -> None:
    """Raises `errors.InputError` naming every run that was not found."""
    if self.missing:
      raise errors.InputError(
          f'--report_only: {len(self.missing)} run(s) not finished, nothing '
          'trained; restore them (apps.common.bin.run_archive --action=restore) '
          'or run without --report_only: ' + ', '.join(self.missing))
