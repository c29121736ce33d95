"""What leaves the clients: the CLIENTS→SERVER flows of a TFF computation.

In TFF a CLIENTS-placed value reaches the SERVER only through an aggregating
intrinsic (federated_sum, federated_mean, federated_aggregate, min/max or a
secure sum). Walking a computation's building block and listing those calls
with the member type they aggregate tells a user exactly what a round of a
learning process reveals beyond the clients, so they can judge the exposure
(and, e.g., decide which values need secure aggregation or DP).
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


@dataclasses.dataclass(frozen=True)
class ClientFlow:
  """One aggregating call: `intrinsic` applied to a `{value_type}@CLIENTS`."""

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


def client_to_server_flows(computation: tff.Computation) -> list[ClientFlow]:
  """Lists every CLIENTS→SERVER aggregation in `computation`, in trace order.

  Args:
    computation: A federated `tff.Computation`, e.g. `process.next`.

  Returns:
    One `ClientFlow` per aggregating intrinsic call.
  """
  flows = []

  def visit(block):
    if (
        isinstance(block, tff.framework.Intrinsic)
        and block.uri in CLIENTS_TO_SERVER_INTRINSICS
    ):
      flows.append(ClientFlow(block.uri, clients_value_type(block)))
    for child in block.children():
      visit(child)

  visit(computation.to_building_block())
  return flows
