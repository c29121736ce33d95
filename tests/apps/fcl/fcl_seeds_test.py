"""FCL results over seeds: means, intervals and paired differences."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.metrics import continual
from apps.fcl import seeds as fcl_seeds
from tff_nlp.metrics import intervals

_NAN = None  # A task not learned yet, as results.json writes it.


def _run(final, seconds=10.0):
  """A 1-client, 2-task run whose final accuracies are `final`."""
  matrix = [[[0.5, _NAN], final]]
  return {'accuracy': float(np.mean(final)), 'macro_f1': 0.5,
          'forgetting': 0.0, 'backward_transfer': 0.0, 'seconds': seconds,
          'accuracy_matrix': matrix, 'macro_f1_matrix': matrix,
          'kb_entries_per_client': [0.0, 1.0],
          'bytes_per_client_by_part': {'up/adaptive': 8.0}}


class FclSeedsExecutionTest(tf.test.TestCase):

  def test_summarize_method_by_hand(self):
    # ACC per seed 0.6, 0.7, 0.8: mean 0.7, s = 0.1, t_{2,0.975} = 4.3027,
    # so 0.7 ± 4.3027 · 0.1 / sqrt(3) = 0.7 ± 0.2484.
    per_seed = {1: _run([0.5, 0.7], 10), 2: _run([0.6, 0.8], 20),
                3: _run([0.7, 0.9], 30)}
    summary = fcl_seeds.summarize_method(per_seed)
    self.assertEqual(list(summary['seeds']), ['1', '2', '3'])
    self.assertAlmostEqual(summary['acc'], 0.7)
    self.assertAllClose(summary['acc_ci95'], [0.7 - 0.24841, 0.7 + 0.24841],
                        atol=1e-5)
    self.assertAlmostEqual(summary['seconds'], 20.0)
    mean = summary['accuracy_matrix'][0]
    self.assertIsNone(mean[0][1])  # not learned yet
    self.assertAllClose([mean[0][0], *mean[1]], [0.5, 0.6, 0.8])
    self.assertEqual(summary['bytes_per_client_by_part'],
                     {'up/adaptive': 8.0})
    one = fcl_seeds.summarize_method({1: _run([0.5, 0.7])})
    self.assertIsNone(one['acc_ci95'])

  def test_compare_pairs_the_seeds_both_ran(self):
    a = {1: _run([0.6, 0.8]), 2: _run([0.7, 0.9]), 3: _run([0.5, 0.5])}
    b = {1: _run([0.5, 0.5]), 2: _run([0.5, 0.7])}
    c = fcl_seeds.compare(a, b, names=('A', 'B'), seed=0)
    self.assertEqual(c['seeds'], [1, 2])
    # Per-seed differences 0.2 and 0.2: no spread, so [0.2, 0.2].
    self.assertAllClose(c['per_seed'], [0.2, 0.2])
    self.assertAlmostEqual(c['difference'], 0.2)
    self.assertAllClose(c['seed_ci95'], [0.2, 0.2])
    want = continual.pair_bootstrap_difference(
        [[0.6, 0.8], [0.7, 0.9]], [[0.5, 0.5], [0.5, 0.7]], seed=0)
    self.assertAllClose(c['pair_bootstrap_ci95'], [want.low, want.high])
    # Pair differences 0.1 to 0.3: both intervals exclude 0, so it is called.
    self.assertGreater(want.low, 0.0)
    self.assertEqual(c['verdict'], 'A higher')
    # One verdict, none per interval.
    self.assertNotIn('seed_verdict', c)
    self.assertNotIn('pair_bootstrap_verdict', c)
    with self.assertRaisesRegex(ValueError, 'share no seed'):
      fcl_seeds.compare({1: _run([0.5, 0.5])}, {2: _run([0.5, 0.5])},
                        names=('A', 'B'))

  def test_compare_calls_nothing_the_pairs_do_not_support(self):
    # Every seed: pair differences +0.5 and -0.3, mean +0.1. The seeds agree
    # exactly (interval [0.1, 0.1]), but resampling the two pairs gives
    # means from -0.3 to +0.5: the pairs' interval holds 0, so no verdict.
    a = {s: _run([0.9, 0.3]) for s in (0, 1)}
    b = {s: _run([0.4, 0.6]) for s in (0, 1)}
    c = fcl_seeds.compare(a, b, names=('SIT', 'FedSeIT'), seed=0)
    self.assertAllClose(c['seed_ci95'], [0.1, 0.1])
    self.assertLess(c['pair_bootstrap_ci95'][0], 0.0)
    self.assertGreater(c['pair_bootstrap_ci95'][1], 0.0)
    self.assertEqual(c['verdict'], 'no difference')

  def test_compare_with_one_seed_calls_no_difference(self):
    c = fcl_seeds.compare({0: _run([0.9, 0.9])}, {0: _run([0.5, 0.5])},
                          names=('A', 'B'), seed=0)
    self.assertIsNone(c['seed_ci95'])
    self.assertAllClose(c['pair_bootstrap_ci95'], [0.4, 0.4])
    self.assertEqual(c['verdict'], 'undetermined')


class VerdictTest(tf.test.TestCase, parameterized.TestCase):
  """`fcl_seeds.verdict`: the one rule on hand-built intervals."""

  @parameterized.named_parameters(
      # Issue 65: SIT - FedSeIT on random-task TREC-6, the seed interval
      # excludes 0 and the (client, task) pairs' does not.
      ('issue_65_sit_random_trec6', [-0.0060, -0.0037], [-0.0100, 0.0004],
       'no difference'),
      # The reverse (FedSeIT - FedWeIT on R8 of the main setting).
      ('pairs_only', [-0.0036, 0.0270], [0.0003, 0.0225], 'no difference'),
      ('both_exclude_0_above', [0.0190, 0.0462], [0.0206, 0.0448],
       'SIT higher'),
      ('both_exclude_0_below', [-0.0060, -0.0037], [-0.0100, -0.0004],
       'FedSeIT higher'),
      ('opposite_sides', [0.01, 0.02], [-0.02, -0.01], 'no difference'),
      ('one_seed_pairs_exclude_0', None, [0.01, 0.02], 'undetermined'),
      ('one_seed_pairs_hold_0', None, [-0.01, 0.02], 'no difference'),
  )
  def test_verdict(self, seed_ci, pair_ci, expected):
    comparison = {'seed_ci95': seed_ci, 'pair_bootstrap_ci95': pair_ci}
    self.assertEqual(fcl_seeds.verdict(comparison, ('SIT', 'FedSeIT')),
                     expected)
    self.assertEqual(
        expected, intervals.comparison_verdict(seed_ci, pair_ci, 'SIT',
                                               'FedSeIT'))


if __name__ == '__main__':
  tf.test.main()
