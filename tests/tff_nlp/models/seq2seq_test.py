"""Tests of the seq2seq model and its decoding against independent references.

References: a numpy re-implementation of the forward pass, numpy
cross-entropy and accuracy, the parameter count by formula, brute-force
enumeration of output sequences for beam search, greedy decoding by full
forward passes, and 8 real text2sql examples the model must memorise.
"""

import collections
import dataclasses
import itertools
import json
import os
import random
import re
import time

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms
from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_decoding
from tff_nlp.models import seq2seq_inputs
from tff_nlp.models import seq2seq_loss
from tff_nlp.models import seq2seq_model_fn
from tff_nlp.models import subword_tokenizer

PAD, START, END = 0, 2, 3
_I32 = np.int32
_TINY = seq2seq.Seq2SeqConfig(
    vocabulary_size=23, num_encoder_layers=2, num_decoder_layers=1,
    num_heads=2, hidden_dim=8, intermediate_dim=16, dropout=0.0,
    max_source_length=9, max_target_length=8, seed=5,
)
# Padding at the end, different lengths, a 1-token source.
_ENCODER_IDS = np.array([[5, 6, 7, 8, 0, 0],
                         [9, 10, 11, 12, 13, 14],
                         [15, 0, 0, 0, 0, 0]], _I32)
_DECODER_IDS = np.array([[START, 4, 5, 0, 0],
                         [START, 6, 7, 8, 9],
                         [START, 0, 0, 0, 0]], _I32)


def _inputs(encoder_ids, decoder_ids):
  return {seq2seq.ENCODER_TOKEN_IDS: np.asarray(encoder_ids, _I32),
          seq2seq.DECODER_TOKEN_IDS: np.asarray(decoder_ids, _I32)}


def _randomize(model, seed, scale=0.5):
  """Random weights everywhere (biases and LayerNorms included)."""
  rng = np.random.default_rng(seed)
  model.set_weights([(rng.normal(size=w.shape) * scale).astype(np.float32)
                     for w in model.get_weights()])


# A numpy forward pass: pre-LayerNorm encoder and decoder, learned positions,
# tied output projection.


def _np(variable):
  return np.asarray(variable, np.float64)


def _layer_norm(x, layer):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(-1, keepdims=True)
  return ((x - mean) / np.sqrt(variance + layer.epsilon) * _np(layer.gamma)
          + _np(layer.beta))


def _attention(query, value, layer, mask):
  """Multi-head attention; mask [B, Tq, Tk] (True = may attend)."""
  # pylint: disable=protected-access
  def project(x, dense):
    return np.einsum('btd,dhk->bthk', x, _np(dense.kernel)) + _np(dense.bias)
  q = project(query, layer._query_dense)
  k = project(value, layer._key_dense)
  v = project(value, layer._value_dense)
  scores = np.einsum('bqhk,bshk->bhqs', q, k) / np.sqrt(q.shape[-1])
  scores = np.where(mask[:, None], scores, -np.inf)
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  out = np.einsum('bhqs,bshk->bqhk', weights, v)
  return (np.einsum('bqhk,hkd->bqd', out, _np(layer._output_dense.kernel))
          + _np(layer._output_dense.bias))
  # pylint: enable=protected-access


def _feedforward(x, layer):
  # pylint: disable=protected-access
  dense_1 = layer._feedforward_intermediate_dense
  dense_2 = layer._feedforward_output_dense
  hidden = np.maximum(x @ _np(dense_1.kernel) + _np(dense_1.bias), 0.0)
  return hidden @ _np(dense_2.kernel) + _np(dense_2.bias)
  # pylint: enable=protected-access


def _numpy_logits(model, config, encoder_ids, decoder_ids):
  # pylint: disable=protected-access
  embedding = _np(model.token_embedding.embeddings)
  source_positions = _np(model.encoder_position_embedding.position_embeddings)
  target_positions = _np(model.decoder_position_embedding.position_embeddings)
  source_length, target_length = encoder_ids.shape[1], decoder_ids.shape[1]
  source_mask = encoder_ids != PAD  # [B, S]
  target_mask = decoder_ids != PAD

  vocabulary_size = config.vocabulary_size
  # A copying model's source copy ids (>= V) are read as UNK.
  x = (embedding[np.where(encoder_ids < vocabulary_size, encoder_ids, 1)]
       + source_positions[:source_length])
  mask = np.broadcast_to(source_mask[:, None, :],
                         (len(x), source_length, source_length))
  assert len(model.encoder_layers) == config.num_encoder_layers
  for layer in model.encoder_layers:
    x = x + _attention(_layer_norm(x, layer._self_attention_layer_norm),
                       _layer_norm(x, layer._self_attention_layer_norm),
                       layer._self_attention_layer, mask)
    x = x + _feedforward(_layer_norm(x, layer._feedforward_layer_norm), layer)
  encoder_output = _layer_norm(x, model.encoder_output_layer_norm)

  if config.copy_from_source:
    # Copy id K + s: the source token at s (UNK past V) plus the projected
    # encoder output at s.
    k = config.generated_size
    is_copy = decoder_ids >= k
    positions = np.where(is_copy, decoder_ids - k, 0)
    rows = np.arange(len(decoder_ids))[:, None]
    copied_ids = encoder_ids[rows, positions]
    copied_ids = np.where(copied_ids < vocabulary_size, copied_ids, 1)
    projected = (encoder_output[rows, positions]
                 @ _np(model.copy_input.kernel) + _np(model.copy_input.bias))
    y = np.where(is_copy[..., None], embedding[copied_ids] + projected,
                 embedding[decoder_ids % k])
  else:
    y = embedding[decoder_ids]
  y = y + target_positions[:target_length]
  causal = np.tril(np.ones((target_length, target_length), bool))
  self_mask = causal[None] & target_mask[:, None, :]
  cross_mask = np.broadcast_to(source_mask[:, None, :],
                               (len(y), target_length, source_length))
  assert len(model.decoder_layers) == config.num_decoder_layers
  for layer in model.decoder_layers:
    normed = _layer_norm(y, layer._self_attention_layer_norm)
    y = y + _attention(normed, normed, layer._self_attention_layer, self_mask)
    y = y + _attention(_layer_norm(y, layer._cross_attention_layer_norm),
                       encoder_output, layer._cross_attention_layer,
                       cross_mask)
    y = y + _feedforward(_layer_norm(y, layer._feedforward_layer_norm), layer)
  y = _layer_norm(y, model.decoder_output_layer_norm)
  if not config.copy_from_source:
    return y @ embedding.T
  return _numpy_pointer_generator(
      y @ embedding[:config.generated_size].T,
      np.einsum('btd,bsd->bts', y @ _np(model.copy_query.kernel),
                encoder_output @ _np(model.copy_key.kernel))
      / np.sqrt(config.hidden_dim),
      encoder_ids, config.output_size)
  # pylint: enable=protected-access


def _numpy_pointer_generator(logits, pointer, source_ids, output_size):
  """log p of `seq2seq.copy_log_probs`, by loops over source positions."""
  k = logits.shape[-1]
  pointer = np.where(source_ids[:, None, :] > END, pointer, -np.inf)
  joint = np.concatenate([logits, pointer], axis=-1)
  joint = np.exp(joint - joint.max(-1, keepdims=True))
  joint /= joint.sum(-1, keepdims=True)
  probs = np.zeros(logits.shape[:2] + (output_size,))
  probs[..., :k] = joint[..., :k]
  for b in range(source_ids.shape[0]):
    for s in range(source_ids.shape[1]):
      token = source_ids[b, s]
      first = list(source_ids[b]).index(token)
      probs[b, :, token if token < k else k + first] += joint[b, :, k + s]
  return np.log(np.maximum(probs, 1e-30))


def _expected_num_parameters(c):
  d, f = c.hidden_dim, c.intermediate_dim
  attention = 4 * (d * d + d)  # query, key, value and output projections
  feedforward = d * f + f + f * d + d
  layer_norm = 2 * d
  encoder_layer = attention + feedforward + 2 * layer_norm
  decoder_layer = 2 * attention + feedforward + 3 * layer_norm
  return (c.vocabulary_size * d  # tied with the output projection
          + (c.max_source_length + c.max_target_length) * d
          + c.num_encoder_layers * encoder_layer
          + c.num_decoder_layers * decoder_layer
          + 2 * layer_norm)  # final LayerNorms


class Seq2SeqConfigExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_presets(self):
    small = seq2seq.Seq2SeqConfig.from_preset('small', vocabulary_size=500)
    self.assertEqual(
        (small.num_encoder_layers, small.num_decoder_layers, small.hidden_dim,
         small.num_heads, small.intermediate_dim, small.vocabulary_size),
        (2, 2, 128, 4, 512, 500))
    base = seq2seq.Seq2SeqConfig.from_preset('t5_base')
    self.assertEqual(
        (base.num_encoder_layers, base.num_decoder_layers, base.hidden_dim,
         base.num_heads, base.intermediate_dim, base.vocabulary_size),
        (12, 12, 768, 12, 3072, 32000))
    with self.assertRaises(dataclasses.FrozenInstanceError):
      base.hidden_dim = 1
    with self.assertRaisesRegex(ValueError, 'presets'):
      seq2seq.Seq2SeqConfig.from_preset('t5_large')

  @parameterized.named_parameters(
      ('heads', dict(num_heads=3), 'divisible'),
      ('layers', dict(num_decoder_layers=0), 'positive'),
      ('vocabulary', dict(vocabulary_size=4), 'special ids'),
  )
  def test_invalid_config(self, overrides, message):
    with self.assertRaisesRegex(ValueError, message):
      seq2seq.Seq2SeqConfig.from_preset('small', **overrides)

  @parameterized.parameters('small', 't5_base')
  def test_parameter_count(self, preset):
    config = seq2seq.Seq2SeqConfig.from_preset(preset)
    if preset == 't5_base':
      # In graph mode the variables are declared, not allocated (0.9 GB).
      with tf.Graph().as_default():
        model = seq2seq.build_keras_model(config)
    else:
      model = seq2seq.build_keras_model(config)
    self.assertEqual(model.count_params(), _expected_num_parameters(config))
    if preset == 't5_base':
      # T5-base has 222.9M (no biases, relative positions, vocabulary 32128).
      self.assertBetween(model.count_params(), 215e6, 230e6)


class Seq2SeqModelExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(0, 1)
  def test_forward_pass_matches_numpy(self, seed):
    model = seq2seq.build_keras_model(_TINY)
    _randomize(model, seed)
    logits = model(_inputs(_ENCODER_IDS, _DECODER_IDS))
    self.assertEqual(logits.shape, (3, 5, _TINY.vocabulary_size))
    self.assertEqual(logits.dtype, tf.float32)
    expected = _numpy_logits(model, _TINY, _ENCODER_IDS, _DECODER_IDS)
    real = _DECODER_IDS != PAD  # outputs at padded positions are unused
    self.assertAllClose(logits.numpy()[real], expected[real], atol=2e-5)

  def test_padding_changes_nothing(self):
    model = seq2seq.build_keras_model(_TINY)
    _randomize(model, 2)
    logits = model(_inputs(_ENCODER_IDS, _DECODER_IDS)).numpy()
    longer = model(_inputs(np.pad(_ENCODER_IDS, [[0, 0], [0, 3]]),
                           np.pad(_DECODER_IDS, [[0, 0], [0, 2]]))).numpy()
    self.assertAllClose(longer[:, :5], logits, atol=1e-5)
    for i in range(3):  # Each example alone, without padding.
      source = _ENCODER_IDS[i][_ENCODER_IDS[i] != PAD][None]
      target = _DECODER_IDS[i][_DECODER_IDS[i] != PAD][None]
      alone = model(_inputs(source, target)).numpy()[0]
      self.assertAllClose(alone, logits[i, :target.shape[1]], atol=1e-5)

  def test_decoder_is_causal(self):
    model = seq2seq.build_keras_model(_TINY)
    _randomize(model, 3)
    logits = model(_inputs(_ENCODER_IDS, _DECODER_IDS)).numpy()
    changed = _DECODER_IDS.copy()
    changed[1, 3] = 20
    new_logits = model(_inputs(_ENCODER_IDS, changed)).numpy()
    self.assertAllClose(new_logits[:, :3], logits[:, :3], atol=1e-6)
    self.assertNotAllClose(new_logits[1, 3:], logits[1, 3:])
    self.assertAllClose(new_logits[[0, 2]], logits[[0, 2]], atol=1e-6)

  def test_same_seed_same_weights_in_eager_and_graph(self):
    state = random.getstate()
    eager = seq2seq.build_keras_model(_TINY).get_weights()
    self.assertEqual(random.getstate(), state)  # the caller's state is kept
    again = seq2seq.build_keras_model(_TINY).get_weights()
    with tf.Graph().as_default():
      model = seq2seq.build_keras_model(_TINY)
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        graph = session.run(model.weights)
    other = seq2seq.build_keras_model(
        seq2seq.Seq2SeqConfig(**{**_TINY.__dict__, 'seed': 6})).get_weights()
    for a, b, c, d in zip(eager, again, graph, other):
      self.assertAllEqual(a, b)
      self.assertAllEqual(a, c)
      if np.any(a != a.flat[0]):  # not a constant (zeros, ones) initializer
        self.assertNotAllClose(a, d)
    # Each sublayer has its own seed, though keras-nlp clones initializers.
    # pylint: disable=protected-access
    attention = seq2seq.build_keras_model(
        _TINY).encoder_layers[0]._self_attention_layer
    kernels = [layer.kernel.numpy() for layer in (
        attention._query_dense, attention._key_dense, attention._value_dense)]
    # pylint: enable=protected-access
    self.assertNotAllClose(kernels[0], kernels[1])
    self.assertNotAllClose(kernels[1], kernels[2])

  def test_keras_config_round_trip(self):
    model = seq2seq.build_keras_model(_TINY)
    restored = seq2seq.Seq2SeqTransformer.from_config(model.get_config())
    self.assertEqual(restored.config, _TINY)
    self.assertEqual(restored.name, model.name)

  def test_set_random_seed_is_kept(self):
    tf.keras.utils.set_random_seed(7)
    first = tf.keras.initializers.GlorotUniform()((3, 3))
    tf.keras.utils.set_random_seed(7)
    seq2seq.build_keras_model(_TINY)
    self.assertAllEqual(tf.keras.initializers.GlorotUniform()((3, 3)), first)

  def test_pack_inputs(self):
    x, y = seq2seq_inputs.pack_inputs(
        tf.ragged.constant([[5, 6, 7], [8]]),
        tf.ragged.constant([[9, 10], [11, 12, 13, 14]]),
        source_length=4, target_length=4,
    )
    self.assertAllEqual(x['encoder_token_ids'],
                        [[5, 6, 7, END], [8, END, 0, 0]])
    self.assertAllEqual(x['decoder_token_ids'],
                        [[START, 9, 10, 0], [START, 11, 12, 13]])
    self.assertAllEqual(y, [[9, 10, END, 0], [11, 12, 13, END]])
    for t in (x['encoder_token_ids'], x['decoder_token_ids'], y):
      self.assertEqual(t.dtype, tf.int32)


  @parameterized.named_parameters(('eager', False), ('in_dataset_map', True))
  def test_trim_padding(self, in_dataset):
    x, y = seq2seq_inputs.pack_inputs(
        tf.ragged.constant([[5, 6], [8]]),
        tf.ragged.constant([[9, 10], [11]]),
        source_length=6, target_length=7,
    )
    if in_dataset:
      x, y = next(iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
                       .map(seq2seq_inputs.trim_padding)))
    else:
      x, y = seq2seq_inputs.trim_padding(x, y)
    # Longest source: 5 6 END (3 columns); longest target: START 9 10 and
    # 9 10 END (3 columns).
    self.assertAllEqual(x['encoder_token_ids'], [[5, 6, END], [8, END, 0]])
    self.assertAllEqual(x['decoder_token_ids'],
                        [[START, 9, 10], [START, 11, 0]])
    self.assertAllEqual(y, [[9, 10, END], [11, END, 0]])

  def test_trimmed_batch_has_the_same_loss(self):
    model = seq2seq.build_keras_model(_TINY)
    _randomize(model, 3)
    x = _inputs(np.pad(_ENCODER_IDS, [[0, 0], [0, 3]]),
                np.pad(_DECODER_IDS, [[0, 0], [0, 3]]))
    y = np.array([[4, 5, END, 0, 0, 0, 0, 0],
                  [6, 7, 8, 9, END, 0, 0, 0],
                  [END, 0, 0, 0, 0, 0, 0, 0]], _I32)
    trimmed_x, trimmed_y = seq2seq_inputs.trim_padding(x, tf.constant(y))
    self.assertLess(trimmed_y.shape[1], y.shape[1])
    loss = seq2seq_loss.masked_loss()
    self.assertAllClose(loss(trimmed_y, model(trimmed_x)), loss(y, model(x)),
                        atol=1e-6)
  def test_input_spec(self):
    ids = tf.TensorSpec([None, None], tf.int32)
    expected = (collections.OrderedDict(encoder_token_ids=ids,
                                        decoder_token_ids=ids), ids)
    self.assertEqual(seq2seq_inputs.input_spec(), expected)
    self.assertEqual(seq2seq_model_fn.build_model_fn(_TINY)().input_spec,
                     expected)


# A copying model: K = 15 output words of V = 23, S_max = 9 source positions,
# so 24 output ids (15 words, copy ids 15..23 = source positions 0..8).
_TINY_COPY = dataclasses.replace(_TINY, copy_from_source=True,
                                 output_vocabulary_size=15)
# Row 0: an output word (5), an input word twice (17), unknown words with
# copy ids 23 + position (25 at 2, then again at 4); row 1 is `_ENCODER_IDS`'.
_COPY_ENCODER_IDS = np.array([[5, 17, 25, 17, 25, 8, END, 0, 0],
                              [9, 10, 11, 12, 13, 14, END, 0, 0]], _I32)
# Copy ids: 15 + 1 (the input word at 1), 15 + 2 (the unknown word).
_COPY_DECODER_IDS = np.array([[START, 16, 17, 5, 0],
                              [START, 4, 15 + 5, 0, 0]], _I32)


class CopyModelExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(0, 1)
  def test_forward_pass_matches_numpy(self, seed):
    model = seq2seq.build_keras_model(_TINY_COPY)
    _randomize(model, seed)
    log_probs = model(_inputs(_COPY_ENCODER_IDS, _COPY_DECODER_IDS)).numpy()
    self.assertEqual(log_probs.shape, (2, 5, 24))
    self.assertAllClose(np.exp(log_probs).sum(-1), np.ones((2, 5)),
                        atol=1e-5)
    expected = _numpy_logits(model, _TINY_COPY, _COPY_ENCODER_IDS,
                             _COPY_DECODER_IDS)
    real = _COPY_DECODER_IDS != PAD
    reachable = expected > np.log(1e-20)
    self.assertAllClose(log_probs[real][reachable[real]],
                        expected[real][reachable[real]], atol=2e-4)

  def test_copy_probabilities_by_hand(self):
    # One row, K = 2 output words, S = 3 positions holding ids
    # [1 (an output word), 5 (unknown, first at 1), 5]; logits all 0 and
    # pointer [0, ln 2, 0]: the joint softmax is [1, 1, 1, 2, 1] / 6, so
    # id 1 gets 1/6 + 1/6 (its own and position 0's), id 0 1/6, copy id
    # 2 + 1 = 3 gets 2/6 + 1/6 (positions 1 and 2), copy ids 2 and 4 none.
    log_probs = seq2seq.copy_log_probs(
        tf.zeros([1, 1, 2]), tf.constant([[[0.0, np.log(2.0), 0.0]]]),
        tf.constant([[1, 5, 5]]), output_size=5)
    self.assertAllClose(np.exp(log_probs.numpy()[0, 0]),
                        [1 / 6, 2 / 6, 0, 3 / 6, 0], atol=1e-6)

  def test_greedy_decoding_matches_full_forward_passes(self):
    model = seq2seq.build_keras_model(_TINY_COPY)
    _randomize(model, 3, scale=1.0)
    greedy = seq2seq_decoding.greedy_decode(model, _COPY_ENCODER_IDS,
                                            max_length=6)
    self.assertAllClose(
        greedy.scores,
        seq2seq_decoding.sequence_log_probability(
            model, _COPY_ENCODER_IDS, greedy.token_ids), atol=1e-4)
    beams = seq2seq_decoding.beam_search_decode(
        model, _COPY_ENCODER_IDS, beam_size=2, max_length=6)
    self.assertAllGreaterEqual(
        beams.scores.numpy()[:, 0] - greedy.scores.numpy(), -1e-4)

  def test_learns_to_copy_unseen_words(self):
    # The task: repeat the source. Every source word is outside the
    # vocabulary (copy ids), so only the pointer can produce it; after
    # training, sources with unseen word patterns come back exactly.
    config = dataclasses.replace(
        _TINY_COPY, hidden_dim=32, intermediate_dim=64, num_heads=4,
        num_encoder_layers=1, max_source_length=6, max_target_length=6)
    model = seq2seq.build_keras_model(config)
    rng = np.random.default_rng(0)

    def batch(size):
      lengths = rng.integers(2, 5, size)
      source = np.zeros((size, 6), _I32)
      target = np.zeros((size, 6), _I32)
      labels = np.zeros((size, 6), _I32)
      for row, n in enumerate(lengths):
        # Distinct unknown words: copy id V + position.
        source[row, :n] = config.vocabulary_size + np.arange(n)
        source[row, n] = END
        copies = config.generated_size + np.arange(n)
        target[row, :n + 1] = [START, *copies]
        labels[row, :n + 1] = [*copies, END]
      return _inputs(source, target), labels

    optimizer = tf.keras.optimizers.Adam(3e-3)
    loss_fn = seq2seq_loss.masked_loss()

    @tf.function
    def step(x, y):
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      optimizer.apply_gradients(zip(
          tape.gradient(loss, model.trainable_variables),
          model.trainable_variables))

    for _ in range(300):
      step(*batch(32))
    x, y = batch(8)
    decoded = seq2seq_decoding.greedy_decode(
        model, x[seq2seq.ENCODER_TOKEN_IDS], max_length=6).token_ids.numpy()
    width = decoded.shape[1]
    self.assertAllEqual(decoded, y[:, :width])


def _numpy_cross_entropy(labels, logits):
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]


class LossAndMetricExecutionTest(tf.test.TestCase, parameterized.TestCase):

  _LABELS = np.array([[4, 5, 3, 0], [6, 3, 0, 0], [3, 0, 0, 0]], _I32)

  @parameterized.named_parameters(
      ('no_weights', None),
      ('example_weights', np.array([1.0, 2.0, 0.5], np.float32)),
      ('token_weights',
       np.arange(12, dtype=np.float32).reshape(3, 4) / 10.0),
  )
  def test_loss_matches_numpy(self, sample_weight):
    logits = np.random.default_rng(0).normal(size=(3, 4, 7)).astype(np.float32)
    mask = (self._LABELS != PAD).astype(np.float64)
    weights = mask if sample_weight is None else mask * (
        sample_weight if sample_weight.ndim == 2 else sample_weight[:, None])
    expected = (_numpy_cross_entropy(self._LABELS, logits) * weights).sum() / (
        weights.sum())
    loss = seq2seq_loss.masked_loss()(self._LABELS, logits, sample_weight)
    self.assertAllClose(loss, expected, atol=1e-6)
    if sample_weight is None:
      # Same value as Keras's loss ignoring the padding class (a mean over
      # the 6 real tokens, not the 12 positions).
      keras_loss = tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True, ignore_class=PAD)(self._LABELS, logits)
      self.assertAllClose(loss, keras_loss, atol=1e-6)

  def test_loss_of_a_batch_without_targets_is_zero(self):
    logits = np.ones((2, 3, 5), np.float32)
    self.assertEqual(
        float(seq2seq_loss.masked_loss()(np.zeros((2, 3), _I32), logits)), 0.0)

  def test_loss_config(self):
    loss = seq2seq_loss.MaskedSparseCategoricalCrossentropy(pad_id=7, name='l')
    restored = seq2seq_loss.MaskedSparseCategoricalCrossentropy.from_config(
        loss.get_config())
    self.assertEqual((restored.pad_id, restored.name), (7, 'l'))

  def test_token_accuracy_matches_numpy(self):
    rng = np.random.default_rng(1)
    metric = seq2seq_loss.MaskedTokenAccuracy()
    correct = total = 0
    for _ in range(3):
      logits = rng.normal(size=(3, 4, 7)).astype(np.float32)
      logits[..., PAD] = -10.0  # the argmax is never the padding id
      labels = self._LABELS.copy()
      labels[labels != PAD] = np.argmax(logits, -1)[labels != PAD]
      labels[0, 1] = (labels[0, 1] + 1) % 7 or 1  # one error
      metric.update_state(labels, logits)
      real = labels != PAD
      correct += np.sum((np.argmax(logits, -1) == labels) & real)
      total += real.sum()
    self.assertEqual((correct, total), (15, 18))
    self.assertAllClose(metric.result(), correct / total)
    restored = seq2seq_loss.MaskedTokenAccuracy.from_config(metric.get_config())
    self.assertEqual((restored.name, restored.pad_id), ('token_accuracy', 0))


class CheckpointExecutionTest(tf.test.TestCase):

  def test_save_and_load_give_the_same_logits(self):
    model = seq2seq.build_keras_model(_TINY)
    _randomize(model, 4)
    path = seq2seq.save_checkpoint(
        model, self.create_tempdir().full_path + '/ckpt')
    other_seed = seq2seq.Seq2SeqConfig(**{**_TINY.__dict__, 'seed': 9})
    loaded = seq2seq.build_keras_model(other_seed, checkpoint=path)
    inputs = _inputs(_ENCODER_IDS, _DECODER_IDS)
    self.assertAllEqual(loaded(inputs), model(inputs))
    weights = seq2seq_model_fn.load_model_weights(_TINY, path)
    variable_model = seq2seq_model_fn.build_model_fn(_TINY)()
    self.assertEqual([w.shape for w in weights.trainable],
                     [v.shape for v in variable_model.trainable_variables])
    for expected, value in zip(model.get_weights(), weights.trainable):
      self.assertAllEqual(value, expected)

  def test_mismatched_or_missing_checkpoint(self):
    path = seq2seq.save_checkpoint(seq2seq.build_keras_model(_TINY),
                                   self.create_tempdir().full_path + '/ckpt')
    wider = seq2seq.Seq2SeqConfig(**{**_TINY.__dict__, 'hidden_dim': 12})
    deeper = seq2seq.Seq2SeqConfig(**{**_TINY.__dict__,
                                      'num_decoder_layers': 2})
    for config in (wider, deeper):
      with self.assertRaisesRegex(errors.CheckpointError, 'ckpt'):
        seq2seq.build_keras_model(config, checkpoint=path)
    with self.assertRaisesRegex(errors.CheckpointError, 'missing'):
      seq2seq.build_keras_model(_TINY, checkpoint=path + '-missing')


# Decoding. A "bigram model" whose next-token distribution depends only on
# the previous token, one table per example: state [B, V, V] log-probs.

V_BIGRAM = 6  # 0 pad, 1 unk, 2 start, 3 end, 4 'a', 5 'b'
A, B = 4, 5


def _bigram_log_table(rows):
  """rows: {previous token: {next token: probability}} → [V, V] log-probs."""
  table = np.full((V_BIGRAM, V_BIGRAM), -1e9, np.float32)
  for previous in range(V_BIGRAM):
    for token, p in rows.get(previous, {END: 1.0}).items():
      table[previous, token] = np.log(p)
  return table


# Greedy takes 'a' (0.5), then 'b' (0.4), then end (0.9): p = 0.18. The best
# sequence is 'b', end: p = 0.4 * 0.9 = 0.36.
_GREEDY_TRAP = {START: {A: 0.5, B: 0.4, END: 0.1},
                A: {B: 0.4, END: 0.3, A: 0.3},
                B: {END: 0.9, A: 0.05, B: 0.05}}
# Here greedy is optimal: end at once, p = 0.6.
_EASY = {START: {END: 0.6, A: 0.3, B: 0.1}, A: {END: 1.0}, B: {END: 1.0}}


def _random_rows(seed):
  rng = np.random.default_rng(seed)
  return {previous: dict(zip((A, B, END), rng.dirichlet([1.0, 1.0, 1.0])))
          for previous in (START, A, B)}


def _bigram_step_fn(tokens, index, tables):
  del index
  return tf.gather(tables, tokens, batch_dims=1), tables


def _all_hypotheses(table, max_length):
  """Every complete output (ending with end, or max_length long), scored."""
  hypotheses = []
  for length in range(1, max_length + 1):
    for tokens in itertools.product((A, B, END), repeat=length):
      if END in tokens[:-1] or (tokens[-1] != END and length < max_length):
        continue
      previous = (START,) + tokens[:-1]
      score = sum(float(table[p, t]) for p, t in zip(previous, tokens))
      hypotheses.append((score, list(tokens) + [PAD] * (max_length - length)))
  return sorted(hypotheses, key=lambda h: -h[0])


def _python_greedy(table, max_length):
  tokens, score, previous = [], 0.0, START
  while len(tokens) < max_length and previous != END:
    token = int(np.argmax(table[previous]))
    score += float(table[previous, token])
    tokens.append(token)
    previous = token
  return tokens, score


class SearchExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _search(self, rows_list, beam_size, max_length):
    tables = tf.constant(np.stack([_bigram_log_table(r) for r in rows_list]))
    if beam_size is None:
      return seq2seq_decoding.greedy_search(
          _bigram_step_fn, tables, batch_size=len(rows_list),
          max_length=max_length)
    return seq2seq_decoding.beam_search(
        _bigram_step_fn, tables, batch_size=len(rows_list),
        beam_size=beam_size, max_length=max_length)

  def test_beam_search_beats_greedy_in_a_crafted_case(self):
    greedy = self._search([_GREEDY_TRAP, _EASY], None, max_length=5)
    self.assertAllEqual(greedy.token_ids, [[A, B, END], [END, PAD, PAD]])
    self.assertAllClose(greedy.scores, np.log([0.5 * 0.4 * 0.9, 0.6]))
    beam = self._search([_GREEDY_TRAP, _EASY], 2, max_length=5)
    # Stopped after 3 steps: all beams of both examples had ended.
    self.assertAllEqual(beam.token_ids, [[[B, END, PAD], [A, B, END]],
                                         [[END, PAD, PAD], [A, END, PAD]]])
    self.assertAllClose(beam.scores, np.log([[0.36, 0.18], [0.6, 0.3]]))
    self.assertGreater(beam.scores[0, 0], greedy.scores[0])

  @parameterized.parameters(0, 1, 2)
  def test_beam_of_one_is_greedy(self, seed):
    rows = [_random_rows(seed), _random_rows(seed + 10), _GREEDY_TRAP]
    greedy = self._search(rows, None, max_length=6)
    beam = self._search(rows, 1, max_length=6)
    self.assertAllEqual(beam.token_ids[:, 0], greedy.token_ids)
    self.assertAllClose(beam.scores[:, 0], greedy.scores)
    for i, r in enumerate(rows):
      tokens, score = _python_greedy(_bigram_log_table(r), 6)
      self.assertEqual(greedy.token_ids[i, :len(tokens)].numpy().tolist(),
                       tokens)
      self.assertAllClose(greedy.scores[i], score)

  @parameterized.parameters(3, 4, 5)
  def test_wide_beam_finds_the_best_hypotheses(self, seed):
    # With 3 real tokens and max_length 3, a beam of 9 keeps every prefix,
    # so its beams are exactly the 9 best of all 15 complete outputs.
    rows = [_random_rows(seed), _random_rows(seed + 10)]
    beam = self._search(rows, 9, max_length=3)
    for i, r in enumerate(rows):
      best = _all_hypotheses(_bigram_log_table(r), 3)[:9]
      self.assertAllClose(beam.scores[i], [score for score, _ in best],
                          atol=1e-5)
      self.assertAllEqual(beam.token_ids[i], [tokens for _, tokens in best])

  @parameterized.parameters(None, 1, 2)
  def test_never_generates_padding_unknown_or_start(self, beam_size):
    likes_specials = {START: {PAD: 0.3, 1: 0.25, START: 0.25, A: 0.2},
                      A: {PAD: 0.5, START: 0.3, END: 0.2}}
    output = self._search([likes_specials], beam_size, max_length=4)
    token_ids = output.token_ids if beam_size is None else output.token_ids[
        :, 0]
    self.assertAllEqual(token_ids[:, :2], [[A, END]])
    self.assertAllEqual(token_ids[:, 2:], np.zeros_like(token_ids[:, 2:]))
    # Scores are the model's log-probabilities (not renormalised).
    best = output.scores if beam_size is None else output.scores[:, 0]
    self.assertAllClose(best, np.log([0.2 * 0.2]))

  def test_stops_at_max_length(self):
    loop = {START: {A: 1.0}, A: {A: 1.0}}
    self.assertAllEqual(self._search([loop], None, 4).token_ids, [[A] * 4])
    self.assertAllEqual(self._search([loop], 3, 4).token_ids[:, 0], [[A] * 4])

  def test_invalid_beam_size(self):
    with self.assertRaisesRegex(ValueError, 'beam_size'):
      self._search([_EASY], 0, 3)


class ModelDecodingExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = seq2seq.build_keras_model(_TINY)
    # Larger weights make peaky distributions, so sequences end at
    # different steps.
    _randomize(cls.model, 11, scale=1.0)

  def _naive_greedy(self, encoder_ids, max_length):
    """Greedy decoding by a full forward pass per step (no cache)."""
    decoder_ids = np.full((len(encoder_ids), 1), START, _I32)
    finished = np.zeros(len(encoder_ids), bool)
    outputs = []
    for _ in range(max_length):
      logits = self.model(_inputs(encoder_ids, decoder_ids)).numpy()[:, -1]
      logits[:, [PAD, 1, START]] = -np.inf  # never generated
      tokens = np.where(finished, PAD, np.argmax(logits, -1)).astype(_I32)
      outputs.append(tokens)
      finished |= tokens == END
      decoder_ids = np.concatenate([decoder_ids, tokens[:, None]], axis=1)
      if finished.all():
        break
    return np.stack(outputs, axis=1)

  def test_cached_greedy_matches_full_forward_passes(self):
    greedy = seq2seq_decoding.greedy_decode(self.model, _ENCODER_IDS,
                                            max_length=8)
    self.assertAllEqual(greedy.token_ids, self._naive_greedy(_ENCODER_IDS, 8))
    self.assertAllClose(
        greedy.scores,
        seq2seq_decoding.sequence_log_probability(
            self.model, _ENCODER_IDS, greedy.token_ids), atol=1e-4)

  def test_beam_search(self):
    greedy = seq2seq_decoding.greedy_decode(self.model, _ENCODER_IDS,
                                            max_length=8)
    one = seq2seq_decoding.beam_search_decode(
        self.model, _ENCODER_IDS, beam_size=1, max_length=8)
    self.assertAllEqual(one.token_ids[:, 0], greedy.token_ids)
    self.assertAllClose(one.scores[:, 0], greedy.scores, atol=1e-5)
    beams = seq2seq_decoding.beam_search_decode(
        self.model, _ENCODER_IDS, beam_size=3, max_length=8)
    self.assertEqual(beams.token_ids.shape[:2], (3, 3))
    scores = beams.scores.numpy()
    self.assertAllEqual(scores, -np.sort(-scores, axis=1))
    for k in range(3):
      self.assertAllClose(
          scores[:, k],
          seq2seq_decoding.sequence_log_probability(
              self.model, _ENCODER_IDS, beams.token_ids[:, k]), atol=1e-4)

  @parameterized.parameters(1, 3)
  def test_compiled_decode_fn(self, beam_size):
    decode = seq2seq_decoding.make_decode_fn(self.model, max_length=8,
                                             beam_size=beam_size)
    expected = seq2seq_decoding.beam_search_decode(
        self.model, _ENCODER_IDS, beam_size=beam_size, max_length=8
    ).token_ids[:, 0]
    self.assertAllEqual(decode(_ENCODER_IDS), expected)

  @parameterized.parameters(1, 3)
  def test_decode_fn_with_a_shorter_max_length_gives_the_prefix(
      self, beam_size):
    decode = seq2seq_decoding.make_decode_fn(self.model, max_length=8,
                                             beam_size=beam_size)
    full = decode(_ENCODER_IDS).numpy()
    short = decode(_ENCODER_IDS, max_length=3).numpy()
    self.assertLessEqual(short.shape[1], 3)
    if beam_size == 1:  # Greedy steps do not depend on the horizon.
      self.assertAllEqual(short, full[:, :short.shape[1]])
    with self.assertRaisesRegex(ValueError, 'max_length must be in 1..8'):
      decode(_ENCODER_IDS, max_length=9)

  @parameterized.parameters(1, 3)
  def test_one_trace_serves_every_length(self, beam_size):
    decode = seq2seq_decoding.make_decode_fn(self.model, max_length=8,
                                             beam_size=beam_size)
    for length in (3, 8, 5):
      # The same ids as a search for that one length, run eagerly with the
      # length as a Python int (static shapes).
      expected = seq2seq_decoding.beam_search_decode(
          self.model, _ENCODER_IDS, beam_size=beam_size, max_length=length
      ).token_ids[:, 0]
      self.assertAllEqual(decode(_ENCODER_IDS, max_length=length), expected)
    self.assertEqual(decode.experimental_get_tracing_count(), 1)

  def test_max_length_beyond_positions(self):
    with self.assertRaisesRegex(ValueError, 'max_target_length=8'):
      seq2seq_decoding.greedy_decode(self.model, _ENCODER_IDS, max_length=9)


def _client_dataset(seed):
  rng = np.random.default_rng(seed)
  sources = [rng.integers(4, _TINY.vocabulary_size, n).tolist()
             for n in (3, 5, 6, 2)]
  targets = [rng.integers(4, _TINY.vocabulary_size, n).tolist()
             for n in (2, 4, 1, 5)]
  x, y = seq2seq_inputs.pack_inputs(tf.ragged.constant(sources),
                                    tf.ragged.constant(targets),
                                    source_length=7, target_length=6)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(2)


# `_TINY` with one encoder layer: what the federated tests check (types,
# seeded initial weights, a round's counts and loss over 23 ids) does not
# depend on the depth, and building a process traces every layer of the
# model several times.
_TINY_FL = dataclasses.replace(_TINY, num_encoder_layers=1)
_PROCESSES = {}


def _fl_process(algorithm):
  """The process of `algorithm` for `_TINY_FL`, built once (seconds)."""
  if algorithm not in _PROCESSES:
    _PROCESSES[algorithm] = algorithms.build_fl_process(
        seq2seq_model_fn.build_model_fn(_TINY_FL),
        algorithm=algorithm,
        weighting='lorar',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        proximal_strength=1e-4 if algorithm == 'fedprox' else 0.0,
    )
  return _PROCESSES[algorithm]


class FederatedExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters('fedavg', 'fedopt', 'fedprox')
  def test_one_round(self, algorithm):
    process = _fl_process(algorithm)
    ids = tff.TensorType(_I32, [None, None])
    tff.test.assert_types_equivalent(
        process.next.type_signature.parameter[1],
        tff.FederatedType(
            tff.SequenceType((collections.OrderedDict(
                encoder_token_ids=ids, decoder_token_ids=ids), ids)),
            tff.CLIENTS))
    keras_model = seq2seq.build_keras_model(_TINY_FL)
    weights_type = process.get_model_weights.type_signature.result
    self.assertEqual(
        [t.shape for t in weights_type.trainable],
        [tuple(v.shape) for v in keras_model.trainable_variables])
    state = process.initialize()
    initial = process.get_model_weights(state)
    # The TFF graph built the same seeded weights as eager Keras.
    for value, expected in zip(initial.trainable, keras_model.get_weights()):
      self.assertAllEqual(value, expected)

    output = process.next(state, [_client_dataset(0), _client_dataset(1)])
    train = output.metrics['client_work']['train']
    self.assertEqual(list(train),
                     ['token_accuracy', 'num_examples', 'num_batches', 'loss'])
    self.assertEqual((train['num_examples'], train['num_batches']), (8, 4))
    self.assertTrue(np.isfinite(train['loss']))
    # Random initial predictions over 23 ids: loss near log(23) = 3.1.
    self.assertBetween(train['loss'], 2.5, 3.8)
    self.assertBetween(train['token_accuracy'], 0.0, 1.0)
    new = process.get_model_weights(output.state)
    self.assertNotAllClose(new.trainable[0], initial.trainable[0])

  def test_starts_from_a_checkpoint(self):
    model = seq2seq.build_keras_model(_TINY_FL)
    _randomize(model, 5)
    path = seq2seq.save_checkpoint(
        model, self.create_tempdir().full_path + '/ckpt')
    process = _fl_process('fedavg')
    state = process.set_model_weights(
        process.initialize(),
        seq2seq_model_fn.load_model_weights(_TINY_FL, path))
    for value, expected in zip(process.get_model_weights(state).trainable,
                               model.get_weights()):
      self.assertAllEqual(value, expected)


def _imdb_pairs():
  """(question, canonical SQL) of imdb's folds 0-5, with values filled.

  Variable names (whole tokens) are replaced by the sentence's values, else
  the query's examples. Read from the JSON directly (not tff_nlp.data's
  readers).
  """
  with open(os.path.join(data_root.find_data_dir(), 'text2sql', 'imdb.json'),
            encoding='utf-8') as f:
    queries = json.load(f)

  def fill(text, values):
    names = '|'.join(
        re.escape(n) for n in sorted(values, key=len, reverse=True))
    return re.sub(rf'(?<![A-Za-z0-9_])(?:{names})(?![A-Za-z0-9_])',
                  lambda m: values[m.group(0)], text) if values else text

  pairs = []
  for query in queries:
    defaults = {v['name']: v['example'] for v in query['variables']}
    for sentence in query['sentences']:
      if sentence['question-split'] in '012345':
        values = {**defaults, **sentence['variables']}
        pairs.append((fill(sentence['text'], values),
                      fill(query['sql'][0], values)))
  return pairs


class OverfitExecutionTest(tf.test.TestCase):

  def test_tiny_model_memorises_eight_imdb_examples(self):
    start = time.perf_counter()
    pairs = _imdb_pairs()
    tokenizer = subword_tokenizer.SubwordTokenizer.train(
        [text for pair in pairs for text in pair], 1000)
    sql_lengths = tokenizer.tokenize([sql for _, sql in pairs]).row_lengths()
    chosen = [p for p, n in zip(pairs, sql_lengths.numpy()) if n <= 40][:8]
    self.assertLen(chosen, 8)
    x, y = seq2seq_inputs.pack_inputs(
        tokenizer.tokenize([q for q, _ in chosen]),
        tokenizer.tokenize([sql for _, sql in chosen]),
        source_length=32, target_length=48)
    config = seq2seq.Seq2SeqConfig(
        vocabulary_size=tokenizer.vocabulary_size(), num_encoder_layers=1,
        num_decoder_layers=1, num_heads=4, hidden_dim=64,
        intermediate_dim=128, dropout=0.0, max_source_length=32,
        max_target_length=48, seed=0)
    model = seq2seq.build_keras_model(config)
    model.compile(tf.keras.optimizers.Adam(3e-3),
                  loss=seq2seq_loss.masked_loss(),
                  metrics=[seq2seq_loss.MaskedTokenAccuracy()])
    history = model.fit(x, y, batch_size=8, epochs=150, shuffle=False,
                        verbose=0)
    self.assertLess(history.history['loss'][-1], 0.05)
    self.assertEqual(history.history['token_accuracy'][-1], 1.0)

    decode = seq2seq_decoding.make_decode_fn(model, max_length=48)
    predictions = [s.decode('utf-8') for s in tokenizer.detokenize(
        decode(x['encoder_token_ids'])).numpy()]
    exact_match = np.mean([p == sql for p, (_, sql) in zip(predictions,
                                                            chosen)])
    self.assertEqual(exact_match, 1.0, predictions)
    print(f'Overfit in {time.perf_counter() - start:.1f} s, final loss '
          f'{history.history["loss"][-1]:.5f}.')


if __name__ == '__main__':
  tf.test.main()
