"""The protocol of processes with stateful clients, and its round-loop adapter.

A process with stateful clients (`dynamic_pulling.DynamicPullingProcess`,
`fcl.FclProcess`) cannot be a `tff.learning.templates.LearningProcess`: its
rounds take and return CLIENTS-placed client states. Its computations have
the signature

  `<S@SERVER, {D}@CLIENTS, {C}@CLIENTS> -> RoundOutput(state=S@SERVER,
  client_states={C}@CLIENTS, metrics=M@SERVER)`

(a round, and FCL's `start_task` with task-start inputs for D), or, for a
round whose client work returns per-client outputs
(`stateful_composer.compose_stateful_clients_process`),

  `<S@SERVER, {D}@CLIENTS, {C}@CLIENTS> -> RoundOutputWithClientOutputs(
  state=S@SERVER, client_states={C}@CLIENTS, metrics=M@SERVER,
  client_outputs={O}@CLIENTS)`,

and the process provides, besides `initialize: ( -> S@SERVER)`:

*   `initial_client_states(state, num_clients)`: K clients' states before
    their first round (numpy values), from a server state;
*   `round_computation_for(state)`: the round computation that runs next
    from server state `state` (FCL: the first task's, which also trains the
    word embedding, or the later tasks');
*   optionally `get_model_weights` `(S -> M)` and `set_model_weights`
    `(<S, M> -> S)`, for a process with a global model (dynamic pulling; an
    FCL client's model has task-specific parts and heads that never leave
    it, so FCL has none).

`SimulationProcess` keeps K clients' states next to the server's in the
round loop's state (a `SimulationState`), and so has the parts of a
`LearningProcess` that `tff_nlp.training.run_training` uses.
"""

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.templates import extended_outputs


class RoundOutput(NamedTuple):
  """The result of a round (or FCL's `start_task`) with stateful clients."""

  state: Any
  client_states: Any
  metrics: Any


class RoundOutputWithClientOutputs(NamedTuple):
  """A `RoundOutput` plus each client's outputs of the round.

  The result of a round whose client work returns per-client outputs
  (`client_work.ClientWorkOutput`): `state`, `client_states` and `metrics`
  as a `RoundOutput`'s, and `client_outputs={O}@CLIENTS`, the client
  work's (in simulation a list in client order). A simulation-only view:
  in a deployment they stay on the clients.
  """

  state: Any
  client_states: Any
  metrics: Any
  client_outputs: Any


class StatefulClientsProcess(Protocol):
  """What `SimulationProcess` needs of a process (module docstring)."""

  def initialize(self) -> Any:
    ...

  def initial_client_states(self, state: Any, num_clients: int) -> list[Any]:
    ...

  def round_computation_for(self, state: Any) -> tff.Computation:
    ...


class SimulationState(NamedTuple):
  """The server's state and every client's, as the round loop keeps them."""

  server: Any
  clients: list[Any]


def _as_numpy(client_state: Any) -> Any:
  return tf.nest.map_structure(np.asarray, client_state)


class SimulationProcess:
  """A process with stateful clients, its K clients' states kept alongside.

  Cross-silo simulation (every client in every round, in the order of their
  ids): the loop's state is a `SimulationState` of numpy values, so
  `tff_nlp.training.run_training` checkpoints the clients' states with the
  server's and a resumed run continues exactly. It has the parts of a
  `LearningProcess` the loop uses:

  *   `initialize()`: the server state and K `initial_client_states`;
  *   `next(state, client_data)`: one round of all K clients (`client_data`
      in client order), returning `LearningProcessOutput(state, metrics)`,
      or, if the round returns per-client outputs
      (`RoundOutputWithClientOutputs`), `extended_outputs.FLProcessOutput(
      state, metrics, client_outputs)`, which the training loop records;
  *   `round_computation_for(state)`: the federated round `next` runs from
      `state`, from which the loop reads the round's traffic;
  *   `get_model_weights(state)` and `set_model_weights(state, weights)`
      (processes with a global model): the latter makes the server's model
      *and* every client's state `weights` (e.g. a pre-trained model), so it
      is meant for the start of training, as the loop uses it;
  *   `client_model_weights(state)`: each client's weights after its last
      local training (its model).

  `apply(computation, state, inputs)` runs any other computation of the
  protocol's signature, e.g. FCL's `start_task`.

  Args:
    process: A `StatefulClientsProcess`.
    num_clients: K.
  """

  def __init__(self, process: StatefulClientsProcess, num_clients: int):
    if num_clients < 1:
      raise ValueError(f'num_clients must be positive, got {num_clients}.')
    self._process = process
    self.num_clients = num_clients

  @property
  def process(self) -> StatefulClientsProcess:
    return self._process

  def round_computation_for(self, state: SimulationState) -> tff.Computation:
    return self._process.round_computation_for(state.server)

  def _clients(self, server) -> list[Any]:
    return [_as_numpy(c) for c in self._process.initial_client_states(
        server, self.num_clients)]

  def initialize(self) -> SimulationState:
    server = self._process.initialize()
    return SimulationState(server=server, clients=self._clients(server))

  def apply(self, computation: tff.Computation, state: SimulationState,
            client_inputs: Sequence[Any]
            ) -> tuple[SimulationState, Any]:
    """Runs `computation(server, client_inputs, clients)`.

    Args:
      computation: Of the protocol's signature (module docstring).
      state: The loop's state.
      client_inputs: One input per client, in client order.

    Returns:
      The new `SimulationState` and the computation's metrics.
    """
    state, output = self._run(computation, state, client_inputs)
    return state, output.metrics

  def _run(self, computation: tff.Computation, state: SimulationState,
           client_inputs: Sequence[Any]) -> tuple[SimulationState, Any]:
    """`apply`, returning the computation's whole output."""
    if len(client_inputs) != self.num_clients:
      raise ValueError(
          f'Every one of the {self.num_clients} clients takes part in every '
          f'round (cross-silo); got data of {len(client_inputs)}. Use '
          'clients_per_round=0.')
    output = computation(state.server, list(client_inputs),
                         list(state.clients))
    clients = [_as_numpy(c) for c in output.client_states]
    return SimulationState(server=output.state, clients=clients), output

  def next(self, state: SimulationState, client_data: Sequence[Any]
           ) -> Union[tff.learning.templates.LearningProcessOutput,
                      extended_outputs.FLProcessOutput]:
    state, output = self._run(self.round_computation_for(state), state,
                              client_data)
    if isinstance(output, RoundOutputWithClientOutputs):
      return extended_outputs.FLProcessOutput(
          state=state, metrics=output.metrics,
          client_outputs=output.client_outputs)
    return tff.learning.templates.LearningProcessOutput(state=state,
                                                        metrics=output.metrics)

  def get_model_weights(self, state: SimulationState
                        ) -> tff.learning.models.ModelWeights:
    return self._process.get_model_weights(state.server)

  def client_model_weights(self, state: SimulationState) -> list[Any]:
    return [c.weights for c in state.clients]

  def set_model_weights(self, state: SimulationState,
                        weights: tff.learning.models.ModelWeights
                        ) -> SimulationState:
    server = self._process.set_model_weights(state.server, weights)
    return SimulationState(server=server, clients=self._clients(server))
