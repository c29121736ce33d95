"""The paired comparison binary as a user runs it: `python -m`, several seeds.

Runs written by hand (`text2sql_fake_runs.write_run`) on the real full test
splits of two small clients, so every number below is derived from the
outcomes chosen here. Each case pays TensorFlow's import in a subprocess.
"""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tests.apps.text2sql import text2sql_fake_runs
from tff_nlp.metrics import text2sql as text2sql_metrics

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
_CLIENTS = ('restaurants', 'imdb')  # 74 and 26 test examples.
# Correct test examples per seed (restaurants, imdb): A and B.
_CORRECT_A = [(40, 13), (37, 20), (45, 10)]
_CORRECT_B = [(30, 13), (37, 10), (44, 12)]
# t_{2, 0.975}: the Student-t quantile of three seeds' interval.
_T_2 = 4.302653


def _first(k, n):
  return [1] * k + [0] * (n - k)


def _macro(correct):
  return (correct[0] / 74 + correct[1] / 26) / 2


class CompareRunsBinaryExecutionTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = self.create_tempdir().full_path
    self.real = text2sql_fake_runs.real_test_examples(_CLIENTS)
    self.assertEqual([len(self.real[c]) for c in _CLIENTS], [74, 26])

  def _runs(self, name, correct, seeds=(0, 1, 2), lowercase_sql=False):
    examples = self.real
    if lowercase_sql:  # What such a run records: lower-cased gold SQL.
      examples = {c: [(source, text2sql_metrics.lowercase_sql(gold))
                      for source, gold in pairs]
                  for c, pairs in self.real.items()}
    dirs = []
    for seed, counts in zip(seeds, correct):
      run_dir = os.path.join(self.tmp, f'{name}-{seed}')
      text2sql_fake_runs.write_run(
          run_dir, seed,
          {c: _first(k, len(self.real[c])) for c, k in zip(_CLIENTS, counts)},
          examples, data={'lowercase_sql': True} if lowercase_sql else None)
      dirs.append(run_dir)
    return ','.join(dirs)

  def _compare(self, a, b, *flags):
    return subprocess.run(
        [sys.executable, '-m', 'apps.text2sql.bin.text2sql_compare_runs', a, b,
         *flags],
        cwd=_REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
        capture_output=True, text=True, timeout=600, check=False)

  def test_three_seeds_paired_by_position(self):
    output = os.path.join(self.tmp, 'intervals.json')
    result = self._compare(self._runs('a', _CORRECT_A),
                           self._runs('b', _CORRECT_B), '--seeds=0,1,2',
                           f'--output={output}')
    self.assertEqual(result.returncode, 0, result.stderr)
    with open(output) as f:
      report = json.load(f)
    # Per-seed MacroAvg differences (restaurants /74, imdb /26, halved):
    # seed 0: (10/74 + 0/26)/2 = 0.067568; seed 1: (0 + 10/26)/2 = 0.192308;
    # seed 2: (1/74 - 2/26)/2 = -0.031705. Mean 0.076057, sd 0.112266.
    diffs = [_macro(a) - _macro(b) for a, b in zip(_CORRECT_A, _CORRECT_B)]
    self.assertAllClose(diffs, [0.067568, 0.192308, -0.031705], atol=1e-6)
    mean, sd = np.mean(diffs), np.std(diffs, ddof=1)
    by_seed = report['a_minus_b_macro_by_seed']
    self.assertAllClose(
        [by_seed['low'], by_seed['estimate'], by_seed['high']],
        [mean - _T_2 * sd / np.sqrt(3), mean, mean + _T_2 * sd / np.sqrt(3)],
        atol=1e-5)
    # The bootstrap's point estimates are the seed-averaged differences.
    for name in ('a_minus_b', 'a_minus_b_with_seeds'):
      self.assertAlmostEqual(report[name]['macro_avg']['estimate'], mean,
                             places=6)
      self.assertAlmostEqual(
          report[name]['per_client']['restaurants']['estimate'],
          (10 + 0 + 1) / 3 / 74, places=6)
      low, high = (report[name]['macro_avg'][k] for k in ('low', 'high'))
      self.assertLess(low, mean)
      self.assertGreater(high, mean)
    # Resampling seeds too widens the interval here: the per-seed
    # differences disagree in sign.
    with_seeds = report['a_minus_b_with_seeds']['macro_avg']
    without = report['a_minus_b']['macro_avg']
    self.assertGreater(with_seeds['high'] - with_seeds['low'],
                       without['high'] - without['low'])
    # A's MacroAvg averaged over seeds: restaurants 122/222, imdb 43/78.
    self.assertAlmostEqual(report['a']['macro_avg']['estimate'],
                           (122 / 222 + 43 / 78) / 2, places=6)
    self.assertIn('a_minus_b_macro_by_seed: 7.6 [', result.stdout)

  def test_lower_cased_runs_are_compared_with_the_baseline_lower_cased(
      self):
    output = os.path.join(self.tmp, 'intervals.json')
    result = self._compare(
        self._runs('a', _CORRECT_A[:1], seeds=(0,), lowercase_sql=True),
        self._runs('b', _CORRECT_B[:1], seeds=(0,), lowercase_sql=True),
        '--seeds=0,0', f'--output={output}')
    self.assertEqual(result.returncode, 0, result.stderr)
    with open(output) as f:
      report = json.load(f)
    # Template retrieval gets restaurants 72/74 and imdb 6/26 either way
    # (its module docstring); A gets 40/74 and 13/26.
    self.assertAlmostEqual(
        report['a_minus_retrieval']['macro_avg']['estimate'],
        _macro(_CORRECT_A[0]) - _macro((72, 6)), places=6)

  def test_unpaired_lists_are_refused(self):
    result = self._compare(self._runs('a', _CORRECT_A),
                           self._runs('b', _CORRECT_B[:2]), '--seeds=0,1,2')
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('3 runs A, 2 runs B and 3 --seeds', result.stderr)

  def test_a_run_of_another_seed_is_named(self):
    a = self._runs('a', _CORRECT_A, seeds=(0, 1, 5))
    result = self._compare(a, self._runs('b', _CORRECT_B), '--seeds=0,1,2')
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('a-5', result.stderr)
    self.assertIn('a run of seed 5, expected seed 2', result.stderr)


if __name__ == '__main__':
  tf.test.main()
