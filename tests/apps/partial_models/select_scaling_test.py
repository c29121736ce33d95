"""Tests of the federated_select scaling benchmark on tiny settings of TREC-6.

Times are never bounded here; what is checked is every number with an
independent reference: the bytes, hand-computed from M, T and V.
"""

import tensorflow as tf

from tff_nlp import runtime
from apps.partial_models.bin import select_scaling


class SelectScalingExecutionTest(tf.test.TestCase):

  def test_bytes_follow_m_and_v_and_both_timings_are_recorded(self):
    with runtime.local_cpp_context() as context:
      rows = select_scaling.run(
          data_dir=None, dataset='trec6', vocab_sizes=[50, 500], max_keys=4,
          blocks=[(2, 2)], num_clients=3, batch_size=16, learning_rate=1.0, repeats=1, seed=0,
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
    for r in rows:
      rows_keys, blocks = r['sparse_variants']
      # Keys of one row: M calls, M rows down.
      self.assertEqual((rows_keys['select_calls_per_client'],
                        rows_keys['rows_down_per_client']), (4, 4))
      # Two keys of two rows: 2 calls, the same 4 rows down, the same bytes
      # down (2 x [2, T] float32 values, and 2 int32 keys up, not 4).
      self.assertEqual((blocks['select_calls_per_client'],
                        blocks['rows_down_per_client']), (2, 4))
      self.assertEqual(blocks['bytes_down'], r['sparse_bytes_down'])
      # Up, against keys of one row: an int64 id and T float32 per row
      # uploaded, and 2 int32 keys instead of 4 (the rest is the same).
      self.assertAlmostEqual(
          blocks['bytes_up'] - rows_keys['bytes_up'],
          (blocks['rows_uploaded_per_client']
           - rows_keys['rows_uploaded_per_client']) * (8 + 4 * r['num_tags'])
          - 2 * 4, places=3)
      for v in (rows_keys, blocks):
        self.assertBetween(v['entries_kept'], 0.0, 1.0)
        # Each variant's rounds are paired with dense rounds: a ratio with
        # its interval around it.
        self.assertGreater(v['paired_dense_round_seconds'], 0)
        low, high = v['dense_over_sparse_ci95']
        self.assertBetween(v['dense_over_sparse'], low, high)
        self.assertGreater(low, 0)
        self.assertGreater(v['select_seconds_per_client'], 0)
        # A client uploads at most the rows it downloaded.
        self.assertLessEqual(v['rows_uploaded_per_client'], 4)
    # Sparse traffic does not depend on V.
    self.assertEqual(rows[0]['sparse_bytes_down'], rows[1]['sparse_bytes_down'])
    self.assertEqual(rows[0]['sparse_bytes_up'], rows[1]['sparse_bytes_up'])
    table = select_scaling.markdown(rows, max_keys=4, num_clients=3)
    self.assertIn('| 500 |', table)
    self.assertIn('state in runtime', table)
    self.assertIn('| 500 | 2 × 2 |', table)

  def test_bytes_are_reported_in_kib(self):
    # The committed run's numbers (docs/results/federated_select.md): dense
    # at V = 10^6 is [10^6, 7] float32 = 28,000,000 bytes = 27,343.75 KiB;
    # sparse down is 100 rows of 7 float32 = 2,800 bytes = 2.73 KiB.
    self.assertEqual(select_scaling._kib(28_000_000), '27,343.8')
    self.assertEqual(select_scaling._kib(2_800), '2.7')
    variant = dict(max_keys=2, block_size=1, rows_down_per_client=2,
                   rows_uploaded_per_client=2, bytes_down=2_048,
                   bytes_up=3_072, entries_kept=0.5,
                   select_seconds_per_client=0.001,
                   resident_round_seconds=0.1,
                   paired_dense_round_seconds=0.2, dense_over_sparse=2.0,
                   dense_over_sparse_ci95=[1.5, 2.5])
    row = dict(num_rows=10, num_tags=7, sparse_bytes_down=2_048,
               sparse_bytes_up=3_072, dense_bytes_down=10_240,
               dense_bytes_up=10_240, sparse_round_seconds=0.1,
               dense_round_seconds=0.2, sparse_resident_round_seconds=0.1,
               dense_resident_round_seconds=0.2,
               sparse_server_aggregate_seconds=0.01,
               sparse_server_apply_seconds=0.01,
               keys_once_per_client_seconds=0.1, sparse_variants=[variant])
    table = select_scaling.markdown([row], max_keys=2, num_clients=3)
    self.assertNotIn('KB', table)
    self.assertIn('| V (rows) | sparse KiB down | sparse KiB up | '
                  'dense KiB down | dense KiB up |', table)
    # 2,048 B = 2.0 KiB, 3,072 B = 3.0 KiB, 10,240 B = 10.0 KiB.
    self.assertIn('| 10 | 2.0 | 3.0 | 10.0 | 10.0 | 1.000× | 1.0× |', table)
    self.assertIn('| rows down | rows up | KiB down | KiB up |', table)
    self.assertIn('| 10 | 2 × 1 | 2 | 2 | 2.0 | 3.0 | 0.500 |', table)

  def test_bad_blocks_flag_is_named(self):
    self.assertEqual(select_scaling._parse_blocks(['25x4', '10x16']),
                     [(25, 4), (10, 16)])
    with self.assertRaisesRegex(ValueError, "--blocks: .*got '25-4'"):
      select_scaling._parse_blocks(['25-4'])


if __name__ == '__main__':
  tf.test.main()
