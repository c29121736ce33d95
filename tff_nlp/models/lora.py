"""LoRA adapters on a built `tf.keras` model (Hu et al., ICLR 2022).

LoRA fine-tunes a pre-trained model by training, for some of its projection
kernels W [d_in, d_out], two small factors A [d_in, r] and B [r, d_out] and
using the effective kernel

    W' = W + (alpha / r) * A @ B

while W and every other weight of the model stay frozen. B starts at zero
(A, for an embedding table: below), so the adapted model computes exactly what the pre-trained one did; only
the factors, r * (d_in + d_out) numbers per kernel instead of d_in * d_out,
are trained and, in federated fine-tuning, sent by the clients.

An embedding table W [vocabulary, d] can be adapted too (target
'embedding', as PEFT's LoRA on embedding layers): token i then reads row i
of W + (alpha / r) * A @ B, with A [vocabulary, r] and B [r, d], and a tied
output projection (keras-nlp's `ReversibleEmbedding`) uses the same
effective table. There A starts at zero and B random (PEFT's choice for
embeddings), so that each row's update is zero at first and trains from
the first step.

On a built Keras 2 model (the project's
`seq2seq.Seq2SeqTransformer`, a keras-nlp model, or any model of `Dense` /
`EinsumDense` / `Embedding` layers):

*   `add_lora(model, config)` gives the target kernels their adapters
    (`LoraAdapter` layers) and freezes the rest of the model: afterwards
    `model.trainable_weights` are exactly the factors (plus the LayerNorms
    if `config.train_layer_norms`), which is what
    `tff.learning.models.from_keras_model` trains, aggregates and counts.
*   `merge_lora(model)` folds each adapter into its kernel (W <- W') and
    removes the adapters: a plain model with the fine-tuned weights, its
    trainable weights as before `add_lora`, for export.
*   `lora_parameter_count(model)` counts the adapters' parameters against
    the model's, for the communication accounting.
*   `adapters(model)` and `adapted_layers(model)` list the adapters (and
    the layers they adapt) in the order of their factors in
    `model.trainable_weights`.

An `EinsumDense` kernel has several axes, e.g. a query projection
[d_model, heads, head_dim] ("abc,cde->abde") or an attention output
projection [heads, head_dim, d_model] ("abcd,cde->abe"). Its input axes are
those whose letters occur in the einsum's input spec (d_in is the product of
their sizes), its output axes the others; A @ B [d_in, d_out] is reshaped to
the input axes followed by the output axes and transposed to the kernel's
axis order.

How it is done in Keras 2, and why:

*   Freezing: Keras 2 hides every weight of a layer with `trainable=False`
    and of all its sublayers, so freezing the model itself would also hide
    the adapters. `add_lora` instead sets `trainable=False` on each layer
    that owns weights (embeddings, projections, LayerNorms unless trained),
    keeps the containers (the model, Transformer layers, attention layers)
    trainable, and makes the model track the adapters' factors as weights
    of its own (its attribute `lora_factors`, a list [A_0, B_0, A_1, ...]),
    which Keras lists after its layers' weights. The factors are tracked by
    the model only: tracked by their (frozen) target layers, they would be
    among the non-trainable weights too; tracked as sublayers of the model,
    the adapters would join a `Sequential` model's layer stack. The
    adapters themselves (`adapters(model)`) are held by the target layers'
    classes (below).
*   Forward pass: Keras 2's `Dense.call` and `EinsumDense.call` read
    `self.kernel` (`Embedding.call` and `ReversibleEmbedding.call`:
    `self.embeddings`). Each target layer gets a class of its own, a
    subclass of its class whose `kernel` (`embeddings`) is a property
    computing W' from the frozen variable and the adapter (as Keras 3's
    `Dense.enable_lora` does), so every call, in eager mode, in
    `tf.function` and in TFF computations, uses W' and gradients reach A
    and B. The frozen variable stays the layer's tracked `kernel`
    (checkpoints and `get_weights` see W; read it as `layer.weights[0]`:
    `layer.kernel` is now W', a tensor).

Dropout is unaffected (it follows the `training` argument, not `trainable`).
Freezing a `BatchNormalization` layer in Keras 2 also switches it to
inference mode; the Transformer models here have none.
"""

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

# The adapter layer, now in `tff_nlp.models.lora_adapter` (used here, and
# kept importable from here).
from tff_nlp.models.lora_adapter import LoraAdapter

# What `LoraConfig.targets` may name.
ATTENTION = 'attention'
FEEDFORWARD = 'feedforward'
ALL_DENSE = 'all_dense'
EMBEDDING = 'embedding'
TARGETS = (ATTENTION, FEEDFORWARD, ALL_DENSE, EMBEDDING)

# The feed-forward `Dense` layers of keras-nlp's `TransformerEncoder` and
# `TransformerDecoder`.
FEEDFORWARD_LAYER_NAMES = ('feedforward_intermediate_dense',
                           'feedforward_output_dense')
# The projections of `tf.keras.layers.MultiHeadAttention` (keras-nlp's
# `CachedMultiHeadAttention` calls the same attributes).
_ATTENTION_PROJECTIONS = ('_query_dense', '_key_dense', '_value_dense',
                          '_output_dense')

# The model attribute that tracks the adapters' factors (a tracked list:
# checkpoints of an adapted model hold them under this name).
_FACTORS_ATTRIBUTE = 'lora_factors'
# The model attribute that holds what `merge_lora` restores (not tracked).
_STATE_ATTRIBUTE = '_lora_state'


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """Which kernels get LoRA adapters, and their rank and scale.

  Attributes:
    rank: r, the inner dimension of the factors A [d_in, r] and
      B [r, d_out]; a positive int.
    alpha: The update is scaled by alpha / r (Hu et al.), so that a
      learning rate tuned for one rank suits others; None means alpha = r
      (scale 1, the default of Keras 3's `enable_lora`). Positive.
    targets: The kernels to adapt, one or more of 'attention' (the query,
      key, value and output `EinsumDense` projections of every
      `MultiHeadAttention` layer: self- and cross-attention of keras-nlp's
      Transformer layers), 'feedforward' (the `Dense` layers named
      'feedforward_intermediate_dense' and 'feedforward_output_dense', those
      of keras-nlp's Transformer layers) and 'all_dense' (every `Dense` and
      `EinsumDense` layer of the model, for models of other layers) and
      'embedding' (the table of every `tf.keras.layers.Embedding` layer,
      keras-nlp's `ReversibleEmbedding` included: with tied weights, its
      output projection too; keras-nlp's `PositionEmbedding` is not one).
    train_layer_norms: Whether the `LayerNormalization` layers stay
      trainable beside the adapters (their gamma and beta are few numbers
      and often fine-tuned with LoRA).
    seed: Seed of the random initial A (B starts at zero; for an
      embedding, of the random B): same seed and model, same adapters, in
      eager and graph mode.
  """

  rank: int = 8
  alpha: Optional[float] = None
  targets: Sequence[str] = (ATTENTION, FEEDFORWARD)
  train_layer_norms: bool = False
  seed: int = 0

  def __post_init__(self):
    if (isinstance(self.rank, bool) or not isinstance(self.rank, int)
        or self.rank < 1):
      raise ValueError(f'rank must be a positive int, got {self.rank!r}.')
    if self.alpha is not None and (
        isinstance(self.alpha, bool)
        or not isinstance(self.alpha, (int, float))
        or not math.isfinite(self.alpha) or self.alpha <= 0):
      raise ValueError(
          f'alpha must be a positive number or None, got {self.alpha!r}.')
    targets = ((self.targets,) if isinstance(self.targets, str)
               else tuple(self.targets))
    if not targets:
      raise ValueError(f'targets must name one or more of {TARGETS}, got '
                       'none.')
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
      raise ValueError(
          f'targets must be among {TARGETS}, got unknown {unknown}.')
    if len(set(targets)) < len(targets):
      raise ValueError(f'targets has duplicates: {targets}.')
    # A tuple, so that the frozen config is hashable and compares by value.
    object.__setattr__(self, 'targets', targets)
    if not isinstance(self.train_layer_norms, bool):
      raise ValueError('train_layer_norms must be a bool, got '
                       f'{self.train_layer_norms!r}.')
    if isinstance(self.seed, bool) or not isinstance(self.seed, int):
      raise ValueError(f'seed must be an int, got {self.seed!r}.')

  @property
  def scale(self) -> float:
    """alpha / r, the factor of A @ B in the effective kernel."""
    return 1.0 if self.alpha is None else self.alpha / self.rank


@dataclasses.dataclass(eq=False)
class _LoraState:
  """What `merge_lora` restores; a plain object, so Keras does not track it.

  Attributes:
    targets: (target layer, its class before `add_lora`, its adapter).
    trainable: (layer, its `trainable` before `add_lora`) for the model and
      all its layers, parents before children.
  """
  targets: list
  trainable: list


def _layers(model: tf.keras.layers.Layer) -> list[tf.keras.layers.Layer]:
  """`model` and its layers, depth first, each once, parents first."""
  found, seen = [], set()

  def visit(layer):
    if id(layer) in seen:
      return
    seen.add(id(layer))
    found.append(layer)
    # Keras's own tracking order (attribute assignment order).
    for child in layer._flatten_layers(  # pylint: disable=protected-access
        recursive=False, include_self=False):
      visit(child)

  visit(model)
  return found


def _target_layers(layers, targets) -> list[tf.keras.layers.Layer]:
  """The layers whose kernels `targets` names, in the order of `layers`."""
  dense_types = (tf.keras.layers.Dense, tf.keras.layers.EinsumDense)
  chosen = set()
  for layer in layers:
    if ATTENTION in targets and isinstance(
        layer, tf.keras.layers.MultiHeadAttention):
      for attribute in _ATTENTION_PROJECTIONS:
        projection = getattr(layer, attribute, None)
        if projection is None:
          raise ValueError(
              f'The attention layer {layer.name!r} is not built (its '
              'projections are created on its first call): call the model '
              'once before add_lora.')
        chosen.add(id(projection))
    if FEEDFORWARD in targets and isinstance(
        layer, tf.keras.layers.Dense) and layer.name in FEEDFORWARD_LAYER_NAMES:
      chosen.add(id(layer))
    if ALL_DENSE in targets and isinstance(layer, dense_types):
      chosen.add(id(layer))
    if EMBEDDING in targets and isinstance(layer, tf.keras.layers.Embedding):
      chosen.add(id(layer))
  return [layer for layer in layers if id(layer) in chosen]


def _adapted_attribute(layer: tf.keras.layers.Layer) -> str:
  """The attribute of the weight an adapter adapts: the kernel, or an
  embedding layer's table."""
  return ('embeddings' if isinstance(layer, tf.keras.layers.Embedding)
          else 'kernel')


def _input_axes(layer: tf.keras.layers.Layer) -> tuple[int, ...]:
  """The kernel axes that meet the layer's input (module docstring)."""
  if not isinstance(layer, tf.keras.layers.EinsumDense):
    return (0,)  # Dense: kernel [d_in, d_out].
  inputs, rest = layer.equation.split(',')
  kernel_spec = rest.split('->')[0].strip()
  inputs = inputs.replace('...', '')
  return tuple(i for i, letter in enumerate(kernel_spec) if letter in inputs)


def _lora_class(cls: type, adapter: LoraAdapter, attribute: str) -> type:
  """A subclass of `cls` whose `attribute` (`kernel` or `embeddings`) is W'
  (module docstring).

  One class per adapted layer: the adapter lives in the class (the
  property's closure), so the (frozen) layer does not track it as a
  sublayer, which would list its factors among the non-trainable weights.
  """

  def kernel(self):
    # The instance attribute Keras assigned in `build`, hidden by this
    # property: the frozen variable W.
    return adapter.effective_kernel(self.__dict__[attribute])

  def set_kernel(self, value):
    del self, value
    raise AttributeError(f'The {attribute} of a layer with a LoRA adapter '
                         'cannot be replaced; merge_lora(model) first.')

  return type(f'Lora{cls.__name__}', (cls,), {
      attribute: property(kernel, set_kernel),
      '__module__': cls.__module__,
  })


def add_lora(model: tf.keras.Model, config: LoraConfig) -> list[LoraAdapter]:
  """Adds LoRA adapters to the target kernels of a built model; freezes it.

  Each kernel that `config.targets` names gets a `LoraAdapter`; the layer
  then computes with W + scale * A @ B (module docstring), and since B (A,
  for an embedding) starts at zero the model's outputs are unchanged. Every weight of the
  model is frozen except the adapters' factors (and the LayerNorms, with
  `config.train_layer_norms`): afterwards

      model.trainable_weights == [LayerNorm gamma, beta, ... (if trained,
                                  in model order)] + [A_0, B_0, A_1, B_1, ...]
      model.non_trainable_weights == the model's other weights

  with the adapters in the model's layer order (depth first). This is the
  split that `tff.learning.models.from_keras_model` makes into trainable
  and non-trainable model weights, so a `tff.learning` process built on a
  `model_fn` that calls `add_lora` trains, aggregates and counts only the
  adapters.

  Call it on a freshly built model inside a TFF `model_fn` as well as
  eagerly: the adapters are created where the model's variables are, and
  the initial A depends only on `config.seed` and the adapter's position.

  Args:
    model: A built `tf.keras.Model` (its variables created, e.g. by
      `seq2seq.build_keras_model`) without adapters, whose own weights, if
      any, belong to its layers.
    config: A `LoraConfig`.

  Returns:
    The adapters, in the model's layer order (also `adapters(model)`).

  Raises:
    ValueError: If the model is not built, already has adapters, has no
      layer `config.targets` names, or cannot be frozen around the adapters
      (it owns trainable weights outside its layers).
  """
  if not isinstance(config, LoraConfig):
    raise ValueError(f'config must be a LoraConfig, got {config!r}.')
  if not model.built:
    raise ValueError(
        f'The model {model.name!r} is not built: call it once (or build it '
        'with its build function) before add_lora.')
  if hasattr(model, _STATE_ATTRIBUTE):
    raise ValueError(f'The model {model.name!r} already has LoRA adapters; '
                     'merge_lora(model) first.')
  layers = _layers(model)
  targets = _target_layers(layers, config.targets)
  if not targets:
    raise ValueError(
        f'The model {model.name!r} has no layer that targets='
        f'{config.targets} names (attention: MultiHeadAttention layers; '
        f'feedforward: Dense layers named {FEEDFORWARD_LAYER_NAMES}; '
        'all_dense: Dense and EinsumDense layers; embedding: Embedding '
        'layers).')
  for layer in targets:
    if getattr(layer, _adapted_attribute(layer), None) is None:
      raise ValueError(f'The layer {layer.name!r} is not built.')
  # pylint: disable=protected-access
  if model._trainable_weights:
    raise ValueError(
        f'The model {model.name!r} owns trainable weights outside its '
        'layers; add_lora can only freeze weights that belong to layers.')
  state = _LoraState(targets=[],
                     trainable=[(layer, layer.trainable) for layer in layers])
  # Freeze the layers that own weights (a LayerNorm stays trainable if
  # asked); their parents stay trainable, so that the adapters and trained
  # LayerNorms remain visible in model.trainable_weights.
  for layer in layers[1:]:
    if layer._trainable_weights and not (
        config.train_layer_norms
        and isinstance(layer, tf.keras.layers.LayerNormalization)):
      layer.trainable = False
  # pylint: enable=protected-access
  adapters = []
  for index, layer in enumerate(targets):
    attribute = _adapted_attribute(layer)
    kernel = layer.__dict__[attribute]
    adapter = LoraAdapter(
        input_axes=_input_axes(layer), rank=config.rank, scale=config.scale,
        seed=(config.seed, index), embedding=attribute == 'embeddings',
        name=f'lora_adapter_{index}')
    # Names its variables after the adapter, as a Keras call would.
    with tf.name_scope(adapter.name):
      adapter.build(kernel.shape)
    state.targets.append((layer, type(layer), adapter))
    layer.__class__ = _lora_class(type(layer), adapter, attribute)
    adapters.append(adapter)
  setattr(model, _FACTORS_ATTRIBUTE,
          [w for adapter in adapters for w in adapter.weights])
  setattr(model, _STATE_ATTRIBUTE, state)

  # The promise of the docstring: the LayerNorms (in Keras's order), then
  # the factors in the adapters' order.
  layer_norms = {id(w) for layer in layers
                 if config.train_layer_norms
                 and isinstance(layer, tf.keras.layers.LayerNormalization)
                 for w in layer.weights}
  factors = [id(w) for adapter in adapters for w in adapter.weights]
  trainable = [id(w) for w in model.trainable_weights]
  if (set(trainable[:len(layer_norms)]) != layer_norms
      or trainable[len(layer_norms):] != factors):
    names = [w.name for w in model.trainable_weights]
    merge_lora(model)
    raise ValueError(
        f'The model {model.name!r} cannot be frozen around its adapters: '
        f'its trainable weights would be {names}, not only the adapters '
        '(and LayerNorms). Are some weights outside its layers, or a '
        'LayerNormalization inside a layer that owns weights?')
  return adapters


def adapted_layers(
    model: tf.keras.Model) -> list[tuple[tf.keras.layers.Layer, LoraAdapter]]:
  """(layer, its adapter) for each layer `add_lora` adapted, in model order.

  The layer's `kernel` (an embedding layer's `embeddings`) is then the
  effective kernel (a tensor); the frozen variable W is `layer.weights[0]`. [] for a model without adapters.
  """
  if not hasattr(model, _STATE_ATTRIBUTE):
    return []
  return [(layer, adapter) for layer, _, adapter in
          getattr(model, _STATE_ATTRIBUTE).targets]


def adapters(model: tf.keras.Model) -> list[LoraAdapter]:
  """The adapters `add_lora` gave `model`, in its order ([] if none)."""
  return [adapter for _, adapter in adapted_layers(model)]


def merge_lora(model: tf.keras.Model) -> None:
  """Folds the adapters into their kernels and removes them.

  Each target kernel is assigned W + scale * A @ B (so the model computes
  what it computed with the adapters, up to float rounding), the layers get
  their classes back, the adapters leave the model (and its checkpoints),
  and every layer's `trainable` is what it was before `add_lora`: a plain
  model with the fine-tuned weights, e.g. to save with
  `seq2seq.save_checkpoint` and load into a model without adapters.

  Args:
    model: A model given adapters by `add_lora`.

  Raises:
    ValueError: If the model has no adapters.
  """
  if not hasattr(model, _STATE_ATTRIBUTE):
    raise ValueError(f'The model {model.name!r} has no LoRA adapters.')
  state = getattr(model, _STATE_ATTRIBUTE)
  for layer, cls, adapter in state.targets:
    kernel = layer.__dict__[_adapted_attribute(layer)]
    kernel.assign(adapter.effective_kernel(kernel))
    layer.__class__ = cls
  # Parents first: the `trainable` setter also sets the sublayers, which
  # then get their own value.
  for layer, trainable in state.trainable:
    layer.trainable = trainable
  factors = {id(w) for _, _, adapter in state.targets
             for w in adapter.weights}
  delattr(model, _FACTORS_ATTRIBUTE)
  delattr(model, _STATE_ATTRIBUTE)
  # pylint: disable=protected-access
  # Keras 2's Layer.__delattr__ untracks a variable attribute but neither
  # the variables of a list attribute nor its checkpoint dependency: left,
  # the factors would stay among the model's weights and in its
  # checkpoints, which would then not load into a model without adapters.
  model._trainable_weights[:] = [w for w in model._trainable_weights
                                 if id(w) not in factors]
  model._delete_tracking(_FACTORS_ATTRIBUTE)


@dataclasses.dataclass(frozen=True)
class LoraParameterCount:
  """Parameters (scalars) of a model with adapters.

  Attributes:
    adapters: Of all the adapters' factors A and B.
    trainable: Of `model.trainable_weights`: the adapters, plus the
      LayerNorms if trained.
    total: Of all the model's weights, the adapters included.
  """

  adapters: int
  trainable: int
  total: int

  @property
  def frozen(self) -> int:
    """Of the weights that fine-tuning leaves unchanged."""
    return self.total - self.trainable

  @property
  def trainable_fraction(self) -> float:
    """trainable / total: the share a client trains and sends."""
    return self.trainable / self.total


def lora_parameter_count(model: tf.keras.Model) -> LoraParameterCount:
  """Counts the adapters' parameters against the model's.

  Args:
    model: A built model, with adapters from `add_lora` (without, the
      adapters count zero).

  Returns:
    A `LoraParameterCount`.
  """
  def count(weights):
    return sum(int(np.prod(w.shape)) for w in weights)

  return LoraParameterCount(
      adapters=count(w for a in adapters(model) for w in a.weights),
      trainable=count(model.trainable_weights),
      total=count(model.weights))
