"""Federated continual learning over seeds: means, intervals, paired differences.

A benchmark runs every method on every dataset once per seed
(`apps.fcl.experiment.run_fcl`); each run's results hold its accuracy
matrices `[C, T, T]` and their summaries (`experiments.fcl.summarize`).
Here, per dataset and method:

*   `summarize_method`: the per-seed results under `seeds`, the mean over
    seeds of every summary number (ACC, forgetting, BWT, macro-F1, bytes,
    seconds) and of the matrices, and `acc` with `acc_ci95`, the Student-t
    interval over seeds (`intervals.seed_interval`).
*   `compare`: a paired difference A - B of ACC, with two intervals: over
    seeds (the per-seed differences; training and task-sampling randomness
    of whole runs) and a paired bootstrap over the (client, task) pairs of
    every seed (`continual.pair_bootstrap_difference`; which tasks and
    clients were drawn, FCL's bootstrap over test examples), and one
    verdict from both (`verdict`).
*   `verdict`: `intervals.comparison_verdict` of a comparison's two
    intervals, the one rule of every results page
    (`intervals.VERDICT_RULE`). No interval gets a verdict of its own: with
    one per interval, a page could call a difference that only one of them
    supports (issue 65).

Accuracies are fractions in [0, 1], as in the runs' results.
"""

import collections
from collections.abc import Mapping
from typing import Any

import numpy as np

from tff_nlp.metrics import continual
from tff_nlp.metrics import intervals

# Per-run numbers averaged over seeds (`experiments.fcl.summarize`'s).
MEAN_KEYS = ('accuracy', 'macro_f1', 'forgetting', 'backward_transfer',
             'bytes_down_per_client', 'bytes_up_per_client',
             'bytes_down_per_client_round', 'bytes_up_per_client_round',
             'bytes_up_round_last_task', 'adaptive_nonzero_per_client_round',
             'non_finite_clients', 'seconds', 'word_vector_coverage')


def _matrix(values) -> np.ndarray:
  return np.array(values, dtype=np.float64)  # None (not learned) -> NaN


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
  acc = intervals.seed_interval([r['accuracy'] for r in runs])
  summary = collections.OrderedDict(
      seeds=collections.OrderedDict((str(s), r) for s, r in per_seed.items()),
      acc=acc.estimate, acc_ci95=acc.bounds())
  for key in MEAN_KEYS:
    if all(key in r for r in runs):
      summary[key] = float(np.mean([r[key] for r in runs]))
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


def verdict(comparison: Mapping[str, Any], names: tuple[str, str]) -> str:
  """The verdict of a comparison (`compare`'s, or read from a report).

  Args:
    comparison: Its `seed_ci95` ([low, high], None with one seed) and
      `pair_bootstrap_ci95`.
    names: (A, B) for the verdict.

  Returns:
    `intervals.comparison_verdict` of the two intervals: f'{A} higher' or
    f'{B} higher' only when both exclude 0 on that side.
  """
  return intervals.comparison_verdict(comparison.get('seed_ci95'),
                                      comparison['pair_bootstrap_ci95'],
                                      *names)


def compare(a: Mapping[int, Mapping[str, Any]],
            b: Mapping[int, Mapping[str, Any]], *, names: tuple[str, str],
            num_replicates: int = 2000, seed: int = 0
            ) -> collections.OrderedDict:
  """ACC of A - B over the seeds both ran, with its two intervals.

  Args:
    a: seed -> method A's run results.
    b: seed -> method B's, on the same tasks per seed.
    names: (A, B) for the verdicts.
    num_replicates: Replicates of the pair bootstrap.
    seed: Its seed.

  Returns:
    `seeds` (the common seeds), `difference` (mean over seeds of ACC(A) -
    ACC(B)), `seed_ci95` (None with one seed), `pair_bootstrap_ci95`,
    `verdict` (`verdict`, from both intervals) and `per_seed` differences.

  Raises:
    ValueError: If the methods share no seed.
  """
  common = [s for s in a if s in b]
  if not common:
    raise ValueError(f'{names[0]} and {names[1]} share no seed.')
  per_seed = [a[s]['accuracy'] - b[s]['accuracy'] for s in common]
  by_seed = intervals.seed_interval(per_seed)
  by_pair = continual.pair_bootstrap_difference(
      [continual.final_accuracies(_matrix(a[s]['accuracy_matrix']))
       for s in common],
      [continual.final_accuracies(_matrix(b[s]['accuracy_matrix']))
       for s in common], num_replicates=num_replicates, seed=seed)
  comparison = collections.OrderedDict(
      seeds=list(common), difference=by_seed.estimate,
      seed_ci95=by_seed.bounds(),
      pair_bootstrap_ci95=[by_pair.low, by_pair.high])
  comparison['verdict'] = verdict(comparison, names)
  comparison['per_seed'] = per_seed
  return comparison
