"""Dynamic pulling: clients send only some of their tensors, chosen per round.

Reference:
  Peyman Passban, Tanya Roosta, Rahul Gupta, Ankit Chadha, Clement Chung.
  Training Mixed-Domain Translation Models via Federated Learning. NAACL 2022
  ("dynamic pulling"; restated in ../shared/docs/dynamic_pulling.md).
  Baseline "Controllers": Roosta, Passban, Chadha. Communication-efficient
  federated learning for neural machine translation. 2021.

Vocabulary of the paper: *pull* is client -> server, *push* server -> client.

The model's trainable weights are a list of tensors t = 1..T, each in a group
(`tensor_groups`, e.g. 'encoder' / 'decoder'; the caller assigns shared
tensors such as a tied embedding, see `seq2seq_layout.tensor_layout`).
Non-trainable weights are the server's: broadcast to every client, never
aggregated, as in `tff.learning`'s FedAvg.

Clients are stateful. A client's state is `ClientState(weights, shared)`: its
weights at the end of its last local training and which tensors it sent then
(initially the initial global model and all True, `initial_client_state`).
Round r, for client k with weight n_k: its `data_size` when the client data
gives one (> 0), as the paper weights by corpus size while every client runs
the same number of steps; else its examples (one epoch's with
`with_client_config`, else every example of its round, as in `client_work`):

1.  Start model: per tensor, the server's value if the client takes it, else
    its own state's value. With `keep_private` it takes only the tensors it
    shared last round (`shared[t]`); the others stay private: trained on its
    data only and never overwritten by the server. Without `keep_private` it
    takes every tensor.
2.  Local training with `client_work.build_weighted_client_work` and
    `num_examples` weighting: trained = start - update, weight n_k (0 for a
    client without examples or with a non-finite loss or update, whose
    update is zeroed, so trained = start, whatever its `data_size`).
3.  Change norms d_t = ||w_r^t - w_{r-1}^t||_2 (Frobenius) between the
    trained weights and the state's weights (the paper's rule,
    `change_norm='l2'`). A whole-tensor norm grows with the tensor's size,
    so the median splits large matrices (above) from biases and LayerNorm
    vectors (below), and dp_l then sends far fewer than half of the
    *parameters*; `change_norm='rms'` divides by sqrt(size) (the change per
    parameter) to compare tensors of different sizes.
4.  The mask m of tensors to send, per mode (`tensor_selection.Mode`),
    within each group of tensors separately: `tensor_selection` states the
    rules (all; above or below the group's median change norm; random; below
    its 1/3 quantile; a fixed mask). With `split_by='parameters'` the
    median and quantile count parameters, not tensors, so dp_l sends about
    half of the parameters, as the paper's Table 6 reports.
5.  The client sends m[t]·w^t with per-tensor weights n_k·m[t]; a client of
    weight 0 sends nothing.
6.  Its new state is `ClientState(trained weights, m)`.

Server: w^t <- Σ_k n_k m_k[t] w_k^t / Σ_k n_k m_k[t], and a tensor no client
sent keeps its value. It averages weights, not deltas from the client's
start, because a client's start value of a private tensor is not the
server's. With a `model_aggregator` (any weighted TFF aggregator, e.g.
`tff.learning.robust_aggregator`) a client instead sends its deltas from the
global model, m[t]·(g^t - w^t), with weight n_k, and the server rescales the
aggregator's mean per tensor so that `tff.aggregators.MeanFactory()` gives
the same weights (`delta_aggregation` says how and why deltas). With
`max_weight_share` n_k is first replaced by the client's capped share of the
round's weight (`weight_cap.cap_client_weights`), so no client holds more
than that share of any tensor's sum of weights over all clients.

With a `server_optimizer_fn` (FedOpt, Reddi et al. 2021) the average is not
the new model but a step towards it: the server applies the optimizer to
the pseudo-gradient g^t = w^t - avg^t of every tensor some client sent (0
for the others), through `tff.learning.templates.
build_apply_optimizer_finalizer` as `tff.learning`'s FedAvg does, so SGD at
learning rate 1 gives the plain average, momentum gives FedAvgM and Adam
FedAdam. A tensor no client sent still keeps its value, though the
optimizer's state sees its zero gradient. A round whose pseudo-gradient is
not finite leaves the model and the optimizer's state unchanged (the
finalizer's `update_non_finite` measurement).

`keep_private` is False for default and True for every other mode, so that
dp_g, dp_l and random differ only in the rule; it can be overridden. Push:
`'all'` (the server sends every tensor; the default) or `'shared'` (it sends
only the tensors the client will take, those of its `shared`; every tensor in
the first round; the default of dp_l_33 and controllers, needs
`keep_private`). In simulation the push is always a dense broadcast; the
metrics count only what a deployment would transfer.

Metrics (all clients of the round; 4 bytes per float32 parameter):

*   parameters_pulled / parameters_pushed: summed over clients, int64;
    `..._per_client` and bytes_pulled_per_client / bytes_pushed_per_client:
    means over clients, float64. Push counts the tensors the server sends
    (all, or with push='shared' those of the client's `shared`) plus the
    non-trainable weights; pull counts the tensors a client of weight > 0
    sends.
*   tensors_sent: per group, summed over clients; tensors_updated: tensors
    the server received from at least one client.
*   non_finite_clients, and the client work's `train` (model metrics) and
    `weighting` statistics (see `client_work`).

The process is composed from parts by
`stateful_composer.compose_stateful_clients_process`, as `tff.learning`'s
processes are by `compose_learning_process`: TFF's broadcast as the
distributor; the client work (start weights, the library's weighted client
work, the change norms and the tensor selection:
`dynamic_pulling_client_work`);
the aggregator (the masked per-tensor weighted mean or the
`delta_aggregation.DeltaAggregator` of a `model_aggregator`, with the
optional weight cap: `_build_aggregator`); the finalizer (the average as
the new model, or the server optimizer with unsent tensors kept:
`_build_finalizer`). Its server state is one type for every option,
`StatefulClientsState` (absent parts `()`). A `DynamicPullingProcess` is a
`tff.templates.IterativeProcess` (a `LearningProcess` cannot return
CLIENTS-placed state); see `build_dynamic_pulling_process` for its type
signatures.
"""

import collections
from collections.abc import Callable
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.aggregators import delta_aggregation
from tff_nlp.algorithms import dynamic_pulling_client_work
from tff_nlp.algorithms import dynamic_pulling_state
from tff_nlp.templates import stateful_clients
from tff_nlp.templates import stateful_composer
from tff_nlp.algorithms import tensor_selection
from tff_nlp.aggregators import weight_cap
from tff_nlp.aggregators import weighting as weighting_lib

# The client state, the client data and the process class live in
# `dynamic_pulling_state`, the tensor-selection options in
# `tensor_selection` (re-exported here, the public place).
TRAINING_DATA = dynamic_pulling_state.TRAINING_DATA
SEED = dynamic_pulling_state.SEED
DATA_SIZE = dynamic_pulling_state.DATA_SIZE
ClientState = dynamic_pulling_state.ClientState
DynamicPullingProcess = dynamic_pulling_state.DynamicPullingProcess
client_data = dynamic_pulling_state.client_data
get_model_weights = dynamic_pulling_state.get_model_weights
initial_client_state = dynamic_pulling_state.initial_client_state
StatefulClientsState = stateful_composer.StatefulClientsState
CHANGE_NORMS = tensor_selection.CHANGE_NORMS
Push = tensor_selection.Push
Selection = tensor_selection.Selection


def _masked_aggregand(trained, sent, weight):
  return collections.OrderedDict(
      weighted=[tf.where(sent[t], weight * w, tf.zeros_like(w))
                for t, w in enumerate(trained)],
      weights=tf.where(sent, weight, 0.0),
  )


def _build_aggregator(
    weights_type, model_aggregator, max_weight_share, update_type,
) -> tff.templates.MeasuredProcess:
  """The server's per-tensor weighted mean (module docstring):
  `(<A@SERVER, M@SERVER, M@CLIENTS, {U}@CLIENTS> -> <state=A@SERVER,
  result=<model_weights=M, tensor_weights=float32[T]>@SERVER,
  measurements=<tensors_updated=int32, [aggregator=Am],
  [weight_cap=...]>@SERVER>)`: the masked mean (A = `()`) or a
  `model_aggregator`'s through `delta_aggregation.DeltaAggregator`, the
  weights first capped with a `max_weight_share`; a tensor no client sent
  keeps its global value, and `tensor_weights` are its sums of weights."""
  num_tensors = len(weights_type.trainable)
  delta = (delta_aggregation.DeltaAggregator(model_aggregator,
                                             weights_type.trainable)
           if model_aggregator is not None else None)

  @tff.tensorflow.computation(update_type.trained, update_type.sent,
                              np.float32)
  def aggregand(trained, sent, weight):
    # A capped share is > 0 exactly where the weight was: `sent` is kept.
    return _masked_aggregand(trained, tf.logical_and(sent, weight > 0.0),
                             weight)

  @tff.tensorflow.computation(weights_type,
                              aggregand.type_signature.result)
  def server_update(weights, sums):
    received = sums['weights'] > 0.0
    trainable = [
        tf.where(received[t], tf.math.divide_no_nan(s, sums['weights'][t]), w)
        for t, (s, w) in enumerate(zip(sums['weighted'], weights.trainable))
    ]
    return tff.learning.models.ModelWeights(
        trainable=trainable, non_trainable=list(weights.non_trainable))

  @tff.tensorflow.computation(weights_type)
  def trainable_of(weights):
    return list(weights.trainable)

  @tff.tensorflow.computation(weights_type, weights_type.trainable)
  def with_trainable(weights, trainable):
    return tff.learning.models.ModelWeights(
        trainable=list(trainable), non_trainable=list(weights.non_trainable))

  @tff.tensorflow.computation(tff.TensorType(np.float32, [num_tensors]))
  def tensors_updated(tensor_weights):
    return collections.OrderedDict(tensors_updated=tf.reduce_sum(
        tf.cast(tensor_weights > 0.0, tf.int32)))

  @tff.federated_computation
  def initialize_fn():
    if delta is None:
      return tff.federated_value((), tff.SERVER)
    return delta.initialize()

  @tff.federated_computation(
      initialize_fn.type_signature.result,
      tff.FederatedType(weights_type, tff.SERVER),
      tff.FederatedType(weights_type, tff.CLIENTS),
      tff.FederatedType(update_type, tff.CLIENTS))
  def next_fn(state, global_weights, pushed, update):
    weights = update.weight
    extra_metrics = collections.OrderedDict()
    if max_weight_share is not None:
      weights, cap_metrics = weight_cap.cap_client_weights(
          weights, max_weight_share)
    if delta is None:
      sums = tff.federated_sum(tff.federated_map(
          aggregand, (update.trained, update.sent, weights)))
      averaged = tff.federated_map(server_update, (global_weights, sums))
      tensor_weights = sums.weights
    else:
      aggregated = delta.next(
          state, tff.federated_map(trainable_of, global_weights),
          tff.federated_map(trainable_of, pushed), update.trained, weights,
          update.sent)
      averaged = tff.federated_map(with_trainable,
                                   (global_weights, aggregated.result))
      state = aggregated.state
      tensor_weights = getattr(aggregated.sums,
                               delta_aggregation.TENSOR_WEIGHTS)
      extra_metrics['aggregator'] = aggregated.measurements
    if max_weight_share is not None:
      extra_metrics['weight_cap'] = cap_metrics
    return tff.templates.MeasuredProcessOutput(
        state=state,
        result=tff.federated_zip(collections.OrderedDict(
            model_weights=averaged, tensor_weights=tensor_weights)),
        measurements=delta_aggregation.with_measurements(
            tff.federated_map(tensors_updated, tensor_weights),
            extra_metrics))

  return tff.templates.MeasuredProcess(initialize_fn, next_fn)


def _build_finalizer(
    weights_type, server_optimizer_fn, aggregate_type,
) -> tff.learning.templates.FinalizerProcess:
  """`(<F@SERVER, M@SERVER, R@SERVER> -> <state=F@SERVER, result=M@SERVER,
  measurements=Z@SERVER>)`, R the aggregator's result: without a server
  optimizer the average is the new model (F = Z = `()`); with one, TFF's
  `build_apply_optimizer_finalizer` steps along the pseudo-gradient of the
  sent tensors and the others keep their values (F its state, Z =
  `<finalizer=<update_non_finite=int32>>`)."""
  num_tensors = len(weights_type.trainable)
  tensor_weights_type = tff.TensorType(np.float32, [num_tensors])
  server_type = tff.FederatedType(aggregate_type, tff.SERVER)
  weights_at_server = tff.FederatedType(weights_type, tff.SERVER)
  if server_optimizer_fn is None:

    @tff.federated_computation
    def empty():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(empty.type_signature.result,
                               weights_at_server, server_type)
    def average_next(state, weights, aggregate):
      del weights  # The average is the new model.
      return tff.templates.MeasuredProcessOutput(
          state=state, result=aggregate.model_weights, measurements=empty())

    return tff.learning.templates.FinalizerProcess(empty, average_next)

  optimizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, weights_type)

  @tff.tensorflow.computation(weights_type, weights_type, tensor_weights_type)
  def pseudo_gradient(weights, averaged, tensor_weights):
    return [tf.where(tensor_weights[t] > 0.0, w - a, tf.zeros_like(w))
            for t, (w, a) in enumerate(zip(weights.trainable,
                                           averaged.trainable))]

  @tff.tensorflow.computation(weights_type, weights_type, tensor_weights_type)
  def keep_unsent(weights, stepped, tensor_weights):
    # Momentum would otherwise move a tensor that no client sent.
    return tff.learning.models.ModelWeights(
        trainable=[tf.where(tensor_weights[t] > 0.0, s, w)
                   for t, (w, s) in enumerate(zip(weights.trainable,
                                                  stepped.trainable))],
        non_trainable=list(weights.non_trainable))

  @tff.federated_computation(optimizer.initialize.type_signature.result,
                             weights_at_server, server_type)
  def optimizer_next(state, weights, aggregate):
    stepped = optimizer.next(state, weights, tff.federated_map(
        pseudo_gradient, (weights, aggregate.model_weights,
                          aggregate.tensor_weights)))
    return tff.templates.MeasuredProcessOutput(
        state=stepped.state,
        result=tff.federated_map(keep_unsent, (
            weights, stepped.result, aggregate.tensor_weights)),
        measurements=tff.federated_zip(collections.OrderedDict(
            finalizer=stepped.measurements)))

  return tff.learning.templates.FinalizerProcess(optimizer.initialize,
                                                 optimizer_next)


def build_dynamic_pulling_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    selection: Optional[Selection] = None,
    with_client_config: bool = False,
    metrics_aggregator: Optional[
        tff.learning.metrics.MetricsAggregatorType] = None,
    model_aggregator: Optional[
        tff.aggregators.WeightedAggregationFactory] = None,
    max_weight_share: Optional[float] = None,
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
    client_outputs: bool = False,
    **selection_options,
) -> DynamicPullingProcess:
  """Builds dynamic pulling with stateful clients (see the module docstring).

  Type signatures, with M the model weights type (`ModelWeights`), T the
  number of trainable tensors, H the client optimizer's hparams:

  *   `initialize`: `( -> S@SERVER)`, S = `StatefulClientsState<
      global_model_weights=M, distributor=<>, client_work=H, aggregator=A,
      finalizer=F, round_num=int32>` for every option: A is the state of a
      `model_aggregator`'s process (measurements type Am), else `<>`; F the
      state of a `server_optimizer_fn` (TFF's
      `build_apply_optimizer_finalizer`), else `<>`;
  *   `next`: `(<state=S@SERVER, client_data={D}@CLIENTS,
      client_states={C}@CLIENTS> -> RoundOutput<state=S@SERVER,
      client_states={C}@CLIENTS, metrics=X@SERVER>)` with
      C = `ClientState<weights=M, shared=bool[T]>`,
      D = `<training_data=B*, seed=int64[2], data_size=float32>`
      (`client_data`), or with
      `with_client_config` training_data = `<examples=B*,
      config=<learning_rate=float32,num_epochs=int32>*>`, and
      X = `<parameters_pulled=int64, parameters_pushed=int64,
      parameters_pulled_per_client=float64, parameters_pushed_per_client=
      float64, bytes_pulled_per_client=float64, bytes_pushed_per_client=
      float64, tensors_sent=<g=int32 for each group g>,
      non_finite_clients=int32, train=..., weighting=...,
      tensors_updated=int32>` (`train` and `weighting` as in
      `client_work.build_weighted_client_work`), followed by
      `aggregator=Am` with a `model_aggregator`, by
      `weight_cap=<max_share_before=float32, max_share_after=float32,
      num_capped=int32, cap_infeasible=int32>` with `max_weight_share`
      and by `finalizer=<update_non_finite=int32>` with a
      `server_optimizer_fn`;
  *   with `client_outputs`, `next` is `(<state=S@SERVER,
      client_data={D}@CLIENTS, client_states={C}@CLIENTS> ->
      RoundOutputWithClientOutputs<state=S@SERVER, client_states={C}@CLIENTS,
      metrics=X@SERVER, client_outputs={O}@CLIENTS>)`: the same round plus
      each client's statistics O (`dynamic_pulling_client_work.
      build_client_work`: the weighted client work's, `weight` the weight
      applied, `sent`, `parameters_pulled`, `bytes_pulled`);
  *   `get_model_weights`: `(S -> M)`; `set_model_weights`: `(<S, M> -> S)`.

  In simulation `next` returns `client_states` as a list in the order of the
  clients; pass each client's state back in its next round (start from
  `initial_client_state`).

  Args:
    model_fn: No-arg callable returning a new
      `tff.learning.models.VariableModel`.
    client_optimizer_fn: The client `tff.learning.optimizers.Optimizer`.
    selection: Which tensors clients send and take (a
      `tensor_selection.Selection`: mode, tensor_groups, exchanged,
      keep_private, push, change_norm, split_by).
    with_client_config: Whether client data carries a per-client learning
      rate and number of epochs (`templates.with_client_config`).
    metrics_aggregator: Aggregator of the model's metrics;
      `tff.learning.metrics.sum_then_finalize` if None.
    model_aggregator: A `tff.aggregators.WeightedAggregationFactory` for the
      trainable tensors' deltas from the global model (e.g.
      `tff.learning.robust_aggregator(weighted=True)`, clipping, zeroing or
      DP factories), its state carried in the server state; None: the
      plain weighted average of the module docstring. Deltas, because
      clipping, zeroing and DP noise are defined on updates; the server
      rescales the mean delta per tensor (`delta_aggregation`), so that
      `tff.aggregators.MeanFactory()` gives the plain average.
    max_weight_share: Caps each client's share of the round's weight at
      this value in (0, 1] before the per-tensor sums
      (`weight_cap.cap_client_weights`); None: no cap.
    server_optimizer_fn: A `tff.learning.optimizers.Optimizer` the server
      applies to the pseudo-gradient (the global model minus the average;
      module docstring); None: the average is the new model (the paper).
    client_outputs: Whether `next` also returns each client's statistics
      (above), for simulations that plot per-client curves or attack
      studies; the state and metrics are the same either way.
    **selection_options: Instead of `selection`, its fields as keywords
      (`mode=..., tensor_groups=..., ...`).

  Returns:
    A `DynamicPullingProcess` (a `tff.templates.IterativeProcess`).

  Raises:
    ValueError: For invalid selection options (`Selection.resolved`), both
      or neither of `selection` and its fields, or a `max_weight_share`
      outside (0, 1].
    TypeError: If `client_optimizer_fn` or `server_optimizer_fn` is not a
      TFF optimizer or `model_aggregator` not a weighted aggregation
      factory.
  """
  if (selection is None) == (not selection_options):
    raise ValueError('Give selection or its fields as keywords (mode=, '
                     f'tensor_groups=, ...), one of them; got {selection!r} '
                     f'and {sorted(selection_options)}.')
  if selection is None:
    selection = Selection(**selection_options)
  optimizers = {'client_optimizer_fn': client_optimizer_fn}
  if server_optimizer_fn is not None:
    optimizers['server_optimizer_fn'] = server_optimizer_fn
  for name, optimizer in optimizers.items():
    if not isinstance(optimizer, tff.learning.optimizers.Optimizer):
      raise TypeError(f'{name} must be a tff.learning.optimizers.Optimizer, '
                      f'got {type(optimizer)}.')
  if model_aggregator is not None:
    delta_aggregation.check_factory(model_aggregator)
  if max_weight_share is not None:
    weight_cap.check_max_share(max_weight_share)

  @tff.tensorflow.computation
  def initial_model_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_model_weights.type_signature.result
  selection = selection.resolved(len(weights_type.trainable))
  work = dynamic_pulling_client_work.build_client_work(
      selection, weights_type,
      client_work_lib.build_weighted_client_work(
          model_fn, optimizer=client_optimizer_fn,
          weighting=weighting_lib.Weighting.NUM_EXAMPLES,
          with_client_config=with_client_config,
          metrics_aggregator=metrics_aggregator,
          client_outputs=client_outputs))
  update_type = work.next.type_signature.result.result.member[
      dynamic_pulling_client_work.UPDATE]
  aggregator = _build_aggregator(weights_type, model_aggregator,
                                 max_weight_share, update_type)
  finalizer = _build_finalizer(
      weights_type, server_optimizer_fn,
      aggregator.next.type_signature.result.result.member)
  return stateful_composer.compose_stateful_clients_process(
      initial_model_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      work, aggregator, finalizer,
      initial_client_state_fn=dynamic_pulling_state.new_client_state,
      process_class=DynamicPullingProcess,
      mode=selection.mode, tensor_groups=selection.tensor_groups,
      keep_private=selection.keep_private, push=selection.push)


def build_simulation_process(
    model_fn: Callable[[], tff.learning.models.VariableModel], *,
    num_clients: int, **kwargs) -> stateful_clients.SimulationProcess:
  """`build_dynamic_pulling_process(model_fn, **kwargs)` for K clients in the
  round loop (`stateful_clients.SimulationProcess`)."""
  return stateful_clients.SimulationProcess(
      build_dynamic_pulling_process(model_fn, **kwargs), num_clients)
