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

A `DynamicPullingProcess` is a `tff.templates.IterativeProcess` (a
`LearningProcess` cannot return CLIENTS-placed state); see
`build_dynamic_pulling_process` for its type signatures.
"""

import collections
from collections.abc import Callable, Sequence
import enum
import math
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.aggregators import delta_aggregation
from tff_nlp.algorithms import dynamic_pulling_state
from tff_nlp.templates import stateful_clients
from tff_nlp.algorithms import tensor_selection
from tff_nlp.aggregators import weight_cap
from tff_nlp.aggregators import weighting as weighting_lib

# The states, the client data and the process class live in
# `dynamic_pulling_state` (re-exported here, the public place).
TRAINING_DATA = dynamic_pulling_state.TRAINING_DATA
SEED = dynamic_pulling_state.SEED
DATA_SIZE = dynamic_pulling_state.DATA_SIZE
ClientState = dynamic_pulling_state.ClientState
ServerState = dynamic_pulling_state.ServerState
ServerStateWithAggregator = dynamic_pulling_state.ServerStateWithAggregator
ServerStateWithOptimizer = dynamic_pulling_state.ServerStateWithOptimizer
DynamicPullingProcess = dynamic_pulling_state.DynamicPullingProcess
client_data = dynamic_pulling_state.client_data
get_model_weights = dynamic_pulling_state.get_model_weights
initial_client_state = dynamic_pulling_state.initial_client_state
CHANGE_NORMS = ('l2', 'rms')


class Push(enum.Enum):
  """Which tensors the server sends a client."""

  ALL = 'all'
  SHARED = 'shared'


def _defaults(mode, keep_private, push):
  if keep_private is None:
    keep_private = mode is not tensor_selection.Mode.DEFAULT
  if push is None:
    push = (Push.SHARED if mode in (tensor_selection.Mode.DP_L_33,
                                    tensor_selection.Mode.CONTROLLERS)
            else Push.ALL)
  push = weighting_lib.parse_option(push, Push, 'push')
  if push is Push.SHARED and not keep_private:
    raise ValueError(
        "push='shared' needs keep_private=True: a client that takes every "
        'tensor needs the server to send every tensor.'
    )
  return keep_private, push


def build_dynamic_pulling_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    mode: Union[str, tensor_selection.Mode],
    tensor_groups: Sequence[str],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    exchanged: Optional[Sequence[bool]] = None,
    keep_private: Optional[bool] = None,
    push: Union[str, Push, None] = None,
    with_client_config: bool = False,
    metrics_aggregator: Optional[
        tff.learning.metrics.MetricsAggregatorType] = None,
    change_norm: str = 'l2',
    model_aggregator: Optional[
        tff.aggregators.WeightedAggregationFactory] = None,
    max_weight_share: Optional[float] = None,
    split_by: str = 'tensors',
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
) -> DynamicPullingProcess:
  """Builds dynamic pulling with stateful clients (see the module docstring).

  Type signatures, with M the model weights type (`ModelWeights`), T the
  number of trainable tensors, H the client optimizer's hparams:

  *   `initialize`: `( -> S@SERVER)`, S = `ServerState<global_model_weights=M,
      client_work=H, round_num=int32>`, or with a `model_aggregator` whose
      process has state type A and measurements type Am,
      `ServerStateWithAggregator<global_model_weights=M, client_work=H,
      aggregator=A, round_num=int32>`, or with a `server_optimizer_fn`
      whose state has type O, `ServerStateWithOptimizer<global_model_weights=
      M, client_work=H, aggregator=A (<> without a model_aggregator),
      finalizer=O, round_num=int32>`;
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
      float64, tensors_sent=<g=int32 for each group g>, tensors_updated=int32,
      non_finite_clients=int32, train=..., weighting=...>` (`train` and
      `weighting` as in `client_work.build_weighted_client_work`), followed
      by `aggregator=Am` with a `model_aggregator` and by
      `weight_cap=<max_share_before=float32, max_share_after=float32,
      num_capped=int32, cap_infeasible=int32>` with `max_weight_share`
      and by `finalizer=<update_non_finite=int32>` with a
      `server_optimizer_fn`;
  *   `get_model_weights`: `(S -> M)`; `set_model_weights`: `(<S, M> -> S)`.

  In simulation `next` returns `client_states` as a list in the order of the
  clients; pass each client's state back in its next round (start from
  `initial_client_state`).

  Args:
    model_fn: No-arg callable returning a new
      `tff.learning.models.VariableModel`.
    mode: 'default', 'dp_g', 'dp_l', 'random', 'dp_l_33' or 'controllers'.
    tensor_groups: The group of each trainable tensor, in the order of
      `ModelWeights.trainable` (e.g. `[t.group for t in
      seq2seq_layout.tensor_layout(config)]`); medians and quantiles are per
      group.
    client_optimizer_fn: The client `tff.learning.optimizers.Optimizer`.
    exchanged: For 'controllers' (only), the T bools of the tensors to send.
    keep_private: Whether a client keeps the tensors it did not send and takes
      only the others from the server; None: False for 'default', True
      otherwise.
    push: 'all' or 'shared' (the server sends only the tensors a client takes;
      needs `keep_private`); None: 'shared' for 'dp_l_33' and 'controllers',
      'all' otherwise.
    with_client_config: Whether client data carries a per-client learning
      rate and number of epochs (`templates.with_client_config`).
    metrics_aggregator: Aggregator of the model's metrics;
      `tff.learning.metrics.sum_then_finalize` if None.
    change_norm: 'l2' (the paper: the norm of a tensor's change) or 'rms'
      (that norm over sqrt(tensor size)).
    model_aggregator: A `tff.aggregators.WeightedAggregationFactory` for the
      trainable tensors' deltas from the global model (e.g.
      `tff.learning.robust_aggregator(weighted=True)`, clipping, zeroing or
      DP factories), its state carried in the server state; None: the
      plain weighted average of the module docstring. Deltas, because
      clipping, zeroing and DP noise are defined on updates (how far a
      client moves the model), not on weights; the server rescales the
      mean delta per tensor (`delta_aggregation`), so that
      `tff.aggregators.MeanFactory()` gives the plain average.
    max_weight_share: Caps each client's share of the round's weight at
      this value in (0, 1] before the per-tensor sums
      (`weight_cap.cap_client_weights`); None: no cap.
    split_by: What the modes' median (or 1/3 quantile) counts within a
      group: 'tensors' (the paper's rule: half the tensors) or 'parameters'
      (half the parameters: tensors in order of change until the group's
      budget is filled; `tensor_selection`).
    server_optimizer_fn: A `tff.learning.optimizers.Optimizer` the server
      applies to the pseudo-gradient (the global model minus the average;
      module docstring); None: the average is the new model (the paper).

  Returns:
    A `DynamicPullingProcess` (a `tff.templates.IterativeProcess`).

  Raises:
    ValueError: For an unknown `mode` or `push`, `tensor_groups` or
      `exchanged` of the wrong length, `exchanged` given without
      'controllers' or missing with it, or `push='shared'` without
      `keep_private`.
      Also for a `max_weight_share` outside (0, 1] or an unknown
      `split_by`.
    TypeError: If `client_optimizer_fn` or `server_optimizer_fn` is not a
      TFF optimizer or `model_aggregator` not a weighted aggregation
      factory.
  """
  mode = weighting_lib.parse_option(mode, tensor_selection.Mode, 'mode')
  keep_private, push = _defaults(mode, keep_private, push)
  if change_norm not in CHANGE_NORMS:
    raise ValueError(f'change_norm must be one of {CHANGE_NORMS}, got '
                     f'{change_norm!r}.')
  tensor_selection.check_split_by(split_by)
  optimizers = {'client_optimizer_fn': client_optimizer_fn}
  if server_optimizer_fn is not None:
    optimizers['server_optimizer_fn'] = server_optimizer_fn
  for name, optimizer in optimizers.items():
    if not isinstance(optimizer, tff.learning.optimizers.Optimizer):
      raise TypeError(f'{name} must be a tff.learning.optimizers.Optimizer, '
                      f'got {type(optimizer)}.')
  if model_aggregator is not None:
    delta_aggregation.check_factory(model_aggregator)
  tensor_groups = [str(g) for g in tensor_groups]

  @tff.tensorflow.computation
  def initial_model_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_model_weights.type_signature.result
  num_tensors = len(weights_type.trainable)
  if len(tensor_groups) != num_tensors:
    raise ValueError(f'tensor_groups has {len(tensor_groups)} entries; the '
                     f'model has {num_tensors} trainable tensors.')
  if (exchanged is not None) != (mode is tensor_selection.Mode.CONTROLLERS):
    raise ValueError("exchanged is needed by mode='controllers' and only by "
                     f'it (mode={mode.value!r}).')
  if exchanged is not None:
    exchanged = [bool(e) for e in exchanged]
    if len(exchanged) != num_tensors:
      raise ValueError(f'exchanged has {len(exchanged)} entries; the model '
                       f'has {num_tensors} trainable tensors.')

  groups = tensor_selection.group_indices(tensor_groups)
  sizes = [math.prod(t.shape) for t in weights_type.trainable]
  num_bytes = [size * np.dtype(t.dtype).itemsize
               for size, t in zip(sizes, weights_type.trainable)]
  non_trainable_sizes = [math.prod(t.shape) for t in weights_type.non_trainable]
  non_trainable_bytes = sum(
      size * np.dtype(t.dtype).itemsize
      for size, t in zip(non_trainable_sizes, weights_type.non_trainable))

  client_work = client_work_lib.build_weighted_client_work(
      model_fn,
      optimizer=client_optimizer_fn,
      weighting=weighting_lib.Weighting.NUM_EXAMPLES,
      with_client_config=with_client_config,
      metrics_aggregator=metrics_aggregator,
  )
  work_data_type = client_work.next.type_signature.parameter[2]
  result_type = client_work.next.type_signature.result.result.member
  measurements_type = client_work.next.type_signature.result.measurements.member
  data_type = tff.StructWithPythonType(
      [(TRAINING_DATA, work_data_type.member),
       (SEED, tff.TensorType(np.int64, [2])),
       (DATA_SIZE, tff.TensorType(np.float32))],
      collections.OrderedDict,
  )

  @tff.tensorflow.computation(weights_type)
  def new_client_state(weights):
    return ClientState(weights=weights, shared=tf.ones([num_tensors], tf.bool))

  client_state_type = new_client_state.type_signature.result

  @tff.tensorflow.computation(weights_type, client_state_type)
  def start_weights(pushed, state):
    trainable = [
        tf.where(state.shared[t], p, s) if keep_private else p
        for t, (p, s) in enumerate(
            zip(pushed.trainable, state.weights.trainable))
    ]
    return tff.learning.models.ModelWeights(
        trainable=trainable, non_trainable=list(pushed.non_trainable))

  def weighted_aggregand(trained, sent, weight):
    return collections.OrderedDict(
        weighted=[tf.where(sent[t], weight * w, tf.zeros_like(w))
                  for t, w in enumerate(trained)],
        weights=tf.where(sent, weight, 0.0),
    )

  def masked_sum(mask, values):
    return tf.reduce_sum(tf.where(mask, tf.constant(values, tf.int64),
                                  tf.zeros([num_tensors], tf.int64)))

  @tff.tensorflow.computation(weights_type, client_state_type, result_type,
                              tff.TensorType(np.int64, [2]),
                              tff.TensorType(np.float32))
  def client_round(start, state, result, seed, data_size):
    trained = [s - u for s, u in zip(start.trainable, result.update)]
    norms = tf.stack([
        tf.norm(tf.cast(w - p, tf.float32)) / (
            math.sqrt(size) if change_norm == 'rms' else 1.0)
        for w, p, size in zip(trained, state.weights.trainable, sizes)
    ])
    mask = tensor_selection.select_tensors(
        norms, seed, mode=mode, tensor_groups=tensor_groups,
        exchanged=exchanged, split_by=split_by, sizes=sizes)
    weight = tf.where(result.update_weight > 0.0,
                      tf.where(data_size > 0.0, data_size,
                               result.update_weight), 0.0)
    sent = tf.logical_and(mask, weight > 0.0)
    pushed = state.shared if push is Push.SHARED else tf.ones_like(mask)
    new_state = ClientState(
        weights=tff.learning.models.ModelWeights(
            trainable=trained, non_trainable=list(start.non_trainable)),
        shared=mask,
    )
    aggregand = weighted_aggregand(trained, sent, weight)
    stats = collections.OrderedDict(
        num_clients=tf.constant(1, tf.int32),
        parameters_pulled=masked_sum(sent, sizes),
        parameters_pushed=masked_sum(pushed, sizes)
        + sum(non_trainable_sizes),
        bytes_pulled=masked_sum(sent, num_bytes),
        bytes_pushed=masked_sum(pushed, num_bytes) + non_trainable_bytes,
        tensors_sent=collections.OrderedDict(
            (group, tf.reduce_sum(tf.cast(tf.gather(sent, indices),
                                          tf.int32)))
            for group, indices in groups.items()),
    )
    return collections.OrderedDict(
        state=new_state, aggregand=aggregand, stats=stats, weight=weight)

  aggregand_type = client_round.type_signature.result['aggregand']
  stats_type = client_round.type_signature.result['stats']

  @tff.tensorflow.computation(client_state_type, np.float32)
  def reweighted_aggregand(state, weight):
    # A capped share is > 0 exactly where the weight was: `sent` is kept.
    sent = tf.logical_and(state.shared, weight > 0.0)
    return weighted_aggregand(state.weights.trainable, sent, weight)

  @tff.tensorflow.computation(weights_type)
  def trainable_of(weights):
    return list(weights.trainable)

  @tff.tensorflow.computation(client_state_type)
  def client_parts(state):
    return list(state.weights.trainable), state.shared

  @tff.tensorflow.computation(weights_type, weights_type.trainable)
  def with_trainable(weights, trainable):
    return tff.learning.models.ModelWeights(
        trainable=list(trainable), non_trainable=list(weights.non_trainable))

  aggregator = (
      delta_aggregation.DeltaAggregator(model_aggregator,
                                        weights_type.trainable)
      if model_aggregator is not None else None)

  finalizer = (
      tff.learning.templates.build_apply_optimizer_finalizer(
          server_optimizer_fn, weights_type)
      if server_optimizer_fn is not None else None)

  def server_state(**fields):
    if finalizer is not None:
      return ServerStateWithOptimizer(**fields)
    if aggregator is None:
      return ServerState(**fields)
    return ServerStateWithAggregator(**fields)

  @tff.tensorflow.computation(weights_type, weights_type,
                              tff.TensorType(np.float32, [num_tensors]))
  def pseudo_gradient(weights, averaged, tensor_weights):
    return [tf.where(tensor_weights[t] > 0.0, w - a, tf.zeros_like(w))
            for t, (w, a) in enumerate(zip(weights.trainable,
                                           averaged.trainable))]

  @tff.tensorflow.computation(weights_type, weights_type,
                              tff.TensorType(np.float32, [num_tensors]))
  def keep_unsent(weights, stepped, tensor_weights):
    # Momentum would otherwise move a tensor that no client sent.
    return tff.learning.models.ModelWeights(
        trainable=[tf.where(tensor_weights[t] > 0.0, s, w)
                   for t, (w, s) in enumerate(zip(weights.trainable,
                                                  stepped.trainable))],
        non_trainable=list(weights.non_trainable))

  @tff.tensorflow.computation(weights_type, aggregand_type)
  def server_update(weights, sums):
    received = sums['weights'] > 0.0
    trainable = [
        tf.where(received[t], tf.math.divide_no_nan(s, sums['weights'][t]), w)
        for t, (s, w) in enumerate(zip(sums['weighted'], weights.trainable))
    ]
    return tff.learning.models.ModelWeights(
        trainable=trainable, non_trainable=list(weights.non_trainable))

  @tff.tensorflow.computation(stats_type,
                              tff.TensorType(np.float32, [num_tensors]),
                              measurements_type)
  def round_metrics(stats, tensor_weights, measurements):
    n = tf.cast(tf.maximum(stats['num_clients'], 1), tf.float64)

    def per_client(total):
      return tf.cast(total, tf.float64) / n

    metrics = collections.OrderedDict(
        parameters_pulled=stats['parameters_pulled'],
        parameters_pushed=stats['parameters_pushed'],
        parameters_pulled_per_client=per_client(stats['parameters_pulled']),
        parameters_pushed_per_client=per_client(stats['parameters_pushed']),
        bytes_pulled_per_client=per_client(stats['bytes_pulled']),
        bytes_pushed_per_client=per_client(stats['bytes_pushed']),
        tensors_sent=stats['tensors_sent'],
        tensors_updated=tf.reduce_sum(
            tf.cast(tensor_weights > 0.0, tf.int32)),
        non_finite_clients=measurements['weighting']['num_non_finite_clients'],
        train=measurements['train'],
        weighting=measurements['weighting'],
    )
    return metrics

  @tff.tensorflow.computation(np.int32)
  def increment(round_num):
    return round_num + 1

  @tff.federated_computation
  def initialize_fn():
    fields = dict(
        global_model_weights=tff.federated_eval(initial_model_weights,
                                                tff.SERVER),
        client_work=client_work.initialize(),
        round_num=tff.federated_value(np.int32(0), tff.SERVER),
    )
    if aggregator is not None:
      fields['aggregator'] = aggregator.initialize()
    if finalizer is not None:
      fields.setdefault('aggregator', tff.federated_value((), tff.SERVER))
      fields['finalizer'] = finalizer.initialize()
    return tff.federated_zip(server_state(**fields))

  state_type = initialize_fn.type_signature.result

  @tff.federated_computation(
      state_type,
      tff.FederatedType(data_type, tff.CLIENTS),
      tff.FederatedType(client_state_type, tff.CLIENTS),
  )
  def next_fn(state, client_data, client_states):  # pylint: disable=redefined-outer-name
    # A dense broadcast; with push='shared' the metrics count only the
    # tensors the client takes.
    pushed = tff.federated_broadcast(state.global_model_weights)
    start = tff.federated_map(start_weights, (pushed, client_states))
    work = client_work.next(
        state.client_work, start, getattr(client_data, TRAINING_DATA))
    outputs = tff.federated_map(
        client_round,
        (start, client_states, work.result, getattr(client_data, SEED),
         getattr(client_data, DATA_SIZE)))
    weights = outputs.weight
    extra_metrics = collections.OrderedDict()
    if max_weight_share is not None:
      weights, cap_metrics = weight_cap.cap_client_weights(
          weights, max_weight_share)
    fields = dict(client_work=work.state,
                  round_num=tff.federated_map(increment, state.round_num))
    if aggregator is None:
      aggregand = (outputs.aggregand if max_weight_share is None else
                   tff.federated_map(reweighted_aggregand,
                                     (outputs.state, weights)))
      sums = tff.federated_sum(aggregand)
      fields['global_model_weights'] = tff.federated_map(
          server_update, (state.global_model_weights, sums))
      tensor_weights = sums.weights
    else:
      trained, sent = tff.federated_map(client_parts, outputs.state)
      aggregated = aggregator.next(
          state.aggregator,
          tff.federated_map(trainable_of, state.global_model_weights),
          tff.federated_map(trainable_of, pushed), trained, weights, sent)
      fields['global_model_weights'] = tff.federated_map(
          with_trainable, (state.global_model_weights, aggregated.result))
      fields['aggregator'] = aggregated.state
      tensor_weights = getattr(aggregated.sums,
                               delta_aggregation.TENSOR_WEIGHTS)
      extra_metrics['aggregator'] = aggregated.measurements
    if max_weight_share is not None:
      extra_metrics['weight_cap'] = cap_metrics
    if finalizer is not None:
      if aggregator is None:
        fields['aggregator'] = state.aggregator
      averaged = fields['global_model_weights']
      stepped = finalizer.next(
          state.finalizer, state.global_model_weights,
          tff.federated_map(pseudo_gradient, (
              state.global_model_weights, averaged, tensor_weights)))
      fields['global_model_weights'] = tff.federated_map(
          keep_unsent, (state.global_model_weights, stepped.result,
                        tensor_weights))
      fields['finalizer'] = stepped.state
      extra_metrics['finalizer'] = stepped.measurements
    new_state = tff.federated_zip(server_state(**fields))
    metrics = delta_aggregation.with_measurements(
        tff.federated_map(
            round_metrics,
            (tff.federated_sum(outputs.stats), tensor_weights,
             work.measurements)),
        extra_metrics)
    return stateful_clients.RoundOutput(
        state=new_state, client_states=outputs.state, metrics=metrics)

  @tff.tensorflow.computation(state_type.member)
  def get_model_weights_fn(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type.member, weights_type)
  def set_model_weights_fn(state, weights):
    return state._replace(global_model_weights=weights)

  return DynamicPullingProcess(
      initialize_fn,
      next_fn,
      get_model_weights_fn=get_model_weights_fn,
      set_model_weights_fn=set_model_weights_fn,
      mode=mode,
      tensor_groups=tensor_groups,
      keep_private=keep_private,
      push=push,
  )


def build_simulation_process(
    model_fn: Callable[[], tff.learning.models.VariableModel], *,
    num_clients: int, **kwargs) -> stateful_clients.SimulationProcess:
  """`build_dynamic_pulling_process(model_fn, **kwargs)` for K clients in the
  round loop (`stateful_clients.SimulationProcess`)."""
  return stateful_clients.SimulationProcess(
      build_dynamic_pulling_process(model_fn, **kwargs), num_clients)
