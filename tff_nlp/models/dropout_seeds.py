"""Dropout masks as a pure function of (seed, training step): reproducible.

Keras draws dropout masks from stateful random ops. Inside TFF's worker their
state lives in kernels that the worker creates, caches and drops on its own
schedule, so two runs with the same flags and seed draw different masks, and
a run resumed from a checkpoint restarts the random stream. Both break the
library's reproducibility promises (`docs/results/reliability.md`).

This module replaces those draws with stateless ones:

*   `seed_dropout_layers(model, seed)` gives every `tf.keras.layers.Dropout`
    in a built model (its own and those inside keras-nlp layers and
    `MultiHeadAttention`) a mask source keyed by `seed` and the layer's
    position in the model.
*   A training step runs the model inside `with step_seed(key):`, where
    `key` is an int64 scalar tensor that identifies the step. Each dropout
    call then draws its mask with `tf.nn.experimental.stateless_dropout` from
    (key, seed, layer position, call number within the step).
*   `fingerprint(structure)` is how the training loops make `key`
    (`templates.client_work`, `algorithms.fcl`): a FarmHash64 of the global
    model the client starts its round from, of the batch, and of the step
    number. That key is the same in every run with the same seed and data,
    and in a resumed run (which restores the same global model), but it
    differs between rounds, clients and steps. No round counter or client id
    has to enter the processes' type signatures.

Outside a `step_seed` scope a seeded layer behaves as plain Keras dropout, so
`model.fit` and other callers keep working unchanged.
"""

import collections
import contextlib
import threading
from typing import Any, Iterator, Optional

import tensorflow as tf

_STATE = threading.local()


class _Scope:
  """The key of the step being traced, and each layer's calls so far."""

  def __init__(self, key: tf.Tensor):
    self.key = key
    self._calls = collections.Counter()

  def next_call(self, layer_index: int) -> int:
    call = self._calls[layer_index]
    self._calls[layer_index] += 1
    return call


def _active_scope() -> Optional[_Scope]:
  return getattr(_STATE, 'scope', None)


@contextlib.contextmanager
def step_seed(key: tf.Tensor) -> Iterator[None]:
  """Dropout of seeded layers called in this block draws masks from `key`.

  A trace-time context, like Keras's `training` argument: it must enclose
  the model call while it is traced (inside the `tf.function` or TFF
  computation that trains). Nested scopes use the innermost key.

  Args:
    key: An int64 scalar tensor identifying the training step, e.g.
      `fingerprint((round_key, batch, step))`.

  Yields:
    None.
  """
  key = tf.cast(tf.convert_to_tensor(key), tf.int64)
  if key.shape.rank != 0:
    raise ValueError(f'step_seed: key must be a scalar, got shape {key.shape}.')
  previous = _active_scope()
  _STATE.scope = _Scope(key)
  try:
    yield
  finally:
    _STATE.scope = previous


def fingerprint(structure: Any) -> tf.Tensor:
  """FarmHash64 of the bytes of every tensor in `structure`, as int64 [].

  Exact and order-sensitive: equal values in the same order give the same
  fingerprint on every run and thread count (no floating-point reduction is
  involved); changing one bit of one tensor changes it.

  Args:
    structure: A nested structure of numeric or boolean tensors (or values
      convertible to tensors). Strings are hashed by content.

  Returns:
    An int64 scalar tensor.
  """
  rows = []
  for leaf in tf.nest.flatten(structure):
    leaf = tf.convert_to_tensor(leaf)
    # `tf.fingerprint` hashes each row of its input; one row = the whole leaf.
    rows.append(tf.fingerprint(tf.reshape(leaf, [1, -1])))
  combined = tf.fingerprint(tf.reshape(tf.concat(rows, axis=1), [1, -1]))
  return tf.reshape(tf.bitcast(combined, tf.int64), [])


class _SeededMasks(tf.Module):
  """Stands in for a Keras dropout layer's `_random_generator`.

  Keras 2.14's `Dropout.call` draws its mask with
  `self._random_generator.dropout(inputs, rate, noise_shape)`; this object
  answers that call with a stateless mask inside a `step_seed` scope and
  forwards to the layer's own generator outside one.
  """

  def __init__(self, fallback, seed: int, layer_index: int):
    super().__init__(name='seeded_dropout_masks')
    self.fallback = fallback
    self.seed = seed
    self.layer_index = layer_index

  def _maybe_init(self):
    # `BaseRandomLayer.build` initializes its generator.
    self.fallback._maybe_init()  # pylint: disable=protected-access

  def dropout(self, inputs, rate, noise_shape=None):
    scope = _active_scope()
    if scope is None:
      return self.fallback.dropout(inputs, rate, noise_shape=noise_shape)
    call = scope.next_call(self.layer_index)
    seed = tf.random.experimental.stateless_fold_in(
        tf.stack([scope.key, tf.constant(self.seed, tf.int64)]),
        self.layer_index * 1024 + call)
    return tf.nn.experimental.stateless_dropout(
        inputs, rate=rate, seed=seed, noise_shape=noise_shape)


def seed_dropout_layers(model: tf.keras.layers.Layer, seed: int) -> int:
  """Makes every `Dropout` layer in built `model` draw seeded masks.

  Call it once the model's sublayers exist (after a first call), so that
  lazily created ones, such as `MultiHeadAttention`'s attention dropout,
  are included. Layers are numbered in the order Keras tracks them, which
  is fixed by the model's code.

  Args:
    model: A built Keras layer or model.
    seed: The model's seed; models with different seeds draw different
      masks for the same step key.

  Returns:
    The number of dropout layers seeded.

  Raises:
    TypeError: If a dropout layer has no `_random_generator` (a Keras other
      than the Keras 2 this library pins).
  """
  # Keras's own depth-first walk in attribute-assignment order: fixed by the
  # model's code. (`submodules` sorts by attribute name, and layer names
  # carry global counters that depend on how many models were built.)
  layers = [layer for layer in model._flatten_layers(include_self=True)  # pylint: disable=protected-access
            if isinstance(layer, tf.keras.layers.Dropout)]
  for index, layer in enumerate(layers):
    generator = getattr(layer, '_random_generator', None)
    if generator is None:
      raise TypeError(
          f'seed_dropout_layers: {layer.name!r} has no _random_generator; '
          'this Keras is not the Keras 2 that tff_nlp supports.')
    if isinstance(generator, _SeededMasks):
      generator = generator.fallback
    layer._random_generator = _SeededMasks(generator, seed, index)  # pylint: disable=protected-access
  return len(layers)
