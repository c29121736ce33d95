r"""Paired comparison of two text-to-SQL runs on the full test splits.

Reads two finished runs (one seed each, e.g. two centralized runs that
differ in one flag; archived runs too) with `text2sql_seed_runs.read_run`,
which checks them, and prints MacroAvg/MicroAvg/per-client exact match of
run A with 95% bootstrap intervals over test examples, and the paired
differences A - B and A - template retrieval (the no-learning baseline, on
the same test examples: `text2sql_seed_runs.baseline_runs`), with
`tff_nlp.metrics.intervals`. `--output` also writes them as JSON.

  .venv/bin/python -m apps.text2sql.bin.text2sql_compare_runs \
      records/text2sql/centralized_retrieved_sql_seed0 \
      records/text2sql/centralized_seed0 \
      --output=records/text2sql/centralized_retrieved_sql_seed0/intervals.json

Several seeds: A and B as comma-separated run directories, paired by
position, and `--seeds` their seeds in that order (the same for A and B).
The report then also has A - B with seeds resampled too
(`a_minus_b_with_seeds`) and the Student-t interval of the per-seed MacroAvg
differences (`a_minus_b_macro_by_seed`).
"""

import json

from absl import app
from absl import flags
import numpy as np

from apps.text2sql import seed_runs as text2sql_seed_runs
from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals
from apps.text2sql import task as text2sql

_OUTPUT = flags.DEFINE_string('output', None, 'Also write the intervals here.')
_SEEDS = flags.DEFINE_list(
    'seeds', ['0', '0'],
    'The training seeds of runs A and B (checked); with comma-separated '
    'lists of runs, the seeds of both lists\' runs, in order.')


def _outcomes(run: text2sql_seed_runs.SeedRun) -> dict:
  """Client -> int [1, num_examples] exact match, as `intervals` takes."""
  return {c: v.astype('int32')[None] for c, v in run.outcomes.items()}


def _line(name: str, result: bootstrap_lib.AccuracyIntervals) -> str:
  def cell(interval):
    return '%.1f [%.1f, %.1f]' % tuple(100 * v for v in interval)
  clients = ' | '.join(f'{c} {cell(v)}'
                       for c, v in result.per_client.items())
  return (f'{name}: MacroAvg {cell(result.macro)}, MicroAvg '
          f'{cell(result.micro)}\n  {clients}')


def _stacked(runs) -> dict:
  """Client -> int [num_seeds, num_examples] of paired runs."""
  return {c: np.stack([r.outcomes[c] for r in runs]).astype('int32')
          for c in runs[0].outcomes}


def _read_runs(argv) -> tuple[list, list]:
  """The runs A and B: one each, or paired lists of one per seed."""
  dirs_a, dirs_b = argv[1].split(','), argv[2].split(',')
  seeds = [int(seed) for seed in _SEEDS.value]
  if len(dirs_a) == len(dirs_b) == 1:
    if len(seeds) != 2:
      raise app.UsageError('--seeds: give the seeds of run A and of run B.')
    return ([text2sql_seed_runs.read_run(dirs_a[0], seeds[0])],
            [text2sql_seed_runs.read_run(dirs_b[0], seeds[1])])
  if not len(dirs_a) == len(dirs_b) == len(seeds):
    raise app.UsageError(
        f'{len(dirs_a)} runs A, {len(dirs_b)} runs B and {len(seeds)} '
        '--seeds: give one run of A and of B per seed, paired by position.')
  return ([text2sql_seed_runs.read_run(d, s) for d, s in zip(dirs_a, seeds)],
          [text2sql_seed_runs.read_run(d, s) for d, s in zip(dirs_b, seeds)])


def main(argv):
  if len(argv) != 3:
    raise app.UsageError('Give two run directories (or lists): A and B.')
  runs_a, runs_b = _read_runs(argv)
  # The baseline is scored against run A's gold SQL, lower-cased with it.
  baseline = text2sql_seed_runs.template_retrieval_predictions(
      text2sql.DataConfig(clients=tuple(runs_a[0].outcomes),
                          lowercase_sql=runs_a[0].lowercase_sql),
      data_dir=None)
  ((retrieval, _),) = text2sql_seed_runs.baseline_runs(
      baseline, {runs_a[0].seed: runs_a[0]})
  a, b = _stacked(runs_a), _stacked(runs_b)
  results = {
      'a': bootstrap_lib.bootstrap_accuracy(a),
      'a_minus_b': bootstrap_lib.bootstrap_difference(a, b),
      'a_minus_retrieval': bootstrap_lib.bootstrap_difference(
          a, _outcomes(retrieval)),
  }
  if len(runs_a) > 1:
    results['a_minus_b_with_seeds'] = bootstrap_lib.bootstrap_difference(
        a, b, resample_seeds=True)
  for name, result in results.items():
    print(_line(name, result))
  report = {'a': argv[1], 'b': argv[2],
            **{k: v.to_json() for k, v in results.items()}}
  if len(runs_a) > 1:
    by_seed = intervals.seed_interval(
        [ra.exact_match.macro - rb.exact_match.macro
         for ra, rb in zip(runs_a, runs_b)])
    print('a_minus_b_macro_by_seed: %.1f [%.1f, %.1f]'
          % tuple(100 * v for v in by_seed))
    report['a_minus_b_macro_by_seed'] = by_seed.to_json()
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w', encoding='utf-8') as f:
      json.dump(report, f, indent=1)


if __name__ == '__main__':
  app.run(main)
