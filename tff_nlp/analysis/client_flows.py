"""What leaves the clients: the CLIENTS→SERVER flows of a TFF computation.

In TFF a CLIENTS-placed value reaches the SERVER only through an aggregating
intrinsic (federated_sum, federated_mean, federated_aggregate, min/max or a
secure sum) or as the keys of a `federated_select`: the server reads each
client's keys to pick the values it sends back, so the keys leave the client
too (`communication.round_communication` counts them as upload). Walking a
computation's building block and listing those calls with the member type
they move tells a user exactly what a round of a learning process reveals
beyond the clients, so they can judge the exposure (and, e.g., decide which
values need secure aggregation or DP).

Values a computation returns placed @CLIENTS (e.g. client states) are not
flows: they stay on the clients.
"""

import dataclasses

import tensorflow_federated as tff

# Intrinsics that move a CLIENTS-placed value to the SERVER.
CLIENTS_TO_SERVER_INTRINSICS = frozenset({
    'federated_aggregate',
    'federated_max',
    'federated_mean',
    'federated_min',
    'federated_secure_modular_sum',
    'federated_secure_sum',
    'federated_secure_sum_bitwidth',
    'federated_sum',
    'federated_weighted_mean',
})

# Intrinsics whose CLIENTS-placed keys reach the SERVER (it answers them).
CLIENTS_KEYS_TO_SERVER_INTRINSICS = frozenset({'federated_select'})


@dataclasses.dataclass(frozen=True)
class ClientFlow:
  """One call that moves a `{value_type}@CLIENTS` to the SERVER.

  For `federated_select`, `value_type` is one client's keys.
  """

  intrinsic: str
  value_type: tff.types.Type

  def __str__(self) -> str:
    return f'{self.intrinsic}({self.value_type})'

  @property
  def is_scalar_only(self) -> bool:
    """Whether every tensor in the value is a scalar (counts, sums, weights)."""
    return is_scalar_structure(self.value_type)


def is_scalar_structure(type_spec: tff.types.Type) -> bool:
  if isinstance(type_spec, tff.types.TensorType):
    return not type_spec.shape
  if isinstance(type_spec, tff.types.StructType):
    return all(is_scalar_structure(t) for t in type_spec.children())
  return False  # sequences and functions are never "just scalars"


def clients_value_type(intrinsic) -> tff.types.Type:
  parameter = intrinsic.type_signature.parameter
  if intrinsic.uri == 'federated_aggregate' or isinstance(
      parameter, tff.types.StructType
  ):
    parameter = parameter[0]  # the CLIENTS-placed value; the rest is config
  return parameter.member


def select_keys_type(intrinsic) -> tff.types.Type:
  """One client's keys of a `federated_select` call (they reach the server)."""
  return intrinsic.type_signature.parameter[0].member


def client_to_server_flows(computation: tff.Computation) -> list[ClientFlow]:
  """Lists every CLIENTS→SERVER flow in `computation`, in trace order.

  Args:
    computation: A federated `tff.Computation`, e.g. `process.next`.

  Returns:
    One `ClientFlow` per aggregating intrinsic call and per
    `federated_select` call (its keys).
  """
  flows = []

  def visit(block):
    if isinstance(block, tff.framework.Intrinsic):
      if block.uri in CLIENTS_TO_SERVER_INTRINSICS:
        flows.append(ClientFlow(block.uri, clients_value_type(block)))
      elif block.uri in CLIENTS_KEYS_TO_SERVER_INTRINSICS:
        flows.append(ClientFlow(block.uri, select_keys_type(block)))
    for child in block.children():
      visit(child)

  visit(computation.to_building_block())
  return flows
