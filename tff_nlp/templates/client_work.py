"""Client work of FedAvg / FedProx / FedOPT with Lorar-family client weights.

Each client trains the broadcast model on its batches (optionally with the
FedProx proximal term), records its per-batch training losses, and returns its
model delta together with a weight chosen by a `Weighting` (see
`weighting.py`). Loss-reduction based weights need one extra exchange of a
scalar: if every client's ΔL is zero (e.g. every client has a single batch),
normalising by ΣΔL is undefined, so the round falls back to `num_examples`
weights and says so in its measurements.

Algorithm 1 of Zhang et al., ACL 2023 (https://arxiv.org/abs/2305.17221).

Each training step runs inside `models.dropout_seeds.step_seed`, keyed by the
round's start weights, the batch and the step, so a model with seeded dropout
draws the same masks in a rerun or a resumed run.

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

from tff_nlp.templates import batch_loop
from tff_nlp.templates import client_data as client_data_lib
from tff_nlp.templates import optimizers as optimizers_lib
from tff_nlp.aggregators import weighting as weighting_lib
from tff_nlp.models import dropout_seeds

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


def _client_stats_spec():
  return collections.OrderedDict(
      (key, tf.TensorSpec([], tf.float32)) for key in CLIENT_STAT_KEYS
  )


def _build_client_update(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    optimizer: tff.learning.optimizers.Optimizer,
    weighting: weighting_lib.Weighting,
    proximal_strength: float,
    with_client_config: bool,
):
  """Returns the `tf.function` that trains one client; builds its model."""
  model = model_fn()
  model_weights = tff.learning.models.ModelWeights.from_model(model)
  trainable = tuple(tf.nest.flatten(model_weights.trainable))

  @tf.function
  def client_update(optimizer_hparams, initial_weights, data):
    tf.nest.map_structure(
        lambda v, t: v.assign(t), model_weights, initial_weights
    )
    initial_trainable = tuple(tf.nest.flatten(initial_weights.trainable))
    # Keys the dropout masks of models built with seeded dropout (see
    # `dropout_seeds`): same global model, batch and step, same masks.
    round_key = dropout_seeds.fingerprint(initial_trainable)
    hparams = collections.OrderedDict(optimizer_hparams)
    if with_client_config:
      config = data[client_data_lib.CONFIG_KEY].get_single_element()
      hparams[tff.learning.optimizers.LEARNING_RATE_KEY] = config[
          client_data_lib.LEARNING_RATE_KEY
      ]
      num_epochs = config[client_data_lib.NUM_EPOCHS_KEY]
      dataset = data[client_data_lib.EXAMPLES_KEY].repeat(
          tf.cast(num_epochs, tf.int64)
      )
    else:
      num_epochs = tf.constant(1, tf.int32)
      dataset = data

    optimizer_state = optimizer.initialize(
        tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)
    )
    optimizer_state = optimizers_lib.set_hparams(
        optimizer, optimizer_state, hparams
    )
    zero = tf.constant(0.0, tf.float32)
    initial_loop_state = (
        collections.OrderedDict(
            num_examples=zero,
            num_batches=zero,
            first_batch_loss=zero,
            last_batch_loss=zero,
            max_batch_loss=tf.constant(-np.inf, tf.float32),
            min_batch_loss=tf.constant(np.inf, tf.float32),
            loss_sum=zero,
            losses_finite=tf.constant(True),
            # Every batch's loss, in order: the paper's per-step curves.
            batch_losses=tf.TensorArray(
                tf.float32, size=0, dynamic_size=True, element_shape=[]),
        ),
        optimizer_state,
    )

    def train_on_batch(loop_state, batch):
      stats, carried_optimizer_state = loop_state
      optimizer_state = optimizers_lib.restore_python_bools(
          initial_loop_state[1], carried_optimizer_state
      )
      step_key = dropout_seeds.fingerprint(
          (round_key, batch, stats['num_batches']))
      with tf.GradientTape() as tape, dropout_seeds.step_seed(step_key):
        output = model.forward_pass(batch, training=True)
      gradients = tape.gradient(output.loss, trainable)
      if proximal_strength > 0.0:
        # Gradient of (mu/2)·||w - w_global||².
        gradients = tuple(
            g + proximal_strength * (w - w0)
            for g, w, w0 in zip(gradients, trainable, initial_trainable)
        )
      optimizer_state, new_weights = optimizer.next(
          optimizer_state, trainable, gradients
      )
      for variable, value in zip(trainable, new_weights):
        variable.assign(value)
      optimizer_state = optimizers_lib.match_dtypes(
          carried_optimizer_state, optimizer_state
      )

      loss = tf.cast(output.loss, tf.float32)
      if output.num_examples is None:
        batch_size = tf.shape(tf.nest.flatten(output.predictions)[0])[0]
      else:
        batch_size = output.num_examples
      batch_size = tf.cast(batch_size, tf.float32)
      stats = collections.OrderedDict(
          num_examples=stats['num_examples'] + batch_size,
          num_batches=stats['num_batches'] + 1.0,
          # Tensor `==` is Python identity when TFF traces in graph mode.
          first_batch_loss=tf.where(
              tf.equal(stats['num_batches'], 0.0),
              loss,
              stats['first_batch_loss'],
          ),
          last_batch_loss=loss,
          max_batch_loss=tf.maximum(stats['max_batch_loss'], loss),
          min_batch_loss=tf.minimum(stats['min_batch_loss'], loss),
          loss_sum=stats['loss_sum'] + loss * batch_size,
          losses_finite=tf.logical_and(
              stats['losses_finite'], tf.math.is_finite(loss)
          ),
          batch_losses=stats['batch_losses'].write(
              tf.cast(stats['num_batches'], tf.int32), loss),
      )
      return stats, optimizer_state

    loop_stats, _ = batch_loop.for_each_batch(
        dataset, initial_loop_state, train_on_batch
    )

    delta = tf.nest.map_structure(
        tf.subtract, initial_weights.trainable, model_weights.trainable
    )
    update_finite = tf.reduce_all(
        [tf.reduce_all(tf.math.is_finite(d)) for d in tf.nest.flatten(delta)]
    )
    has_batches = loop_stats['num_batches'] > 0.0
    is_non_finite = tf.logical_not(
        tf.logical_and(update_finite, loop_stats['losses_finite'])
    )
    is_valid = tf.logical_and(has_batches, tf.logical_not(is_non_finite))
    # A rejected client sends zeros, never NaN: 0·NaN would still poison the
    # weighted sum in the aggregator.
    delta = tf.nest.map_structure(
        lambda d: tf.where(is_valid, d, tf.zeros_like(d)), delta
    )
    metrics = tf.nest.map_structure(
        lambda m: tf.where(is_valid, m, tf.zeros_like(m)),
        model.report_local_unfinalized_metrics(),
    )

    loss_reduction = tf.where(
        is_valid,
        loop_stats['max_batch_loss'] - loop_stats['min_batch_loss'],
        0.0,
    )
    dataset_size = loop_stats['num_examples'] / tf.cast(num_epochs, tf.float32)
    candidate = weighting_lib.raw_client_weight(
        weighting, dataset_size, loss_reduction
    )

    def if_batches(value):
      return tf.where(has_batches, value, 0.0)

    stats = collections.OrderedDict(
        num_examples=loop_stats['num_examples'],
        num_batches=loop_stats['num_batches'],
        dataset_size=dataset_size,
        first_batch_loss=loop_stats['first_batch_loss'],
        last_batch_loss=loop_stats['last_batch_loss'],
        max_batch_loss=if_batches(loop_stats['max_batch_loss']),
        min_batch_loss=if_batches(loop_stats['min_batch_loss']),
        mean_batch_loss=tf.math.divide_no_nan(
            loop_stats['loss_sum'], loop_stats['num_examples']
        ),
        loss_reduction=loss_reduction,
        is_empty=tf.cast(tf.logical_not(has_batches), tf.float32),
        is_non_finite=tf.cast(
            tf.logical_and(has_batches, is_non_finite), tf.float32
        ),
        candidate_weight=tf.where(is_valid, candidate, 0.0),
        fallback_weight=tf.where(is_valid, dataset_size, 0.0),
        batch_losses=loop_stats['batch_losses'].stack(),
    )
    return collections.OrderedDict(update=delta, stats=stats, metrics=metrics)

  return client_update


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


def _check_client_outputs_next(next_fn: tff.Computation) -> None:
  """What `ClientWorkProcess` checks of `next`, for a `ClientWorkOutput`."""
  result = next_fn.type_signature.result
  if not (isinstance(result, tff.StructWithPythonType)
          and result.python_container is ClientWorkOutput):
    raise TypeError('next must return a ClientWorkOutput, got '
                    f'{result}.')
  for name, placement in (('result', tff.CLIENTS),
                          ('measurements', tff.SERVER),
                          ('client_outputs', tff.CLIENTS)):
    value_type = getattr(result, name)
    if not (isinstance(value_type, tff.FederatedType)
            and value_type.placement is placement):
      raise TypeError(f'next\'s {name} must be placed at {placement}, got '
                      f'{value_type}.')
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
    tff.templates.IterativeProcess.__init__(
        self, initialize_fn, next_fn, next_is_multi_arg=True)
    self._get_hparams_fn = get_hparams_fn
    self._set_hparams_fn = set_hparams_fn

  @property
  def client_outputs(self) -> bool:
    """Whether `next` returns a `ClientWorkOutput` (per-client outputs)."""
    return self._client_outputs

  @property
  def get_hparams(self) -> tff.Computation:
    return self._get_hparams_fn

  @property
  def set_hparams(self) -> tff.Computation:
    return self._set_hparams_fn


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
  examples_type = tff.SequenceType(tff.types.tensorflow_to_type(model.input_spec))
  if with_client_config:
    data_type = tff.StructWithPythonType(
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
  else:
    data_type = examples_type

  initial_hparams = optimizer.get_hparams(
      optimizer.initialize(tf.TensorSpec([], tf.float32))
  )

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_hparams, tff.SERVER)

  hparams_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(hparams_type, weights_type, data_type)
  def client_update(hparams, initial_weights, data):
    update_fn = _build_client_update(
        model_fn, optimizer, weighting, proximal_strength, with_client_config
    )
    return update_fn(hparams, initial_weights, data)

  stats_type = client_update.type_signature.result['stats']

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

  update_type = client_update.type_signature.result['update']

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

  next_parameter_types = (
      init_fn.type_signature.result,
      tff.FederatedType(weights_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS),
  )

  @tff.federated_computation(*next_parameter_types)
  def next_fn(state, weights, data):
    hparams_at_clients = tff.federated_broadcast(state)
    outputs = tff.federated_map(
        client_update, (hparams_at_clients, weights, data)
    )
    stats = outputs.stats
    if weighting.uses_loss_reduction and num_examples_fallback:
      total = tff.federated_sum(tff.federated_map(candidate_weight, stats))
      fall_back = tff.federated_map(is_zero, total)
      weight = tff.federated_map(
          choose_weight, (stats, tff.federated_broadcast(fall_back))
      )
    else:
      fall_back = tff.federated_value(False, tff.SERVER)
      weight = tff.federated_map(candidate_weight, stats)
    result = tff.federated_map(client_result, (outputs.update, weight))
    weighting_measurements = tff.federated_map(
        finalize_measurements,
        (
            tff.federated_sum(tff.federated_map(summable_stats, (stats, weight))),
            tff.federated_min(weight),
            tff.federated_max(weight),
            fall_back,
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
        tff.federated_map(client_output, (stats, weight)))

  @tff.tensorflow.computation(hparams_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(hparams_type, hparams_type)
  def set_hparams_fn(state, hparams):
    del state
    return hparams

  return WeightedClientWorkProcess(
      init_fn,
      next_fn,
      get_hparams_fn=get_hparams_fn,
      set_hparams_fn=set_hparams_fn,
  )
