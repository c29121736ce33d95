"""Kim-style text CNN with FedWeIT's decomposed filters and FedSeIT's branch.

References:
  Yoon Kim. Convolutional Neural Networks for Sentence Classification.
  EMNLP 2014 (the text CNN).
  Jaehong Yoon, Wonyong Jeong, Giwoong Lee, Eunho Yang, Sung Ju Hwang.
  Federated Continual Learning with Weighted Inter-client Transfer. ICML 2021
  (FedWeIT: the decomposition B ⊙ m + A + Σ α A_kb).
  Yatin Chaudhary, Pranav Rai, Matthias Schubert, Hinrich Schütze, Pankaj
  Gupta. Federated Continual Learning for Text Classification via Selective
  Inter-client Transfer. Findings of EMNLP 2022 (FedSeIT: segregated foreign
  filters with alignment and augmentation projections), restated with the
  authors' code in ../shared/docs/fedseit_spec.md (§2-§4).

One model serves a client's whole task sequence: every per-task parameter is
a slice `[t]` of a variable with a leading task axis of size `num_tasks`, and
the model is called with the task index, so its variables (hence a client's
state in TFF) have one fixed structure for the whole sequence.

Architectures (`FclCnnSpec.architecture`):

*   'plain': the text CNN of the FedAvg / FedProx / local baselines: one
    kernel and bias per filter width, shared by every task; a head per task.
*   'fedweit': each filter bank's kernel for task t is
    θ_t = B ⊙ σ(m_t) + A_t + Σ_k α_{t,k} KB_k (spec §3), with the knowledge
    base KB of foreign task-adaptive A's frozen during a task. σ(m) is
    computed in the forward pass (the released code froze it, spec §9.2).
*   'fedseit': local kernels θ_t = B ⊙ σ(m_t) + A_t and, per filter width, a
    segregated foreign branch: one convolution per KB entry with filter
    α_{t,k} KB_k and its own bias, max-pooled, concatenated and aligned by
    z_f = ReLU(W_f,t [ẑ_1 ⊕ … ⊕ ẑ_K] + c_t); then the relevance augmentation
    z = ReLU(W_c,t Dropout([z_local ⊕ z_f]) + c) and the task head (spec §4,
    the "Project" variant of Fig. 1a). `foreign_branch=False` drops the
    foreign branch (W_c then maps the local features alone) for the ablation
    that measures how much of FedSeIT's gain is transfer.

Embeddings are trainable word vectors (GloVe is not available here); the
federated algorithms train them on the first task and freeze them afterwards
(`tff_nlp.algorithms.fcl`). Padding (id 0) contributes zero vectors.

Weights are addressed by stable keys (`FclTextCnn.weight_dict`), e.g.
'conv3/base', 'conv3/adaptive', 'foreign4/kb', 'head/kernel', so algorithms
can state which of them are federated, uploaded or private.
"""

import collections
import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_nlp.models import dropout_seeds

ARCHITECTURES = ('plain', 'fedweit', 'fedseit')


@dataclasses.dataclass(frozen=True)
class FclCnnSpec:
  """Shape of the continual-learning text CNN.

  Attributes:
    vocab_size: Token ids, padding (0) and OOV included.
    max_length: L, the length of every encoded text.
    num_tasks: T, tasks of a client's sequence (the leading axis of every
      per-task weight).
    num_classes: Outputs of each task head (labels per task).
    architecture: One of `ARCHITECTURES`.
    kb_size: K, entries of the knowledge base of foreign task-adaptive
      weights ('fedweit' and 'fedseit'; 0 for none).
    foreign_branch: 'fedseit' only: whether the segregated foreign branch is
      used (False for the ablation).
    embedding_dim: D.
    filter_widths: Widths of the convolution banks (Kim: 3, 4, 5).
    num_filters: Filters per bank, N^F.
    dropout: Dropout rate on the pooled features.
    seed: Seed of the initial weights.
  """

  vocab_size: int
  max_length: int
  num_tasks: int
  num_classes: int
  architecture: str = 'fedseit'
  kb_size: int = 0
  foreign_branch: bool = True
  embedding_dim: int = 100
  filter_widths: tuple[int, ...] = (3, 4, 5)
  num_filters: int = 128
  dropout: float = 0.3
  seed: int = 0

  def __post_init__(self):
    if self.architecture not in ARCHITECTURES:
      raise ValueError(f'architecture must be one of {ARCHITECTURES}, got '
                       f'{self.architecture!r}.')
    for name in ('vocab_size', 'max_length', 'num_tasks', 'num_classes',
                 'embedding_dim', 'num_filters'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)}.')
    if self.kb_size < 0:
      raise ValueError(f'kb_size must be >= 0, got {self.kb_size}.')
    if self.max_length < max(self.filter_widths):
      raise ValueError(
          f'max_length ({self.max_length}) must be at least the widest '
          f'filter ({max(self.filter_widths)}).')

  @property
  def decomposed(self) -> bool:
    return self.architecture != 'plain'

  @property
  def uses_kb(self) -> bool:
    """Whether the model reads a knowledge base (K > 0 and a KB branch)."""
    if self.kb_size == 0:
      return False
    return self.architecture == 'fedweit' or (
        self.architecture == 'fedseit' and self.foreign_branch)


def _seeded(initializer, seed, offset):
  config = initializer.get_config()
  config['seed'] = seed * 1000 + offset
  return initializer.__class__.from_config(config)


def _fan_in_normal():
  return tf.keras.initializers.VarianceScaling(
      scale=1.0, mode='fan_in', distribution='truncated_normal')


def max_pool_over_time(features: tf.Tensor) -> tf.Tensor:
  """[B, L', N] -> [B, N]."""
  return tf.reduce_max(features, axis=1)


class DecomposedConv1D(tf.keras.layers.Layer):
  """A 1-D convolution bank whose kernel is composed per task (FedWeIT).

  With `decomposed=True` the kernel of task t is

    θ_t = B ⊙ σ(m_t) + A_t [+ Σ_k α_{t,k} KB_k if kb_size > 0],

  B the base `[width, D, N]` (the federated part), m the per-filter mask
  `[T, N]` (broadcast over the filter), A the task-adaptive weights
  `[T, width, D, N]`, α the attention `[T, K]` over the knowledge base KB
  `[K, width, D, N]` (non-trainable: the algorithm writes it at the start of
  each task). With `decomposed=False` it is a plain bank: one kernel B and
  bias shared by every task. The output is max-pooled over time:
  `maxpool_t ReLU(x ⊛ θ_t + b_t)`, `[batch, N]`.

  Args:
    filters: N, the number of filters.
    kernel_size: The filter width.
    num_tasks: T.
    kb_size: K (0: no knowledge-base term).
    decomposed: Whether to decompose the kernel (else a plain bank).
    seed: Seed of the initial weights.
    **kwargs: Passed to `tf.keras.layers.Layer`.
  """

  def __init__(self, filters: int, kernel_size: int, num_tasks: int,
               kb_size: int = 0, decomposed: bool = True, seed: int = 0,
               **kwargs):
    super().__init__(**kwargs)
    self.filters = filters
    self.kernel_size = kernel_size
    self.num_tasks = num_tasks
    self.kb_size = kb_size
    self.decomposed = decomposed
    self.seed = seed

  def build(self, input_shape):
    dim = int(input_shape[-1])
    shape = (self.kernel_size, dim, self.filters)
    self.base = self.add_weight(
        name='base', shape=shape,
        initializer=_seeded(_fan_in_normal(), self.seed, 1))
    if not self.decomposed:
      self.bias = self.add_weight(name='bias', shape=(self.filters,),
                                  initializer='zeros')
      return
    tasks = self.num_tasks
    self.mask = self.add_weight(
        name='mask', shape=(tasks, self.filters),
        initializer=_seeded(_fan_in_normal(), self.seed, 2))
    self.adaptive = self.add_weight(
        name='adaptive', shape=(tasks,) + shape, initializer='zeros')
    self.bias = self.add_weight(name='bias', shape=(tasks, self.filters),
                                initializer='zeros')
    if self.kb_size:
      self.attention = self.add_weight(
          name='attention', shape=(tasks, self.kb_size),
          initializer=_seeded(_fan_in_normal(), self.seed, 3))
      self.kb = self.add_weight(
          name='kb', shape=(self.kb_size,) + shape, initializer='zeros',
          trainable=False)

  def local_kernel(self, task, adaptive_threshold: float = 0.0) -> tf.Tensor:
    """B ⊙ σ(m_t) + A_t, A pruned to |a| > threshold (B if not decomposed)."""
    if not self.decomposed:
      return self.base
    adaptive = self.adaptive[task]
    if adaptive_threshold > 0.0:
      adaptive = prune(adaptive, adaptive_threshold)
    return self.base * tf.sigmoid(self.mask[task]) + adaptive

  def kernel(self, task, adaptive_threshold: float = 0.0) -> tf.Tensor:
    """The kernel θ_t of task `task`, `[width, D, N]`."""
    kernel = self.local_kernel(task, adaptive_threshold)
    if self.decomposed and self.kb_size:
      kernel += tf.einsum('k,kwdn->wdn', self.attention[task], self.kb)
    return kernel

  def call(self, inputs, task, adaptive_threshold: float = 0.0):
    kernel = self.kernel(task, adaptive_threshold)
    bias = self.bias[task] if self.decomposed else self.bias
    features = tf.nn.conv1d(inputs, kernel, stride=1, padding='VALID')
    return max_pool_over_time(tf.nn.relu(features + bias))

  def get_config(self):
    config = super().get_config()
    config.update(filters=self.filters, kernel_size=self.kernel_size,
                  num_tasks=self.num_tasks, kb_size=self.kb_size,
                  decomposed=self.decomposed, seed=self.seed)
    return config


class ForeignConv1D(tf.keras.layers.Layer):
  """FedSeIT's segregated foreign convolutions with the alignment projection.

  For task t and each knowledge-base entry k (a foreign task-adaptive kernel
  KB_k, `[width, D, N]`, written by the algorithm and frozen during a task):

    ẑ_k = maxpool_t(x ⊛ (α_{t,k} KB_k) + b_{t,k}),
    z_f = ReLU(W_f,t [ẑ_1 ⊕ … ⊕ ẑ_K] + c_t),   W_f,t: K·N -> N.

  No ReLU on ẑ before W_f (the authors' "Project" variant, spec §9.9).

  The K convolutions run as one convolution with the K unscaled kernels side
  by side, and the scalar α_{t,k} is applied after pooling:
  maxpool_t(α c_t) = α maxpool_t(c_t) for α >= 0 and α minpool_t(c_t) for
  α < 0. The output is the same, but the gradient of α no longer needs a
  convolution, and with the embedding frozen (from task 1 on, or pre-trained
  vectors) the foreign branch needs no backward convolution at all: the KB
  and the input are constants of the round.

  Args:
    filters: N.
    kernel_size: The filter width.
    num_tasks: T.
    kb_size: K >= 1.
    seed: Seed of the initial weights.
    **kwargs: Passed to `tf.keras.layers.Layer`.
  """

  def __init__(self, filters: int, kernel_size: int, num_tasks: int,
               kb_size: int, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    if kb_size < 1:
      raise ValueError(f'kb_size must be >= 1, got {kb_size}.')
    self.filters = filters
    self.kernel_size = kernel_size
    self.num_tasks = num_tasks
    self.kb_size = kb_size
    self.seed = seed

  def build(self, input_shape):
    dim = int(input_shape[-1])
    tasks, k, n = self.num_tasks, self.kb_size, self.filters
    self.kb = self.add_weight(
        name='kb', shape=(k, self.kernel_size, dim, n), initializer='zeros',
        trainable=False)
    self.attention = self.add_weight(
        name='attention', shape=(tasks, k),
        initializer=_seeded(_fan_in_normal(), self.seed, 4))
    self.bias = self.add_weight(name='bias', shape=(tasks, k, n),
                                initializer='zeros')
    self.projection = self.add_weight(
        name='projection', shape=(tasks, k * n, n),
        initializer=_seeded(tf.keras.initializers.GlorotUniform(), self.seed,
                            5))
    self.projection_bias = self.add_weight(
        name='projection_bias', shape=(tasks, n), initializer='zeros')

  def call(self, inputs, task):
    # [w, D, K·N]: entry k in columns kN..kN+N.
    kernels = tf.concat(tf.unstack(self.kb, axis=0), axis=-1)
    features = tf.nn.conv1d(inputs, kernels, stride=1, padding='VALID')
    alpha = tf.repeat(self.attention[task], self.filters)  # [K·N]
    pooled = tf.where(alpha >= 0,
                      alpha * tf.reduce_max(features, axis=1),
                      alpha * tf.reduce_min(features, axis=1))
    pooled += tf.reshape(self.bias[task], [-1])
    return tf.nn.relu(tf.matmul(pooled, self.projection[task])
                      + self.projection_bias[task])

  def get_config(self):
    config = super().get_config()
    config.update(filters=self.filters, kernel_size=self.kernel_size,
                  num_tasks=self.num_tasks, kb_size=self.kb_size,
                  seed=self.seed)
    return config


class TaskDense(tf.keras.layers.Layer):
  """A dense layer with one kernel and bias per task: `act(x W_t + b_t)`.

  Args:
    units: Output size.
    num_tasks: T.
    activation: A Keras activation name or callable.
    seed: Seed of the initial kernels (Glorot uniform).
    **kwargs: Passed to `tf.keras.layers.Layer`.
  """

  def __init__(self, units: int, num_tasks: int, activation=None,
               seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.num_tasks = num_tasks
    self.activation = tf.keras.activations.get(activation)
    self.seed = seed

  def build(self, input_shape):
    dim = int(input_shape[-1])
    # One Glorot draw per task: the fans are those of a [dim, units] kernel.
    limit = np.sqrt(6.0 / (dim + self.units))
    self.kernel = self.add_weight(
        name='kernel', shape=(self.num_tasks, dim, self.units),
        initializer=_seeded(tf.keras.initializers.RandomUniform(-limit, limit),
                            self.seed, 6))
    self.bias = self.add_weight(name='bias', shape=(self.num_tasks,
                                                    self.units),
                                initializer='zeros')

  def call(self, inputs, task):
    return self.activation(tf.matmul(inputs, self.kernel[task])
                           + self.bias[task])

  def get_config(self):
    config = super().get_config()
    config.update(units=self.units, num_tasks=self.num_tasks,
                  activation=tf.keras.activations.serialize(self.activation),
                  seed=self.seed)
    return config


def prune(adaptive: tf.Tensor, threshold: float) -> tf.Tensor:
  """Hard-thresholds task-adaptive weights: entries with |a| <= threshold -> 0.

  FedWeIT's sparsity: applied to the A a client uploads and at inference.
  """
  return tf.where(tf.abs(adaptive) > threshold, adaptive,
                  tf.zeros_like(adaptive))


class FclTextCnn(tf.keras.Model):
  """The continual-learning text CNN of one client (see the module docstring).

  Called as `model((token_ids, task), training=...)` with int32 token ids
  `[B, L]` and a scalar int32 task index; returns logits `[B, num_classes]`
  of task `task`'s head.

  Args:
    spec: An `FclCnnSpec`.
    **kwargs: Passed to `tf.keras.Model`.
  """

  def __init__(self, spec: FclCnnSpec, **kwargs):
    kwargs.setdefault('name', 'fcl_text_cnn')
    super().__init__(**kwargs)
    self.spec = spec
    self.adaptive_threshold = 0.0
    seed = spec.seed
    self.embedding = tf.keras.layers.Embedding(
        spec.vocab_size, spec.embedding_dim,
        embeddings_initializer=_seeded(
            tf.keras.initializers.RandomUniform(-0.05, 0.05), seed, 0),
        name='embedding')
    conv_kb = spec.kb_size if spec.architecture == 'fedweit' else 0
    self.convs = [
        DecomposedConv1D(spec.num_filters, width, spec.num_tasks,
                         kb_size=conv_kb, decomposed=spec.decomposed,
                         seed=seed + 10 * width, name=f'conv{width}')
        for width in spec.filter_widths
    ]
    self.foreign = []
    if spec.architecture == 'fedseit' and spec.uses_kb:
      self.foreign = [
          ForeignConv1D(spec.num_filters, width, spec.num_tasks, spec.kb_size,
                        seed=seed + 10 * width, name=f'foreign{width}')
          for width in spec.filter_widths
      ]
    self.dropout = tf.keras.layers.Dropout(spec.dropout, seed=seed)
    local_features = spec.num_filters * len(spec.filter_widths)
    self.augmentation = None
    if spec.architecture == 'fedseit':
      self.augmentation = TaskDense(local_features, spec.num_tasks,
                                    activation='relu', seed=seed + 7,
                                    name='augment')
    self.head = TaskDense(spec.num_classes, spec.num_tasks, seed=seed + 8,
                          name='head')
    self((tf.zeros([1, spec.max_length], tf.int32),
          tf.constant(0, tf.int32)))
    dropout_seeds.seed_dropout_layers(self, seed)

  def call(self, inputs, training=False):
    token_ids, task = inputs
    not_padding = tf.cast(tf.not_equal(token_ids, 0), tf.float32)
    embedded = self.embedding(token_ids) * not_padding[..., None]
    features = [conv(embedded, task, self.adaptive_threshold)
                for conv in self.convs]
    features += [foreign(embedded, task) for foreign in self.foreign]
    features = self.dropout(tf.concat(features, axis=-1), training=training)
    if self.augmentation is not None:
      features = self.augmentation(features, task)
    return self.head(features, task)

  def weight_dict(self) -> collections.OrderedDict:
    """Stable key -> variable, e.g. 'conv3/adaptive', in a fixed order.

    The order is `weight_keys(spec)`: per layer, its trainable weights, then
    its knowledge base.
    """
    weights = collections.OrderedDict(
        embedding=self.embedding.embeddings)
    layers = self.convs + self.foreign + [self.augmentation, self.head]
    for layer in layers:
      if layer is None:
        continue
      for variable in layer.weights:
        short = variable.name.split('/')[-1].split(':')[0]
        weights[f'{layer.name}/{short}'] = variable
    return weights

  def get_config(self):
    return {'spec': dataclasses.asdict(self.spec)}

  @classmethod
  def from_config(cls, config):
    spec = dict(config['spec'])
    spec['filter_widths'] = tuple(spec['filter_widths'])
    return cls(FclCnnSpec(**spec))


def weight_keys(spec: FclCnnSpec) -> tuple[str, ...]:
  """The keys of `FclTextCnn(spec).weight_dict()`, without building it."""
  keys = ['embedding']
  for width in spec.filter_widths:
    if not spec.decomposed:
      keys += [f'conv{width}/base', f'conv{width}/bias']
      continue
    keys += [f'conv{width}/{name}' for name in
             ('base', 'mask', 'adaptive', 'bias')]
    if spec.architecture == 'fedweit' and spec.kb_size:
      keys += [f'conv{width}/attention', f'conv{width}/kb']
  if spec.architecture == 'fedseit' and spec.uses_kb:
    for width in spec.filter_widths:
      keys += [f'foreign{width}/{name}' for name in
               ('attention', 'bias', 'projection', 'projection_bias', 'kb')]
  if spec.architecture == 'fedseit':
    keys += ['augment/kernel', 'augment/bias']
  keys += ['head/kernel', 'head/bias']
  return tuple(keys)


def shared_keys(spec: FclCnnSpec) -> tuple[str, ...]:
  """Keys of the federated weights: the embedding and the banks' B (and
  the plain banks' biases)."""
  keys = ['embedding']
  for width in spec.filter_widths:
    keys.append(f'conv{width}/base')
    if not spec.decomposed:
      keys.append(f'conv{width}/bias')
  return tuple(keys)


def adaptive_keys(spec: FclCnnSpec) -> tuple[str, ...]:
  """Keys of the task-adaptive weights A (decomposed architectures)."""
  if not spec.decomposed:
    return ()
  return tuple(f'conv{width}/adaptive' for width in spec.filter_widths)


def kb_keys(spec: FclCnnSpec) -> tuple[str, ...]:
  """Keys of the knowledge-base weights, one per filter width, in the order
  of `adaptive_keys` (empty if the model reads no KB)."""
  if not spec.uses_kb:
    return ()
  prefix = 'conv' if spec.architecture == 'fedweit' else 'foreign'
  return tuple(f'{prefix}{width}/kb' for width in spec.filter_widths)


def attention_keys(spec: FclCnnSpec) -> tuple[str, ...]:
  """Keys of the attention α over the KB, in the order of `kb_keys`."""
  return tuple(key.replace('/kb', '/attention') for key in kb_keys(spec))


def regularization(model: FclTextCnn, task, snapshots, *, sparsity: float,
                   drift: float, weight_decay: float,
                   is_first_task: Optional[tf.Tensor] = None) -> tf.Tensor:
  """FedWeIT's regularisers of a decomposed model on task t (spec §3).

    λ1 (‖A_t‖₁ + Σ_{j<t} ‖A_j‖₁)
    + wd (½‖m_t‖² + ½‖A_t‖² + [t = 0] ½‖B‖²)
    + λ2 Σ_{j<t} ½ ‖B ⊙ σ(m_j) + A_j − θ*_j‖²,

  summed over the filter banks; for 'fedseit' also λ1‖·‖₁ and wd ½‖·‖² on
  task t's local dense weights (W_f, W_c). The task heads are not
  regularised. A plain model gets wd ½‖·‖² on its kernels only.

  Args:
    model: The model.
    task: Scalar int32 task index t.
    snapshots: Per filter bank (in `model.convs` order), θ* `[T, w, D, N]`:
      each past task's local kernel B ⊙ σ(m_j) + A_j when task t started.
    sparsity: λ1.
    drift: λ2.
    weight_decay: wd.
    is_first_task: Optional bool tensor; defaults to `task == 0`.

  Returns:
    A scalar float32 tensor.
  """
  if is_first_task is None:
    is_first_task = tf.equal(task, 0)
  first = tf.cast(is_first_task, tf.float32)
  if not model.spec.decomposed:
    return weight_decay * sum(0.5 * tf.reduce_sum(tf.square(c.base))
                              for c in model.convs)
  num_tasks = model.spec.num_tasks
  past = tf.cast(tf.range(num_tasks) < task, tf.float32)  # [T]
  total = tf.constant(0.0)
  for conv, snapshot in zip(model.convs, snapshots):
    l1_per_task = tf.reduce_sum(tf.abs(conv.adaptive), axis=[1, 2, 3])
    total += sparsity * (l1_per_task[task] + tf.reduce_sum(past * l1_per_task))
    total += weight_decay * 0.5 * (
        tf.reduce_sum(tf.square(conv.mask[task]))
        + tf.reduce_sum(tf.square(conv.adaptive[task]))
        + first * tf.reduce_sum(tf.square(conv.base)))
    local = (conv.base[None] * tf.sigmoid(conv.mask)[:, None, None, :]
             + conv.adaptive)
    drift_per_task = 0.5 * tf.reduce_sum(tf.square(local - snapshot),
                                         axis=[1, 2, 3])
    total += drift * tf.reduce_sum(past * drift_per_task)
  dense = [(layer.projection, layer.projection_bias) for layer in
           model.foreign]
  if model.augmentation is not None:
    dense.append((model.augmentation.kernel, model.augmentation.bias))
  for kernel, bias in dense:
    for weight in (kernel[task], bias[task]):
      total += sparsity * tf.reduce_sum(tf.abs(weight))
      total += weight_decay * 0.5 * tf.reduce_sum(tf.square(weight))
  return total


def local_kernels(weights, spec: FclCnnSpec) -> list[tf.Tensor]:
  """θ*_j = B ⊙ σ(m_j) + A_j for every task j, per bank, from a weight dict.

  Works on tensors or numpy arrays (a client's state); `[T, w, D, N]` each.
  """
  kernels = []
  for width in spec.filter_widths:
    base = weights[f'conv{width}/base']
    mask = weights[f'conv{width}/mask']
    adaptive = weights[f'conv{width}/adaptive']
    kernels.append(base[None] * tf.sigmoid(mask)[:, None, None, :]
                   + adaptive)
  return kernels
