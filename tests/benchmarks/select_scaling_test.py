"""Tests of the federated_select scaling benchmark on tiny settings of TREC-6.

Times are never bounded here; what is checked is every number with an
independent reference: the bytes, hand-computed from M, T and V.
"""

import tensorflow as tf

from tff_nlp import runtime
from tff_nlp.bin import select_scaling


class SelectScalingExecutionTest(tf.test.TestCase):

  def test_bytes_follow_m_and_v_and_both_timings_are_recorded(self):
    with runtime.local_cpp_context() as context:
      rows = select_scaling.run(
          data_dir=None, dataset='trec6', vocab_sizes=[50, 500], max_keys=4,
          num_clients=3, batch_size=16, learning_rate=1.0, repeats=1, seed=0,
          worker=context.worker)
    self.assertEqual([r['num_rows'] for r in rows], [50, 500])
    for r in rows:
      tags = r['num_tags']
      # Down: the M selected rows of T float32.
      self.assertEqual(r['sparse_bytes_down'], 4 * tags * 4)
      for key in ('sparse_round_seconds', 'dense_round_seconds',
                  'sparse_resident_round_seconds',
                  'dense_resident_round_seconds'):
        self.assertGreater(r[key], 0)
    # Dense down is the whole [V, T] (plus the same small broadcast at
    # every V): 450 more rows of T float32 at V = 500.
    self.assertEqual(rows[1]['dense_bytes_down'] - rows[0]['dense_bytes_down'],
                     450 * rows[0]['num_tags'] * 4)
    # Sparse traffic does not depend on V.
    self.assertEqual(rows[0]['sparse_bytes_down'], rows[1]['sparse_bytes_down'])
    self.assertEqual(rows[0]['sparse_bytes_up'], rows[1]['sparse_bytes_up'])
    table = select_scaling.markdown(rows, max_keys=4, num_clients=3)
    self.assertIn('| 500 |', table)
    self.assertIn('state in runtime', table)


if __name__ == '__main__':
  tf.test.main()
