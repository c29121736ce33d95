"""Client weighting mechanisms of Lorar (Zhang et al., ACL 2023, Algorithm 1).

Reference:
  Tianshu Zhang, Changchang Liu, Wei-Han Lee, Yu Su, Huan Sun. Federated
  Learning for Semantic Parsing: Task Formulation, Evaluation Setup, New
  Algorithms. ACL 2023. https://arxiv.org/abs/2305.17221

The server update is a weighted mean of client model deltas whose per-client
weight p_i^t is one of

  num_examples    |D_i|                   ("original")
  uniform         1                        ("equal")
  loss_reduction  ΔL_i^t                   ("lr")
  lorar           |D_i| · ΔL_i^t

normalised over the clients of the round, where ΔL_i^t is the maximum minus the
minimum of the per-batch training losses client i saw in round t.
"""

import enum
from typing import Type, TypeVar, Union

import tensorflow as tf

_E = TypeVar('_E', bound=enum.Enum)


class Weighting(enum.Enum):
  """How the server weights each client's model delta."""

  NUM_EXAMPLES = 'num_examples'
  UNIFORM = 'uniform'
  LOSS_REDUCTION = 'loss_reduction'
  LORAR = 'lorar'

  @property
  def uses_loss_reduction(self) -> bool:
    """Whether the weight depends on ΔL (and so can be zero for everyone)."""
    return self in (Weighting.LOSS_REDUCTION, Weighting.LORAR)


def parse_option(value: Union[str, _E], enum_type: Type[_E], arg_name: str) -> _E:
  """Returns the `enum_type` member named by `value` (a member or its value).

  Raises:
    ValueError: naming `arg_name` and listing the valid names.
  """
  if isinstance(value, enum_type):
    return value
  for member in enum_type:
    if value == member.value:
      return member
  valid = ', '.join(repr(m.value) for m in enum_type)
  raise ValueError(f'Unknown {arg_name} {value!r}; expected one of: {valid}.')


def raw_client_weight(
    weighting: Weighting, dataset_size: tf.Tensor, loss_reduction: tf.Tensor
) -> tf.Tensor:
  """The unnormalised weight of one client (a float32 scalar tensor).

  Args:
    weighting: The mechanism.
    dataset_size: |D_i|, the number of training examples of the client.
    loss_reduction: ΔL_i, max minus min of the client's batch losses.

  Returns:
    The weight before the clients' weights are normalised by their sum.
  """
  if weighting is Weighting.NUM_EXAMPLES:
    return dataset_size
  if weighting is Weighting.UNIFORM:
    return tf.ones_like(dataset_size)
  if weighting is Weighting.LOSS_REDUCTION:
    return loss_reduction
  if weighting is Weighting.LORAR:
    return dataset_size * loss_reduction
  raise ValueError(f'Unhandled weighting {weighting}.')
