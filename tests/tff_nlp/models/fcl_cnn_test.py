"""Tests of the continual-learning text CNN (`fcl_cnn`) against numpy.

Tiny shapes throughout: vocabulary 30, length L = 8, D = 4, filter widths
(2, 3) with N = 3 filters each, so a bank's kernel has 2·4·3 = 24 (width 2)
and 3·4·3 = 36 (width 3) entries, 60 in all, and each mask m_t has 3 + 3 = 6
entries. The numpy references (`_reference_*`) work in float64 from a weight
dict (`FclTextCnn.weight_dict()` as numpy arrays).
"""

import dataclasses

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.models import fcl_cnn

_F32 = np.float32
_WIDTHS = (2, 3)
_BANK_SIZE = 2 * 4 * 3 + 3 * 4 * 3  # 60 kernel entries over both banks.
_MASK_SIZE = 3 + 3  # m_t entries over both banks.

# Post-padded ids (0 = padding) of three texts; the last has 2 real tokens,
# so the width-3 bank's windows all reach into the padding.
_IDS = np.array([
    [5, 9, 2, 17, 29, 3, 11, 4],
    [7, 7, 13, 1, 21, 0, 0, 0],
    [28, 6, 0, 0, 0, 0, 0, 0],
], np.int32)


def _spec(architecture, kb_size=2, foreign_branch=True, num_tasks=2,
          **kwargs):
  return fcl_cnn.FclCnnSpec(
      vocab_size=30, max_length=8, num_tasks=num_tasks, num_classes=3,
      architecture=architecture, kb_size=kb_size,
      foreign_branch=foreign_branch, embedding_dim=4, filter_widths=_WIDTHS,
      num_filters=3, seed=3, **kwargs)


# (name, architecture, kb_size, foreign_branch): every model variant.
_VARIANTS = (
    ('plain', 'plain', 0, True),
    ('fedweit', 'fedweit', 2, True),
    ('fedweit_no_kb', 'fedweit', 0, True),
    ('fedseit', 'fedseit', 2, True),
    ('fedseit_ablation', 'fedseit', 2, False),
)


# ---------------------------------------------------------------------------
# numpy references.


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _relu(x):
  return np.maximum(x, 0.0)


def _prune(a, threshold):
  return np.where(np.abs(a) > threshold, a, 0.0)


def _conv(x, kernel):
  """Valid 1-D convolution (cross-correlation, as tf.nn.conv1d), stride 1.

  [B, L, D] ⊛ [w, D, N] -> [B, L - w + 1, N]: output step i is
  Σ_{u<w, d} x[:, i + u, d] · kernel[u, d, :].
  """
  width = kernel.shape[0]
  steps = x.shape[1] - width + 1
  return np.stack([
      np.einsum('bud,udn->bn', x[:, i:i + width], kernel)
      for i in range(steps)], axis=1)


def _reference_kernel(w, width, task, threshold=0.0):
  """θ_t = B ⊙ σ(m_t) + A_t (pruned) [+ Σ_k α_{t,k} KB_k]."""
  p = f'conv{width}/'
  kernel = (w[p + 'base'] * _sigmoid(w[p + 'mask'][task])
            + _prune(w[p + 'adaptive'][task], threshold))
  if p + 'kb' in w:
    kernel = kernel + np.einsum('k,kudn->udn', w[p + 'attention'][task],
                                w[p + 'kb'])
  return kernel


def _reference_bank(x, kernel, bias):
  """maxpool_time ReLU(x ⊛ θ + b): [B, N]."""
  return _relu(_conv(x, kernel) + bias).max(axis=1)


def _reference_foreign(x, w, width, task):
  """z_f = ReLU(W_f,t [ẑ_1 ⊕ … ⊕ ẑ_K] + c_t), no ReLU on the ẑ_k:

  ẑ_k = maxpool_time(x ⊛ (α_{t,k} KB_k) + b_{t,k}).
  """
  p = f'foreign{width}/'
  kb, alpha, bias = w[p + 'kb'], w[p + 'attention'][task], w[p + 'bias'][task]
  pooled = [(_conv(x, alpha[k] * kb[k]) + bias[k]).max(axis=1)
            for k in range(len(kb))]
  return _relu(np.concatenate(pooled, axis=-1) @ w[p + 'projection'][task]
               + w[p + 'projection_bias'][task])


def _reference_logits(spec, w, ids, task, threshold=0.0):
  """The model's forward pass (training=False) in numpy."""
  x = w['embedding'][ids] * (ids != 0)[..., None]  # padding rows -> 0
  features = []
  for width in spec.filter_widths:
    if spec.decomposed:
      features.append(_reference_bank(
          x, _reference_kernel(w, width, task, threshold),
          w[f'conv{width}/bias'][task]))
    else:  # one kernel and bias for every task
      features.append(_reference_bank(x, w[f'conv{width}/base'],
                                      w[f'conv{width}/bias']))
  for width in spec.filter_widths:
    if f'foreign{width}/kb' in w:
      features.append(_reference_foreign(x, w, width, task))
  h = np.concatenate(features, axis=-1)  # dropout: identity at inference
  if 'augment/kernel' in w:
    h = _relu(h @ w['augment/kernel'][task] + w['augment/bias'][task])
  return h @ w['head/kernel'][task] + w['head/bias'][task]


def _reference_regularization(spec, w, task, snapshots, *, sparsity, drift,
                              weight_decay, first=None):
  """The formula of `fcl_cnn.regularization`'s docstring, term by term."""
  first = (task == 0) if first is None else first
  if not spec.decomposed:
    return weight_decay * sum(0.5 * np.sum(w[f'conv{width}/base']**2)
                              for width in spec.filter_widths)
  total = 0.0
  for width, snapshot in zip(spec.filter_widths, snapshots):
    p = f'conv{width}/'
    base, mask, adaptive = w[p + 'base'], w[p + 'mask'], w[p + 'adaptive']
    total += sparsity * sum(np.abs(adaptive[j]).sum()
                            for j in range(task + 1))  # current + past
    total += weight_decay * 0.5 * (
        np.sum(mask[task]**2) + np.sum(adaptive[task]**2)
        + (np.sum(base**2) if first else 0.0))
    for j in range(task):  # past tasks only
      local = base * _sigmoid(mask[j]) + adaptive[j]
      total += drift * 0.5 * np.sum((local - snapshot[j])**2)
  dense = [(f'foreign{width}/projection', f'foreign{width}/projection_bias')
           for width in spec.filter_widths if f'foreign{width}/kb' in w]
  if 'augment/kernel' in w:
    dense.append(('augment/kernel', 'augment/bias'))
  for keys in dense:
    for key in keys:
      v = w[key][task]
      total += sparsity * np.abs(v).sum() + weight_decay * 0.5 * np.sum(v**2)
  return total


# ---------------------------------------------------------------------------
# Helpers.


def _numpy_weights(model):
  return {k: v.numpy().astype(np.float64)
          for k, v in model.weight_dict().items()}


def _set_weights(model, weights):
  for key, variable in model.weight_dict().items():
    variable.assign(np.asarray(weights[key], _F32))


def _random_weights(model, seed=0):
  """Every weight (KB, biases, embedding row 0 included) drawn N(0, 0.5²)."""
  rng = np.random.default_rng(seed)
  weights = {k: rng.normal(scale=0.5, size=v.shape).astype(_F32)
             for k, v in model.weight_dict().items()}
  _set_weights(model, weights)
  return {k: v.astype(np.float64) for k, v in weights.items()}


def _logits(model, task, ids=_IDS):
  return model((tf.constant(ids), tf.constant(task, tf.int32)),
               training=False).numpy()


class DecomposedConv1DExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _layer(self, kb_size=2, decomposed=True):
    layer = fcl_cnn.DecomposedConv1D(3, 2, num_tasks=2, kb_size=kb_size,
                                     decomposed=decomposed, seed=1)
    layer(tf.zeros([1, 8, 4]), 0)  # builds it
    return layer

  def _hand_set(self, layer, seed=0):
    """Assigns random base, mask, adaptive, bias, attention and KB."""
    rng = np.random.default_rng(seed)
    values = {}
    for variable in layer.weights:
      name = variable.name.split('/')[-1].split(':')[0]
      values[name] = rng.normal(size=variable.shape).astype(_F32)
      variable.assign(values[name])
    return {k: v.astype(np.float64) for k, v in values.items()}

  def test_weights_and_shapes(self):
    layer = self._layer()
    self.assertEqual(
        [(v.name.split('/')[-1].split(':')[0], tuple(v.shape), v.trainable)
         for v in layer.weights],
        [('base', (2, 4, 3), True), ('mask', (2, 3), True),
         ('adaptive', (2, 2, 4, 3), True), ('bias', (2, 3), True),
         ('attention', (2, 2), True),
         ('kb', (2, 2, 4, 3), False)])  # the KB is written, not trained
    # A starts at 0 and the KB is empty.
    self.assertAllEqual(layer.adaptive, np.zeros([2, 2, 4, 3]))
    self.assertAllEqual(layer.kb, np.zeros([2, 2, 4, 3]))
    self.assertEqual([v.name.split('/')[-1].split(':')[0]
                      for v in self._layer(kb_size=0).weights],
                     ['base', 'mask', 'adaptive', 'bias'])
    self.assertEqual([v.name.split('/')[-1].split(':')[0]
                      for v in self._layer(decomposed=False).weights],
                     ['base', 'bias'])

  def test_kernel_by_hand(self):
    layer = self._layer()
    # B = 2 everywhere; m_1 = (0, ln 3, -ln 3), so σ(m_1) = (1/2, 3/4, 1/4)
    # per filter; A_1 = 0.1; KB_0 = 1, KB_1 = -3 with α_1 = (0.5, 0.25).
    # Filter n of θ_1 = 2σ(m_{1,n}) + 0.1 + 0.5·1 + 0.25·(−3)
    #                 = 2σ(m_{1,n}) − 0.15 = (0.85, 1.35, 0.35).
    # Task 0 (m_0 = 0, A_0 = 0, α_0 = 0): θ_0 = 2·½ = 1 everywhere.
    layer.base.assign(np.full([2, 4, 3], 2.0, _F32))
    layer.mask.assign(np.array([[0, 0, 0], [0, np.log(3), -np.log(3)]], _F32))
    layer.adaptive.assign(np.stack([np.zeros([2, 4, 3], _F32),
                                    np.full([2, 4, 3], 0.1, _F32)]))
    layer.attention.assign(np.array([[0, 0], [0.5, 0.25]], _F32))
    layer.kb.assign(np.stack([np.ones([2, 4, 3], _F32),
                              np.full([2, 4, 3], -3.0, _F32)]))
    self.assertAllClose(layer.kernel(1),
                        np.broadcast_to([0.85, 1.35, 0.35], [2, 4, 3]))
    self.assertAllClose(layer.kernel(0), np.ones([2, 4, 3]))
    # The local kernel leaves the KB out: 2σ(m_1) + 0.1 = (1.1, 1.6, 0.6).
    self.assertAllClose(layer.local_kernel(1),
                        np.broadcast_to([1.1, 1.6, 0.6], [2, 4, 3]))
    # Pruning at λ = 0.1 zeroes A_1 (|a| <= λ): θ_1 − 0.1.
    self.assertAllClose(layer.kernel(1, adaptive_threshold=0.1),
                        np.broadcast_to([0.75, 1.25, 0.25], [2, 4, 3]))

  @parameterized.named_parameters(('task0', 0), ('task1', 1))
  def test_kernel_matches_numpy(self, task):
    layer = self._layer()
    w = self._hand_set(layer)
    ref = {f'conv2/{k}': v for k, v in w.items()}
    self.assertAllClose(layer.kernel(task), _reference_kernel(ref, 2, task),
                        atol=1e-5, rtol=1e-5)
    # Pruning at 0.5 zeroes the entries of A_t with |a| <= 0.5 (about 38%
    # of N(0, 1) draws) and keeps the others.
    pruned = _prune(w['adaptive'][task], 0.5)
    self.assertTrue(0 < np.sum(pruned == 0) < pruned.size)
    self.assertAllClose(layer.kernel(task, adaptive_threshold=0.5),
                        _reference_kernel(ref, 2, task, threshold=0.5),
                        atol=1e-5, rtol=1e-5)

  @parameterized.named_parameters(
      ('kb_task0', 2, 0), ('kb_task1', 2, 1), ('no_kb_task1', 0, 1))
  def test_output_matches_numpy(self, kb_size, task):
    layer = self._layer(kb_size=kb_size)
    w = self._hand_set(layer, seed=kb_size + task)
    x = np.random.default_rng(7).normal(size=[3, 8, 4])
    ref = {f'conv2/{k}': v for k, v in w.items()}
    want = _reference_bank(x, _reference_kernel(ref, 2, task),
                           w['bias'][task])
    got = layer(tf.constant(x, tf.float32), task)
    self.assertEqual(got.shape, (3, 3))
    self.assertAllClose(got, want, atol=1e-5, rtol=1e-5)
    # The ReLU shows: a filter whose every window is negative pools to 0.
    layer.bias.assign(np.full([2, 3], -100.0, _F32))
    self.assertAllEqual(layer(tf.constant(x, tf.float32), task),
                        np.zeros([3, 3]))

  def test_output_with_pruning_threshold(self):
    layer = self._layer()
    w = self._hand_set(layer)
    x = np.random.default_rng(8).normal(size=[2, 8, 4])
    ref = {f'conv2/{k}': v for k, v in w.items()}
    want = _reference_bank(x, _reference_kernel(ref, 2, 1, threshold=0.5),
                           w['bias'][1])
    self.assertAllClose(
        layer(tf.constant(x, tf.float32), 1, adaptive_threshold=0.5), want,
        atol=1e-5, rtol=1e-5)

  def test_plain_bank_is_an_ordinary_convolution(self):
    layer = self._layer(decomposed=False)
    w = self._hand_set(layer)
    x = np.random.default_rng(9).normal(size=[3, 8, 4]).astype(_F32)
    conv = tf.keras.layers.Conv1D(3, 2, padding='valid', activation='relu')
    conv.build((None, 8, 4))
    conv.set_weights([w['base'].astype(_F32), w['bias'].astype(_F32)])
    keras_out = tf.reduce_max(conv(x), axis=1)
    for task in (0, 1):  # the task index does not matter
      got = layer(tf.constant(x), task)
      self.assertAllClose(got, keras_out, atol=1e-5, rtol=1e-5)
      self.assertAllClose(got, _reference_bank(x, w['base'], w['bias']),
                          atol=1e-5, rtol=1e-5)
      self.assertAllEqual(layer.kernel(task), w['base'].astype(_F32))

  def test_prune(self):
    # |a| <= 0.1 -> 0 (0.1 itself too, in float32 on both sides); larger kept.
    a = tf.constant([-0.2, -0.1, 0.0, 0.05, 0.1, 0.1001, 0.3], tf.float32)
    self.assertAllClose(fcl_cnn.prune(a, 0.1),
                        [-0.2, 0.0, 0.0, 0.0, 0.0, 0.1001, 0.3], atol=0)

  def test_get_config_round_trip(self):
    layer = fcl_cnn.DecomposedConv1D(3, 2, num_tasks=2, kb_size=2,
                                     decomposed=True, seed=4, name='conv2')
    config = layer.get_config()
    clone = fcl_cnn.DecomposedConv1D.from_config(config)
    for name in ('filters', 'kernel_size', 'num_tasks', 'kb_size',
                 'decomposed', 'seed', 'name'):
      self.assertEqual(getattr(clone, name), getattr(layer, name), msg=name)
    self.assertEqual(clone.get_config(), config)


class ForeignConv1DExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _layer(self):
    layer = fcl_cnn.ForeignConv1D(3, 2, num_tasks=2, kb_size=2, seed=1)
    layer(tf.zeros([1, 8, 4]), 0)
    return layer

  def test_weights_and_shapes(self):
    layer = self._layer()
    self.assertEqual(
        [(v.name.split('/')[-1].split(':')[0], tuple(v.shape), v.trainable)
         for v in layer.weights],
        [('attention', (2, 2), True), ('bias', (2, 2, 3), True),
         ('projection', (2, 6, 3), True),  # W_f,t: K·N = 6 -> N = 3
         ('projection_bias', (2, 3), True),
         ('kb', (2, 2, 4, 3), False)])

  @parameterized.named_parameters(('task0', 0), ('task1', 1))
  def test_output_matches_numpy(self, task):
    layer = self._layer()
    rng = np.random.default_rng(task)
    w = {}
    for variable in layer.weights:
      name = variable.name.split('/')[-1].split(':')[0]
      value = rng.normal(size=variable.shape).astype(_F32)
      variable.assign(value)
      w[f'foreign2/{name}'] = value.astype(np.float64)
    x = rng.normal(size=[3, 8, 4])
    got = layer(tf.constant(x, tf.float32), task)
    self.assertEqual(got.shape, (3, 3))
    self.assertAllClose(got, _reference_foreign(x, w, 2, task), atol=1e-5,
                        rtol=1e-5)

  def test_gradients_match_the_scaled_kernel_formula(self):
    # The layer scales after pooling; the formula scales the kernels
    # (ẑ_k = maxpool(x ⊛ (α_k KB_k) + b_k)). Same values, so the same
    # gradients for every weight and the input; α has both signs.
    layer = self._layer()
    rng = np.random.default_rng(7)
    for variable in layer.weights:
      variable.assign(rng.normal(size=variable.shape).astype(_F32))
    x = tf.constant(rng.normal(size=[3, 8, 4]), tf.float32)
    upstream = tf.constant(rng.normal(size=[3, 3]), tf.float32)
    layer.attention.assign(np.array([[0.3, -0.2], [0.8, -1.1]], _F32))
    task = 1

    def formula(x):
      pooled = [tf.reduce_max(
          tf.nn.conv1d(x, layer.attention[task, k] * layer.kb[k], 1, 'VALID')
          + layer.bias[task, k], axis=1) for k in range(2)]
      return tf.nn.relu(tf.concat(pooled, -1) @ layer.projection[task]
                        + layer.projection_bias[task])

    sources = [x] + layer.trainable_weights
    grads = []
    for fn in (lambda x: layer(x, task), formula):
      with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(fn(x) * upstream)
      grads.append(tape.gradient(loss, sources))
    for got, want in zip(*grads):
      self.assertAllClose(got, want, atol=1e-5, rtol=1e-5)

  def test_by_hand(self):
    layer = self._layer()
    # x = 1 everywhere, KB_k = k + 1 everywhere, α_1 = (1, 0.5): each window
    # of kernel k sums 2·4 = 8 entries, ẑ_0 = 8·1·1 + b = 8 + 1 = 9 and
    # ẑ_1 = 8·0.5·2 + b = 8 − 2 = 6 (biases b_{1,0} = 1, b_{1,1} = −2), so
    # [ẑ_0 ⊕ ẑ_1] = (9, 9, 9, 6, 6, 6). W_f,1 = 1/6 everywhere and c_1 =
    # (0, −10, 1): z_f = ReLU(45/6 + c) = ReLU(7.5, −2.5, 8.5) = (7.5, 0, 8.5).
    layer.kb.assign(np.stack([np.ones([2, 4, 3]), np.full([2, 4, 3], 2.0)]))
    layer.attention.assign(np.array([[0, 0], [1.0, 0.5]], _F32))
    layer.bias.assign(np.stack([np.zeros([2, 3]),
                                [[1.0] * 3, [-2.0] * 3]]).astype(_F32))
    layer.projection.assign(np.full([2, 6, 3], 1 / 6, _F32))
    layer.projection_bias.assign(np.array([[0, 0, 0], [0, -10, 1]], _F32))
    self.assertAllClose(layer(tf.ones([1, 8, 4]), 1), [[7.5, 0.0, 8.5]])

  def test_needs_a_knowledge_base(self):
    with self.assertRaisesRegex(ValueError, 'kb_size must be >= 1'):
      fcl_cnn.ForeignConv1D(3, 2, num_tasks=2, kb_size=0)

  def test_get_config_round_trip(self):
    layer = fcl_cnn.ForeignConv1D(3, 2, num_tasks=2, kb_size=2, seed=4)
    clone = fcl_cnn.ForeignConv1D.from_config(layer.get_config())
    self.assertEqual(clone.get_config(), layer.get_config())
    dense = fcl_cnn.TaskDense(5, num_tasks=2, activation='relu', seed=4)
    clone = fcl_cnn.TaskDense.from_config(dense.get_config())
    self.assertEqual(clone.get_config(), dense.get_config())
    self.assertIs(clone.activation, tf.keras.activations.relu)


class FclTextCnnExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('plain', 'plain', 0, True,
       ['embedding', 'conv2/base', 'conv2/bias', 'conv3/base', 'conv3/bias',
        'head/kernel', 'head/bias']),
      ('fedweit', 'fedweit', 2, True,
       ['embedding']
       + [f'conv{w}/{n}' for w in _WIDTHS for n in (
           'base', 'mask', 'adaptive', 'bias', 'attention', 'kb')]
       + ['head/kernel', 'head/bias']),
      ('fedweit_no_kb', 'fedweit', 0, True,
       ['embedding']
       + [f'conv{w}/{n}' for w in _WIDTHS for n in (
           'base', 'mask', 'adaptive', 'bias')]
       + ['head/kernel', 'head/bias']),
      ('fedseit', 'fedseit', 2, True,
       ['embedding']
       + [f'conv{w}/{n}' for w in _WIDTHS for n in (
           'base', 'mask', 'adaptive', 'bias')]
       + [f'foreign{w}/{n}' for w in _WIDTHS for n in (
           'attention', 'bias', 'projection', 'projection_bias', 'kb')]
       + ['augment/kernel', 'augment/bias', 'head/kernel', 'head/bias']),
      ('fedseit_ablation', 'fedseit', 2, False,
       ['embedding']
       + [f'conv{w}/{n}' for w in _WIDTHS for n in (
           'base', 'mask', 'adaptive', 'bias')]
       + ['augment/kernel', 'augment/bias', 'head/kernel', 'head/bias']),
  )
  def test_weight_keys(self, architecture, kb_size, foreign_branch, expected):
    spec = _spec(architecture, kb_size, foreign_branch)
    model = fcl_cnn.FclTextCnn(spec)
    self.assertEqual(list(model.weight_dict()), expected)
    self.assertEqual(fcl_cnn.weight_keys(spec), tuple(expected))

  @parameterized.named_parameters(
      # Local features 2 banks · 3 filters = 6; with the foreign branch the
      # augmentation maps 6 + 6 = 12 -> 6, in the ablation 6 -> 6.
      ('plain', 'plain', True, None, (2, 6, 3)),
      ('fedseit', 'fedseit', True, (2, 12, 6), (2, 6, 3)),
      ('fedseit_ablation', 'fedseit', False, (2, 6, 6), (2, 6, 3)),
  )
  def test_dense_shapes(self, architecture, foreign_branch, augment, head):
    model = fcl_cnn.FclTextCnn(_spec(architecture, 2, foreign_branch))
    weights = model.weight_dict()
    if augment is None:
      self.assertNotIn('augment/kernel', weights)
    else:
      self.assertEqual(tuple(weights['augment/kernel'].shape), augment)
    self.assertEqual(tuple(weights['head/kernel'].shape), head)
    self.assertEqual(tuple(weights['embedding'].shape), (30, 4))

  @parameterized.named_parameters(
      *[(f'{name}_task{task}', arch, kb, branch, task)
        for name, arch, kb, branch in _VARIANTS for task in (0, 1)])
  def test_forward_matches_numpy(self, architecture, kb_size, foreign_branch,
                                 task):
    spec = _spec(architecture, kb_size, foreign_branch)
    model = fcl_cnn.FclTextCnn(spec)
    w = _random_weights(model, seed=task)
    got = _logits(model, task)
    self.assertEqual(got.shape, (3, 3))
    self.assertAllClose(got, _reference_logits(spec, w, _IDS, task),
                        atol=1e-4, rtol=1e-4)
    # Inference with A pruned at |a| <= 0.3 (decomposed models only).
    model.adaptive_threshold = 0.3
    self.assertAllClose(
        _logits(model, task),
        _reference_logits(spec, w, _IDS, task,
                          threshold=0.3 if spec.decomposed else 0.0),
        atol=1e-4, rtol=1e-4)

  @parameterized.named_parameters(*[(v[0],) + v[1:] for v in _VARIANTS])
  def test_padding_embedding_is_ignored(self, architecture, kb_size,
                                        foreign_branch):
    model = fcl_cnn.FclTextCnn(_spec(architecture, kb_size, foreign_branch))
    _random_weights(model)
    before = _logits(model, 1)
    embedding = model.weight_dict()['embedding']
    embedding.assign(tf.tensor_scatter_nd_update(embedding, [[0]],
                                                 [[50.0] * 4]))
    self.assertAllClose(_logits(model, 1), before, atol=1e-6, rtol=0)

  @parameterized.named_parameters(*[(v[0],) + v[1:] for v in _VARIANTS])
  def test_tasks_use_their_own_head(self, architecture, kb_size,
                                    foreign_branch):
    model = fcl_cnn.FclTextCnn(_spec(architecture, kb_size, foreign_branch))
    _random_weights(model)
    task0, task1 = _logits(model, 0), _logits(model, 1)
    self.assertNotAllClose(task0, task1)
    # Changing task 1's head changes task 1's logits only.
    head = model.weight_dict()['head/bias']
    head.assign(head + np.array([[0, 0, 0], [1, 2, 3]], _F32))
    self.assertAllClose(_logits(model, 0), task0, atol=0, rtol=0)
    self.assertAllClose(_logits(model, 1), task1 + [1, 2, 3], atol=1e-5,
                        rtol=0)

  def test_dropout_only_in_training(self):
    spec = _spec('fedseit', dropout=0.5)
    model = fcl_cnn.FclTextCnn(spec)
    w = _random_weights(model)
    inputs = (tf.constant(_IDS), tf.constant(1, tf.int32))
    self.assertAllClose(model(inputs, training=False),
                        _reference_logits(spec, w, _IDS, 1), atol=1e-4,
                        rtol=1e-4)
    self.assertNotAllClose(model(inputs, training=True),
                           model(inputs, training=False))

  @parameterized.named_parameters(*[(v[0],) + v[1:] for v in _VARIANTS])
  def test_get_config_round_trip(self, architecture, kb_size, foreign_branch):
    spec = _spec(architecture, kb_size, foreign_branch)
    model = fcl_cnn.FclTextCnn(spec)
    clone = fcl_cnn.FclTextCnn.from_config(model.get_config())
    self.assertEqual(clone.spec, spec)
    self.assertIsInstance(clone.spec.filter_widths, tuple)
    # Seeded initialisers: the clone starts from the same weights.
    for (key, a), b in zip(model.weight_dict().items(),
                           clone.weight_dict().values()):
      self.assertAllEqual(a, b, msg=key)

  def test_seed_changes_initial_weights(self):
    a = fcl_cnn.FclTextCnn(_spec('fedseit'))
    b = fcl_cnn.FclTextCnn(dataclasses.replace(_spec('fedseit'), seed=4))
    self.assertNotAllClose(a.weight_dict()['conv2/base'],
                           b.weight_dict()['conv2/base'])


class KeysExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # The embedding and the banks' B; plain banks also share their bias.
      ('plain', 'plain', 0, True,
       ('embedding', 'conv2/base', 'conv2/bias', 'conv3/base', 'conv3/bias'),
       (), (), ()),
      ('fedweit', 'fedweit', 2, True,
       ('embedding', 'conv2/base', 'conv3/base'),
       ('conv2/adaptive', 'conv3/adaptive'), ('conv2/kb', 'conv3/kb'),
       ('conv2/attention', 'conv3/attention')),
      ('fedweit_no_kb', 'fedweit', 0, True,
       ('embedding', 'conv2/base', 'conv3/base'),
       ('conv2/adaptive', 'conv3/adaptive'), (), ()),
      ('fedseit', 'fedseit', 2, True,
       ('embedding', 'conv2/base', 'conv3/base'),
       ('conv2/adaptive', 'conv3/adaptive'), ('foreign2/kb', 'foreign3/kb'),
       ('foreign2/attention', 'foreign3/attention')),
      ('fedseit_ablation', 'fedseit', 2, False,
       ('embedding', 'conv2/base', 'conv3/base'),
       ('conv2/adaptive', 'conv3/adaptive'), (), ()),
  )
  def test_keys(self, architecture, kb_size, foreign_branch, shared, adaptive,
                kb, attention):
    spec = _spec(architecture, kb_size, foreign_branch)
    self.assertEqual(fcl_cnn.shared_keys(spec), shared)
    self.assertEqual(fcl_cnn.adaptive_keys(spec), adaptive)
    self.assertEqual(fcl_cnn.kb_keys(spec), kb)
    self.assertEqual(fcl_cnn.attention_keys(spec), attention)
    self.assertEqual(spec.uses_kb, bool(kb))
    self.assertEqual(spec.decomposed, architecture != 'plain')
    # Every key names a weight of the model.
    keys = fcl_cnn.weight_keys(spec)
    for key in shared + adaptive + kb + attention:
      self.assertIn(key, keys)

  def test_local_kernels(self):
    spec = _spec('fedweit')
    model = fcl_cnn.FclTextCnn(spec)
    w = _random_weights(model)
    kernels = fcl_cnn.local_kernels(
        {k: v.astype(_F32) for k, v in w.items()}, spec)
    self.assertLen(kernels, 2)
    for width, kernel in zip(_WIDTHS, kernels):
      p = f'conv{width}/'
      # θ*_j = B ⊙ σ(m_j) + A_j for j = 0, 1 (no KB term): [T, w, D, N].
      want = np.stack([w[p + 'base'] * _sigmoid(w[p + 'mask'][j])
                       + w[p + 'adaptive'][j] for j in range(2)])
      self.assertEqual(kernel.shape, (2, width, 4, 3))
      self.assertAllClose(kernel, want, atol=1e-6, rtol=1e-6)
      # The model's own local kernel of each task agrees.
      conv = model.convs[_WIDTHS.index(width)]
      for j in range(2):
        self.assertAllClose(kernel[j], conv.local_kernel(j), atol=1e-6)


class FclCnnSpecExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('architecture', dict(architecture='fedprox'), 'architecture must be'),
      ('vocab_size', dict(vocab_size=0), 'vocab_size must be positive'),
      ('max_length', dict(max_length=0), 'max_length must be positive'),
      ('num_tasks', dict(num_tasks=0), 'num_tasks must be positive'),
      ('num_classes', dict(num_classes=-1), 'num_classes must be positive'),
      ('embedding_dim', dict(embedding_dim=0),
       'embedding_dim must be positive'),
      ('num_filters', dict(num_filters=0), 'num_filters must be positive'),
      ('kb_size', dict(kb_size=-1), 'kb_size must be >= 0'),
      # Widths (2, 3): a length of 2 is shorter than the width-3 filter.
      ('too_short', dict(max_length=2), r'max_length \(2\) must be at least '
       r'the widest filter \(3\)'),
  )
  def test_invalid(self, change, message):
    fields = dict(vocab_size=30, max_length=8, num_tasks=2, num_classes=3,
                  architecture='fedseit', kb_size=2, embedding_dim=4,
                  filter_widths=_WIDTHS, num_filters=3)
    fields.update(change)
    with self.assertRaisesRegex(ValueError, message):
      fcl_cnn.FclCnnSpec(**fields)

  def test_defaults(self):
    spec = fcl_cnn.FclCnnSpec(vocab_size=30, max_length=8, num_tasks=2,
                              num_classes=3)
    # Kim's banks (spec §2) and FedSeIT by default; no KB unless asked.
    self.assertEqual(spec.filter_widths, (3, 4, 5))
    self.assertEqual(spec.architecture, 'fedseit')
    self.assertFalse(spec.uses_kb)
    self.assertEqual(spec.dropout, 0.3)


class RegularizationExecutionTest(tf.test.TestCase, parameterized.TestCase):
  """`fcl_cnn.regularization` with T = 3 tasks, so at task 1 there is one
  past task (0) and one future task (2)."""

  _COEFFICIENTS = dict(sparsity=0.01, drift=2.0, weight_decay=0.1)
  # A_j = a_j, m_j = j and θ*_j = B ⊙ σ(m_j) + A_j − δ_j everywhere.
  _A = (0.1, -0.2, 0.3)
  _DELTA = (0.5, 0.7, 0.9)

  def _hand_set_model(self, architecture, foreign_branch=True):
    """B = 1; A_j, m_j, θ*_j as above; per-task dense weights −0.1(t + 1).

    The heads are 100: they are not regularised.
    """
    spec = _spec(architecture, 2, foreign_branch, num_tasks=3)
    model = fcl_cnn.FclTextCnn(spec)
    w = {}
    for key, variable in model.weight_dict().items():
      shape = variable.shape
      if key.endswith('/base'):
        value = np.ones(shape)
      elif key.endswith('/adaptive'):
        value = np.stack([np.full(shape[1:], a) for a in self._A])
      elif key.endswith('/mask'):
        value = np.stack([np.full(shape[1:], j) for j in range(3)])
      elif key.startswith(('foreign', 'augment')) and not key.endswith(
          ('/kb', '/attention')):
        value = np.stack([np.full(shape[1:], -0.1 * (t + 1))
                          for t in range(3)])
      elif key.startswith('head'):
        value = np.full(shape, 100.0)
      else:
        value = np.random.default_rng(0).normal(size=shape)
      w[key] = value
    _set_weights(model, w)
    w = _numpy_weights(model)
    snapshots = []
    if spec.decomposed:
      for width in _WIDTHS:
        p = f'conv{width}/'
        snapshots.append(np.stack([
            w[p + 'base'] * _sigmoid(w[p + 'mask'][j]) + w[p + 'adaptive'][j]
            - self._DELTA[j] for j in range(3)]))
    return spec, model, w, snapshots

  def _regularization(self, model, task, snapshots, **kwargs):
    coefficients = dict(self._COEFFICIENTS)
    coefficients.update(kwargs)
    return float(fcl_cnn.regularization(
        model, tf.constant(task, tf.int32),
        [tf.constant(s, tf.float32) for s in snapshots], **coefficients))

  @parameterized.named_parameters(
      # fedweit, 60 kernel entries, 6 mask entries, λ1 = 0.01, wd = 0.1,
      # λ2 = 2 (the KB is not regularised):
      # t = 0: L1 60·|0.1| = 6; wd ½(‖m_0‖² + ‖A_0‖² + ‖B‖²)
      #        = ½(0 + 60·0.01 + 60) = 30.3; no past task, no drift.
      #        0.01·6 + 0.1·30.3 = 3.09.
      ('fedweit_task0', 'fedweit', True, 0, 3.09),
      # t = 1: L1 60·(0.2 + 0.1) = 18; wd ½(6·1² + 60·0.04) = 4.2 (no B);
      #        drift over j = 0 only: ½·60·0.5² = 7.5 (δ_1, δ_2 unused).
      #        0.01·18 + 0.1·4.2 + 2·7.5 = 0.18 + 0.42 + 15 = 15.6.
      ('fedweit_task1', 'fedweit', True, 1, 15.6),
      # t = 2: L1 60·(0.3 + 0.1 + 0.2) = 36; wd ½(6·4 + 60·0.09) = 14.7;
      #        drift ½·60·(0.5² + 0.7²) = 22.2.
      #        0.36 + 1.47 + 44.4 = 46.23.
      ('fedweit_task2', 'fedweit', True, 2, 46.23),
      # fedseit adds task t's dense weights, all −0.1(t + 1) = −0.2 at t = 1:
      # W_f,1 2·(6·3) = 36, c_1 2·3 = 6, W_c,1 12·6 = 72, c 6: 120 entries.
      # L1 0.2·120 = 24, wd ½·0.04·120 = 2.4: 15.6 + 0.24 + 0.24 = 16.08.
      ('fedseit_task1', 'fedseit', True, 1, 16.08),
      # At t = 0 (−0.1): 3.09 + 0.01·12 + 0.1·½·0.01·120 = 3.09 + 0.12 +
      # 0.06 = 3.27.
      ('fedseit_task0', 'fedseit', True, 0, 3.27),
      # The ablation has no W_f; W_c,1 6·6 = 36 and c 6: 42 entries.
      # 15.6 + 0.01·0.2·42 + 0.1·½·0.04·42 = 15.6 + 0.084 + 0.084 = 15.768.
      ('fedseit_ablation_task1', 'fedseit', False, 1, 15.768),
      # plain: wd ½‖B‖² = 0.1·½·60 = 3, whatever the task.
      ('plain_task0', 'plain', True, 0, 3.0),
      ('plain_task2', 'plain', True, 2, 3.0),
  )
  def test_by_hand(self, architecture, foreign_branch, task, expected):
    spec, model, w, snapshots = self._hand_set_model(architecture,
                                                     foreign_branch)
    self.assertAllClose(self._regularization(model, task, snapshots),
                        expected, atol=1e-4, rtol=1e-5)
    self.assertAllClose(
        _reference_regularization(spec, w, task, snapshots,
                                  **self._COEFFICIENTS),
        expected, atol=1e-4, rtol=1e-5)

  def test_terms_by_hand(self):
    _, model, _, snapshots = self._hand_set_model('fedweit')
    # One coefficient at a time, task 1 (see test_by_hand).
    self.assertAllClose(self._regularization(
        model, 1, snapshots, sparsity=1.0, drift=0.0, weight_decay=0.0), 18.0)
    self.assertAllClose(self._regularization(
        model, 1, snapshots, sparsity=0.0, drift=1.0, weight_decay=0.0), 7.5)
    self.assertAllClose(self._regularization(
        model, 1, snapshots, sparsity=0.0, drift=0.0, weight_decay=1.0), 4.2)
    # is_first_task overrides t == 0: ½‖B‖² = 30 more at task 1.
    self.assertAllClose(float(fcl_cnn.regularization(
        model, tf.constant(1), [tf.constant(s, tf.float32)
                                for s in snapshots],
        sparsity=0.0, drift=0.0, weight_decay=1.0,
        is_first_task=tf.constant(True))), 34.2)
    # Drift: only the past task's snapshot counts. Moving θ*_1 and θ*_2 does
    # not change it; moving θ*_0 to the local kernel removes it.
    moved = [s.copy() for s in snapshots]
    for s in moved:
      s[1:] += 5.0
    self.assertAllClose(self._regularization(
        model, 1, moved, sparsity=0.0, drift=1.0, weight_decay=0.0), 7.5)
    for s in moved:
      s[0] += self._DELTA[0]
    self.assertAllClose(self._regularization(
        model, 1, moved, sparsity=0.0, drift=1.0, weight_decay=0.0), 0.0,
                        atol=1e-5)

  @parameterized.named_parameters(
      *[(f'{name}_task{task}', arch, kb, branch, task)
        for name, arch, kb, branch in _VARIANTS for task in (0, 1, 2)])
  def test_matches_numpy(self, architecture, kb_size, foreign_branch, task):
    spec = _spec(architecture, kb_size, foreign_branch, num_tasks=3)
    model = fcl_cnn.FclTextCnn(spec)
    w = _random_weights(model, seed=task)
    rng = np.random.default_rng(10 + task)
    snapshots = ([rng.normal(size=(3, width, 4, 3)) for width in _WIDTHS]
                 if spec.decomposed else [])
    coefficients = dict(sparsity=0.03, drift=0.7, weight_decay=0.2)
    got = float(fcl_cnn.regularization(
        model, tf.constant(task, tf.int32),
        [tf.constant(s, tf.float32) for s in snapshots], **coefficients))
    want = _reference_regularization(spec, w, task, snapshots,
                                     **coefficients)
    self.assertAllClose(got, want, atol=1e-4, rtol=1e-5)

  def test_gradient_reaches_past_tasks_but_not_heads(self):
    spec, model, _, snapshots = self._hand_set_model('fedseit')
    weights = model.weight_dict()
    with tf.GradientTape() as tape:
      total = fcl_cnn.regularization(
          model, tf.constant(1), [tf.constant(s, tf.float32)
                                  for s in snapshots],
          **self._COEFFICIENTS)
    keys = ('conv2/adaptive', 'conv2/mask', 'head/kernel',
            'augment/kernel')
    grads = dict(zip(keys, tape.gradient(total, [weights[k] for k in keys])))
    self.assertIsNone(grads['head/kernel'])
    adaptive = tf.convert_to_tensor(grads['conv2/adaptive']).numpy()
    # A_0 (past: L1 and drift) and A_1 (current) move, A_2 (future) not.
    self.assertTrue(np.all(adaptive[0] != 0))
    self.assertTrue(np.all(adaptive[1] != 0))
    self.assertAllEqual(adaptive[2], np.zeros_like(adaptive[2]))
    augment = tf.convert_to_tensor(grads['augment/kernel']).numpy()
    self.assertAllEqual(augment[[0, 2]], np.zeros_like(augment[[0, 2]]))
    del spec


if __name__ == '__main__':
  tf.test.main()
