"""Tests of the delta finalizer (server step of a sparse round)."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import partial_models as sparse

_WEIGHTS_TYPE = tff.learning.models.ModelWeights(
    trainable=[tff.TensorType(np.float32, [4, 2])], non_trainable=[])


def _weights(table):
  return tff.learning.models.ModelWeights(trainable=[table], non_trainable=[])


class DeltaFinalizerExecutionTest(tf.test.TestCase,
                                  parameterized.TestCase):

  @parameterized.named_parameters(('lr1', 1.0), ('lr05', 0.5))
  def test_subtracts_mean_update_and_keeps_untouched_rows(self, learning_rate):
    finalizer = sparse.build_delta_finalizer(_WEIGHTS_TYPE,
                                             learning_rate=learning_rate)
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    # Updates are initial minus trained weights (TFF's convention); only row 2
    # was trained this round: row 2 = [4, 5] - lr * [1, -2].
    update = np.zeros([4, 2], np.float32)
    update[2] = [1.0, -2.0]
    output = finalizer.next(finalizer.initialize(), _weights(table), [update])
    expected = table.copy()
    expected[2] = [4 - learning_rate, 5 + 2 * learning_rate]
    np.testing.assert_allclose(output.result.trainable[0], expected)
    self.assertEqual(output.measurements['update_non_finite'], 0)


  def test_rejects_non_finite_update(self):
    finalizer = sparse.build_delta_finalizer(_WEIGHTS_TYPE)
    table = np.ones([4, 2], np.float32)
    update = np.zeros([4, 2], np.float32)
    update[1, 0] = np.nan
    output = finalizer.next(finalizer.initialize(), _weights(table), [update])
    np.testing.assert_array_equal(output.result.trainable[0], table)
    self.assertEqual(output.measurements['update_non_finite'], 1)


  @parameterized.named_parameters(('lr1', 1.0), ('lr05', 0.5))
  def test_indexed_slices_update_changes_its_rows_only(self, learning_rate):
    finalizer = sparse.build_delta_finalizer(
        _WEIGHTS_TYPE, learning_rate=learning_rate,
        update_type=[sparse.indexed_slices_type([2])])
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    # Rows 3 and 0 (ids in any order): row 3 = [6, 7] - lr * [2, 2],
    # row 0 = [0, 1] - lr * [-1, 0]; rows 1 and 2 are not in the update.
    update = collections.OrderedDict(
        indices=np.array([3, 0], np.int64),
        values=np.array([[2, 2], [-1, 0]], np.float32))
    output = finalizer.next(finalizer.initialize(), _weights(table), [update])
    expected = table.copy()
    expected[3] -= learning_rate * np.array([2, 2])
    expected[0] -= learning_rate * np.array([-1, 0])
    np.testing.assert_allclose(output.result.trainable[0], expected)
    self.assertEqual(output.measurements['update_non_finite'], 0)

  def test_rejects_non_finite_and_out_of_range_slices(self):
    finalizer = sparse.build_delta_finalizer(
        _WEIGHTS_TYPE, update_type=[sparse.indexed_slices_type([2])])
    table = np.ones([4, 2], np.float32)
    non_finite = collections.OrderedDict(
        indices=np.array([1], np.int64),
        values=np.array([[np.inf, 0]], np.float32))
    output = finalizer.next(finalizer.initialize(), _weights(table),
                            [non_finite])
    np.testing.assert_array_equal(output.result.trainable[0], table)
    self.assertEqual(output.measurements['update_non_finite'], 1)
    outside = collections.OrderedDict(indices=np.array([4], np.int64),
                                      values=np.ones([1, 2], np.float32))
    with self.assertRaisesRegex(Exception, 'row id out of range'):
      finalizer.next(finalizer.initialize(), _weights(table), [outside])

  def test_rejects_update_types_that_do_not_fit(self):
    with self.assertRaisesRegex(TypeError, 'update_type has 2 parts'):
      sparse.build_delta_finalizer(
          _WEIGHTS_TYPE, update_type=[sparse.indexed_slices_type([2])] * 2)
    with self.assertRaises(TypeError):  # Rows of 3, the tensor's are 2.
      sparse.build_delta_finalizer(
          _WEIGHTS_TYPE, update_type=[sparse.indexed_slices_type([3])])

  def test_rejects_non_positive_learning_rate(self):
    with self.assertRaisesRegex(ValueError, 'learning_rate must be > 0'):
      sparse.build_delta_finalizer(_WEIGHTS_TYPE, learning_rate=0.0)


if __name__ == '__main__':
  tf.test.main()
