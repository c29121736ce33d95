"""Processes whose `next` returns more than TFF's template allows.

`client_work.WeightedClientWorkProcess` and `algorithms.fl_process.FLProcess`
subclass TFF templates (`ClientWorkProcess`, `LearningProcess`) whose
constructors accept only TFF's output structure (`MeasuredProcessOutput`,
`LearningProcessOutput`), while with per-client outputs their one `next`
returns that structure plus a CLIENTS-placed `client_outputs` field. Both
then skip the template's constructor and check their contract here, the one
place that does it: the output's container and the placement of each field,
then `tff.templates.IterativeProcess`'s own checks (initialize and next
agree on the state), and the hparams computations the templates' properties
read.
"""

from collections.abc import Sequence
from typing import Optional

import tensorflow_federated as tff


def check_output_placements(
    next_fn: tff.Computation,
    container: type,
    placements: Sequence[tuple[str, tff.framework.PlacementLiteral]],
    *,
    name: str = 'next',
) -> None:
  """Checks that `next_fn` returns a `container` with placed fields.

  Args:
    next_fn: The `tff.Computation` to check, `(... -> container<...>)`.
    container: The Python container (a `NamedTuple` class) the result must
      have, e.g. `client_work.ClientWorkOutput`.
    placements: `(field, placement)` pairs: each named field of the result
      must be a `tff.FederatedType` placed at `placement`.
    name: What the error messages call `next_fn`.

  Raises:
    TypeError: If the result is not a `container` or a field is not placed
      as given.
  """
  result = next_fn.type_signature.result
  if not (isinstance(result, tff.StructWithPythonType)
          and result.python_container is container):
    raise TypeError(
        f'{name} must return a {container.__name__}, got {result}.')
  for field, placement in placements:
    value_type = getattr(result, field)
    if not (isinstance(value_type, tff.FederatedType)
            and value_type.placement is placement):
      raise TypeError(f'{name}\'s {field} must be placed at {placement}, '
                      f'got {value_type}.')


def init_process(
    process: tff.templates.IterativeProcess,
    initialize_fn: tff.Computation,
    next_fn: tff.Computation,
    *,
    next_is_multi_arg: Optional[bool],
    get_hparams_fn: tff.Computation,
    set_hparams_fn: tff.Computation,
) -> None:
  """Initializes `process` as a TFF template would, minus its output check.

  Runs `tff.templates.IterativeProcess.__init__` (initialize and next agree
  on the state) and sets the attributes TFF's `ClientWorkProcess` and
  `LearningProcess` read in their `get_hparams` and `set_hparams`
  properties, so a subclass needs no properties of its own. The caller
  checks the output first (`check_output_placements`).

  Args:
    process: The template instance being constructed (`self`).
    initialize_fn: Its `initialize`.
    next_fn: Its `next`.
    next_is_multi_arg: As `tff.templates.IterativeProcess`'s.
    get_hparams_fn: `(S -> H)`.
    set_hparams_fn: `(<S, H> -> S)`.
  """
  tff.templates.IterativeProcess.__init__(
      process, initialize_fn, next_fn, next_is_multi_arg=next_is_multi_arg)
  process._get_hparams_fn = get_hparams_fn  # pylint: disable=protected-access
  process._set_hparams_fn = set_hparams_fn  # pylint: disable=protected-access
