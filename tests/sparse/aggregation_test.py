"""Tests of the IndexedSlices sum and mean aggregation factories."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_nlp import sparse

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


class IndexedSlicesSumComputationTest:

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
                result=tff.FederatedType(
                    tff.TensorType(np.float32, [6, 2]), tff.SERVER),
                measurements=tff.FederatedType(
                    collections.OrderedDict(clients=np.int32,
                                            rows_received=np.int32),
                    tff.SERVER))))

  @pytest.mark.parametrize('value_type', [
      tff.TensorType(np.float32, [None, 2]),
      tff.StructType([('indices', tff.TensorType(np.int32, [None])),
                      ('values', tff.TensorType(np.float32, [None, 2]))]),
      tff.StructType([('values', tff.TensorType(np.float32, [None, 2])),
                      ('indices', tff.TensorType(np.int64, [None]))]),
      tff.StructType([('indices', tff.TensorType(np.int64, [None])),
                      ('values', tff.TensorType(np.float32, [None, None]))]),
  ])
  def test_rejects_other_value_types(self, value_type):
    with pytest.raises(TypeError, match='IndexedSlices'):
      sparse.IndexedSlicesSumFactory(6).create(value_type)

  @pytest.mark.parametrize('num_rows', [0, -1, 2.5])
  def test_rejects_bad_num_rows(self, num_rows):
    with pytest.raises(ValueError, match='num_rows'):
      sparse.IndexedSlicesSumFactory(num_rows)


class IndexedSlicesSumExecutionTest:

  def test_sum(self):
    process = sparse.IndexedSlicesSumFactory(6).create(_VALUE_TYPE)
    output = process.next(process.initialize(), _CLIENTS)
    np.testing.assert_array_equal(output.result, _SUM)
    assert output.measurements == collections.OrderedDict(clients=3,
                                                          rows_received=4)

  def test_duplicate_indices_of_one_client_add(self):
    process = sparse.IndexedSlicesSumFactory(3).create(_VALUE_TYPE)
    output = process.next(process.initialize(),
                          [_slices([1, 1], [[1, 2], [3, 4]])])
    np.testing.assert_array_equal(output.result, [[0, 0], [4, 6], [0, 0]])

  def test_out_of_range_index_fails(self):
    process = sparse.IndexedSlicesSumFactory(3).create(_VALUE_TYPE)
    with pytest.raises(Exception, match='out of range'):
      process.next(process.initialize(), [_slices([3], [[1, 1]])])


class IndexedSlicesMeanExecutionTest:

  @pytest.mark.parametrize('divisor,rows_0_3_5', [
      # Three clients uploaded rows (the empty one has weight 0): _SUM / 3.
      ('clients', [1 / 3, 1, 2]),
      # Rows 0 and 3 have one uploader, row 5 two: [1, 3, 6/2].
      ('touching_clients', [1, 3, 3]),
  ])
  def test_mean(self, divisor, rows_0_3_5):
    process = sparse.IndexedSlicesMeanFactory(6, divisor).create(_VALUE_TYPE)
    output = process.next(process.initialize(), _CLIENTS)
    expected = np.zeros([6, 2], np.float32)
    expected[[0, 3, 5]] = np.array(rows_0_3_5)[:, None]
    np.testing.assert_allclose(output.result, expected, rtol=1e-6)
    assert output.measurements == collections.OrderedDict(
        clients=3, rows_received=4, rows_touched=3)

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
    np.testing.assert_allclose(output.result, expected, rtol=1e-5,
                               atol=1e-6)

  def test_rejects_unknown_divisor(self):
    with pytest.raises(ValueError, match="'clients', 'touching_clients'"):
      sparse.IndexedSlicesMeanFactory(6, 'rows')
