"""Rounds whose server state stays in the TFF worker between calls.

`process.next(state, data)` from Python sends the whole server state to the
worker and brings the new one back every round: for a model of V rows that
is O(V) serialisation per round even when the round itself touches a few
rows (a partial model with `tff.federated_select`; measured in
`docs/results/federated_select.md`). A deployed server keeps its model where
it computes. `ResidentProcess` does that with TFF's public executor API
(`tff.framework.RemoteExecutor`): the state is a value owned by the worker,
each round is a call on it, and only the metrics are materialised; the state
crosses to Python only when asked for (`state()`, e.g. for a checkpoint or
an evaluation).

  with tff_nlp.runtime.local_cpp_context() as context:
    resident = ResidentProcess(process, context.worker, num_clients=10)
    resident.set_state(process.initialize())
    for round_data in rounds:
      metrics = resident.next(round_data)
    weights = process.get_model_weights(resident.state())

Every round must have `num_clients` clients: TFF's executor is made for one
number of clients, and the state lives in that executor.

The clients' data can be kept in the worker too (`put_client_data`), for
rounds over the same clients and data: in a deployment each client holds its
data, so sending every client's dataset from Python each round is a cost of
the simulation, not of the round (about 0.03 s for ten clients of TREC-6
batches on idle cores, `select_scaling`). A dataset kept this way is still iterated anew in every round.
"""

import asyncio
from typing import Any

import tensorflow_federated as tff

from tff_nlp.runtime import workers as workers_lib


class ResidentClientData:
  """Client data kept in a `ResidentProcess`'s worker (`put_client_data`)."""

  def __init__(self, value, owner):
    self._value, self._owner = value, owner


class ResidentProcess:
  """A `LearningProcess` (or any `(state, data) -> <state, ...>` process)
  whose state is kept in one TFF worker between rounds.

  Attributes:
    process: The process whose `next` runs.
    num_clients: Clients in every round.
  """

  def __init__(self, process, worker: workers_lib.Worker, *,
               num_clients: int):
    """Prepares the worker's executor and `process.next` in it.

    Args:
      process: A process whose `next` has type `(<S@SERVER, D@CLIENTS> ->
        <state=S@SERVER, metrics=M@SERVER>)` (`tff.learning.templates.
        LearningProcess`, or any process whose result's first element is
        its new state).
      worker: The TFF worker (`CppContext.worker`) that keeps the state.
      num_clients: Clients in every round.

    Raises:
      ValueError: For fewer than one client.
      TypeError: If `process.next` does not take `(state, client data)`.
    """
    if num_clients < 1:
      raise ValueError(f'num_clients must be >= 1, got {num_clients}.')
    parameter = process.next.type_signature.parameter
    if not isinstance(parameter, tff.StructType) or len(parameter) != 2:
      raise TypeError('ResidentProcess runs a next of (state, client data), '
                      f'got {process.next.type_signature}.')
    self.process = process
    self.num_clients = num_clients
    self._state_type, self._data_type = parameter[0], parameter[1]
    self._result_type = process.next.type_signature.result
    self._loop = asyncio.new_event_loop()
    worker.check_alive()
    self._executor = tff.framework.RemoteExecutor(worker.stub)
    self._executor.set_cardinalities({tff.CLIENTS: num_clients})
    compiled = workers_lib.compile_for_worker(process.next)
    self._next = self._run(self._executor.create_value(
        compiled, compiled.type_signature))
    self._state = None

  def _run(self, coroutine):
    return self._loop.run_until_complete(coroutine)

  def set_state(self, state: Any) -> None:
    """Puts `state` (a Python value of the process's state) in the worker."""
    self._state = self._run(self._executor.create_value(
        tff.tensorflow.transform_args(state), self._state_type))

  def put_client_data(self, client_data: Any) -> ResidentClientData:
    """Puts a round's client data in the worker, for `next` to reuse.

    Args:
      client_data: Client data as for `process.next`, one element per
        client.

    Returns:
      A handle that `next` takes in place of the data, as often as wanted.

    Raises:
      ValueError: If `client_data` has not `num_clients` elements.
    """
    self._check_clients(client_data)
    return ResidentClientData(self._run(self._executor.create_value(
        tff.tensorflow.transform_args(client_data), self._data_type)), self)

  def _check_clients(self, client_data):
    if len(client_data) != self.num_clients:
      raise ValueError(f'client_data has {len(client_data)} clients; this '
                       f'ResidentProcess runs rounds of {self.num_clients}.')

  def next(self, client_data: Any) -> Any:
    """One round on the state in the worker; returns the metrics only.

    Args:
      client_data: The round's client data (as for `process.next`), one
        element per client; or a `ResidentClientData` of this process.

    Returns:
      The round's metrics (`metrics` of `process.next`'s result), a Python
      structure as `process.next` returns it.

    Raises:
      RuntimeError: Before `set_state`.
      ValueError: If `client_data` has not `num_clients` elements, or is
        another `ResidentProcess`'s.
    """
    if self._state is None:
      raise RuntimeError('ResidentProcess.next before set_state(state).')
    if not isinstance(client_data, ResidentClientData):
      client_data = self.put_client_data(client_data)
    elif client_data._owner is not self:  # pylint: disable=protected-access
      raise ValueError('client_data was put in another ResidentProcess '
                       '(each has its own executor).')
    data = client_data._value  # pylint: disable=protected-access

    async def round_():
      argument = await self._executor.create_struct([self._state, data])
      output = await self._executor.create_call(self._next, argument)
      state = await self._executor.create_selection(output, 0)
      metrics = await self._executor.create_selection(output, 1)
      return state, await metrics.compute()

    self._state, metrics = self._run(round_())
    return self._to_python(metrics, self._result_type[1])

  def state(self) -> Any:
    """The state, brought from the worker (O(state) bytes)."""
    if self._state is None:
      raise RuntimeError('ResidentProcess.state before set_state(state).')
    return self._to_python(self._run(self._state.compute()),
                           self._state_type)

  @staticmethod
  def _to_python(value, type_spec):
    if isinstance(type_spec, tff.FederatedType):
      type_spec = type_spec.member  # A server value: the member is computed.
    value = tff.tensorflow.transform_result(value)
    return tff.types.type_to_py_container(value, type_spec)

  def close(self) -> None:
    """Releases the worker's values and this object's event loop."""
    self._state = None
    self._next = None
    self._executor.close()
    self._loop.close()

  def __enter__(self) -> 'ResidentProcess':
    return self

  def __exit__(self, *exc) -> None:
    self.close()
