"""The states, client data and process class of dynamic pulling.

See `dynamic_pulling` (which re-exports every name here) for the process.
"""

import collections
from collections.abc import Callable
from typing import Any, NamedTuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

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


class ServerState(NamedTuple):
  """The server state.

  Attributes:
    global_model_weights: `tff.learning.models.ModelWeights`.
    client_work: The client optimizer's hparams (`<learning_rate=float32>`
      for SGD).
    round_num: Rounds run so far (int32).
  """

  global_model_weights: Any
  client_work: Any
  round_num: Any


class ServerStateWithAggregator(NamedTuple):
  """The server state of a process built with a `model_aggregator`.

  Attributes:
    global_model_weights: `tff.learning.models.ModelWeights`.
    client_work: The client optimizer's hparams.
    aggregator: The model aggregator's state, carried between rounds.
    round_num: Rounds run so far (int32).
  """

  global_model_weights: Any
  client_work: Any
  aggregator: Any
  round_num: Any


class ServerStateWithOptimizer(NamedTuple):
  """The server state of a process built with a `server_optimizer_fn`.

  Attributes:
    global_model_weights: `tff.learning.models.ModelWeights`.
    client_work: The client optimizer's hparams.
    aggregator: The model aggregator's state, or `()` without one.
    finalizer: The server optimizer's state (`tff.learning.templates.
      build_apply_optimizer_finalizer`, as in `tff.learning`'s FedAvg).
    round_num: Rounds run so far (int32).
  """

  global_model_weights: Any
  client_work: Any
  aggregator: Any
  finalizer: Any
  round_num: Any


SERVER_STATES = (ServerState, ServerStateWithAggregator,
                 ServerStateWithOptimizer)


class DynamicPullingProcess(tff.templates.IterativeProcess):
  """The process of `build_dynamic_pulling_process`.

  Besides `initialize` and `next`: `get_model_weights` `(S -> M)` and
  `set_model_weights` `(<S, M> -> S)` (TFF computations), the settings it
  was built with (`mode`, `tensor_groups`, `keep_private`, `push`), and the
  methods of a `stateful_clients.StatefulClientsProcess`.
  """

  def __init__(self, initialize_fn, next_fn, *, get_model_weights_fn,
               set_model_weights_fn, mode, tensor_groups, keep_private, push):
    super().__init__(initialize_fn, next_fn)
    self._get_model_weights = get_model_weights_fn
    self._set_model_weights = set_model_weights_fn
    self.mode = mode
    self.tensor_groups = tuple(tensor_groups)
    self.keep_private = keep_private
    self.push = push

  @property
  def get_model_weights(self) -> tff.Computation:
    return self._get_model_weights

  @property
  def set_model_weights(self) -> tff.Computation:
    return self._set_model_weights

  def initial_client_states(self, state: Any,
                            num_clients: int) -> list['ClientState']:
    """K clients' states before their first round, from server `state`."""
    return [initial_client_state(self, state) for _ in range(num_clients)]

  def round_computation_for(self, state: Any) -> tff.Computation:
    """The round (`next`), the same from every state."""
    del state  # Unused.
    return self.next


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
  if isinstance(state, SERVER_STATES):
    return state.global_model_weights
  return state['global_model_weights']


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
    if state is None:
      state = process_or_model_fn.initialize()
    weights = get_model_weights(state)
  else:
    if state is not None:
      raise ValueError('state needs a DynamicPullingProcess, not a model_fn.')
    model = process_or_model_fn()
    weights = tf.nest.map_structure(
        lambda v: v.numpy(), tff.learning.models.ModelWeights.from_model(model)
    )
  weights = _as_numpy_weights(weights)
  return ClientState(
      weights=weights, shared=np.ones([len(weights.trainable)], np.bool_)
  )
