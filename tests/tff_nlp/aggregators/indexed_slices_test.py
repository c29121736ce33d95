"""Tests of the IndexedSlices sum and mean aggregation factories."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import partial_models as sparse

_VALUE_TYPE = sparse.indexed_slices_type([2])


def _slices(indices, values):
  return collections.OrderedDict(
      indices=np.array(indices, np.int64),
      values=np.array(values, np.float32).reshape(len(indices), 2))


# Four clients over a 6x2 table: client 0 uploads rows 0 and 5, client 1
# row 5, client 2 row 3, client 3 nothing (an empty upload, weight 0).
_CLIENTS = [
    _slices([0, 5], [[1, 1], [2, 4]]),
    _slices([5], [[4, 2]]),
    _slices([3], [[3, 3]]),
    _slices([], []),
]
# Sum: row 0 = [1, 1], row 3 = [3, 3], row 5 = [2+4, 4+2] = [6, 6], others 0.
_SUM = np.zeros([6, 2], np.float32)
_SUM[0] = [1, 1]
_SUM[3] = [3, 3]
_SUM[5] = [6, 6]


def _dense(result, num_rows):
  """An aggregator's IndexedSlices result as a [num_rows, 2] array."""
  indices = np.asarray(result['indices'])
  # One row per distinct id: the aggregator already summed duplicates.
  assert len(set(indices.tolist())) == len(indices), indices
  dense = np.zeros([num_rows, 2], np.float32)
  dense[indices] = result['values']
  return dense


class IndexedSlicesSumComputationTest(tf.test.TestCase,
                                      parameterized.TestCase):

  def test_type_signature(self):
    process = sparse.IndexedSlicesSumFactory(6).create(_VALUE_TYPE)
    tff.test.assert_types_equivalent(
        process.next.type_signature,
        tff.FunctionType(
            collections.OrderedDict(
                state=tff.FederatedType((), tff.SERVER),
                value=tff.FederatedType(_VALUE_TYPE, tff.CLIENTS)),
            tff.templates.MeasuredProcessOutput(
                state=tff.FederatedType((), tff.SERVER),
                result=tff.FederatedType(_VALUE_TYPE, tff.SERVER),
                measurements=tff.FederatedType(
                    collections.OrderedDict(clients=np.int32,
                                            rows_received=np.int32),
                    tff.SERVER))))

  @parameterized.named_parameters(
      ('dense', tff.TensorType(np.float32, [None, 2])),
      ('int32_indices', tff.StructType([
          ('indices', tff.TensorType(np.int32, [None])),
          ('values', tff.TensorType(np.float32, [None, 2]))])),
      ('values_first', tff.StructType([
          ('values', tff.TensorType(np.float32, [None, 2])),
          ('indices', tff.TensorType(np.int64, [None]))])),
      ('unknown_row_shape', tff.StructType([
          ('indices', tff.TensorType(np.int64, [None])),
          ('values', tff.TensorType(np.float32, [None, None]))])),
  )
  def test_rejects_other_value_types(self, value_type):
    with self.assertRaisesRegex(TypeError, 'IndexedSlices'):
      sparse.IndexedSlicesSumFactory(6).create(value_type)

  @parameterized.named_parameters(('zero', 0), ('negative', -1),
                                  ('float', 2.5))
  def test_rejects_bad_num_rows(self, num_rows):
    with self.assertRaisesRegex(ValueError, 'num_rows'):
      sparse.IndexedSlicesSumFactory(num_rows)


class IndexedSlicesSumExecutionTest(tf.test.TestCase):

  def test_sum(self):
    process = sparse.IndexedSlicesSumFactory(6).create(_VALUE_TYPE)
    output = process.next(process.initialize(), _CLIENTS)
    # Rows in order of first upload: 0 and 5 (client 0), then 3.
    np.testing.assert_array_equal(output.result['indices'], [0, 5, 3])
    np.testing.assert_array_equal(_dense(output.result, 6), _SUM)
    self.assertEqual(output.measurements,
                     collections.OrderedDict(clients=3, rows_received=4))

  def test_duplicate_indices_of_one_client_add(self):
    process = sparse.IndexedSlicesSumFactory(3).create(_VALUE_TYPE)
    output = process.next(process.initialize(),
                          [_slices([1, 1], [[1, 2], [3, 4]])])
    np.testing.assert_array_equal(_dense(output.result, 3),
                                  [[0, 0], [4, 6], [0, 0]])

  def test_out_of_range_index_fails(self):
    process = sparse.IndexedSlicesSumFactory(3).create(_VALUE_TYPE)
    with self.assertRaisesRegex(Exception, 'out of range'):
      process.next(process.initialize(), [_slices([3], [[1, 1]])])


class IndexedSlicesMeanExecutionTest(tf.test.TestCase,
                                     parameterized.TestCase):

  @parameterized.named_parameters(
      # Three clients uploaded rows (the empty one has weight 0): _SUM / 3.
      ('clients', 'clients', [1 / 3, 1, 2]),
      # Rows 0 and 3 have one uploader, row 5 two: [1, 3, 6/2].
      ('touching_clients', 'touching_clients', [1, 3, 3]),
  )
  def test_mean(self, divisor, rows_0_3_5):
    process = sparse.IndexedSlicesMeanFactory(6, divisor).create(_VALUE_TYPE)
    output = process.next(process.initialize(), _CLIENTS)
    expected = np.zeros([6, 2], np.float32)
    expected[[0, 3, 5]] = np.array(rows_0_3_5)[:, None]
    np.testing.assert_allclose(_dense(output.result, 6), expected, rtol=1e-6)
    self.assertEqual(output.measurements, collections.OrderedDict(
        clients=3, rows_received=4, rows_touched=3))

  def test_matches_numpy_on_random_uploads(self):
    rng = np.random.default_rng(0)
    clients = []
    for _ in range(4):
      rows = rng.choice(10, size=rng.integers(0, 6), replace=False)
      clients.append(_slices(rows, rng.normal(size=[len(rows), 2])))
    total = np.zeros([10, 2])
    touched = np.zeros([10])
    for c in clients:
      np.add.at(total, c['indices'], c['values'])
      touched[c['indices']] += 1
    process = sparse.IndexedSlicesMeanFactory(
        10, sparse.Divisor.TOUCHING_CLIENTS).create(_VALUE_TYPE)
    output = process.next(process.initialize(), clients)
    expected = np.divide(total, np.maximum(touched, 1)[:, None])
    np.testing.assert_allclose(_dense(output.result, 10), expected,
                               rtol=1e-5, atol=1e-6)
    # Only the rows uploaded come back (O(rows uploaded), not O(V)).
    self.assertLen(output.result['indices'], np.count_nonzero(touched))

  def test_rejects_unknown_divisor(self):
    with self.assertRaisesRegex(ValueError, "'clients', 'touching_clients'"):
      sparse.IndexedSlicesMeanFactory(6, 'rows')


class ToDenseExecutionTest(tf.test.TestCase):

  def test_scatters_rows_into_zeros(self):
    @tff.tensorflow.computation(_VALUE_TYPE)
    def dense(slices):
      return sparse.to_dense(slices, 4)

    # Row 2 = [1, 2], row 0 = [3, 4], rows 1 and 3 zero.
    np.testing.assert_array_equal(
        dense(_slices([2, 0], [[1, 2], [3, 4]])),
        [[3, 4], [0, 0], [1, 2], [0, 0]])


def _clipping(clipping_norm, num_rows=6):
  return sparse.IndexedSlicesClippingFactory(
      clipping_norm, sparse.IndexedSlicesSumFactory(num_rows))


class IndexedSlicesClippingComputationTest(tf.test.TestCase):

  def test_type_signature(self):
    process = _clipping(2.0).create(_VALUE_TYPE)
    state_type = tff.FederatedType(collections.OrderedDict(
        clipping_norm=(), inner_agg=()), tff.SERVER)
    tff.test.assert_types_equivalent(
        process.next.type_signature,
        tff.FunctionType(
            collections.OrderedDict(
                state=state_type,
                value=tff.FederatedType(_VALUE_TYPE, tff.CLIENTS)),
            tff.templates.MeasuredProcessOutput(
                state=state_type,
                result=tff.FederatedType(_VALUE_TYPE, tff.SERVER),
                measurements=tff.FederatedType(collections.OrderedDict(
                    clipping=collections.OrderedDict(
                        clients=np.int32, rows_received=np.int32),
                    clipping_norm=np.float32, clipped_count=np.int32),
                    tff.SERVER))))

  def test_rejects_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'clipping_norm must be > 0'):
      _clipping(0.0)
    with self.assertRaisesRegex(TypeError, 'UnweightedAggregationFactory'):
      sparse.IndexedSlicesClippingFactory(1.0, tff.aggregators.MeanFactory())
    with self.assertRaisesRegex(TypeError, 'IndexedSlices'):
      _clipping(1.0).create(tff.TensorType(np.float32, [None, 2]))


class IndexedSlicesClippingExecutionTest(tf.test.TestCase):

  def test_fixed_norm_clips_each_client(self):
    process = _clipping(2.5).create(_VALUE_TYPE)
    output = process.next(process.initialize(), _CLIENTS)
    # Norms: client 0 sqrt(1 + 1 + 4 + 16) = 22**.5 > 2.5, scaled by
    # 2.5 / 22**.5; client 1 20**.5 > 2.5, scaled by 2.5 / 20**.5; client 2
    # 18**.5 > 2.5, scaled by 2.5 / 18**.5; client 3 has no rows (norm 0).
    s0, s1, s2 = 2.5 / 22**.5, 2.5 / 20**.5, 2.5 / 18**.5
    expected = np.zeros([6, 2])
    expected[0] = [s0, s0]
    expected[3] = [3 * s2, 3 * s2]
    expected[5] = [2 * s0 + 4 * s1, 4 * s0 + 2 * s1]
    np.testing.assert_allclose(_dense(output.result, 6), expected, rtol=1e-6)
    self.assertEqual(output.measurements['clipped_count'], 3)
    self.assertAllClose(output.measurements['clipping_norm'], 2.5)

  def test_adaptive_norm_follows_the_quantile_estimate(self):
    estimate = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
        initial_estimate=5.0, target_quantile=0.5, learning_rate=1.0)
    process = _clipping(estimate).create(_VALUE_TYPE)
    state = process.initialize()
    output = process.next(state, _CLIENTS)
    # Round 1 clips nobody at 5 (norms 22**.5, 20**.5, 18**.5 and 0): the
    # sum, and the estimate's own next state for the same norms.
    np.testing.assert_allclose(_dense(output.result, 6), _SUM, rtol=1e-6)
    self.assertEqual(output.measurements['clipped_count'], 0)
    norms = [np.float32(n) for n in (22**.5, 20**.5, 18**.5, 0)]
    alone = estimate.next(estimate.initialize(), norms)
    tf.nest.map_structure(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
        tf.nest.flatten(output.state['clipping_norm']),
        tf.nest.flatten(alone))
    # Every norm was below 5: the estimate shrank; round 2 clips with it.
    second = process.next(output.state, _CLIENTS)
    self.assertLess(second.measurements['clipping_norm'], 5.0)
    self.assertAllClose(second.measurements['clipping_norm'],
                        estimate.report(alone))


if __name__ == '__main__':
  tf.test.main()
