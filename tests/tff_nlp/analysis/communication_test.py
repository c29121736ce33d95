"""Tests of per-client round traffic read from computation types."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import analysis
from apps.partial_models import tag_process as sparse_tags

# Metric sums each client uploads in a sparse round: loss_sum (float32) and
# seven int32 counts.
_SPARSE_STATS_BYTES = 8 * 4


class TypeBytesExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      (tff.TensorType(np.float32, [13, 4]), 0, 13 * 4 * 4),
      (tff.TensorType(np.int64, []), 0, 8),
      (tff.StructType([('a', tff.TensorType(np.int32, [3])),
                       ('b', tff.TensorType(np.float64, [2]))]), 0, 12 + 16),
      # IndexedSlices: 5 rows of an int64 id and 4 float32 values.
      (tff.StructType([('indices', tff.TensorType(np.int64, [None])),
                       ('values', tff.TensorType(np.float32, [None, 4]))]),
       5, 5 * (8 + 16)),
      (tff.FederatedType(tff.TensorType(np.int32, [2]), tff.CLIENTS), 0, 8),
  )
  def test_type_bytes(self, type_spec, rows, expected):
    self.assertEqual(analysis.type_bytes(type_spec, rows=rows), expected)

  @parameterized.parameters(
      (tff.SequenceType(tff.TensorType(np.float32)), 'only tensors'),
      (tff.TensorType(np.float32, [2, None]), 'only the leading dimension'),
  )
  def test_type_bytes_rejects(self, type_spec, match):
    with self.assertRaisesRegex(ValueError, match):
      analysis.type_bytes(type_spec)


class RoundCommunicationComputationTest(tf.test.TestCase,
                                        parameterized.TestCase):

  @parameterized.parameters(13, 100_000)
  def test_sparse_tag_round_traffic_is_flat_in_the_vocabulary(self,
                                                              num_words):
    process = sparse_tags.build_sparse_tag_process(
        num_words=num_words, num_tags=4, max_keys=3, client_learning_rate=0.1)
    traffic = analysis.round_communication(process.next)
    # Down: M = 3 selected rows of 4 float32. Up: 3 int32 keys, then per
    # uploaded row an int64 id and 4 float32 values, plus the metric sums.
    self.assertEqual(traffic.bytes_down(), 3 * 4 * 4)
    self.assertEqual(traffic.bytes_up(rows=2),
                     3 * 4 + 2 * (8 + 16) + _SPARSE_STATS_BYTES)
    self.assertTrue(traffic.has_variable_rows)
    self.assertEqual(
        traffic.round_metrics(num_clients=2, rows_received=4),
        collections.OrderedDict(bytes_down_per_client=48.0,
                                bytes_up_per_client=12 + 48 + 32))

  def test_dense_tag_round_traffic(self):
    process = sparse_tags.build_dense_tag_process(
        num_words=13, num_tags=4, client_learning_rate=0.1)
    traffic = analysis.round_communication(process.next)
    downs = [str(t.value_type) for t in traffic.transfers
             if t.direction == 'down']
    # The model and the client learning rate are broadcast.
    self.assertEqual(downs, ['<trainable=<float32[13,4]>,non_trainable=<>>',
                             '<learning_rate=float32>'])
    self.assertEqual(traffic.bytes_down(), 13 * 4 * 4 + 4)
    # Up: the weighted update (208 B) and its weight (4 B), the weighting
    # statistics (9 float32), the weight's min and max, the model's metric
    # sums (loss sum and count as two float32, examples and batches as int64).
    self.assertEqual(traffic.bytes_up(), 208 + 4 + 36 + 4 + 4 + (8 + 16))
    self.assertFalse(traffic.has_variable_rows)
    self.assertEqual(
        traffic.round_metrics(num_clients=3)['bytes_up_per_client'], 280.0)

  def test_round_metrics_need_rows_for_variable_uploads(self):
    process = sparse_tags.build_sparse_tag_process(
        num_words=13, num_tags=4, max_keys=3, client_learning_rate=0.1)
    traffic = analysis.round_communication(process.next)
    with self.assertRaisesRegex(ValueError, 'rows_received'):
      traffic.round_metrics(num_clients=2)


if __name__ == '__main__':
  tf.test.main()
