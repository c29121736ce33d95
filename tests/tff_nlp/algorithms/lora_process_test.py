"""Tests of `LoraModelFn` and `build_lora_process`: types, bytes, numpy rounds.

The model is the linear regression of `linear_model` (y = x·W + b, MSE),
pre-trained weights W, b frozen, with a rank-2 adapter on W:
W' = W + s·A·B, A [3, 2], B [2, 1]. The numpy reference trains A and B by
SGD on each client (with FedProx's proximal term if asked) and weights the
deltas with `lorar_reference.client_weights` (num_examples, uniform,
loss_reduction, lorar).
"""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import lorar_reference
from tff_nlp import algorithms
from tff_nlp import analysis
from tff_nlp.algorithms import lora_process
from tff_nlp.models import lora
from tff_nlp.models import lora_model_fn as lora_model_fn_lib
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_loss
from tff_nlp.models import seq2seq_model_fn

RANK = 2
ALPHA = 3.0  # scale s = alpha / rank = 1.5
CONFIG = lora.LoraConfig(rank=RANK, alpha=ALPHA, targets='all_dense', seed=7)
BASE = [linear_model.INITIAL_KERNEL, linear_model.INITIAL_BIAS]


def _keras_model():
  return tf.keras.Sequential(
      [tf.keras.layers.Dense(1, input_shape=(linear_model.NUM_FEATURES,))])


def _wrap(keras_model):
  return tff.learning.models.from_keras_model(
      keras_model, loss=tf.keras.losses.MeanSquaredError(),
      input_spec=linear_model.INPUT_SPEC)


def _model_fn(config=CONFIG, base=BASE):
  return lora_model_fn_lib.LoraModelFn(_keras_model, config, base, _wrap)


def _build(model_fn=None, *, algorithm='fedavg', weighting='num_examples',
           proximal_strength=0.0, learning_rate=0.05):
  return lora_process.build_lora_process(
      model_fn or _model_fn(), algorithm=algorithm, weighting=weighting,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate),
      proximal_strength=proximal_strength)


def _train_client(a, b, client, proximal_strength):
  """SGD on A and B of one client (float64); W and the bias stay frozen."""
  w, bias = (v.astype(np.float64) for v in BASE)
  scale = ALPHA / RANK
  a_local, b_local = a.copy(), b.copy()
  losses = []
  with np.errstate(all='ignore'):
    for start in range(0, len(client.x), client.batch_size):
      xb = client.x[start:start + client.batch_size]
      yb = client.y[start:start + client.batch_size]
      residual = xb @ (w + scale * a_local @ b_local) + bias - yb
      losses.append(float(np.mean(residual**2)))
      grad_kernel = 2.0 / len(xb) * xb.T @ residual  # dL/dW', [3, 1]
      grad_a = scale * grad_kernel @ b_local.T + proximal_strength * (
          a_local - a)
      grad_b = scale * a_local.T @ grad_kernel + proximal_strength * (
          b_local - b)
      a_local = a_local - client.learning_rate * grad_a
      b_local = b_local - client.learning_rate * grad_b
  return lorar_reference.ClientRound(a - a_local, b - b_local, losses,
                                     len(client.x))


def _reference_round(a, b, clients, *, weighting, proximal_strength=0.0):
  rounds = [_train_client(a, b, c, proximal_strength) for c in clients]
  weights, _ = lorar_reference.client_weights(rounds, weighting)
  total = weights.sum()
  mean_a = sum(p * np.nan_to_num(r.delta_w) for p, r in zip(weights, rounds))
  mean_b = sum(p * np.nan_to_num(r.delta_b) for p, r in zip(weights, rounds))
  return a - mean_a / total, b - mean_b / total, rounds


class _Creation(tf.keras.Model):
  """Creates its second layer's weights first: weights order != creation."""

  def __init__(self):
    super().__init__()
    self.second = tf.keras.layers.Dense(2, name='second')
    self.first = tf.keras.layers.Dense(4, name='first')

  def call(self, x):
    return self.second(self.first(x))


def _creation_model():
  model = _Creation()
  model(tf.zeros([1, 3]))
  return model


class LoraModelFnTest(tf.test.TestCase, parameterized.TestCase):

  def test_keras_model_starts_from_base_in_weights_order(self):
    # `second` is listed first (attribute order) but built second.
    rng = np.random.default_rng(0)
    base = [rng.normal(size=w.shape).astype(np.float32)
            for w in _creation_model().weights]
    self.assertEqual([w.shape for w in base], [(4, 2), (2,), (3, 4), (4,)])
    model_fn = lora_model_fn_lib.LoraModelFn(
        _creation_model, lora.LoraConfig(rank=1, targets='all_dense'), base,
        _wrap)
    keras_model = model_fn.keras_model()
    frozen = [w for w in keras_model.weights
              if 'lora' not in w.name]
    for weight, value in zip(frozen, base):
      self.assertAllEqual(weight, value)
    # B = 0: the adapted model computes the base model.
    x = rng.normal(size=(5, 3)).astype(np.float32)
    expected = (x @ base[2] + base[3]) @ base[0] + base[1]
    self.assertAllClose(keras_model(x), expected, rtol=1e-5)

  def test_graph_mode_model_starts_from_base(self):
    # Inside a TFF computation the model is built in a graph: the base must
    # be its variables' initial values, not assignments nothing runs.
    model_fn = _model_fn()
    with tf.Graph().as_default() as graph:
      model = model_fn()
      keras_weights = model._model._keras_model.weights  # pylint: disable=protected-access
      with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        kernel, bias = session.run(keras_weights[:2])
    self.assertAllEqual(kernel, BASE[0])
    self.assertAllEqual(bias, BASE[1])

  def test_variables_split(self):
    model = _model_fn()()
    self.assertEqual([v.shape.as_list() for v in model.trainable_variables],
                     [[3, RANK], [RANK, 1]])
    self.assertEqual(model.non_trainable_variables, ())

  def test_parameter_count_and_base_bytes(self):
    model_fn = _model_fn()
    # Factors 3·2 + 2·1 = 8; base W 3 + bias 1 = 4, 16 bytes.
    self.assertEqual(model_fn.parameter_count.adapters, 8)
    self.assertEqual(model_fn.parameter_count.total, 12)
    self.assertEqual(model_fn.base_bytes, 16)

  def test_merged_model_folds_adapters(self):
    model_fn = _model_fn()
    a = np.arange(6, dtype=np.float32).reshape(3, 2) / 10
    b = np.array([[0.5], [-1.0]], np.float32)
    weights = tff.learning.models.ModelWeights(trainable=[a, b],
                                               non_trainable=[])
    merged = model_fn.merged_keras_model(weights)
    kernel, bias = merged.get_weights()
    self.assertAllClose(kernel, BASE[0] + ALPHA / RANK * a @ b)
    self.assertAllEqual(bias, BASE[1])
    self.assertEqual(len(merged.trainable_weights), 2)
    self.assertAllEqual(model_fn.merged_keras_model().get_weights()[0],
                        BASE[0])

  @parameterized.named_parameters(
      ('count', [BASE[0]], r'has 1 arrays but the model .* has 2 weights'),
      ('shape', [BASE[0].T, BASE[1]], r'base_weights\[0\] is float32\[1, 3\]'),
      ('dtype', [BASE[0].astype(np.float64), BASE[1]],
       r'base_weights\[0\] is float64'),
  )
  def test_bad_base_weights(self, base, message):
    with self.assertRaisesRegex(ValueError, message):
      _model_fn(base=base)

  def test_model_that_changes_between_calls(self):
    calls = []

    def keras_model_fn():
      calls.append(None)
      width = 1 if len(calls) == 1 else 2
      return tf.keras.Sequential([tf.keras.layers.Dense(
          width, input_shape=(linear_model.NUM_FEATURES,))])

    model_fn = lora_model_fn_lib.LoraModelFn(keras_model_fn, CONFIG, BASE,
                                             _wrap)
    with self.assertRaisesRegex(ValueError, 'same model on every call'):
      model_fn.keras_model()

  def test_assign_refuses_other_weights(self):
    model_fn = _model_fn()
    weights = tff.learning.models.ModelWeights(
        trainable=[np.zeros([3, 1], np.float32)], non_trainable=[])
    with self.assertRaisesRegex(ValueError, '1 trainable and 0'):
      model_fn.assign_weights_to(weights, model_fn.keras_model())


class LoraProcessComputationTest(tf.test.TestCase):

  def test_initialize_type(self):
    process = _build()
    factors = tff.to_type(tff.learning.models.ModelWeights(
        trainable=[tff.TensorType(np.float32, [3, RANK]),
                   tff.TensorType(np.float32, [RANK, 1])],
        non_trainable=[]))
    state_type = process.initialize.type_signature.result.member
    self.assertTrue(state_type.global_model_weights.is_equivalent_to(factors))
    self.assertTrue(process.next.type_signature.parameter[1].is_equivalent_to(
        tff.FederatedType(tff.SequenceType(
            [tff.TensorType(np.float32, [None, 3]),
             tff.TensorType(np.float32, [None, 1])]), tff.CLIENTS)))

  def test_round_moves_only_factors(self):
    def model_bytes(process):
      (broadcast,) = [t for t in analysis.round_communication(
          process.next).transfers if t.intrinsic == 'federated_broadcast'
                      and 'trainable' in str(t.value_type)]
      return broadcast.fixed_bytes

    # LoRA: A 3·2 + B 2·1 floats = 32 bytes; full fine-tuning: W 3 + b 1.
    self.assertEqual(model_bytes(_build()), 32)
    full = algorithms.build_fl_process(
        linear_model.model_fn, algorithm='fedavg', weighting='num_examples',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05))
    self.assertEqual(model_bytes(full), 16)
    uploads = [t.fixed_bytes for t in analysis.round_communication(
        _build().next).transfers if t.direction == 'up']
    self.assertIn(32, uploads)  # the factor deltas, summed
    self.assertNotIn(16, uploads)

  def test_plain_model_fn_is_refused(self):
    with self.assertRaisesRegex(TypeError, 'must be a .*LoraModelFn'):
      lora_process.build_lora_process(
          linear_model.model_fn, algorithm='fedavg', weighting='uniform',
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05))


class LoraProcessExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('fedavg_num_examples', 'fedavg', 'num_examples', 0.0),
      ('fedavg_lorar', 'fedavg', 'lorar', 0.0),
      ('fedprox_uniform', 'fedprox', 'uniform', 0.5),
  )
  def test_two_rounds_match_numpy(self, algorithm, weighting, mu):
    process = _build(algorithm=algorithm, weighting=weighting,
                     proximal_strength=mu)
    clients = linear_model.three_clients()
    state = process.initialize()
    a, b = (np.asarray(v, np.float64)
            for v in process.get_model_weights(state).trainable)
    self.assertAllEqual(b, np.zeros([RANK, 1]))
    for _ in range(2):
      output = process.next(
          state, [linear_model.to_dataset(c) for c in clients])
      state = output.state
      a, b, rounds = _reference_round(a, b, clients, weighting=weighting,
                                      proximal_strength=mu)
      got_a, got_b = process.get_model_weights(state).trainable
      self.assertAllClose(got_a, a, rtol=1e-5, atol=1e-6)
      self.assertAllClose(got_b, b, rtol=1e-5, atol=1e-6)
    # The training loss is the base model's plus adapters: it proves the
    # clients computed with the frozen pre-trained W, b.
    losses = [l for r in rounds for l in r.batch_losses]
    sizes = [len(c.x[s:s + c.batch_size]) for c in clients
             for s in range(0, len(c.x), c.batch_size)]
    self.assertAllClose(output.metrics['client_work']['train']['loss'],
                        np.average(losses, weights=sizes), rtol=1e-5)
    self.assertGreater(np.abs(b).max(), 1e-3)

  def test_non_finite_client_does_not_poison_adapters(self):
    process = _build()
    clients = linear_model.three_clients()
    poisoned = lorar_reference.Client(
        np.full_like(clients[0].x, np.nan), clients[0].y, 3, 0.05)
    state = process.initialize()
    clean = process.next(state, [linear_model.to_dataset(c)
                                 for c in clients[1:]])
    mixed = process.next(state, [linear_model.to_dataset(c)
                                 for c in [poisoned] + clients[1:]])
    self.assertEqual(mixed.metrics['client_work']['weighting'][
        'num_non_finite_clients'], 1)
    for got, want in zip(process.get_model_weights(mixed.state).trainable,
                         process.get_model_weights(clean.state).trainable):
      self.assertAllClose(got, want, rtol=1e-6)


_TINY_SEQ2SEQ = seq2seq.Seq2SeqConfig(
    vocabulary_size=23, num_encoder_layers=1, num_decoder_layers=1,
    num_heads=2, hidden_dim=8, intermediate_dim=16, dropout=0.0,
    max_source_length=6, max_target_length=5, seed=5)


def _seq2seq_client_data():
  encoder = np.array([[5, 6, 7, 3, 0, 0], [9, 10, 11, 12, 13, 3]], np.int32)
  decoder = np.array([[2, 4, 5, 0, 0], [2, 6, 7, 8, 9]], np.int32)
  labels = np.array([[4, 5, 3, 0, 0], [6, 7, 8, 9, 3]], np.int32)
  x = collections.OrderedDict([(seq2seq.ENCODER_TOKEN_IDS, encoder),
                               (seq2seq.DECODER_TOKEN_IDS, decoder)])
  return tf.data.Dataset.from_tensor_slices((x, labels)).batch(1)


class Seq2SeqLoraExecutionTest(tf.test.TestCase):
  """The Transformer of `seq2seq` (keras-nlp layers) from a checkpoint.

  One process (building one traces the model, most of the test's time):
  its first round starts from the checkpoint, and its trained adapters
  merge into an exported plain model.
  """

  def test_round_starts_from_checkpoint_and_exports_merged(self):
    # A "pre-trained" checkpoint: the model of another seed.
    pretrained = seq2seq.build_keras_model(
        seq2seq.Seq2SeqConfig(**{**_TINY_SEQ2SEQ.__dict__, 'seed': 11}))
    checkpoint = seq2seq.save_checkpoint(
        pretrained, self.create_tempdir().full_path + '/ckpt')
    # Keras references first: a model built before TFF traces one cannot be
    # called after (Keras 2's "invalid state").
    (x, y), = _seq2seq_client_data().take(1)
    loss = seq2seq_loss.masked_loss()
    checkpoint_loss = loss(y, pretrained(x))
    fresh_loss = loss(y, seq2seq.build_keras_model(_TINY_SEQ2SEQ)(x))
    (pair, _), = _seq2seq_client_data().unbatch().batch(2).take(1)
    checkpoint_outputs = pretrained(pair)
    # Every target the seq2seq model has: attention, feed-forward and the
    # tied token embedding (whose A starts at 0, as the kernels' B do).
    # text2sql_lora_test runs the default targets.
    model_fn = seq2seq_model_fn.build_lora_model_fn(
        _TINY_SEQ2SEQ, lora.LoraConfig(
            rank=2, seed=3,
            targets=('attention', 'feedforward', 'embedding')), checkpoint)
    process = lora_process.build_lora_process(
        model_fn, algorithm='fedavg', weighting='num_examples',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
        client_outputs=True)
    state = process.initialize()
    weights = process.get_model_weights(state)
    # The adapters of the token embedding [vocabulary, d] (first), attention
    # (4 projections x 3 attention layers) and feed-forward (2 x 2 layers):
    # 17 adapters, 34 factors.
    self.assertLen(weights.trainable, 34)
    self.assertEqual(
        [list(w.shape) for w in weights.trainable[:2]],
        [[_TINY_SEQ2SEQ.vocabulary_size, 2], [2, _TINY_SEQ2SEQ.hidden_dim]])
    self.assertEqual(weights.non_trainable, ())

    output = process.next(state, [_seq2seq_client_data()])
    (client,) = output.client_outputs
    # B = 0: the first batch's loss is the checkpoint's (computed by Keras,
    # outside TFF), not the freshly initialised model's.
    self.assertAllClose(client['first_batch_loss'], checkpoint_loss,
                        rtol=1e-5)
    self.assertNotAllClose(client['first_batch_loss'], fresh_loss, rtol=1e-3)

    trained = process.get_model_weights(output.state)
    adapted = model_fn.keras_model()
    model_fn.assign_weights_to(trained, adapted)
    merged = model_fn.merged_keras_model(trained)
    self.assertAllClose(merged(pair), adapted(pair), atol=1e-5)
    self.assertNotAllClose(merged(pair), checkpoint_outputs, atol=1e-4)
    # The export loads into a plain model.
    path = seq2seq.save_checkpoint(
        merged, self.create_tempdir().full_path + '/merged')
    self.assertAllClose(
        seq2seq.build_keras_model(_TINY_SEQ2SEQ, path)(pair), adapted(pair),
        atol=1e-5)


if __name__ == '__main__':
  tf.test.main()
