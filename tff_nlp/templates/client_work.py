"""Client work of FedAvg / FedProx / FedOPT with Lorar-family client weights.

Each client trains the broadcast model on its batches (optionally with the
FedProx proximal term), records its per-batch training losses, and returns its
model delta together with a weight chosen by a `Weighting` (see
`weighting.py`). Loss-reduction based weights need one extra exchange of a
scalar: if every client's ΔL is zero (e.g. every client has a single batch),
normalising by ΣΔL is undefined, so the round falls back to `num_examples`
weights and says so in its measurements.

Algorithm 1 of Zhang et al., ACL 2023 (https://arxiv.org/abs/2305.17221).

A client's local training is `local_training.build_client_update` (each
step under `models.dropout_seeds.step_seed`, so seeded dropout draws the same
masks in a rerun); this module composes it into the federated round.

What leaves a client in a round (and reaches the server only summed over
clients, or through the model aggregator):

*   Δw_i (zeroed if not finite) and its weight p_i, through the model
    aggregator (`tff.aggregators.MeanFactory` by default);
*   the model's unfinalized training metrics, summed;
*   for `loss_reduction` / `lorar`: the candidate weight (|D_i|·ΔL_i or ΔL_i),
    summed, to decide the fallback;
*   round statistics, summed or reduced with min / max over clients: example
    count, summed batch loss, ΔL, weight, and counts of empty and
    non-finite clients.

With `client_outputs=True`, `next` additionally returns each client's
statistics as a CLIENTS-placed value (`ClientWorkOutput.client_outputs`).
That is a simulation-only view: in a real deployment it stays on the client.
"""

import collections
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.templates import client_data as client_data_lib
from tff_nlp.templates import extended_outputs
from tff_nlp.templates import local_training
from tff_nlp.aggregators import weighting as weighting_lib

# Per-client statistics of one round, in the order they are reported.
CLIENT_STAT_KEYS = (
    'num_examples',  # examples processed this round (all epochs)
    'num_batches',
    'dataset_size',  # |D_i|: examples of one epoch
    'first_batch_loss',  # training loss of the broadcast model, first batch
    'last_batch_loss',  # training loss of the last batch of the round
    'max_batch_loss',
    'min_batch_loss',
    'mean_batch_loss',  # example-weighted mean over the round's batches
    'loss_reduction',  # ΔL_i = max_batch_loss - min_batch_loss
    'is_empty',  # 1 if the client had no examples
    'is_non_finite',  # 1 if its loss or update was NaN/Inf
    'candidate_weight',  # the weighting's value before the fallback decision
    'fallback_weight',  # the num_examples weight, used if ΣΔL = 0
)


# Besides those, each client reports the loss of every batch of the round, in
# order (float32 [num_batches]; the Lorar paper's Figures 3-5 plot them).
BATCH_LOSSES_KEY = 'batch_losses'


class ClientWorkOutput(NamedTuple):
  """`tff.templates.MeasuredProcessOutput` plus the per-client outputs.

  The result of the `next` of client work built with `client_outputs=True`:
  `<state=H@SERVER, result=ClientResult<...>@CLIENTS, measurements=X@SERVER,
  client_outputs={C}@CLIENTS>`. Composers that read only `state`, `result`
  and `measurements` (TFF's `compose_learning_process`) take it as they take
  a `MeasuredProcessOutput`.
  """

  state: Any
  result: Any
  measurements: Any
  client_outputs: Any


# The placements of a `ClientWorkOutput`'s fields (its state's is checked
# against `initialize`).
_CLIENT_WORK_OUTPUT_PLACEMENTS = (
    ('result', tff.CLIENTS), ('measurements', tff.SERVER),
    ('client_outputs', tff.CLIENTS))


def _check_client_outputs_next(next_fn: tff.Computation) -> None:
  """What `ClientWorkProcess` checks of `next`, for a `ClientWorkOutput`."""
  extended_outputs.check_output_placements(
      next_fn, ClientWorkOutput, _CLIENT_WORK_OUTPUT_PLACEMENTS)
  result = next_fn.type_signature.result
  if result.result.member.python_container is not (
      tff.learning.templates.ClientResult):
    raise TypeError('next\'s result must be a ClientResult, got '
                    f'{result.result}.')


class WeightedClientWorkProcess(tff.learning.templates.ClientWorkProcess):
  """The client work of `build_weighted_client_work`.

  With `client_outputs` False, an ordinary `ClientWorkProcess`. With
  `client_outputs` True, its one `next` returns a `ClientWorkOutput`: the
  `MeasuredProcessOutput` fields plus `client_outputs`, the CLIENTS-placed
  statistics of `CLIENT_STAT_KEYS` plus `weight` (the weight the round
  applied) and `batch_losses` (float32 [num_batches], every batch's
  training loss in order), for simulations that plot per-client curves.
  `tff.templates.MeasuredProcess`'s constructor accepts only a
  `MeasuredProcessOutput` result, so that case is checked here instead:
  the same placements, plus `client_outputs@CLIENTS`.
  """

  def __init__(self, initialize_fn, next_fn, *, get_hparams_fn,
               set_hparams_fn):
    result = next_fn.type_signature.result
    self._client_outputs = getattr(
        result, 'python_container', None) is ClientWorkOutput
    if not self._client_outputs:
      super().__init__(initialize_fn, next_fn, get_hparams_fn=get_hparams_fn,
                       set_hparams_fn=set_hparams_fn)
      return
    _check_client_outputs_next(next_fn)
    extended_outputs.init_process(
        self, initialize_fn, next_fn, next_is_multi_arg=True,
        get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)

  @property
  def client_outputs(self) -> bool:
    """Whether `next` returns a `ClientWorkOutput` (per-client outputs)."""
    return self._client_outputs


class MeasuredProcessWithClientOutputs(tff.templates.MeasuredProcess):
  """A `MeasuredProcess` whose one `next` also returns per-client outputs.

  The client work of a composer other than TFF's, with per-client outputs:
  `next` is `(<H@SERVER, ...> -> <state=H@SERVER, result=R@CLIENTS,
  measurements=X@SERVER, client_outputs={C}@CLIENTS>)`, a
  `ClientWorkOutput`, whatever its other arguments and R (e.g.
  `stateful_composer`'s client work, R = `<client_states=..., update=...>`,
  or `partial_model_composer`'s, which takes the weights @SERVER).
  `tff.templates.MeasuredProcess`'s constructor accepts only a
  `MeasuredProcessOutput` result, so this one checks those placements
  instead (`extended_outputs`, as `WeightedClientWorkProcess` does), then
  `tff.templates.IterativeProcess`'s checks. Its `client_outputs` property
  is True, as a `WeightedClientWorkProcess`'s with per-client outputs: what
  the composers read.
  """

  def __init__(self, initialize_fn: tff.Computation,
               next_fn: tff.Computation,
               next_is_multi_arg: Optional[bool] = None):
    extended_outputs.check_output_placements(
        next_fn, ClientWorkOutput, _CLIENT_WORK_OUTPUT_PLACEMENTS)
    tff.templates.IterativeProcess.__init__(
        self, initialize_fn, next_fn, next_is_multi_arg=next_is_multi_arg)

  @property
  def client_outputs(self) -> bool:
    """True: `next` returns a `ClientWorkOutput`."""
    return True


def returns_client_outputs(client_work: tff.templates.MeasuredProcess) -> bool:
  """Whether `client_work`'s `next` returns per-client outputs.

  What every composer reads to choose its `next`: the `client_outputs`
  property of a `WeightedClientWorkProcess` or a
  `MeasuredProcessWithClientOutputs` (False for any other process, whose
  `next` returns a `MeasuredProcessOutput`).
  """
  return bool(getattr(client_work, 'client_outputs', False))


def _client_data_type(
    model: tff.learning.models.VariableModel, with_client_config: bool
) -> tff.Type:
  """D of `build_weighted_client_work`: `B*` or `<examples=B*, config=...*>`."""
  examples_type = tff.SequenceType(tff.types.tensorflow_to_type(model.input_spec))
  if not with_client_config:
    return examples_type
  return tff.StructWithPythonType(
      [
          (client_data_lib.EXAMPLES_KEY, examples_type),
          (
              client_data_lib.CONFIG_KEY,
              tff.SequenceType(
                  tff.types.tensorflow_to_type(
                      client_data_lib.config_element_spec()
                  )
              ),
          ),
      ],
      collections.OrderedDict,
  )


class _WeightComputations(NamedTuple):
  """The TF computations that turn a client's statistics into its weight.

  `stats` below is the `stats` of the client update's result (C's keys
  plus `batch_losses`); all are `tff.tensorflow.computation`s.
  """

  is_zero: tff.Computation  # (float32 -> bool): ΣΔL = 0, fall back
  choose_weight: tff.Computation  # (<stats, bool> -> float32)
  candidate_weight: tff.Computation  # (stats -> float32)
  client_result: tff.Computation  # (<T, float32> -> ClientResult<T, float32>)
  client_output: tff.Computation  # (<stats, float32> -> C)


def _build_weight_computations(
    stats_type: tff.Type, update_type: tff.Type
) -> _WeightComputations:
  """The client-side computations of a round's weights and outputs.

  Args:
    stats_type: The type of the client update's `stats`.
    update_type: T, the type of the client update's `update`.

  Returns:
    A `_WeightComputations`.
  """

  @tff.tensorflow.computation(np.float32)
  def is_zero(total):
    return tf.equal(total, 0.0)

  @tff.tensorflow.computation(stats_type, np.bool_)
  def choose_weight(stats, fall_back):
    return tf.where(
        fall_back, stats['fallback_weight'], stats['candidate_weight']
    )

  @tff.tensorflow.computation(stats_type)
  def candidate_weight(stats):
    return stats['candidate_weight']

  @tff.tensorflow.computation(update_type, np.float32)
  def client_result(update, weight):
    return tff.learning.templates.ClientResult(
        update=update, update_weight=weight
    )

  @tff.tensorflow.computation(stats_type, np.float32)
  def client_output(stats, weight):
    output = collections.OrderedDict(
        (key, stats[key]) for key in CLIENT_STAT_KEYS
    )
    output['weight'] = weight
    output[BATCH_LOSSES_KEY] = stats[BATCH_LOSSES_KEY]
    return output

  return _WeightComputations(
      is_zero, choose_weight, candidate_weight, client_result, client_output)


def _build_measurement_computations(
    stats_type: tff.Type,
) -> tuple[tff.Computation, tff.Computation]:
  """The computations of the round statistics W (the `weighting` measurements).

  Args:
    stats_type: The type of the client update's `stats`.

  Returns:
    `(summable_stats, finalize_measurements)`: `(<stats, float32> -> S)`,
    a client's summands, and `(<S, float32, float32, bool> -> W)`, W from
    their sum over clients, the minimum and maximum weight and whether the
    round fell back to `num_examples` weights.
  """

  @tff.tensorflow.computation(stats_type, np.float32)
  def summable_stats(stats, weight):
    finite = tf.equal(stats['is_non_finite'], 0.0)
    return collections.OrderedDict(
        num_clients=tf.constant(1.0),
        num_examples=stats['num_examples'],
        # NaN·0 is NaN: select, do not multiply, to drop non-finite clients.
        loss_sum=tf.where(
            finite, stats['mean_batch_loss'] * stats['num_examples'], 0.0
        ),
        valid_examples=tf.where(finite, stats['num_examples'], 0.0),
        loss_reduction=stats['loss_reduction'],
        num_empty_clients=stats['is_empty'],
        num_non_finite_clients=stats['is_non_finite'],
        weight=weight,
        weight_squared=weight * weight,
    )

  @tff.tensorflow.computation(
      summable_stats.type_signature.result, np.float32, np.float32, np.bool_
  )
  def finalize_measurements(sums, weight_min, weight_max, fell_back):
    n = sums['num_clients']
    mean_weight = tf.math.divide_no_nan(sums['weight'], n)
    variance = tf.math.divide_no_nan(sums['weight_squared'], n) - tf.square(
        mean_weight
    )
    return collections.OrderedDict(
        num_clients=tf.cast(n, tf.int32),
        num_examples=sums['num_examples'],
        mean_training_loss=tf.math.divide_no_nan(
            sums['loss_sum'], sums['valid_examples']
        ),
        mean_loss_reduction=tf.math.divide_no_nan(sums['loss_reduction'], n),
        num_empty_clients=tf.cast(sums['num_empty_clients'], tf.int32),
        num_non_finite_clients=tf.cast(
            sums['num_non_finite_clients'], tf.int32
        ),
        fell_back_to_num_examples=tf.cast(fell_back, tf.int32),
        weight_sum=sums['weight'],
        weight_min=weight_min,
        weight_max=weight_max,
        weight_std=tf.sqrt(tf.maximum(variance, 0.0)),
    )

  return summable_stats, finalize_measurements


def _build_next_fn(
    parameter_types: tuple[tff.Type, tff.Type, tff.Type],
    client_update: tff.Computation,
    metrics_aggregation_fn: Callable[[Any], Any],
    *,
    fall_back: bool,
    client_outputs: bool,
) -> tff.Computation:
  """The federated `next` of `build_weighted_client_work`.

  Args:
    parameter_types: `(H@SERVER, M@CLIENTS, D@CLIENTS)`.
    client_update: `(<H, M, D> -> <update=T, stats=..., metrics=...>)`.
    metrics_aggregation_fn: Aggregates the clients' unfinalized metrics.
    fall_back: Whether a round whose candidate weights sum to 0 uses the
      `num_examples` weights (a loss-reduction weighting with
      `num_examples_fallback`); this needs the sum first, a second
      aggregation stage.
    client_outputs: Whether `next` returns a `ClientWorkOutput`.

  Returns:
    `next`, of the type signature in `build_weighted_client_work`.
  """
  result_type = client_update.type_signature.result
  computations = _build_weight_computations(
      result_type['stats'], result_type['update'])
  summable_stats, finalize_measurements = _build_measurement_computations(
      result_type['stats'])

  @tff.federated_computation(*parameter_types)
  def next_fn(state, weights, data):
    hparams_at_clients = tff.federated_broadcast(state)
    outputs = tff.federated_map(
        client_update, (hparams_at_clients, weights, data)
    )
    stats = outputs.stats
    if fall_back:
      total = tff.federated_sum(
          tff.federated_map(computations.candidate_weight, stats))
      fell_back = tff.federated_map(computations.is_zero, total)
      weight = tff.federated_map(
          computations.choose_weight, (stats, tff.federated_broadcast(fell_back))
      )
    else:
      fell_back = tff.federated_value(False, tff.SERVER)
      weight = tff.federated_map(computations.candidate_weight, stats)
    result = tff.federated_map(computations.client_result, (outputs.update, weight))
    weighting_measurements = tff.federated_map(
        finalize_measurements,
        (
            tff.federated_sum(tff.federated_map(summable_stats, (stats, weight))),
            tff.federated_min(weight),
            tff.federated_max(weight),
            fell_back,
        ),
    )
    measurements = tff.federated_zip(
        collections.OrderedDict(
            train=metrics_aggregation_fn(outputs.metrics),
            weighting=weighting_measurements,
        )
    )
    if not client_outputs:
      return tff.templates.MeasuredProcessOutput(state, result, measurements)
    return ClientWorkOutput(
        state, result, measurements,
        tff.federated_map(computations.client_output, (stats, weight)))

  return next_fn


def _build_hparams_fns(
    hparams_type: tff.Type,
) -> tuple[tff.Computation, tff.Computation]:
  """`(get_hparams, set_hparams)`: the state is the optimizer's hparams H."""

  @tff.tensorflow.computation(hparams_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(hparams_type, hparams_type)
  def set_hparams_fn(state, hparams):
    del state
    return hparams

  return get_hparams_fn, set_hparams_fn


def build_weighted_client_work(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    optimizer: tff.learning.optimizers.Optimizer,
    weighting: weighting_lib.Weighting,
    proximal_strength: float = 0.0,
    with_client_config: bool = False,
    metrics_aggregator: Optional[tff.learning.metrics.MetricsAggregatorType] = None,
    num_examples_fallback: bool = True,
    client_outputs: bool = False,
) -> WeightedClientWorkProcess:
  """Builds the client work of FedAvg / FedProx / FedOPT with a weighting.

  The returned process has type signatures

  *   `initialize`: `( -> H@SERVER)`, H the client optimizer's hparams;
  *   `next`: `(<H@SERVER, M@CLIENTS, D@CLIENTS> -> <state=H@SERVER,
      result=ClientResult<update=T, update_weight=float32>@CLIENTS,
      measurements=<train=X, weighting=W>@SERVER>)`,

  where M is the model weights type, T its trainable part, D is `B*` or, with
  `with_client_config`, `<examples=B*, config=<learning_rate=float32,
  num_epochs=int32>*>`, X the aggregated model metrics and W the round
  statistics (see `finalize_measurements`). With `client_outputs`, `next`
  is instead `(<H@SERVER, M@CLIENTS, D@CLIENTS> -> <state=H@SERVER,
  result=ClientResult<update=T, update_weight=float32>@CLIENTS,
  measurements=<train=X, weighting=W>@SERVER, client_outputs={C}@CLIENTS>)`
  (a `ClientWorkOutput`), C = `<num_examples=float32, ...,
  fallback_weight=float32, weight=float32, batch_losses=float32[?]>`
  (`CLIENT_STAT_KEYS`, then `weight` and `BATCH_LOSSES_KEY`): the same
  round, whose first three fields are the default's.

  Args:
    model_fn: No-arg callable returning a new `tff.learning.models.VariableModel`.
    optimizer: The client optimizer.
    weighting: The client weighting mechanism.
    proximal_strength: FedProx's mu; the client minimises
      loss + (mu/2)·||w - w_global||². Zero disables the term.
    with_client_config: Whether each client's data carries its own learning
      rate and epochs (see `client_data.with_client_config`).
    metrics_aggregator: Aggregates the model's unfinalized metrics;
      `tff.learning.metrics.sum_then_finalize` if None.
    num_examples_fallback: With a loss-reduction weighting: whether a round
      in which every client's ΔL is 0 uses `num_examples` weights instead.
      Deciding that needs the sum of the weights before the weighted mean,
      a second aggregation stage; without it (False) every weight of such a
      round is 0 and the round has one aggregation stage, which
      `tff_nlp.runtime.multi_worker` can split across workers.
    client_outputs: Whether `next` also returns each client's statistics
      (simulation only; see above).

  Returns:
    A `WeightedClientWorkProcess`.
  """
  if proximal_strength < 0.0 or not np.isfinite(proximal_strength):
    raise ValueError(
        'proximal_strength must be a finite non-negative number, got '
        f'{proximal_strength!r}.'
    )
  if metrics_aggregator is None:
    metrics_aggregator = tff.learning.metrics.sum_then_finalize

  with tf.Graph().as_default():
    model = model_fn()
    metrics_aggregation_fn = metrics_aggregator(model.metric_finalizers())
  weights_type = tff.learning.models.weights_type_from_model(model)
  data_type = _client_data_type(model, with_client_config)

  initial_hparams = optimizer.get_hparams(
      optimizer.initialize(tf.TensorSpec([], tf.float32))
  )

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_hparams, tff.SERVER)

  hparams_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(hparams_type, weights_type, data_type)
  def client_update(hparams, initial_weights, data):
    update_fn = local_training.build_client_update(
        model_fn, optimizer, weighting, proximal_strength, with_client_config
    )
    return update_fn(hparams, initial_weights, data)

  next_fn = _build_next_fn(
      (
          init_fn.type_signature.result,
          tff.FederatedType(weights_type, tff.CLIENTS),
          tff.FederatedType(data_type, tff.CLIENTS),
      ),
      client_update,
      metrics_aggregation_fn,
      fall_back=weighting.uses_loss_reduction and num_examples_fallback,
      client_outputs=client_outputs,
  )
  get_hparams_fn, set_hparams_fn = _build_hparams_fns(hparams_type)
  return WeightedClientWorkProcess(
      init_fn,
      next_fn,
      get_hparams_fn=get_hparams_fn,
      set_hparams_fn=set_hparams_fn,
  )
