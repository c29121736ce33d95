"""A `tff.learning` model whose weights are only LoRA adapters.

`lora.add_lora` freezes a Keras model around its adapters, but a
`tff.learning.models.from_keras_model` model of it still reports the frozen
weights as non-trainable model weights, and TFF's learning processes
broadcast every model weight every round. `LoraModelFn` is a `model_fn`
whose `tff.learning.models.VariableModel`s report

    trainable_variables == the adapters' factors (plus the LayerNorms if
                           `LoraConfig.train_layer_norms`)
    non_trainable_variables == ()

and whose frozen base weights are the initial values of the Keras model's
variables: every model it builds, in eager mode or inside a TFF
computation, starts from `base_weights`. In a TFF process the base is
therefore a constant of the client computation: it reaches a client once,
with the computation, and never in a round, so the per-round broadcast,
the client updates, the aggregation and the communication accounting
(`tff_nlp.analysis.round_communication`, which reads the types) all see
only the adapters. `base_bytes` is what the computation carries once.

How the base gets in: the Keras model is built inside a
`tf.variable_creator_scope` that replaces each variable's initial value by
its pre-trained value. A variable is matched by the order in which the
model creates it, recorded once, eagerly, when the `LoraModelFn` is made
(and checked, by shape, every time): Keras's `model.weights` order, in
which `base_weights` come, is not always its creation order. Assigning
after building would not do: inside a TFF computation (a TF graph) an
assignment is an op that nothing runs, whereas an initial value is what
TFF's initialisation runs.
"""

from collections.abc import Callable, Sequence
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.models import lora


class AdapterOnlyModel(tff.learning.models.VariableModel):
  """A `VariableModel` that reports no non-trainable variables.

  Wraps a model (e.g. `tff.learning.models.from_keras_model` of a Keras
  model with adapters) and forwards everything to it except
  `non_trainable_variables`, which is empty: the frozen weights are not
  model weights of the learning process (see the module docstring).
  """

  def __init__(self, model: tff.learning.models.VariableModel):
    self._model = model

  @property
  def trainable_variables(self):
    return self._model.trainable_variables

  @property
  def non_trainable_variables(self):
    return ()

  @property
  def local_variables(self):
    return self._model.local_variables

  @property
  def input_spec(self):
    return self._model.input_spec

  def forward_pass(self, batch_input, training=True):
    return self._model.forward_pass(batch_input, training=training)

  def predict_on_batch(self, batch_input, training=True):
    return self._model.predict_on_batch(batch_input, training=training)

  def report_local_unfinalized_metrics(self):
    return self._model.report_local_unfinalized_metrics()

  def metric_finalizers(self):
    return self._model.metric_finalizers()

  def reset_metrics(self):
    return self._model.reset_metrics()


def _creation_key(kwargs, variable=None) -> tuple[str, tuple, str]:
  """(name, shape, dtype) of a variable being created."""
  shape = (variable.shape if variable is not None else kwargs.get('shape'))
  dtype = (variable.dtype if variable is not None else kwargs.get('dtype'))
  return (str(kwargs.get('name')),
          None if shape is None else tuple(tf.TensorShape(shape).as_list()),
          None if dtype is None else tf.as_dtype(dtype).name)


def _build_recording(build_fn: Callable[[], tf.keras.Model]):
  """(model, [(variable, its creation key)] in creation order)."""
  created = []

  def record(next_creator, **kwargs):
    variable = next_creator(**kwargs)
    created.append((variable, _creation_key(kwargs, variable)))
    return variable

  with tf.variable_creator_scope(record):
    model = build_fn()
  return model, created


class LoraModelFn:
  """`model_fn` of a pre-trained Keras model fine-tuned with LoRA adapters.

  Calling it returns a new `AdapterOnlyModel`: the Keras model from
  `keras_model_fn`, with `base_weights` as its initial weights and
  `lora.add_lora(model, config)` applied, wrapped by `wrap_fn`. Pass it as
  the `model_fn` of `tff_nlp.algorithms.build_lora_process` (or of any
  `tff.learning` builder): the process's model weights are then
  `ModelWeights(trainable=[factors...], non_trainable=[])`: e.g. for the
  `small` seq2seq preset (vocabulary 8,000) with adapters on attention and
  feed-forward, 45,056 / 90,112 / 180,224 numbers at rank 4 / 8 / 16
  instead of the 2,048,512 of full fine-tuning.

  Besides `model_fn` it gives what the server side of a run needs:
  `keras_model()` (the adapted Keras model, for evaluation),
  `assign_weights_to(model_weights, keras_model)` and
  `merged_keras_model(model_weights)` (the plain model with the fine-tuned
  kernels W + scale·A·B, for export with `seq2seq.save_checkpoint`).

  The base weights are the initial values of the model's variables, so
  they are constants of every computation that builds the model (a client's
  local training): they reach a client with the computation, once, and
  never in a round. The price is the size of the traced graph: about 4
  bytes per frozen parameter (8 MB for the `small` preset). TensorFlow
  refuses a GraphDef over 2 GB, i.e. a base of more than about 500 million
  parameters (T5-base's 220 million, 0.9 GB, are under it, though not tried
  here; T5-large's 770 million are not): a larger base would have to be
  read from a file inside the client computation instead.

  Attributes:
    config: The `lora.LoraConfig`.
    parameter_count: `lora.LoraParameterCount` of the adapted model.
    base_bytes: Bytes of the frozen weights, which a process's computation
      carries once (float32: 4 per parameter).
  """

  def __init__(self, keras_model_fn: Callable[[], tf.keras.Model],
               config: lora.LoraConfig,
               base_weights: Sequence[np.ndarray],
               wrap_fn: Callable[[tf.keras.Model],
                                 tff.learning.models.VariableModel]):
    """Records where each base weight goes.

    Args:
      keras_model_fn: No-arg callable building the plain (pre-trained
        architecture, no adapters) Keras model with its variables created,
        the same model on every call, e.g.
        `lambda: seq2seq.build_keras_model(config)`.
      config: Which kernels get adapters, their rank and scale.
      base_weights: The pre-trained weights, as `keras_model_fn()`'s
        `get_weights()` lists them (e.g. of a model loaded from a
        checkpoint).
      wrap_fn: Keras model -> `tff.learning.models.VariableModel`, e.g.
        `tff.learning.models.from_keras_model` with the loss, input spec
        and metrics (it must build its metrics anew on each call).

    Raises:
      ValueError: If `base_weights` do not match the model's weights in
        number, shape or dtype (the message names the first mismatch), or
        the model cannot be adapted (`lora.add_lora`'s errors).
    """
    if not isinstance(config, lora.LoraConfig):
      raise ValueError(f'config must be a lora.LoraConfig, got {config!r}.')
    self.config = config
    self._keras_model_fn, self._wrap_fn = keras_model_fn, wrap_fn
    model, created = _build_recording(keras_model_fn)
    weights = model.weights
    base_weights = [np.asarray(w) for w in base_weights]
    if len(base_weights) != len(weights):
      raise ValueError(
          f'base_weights has {len(base_weights)} arrays but the model '
          f'{model.name!r} has {len(weights)} weights.')
    for i, (weight, value) in enumerate(zip(weights, base_weights)):
      if (tuple(weight.shape) != value.shape
          or weight.dtype.as_numpy_dtype != value.dtype):
        raise ValueError(
            f'base_weights[{i}] is {value.dtype}{list(value.shape)} but the '
            f'model\'s weight {weight.name!r} is '
            f'{weight.dtype.name}{weight.shape.as_list()}.')
    position = {id(w): i for i, w in enumerate(weights)}
    # The weights in creation order, each with its creation key and base
    # value. Other variables (Keras's step counters, created in eager mode
    # only) keep their own initial values.
    self._initial_values = [
        (key, base_weights[position[id(v)]])
        for v, key in created if id(v) in position]
    if len(self._initial_values) != len(weights):
      raise ValueError(
          f'Some weights of the model {model.name!r} were not created while '
          'keras_model_fn ran (shared or mixed-precision variables?), so '
          'their base values cannot be set.')
    lora.add_lora(model, config)
    self.parameter_count = lora.lora_parameter_count(model)
    self.base_bytes = 4 * self.parameter_count.frozen

  def _build_with_base(self) -> tf.keras.Model:
    # The weights are created in the recorded order; a variable that is not
    # the next weight (by name, shape and dtype) is another kind of variable.
    remaining = list(reversed(self._initial_values))

    def substitute(next_creator, **kwargs):
      if remaining and _creation_key(kwargs) == remaining[-1][0]:
        kwargs['initial_value'] = remaining.pop()[1]
      return next_creator(**kwargs)

    with tf.variable_creator_scope(substitute):
      model = self._keras_model_fn()
    if remaining:
      name, shape, dtype = remaining[-1][0]
      raise ValueError(
          f'keras_model_fn did not create the weight {name!r} '
          f'({dtype}{list(shape)}) where it did when the LoraModelFn was '
          'made: it must build the same model on every call.')
    lora.add_lora(model, self.config)
    return model

  def __call__(self) -> AdapterOnlyModel:
    """A new model: base weights frozen in, adapters trained and sent."""
    return AdapterOnlyModel(self._wrap_fn(self._build_with_base()))

  def keras_model(self) -> tf.keras.Model:
    """The adapted Keras model with the base weights (its adapters fresh)."""
    return self._build_with_base()

  def assign_weights_to(self, model_weights: tff.learning.models.ModelWeights,
                        keras_model: tf.keras.Model) -> None:
    """Sets `keras_model()`'s adapters (and LayerNorms) to a process's."""
    trainable = keras_model.trainable_weights
    values = list(model_weights.trainable)
    if len(values) != len(trainable) or model_weights.non_trainable:
      raise ValueError(
          f'model_weights has {len(values)} trainable and '
          f'{len(model_weights.non_trainable)} non-trainable arrays; this '
          f'model takes {len(trainable)} and none (is it from a process of '
          'this LoraModelFn?).')
    for variable, value in zip(trainable, values):
      variable.assign(value)

  def merged_keras_model(
      self, model_weights: Optional[tff.learning.models.ModelWeights] = None
  ) -> tf.keras.Model:
    """The plain model with the fine-tuned weights (adapters merged).

    Args:
      model_weights: A process's weights (`get_model_weights(state)`); None
        leaves the adapters at their initial values (B = 0: the base).

    Returns:
      A model of `keras_model_fn`'s kind without adapters whose kernels are
      W + scale·A·B, e.g. to save with `seq2seq.save_checkpoint`.
    """
    model = self._build_with_base()
    if model_weights is not None:
      self.assign_weights_to(model_weights, model)
    lora.merge_lora(model)
    return model
