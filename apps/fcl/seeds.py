"""Federated continual learning over seeds: means, intervals, paired differences.

A benchmark runs every method on every dataset once per seed
(`apps.fcl.experiment.run_fcl`); each run's results hold its accuracy
matrices `[C, T, T]` and their summaries (`apps.fcl.report.summarize`).
`records` turns a method's seeds into the tidy records of
`apps.common.report_engine`: each run's recorded numbers (ACC, forgetting,
bytes, seconds...) and each (client, task) pair's final accuracy, the
examples of ACC. Then, per dataset and method:

*   `summarize_method`: the per-seed results under `seeds`, the mean over
    seeds of every summary number and of the matrices, and `acc` with
    `acc_ci95`, the Student-t interval over seeds.
*   `compare`: ACC of A - B (`comparison`): the t interval of the per-seed
    differences (training and task-sampling randomness of whole runs), the
    paired bootstrap over the (client, task) pairs of every seed, resampled
    within each seed as each seed draws its own tasks (which tasks and
    clients were drawn: FCL's bootstrap over test examples), and one verdict
    from both (`intervals.VERDICT_RULE`). No interval gets a verdict of its
    own: with one per interval, a page could call a difference that only one
    of them supports (issue 65).

Accuracies are fractions in [0, 1], as in the runs' results.
"""

import collections
from collections.abc import Mapping
from typing import Any

import numpy as np

from apps.common import report_engine as engine
from tff_nlp.metrics import intervals

# Per-run numbers averaged over seeds (`apps.fcl.report.summarize`'s).
MEAN_KEYS = ('accuracy', 'macro_f1', 'forgetting', 'backward_transfer',
             'bytes_down_per_client', 'bytes_up_per_client',
             'bytes_down_per_client_round', 'bytes_up_per_client_round',
             'bytes_up_round_last_task', 'adaptive_nonzero_per_client_round',
             'non_finite_clients', 'seconds', 'word_vector_coverage')
# ACC: the run's recorded number, the mean over clients (units) of the mean
# over their tasks (examples) of the final accuracy.
ACC = 'accuracy'
# `compare`'s JSON: the fields of the reports written before the engine.
JSON_FIELDS = ('seeds', 'difference', 'seed_ci95', 'bootstrap_ci95',
               'verdict', 'per_seed')
JSON_RENAME = {'bootstrap_ci95': 'pair_bootstrap_ci95'}


def comparison(a: str, b: str, names: tuple[str, str]) -> engine.Comparison:
  """ACC of A - B: clients' means averaged, tasks drawn per seed."""
  return engine.Comparison(a, b, ACC, average=engine.MACRO,
                           examples=engine.PER_SEED, names=names)


def _matrix(values) -> np.ndarray:
  return np.array(values, dtype=np.float64)  # None (not learned) -> NaN


def records(method: str, per_seed: Mapping[int, Mapping[str, Any]]
            ) -> list[engine.Record]:
  """A method's seeds as tidy records: its `MEAN_KEYS` numbers, and each
  (client, task) pair's final accuracy (unit: client, example: task)."""
  rows = []
  for seed, run in per_seed.items():
    rows += [engine.Record(method, seed, key, run[key])
             for key in MEAN_KEYS if key in run]
    final = _matrix(run['accuracy_matrix'])[:, -1, :]
    rows += [engine.Record(method, seed, ACC, value, unit=client, example=task)
             for client, row in enumerate(final)
             for task, value in enumerate(row)]
  return rows


def summarize_method(per_seed: Mapping[int, Mapping[str, Any]]
                     ) -> collections.OrderedDict:
  """One method on one dataset over its seeds.

  Args:
    per_seed: seed -> that seed's run results.

  Returns:
    `seeds` (the per-seed results), `acc`, `acc_ci95` ([low, high], None
    with one seed), the seed-mean of every `MEAN_KEYS` number present, of
    `accuracy_matrix` and `macro_f1_matrix`, of `kb_entries_per_client`
    and of `bytes_per_client_by_part`.
  """
  if not per_seed:
    raise ValueError('No seed to summarize.')
  runs = list(per_seed.values())
  means = engine.method_intervals(engine.Table(records('m', per_seed)), 'm',
                                  average=engine.MACRO)
  summary = collections.OrderedDict(
      seeds=collections.OrderedDict((str(s), r) for s, r in per_seed.items()),
      acc=means[ACC].estimate, acc_ci95=means[ACC].bounds())
  summary.update((key, means[key].estimate) for key in MEAN_KEYS
                 if key in means)
  for key in ('accuracy_matrix', 'macro_f1_matrix'):
    mean = np.mean([_matrix(r[key]) for r in runs], axis=0)
    summary[key] = np.where(np.isnan(mean), None, mean).tolist()
  summary['kb_entries_per_client'] = np.mean(
      [r['kb_entries_per_client'] for r in runs], axis=0).tolist()
  parts = collections.OrderedDict()
  for run in runs:
    for part, value in run.get('bytes_per_client_by_part', {}).items():
      parts[part] = parts.get(part, 0.0) + value / len(runs)
  summary['bytes_per_client_by_part'] = parts
  return summary


def verdict(comparison_json: Mapping[str, Any],
            names: tuple[str, str]) -> str:
  """The verdict of a comparison (`compare`'s, or read from a report).

  Args:
    comparison_json: Its `seed_ci95` ([low, high], None with one seed) and
      `pair_bootstrap_ci95`.
    names: (A, B) for the verdict.

  Returns:
    `intervals.comparison_verdict` of the two intervals: f'{A} higher' or
    f'{B} higher' only when both exclude 0 on that side.
  """
  return intervals.comparison_verdict(comparison_json.get('seed_ci95'),
                                      comparison_json['pair_bootstrap_ci95'],
                                      *names)


def compare(a: Mapping[int, Mapping[str, Any]],
            b: Mapping[int, Mapping[str, Any]], *, names: tuple[str, str],
            num_replicates: int = 2000, seed: int = 0
            ) -> collections.OrderedDict:
  """ACC of A - B over the seeds both ran (`engine.compare`).

  Args:
    a: seed -> method A's run results.
    b: seed -> method B's, on the same tasks per seed.
    names: (A, B) for the verdicts.
    num_replicates: Replicates of the pair bootstrap.
    seed: Its seed.

  Returns:
    `seeds` (the common seeds), `difference` (mean over seeds of ACC(A) -
    ACC(B)), `seed_ci95` (None with one seed), `pair_bootstrap_ci95`,
    `verdict` (from both intervals) and `per_seed` differences.

  Raises:
    ValueError: If the methods share no seed.
  """
  table = engine.Table(records('a', a) + records('b', b))
  return engine.compare(
      table, comparison('a', 'b', names), num_replicates=num_replicates,
      seed=seed).to_json(JSON_FIELDS, JSON_RENAME)
