"""FCL results over seeds: means, intervals and paired differences."""

import numpy as np
import tensorflow as tf

from tff_nlp.metrics import continual
from tff_nlp.metrics import fcl_seeds
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
    self.assertEqual(c['seed_verdict'], 'A higher')
    want = continual.pair_bootstrap_difference(
        [[0.6, 0.8], [0.7, 0.9]], [[0.5, 0.5], [0.5, 0.7]], seed=0)
    self.assertAllClose(c['pair_bootstrap_ci95'], [want.low, want.high])
    self.assertEqual(c['pair_bootstrap_verdict'],
                     intervals.verdict(want, 'A', 'B'))
    with self.assertRaisesRegex(ValueError, 'share no seed'):
      fcl_seeds.compare({1: _run([0.5, 0.5])}, {2: _run([0.5, 0.5])},
                        names=('A', 'B'))


if __name__ == '__main__':
  tf.test.main()
