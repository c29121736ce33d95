"""Composing a partial-model learning process, every component's state kept.

TFF's `tff.learning.templates.compose_learning_process` chains a
distributor, a client work, an aggregator and a finalizer, and threads each
one's state from round to round in a `LearningAlgorithmState`. A partial
model cannot use it as it is: what a client downloads depends on its data
(its keys select rows with `tff.federated_select`), so distribution and
client work are one step, and its upload is (partly) IndexedSlices, which
TFF's dense aggregators do not take. `compose_partial_model_process` is the
same composition for that shape:

```
state.client_work ──▶ client_work(weights@SERVER, data@CLIENTS)
                        │ {<update=U, update_weight>}@CLIENTS
state.aggregator  ──▶ model_update_aggregator ──▶ model_update_fn
                        │ the finalizer's update @SERVER
state.finalizer   ──▶ model_finalizer(weights, update) ──▶ new model
```

and each `next` hands the aggregator and the finalizer the states they
returned the round before, so stateful aggregators (adaptive clipping,
`tff.learning.robust_aggregator`; DP, `tff.learning.dp_aggregator`;
compression) and stateful server optimizers compose with partial models.

Which aggregator for which part of an update (`build_split_aggregator`):

*   IndexedSlices parts (rows of a vocabulary-indexed tensor): an
    `UnweightedAggregationFactory` that takes IndexedSlices,
    `IndexedSlicesSumFactory` / `IndexedSlicesMeanFactory`, or either wrapped
    in `IndexedSlicesClippingFactory` (fixed or adaptive clipping, stateful).
    TFF's own factories (`MeanFactory`, `robust_aggregator`, DP, ...) accept
    only structures of floats of a fixed shape and refuse these parts.
*   The dense part (every other tensor): any TFF factory, weighted or not
    (`tff.aggregators.MeanFactory`, `tff.learning.robust_aggregator`,
    `tff.learning.dp_aggregator`, ...).

Per-client outputs are an optional output of the one `next`, as for
`algorithms.fl_process.compose_learning_process`: client work whose `next`
returns a `client_work.ClientWorkOutput` (a
`client_work.MeasuredProcessWithClientOutputs`) gives an
`extended_outputs.FLProcess`, whose `next` returns an `FLProcessOutput`
(the same state and metrics, plus `client_outputs={O}@CLIENTS`).
"""

import collections
from collections.abc import Mapping
from typing import Optional

import tensorflow_federated as tff

from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.templates import extended_outputs

DENSE = 'dense'


def compose_partial_model_process(
    initial_model_weights_fn: tff.Computation,
    client_work: tff.templates.MeasuredProcess,
    model_update_aggregator: tff.templates.AggregationProcess,
    model_finalizer: tff.learning.templates.FinalizerProcess,
    *,
    model_update_fn: Optional[tff.Computation] = None,
) -> tff.learning.templates.LearningProcess:
  """Composes a partial-model `LearningProcess` that threads every state.

  With W the model weights, C, A and F the client work's, aggregator's and
  finalizer's states, D a client's data, U a client's upload and R the
  aggregator's result:

  *   `client_work.next`: `(<C@SERVER, W@SERVER, {D}@CLIENTS> ->
      <state=C@SERVER, result={<update=U,update_weight=float32>}@CLIENTS,
      measurements=M_c@SERVER>)`: it distributes (e.g. selects each client's
      rows) and trains; `update_weight` is only read by a weighted
      aggregator.
  *   `model_update_aggregator.next`: `(<A@SERVER, {U}@CLIENTS[,
      {float32}@CLIENTS]> -> <state=A@SERVER, result=R@SERVER,
      measurements=M_a@SERVER>)`.
  *   `model_update_fn` (optional, identity if None): `(R -> G)`, G the
      trainable part of W as the finalizer takes it (e.g. the dense tensors
      of `build_split_aggregator`'s result put back in model order).
  *   `model_finalizer.next`: `(<F@SERVER, W@SERVER, G@SERVER> ->
      <state=F@SERVER, result=W@SERVER, measurements=M_f@SERVER>)`.

  The process:

  *   `initialize`: `( -> S@SERVER)`, S = `LearningAlgorithmState(
      global_model_weights=W, distributor=<>, client_work=C, aggregator=A,
      finalizer=F)` (`distributor` is empty: distribution is client work).
  *   `next`: `(<S@SERVER, {D}@CLIENTS> -> <state=S@SERVER,
      metrics=<distributor=<>, client_work=M_c, aggregator=M_a,
      finalizer=M_f>@SERVER>)`; the aggregator and the finalizer start from
      their states of the previous round.
  *   `get_model_weights`: `(S -> W)`; `set_model_weights`: `(<S, W> -> S)`,
      the other states kept.

  With client work whose `next` returns per-client outputs, a
  `client_work.ClientWorkOutput` `<state=C@SERVER,
  result={<update=U,update_weight=float32>}@CLIENTS,
  measurements=M_c@SERVER, client_outputs={O}@CLIENTS>` (a
  `client_work.MeasuredProcessWithClientOutputs`), an
  `extended_outputs.FLProcess` whose one `next` is `(<S@SERVER,
  {D}@CLIENTS> -> <state=S@SERVER, metrics=<distributor=<>,
  client_work=M_c, aggregator=M_a, finalizer=M_f>@SERVER,
  client_outputs={O}@CLIENTS>)` (an `FLProcessOutput`): the same round,
  state and metrics, plus the client work's `client_outputs`; its other
  methods are the same, with `LearningProcess`'s empty hparams.

  Args:
    initial_model_weights_fn: A no-arg `tff.Computation` returning the
      (unplaced) initial model weights W.
    client_work: A `tff.templates.MeasuredProcess` as above, or a
      `client_work.MeasuredProcessWithClientOutputs` for per-client outputs.
    model_update_aggregator: A `tff.templates.AggregationProcess` of the
      clients' updates U, weighted or not.
    model_finalizer: A `tff.learning.templates.FinalizerProcess`.
    model_update_fn: A `tff.Computation` from the aggregator's result to the
      finalizer's update, or None if they are the same.

  Returns:
    A `tff.learning.templates.LearningProcess`; an
    `extended_outputs.FLProcess` if `client_work` returns per-client
    outputs.

  Raises:
    TypeError: If the components do not fit together.
  """
  weights_type = initial_model_weights_fn.type_signature.result
  _check_types(weights_type, client_work, model_update_aggregator,
               model_finalizer, model_update_fn)
  with_client_outputs = client_work_lib.returns_client_outputs(client_work)
  data_type = client_work.next.type_signature.parameter[2]

  @tff.federated_computation
  def initialize():
    return tff.federated_zip(tff.learning.templates.LearningAlgorithmState(
        global_model_weights=tff.federated_eval(initial_model_weights_fn,
                                                tff.SERVER),
        distributor=tff.federated_value((), tff.SERVER),
        client_work=client_work.initialize(),
        aggregator=model_update_aggregator.initialize(),
        finalizer=model_finalizer.initialize()))

  state_type = initialize.type_signature.result

  @tff.federated_computation(state_type, data_type)
  def next_fn(state, client_data):
    weights = state.global_model_weights
    work = client_work.next(state.client_work, weights, client_data)
    if model_update_aggregator.is_weighted:
      aggregated = model_update_aggregator.next(
          state.aggregator, work.result.update, work.result.update_weight)
    else:
      aggregated = model_update_aggregator.next(state.aggregator,
                                                work.result.update)
    update = (aggregated.result if model_update_fn is None
              else tff.federated_map(model_update_fn, aggregated.result))
    finalized = model_finalizer.next(state.finalizer, weights, update)
    new_state = tff.federated_zip(
        tff.learning.templates.LearningAlgorithmState(
            global_model_weights=finalized.result,
            distributor=state.distributor, client_work=work.state,
            aggregator=aggregated.state, finalizer=finalized.state))
    metrics = tff.federated_zip(collections.OrderedDict(
        distributor=state.distributor,
        client_work=work.measurements,
        aggregator=aggregated.measurements,
        finalizer=finalized.measurements))
    if not with_client_outputs:
      return tff.learning.templates.LearningProcessOutput(new_state, metrics)
    return extended_outputs.FLProcessOutput(new_state, metrics,
                                            work.client_outputs)

  @tff.tensorflow.computation(state_type.member)
  def get_model_weights(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type.member, weights_type)
  def set_model_weights(state, weights):
    return tff.learning.templates.LearningAlgorithmState(
        global_model_weights=weights, distributor=state.distributor,
        client_work=state.client_work, aggregator=state.aggregator,
        finalizer=state.finalizer)

  if with_client_outputs:
    return extended_outputs.FLProcess(initialize, next_fn, get_model_weights,
                                      set_model_weights)
  return tff.learning.templates.LearningProcess(
      initialize, next_fn, get_model_weights, set_model_weights)


def _check_types(weights_type, client_work, aggregator, finalizer,
                 model_update_fn) -> None:
  """Raises a TypeError unless the components chain as documented."""
  if isinstance(weights_type, tff.FederatedType):
    raise TypeError('initial_model_weights_fn must return unplaced weights, '
                    f'got {weights_type}.')
  server_weights = tff.FederatedType(weights_type, tff.SERVER)
  work_parameter = client_work.next.type_signature.parameter
  if len(work_parameter) != 3:
    raise TypeError('client_work.next must take <state, weights@SERVER, '
                    f'data@CLIENTS>, got {work_parameter}.')
  work_parameter[1].check_assignable_from(server_weights)
  result = client_work.next.type_signature.result.result
  aggregator_parameter = aggregator.next.type_signature.parameter
  aggregator_parameter[1].member.check_assignable_from(result.member.update)
  if aggregator.is_weighted:
    aggregator_parameter[2].member.check_assignable_from(
        result.member.update_weight)
  update_type = aggregator.next.type_signature.result.result.member
  if model_update_fn is not None:
    model_update_fn.type_signature.parameter.check_assignable_from(
        update_type)
    update_type = model_update_fn.type_signature.result
  finalizer_parameter = finalizer.next.type_signature.parameter
  finalizer_parameter[1].check_assignable_from(server_weights)
  finalizer_parameter[2].member.check_assignable_from(update_type)


def build_split_aggregator(
    dense: Optional[tff.templates.AggregationProcess],
    sparse: Mapping[str, tff.templates.AggregationProcess],
) -> tff.templates.AggregationProcess:
  """One aggregator of an update split into a dense part and sparse parts.

  A client's update U = `<dense=D, name_1=I_1, ...>` (no `dense` if `dense`
  is None): D the tensors every client sends whole, I_k the rows of a
  vocabulary-indexed tensor as IndexedSlices. `dense` aggregates D (any TFF
  factory's process, weighted or not; the split aggregator is weighted iff
  it is), each `sparse[name]` aggregates its part (an unweighted process
  that takes IndexedSlices, see the module docstring). The process:

  *   `initialize`: `( -> <dense=A_d, name_1=A_1, ...>@SERVER)`.
  *   `next`: `(<state@SERVER, {U}@CLIENTS[, {float32}@CLIENTS]> ->
      <state@SERVER, result=<dense=R_d, name_1=R_1, ...>@SERVER,
      measurements=<dense=M_d, name_1=M_1, ...>@SERVER>)`: every part
      aggregated from its own state of the previous round, the dense part
      first.

  Args:
    dense: The dense part's `AggregationProcess`, or None.
    sparse: The sparse parts' unweighted `AggregationProcess`es by name.

  Returns:
    A `tff.templates.AggregationProcess`.

  Raises:
    ValueError: Without parts, or if a sparse part is named 'dense'.
    TypeError: If a sparse part's process is weighted.
  """
  if DENSE in sparse or not (sparse or dense is not None):
    raise ValueError(f'Expected sparse parts not named {DENSE!r} and at '
                     f'least one part, got dense={dense}, sparse={sparse}.')
  for name, process in sparse.items():
    if process.is_weighted:
      raise TypeError(f'The sparse part {name!r} needs an unweighted '
                      'aggregator (rows have no client weight).')
  parts = collections.OrderedDict(
      ([(DENSE, dense)] if dense is not None else []) + list(sparse.items()))
  weighted = dense is not None and dense.is_weighted
  value_type = tff.StructWithPythonType(
      [(name, process.next.type_signature.parameter[1].member)
       for name, process in parts.items()], collections.OrderedDict)

  @tff.federated_computation
  def initialize():
    return tff.federated_zip(collections.OrderedDict(
        (name, process.initialize()) for name, process in parts.items()))

  def next_impl(state, value, weight=None):
    outputs = collections.OrderedDict()
    for name, process in parts.items():
      part = getattr(value, name)
      if name == DENSE and weighted:
        outputs[name] = process.next(getattr(state, name), part, weight)
      else:
        outputs[name] = process.next(getattr(state, name), part)

    def zipped(field):
      return tff.federated_zip(collections.OrderedDict(
          (name, getattr(output, field)) for name, output in outputs.items()))

    return tff.templates.MeasuredProcessOutput(
        state=zipped('state'), result=zipped('result'),
        measurements=zipped('measurements'))

  state_type = initialize.type_signature.result
  clients_value = tff.FederatedType(value_type, tff.CLIENTS)
  if weighted:
    next_fn = tff.federated_computation(
        lambda state, value, weight: next_impl(state, value, weight),
        state_type, clients_value, dense.next.type_signature.parameter[2])
  else:
    next_fn = tff.federated_computation(
        lambda state, value: next_impl(state, value), state_type,
        clients_value)
  return tff.templates.AggregationProcess(initialize, next_fn)
