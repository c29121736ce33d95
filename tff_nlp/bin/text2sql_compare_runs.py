"""Paired comparison of two text-to-SQL runs on the full test splits.

Reads two finished runs (one seed each, e.g. two centralized runs that
differ in one flag; archived runs too) with `text2sql_seed_runs.read_run`,
which checks them, and prints MacroAvg/MicroAvg/per-client exact match of
run A with 95% bootstrap intervals over test examples, and the paired
differences A - B and A - template retrieval (the no-learning baseline, on
the same test examples: `text2sql_seed_runs.baseline_runs`), with
`tff_nlp.metrics.intervals`. `--output` also writes them as JSON.

  .venv/bin/python -m tff_nlp.bin.text2sql_compare_runs \
      docs/results/text2sql/centralized_retrieved_sql_seed0 \
      docs/results/text2sql/centralized_seed0 \
      --output=docs/results/text2sql/centralized_retrieved_sql_seed0/intervals.json
"""

import json

from absl import app
from absl import flags

from tff_nlp.experiments import text2sql_seed_runs
from tff_nlp.metrics import intervals
from tff_nlp.tasks import text2sql

_OUTPUT = flags.DEFINE_string('output', None, 'Also write the intervals here.')
_SEEDS = flags.DEFINE_list('seeds', ['0', '0'],
                           'The training seeds of runs A and B (checked).')


def _outcomes(run: text2sql_seed_runs.SeedRun) -> dict:
  """Client -> int [1, num_examples] exact match, as `intervals` takes."""
  return {c: v.astype('int32')[None] for c, v in run.outcomes.items()}


def _line(name: str, result: intervals.AccuracyIntervals) -> str:
  def cell(interval):
    return '%.1f [%.1f, %.1f]' % tuple(100 * v for v in interval)
  clients = ' | '.join(f'{c} {cell(v)}'
                       for c, v in result.per_client.items())
  return (f'{name}: MacroAvg {cell(result.macro)}, MicroAvg '
          f'{cell(result.micro)}\n  {clients}')


def main(argv):
  if len(argv) != 3:
    raise app.UsageError('Give two run directories: A and B.')
  seed_a, seed_b = (int(seed) for seed in _SEEDS.value)
  run_a = text2sql_seed_runs.read_run(argv[1], seed_a)
  run_b = text2sql_seed_runs.read_run(argv[2], seed_b)
  baseline = text2sql_seed_runs.template_retrieval_predictions(
      text2sql.DataConfig(clients=tuple(run_a.outcomes)), data_dir=None)
  ((retrieval, _),) = text2sql_seed_runs.baseline_runs(baseline,
                                                       {seed_a: run_a})
  a = _outcomes(run_a)
  results = {
      'a': intervals.bootstrap_accuracy(a),
      'a_minus_b': intervals.bootstrap_difference(a, _outcomes(run_b)),
      'a_minus_retrieval': intervals.bootstrap_difference(
          a, _outcomes(retrieval)),
  }
  for name, result in results.items():
    print(_line(name, result))
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w', encoding='utf-8') as f:
      json.dump({'a': argv[1], 'b': argv[2],
                 **{k: v.to_json() for k, v in results.items()}}, f, indent=1)


if __name__ == '__main__':
  app.run(main)
