"""Processes whose `next` returns more than TFF's template allows.

`client_work.WeightedClientWorkProcess`,
`client_work.MeasuredProcessWithClientOutputs` and `FLProcess` (below)
subclass TFF templates (`ClientWorkProcess`, `MeasuredProcess`,
`LearningProcess`) whose constructors accept only TFF's output structure
(`MeasuredProcessOutput`, `LearningProcessOutput`), while with per-client
outputs their one `next` returns that structure plus a CLIENTS-placed
`client_outputs` field. They then skip the template's constructor and check
their contract here, the one place that does it: the output's container and
the placement of each field, then `tff.templates.IterativeProcess`'s own
checks (initialize and next agree on the state), and the hparams
computations the templates' properties read.

`FLProcess` and its output `FLProcessOutput` live here, below the
composers that build them: `algorithms.fl_process.compose_learning_process`
and `partial_model_composer.compose_partial_model_process` (with client
work that returns per-client outputs). A process with stateful clients
returns `stateful_clients.RoundOutputWithClientOutputs` instead, checked
with `check_output_placements` by its composer.
"""

import collections
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

import tensorflow_federated as tff
# What `tff.learning.templates.LearningProcess` builds when it is given no
# hparams computations (not exported; TFF 0.87).


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


class FLProcessOutput(NamedTuple):
  """`tff.learning.templates.LearningProcessOutput` plus per-client outputs.

  What the `next` of an `FLProcess` returns: `state` and `metrics` as a
  `LearningProcessOutput`'s (so code reading only those two runs any
  `LearningProcess`), and `client_outputs`, each client's round statistics
  C (CLIENTS-placed; in simulation a list in the order of the client data).
  """

  state: Any
  metrics: Any
  client_outputs: Any


def _no_hparams_getter(state_type: tff.Type) -> tff.Computation:
  """`(S -> <>)`: what `LearningProcess` uses when a process has no hparams
  (TFF's `hparams_base.build_basic_hparams_getter`, not a public name)."""

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    del state  # No hyperparameters.
    return collections.OrderedDict()

  return get_hparams


def _no_hparams_setter(state_type: tff.Type,
                       hparams_type: tff.Type) -> tff.Computation:
  """`(<S, H> -> S)`, the state unchanged (TFF's basic setter)."""

  @tff.tensorflow.computation(state_type, hparams_type)
  def set_hparams(state, hparams):
    del hparams  # No hyperparameters.
    return state

  return set_hparams


class FLProcess(tff.learning.templates.LearningProcess):
  """A `LearningProcess` whose one `next` also returns per-client outputs.

  `next`: `(<S@SERVER, {D}@CLIENTS> -> <state=S@SERVER, metrics=M@SERVER,
  client_outputs={C}@CLIENTS>)`, an `FLProcessOutput`: the state and
  metrics of the process composed without per-client outputs, plus each
  client's outputs C, those of the client work (e.g. for
  `client_work.build_weighted_client_work`, its batch losses, ΔL, |D_i|,
  the weight used; see `client_work.CLIENT_STAT_KEYS`). A simulation-only
  view: in a deployment they stay on the clients.

  `tff.learning.templates.LearningProcess`'s constructor accepts only a
  `LearningProcessOutput` (state, metrics) result with SERVER-placed
  metrics, so this class checks the rest of its contract itself (with
  `check_output_placements` and `init_process` above): the same placements
  plus `client_outputs@CLIENTS`. The parts' fit is checked where they are
  composed (`algorithms.fl_process.compose_learning_process`,
  `partial_model_composer.compose_partial_model_process`).

  Without `get_hparams_fn` and `set_hparams_fn`, those `LearningProcess`
  builds when given none: `(S -> <>)` and `(<S, <>> -> S)` (TFF's
  `hparams_base`).
  """

  def __init__(self, initialize_fn: tff.Computation,
               next_fn: tff.Computation,
               get_model_weights: tff.Computation,
               set_model_weights: tff.Computation, *,
               get_hparams_fn: Optional[tff.Computation] = None,
               set_hparams_fn: Optional[tff.Computation] = None):
    check_output_placements(
        next_fn, FLProcessOutput,
        (('state', tff.SERVER), ('metrics', tff.SERVER),
         ('client_outputs', tff.CLIENTS)),
        name='next_fn')
    state_type = initialize_fn.type_signature.result.member
    if get_hparams_fn is None:
      get_hparams_fn = _no_hparams_getter(state_type)
    if set_hparams_fn is None:
      set_hparams_fn = _no_hparams_setter(
          state_type, get_hparams_fn.type_signature.result)
    init_process(
        self, initialize_fn, next_fn, next_is_multi_arg=None,
        get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)
    # What `LearningProcess`'s `get_model_weights` and `set_model_weights`
    # properties read.
    self._get_model_weights = get_model_weights
    self._set_model_weights = set_model_weights
