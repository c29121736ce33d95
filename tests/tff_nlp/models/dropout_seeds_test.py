"""Tests of seeded, stateless dropout masks (tff_nlp.models.dropout_seeds)."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms
from tff_nlp.models import dropout_seeds
from tff_nlp.models import fcl_cnn
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_inputs
from tff_nlp.models import seq2seq_model_fn

_RATE = 0.3
_ONES = tf.ones([200, 500])  # 1e5 draws: the kept fraction's sd is 0.0014.


def _dropout_model(seed=0, num_layers=2):
  inputs = tf.keras.Input([500])
  x = inputs
  for _ in range(num_layers):
    x = tf.keras.layers.Dropout(_RATE)(x)
  model = tf.keras.Model(inputs, x)
  dropout_seeds.seed_dropout_layers(model, seed)
  return model


def _key(value):
  return tf.constant(value, tf.int64)


class FingerprintExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_tensors_and_arrays_agree(self):
    self.assertEqual(
        int(dropout_seeds.fingerprint((tf.constant([1.0, 2.0]),
                                       tf.constant(3, tf.int32)))),
        int(dropout_seeds.fingerprint(
            (np.array([1.0, 2.0], np.float32), np.int32(3)))))

  def test_recorded_value(self):
    # Recorded with TF 2.14.1's `tf.fingerprint` (FarmHash64). If it
    # changes, a run resumed under another TF draws other dropout masks.
    self.assertEqual(
        int(dropout_seeds.fingerprint((tf.constant([1.0, 2.0]),
                                       tf.constant(3, tf.int32)))),
        -46658240996969729)

  def test_same_in_graph_and_eager(self):
    value = (tf.range(10), {'a': tf.linspace(0.0, 1.0, 7)})
    graph = tf.function(dropout_seeds.fingerprint)(value)
    self.assertEqual(int(graph), int(dropout_seeds.fingerprint(value)))

  @parameterized.named_parameters(
      ('one_bit', (tf.constant([1.0, 2.0]),),
       (tf.constant([1.0, np.nextafter(np.float32(2.0), np.float32(3.0))]),)),
      ('leaf_order', (tf.constant(1), tf.constant(2)),
       (tf.constant(2), tf.constant(1))),
      ('element_order', (tf.constant([1, 2]),), (tf.constant([2, 1]),)),
      ('dtype_same_bits', (tf.constant(0, tf.int32),),
       (tf.constant(0, tf.int64),)),
  )
  def test_differs(self, a, b):
    self.assertNotEqual(int(dropout_seeds.fingerprint(a)),
                        int(dropout_seeds.fingerprint(b)))


class SeededMasksExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _masks(self, model, key, training=True):
    with dropout_seeds.step_seed(_key(key)):
      return model(_ONES, training=training).numpy()

  def test_counts_layers_and_is_idempotent(self):
    model = _dropout_model(num_layers=3)
    self.assertEqual(dropout_seeds.seed_dropout_layers(model, 0), 3)

  @parameterized.parameters(0.0, 0.3, 0.8)
  def test_statistics_of_a_mask(self, rate):
    layer = tf.keras.layers.Dropout(rate)
    layer(_ONES)
    dropout_seeds.seed_dropout_layers(layer, 0)
    with dropout_seeds.step_seed(_key(1)):
      out = layer(_ONES, training=True).numpy()
    kept = out != 0.0
    # Kept values are scaled by 1 / (1 - rate), like Keras's dropout.
    np.testing.assert_allclose(out[kept], 1.0 / (1.0 - rate), rtol=1e-6)
    # Binomial: the kept fraction is 1 - rate within 4 sd of 1e5 draws.
    sd = np.sqrt(rate * (1 - rate) / _ONES.shape.num_elements())
    self.assertAllClose(kept.mean(), 1.0 - rate, atol=4 * sd + 1e-9)

  def test_same_key_same_masks_other_key_other_masks(self):
    model = _dropout_model()
    a, b, c = (self._masks(model, k) for k in (7, 7, 8))
    np.testing.assert_array_equal(a, b)
    self.assertGreater(np.mean(a != c), 0.1)

  def test_same_masks_in_a_tf_function_and_in_eager(self):
    model = _dropout_model()

    @tf.function
    def traced(key):
      with dropout_seeds.step_seed(key):
        return model(_ONES, training=True)

    np.testing.assert_array_equal(traced(_key(7)).numpy(),
                                  self._masks(model, 7))

  def test_layers_and_seeds_draw_different_masks(self):
    layer_masks = []
    for seed in (0, 1):
      model = _dropout_model(seed=seed, num_layers=1)
      two = _dropout_model(seed=seed, num_layers=2)
      one_layer = self._masks(model, 7)
      # The second layer of `two` sees the first layer's output; where that
      # is non-zero, its own mask shows.
      first = two.layers[1]
      second = two.layers[2]
      with dropout_seeds.step_seed(_key(7)):
        mask_1 = first(_ONES, training=True).numpy() != 0
        mask_2 = second(_ONES, training=True).numpy() != 0
      np.testing.assert_array_equal(one_layer != 0, mask_1)
      self.assertGreater(np.mean(mask_1 != mask_2), 0.1)
      layer_masks.append(mask_1)
    self.assertGreater(np.mean(layer_masks[0] != layer_masks[1]), 0.1)

  def test_a_layer_called_twice_in_a_step_draws_two_masks(self):
    model = _dropout_model(num_layers=1)
    layer = model.layers[1]
    with dropout_seeds.step_seed(_key(7)):
      first = layer(_ONES, training=True).numpy()
      second = layer(_ONES, training=True).numpy()
    self.assertGreater(np.mean(first != second), 0.1)
    # A new scope with the same key starts the calls again.
    np.testing.assert_array_equal(self._masks(model, 7), first)

  def test_not_training_is_identity(self):
    np.testing.assert_array_equal(
        self._masks(_dropout_model(), 7, training=False), _ONES.numpy())

  def test_outside_a_scope_it_is_keras_dropout(self):
    model = _dropout_model(num_layers=1)
    out = model(_ONES, training=True).numpy()
    np.testing.assert_allclose(out[out != 0], 1 / (1 - _RATE), rtol=1e-6)
    self.assertAllClose(np.mean(out != 0), 1 - _RATE, atol=0.006)

  def test_key_must_be_a_scalar(self):
    with self.assertRaisesRegex(ValueError, 'must be a scalar'):
      with dropout_seeds.step_seed(tf.constant([1, 2], tf.int64)):
        pass


_SEQ2SEQ = seq2seq.Seq2SeqConfig(
    vocabulary_size=23, num_encoder_layers=1, num_decoder_layers=1,
    num_heads=2, hidden_dim=8, intermediate_dim=16, dropout=0.5,
    max_source_length=9, max_target_length=8, seed=5,
)


class ModelsExecutionTest(tf.test.TestCase):

  def test_every_dropout_of_the_seq2seq_model_is_seeded(self):
    model = seq2seq.build_keras_model(_SEQ2SEQ)
    # 2 embedding dropouts; per encoder layer: self-attention output,
    # attention scores, feed-forward = 3; per decoder layer: self- and
    # cross-attention output and scores, feed-forward = 5. 2 + 3 + 5 = 10.
    self.assertEqual(dropout_seeds.seed_dropout_layers(model, 5), 10)
    inputs = {seq2seq.ENCODER_TOKEN_IDS: tf.constant([[4, 5, 6]]),
              seq2seq.DECODER_TOKEN_IDS: tf.constant([[2, 7, 8]])}
    with dropout_seeds.step_seed(_key(3)):
      a = model(inputs, training=True)
      b = model(inputs, training=True)
    with dropout_seeds.step_seed(_key(3)):
      again = model(inputs, training=True)
    self.assertAllEqual(a, again)
    self.assertNotAllClose(a, b)

  def test_the_fcl_model_is_seeded(self):
    spec = fcl_cnn.FclCnnSpec(vocab_size=30, num_classes=3, num_tasks=2,
                              max_length=6, embedding_dim=4, num_filters=2,
                              dropout=0.5, seed=2)
    model = fcl_cnn.FclTextCnn(spec)
    self.assertEqual(dropout_seeds.seed_dropout_layers(model, 2), 1)


def _client_dataset(seed):
  rng = np.random.default_rng(seed)
  x, y = seq2seq_inputs.pack_inputs(
      tf.ragged.constant([rng.integers(4, 23, n).tolist() for n in (3, 5)]),
      tf.ragged.constant([rng.integers(4, 23, n).tolist() for n in (2, 4)]),
      source_length=7, target_length=6)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(1)


class FederatedRoundExecutionTest(tf.test.TestCase):

  def test_a_round_with_dropout_is_a_function_of_its_inputs(self):
    # Before seeded masks, Keras's stateful dropout ops in TFF's worker drew
    # new masks on every call of the same round.
    process = algorithms.build_fl_process(
        seq2seq_model_fn.build_model_fn(_SEQ2SEQ), algorithm='fedavg',
        weighting='num_examples',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5))
    no_dropout = algorithms.build_fl_process(
        seq2seq_model_fn.build_model_fn(
            seq2seq.Seq2SeqConfig(**{**_SEQ2SEQ.__dict__, 'dropout': 0.0})),
        algorithm='fedavg', weighting='num_examples',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5))
    data = [_client_dataset(0), _client_dataset(1)]
    state = process.initialize()
    runs = [process.get_model_weights(process.next(state, data).state)
            for _ in range(2)]
    for a, b in zip(runs[0].trainable, runs[1].trainable):
      np.testing.assert_array_equal(a, b)
    without = no_dropout.get_model_weights(
        no_dropout.next(no_dropout.initialize(), data).state)
    self.assertTrue(any(
        not np.allclose(a, b)
        for a, b in zip(runs[0].trainable, without.trainable)))
    metrics = collections.OrderedDict(
        process.next(state, data).metrics['client_work']['train'])
    self.assertEqual(metrics['num_examples'], 4)


if __name__ == '__main__':
  tf.test.main()
