"""Tests of the fastText-style classifier against a numpy re-implementation."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms
from tff_nlp import models
from tff_nlp import runtime
from tff_nlp.models import text_classifier

_SPEC = models.TextClassifierSpec(
    vocab_size=7, num_classes=3, max_length=5, embedding_dim=4, seed=11
)
# Padding (0) at the end, OOV (1) as a real token, a single-token text.
_IDS = np.array([
    [2, 3, 3, 0, 0],
    [1, 6, 5, 4, 2],
    [6, 0, 0, 0, 0],
], np.int32)
_LABELS = np.array([0, 2, 1], np.int32)


def _numpy_probabilities(ids, embedding, kernel, bias):
  """Mean of the non-padding token embeddings → dense → softmax."""
  mask = (ids != 0).astype(np.float64)[..., None]  # [B, L, 1]
  mean = (embedding[ids] * mask).sum(axis=1) / mask.sum(axis=1)
  logits = mean @ kernel + bias
  exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return exp / exp.sum(axis=-1, keepdims=True)


def _random_weights(seed):
  rng = np.random.default_rng(seed)
  return [
      rng.normal(size=(_SPEC.vocab_size, _SPEC.embedding_dim)),
      rng.normal(size=(_SPEC.embedding_dim, _SPEC.num_classes)),
      rng.normal(size=(_SPEC.num_classes,)),
  ]


def _weights(model):
  return [np.asarray(w) for w in model.get_weights()]


class _WeightsTestCase(tf.test.TestCase):

  def assert_weights_equal(self, a, b):
    self.assertLen(b, len(a))
    for x, y in zip(a, b):
      self.assertAllEqual(x, y)


class TextClassifierExecutionTest(_WeightsTestCase, parameterized.TestCase):

  def test_hand_derived_probabilities(self):
    spec = models.TextClassifierSpec(
        vocab_size=4, num_classes=2, max_length=4, embedding_dim=2, seed=0)
    model = models.build_keras_model(spec)
    # The padding row is 9s: any leak of padding into the mean shows.
    model.set_weights([
        np.array([[9, 9], [0, 0], [1, 0], [0, 1]], np.float32),
        np.eye(2, dtype=np.float32),
        np.zeros(2, np.float32),
    ])
    probabilities = model(np.array([[2, 3, 3, 0]], np.int32))
    # mean = ((1,0) + (0,1) + (0,1)) / 3 = (1/3, 2/3); softmax of that is
    # (1, e^(1/3)) / (1 + e^(1/3)) = (0.417430, 0.582570).
    self.assertAllClose(probabilities, [[0.41742979, 0.58257021]])

  @parameterized.parameters(0, 1, 2)
  def test_keras_forward_pass_matches_numpy(self, seed):
    model = models.build_keras_model(_SPEC)
    weights = _random_weights(seed)
    model.set_weights([w.astype(np.float32) for w in weights])
    self.assertAllClose(model(_IDS), _numpy_probabilities(_IDS, *weights),
                        atol=1e-6)

  def test_tff_model_forward_pass_and_loss_match_numpy(self):
    model = models.build_model_fn(_SPEC)()
    weights = _random_weights(3)
    tf.nest.map_structure(lambda v, w: v.assign(w.astype(np.float32)),
                          model.trainable_variables, weights)
    output = model.forward_pass((_IDS, _LABELS), training=False)
    expected = _numpy_probabilities(_IDS, *weights)
    self.assertAllClose(output.predictions, expected, atol=1e-6)
    # Sparse categorical cross-entropy, mean over the batch.
    expected_loss = -np.mean(np.log(expected[np.arange(3), _LABELS]))
    self.assertAllClose(output.loss, expected_loss, atol=1e-6)
    self.assertEqual(int(output.num_examples), 3)
    metrics = model.report_local_unfinalized_metrics()
    correct = np.sum(np.argmax(expected, axis=-1) == _LABELS)
    self.assertAllClose(metrics['sparse_categorical_accuracy'],
                        [correct, 3.0])
    self.assertAllClose(metrics['num_batches'], [1])

  def test_input_spec(self):
    x_spec, y_spec = models.input_spec(_SPEC.max_length)
    self.assertEqual(x_spec, tf.TensorSpec([None, 5], tf.int32))
    self.assertEqual(y_spec, tf.TensorSpec([None], tf.int32))
    self.assertEqual(models.build_model_fn(_SPEC)().input_spec,
                     (x_spec, y_spec))

  def test_same_seed_same_initial_weights_in_eager_and_graph(self):
    eager = _weights(models.build_keras_model(_SPEC))
    self.assert_weights_equal(eager, _weights(models.build_keras_model(_SPEC)))
    with tf.Graph().as_default():
      model = models.build_keras_model(_SPEC)
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        graph = session.run(model.weights)
    self.assert_weights_equal(eager, graph)
    # Embeddings in U(-0.05, 0.05); Glorot-uniform kernel, zero bias.
    self.assertAllInRange(eager[0], -0.05, 0.05)
    self.assertAllEqual(eager[2], np.zeros(3))
    other = _weights(models.build_keras_model(
        models.TextClassifierSpec(**{**_SPEC.__dict__, 'seed': 12})))
    self.assertNotAllClose(eager[0], other[0])
    self.assertNotAllClose(eager[1], other[1])

  def test_model_fn_builds_new_variables_each_call(self):
    model_fn = models.build_model_fn(_SPEC)
    first, second = model_fn(), model_fn()
    self.assertIsNot(first.trainable_variables[0],
                     second.trainable_variables[0])
    self.assert_weights_equal(first.trainable_variables,
                              second.trainable_variables)


# Classes 0 and 2 belong to group 0, class 1 to group 1.
_GROUPED = models.TextClassifierSpec(
    vocab_size=7, num_classes=3, max_length=5, embedding_dim=4, seed=11,
    class_groups=(0, 1, 0))
_GROUPS = np.array([0, 0, 1], np.int32)


def _grouped_inputs():
  return collections.OrderedDict([(text_classifier.TOKEN_IDS, _IDS),
                                  (text_classifier.GROUP, _GROUPS)])


class GroupedTextClassifierExecutionTest(_WeightsTestCase, parameterized.TestCase):
  """The restricted softmax: each example's classes are its group's."""

  def test_hand_derived_restricted_probabilities(self):
    spec = models.TextClassifierSpec(
        vocab_size=4, num_classes=3, max_length=4, embedding_dim=2, seed=0,
        class_groups=(0, 1, 0))
    model = models.build_keras_model(spec)
    model.set_weights([
        np.array([[9, 9], [0, 0], [1, 0], [0, 1]], np.float32),
        np.array([[1, 5, 0], [0, 5, 1]], np.float32),
        np.zeros(3, np.float32),
    ])
    probabilities = model(collections.OrderedDict([
        (text_classifier.TOKEN_IDS, np.array([[2, 3, 3, 0]] * 2, np.int32)),
        (text_classifier.GROUP, np.array([0, 1], np.int32))]))
    # mean = (1/3, 2/3): logits (1/3, 5, 2/3). Group 0 keeps classes 0 and
    # 2: (e^(1/3), 0, e^(2/3)) / (e^(1/3) + e^(2/3)) = (0.417430, 0,
    # 0.582570), class 1's large logit notwithstanding; group 1 has only
    # class 1, which gets probability 1.
    self.assertAllClose(probabilities, [[0.41742979, 0.0, 0.58257021],
                                        [0.0, 1.0, 0.0]])

  @parameterized.parameters(0, 1)
  def test_matches_numpy_softmax_over_the_group(self, seed):
    model = models.build_keras_model(_GROUPED)
    weights = _random_weights(seed)
    model.set_weights([w.astype(np.float32) for w in weights])
    embedding, kernel, bias = weights
    expected = np.zeros([3, 3])
    for row, group in enumerate(_GROUPS):
      classes = [c for c, g in enumerate(_GROUPED.class_groups) if g == group]
      expected[row, classes] = _numpy_probabilities(
          _IDS[row:row + 1], embedding, kernel[:, classes], bias[classes])[0]
    self.assertAllClose(model(_grouped_inputs()), expected, atol=1e-6)

  def test_tff_loss_is_the_restricted_cross_entropy(self):
    model = models.build_model_fn(_GROUPED)()
    weights = _random_weights(4)
    tf.nest.map_structure(lambda v, w: v.assign(w.astype(np.float32)),
                          model.trainable_variables, weights)
    labels = np.array([2, 0, 1], np.int32)  # Each in its example's group.
    output = model.forward_pass((_grouped_inputs(), labels), training=False)
    probabilities = np.asarray(output.predictions)
    self.assertAllClose(probabilities.sum(axis=1), np.ones(3), atol=1e-6)
    self.assertAllClose(
        output.loss,
        -np.mean(np.log(probabilities[np.arange(3), labels])), atol=1e-6)

  def test_input_spec(self):
    x_spec, y_spec = models.input_spec(5, grouped=True)
    self.assertEqual(x_spec, collections.OrderedDict([
        ('token_ids', tf.TensorSpec([None, 5], tf.int32)),
        ('group', tf.TensorSpec([None], tf.int32))]))
    self.assertEqual(y_spec, tf.TensorSpec([None], tf.int32))
    self.assertEqual(models.build_model_fn(_GROUPED)().input_spec,
                     (x_spec, y_spec))

  @parameterized.parameters(((0, 1),), ((0, -1, 0),))
  def test_rejects_bad_groups(self, groups):
    with self.assertRaisesRegex(ValueError, 'class_groups'):
      models.TextClassifierSpec(
          vocab_size=7, num_classes=3, max_length=5, embedding_dim=4,
          seed=0, class_groups=groups)

  def test_config_round_trip(self):
    layer = text_classifier.RestrictToGroup((0, 1, 0))
    self.assertEqual(
        text_classifier.RestrictToGroup.from_config(
            layer.get_config()).class_groups, (0, 1, 0))


class ModelFnExecutionTest(_WeightsTestCase):

  def test_learning_process_starts_from_the_seeded_weights(self):
    self.enter_context(runtime.local_cpp_context())
    process = algorithms.build_fl_process(
        models.build_model_fn(_SPEC),
        algorithm='fedavg',
        weighting='uniform',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
    )
    initial = process.get_model_weights(process.initialize())
    self.assert_weights_equal(initial.trainable,
                              _weights(models.build_keras_model(_SPEC)))
    self.assertEmpty(initial.non_trainable)


if __name__ == '__main__':
  tf.test.main()
