"""Tensor helpers shared by the computations of `fcl`."""

import collections
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.models import fcl_cnn

BYTES_PER_FLOAT = 4


class BuildContext(NamedTuple):
  """What `build_fcl_process` derives from the config and the model once,
  for the builders of its computations (`task_start`, `rounds`).

  Attributes:
    config: The `FclConfig`.
    spec: The `fcl_cnn.FclCnnSpec`.
    optimizer: The clients' Adam (`tff.learning.optimizers`).
    trainable: Keys of the trainable weights (all but the KB's).
    shared: Keys of the federated weights (`fcl_cnn.shared_keys`).
    adaptive: Keys of the task-adaptive weights A (decomposed models).
    kb: Keys of the knowledge-base weights.
    attention: Keys of the KB's attention α.
    widths: The filter widths.
    sit_rows: Rows of a task representation (1 without SIT).
    sit_dim: Its width (1 without SIT).
    kb_size: K.
    num_clients: C.
    num_tasks: T.
    num_slots: C·T.
    new_model: No-arg callable returning a new `fcl_cnn.FclTextCnn`.
    shapes: Weight key -> shape.
    bank_shapes: The kernel shape of each filter bank.
    adaptive_bytes: Bytes of one task's A's (0 without).
    embedding_bytes: Bytes of the word embedding.
    server_type: The server state's TFF type.
    shared_type: Its `shared` part's.
    client_type: A client state's TFF type.
    aggregators: With a `model_aggregator` (federated methods),
      `core.AGGREGATOR_PHASES` -> `delta_aggregation.DeltaAggregator` of
      that phase's shared weights; else None.
  """

  config: Any
  spec: fcl_cnn.FclCnnSpec
  optimizer: Any
  trainable: tuple[str, ...]
  shared: tuple[str, ...]
  adaptive: tuple[str, ...]
  kb: tuple[str, ...]
  attention: tuple[str, ...]
  widths: tuple[int, ...]
  sit_rows: int
  sit_dim: int
  kb_size: int
  num_clients: int
  num_tasks: int
  num_slots: int
  new_model: Callable[[], Any]
  shapes: dict[str, tuple[int, ...]]
  bank_shapes: list[tuple[int, ...]]
  adaptive_bytes: int
  embedding_bytes: int
  server_type: Any
  shared_type: Any
  client_type: Any
  aggregators: Any = None


def trainable_keys(spec: fcl_cnn.FclCnnSpec) -> tuple[str, ...]:
  kb = set(fcl_cnn.kb_keys(spec))
  return tuple(k for k in fcl_cnn.weight_keys(spec) if k not in kb)


def initial_optimizer_state(optimizer, weights, keys):
  state = optimizer.initialize(
      tuple(tf.TensorSpec(weights[k].shape, tf.float32) for k in keys))
  # Python numbers become tensors so that the state has a TFF type.
  return tf.nest.map_structure(tf.convert_to_tensor, state)


def as_loop_state(optimizer_state):
  """Optimizer state with tuples for lists: `tf.data` would pack a list of
  differently shaped tensors into one tensor."""
  return collections.OrderedDict(
      (k, tuple(v) if isinstance(v, (list, tuple)) else v)
      for k, v in optimizer_state.items())


def per_client(byte_counts, num_clients):
  """Summed int64 byte counts -> float64 means per client."""
  return collections.OrderedDict(
      (k, tf.cast(v, tf.float64) / num_clients)
      for k, v in byte_counts.items())


def set_task_slice(tensor, task, value):
  """`tensor[task] = value` for a tensor with a leading task axis."""
  return tf.tensor_scatter_nd_update(tensor, [[task]], value[None])


def num_bytes(shape) -> int:
  return int(np.prod(shape)) * BYTES_PER_FLOAT


def slot_aggregation(value_type, num_slots: int):
  """`tff.federated_aggregate` parts that gather per-slot uploads.

  A client's upload is `OrderedDict(slots=int32[n], sent=bool[n],
  values=...)` with leaves of leading size n; the result holds, per leaf,
  a `[num_slots, ...]` store with the sent values at their slots, and
  `received` (bool `[num_slots]`). Each client writes only its own slots, so
  partial stores are disjoint and merge by addition.
  """
  values_type = value_type['values']

  @tff.tensorflow.computation
  def zero():
    return collections.OrderedDict(
        values=tf.nest.map_structure(
            lambda t: tf.zeros((num_slots,) + tuple(t.shape[1:]), t.dtype),
            tff.types.type_to_tf_tensor_specs(values_type)),
        received=tf.zeros([num_slots], tf.bool))

  store_type = zero.type_signature.result

  @tff.tensorflow.computation(store_type, value_type)
  def accumulate(store, upload):
    indices = tf.boolean_mask(upload['slots'], upload['sent'])[:, None]
    values = tf.nest.map_structure(
        lambda s, v: tf.tensor_scatter_nd_update(
            s, indices, tf.boolean_mask(v, upload['sent'])),
        store['values'], upload['values'])
    received = tf.tensor_scatter_nd_update(
        store['received'], indices,
        tf.ones(tf.shape(indices)[:1], tf.bool))
    return collections.OrderedDict(values=values, received=received)

  @tff.tensorflow.computation(store_type, store_type)
  def merge(a, b):
    return collections.OrderedDict(
        values=tf.nest.map_structure(tf.add, a['values'], b['values']),
        received=tf.logical_or(a['received'], b['received']))

  @tff.tensorflow.computation(store_type)
  def report(store):
    return store

  return zero, accumulate, merge, report


