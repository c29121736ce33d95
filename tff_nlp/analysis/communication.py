"""Bytes one client downloads and uploads in a round, read from the types.

A federated computation moves data between server and clients only through
intrinsics: down with `federated_broadcast` (the whole value) and
`federated_select` (one value per key, so M values for M keys), up with the
aggregating intrinsics of `client_flows` and with the keys a client sends to
`federated_select`. Walking the computation (e.g. `process.next`) and adding
the byte sizes of those values' types gives the per-client traffic of a
round, for dense and partial-model processes alike.

A tensor whose leading dimension is unknown (the IndexedSlices a client of a
partial-model process uploads, `<indices=int64[?],values=float32[?,T]>`) is
counted per row: `Transfer.bytes_per_row`, multiplied by the rows the client
actually sent (the process reports them, e.g. as `rows_received`).

What is not counted: values placed at clients with `federated_value` (part
of the computation itself, not of a round's traffic), and protocol overhead
(gRPC framing, secure-aggregation expansion).
"""

import collections
import dataclasses
import math
from typing import Optional

import numpy as np
import tensorflow_federated as tff

from tff_nlp.analysis import client_flows

DOWN = 'down'
UP = 'up'
SERVER_TO_CLIENTS_INTRINSICS = frozenset({'federated_broadcast',
                                          'federated_select'})


def type_bytes(type_spec: tff.Type, *, rows: int = 0) -> int:
  """Bytes of a value of `type_spec`, with `rows` for unknown leading dims.

  Args:
    type_spec: A tensor type or a structure of them (placement ignored).
    rows: The size of every unknown leading dimension.

  Returns:
    The sum over tensors of itemsize × number of elements.

  Raises:
    ValueError: For a sequence or function type, or an unknown dimension
      other than the first.
  """
  if isinstance(type_spec, tff.FederatedType):
    return type_bytes(type_spec.member, rows=rows)
  if isinstance(type_spec, tff.StructType):
    return sum(type_bytes(member, rows=rows)
               for _, member in tff.structure.iter_elements(type_spec))
  if not isinstance(type_spec, tff.TensorType):
    raise ValueError(f'Cannot count the bytes of {type_spec}: only tensors '
                     'and structures of them have a size.')
  shape = list(type_spec.shape or [])
  if shape and shape[0] is None:
    shape[0] = rows
  if any(d is None for d in shape):
    raise ValueError(f'Cannot count the bytes of {type_spec}: only the '
                     'leading dimension may be unknown.')
  return np.dtype(type_spec.dtype).itemsize * math.prod(shape)


@dataclasses.dataclass(frozen=True)
class Transfer:
  """One intrinsic call's traffic for one client.

  Attributes:
    direction: `DOWN` (server to client) or `UP`.
    intrinsic: The intrinsic, e.g. 'federated_broadcast'.
    value_type: The type of what one client receives or sends (for
      `federated_select`: one selected value, or the keys).
    fixed_bytes: Bytes with every unknown leading dimension at 0 rows.
    bytes_per_row: Bytes added per row of the unknown leading dimensions.
    count: Values per client (M for the values of `federated_select`).
  """

  direction: str
  intrinsic: str
  value_type: tff.Type
  fixed_bytes: int
  bytes_per_row: int
  count: int = 1

  def bytes(self, rows: float = 0.0) -> float:
    return self.count * (self.fixed_bytes + self.bytes_per_row * rows)

  def __str__(self) -> str:
    per_row = f' + {self.bytes_per_row}/row' if self.bytes_per_row else ''
    count = f'{self.count} x ' if self.count != 1 else ''
    return (f'{self.direction} {self.intrinsic}: {count}{self.value_type} '
            f'({self.fixed_bytes} B{per_row})')


def _transfer(direction, intrinsic, value_type, count=1) -> Transfer:
  fixed = type_bytes(value_type, rows=0)
  return Transfer(direction=direction, intrinsic=intrinsic,
                  value_type=value_type, fixed_bytes=fixed,
                  bytes_per_row=type_bytes(value_type, rows=1) - fixed,
                  count=count)


def _select_transfers(block) -> list[Transfer]:
  """The keys up and the M selected values down of a federated_select."""
  keys_type = client_flows.select_keys_type(block)
  (num_keys,) = keys_type.shape
  value_type = block.type_signature.result.member.element
  return [_transfer(UP, block.uri, keys_type),
          _transfer(DOWN, block.uri, value_type, count=num_keys)]


@dataclasses.dataclass(frozen=True)
class RoundCommunication:
  """The per-client traffic of one round of a computation.

  Attributes:
    transfers: Every intrinsic call that moves data, in trace order.
  """

  transfers: tuple[Transfer, ...]

  def bytes_down(self, rows: float = 0.0) -> float:
    """Bytes one client downloads, if it moves `rows` variable rows."""
    return sum(t.bytes(rows) for t in self.transfers if t.direction == DOWN)

  def bytes_up(self, rows: float = 0.0) -> float:
    """Bytes one client uploads, if it sends `rows` variable rows."""
    return sum(t.bytes(rows) for t in self.transfers if t.direction == UP)

  @property
  def has_variable_rows(self) -> bool:
    return any(t.bytes_per_row for t in self.transfers)

  def round_metrics(
      self, *, num_clients: int, rows_received: Optional[float] = None
  ) -> collections.OrderedDict[str, float]:
    """Per-client bytes of a round for its metrics.

    Args:
      num_clients: Clients in the round.
      rows_received: Variable rows all clients sent in the round (e.g. the
        `rows_received` metric of a partial-model process); needed if
        `has_variable_rows`.

    Returns:
      OrderedDict(bytes_down_per_client, bytes_up_per_client): means over
      the round's clients.

    Raises:
      ValueError: If the rows are needed but not given.
    """
    if self.has_variable_rows and rows_received is None:
      raise ValueError('This computation uploads a variable number of rows; '
                       'pass the round\'s rows_received.')
    rows = (rows_received or 0) / max(num_clients, 1)
    return collections.OrderedDict(
        bytes_down_per_client=float(self.bytes_down(rows)),
        bytes_up_per_client=float(self.bytes_up(rows)))


def round_communication(computation: tff.Computation) -> RoundCommunication:
  """The server↔client transfers of a federated computation.

  Args:
    computation: A federated `tff.Computation`, e.g. `process.next`.

  Returns:
    A `RoundCommunication` listing each transfer with its per-client bytes.

  Raises:
    ValueError: If a transferred value has no fixed size (e.g. a sequence).
  """
  transfers = []

  def visit(block):
    if isinstance(block, tff.framework.Intrinsic):
      if block.uri == 'federated_select':
        transfers.extend(_select_transfers(block))
      elif block.uri == 'federated_broadcast':
        transfers.append(_transfer(DOWN, block.uri,
                                   block.type_signature.parameter.member))
      elif block.uri in client_flows.CLIENTS_TO_SERVER_INTRINSICS:
        transfers.append(_transfer(
            UP, block.uri, client_flows.clients_value_type(block)))
    for child in block.children():
      visit(child)

  visit(computation.to_building_block())
  return RoundCommunication(tuple(transfers))
