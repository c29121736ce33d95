"""Paired comparison of two text-to-SQL runs on the full test splits.

Reads the test predictions of two finished runs (`<run>/predictions/
<client>.jsonl`, or `.jsonl.gz` as archived, one seed each, e.g. two centralized runs that differ in one
flag), scores exact match, and prints MacroAvg/MicroAvg/per-client exact
match of run A with 95% bootstrap intervals over test examples, and the
paired differences A - B and A - template retrieval (the no-learning
baseline, computed here on the same test examples), with
`tff_nlp.metrics.intervals`. `--output` also writes them as JSON.

  .venv/bin/python bench/text2sql_compare_runs.py \
      docs/results/text2sql/centralized_retrieved_sql_seed0 \
      docs/results/text2sql/centralized_seed0 \
      --output=docs/results/text2sql/centralized_retrieved_sql_seed0/intervals.json
"""

import gzip
import json
import os

from absl import app
from absl import flags
import numpy as np

from tff_nlp import errors
from tff_nlp.baselines import template_retrieval
from tff_nlp.data import text2sql
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql as text2sql_metrics

_OUTPUT = flags.DEFINE_string('output', None, 'Also write the intervals here.')


def _outcomes(run_dir: str) -> dict[str, np.ndarray]:
  outcomes = {}
  for client in text2sql.CLIENTS:
    path = os.path.join(run_dir, 'predictions', f'{client}.jsonl')
    if not os.path.exists(path) and os.path.exists(path + '.gz'):
      path += '.gz'  # An archived run (`text2sql_benchmark.archive_run`).
    try:
      with (gzip.open(path, 'rt', encoding='utf-8') if path.endswith('.gz')
            else open(path, encoding='utf-8')) as f:
        lines = [json.loads(line) for line in f]
    except (OSError, ValueError) as e:
      raise errors.InputError(f'{path}: {e}') from None
    outcomes[client] = np.array(
        [[text2sql_metrics.exact_match(line['prediction'], line['gold'])
          for line in lines]], np.int32)
  return outcomes


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
  a, b = _outcomes(argv[1]), _outcomes(argv[2])
  pairs = template_retrieval.predict_clients(text2sql.load_clients(),
                                             split='test')
  retrieval = {c: np.array([[text2sql_metrics.exact_match(p, g)
                             for p, g in pairs[c]]], np.int32)
               for c in text2sql.CLIENTS}
  results = {
      'a': intervals.bootstrap_accuracy(a),
      'a_minus_b': intervals.bootstrap_difference(a, b),
      'a_minus_retrieval': intervals.bootstrap_difference(a, retrieval),
  }
  for name, result in results.items():
    print(_line(name, result))
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w', encoding='utf-8') as f:
      json.dump({'a': argv[1], 'b': argv[2],
                 **{k: v.to_json() for k, v in results.items()}}, f, indent=1)


if __name__ == '__main__':
  app.run(main)
