"""FedAvg, FedOPT and FedProx with Lorar-family client weighting, in one builder.

Reference:
  Tianshu Zhang, Changchang Liu, Wei-Han Lee, Yu Su, Huan Sun. Federated
  Learning for Semantic Parsing: Task Formulation, Evaluation Setup, New
  Algorithms. ACL 2023. https://arxiv.org/abs/2305.17221 (Algorithm 1).

The three algorithms differ in the client objective and the server step:

  fedavg   client: loss;                 server: SGD, learning rate 1.0
  fedprox  client: loss + mu/2·||w-w^t||²; server: SGD, learning rate 1.0
  fedopt   client: loss;                 server: any optimizer on the averaged
           delta as pseudo-gradient; default SGD, learning rate 1.0,
           momentum 0.9 (the paper's choice)

(McMahan et al., 2017; Li et al., 2020; Reddi et al., 2021). The weighting of
client deltas is orthogonal: see `weighting.Weighting`.
"""

import collections
from collections.abc import Callable
import enum
from typing import Optional, Union

import numpy as np
import tensorflow_federated as tff

from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.templates import extended_outputs
from tff_nlp.aggregators import delta_aggregation
from tff_nlp.aggregators import weight_cap
from tff_nlp.aggregators import weighting as weighting_lib


class Algorithm(enum.Enum):
  FEDAVG = 'fedavg'
  FEDOPT = 'fedopt'
  FEDPROX = 'fedprox'


def default_server_optimizer(
    algorithm: Algorithm,
) -> tff.learning.optimizers.Optimizer:
  """The server optimizer of `algorithm` in the Lorar paper."""
  if algorithm is Algorithm.FEDOPT:
    return tff.learning.optimizers.build_sgdm(learning_rate=1.0, momentum=0.9)
  return tff.learning.optimizers.build_sgdm(learning_rate=1.0)


# The process with per-client outputs and its output, defined below the
# composers that build them (`templates.extended_outputs`; the partial-model
# composer builds them too); their names here are kept for callers.
FLProcessOutput = extended_outputs.FLProcessOutput
FLProcess = extended_outputs.FLProcess


def build_fl_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    algorithm: Union[str, Algorithm],
    weighting: Union[str, weighting_lib.Weighting],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
    proximal_strength: float = 0.0,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = None,
    with_client_config: bool = False,
    metrics_aggregator: Optional[tff.learning.metrics.MetricsAggregatorType] = None,
    num_examples_fallback: bool = True,
    max_weight_share: Optional[float] = None,
    client_outputs: bool = False,
) -> tff.learning.templates.LearningProcess:
  """Builds FedAvg / FedOPT / FedProx with a client weighting mechanism.

  The process is composed with `tff.learning.templates.compose_learning_process`
  from a broadcast distributor, `client_work.build_weighted_client_work`, the
  weighted `model_aggregator` and an apply-optimizer finalizer (with
  `client_outputs`, `compose_learning_process` below, whose `next` is the
  one TFF's composer cannot build). Its methods:

  *   `initialize`: `( -> S@SERVER)`, S a
      `tff.learning.templates.LearningAlgorithmState`.
  *   `next`: `(<S@SERVER, {D}@CLIENTS> -> <state=S@SERVER, metrics=M@SERVER>)`
      with D = `B*`, the client's batches, or with `with_client_config`
      `<examples=B*, config=<learning_rate=float32,num_epochs=int32>*>`.
      M = `<distributor=<>, client_work=<train=X, weighting=W>,
      aggregator=A, finalizer=<update_non_finite=int32>>` with X the model's
      metrics, W the round's weighting statistics and A the aggregator's.
  *   `get_model_weights`: `(S -> ModelWeights)`; `set_model_weights`.

  With `client_outputs=True`, an `FLProcess` whose `next` is
  `(<S@SERVER, {D}@CLIENTS> -> <state=S@SERVER, metrics=M@SERVER,
  client_outputs={C}@CLIENTS>)` (an `FLProcessOutput`), C =
  `<num_examples=float32, num_batches=float32, dataset_size=float32,
  first_batch_loss=float32, last_batch_loss=float32, max_batch_loss=float32,
  min_batch_loss=float32, mean_batch_loss=float32, loss_reduction=float32,
  is_empty=float32, is_non_finite=float32, candidate_weight=float32,
  fallback_weight=float32, weight=float32, batch_losses=float32[?]>`, each
  client's statistics of the round (`client_work.CLIENT_STAT_KEYS`, the
  weight applied and every batch's loss); the state and metrics are those
  of the default process, with the same types and numbers.

  A round whose aggregated update is not finite (e.g. every client was
  rejected) leaves the model and server optimizer state unchanged.

  Args:
    model_fn: No-arg callable returning a new `tff.learning.models.VariableModel`
      (e.g. wrapping a `tf.keras` model with
      `tff.learning.models.from_keras_model`).
    algorithm: 'fedavg', 'fedopt' or 'fedprox'.
    weighting: 'num_examples', 'uniform', 'loss_reduction' or 'lorar'.
    client_optimizer_fn: The client `tff.learning.optimizers.Optimizer` (SGD,
      Adam, Adafactor, Yogi, ...). With `with_client_config` its learning rate
      is replaced per client.
    server_optimizer_fn: The server `tff.learning.optimizers.Optimizer`; None
      gives `default_server_optimizer(algorithm)`.
    proximal_strength: FedProx's mu (> 0 for 'fedprox', 0 otherwise).
    model_aggregator: A `tff.aggregators.WeightedAggregationFactory` for the
      client deltas (e.g. DP, compression); `tff.aggregators.MeanFactory()` if
      None.
    with_client_config: Whether client data carries a per-client learning rate
      and number of epochs; see `client_data.with_client_config`.
    metrics_aggregator: Aggregator of the model's metrics;
      `tff.learning.metrics.sum_then_finalize` if None.
    num_examples_fallback: With 'loss_reduction' or 'lorar' weighting:
      whether a round in which every client's ΔL is 0 falls back to
      `num_examples` weights (the default; this needs a sum of the weights
      before the weighted mean, a second aggregation stage). If False, such
      a round's weighted mean is 0/0, so the finalizer keeps the model, and
      every round has a single aggregation stage: the form
      `tff_nlp.runtime.multi_worker` splits across workers.
    max_weight_share: If set, a number c in (0, 1]: no client's share of a
      round's weight exceeds c, the excess going to the others in
      proportion to their weights (`weight_cap`; the model aggregator is
      wrapped in `weight_cap.WeightShareCapFactory`, so its measurements
      become `<weight_cap=C, inner=A>`). None (the default) is the paper's
      uncapped weighting. `2 / clients_per_round` is the recommended value
      when clients are not trusted (docs/algorithms.md, "Untrusted
      clients"). The cap adds a second aggregation stage (the weights are
      gathered first), so such a round is not split across workers.
    client_outputs: Whether `next` also returns each client's statistics
      (simulation only; see above). False (the default) is TFF's composed
      process itself.

  Returns:
    A `tff.learning.templates.LearningProcess`; with `client_outputs`, an
    `FLProcess`.

  Raises:
    ValueError: For an unknown `algorithm` or `weighting` (the message lists
      the valid names), a `proximal_strength` that does not fit `algorithm`
      or a `max_weight_share` outside (0, 1].
    TypeError: If an optimizer or aggregator argument has the wrong type.
  """
  algorithm = weighting_lib.parse_option(algorithm, Algorithm, 'algorithm')
  weighting = weighting_lib.parse_option(
      weighting, weighting_lib.Weighting, 'weighting'
  )
  if algorithm is Algorithm.FEDPROX and not proximal_strength > 0.0:
    raise ValueError(
        "algorithm='fedprox' needs proximal_strength > 0 (the Lorar paper "
        f'uses 1e-4), got {proximal_strength!r}; use fedavg for mu = 0.'
    )
  if algorithm is not Algorithm.FEDPROX and proximal_strength != 0.0:
    raise ValueError(
        f'proximal_strength={proximal_strength!r} is only used by '
        f"algorithm='fedprox', not {algorithm.value!r}."
    )
  for name, value in (
      ('client_optimizer_fn', client_optimizer_fn),
      ('server_optimizer_fn', server_optimizer_fn),
  ):
    if value is not None and not isinstance(
        value, tff.learning.optimizers.Optimizer
    ):
      raise TypeError(
          f'{name} must be a tff.learning.optimizers.Optimizer (e.g. '
          f'tff.learning.optimizers.build_sgdm(...)), got {type(value)}.'
      )
  if server_optimizer_fn is None:
    server_optimizer_fn = default_server_optimizer(algorithm)
  if model_aggregator is None:
    model_aggregator = tff.aggregators.MeanFactory()
  delta_aggregation.check_factory(model_aggregator)
  if max_weight_share is not None:
    model_aggregator = weight_cap.WeightShareCapFactory(
        max_weight_share, inner=model_aggregator)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    model = model_fn()
    if not isinstance(model, tff.learning.models.VariableModel):
      raise TypeError(
          'model_fn must return a tff.learning.models.VariableModel, got '
          f'{type(model)}.'
      )
    return tff.learning.models.ModelWeights.from_model(model)

  model_weights_type = initial_model_weights_fn.type_signature.result
  distributor = tff.learning.templates.build_broadcast_process(
      model_weights_type
  )
  client_work = client_work_lib.build_weighted_client_work(
      model_fn,
      optimizer=client_optimizer_fn,
      weighting=weighting,
      proximal_strength=proximal_strength,
      with_client_config=with_client_config,
      metrics_aggregator=metrics_aggregator,
      num_examples_fallback=num_examples_fallback,
      client_outputs=client_outputs,
  )
  aggregator = model_aggregator.create(
      model_weights_type.trainable, tff.TensorType(np.float32)
  )
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, model_weights_type
  )
  return compose_learning_process(
      initial_model_weights_fn, distributor, client_work, aggregator, finalizer
  )


def compose_learning_process(
    initial_model_weights_fn: tff.Computation,
    distributor: tff.learning.templates.DistributionProcess,
    client_work: tff.learning.templates.ClientWorkProcess,
    aggregator: tff.templates.AggregationProcess,
    finalizer: tff.learning.templates.FinalizerProcess,
) -> tff.learning.templates.LearningProcess:
  """`tff.learning.templates.compose_learning_process`, keeping client outputs.

  For client work without per-client outputs, TFF's composer's process
  itself. For client work whose `next` returns a
  `client_work.ClientWorkOutput` (`build_weighted_client_work(...,
  client_outputs=True)`), an `FLProcess` composed here, once: TFF's composer
  (0.87, `learning/templates/composers.py`) cannot give the client outputs
  (its `next_fn` is built inside it and returns only
  `LearningProcessOutput(state, metrics)`, metrics being SERVER-placed), so
  this runs its checks (the parts fit together; the client data is a
  CLIENTS-placed structure of sequences) by composing the same parts
  without the client outputs, and builds the
  process's computations as it does (`_compose_with_client_outputs`): the
  same round (a test checks both give the same state and metrics) that also
  returns the client work's `client_outputs`. This is the library's one
  such composer.

  Args:
    initial_model_weights_fn: As TFF's composer's.
    distributor: As TFF's composer's.
    client_work: A `ClientWorkProcess`; its `next` may return a
      `client_work.ClientWorkOutput`.
    aggregator: As TFF's composer's.
    finalizer: As TFF's composer's.

  Returns:
    A `tff.learning.templates.LearningProcess`, an `FLProcess` if
    `client_work` returns per-client outputs.

  Raises:
    TypeError: If the parts do not fit together (TFF's composer's errors).
  """
  if not client_work_lib.returns_client_outputs(client_work):
    return tff.learning.templates.compose_learning_process(
        initial_model_weights_fn, distributor, client_work, aggregator,
        finalizer)
  # TFF's composer checks that the parts fit together and that the client
  # data is a CLIENTS-placed structure of sequences; composing the same parts
  # without the client outputs runs its checks through its public name
  # (composing federated computations traces no TensorFlow).
  tff.learning.templates.compose_learning_process(
      initial_model_weights_fn, distributor,
      _without_client_outputs(client_work), aggregator, finalizer)
  return _compose_with_client_outputs(
      initial_model_weights_fn, distributor, client_work, aggregator,
      finalizer)


def _without_client_outputs(
    client_work: tff.learning.templates.ClientWorkProcess,
) -> tff.learning.templates.ClientWorkProcess:
  """`client_work` whose `next` drops the per-client outputs."""
  next_type = client_work.next.type_signature

  @tff.federated_computation(*next_type.parameter)
  def next_fn(state, weights, data):
    output = client_work.next(state, weights, data)
    return tff.templates.MeasuredProcessOutput(
        output.state, output.result, output.measurements)

  return tff.learning.templates.ClientWorkProcess(
      client_work.initialize, next_fn,
      get_hparams_fn=client_work.get_hparams,
      set_hparams_fn=client_work.set_hparams)


def _compose_with_client_outputs(
    initial_model_weights_fn: tff.Computation,
    distributor: tff.learning.templates.DistributionProcess,
    client_work: tff.learning.templates.ClientWorkProcess,
    aggregator: tff.templates.AggregationProcess,
    finalizer: tff.learning.templates.FinalizerProcess,
) -> FLProcess:
  """The `FLProcess` of `compose_learning_process`; parts already checked.

  Its `initialize`, `get_model_weights`, `set_model_weights`, `get_hparams`
  and `set_hparams` are those TFF's composer builds (the same state
  `LearningAlgorithmState`, hparams `<client_work=..., finalizer=...>`);
  `next` is TFF's round plus `client_outputs`.
  """
  state_class = tff.learning.templates.LearningAlgorithmState

  @tff.federated_computation()
  def init_fn():
    return tff.federated_zip(state_class(
        tff.federated_eval(initial_model_weights_fn, tff.SERVER),
        distributor.initialize(),
        client_work.initialize(),
        aggregator.initialize(),
        finalizer.initialize(),
    ))

  @tff.federated_computation(init_fn.type_signature.result,
                             client_work.next.type_signature.parameter[2])
  def next_fn(state, client_data):
    distributor_output = distributor.next(
        state.distributor, state.global_model_weights
    )
    client_work_output = client_work.next(
        state.client_work, distributor_output.result, client_data
    )
    aggregator_output = aggregator.next(
        state.aggregator,
        client_work_output.result.update,
        client_work_output.result.update_weight,
    )
    finalizer_output = finalizer.next(
        state.finalizer, state.global_model_weights, aggregator_output.result
    )
    new_state = tff.federated_zip(state_class(
        finalizer_output.result,
        distributor_output.state,
        client_work_output.state,
        aggregator_output.state,
        finalizer_output.state,
    ))
    metrics = tff.federated_zip(
        collections.OrderedDict(
            distributor=distributor_output.measurements,
            client_work=client_work_output.measurements,
            aggregator=aggregator_output.measurements,
            finalizer=finalizer_output.measurements,
        )
    )
    return FLProcessOutput(
        new_state, metrics, client_work_output.client_outputs)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type)
  def get_model_weights_fn(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type, state_type.global_model_weights)
  def set_model_weights_fn(state, model_weights):
    return state_class(model_weights, state.distributor, state.client_work,
                       state.aggregator, state.finalizer)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return collections.OrderedDict(
        client_work=client_work.get_hparams(state.client_work),
        finalizer=finalizer.get_hparams(state.finalizer))

  @tff.tensorflow.computation(state_type, get_hparams_fn.type_signature.result)
  def set_hparams_fn(state, hparams):
    return state_class(
        state.global_model_weights,
        state.distributor,
        client_work.set_hparams(state.client_work, hparams['client_work']),
        state.aggregator,
        finalizer.set_hparams(state.finalizer, hparams['finalizer']),
    )

  return FLProcess(init_fn, next_fn, get_model_weights_fn,
                   set_model_weights_fn, get_hparams_fn=get_hparams_fn,
                   set_hparams_fn=set_hparams_fn)
