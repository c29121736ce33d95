"""Tests of `lora`: LoRA adapters on Keras models, against references.

References: numpy computations of Dense and EinsumDense layers with the
effective kernel W + (alpha / r) A @ B, the variable lists and parameter
counts derived by hand for a tiny seq2seq model, the chain rule for the
first gradient of B (from the gradient of the plain model's kernels), and
the plain model's outputs.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.models import lora
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_inputs
from tff_nlp.models import seq2seq_loss

_I32 = np.int32
# d = 16, 2 heads of 8, d_ff = 32, one encoder and one decoder layer.
_TINY = seq2seq.Seq2SeqConfig(
    vocabulary_size=50, num_encoder_layers=1, num_decoder_layers=1,
    num_heads=2, hidden_dim=16, intermediate_dim=32, dropout=0.0,
    max_source_length=8, max_target_length=8, seed=4)
_INPUTS = {
    seq2seq.ENCODER_TOKEN_IDS: np.array([[5, 6, 7, 8, 0],
                                         [9, 10, 11, 12, 13]], _I32),
    seq2seq.DECODER_TOKEN_IDS: np.array([[2, 14, 15, 0],
                                         [2, 16, 17, 18]], _I32),
}

# Target kernels of the tiny model, by hand, in the model's (depth-first)
# order. An encoder layer: self-attention q, k, v, output; feed-forward
# intermediate, output. A decoder layer: self-attention, cross-attention,
# feed-forward.
_ATTENTION = ['query', 'key', 'value', 'attention_output']
_ATTENTION_KERNELS = (
    [f'encoder_layer_0/self_attention_layer/{n}' for n in _ATTENTION]
    + [f'decoder_layer_0/self_attention/{n}' for n in _ATTENTION]
    + [f'decoder_layer_0/cross_attention/{n}' for n in _ATTENTION])
_FEEDFORWARD_KERNELS = [
    f'{layer}/feedforward_{n}_dense' for layer in ('encoder_layer_0',
                                                  'decoder_layer_0')
    for n in ('intermediate', 'output')]
# (d_in, d_out) of each: q/k/v [16, 2, 8] and output [2, 8, 16] are 16 x 16;
# feed-forward 16 x 32 and 32 x 16.
_ATTENTION_SHAPE = (16, 16)
_FEEDFORWARD_SHAPES = [(16, 32), (32, 16)] * 2
# 2 + 3 LayerNorms in the layers, and the encoder's and decoder's output
# LayerNorms: gamma and beta each.
_LAYER_NORM_WEIGHTS = 2 * (2 + 3 + 2)
# All weights of the tiny model: token and 2 position embeddings; an encoder
# layer's 4 projections (kernel, bias), 2 LayerNorms, 2 Dense (16); a decoder
# layer's 8 projections, 3 LayerNorms, 2 Dense (26); 2 output LayerNorms.
_MODEL_WEIGHTS = 3 + 16 + 26 + 4
# Scalars of the tiny model: embeddings 50*16 + 8*16 * 2; per attention
# block 4 * (16*16 + 16); LayerNorm 32; Dense 16*32+32 and 32*16+16.
_ATTENTION_BLOCK = 4 * (16 * 16 + 16)
_FEEDFORWARD_BLOCK = 16 * 32 + 32 + 32 * 16 + 16
_MODEL_SCALARS = (50 * 16 + 2 * 8 * 16 + 3 * _ATTENTION_BLOCK
                  + 2 * _FEEDFORWARD_BLOCK + 7 * 32)


def _tiny_model():
  return seq2seq.build_keras_model(_TINY)


def _layers(model):
  return list(model._flatten_layers())  # pylint: disable=protected-access


def _randomize_b(adapters, seed):
  rng = np.random.default_rng(seed)
  for adapter in adapters:
    adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape) * 0.3)


def _linear_loss(model, seed):
  """A loss with a random (seeded) gradient for every logit of `_INPUTS`."""
  weights = np.random.default_rng(seed).normal(
      size=model(_INPUTS).shape).astype(np.float32)
  return lambda: tf.reduce_sum(model(_INPUTS) * weights)


def _values(variables):
  return [(v, v.numpy()) for v in variables]


class LoraComputationTest(tf.test.TestCase, parameterized.TestCase):
  """The structure: which variables are trainable, types, errors."""

  @parameterized.product(
      targets=[('attention',), ('feedforward',), ('attention', 'feedforward')],
      train_layer_norms=[False, True])
  def test_trainable_weights_are_the_adapters(self, targets,
                                              train_layer_norms):
    model = _tiny_model()
    all_weights = {id(w) for w in model.weights}
    adapters = lora.add_lora(model, lora.LoraConfig(
        rank=3, targets=targets, train_layer_norms=train_layer_norms))
    kernels = ((_ATTENTION_KERNELS if 'attention' in targets else [])
               + (_FEEDFORWARD_KERNELS if 'feedforward' in targets else []))
    shapes = (([_ATTENTION_SHAPE] * 12 if 'attention' in targets else [])
              + (_FEEDFORWARD_SHAPES if 'feedforward' in targets else []))
    # The model's depth-first order: in each Transformer layer attention
    # comes before the feed-forward block.
    order = [n for n in _ATTENTION_KERNELS[:4] + _FEEDFORWARD_KERNELS[:2]
             + _ATTENTION_KERNELS[4:] + _FEEDFORWARD_KERNELS[2:]
             if n in kernels]
    shapes = [shapes[kernels.index(n)] for n in order]
    self.assertLen(adapters, len(order))
    self.assertEqual(adapters, lora.adapters(model))

    trainable = model.trainable_weights
    layer_norms = _LAYER_NORM_WEIGHTS if train_layer_norms else 0
    self.assertLen(trainable, layer_norms + 2 * len(order))
    layer_norm_weights = [
        w for layer in _layers(model)
        if isinstance(layer, tf.keras.layers.LayerNormalization)
        for w in layer.weights]
    self.assertLen(layer_norm_weights, _LAYER_NORM_WEIGHTS)
    self.assertCountEqual([id(w) for w in trainable[:layer_norms]],
                          [id(w) for w in layer_norm_weights][:layer_norms])
    factors = trainable[layer_norms:]
    self.assertEqual(
        [(w.name, tuple(w.shape)) for w in factors],
        [(f'lora_adapter_{i}/lora_{ab}:0', shape)
         for i, (d_in, d_out) in enumerate(shapes)
         for ab, shape in (('a', (d_in, 3)), ('b', (3, d_out)))])
    self.assertEqual([id(w) for w in factors],
                     [id(w) for a in adapters for w in (a.lora_a, a.lora_b)])
    # Each adapter's input axes: the output projection [heads, head_dim,
    # d] contracts two.
    self.assertEqual(
        [a.input_axes for a in adapters],
        [(0, 1) if n.endswith('attention_output') else (0,) for n in order])
    # Every weight the model had is now non-trainable, except LayerNorms
    # if trained; and nothing is both.
    non_trainable = model.non_trainable_weights
    self.assertLen(non_trainable, _MODEL_WEIGHTS - layer_norms)
    self.assertEqual({id(w) for w in non_trainable}
                     | {id(w) for w in trainable[:layer_norms]}, all_weights)
    self.assertEmpty({id(w) for w in non_trainable}
                     & {id(w) for w in trainable})
    # The adapted kernels, by name: those `targets` names.
    adapted = [layer.name for layer in _layers(model)
               if type(layer).__name__.startswith('Lora')]
    self.assertEqual(adapted, [n.rsplit('/', 1)[1] for n in order])
    self.assertEqual(
        [(layer.name, adapter) for layer, adapter in
         lora.adapted_layers(model)],
        list(zip(adapted, adapters)))

  def test_all_dense_targets_every_dense_layer(self):
    inputs = tf.keras.Input([4])
    hidden = tf.keras.layers.Dense(6, name='first')(inputs)
    normed = tf.keras.layers.LayerNormalization(name='norm')(hidden)
    outputs = tf.keras.layers.EinsumDense('ab,bc->ac', [3], name='second')(
        normed)
    model = tf.keras.Model(inputs, outputs)
    adapters = lora.add_lora(model, lora.LoraConfig(
        rank=2, targets=['all_dense'], train_layer_norms=True))
    self.assertEqual([w.name for w in model.trainable_weights],
                     ['norm/gamma:0', 'norm/beta:0',
                      'lora_adapter_0/lora_a:0', 'lora_adapter_0/lora_b:0',
                      'lora_adapter_1/lora_a:0', 'lora_adapter_1/lora_b:0'])
    self.assertEqual([a.lora_b.shape.as_list() for a in adapters],
                     [[2, 6], [2, 3]])
    self.assertEqual([w.name for w in model.non_trainable_weights],
                     ['first/kernel:0', 'first/bias:0', 'second/kernel:0'])

  def test_tff_model_trains_only_the_adapters(self):
    config = lora.LoraConfig(rank=2, targets=['feedforward'])

    def model_fn():
      model = _tiny_model()
      lora.add_lora(model, config)
      return tff.learning.models.from_keras_model(
          model, loss=seq2seq_loss.masked_loss(),
          input_spec=seq2seq_inputs.input_spec())

    tff_model = model_fn()
    self.assertEqual(
        [(v.name, v.shape.as_list()) for v in tff_model.trainable_variables],
        [(f'lora_adapter_{i}/lora_{ab}:0', shape)
         for i, (d_in, d_out) in enumerate(_FEEDFORWARD_SHAPES)
         for ab, shape in (('a', [d_in, 2]), ('b', [2, d_out]))])
    self.assertLen(tff_model.non_trainable_variables, _MODEL_WEIGHTS)
    # The weights type a process's model weights have: the adapters only
    # are trainable (what clients train, aggregate and send).
    weights_type = tff.learning.models.weights_type_from_model(model_fn)
    self.assertEqual(
        [list(t.shape) for t in weights_type.trainable],
        [shape for d_in, d_out in _FEEDFORWARD_SHAPES
         for shape in ([d_in, 2], [2, d_out])])
    self.assertLen(weights_type.non_trainable, _MODEL_WEIGHTS)

  def test_merge_restores_the_plain_model(self):
    model = _tiny_model()
    names = [w.name for w in model.trainable_weights]
    classes = [type(layer) for layer in _layers(model)]
    lora.add_lora(model, lora.LoraConfig(rank=2, train_layer_norms=True))
    lora.merge_lora(model)
    self.assertEqual([w.name for w in model.trainable_weights], names)
    self.assertEmpty(model.non_trainable_weights)
    self.assertEqual([type(layer) for layer in _layers(model)], classes)
    self.assertEqual(lora.adapters(model), [])
    # A plain model again: it can be adapted anew.
    self.assertLen(lora.add_lora(model, lora.LoraConfig(rank=1)), 16)

  def test_embedding_target_adapts_the_token_table(self):
    model = _tiny_model()
    adapters = lora.add_lora(model, lora.LoraConfig(
        rank=3, targets=['embedding', 'feedforward']))
    # The token embedding [50, 16] is the model's first layer; the position
    # embeddings are no `Embedding` layers and stay plain.
    self.assertEqual(
        [layer.name for layer, _ in lora.adapted_layers(model)],
        ['token_embedding'] + [n.rsplit('/', 1)[1]
                               for n in _FEEDFORWARD_KERNELS])
    self.assertEqual(
        [(w.name, tuple(w.shape)) for w in model.trainable_weights],
        [(f'lora_adapter_{i}/lora_{ab}:0', shape)
         for i, (d_in, d_out) in enumerate([(50, 16)] + _FEEDFORWARD_SHAPES)
         for ab, shape in (('a', (d_in, 3)), ('b', (3, d_out)))])
    self.assertLen(model.non_trainable_weights, _MODEL_WEIGHTS)
    self.assertEqual(type(model.token_embedding).__name__,
                     'LoraReversibleEmbedding')
    self.assertEqual([a.embedding for a in adapters], [True] + [False] * 4)
    # The table is the effective one, a tensor; the variable stays W.
    self.assertIsInstance(model.token_embedding.embeddings, tf.Tensor)
    self.assertEqual(model.token_embedding.weights[0].name,
                     'seq2seq_transformer/token_embedding/embeddings:0')

  @parameterized.parameters(False, True)
  def test_adapter_config_round_trip(self, embedding):
    adapter = lora.LoraAdapter(input_axes=(0, 1), rank=3, scale=0.5,
                               seed=(7, 2), embedding=embedding, name='a')
    clone = lora.LoraAdapter.from_config(adapter.get_config())
    self.assertEqual(
        (clone.input_axes, clone.rank, clone.scale, clone.seed,
         clone.embedding, clone.name),
        ((0, 1), 3, 0.5, (7, 2), embedding, 'a'))

  @parameterized.named_parameters(
      ('rank_zero', dict(rank=0), 'rank must be a positive int'),
      ('rank_float', dict(rank=2.0), 'rank must be a positive int'),
      ('alpha_zero', dict(alpha=0.0), 'alpha must be a positive number'),
      ('alpha_nan', dict(alpha=float('nan')), 'alpha must be a positive'),
      ('unknown_target', dict(targets=['attention', 'mlp']),
       r"targets must be among .*unknown \['mlp'\]"),
      ('no_target', dict(targets=[]), 'targets must name one or more'),
      ('duplicate_target', dict(targets=['attention', 'attention']),
       'targets has duplicates'),
      ('layer_norms', dict(train_layer_norms='yes'),
       'train_layer_norms must be a bool'),
      ('seed', dict(seed=None), 'seed must be an int'),
  )
  def test_invalid_config(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      lora.LoraConfig(**kwargs)

  def test_config_defaults(self):
    config = lora.LoraConfig(targets='feedforward')
    self.assertEqual((config.rank, config.scale, config.targets,
                      config.train_layer_norms),
                     (8, 1.0, ('feedforward',), False))
    self.assertEqual(lora.LoraConfig(rank=4, alpha=16).scale, 4.0)

  def test_invalid_models(self):
    plain = tf.keras.Sequential([tf.keras.layers.Dense(3)])
    with self.assertRaisesRegex(ValueError, 'is not built'):
      lora.add_lora(plain, lora.LoraConfig())
    plain.build([None, 2])
    with self.assertRaisesRegex(
        ValueError, r"has no layer that targets=\('attention', "
        r"'feedforward'\) names"):
      lora.add_lora(plain, lora.LoraConfig())
    with self.assertRaisesRegex(ValueError, 'config must be a LoraConfig'):
      lora.add_lora(plain, {'rank': 2})
    with self.assertRaisesRegex(ValueError, 'has no LoRA adapters'):
      lora.merge_lora(plain)
    lora.add_lora(plain, lora.LoraConfig(targets=['all_dense']))
    with self.assertRaisesRegex(ValueError, 'already has LoRA adapters'):
      lora.add_lora(plain, lora.LoraConfig(targets=['all_dense']))
    # (Keras replaces the message of the property's error with its own.)
    with self.assertRaises(AttributeError):
      plain.layers[0].kernel = tf.Variable(tf.zeros([2, 3]))

    class OwnsAWeight(tf.keras.Model):

      def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(2)
        self.gain = tf.Variable(1.0)

      def call(self, x):
        return self.dense(x) * self.gain

    model = OwnsAWeight()
    model(tf.zeros([1, 3]))
    with self.assertRaisesRegex(ValueError, 'owns trainable weights outside'):
      lora.add_lora(model, lora.LoraConfig(targets=['all_dense']))
    self.assertLen(model.trainable_weights, 3)  # Untouched.

  def test_sequential_model(self):
    # A Sequential model does not track attributes as layers: the factors
    # must not join its layer stack.
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, name='one'),
                                 tf.keras.layers.Dense(2, name='two')])
    model.build([None, 4])
    names = [w.name for w in model.trainable_weights]
    adapters = lora.add_lora(model, lora.LoraConfig(
        rank=2, targets=['all_dense']))
    self.assertEqual([layer.name for layer in model.layers], ['one', 'two'])
    self.assertEqual(
        [id(w) for w in model.trainable_weights],
        [id(w) for a in adapters for w in (a.lora_a, a.lora_b)])
    self.assertEqual([w.name for w in model.non_trainable_weights], names)
    lora.merge_lora(model)
    self.assertEqual([w.name for w in model.trainable_weights], names)
    self.assertEmpty(model.non_trainable_weights)


def _np_product(adapter):
  """A @ B as a [d_in, d_out] numpy matrix."""
  return (adapter.lora_a.numpy().astype(np.float64)
          @ adapter.lora_b.numpy().astype(np.float64))


class LoraExecutionTest(tf.test.TestCase, parameterized.TestCase):
  """The numbers: outputs, gradients, steps, merges, counts."""

  def _set_random(self, layer, adapter, seed):
    rng = np.random.default_rng(seed)
    for w in layer.weights + adapter.weights:
      w.assign(rng.normal(size=w.shape).astype(np.float32))

  def _adapted_dense(self, alpha, seed, **layer_kwargs):
    """A model of one Dense(4) on 5 inputs, adapted with rank 2, randomised."""
    inputs = tf.keras.Input([5])
    layer = tf.keras.layers.Dense(4, **layer_kwargs)
    model = tf.keras.Model(inputs, layer(inputs))
    (adapter,) = lora.add_lora(model, lora.LoraConfig(
        rank=2, alpha=alpha, targets=['all_dense']))
    self._set_random(layer, adapter, seed)
    return model, layer, adapter

  def test_dense_matches_numpy(self):
    model, layer, adapter = self._adapted_dense(alpha=3.0, seed=0)
    x = np.random.default_rng(1).normal(size=[3, 5])
    kernel = layer.weights[0].numpy().astype(np.float64)
    expected = x @ (kernel + 1.5 * _np_product(adapter)) + layer.bias.numpy()
    self.assertAllClose(model(x.astype(np.float32)), expected, atol=1e-5)
    # The adapter changes the output (the reference is not the plain one).
    self.assertGreater(np.abs(expected - x @ kernel - layer.bias).max(), 0.1)

  def test_mixed_precision_dense(self):
    # The layer reads its float32 kernel as float16 in its call; the update
    # is added in float16.
    model, layer, adapter = self._adapted_dense(
        alpha=2.0, seed=4,
        dtype=tf.keras.mixed_precision.Policy('mixed_float16'))
    x = np.random.default_rng(5).normal(size=[3, 5])
    kernel = layer.weights[0].numpy().astype(np.float64)
    outputs = model(x.astype(np.float32))
    self.assertEqual(outputs.dtype, tf.float16)
    self.assertAllClose(outputs, x @ (kernel + _np_product(adapter))
                        + layer.bias.numpy(), atol=2e-2, rtol=1e-2)

  @parameterized.named_parameters(
      # A query projection: [d_model, heads, head_dim], input axis 0.
      ('query', 'abc,cde->abde', [3, 2, 3], [3, 5], [5, 2, 3]),
      # An attention output projection: [heads, head_dim, d_model], input
      # axes 0 and 1.
      ('output', 'abcd,cde->abe', [3, 5], [3, 2, 4], [2, 4, 5]),
      # A kernel whose input axis is not its first: transposed update.
      ('input_axis_last', 'ab,cb->ac', [3], [4], [3, 4]),
  )
  def test_einsum_dense_matches_numpy(self, equation, output_shape,
                                      input_shape, kernel_shape):
    inputs = tf.keras.Input(input_shape)
    layer = tf.keras.layers.EinsumDense(equation, output_shape,
                                        bias_axes=equation[-1])
    model = tf.keras.Model(inputs, layer(inputs))
    (adapter,) = lora.add_lora(model, lora.LoraConfig(
        rank=2, alpha=1.0, targets=['all_dense']))
    self._set_random(layer, adapter, 2)
    kernel = layer.weights[0].numpy().astype(np.float64)
    self.assertEqual(kernel.shape, tuple(kernel_shape))
    delta = _np_product(adapter)  # [d_in, d_out]
    if equation == 'abc,cde->abde':
      delta = delta.reshape(kernel_shape)
    elif equation == 'abcd,cde->abe':
      delta = delta.reshape(kernel_shape)  # (c, d) in, e out: row major.
    else:  # kernel [c, b], b the input: delta[c, b] = (A @ B)[b, c].
      delta = delta.T
    x = np.random.default_rng(3).normal(size=[2] + input_shape)
    expected = (np.einsum(equation, x, kernel + 0.5 * delta)
                + layer.bias.numpy())
    self.assertAllClose(model(x.astype(np.float32)), expected, atol=1e-5)
    self.assertGreater(
        np.abs(expected - np.einsum(equation, x, kernel) - layer.bias).max(),
        0.1)

  def test_outputs_unchanged_at_init_and_changed_by_b(self):
    model = _tiny_model()
    plain = model(_INPUTS).numpy()
    adapters = lora.add_lora(model, lora.LoraConfig(rank=4, alpha=8.0))
    self.assertAllEqual(model(_INPUTS), plain)
    for adapter in adapters:
      self.assertAllEqual(adapter.lora_b, np.zeros(adapter.lora_b.shape))
      # He-uniform A: within sqrt(6 / d_in), not all zero.
      limit = np.sqrt(6.0 / adapter.lora_a.shape[0])
      self.assertLessEqual(np.abs(adapter.lora_a.numpy()).max(), limit)
      self.assertGreater(np.abs(adapter.lora_a.numpy()).max(), limit / 4)
    _randomize_b(adapters, 0)
    adapted = model(_INPUTS).numpy()
    self.assertGreater(np.abs(adapted - plain).max(), 1e-2)
    # The same in a tf.function (graph mode).
    self.assertAllClose(tf.function(model)(_INPUTS), adapted, atol=1e-6)

  def test_initial_adapters_are_seeded(self):
    def factors(seed):
      model = _tiny_model()
      return [a.lora_a.numpy()
              for a in lora.add_lora(model, lora.LoraConfig(seed=seed))]

    first, again, other = factors(1), factors(1), factors(2)
    for a, b in zip(first, again):
      self.assertAllEqual(a, b)
    self.assertNotAllClose(first[0], other[0])
    # Each adapter draws its own A.
    self.assertNotAllClose(first[0], first[1])

    # The same A when the adapters are created in a graph (as TFF builds a
    # model_fn's variables).
    with tf.Graph().as_default() as graph:
      adapter = lora.add_lora(_tiny_model(), lora.LoraConfig(seed=1))[0]
      with tf.compat.v1.Session(graph=graph) as session:
        session.run(adapter.lora_a.initializer)
        self.assertAllEqual(session.run(adapter.lora_a), first[0])

  def test_first_gradient_of_b_follows_the_chain_rule(self):
    # At B = 0 the effective kernel is W, so dL/dB = scale * A^T dL/dW with
    # dL/dW the plain model's kernel gradient (reshaped to [d_in, d_out]),
    # and dL/dA = scale * dL/dW B^T = 0.
    model = _tiny_model()
    loss = _linear_loss(model, seed=5)
    layers = [layer for layer in _layers(model)
              if isinstance(layer, (tf.keras.layers.Dense,
                                    tf.keras.layers.EinsumDense))]
    with tf.GradientTape() as tape:
      plain_loss = loss()
    kernel_gradients = tape.gradient(plain_loss, [l.kernel for l in layers])
    adapters = lora.add_lora(model, lora.LoraConfig(rank=2, alpha=6.0))
    with tf.GradientTape() as tape:
      adapted_loss = loss()
    gradients = tape.gradient(adapted_loss, model.trainable_variables)
    self.assertAllClose(adapted_loss, plain_loss, atol=1e-5)
    self.assertLen(gradients, 2 * 16)
    by_layer = dict(zip(map(id, layers), kernel_gradients))
    for (layer, adapter), g_a, g_b in zip(lora.adapted_layers(model),
                                          gradients[::2], gradients[1::2]):
      self.assertIs(adapter, adapters.pop(0))
      g_w = by_layer[id(layer)].numpy()
      if layer.name == 'attention_output':  # [heads, head_dim, d]: 2 in.
        g_w = g_w.reshape(-1, g_w.shape[-1])
      else:
        g_w = g_w.reshape(g_w.shape[0], -1)
      self.assertAllClose(g_a, np.zeros(g_a.shape))
      self.assertAllClose(g_b, 3.0 * adapter.lora_a.numpy().T @ g_w,
                          atol=1e-5, rtol=1e-4)
      self.assertGreater(np.abs(g_b.numpy()).max(), 1e-6)

  def _assert_unchanged(self, variables, before):
    # (Variable names repeat across keras-nlp layers: compare by identity.)
    self.assertEqual([id(v) for v in variables], [id(v) for v, _ in before])
    for v, value in before:
      self.assertAllEqual(v, value, msg=v.name)

  def test_one_sgd_step_changes_only_the_adapters(self):
    model = _tiny_model()
    frozen_before = _values(model.weights)
    adapters = lora.add_lora(model, lora.LoraConfig(rank=2, alpha=4.0))
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
    loss_fn = seq2seq_loss.masked_loss()
    labels = np.array([[14, 15, 3, 0], [16, 17, 18, 3]], _I32)

    @tf.function
    def step():
      with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(_INPUTS, training=True))
      gradients = tape.gradient(loss, model.trainable_variables)
      optimizer.apply_gradients(zip(gradients, model.trainable_variables))
      return gradients

    a_before = [a.lora_a.numpy() for a in adapters]
    gradients = step()
    # Step 0: B = 0, so A gets no gradient (standard LoRA) and B does.
    for adapter, g_a, g_b, a in zip(adapters, gradients[::2],
                                    gradients[1::2], a_before):
      self.assertAllEqual(g_a, np.zeros(g_a.shape))
      self.assertGreater(np.abs(g_b.numpy()).max(), 0.0)
      self.assertAllEqual(adapter.lora_a, a)
      self.assertAllClose(adapter.lora_b, -0.1 * g_b.numpy(), atol=1e-7)
    self._assert_unchanged(model.non_trainable_weights, frozen_before)
    # Step 1: B != 0, so A has a gradient too.
    gradients = step()
    self.assertNotIn(None, gradients)
    for adapter, g_a, a in zip(adapters, gradients[::2], a_before):
      self.assertGreater(np.abs(g_a.numpy()).max(), 0.0)
      self.assertAllClose(adapter.lora_a, a - 0.1 * g_a.numpy(), atol=1e-6)
    self._assert_unchanged(model.non_trainable_weights, frozen_before)

  @parameterized.parameters(False, True)
  def test_merge_keeps_the_outputs(self, train_layer_norms):
    model = _tiny_model()
    adapters = lora.add_lora(model, lora.LoraConfig(
        rank=3, alpha=2.0, train_layer_norms=train_layer_norms))
    _randomize_b(adapters, 1)
    adapted = model(_INPUTS).numpy()
    # The seq2seq kernels' input axes lead: W + (alpha / r) A @ B reshaped.
    expected_kernels = []
    for layer, adapter in lora.adapted_layers(model):
      kernel = layer.weights[0]
      expected_kernels.append((kernel, kernel.numpy() + np.reshape(
          2.0 / 3.0 * _np_product(adapter), kernel.shape)))
    others = _values(w for w in model.non_trainable_weights
                     if all(w is not k for k, _ in expected_kernels))
    lora.merge_lora(model)
    self.assertAllClose(model(_INPUTS), adapted, atol=1e-5)
    self.assertLen(model.weights, _MODEL_WEIGHTS)
    for kernel, expected in expected_kernels:
      self.assertAllClose(kernel, expected, atol=1e-6)
    for w, value in others:
      self.assertAllEqual(w, value)
    # Export: a checkpoint of the merged model loads into a plain model
    # (every value consumed: no adapter is left in it).
    path = seq2seq.save_checkpoint(model, self.create_tempdir().full_path
                                   + '/merged')
    fresh = seq2seq.build_keras_model(_TINY, checkpoint=path)
    self.assertAllClose(fresh(_INPUTS), adapted, atol=1e-5)

  def test_embedding_matches_the_plain_model_with_the_effective_table(self):
    model = _tiny_model()
    plain = model(_INPUTS).numpy()
    (adapter,) = lora.add_lora(model, lora.LoraConfig(
        rank=2, alpha=5.0, targets=['embedding']))
    # PEFT's initialisation for embeddings: A = 0, B standard normal (its
    # 32 draws: not all small); the outputs are unchanged.
    self.assertAllEqual(adapter.lora_a, np.zeros([50, 2]))
    self.assertGreater(np.abs(adapter.lora_b.numpy()).max(), 1.0)
    self.assertAllEqual(model(_INPUTS), plain)
    adapter.lora_a.assign(
        np.random.default_rng(3).normal(size=[50, 2]).astype(np.float32)
        * 0.1)
    # Reference: the plain model (same seed, same weights) with the table
    # W + (5 / 2) A @ B, in the encoder's and decoder's lookups and the tied
    # output projection alike.
    table = (model.token_embedding.weights[0].numpy()
             + 2.5 * _np_product(adapter))
    reference = _tiny_model()
    reference.token_embedding.embeddings.assign(table)
    expected = reference(_INPUTS).numpy()
    self.assertGreater(np.abs(expected - plain).max(), 1e-2)
    self.assertAllClose(model(_INPUTS), expected, atol=1e-5)
    self.assertAllClose(tf.function(model)(_INPUTS), expected, atol=1e-5)
    lora.merge_lora(model)
    self.assertAllClose(model.token_embedding.embeddings, table, atol=1e-6)
    self.assertAllClose(model(_INPUTS), expected, atol=1e-5)

  def test_first_gradient_of_an_embedding_adapter(self):
    # At A = 0 the table is W: dL/dA = scale * dL/dW B^T with dL/dW the
    # plain model's table gradient (lookups and tied projection), dL/dB =
    # scale * A^T dL/dW = 0.
    model = _tiny_model()
    loss = _linear_loss(model, seed=6)
    with tf.GradientTape() as tape:
      plain_loss = loss()
    (g_w,) = tape.gradient(plain_loss, [model.token_embedding.embeddings])
    (adapter,) = lora.add_lora(model, lora.LoraConfig(
        rank=2, alpha=6.0, targets=['embedding']))
    with tf.GradientTape() as tape:
      adapted_loss = loss()
    g_a, g_b = tape.gradient(adapted_loss, model.trainable_variables)
    self.assertAllClose(adapted_loss, plain_loss, atol=1e-5)
    self.assertAllClose(g_b, np.zeros([2, 16]))
    self.assertAllClose(
        g_a, 3.0 * tf.convert_to_tensor(g_w).numpy()
        @ adapter.lora_b.numpy().T, atol=1e-5, rtol=1e-4)
    self.assertGreater(np.abs(g_a.numpy()).max(), 1e-6)

  def test_parameter_count(self):
    model = _tiny_model()
    self.assertEqual(lora.lora_parameter_count(model),
                     lora.LoraParameterCount(0, _MODEL_SCALARS,
                                             _MODEL_SCALARS))
    lora.add_lora(model, lora.LoraConfig(rank=4, train_layer_norms=True))
    # r (d_in + d_out) per kernel: 12 attention kernels 16 x 16, feed-forward
    # 16 x 32 twice and 32 x 16 twice.
    adapter_scalars = 4 * (12 * 32 + 4 * 48)
    count = lora.lora_parameter_count(model)
    self.assertEqual(count, lora.LoraParameterCount(
        adapters=adapter_scalars, trainable=adapter_scalars + 7 * 32,
        total=_MODEL_SCALARS + adapter_scalars))
    self.assertEqual(count.frozen, _MODEL_SCALARS - 7 * 32)
    self.assertAlmostEqual(count.trainable_fraction,
                           (adapter_scalars + 224)
                           / (_MODEL_SCALARS + adapter_scalars))


if __name__ == '__main__':
  tf.test.main()
