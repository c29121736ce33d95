"""Tests of the per-tag logistic regression and precision/recall@k."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from apps.partial_models import tag_model as tag_regression


# Scores of 3 examples over 3 real tags plus 1 OOV column (ignored).
_SCORES = np.array([[0.9, 0.1, 0.5, 9.0],
                    [0.2, 0.8, 0.8, 9.0],
                    [0.3, 0.2, 0.1, 9.0]])
_TAGS = np.array([[1, 0, 1, 0],
                  [0, 0, 1, 0],
                  [0, 0, 0, 1]])


class TagRegressionExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_logits_and_loss_match_numpy(self):
    bag = collections.OrderedDict(
        indices=tf.constant([[0, 0], [0, 2], [1, 1]], tf.int64),
        values=tf.constant([2, 1, 3], tf.int32),
        dense_shape=tf.constant([2, 3], tf.int64))
    weights = np.array([[1., -1.], [0.5, 0.], [0., 2.]], np.float32)
    tags = np.array([[1., 0.], [0., 1.]], np.float32)
    x = np.array([[2, 0, 1], [0, 3, 0]], np.float32)
    z = x @ weights  # [[2, 0], [1.5, 0]]
    logits = tag_regression.logits(bag, tf.constant(weights))
    np.testing.assert_allclose(logits, z)
    expected = np.mean(np.maximum(z, 0) - z * tags + np.log1p(np.exp(-abs(z))))
    np.testing.assert_allclose(
        tag_regression.loss(logits, tf.constant(tags)), expected, rtol=1e-6)
    keras_loss = tf.keras.losses.BinaryCrossentropy(from_logits=True)(
        tags, logits)
    np.testing.assert_allclose(keras_loss, expected, rtol=1e-6)

  def test_keras_model_uses_the_same_logits(self):
    model = tag_regression.TagRegression(3, 2)
    model.tag_weights.assign(np.arange(6, dtype=np.float32).reshape(3, 2))
    bag = collections.OrderedDict(
        indices=tf.constant([[0, 1]], tf.int64), values=tf.constant([2]),
        dense_shape=tf.constant([1, 3], tf.int64))
    np.testing.assert_allclose(model(bag), [[4., 6.]])
    self.assertEqual(model.get_config()['num_words'], 3)

  @parameterized.parameters([
      # Top-1: tag 0 (hit), tag 1 (tie with 2, lower id first: miss), tag 0
      # (miss). Precision (1+0+0)/3; recall over examples with real tags:
      # (1/2 + 0/1)/2.
      (1, 1 / 3, 1 / 4),
      # Top-2: {0, 2} (2 hits), {1, 2} (1 hit), {0, 1} (0): precision
      # (1 + 1/2 + 0)/3; recall (2/2 + 1/1)/2.
      (2, 1 / 2, 1.0),
  ])
  def test_precision_recall_at_k(self, k, precision, recall):
    result = tag_regression.precision_recall_at_k(_SCORES, _TAGS, k=k,
                                                  num_real_tags=3)
    self.assertAllClose(result['precision'], precision, rtol=1e-6, atol=1e-12)
    self.assertAllClose(result['recall'], recall, rtol=1e-6, atol=1e-12)
    self.assertEqual((result['examples'], result['examples_with_tags']), (3, 2))

  @parameterized.parameters([
      (1, [1, 0, 0]),  # As in test_precision_recall_at_k.
      (2, [2, 1, 0]),
  ])
  def test_hits_at_k_per_example(self, k, hits):
    self.assertEqual(
        tag_regression.hits_at_k(_SCORES, _TAGS, k=k, num_real_tags=3)
        .tolist(), hits)

  def test_k_must_be_in_range(self):
    with self.assertRaisesRegex(ValueError, r'k must be in \[1, 3\]'):
      tag_regression.precision_recall_at_k(_SCORES, _TAGS, k=4,
                                           num_real_tags=3)


if __name__ == '__main__':
  tf.test.main()
