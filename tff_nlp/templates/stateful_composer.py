"""One composer for processes whose clients keep state.

`compose_stateful_clients_process` is to processes with stateful clients
what `tff.learning.templates.compose_learning_process` is to
`LearningProcess`es: a round is a distributor, client work, an aggregator
and a finalizer composed, and the server state is ONE fixed type,
`StatefulClientsState`, the fields of TFF's `LearningAlgorithmState` plus
the round number, whatever parts a process is built from (a part without
state has `()`).

The parts, with M the model weights type (`ModelWeights`), D a client's
data, C a client's state, U a client's update, R the aggregate and
X, Y, Z, V their measurements (named structures, or `()`):

*   `distributor`: a `tff.learning.templates.DistributionProcess`, e.g.
    TFF's `build_broadcast_process(M)` (state `()`);
*   `client_work`: a `tff.templates.MeasuredProcess` whose `next` is
    `(<H@SERVER, M@CLIENTS, {D}@CLIENTS, {C}@CLIENTS> -> <state=H@SERVER,
    result=<client_states=C, update=U>@CLIENTS, measurements=X@SERVER>)`:
    TFF's `ClientWorkProcess` with the clients' states as a fourth input
    and a part of the result;
*   `aggregator`: a `tff.templates.MeasuredProcess` whose `next` is
    `(<A@SERVER, M@SERVER, M@CLIENTS, {U}@CLIENTS> -> <state=A@SERVER,
    result=R@SERVER, measurements=Y@SERVER>)`: the global model at the
    server and as distributed come with the updates (an aggregator of
    deltas from the global model needs both);
*   `finalizer`: a `tff.learning.templates.FinalizerProcess`
    `(<F@SERVER, M@SERVER, R@SERVER> -> <state=F@SERVER, result=M@SERVER,
    measurements=Z@SERVER>)`, e.g. one built on TFF's
    `build_apply_optimizer_finalizer`.

The round's metrics are the parts' measurements merged into one
structure, in the order distributor, client work, aggregator, finalizer
(their names must differ; `()` contributes nothing), so that a process's
metrics stay flat as its users read them.

Per-client outputs are an optional output of the one `next`: client work
whose `next` returns a `client_work.ClientWorkOutput` (a
`client_work.MeasuredProcessWithClientOutputs`, `... ->
<state=H@SERVER, result=<client_states=C, update=U>@CLIENTS,
measurements=X@SERVER, client_outputs={O}@CLIENTS>`) gives a `next` that
returns a `stateful_clients.RoundOutputWithClientOutputs`, the same round
plus `client_outputs={O}@CLIENTS`; any other client work, a
`stateful_clients.RoundOutput`.
"""

import collections
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import tensorflow_federated as tff

from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.templates import stateful_clients


class StatefulClientsState(NamedTuple):
  """The server state of every composed process with stateful clients.

  TFF's `LearningAlgorithmState` and the round number; a part without state
  has `()`.

  Attributes:
    global_model_weights: The global model, `ModelWeights`.
    distributor: The distributor's state.
    client_work: The client work's state (e.g. the client optimizer's
      hparams).
    aggregator: The aggregator's state.
    finalizer: The finalizer's state (e.g. the server optimizer's).
    round_num: Rounds run so far (int32).
  """

  global_model_weights: Any
  distributor: Any
  client_work: Any
  aggregator: Any
  finalizer: Any
  round_num: Any


class ComposedProcess(tff.templates.IterativeProcess):
  """A process of `compose_stateful_clients_process`.

  `initialize`: `( -> S@SERVER)`, S = `StatefulClientsState`; `next`:
  `(<state=S@SERVER, client_data={D}@CLIENTS, client_states={C}@CLIENTS>
  -> RoundOutput<state=S@SERVER, client_states={C}@CLIENTS,
  metrics=X@SERVER>)`, or with per-client outputs
  `RoundOutputWithClientOutputs<state=S@SERVER, client_states={C}@CLIENTS,
  metrics=X@SERVER, client_outputs={O}@CLIENTS>`; `get_model_weights`
  `(S -> M)` and `set_model_weights` `(<S, M> -> S)`; and the methods of a
  `stateful_clients.StatefulClientsProcess`.
  """

  def __init__(self, initialize_fn: tff.Computation, next_fn: tff.Computation,
               *, get_model_weights_fn: tff.Computation,
               set_model_weights_fn: tff.Computation,
               initial_client_state_fn: Callable[[Any], Any]):
    super().__init__(initialize_fn, next_fn)
    self._get_model_weights = get_model_weights_fn
    self._set_model_weights = set_model_weights_fn
    self._initial_client_state_fn = initial_client_state_fn

  @property
  def get_model_weights(self) -> tff.Computation:
    return self._get_model_weights

  @property
  def set_model_weights(self) -> tff.Computation:
    return self._set_model_weights

  def initial_client_state(self, state: Any = None) -> Any:
    """A client's state before its first round, from server `state`
    (`initialize()` if None), as numpy values."""
    if state is None:
      state = self.initialize()
    weights = model_weights_of(state)
    return self._initial_client_state_fn(tff.learning.models.ModelWeights(
        trainable=[np.asarray(w) for w in weights.trainable],
        non_trainable=[np.asarray(w) for w in weights.non_trainable]))

  def initial_client_states(self, state: Any, num_clients: int) -> list[Any]:
    """K clients' states before their first round, from server `state`."""
    return [self.initial_client_state(state) for _ in range(num_clients)]

  def round_computation_for(self, state: Any) -> tff.Computation:
    """The round (`next`), the same from every state."""
    del state  # Unused.
    return self.next


def model_weights_of(state: Any) -> tff.learning.models.ModelWeights:
  """The global model weights of a `StatefulClientsState` (Python side; also
  of one read back as a dict)."""
  if isinstance(state, StatefulClientsState):
    return state.global_model_weights
  return state['global_model_weights']


def _is_empty(value_type: tff.Type) -> bool:
  member = getattr(value_type, 'member', value_type)
  return isinstance(member, tff.StructType) and not member


def merge_measurements(*measurements: Any) -> Any:
  """Named structures @SERVER merged into one OrderedDict @SERVER, in order
  (call in a federated context); empty ones contribute nothing."""
  parts = [m for m in measurements if not _is_empty(m.type_signature)]
  names = [tff.structure.name_list(m.type_signature.member) for m in parts]
  flat = [name for part in names for name in part]
  if len(set(flat)) != len(flat):
    raise ValueError(f'The parts\' measurements share names: {names}.')
  if not parts:
    return tff.federated_value(collections.OrderedDict(), tff.SERVER)
  zipped = tff.federated_zip(collections.OrderedDict(
      (str(i), part) for i, part in enumerate(parts)))

  @tff.tensorflow.computation(zipped.type_signature.member)
  def merge(values):
    merged = collections.OrderedDict()
    for i, part_names in enumerate(names):
      for name in part_names:
        merged[name] = values[str(i)][name]
    return merged

  return tff.federated_map(merge, zipped)


def compose_stateful_clients_process(
    initial_model_weights_fn: tff.Computation,
    distributor: tff.learning.templates.DistributionProcess,
    client_work: tff.templates.MeasuredProcess,
    aggregator: tff.templates.MeasuredProcess,
    finalizer: tff.learning.templates.FinalizerProcess,
    *,
    initial_client_state_fn: Callable[[Any], Any],
    process_class: type[ComposedProcess] = ComposedProcess,
    **process_kwargs,
) -> ComposedProcess:
  """Composes a process with stateful clients from its parts.

  See the module docstring for the parts' type signatures. The round:

      distributed = distributor(global weights)
      client_states, updates = client_work(distributed, D, C)
      aggregate = aggregator(global weights, distributed, updates)
      global weights = finalizer(global weights, aggregate)

  Type signatures: `initialize` `( -> S@SERVER)` and `next`
  `(<state=S@SERVER, client_data={D}@CLIENTS, client_states={C}@CLIENTS>
  -> RoundOutput<state=S@SERVER, client_states={C}@CLIENTS,
  metrics=<X, Y, Z merged>@SERVER>)`, S = `StatefulClientsState<
  global_model_weights=M, distributor=, client_work=H, aggregator=A,
  finalizer=F, round_num=int32>`.

  With client work that returns per-client outputs (a
  `client_work.MeasuredProcessWithClientOutputs`, whose `next` returns a
  `ClientWorkOutput` with `client_outputs={O}@CLIENTS`), the one `next` is
  `(<state=S@SERVER, client_data={D}@CLIENTS, client_states={C}@CLIENTS>
  -> RoundOutputWithClientOutputs<state=S@SERVER,
  client_states={C}@CLIENTS, metrics=<X, Y, Z merged>@SERVER,
  client_outputs={O}@CLIENTS>)`: the same round (the same state and
  metrics) plus the client work's `client_outputs`.

  Args:
    initial_model_weights_fn: A `tff.Computation` `( -> M)`.
    distributor: A `DistributionProcess`.
    client_work: The client work, a `MeasuredProcess` (module docstring),
      a `client_work.MeasuredProcessWithClientOutputs` for per-client
      outputs.
    aggregator: The aggregator, a `MeasuredProcess` (module docstring).
    finalizer: A `FinalizerProcess` whose update type is the aggregate's.
    initial_client_state_fn: A Python callable from the global model (numpy
      `ModelWeights`) to a client's state before its first round.
    process_class: `ComposedProcess` or a subclass.
    **process_kwargs: Further arguments of `process_class`.

  Returns:
    A `process_class`.
  """
  for name, part, kind in (
      ('distributor', distributor,
       tff.learning.templates.DistributionProcess),
      ('client_work', client_work, tff.templates.MeasuredProcess),
      ('aggregator', aggregator, tff.templates.MeasuredProcess),
      ('finalizer', finalizer, tff.learning.templates.FinalizerProcess)):
    if not isinstance(part, kind):
      raise TypeError(f'{name} must be a {kind.__name__}, got {type(part)}.')
  weights_type = initial_model_weights_fn.type_signature.result
  client_params = client_work.next.type_signature.parameter
  with_client_outputs = client_work_lib.returns_client_outputs(client_work)

  @tff.tensorflow.computation(np.int32)
  def increment(round_num):
    return round_num + 1

  @tff.federated_computation
  def initialize_fn():
    return tff.federated_zip(StatefulClientsState(
        global_model_weights=tff.federated_eval(initial_model_weights_fn,
                                                tff.SERVER),
        distributor=distributor.initialize(),
        client_work=client_work.initialize(),
        aggregator=aggregator.initialize(),
        finalizer=finalizer.initialize(),
        round_num=tff.federated_value(np.int32(0), tff.SERVER)))

  state_type = initialize_fn.type_signature.result

  @tff.federated_computation(state_type, client_params[2], client_params[3])
  def next_fn(state, client_data, client_states):
    distributed = distributor.next(state.distributor,
                                   state.global_model_weights)
    work = client_work.next(state.client_work, distributed.result,
                            client_data, client_states)
    aggregated = aggregator.next(state.aggregator, state.global_model_weights,
                                 distributed.result, work.result.update)
    finalized = finalizer.next(state.finalizer, state.global_model_weights,
                               aggregated.result)
    new_state = tff.federated_zip(StatefulClientsState(
        global_model_weights=finalized.result,
        distributor=distributed.state,
        client_work=work.state,
        aggregator=aggregated.state,
        finalizer=finalized.state,
        round_num=tff.federated_map(increment, state.round_num)))
    metrics = merge_measurements(distributed.measurements, work.measurements,
                                 aggregated.measurements,
                                 finalized.measurements)
    if not with_client_outputs:
      return stateful_clients.RoundOutput(
          state=new_state, client_states=work.result.client_states,
          metrics=metrics)
    return stateful_clients.RoundOutputWithClientOutputs(
        state=new_state, client_states=work.result.client_states,
        metrics=metrics, client_outputs=work.client_outputs)

  @tff.tensorflow.computation(state_type.member)
  def get_model_weights_fn(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type.member, weights_type)
  def set_model_weights_fn(state, weights):
    return state._replace(global_model_weights=weights)

  return process_class(
      initialize_fn, next_fn, get_model_weights_fn=get_model_weights_fn,
      set_model_weights_fn=set_model_weights_fn,
      initial_client_state_fn=initial_client_state_fn, **process_kwargs)
