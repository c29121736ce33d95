"""Tests of the delta finalizer (server step of a sparse round)."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import sparse

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


  def test_rejects_non_positive_learning_rate(self):
    with self.assertRaisesRegex(ValueError, 'learning_rate must be > 0'):
      sparse.build_delta_finalizer(_WEIGHTS_TYPE, learning_rate=0.0)


if __name__ == '__main__':
  tf.test.main()
