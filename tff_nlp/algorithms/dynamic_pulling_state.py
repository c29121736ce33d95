"""The client state, client data and process class of dynamic pulling.

The server state is `stateful_composer.StatefulClientsState`, one type
for every option.

See `dynamic_pulling` (which re-exports every name here) for the process.
"""

import collections
from collections.abc import Callable
from typing import Any, NamedTuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.templates import stateful_composer

TRAINING_DATA = 'training_data'
SEED = 'seed'
DATA_SIZE = 'data_size'


class ClientState(NamedTuple):
  """A client's state between rounds.

  Attributes:
    weights: `tff.learning.models.ModelWeights` at the end of its last local
      training.
    shared: bool[T], which trainable tensors it sent in its last round.
  """

  weights: Any
  shared: Any


class DynamicPullingProcess(stateful_composer.ComposedProcess):
  """The process of `build_dynamic_pulling_process`.

  A `stateful_composer.ComposedProcess` (its server state a
  `StatefulClientsState`, `get_model_weights` `(S -> M)`,
  `set_model_weights` `(<S, M> -> S)`, the methods of a
  `stateful_clients.StatefulClientsProcess`), with the settings it was
  built with: `mode`, `tensor_groups`, `keep_private`, `push`.
  """

  def __init__(self, initialize_fn, next_fn, *, get_model_weights_fn,
               set_model_weights_fn, initial_client_state_fn, mode,
               tensor_groups, keep_private, push):
    super().__init__(initialize_fn, next_fn,
                     get_model_weights_fn=get_model_weights_fn,
                     set_model_weights_fn=set_model_weights_fn,
                     initial_client_state_fn=initial_client_state_fn)
    self.mode = mode
    self.tensor_groups = tuple(tensor_groups)
    self.keep_private = keep_private
    self.push = push


def client_data(training_data: Any, seed=(0, 0),
                data_size: float = 0.0) -> collections.OrderedDict:
  """One client's data D for `next`.

  Args:
    training_data: Its batches (a `tf.data.Dataset`), or with
      `with_client_config` the output of `templates.with_client_config`.
    seed: Two integers, the stateless seed of `random` mode (vary it by
      round and client for independent choices).
    data_size: Its aggregation weight n_k, e.g. the size of its corpus when
      every client trains a fixed number of steps (the paper); 0: the
      examples it trained on, as `client_work`'s `num_examples` weighting.
  """
  if not (np.isfinite(data_size) and data_size >= 0):
    raise ValueError(f'data_size must be finite and >= 0, got {data_size!r}.')
  return collections.OrderedDict([
      (TRAINING_DATA, training_data),
      (SEED, np.asarray(seed, np.int64)),
      (DATA_SIZE, np.float32(data_size)),
  ])


def get_model_weights(state) -> tff.learning.models.ModelWeights:
  """The global model weights of a server state (Python side)."""
  return stateful_composer.model_weights_of(state)


def new_client_state(weights) -> ClientState:
  """A client's state before its first round from the global `weights`:
  all tensors shared, so every client takes every tensor in round 1."""
  return ClientState(
      weights=weights, shared=np.ones([len(weights.trainable)], np.bool_))


def _as_numpy_weights(weights) -> tff.learning.models.ModelWeights:
  return tff.learning.models.ModelWeights(
      trainable=[np.asarray(w) for w in weights.trainable],
      non_trainable=[np.asarray(w) for w in weights.non_trainable],
  )


def initial_client_state(
    process_or_model_fn: Union[
        DynamicPullingProcess,
        Callable[[], tff.learning.models.VariableModel],
    ],
    state: Any = None,
) -> ClientState:
  """A client's state before its first round, as numpy values.

  Its weights are the global model: of `state` (e.g. after
  `process.set_model_weights` put a pre-trained model in it) or of
  `process.initialize()`, or the weights of a model built by `model_fn`
  (which must then build the same weights on every call, e.g. seeded).
  `shared` is all True, so every client takes every tensor in round 1.

  Args:
    process_or_model_fn: A `DynamicPullingProcess` or a `model_fn`.
    state: A server state of the process (only with a process).

  Returns:
    A `ClientState` of numpy arrays.
  """
  if isinstance(process_or_model_fn, DynamicPullingProcess):
    return process_or_model_fn.initial_client_state(state)
  if state is not None:
    raise ValueError('state needs a DynamicPullingProcess, not a model_fn.')
  model = process_or_model_fn()
  weights = tf.nest.map_structure(
      lambda v: v.numpy(), tff.learning.models.ModelWeights.from_model(model))
  return new_client_state(_as_numpy_weights(weights))
