"""Attacking clients and defences, composed from TFF's learning templates.

An attacker is a client of an ordinary FedAvg round
(`templates.build_weighted_client_work`) that misbehaves in one of two
ways:

*   in what it sends: its model delta times `update_scale` (`scaled`:
    ×10; `sign_flip`: ×(-10), the scaled update reversed; `negated`:
    ×(-1), the plain sign flip) or its claimed example count |D_i| times
    `weight_scale` (`inflated_count`), which scales its weight under the
    weightings that use |D_i| (`num_examples` and `lorar`; `uniform`
    ignores it, so does `loss_reduction`);
*   in what it trains on: its own examples, altered before the round
    (`label_flip`, `inflate_loss`; see `ATTACKS` and the tasks of
    `robustness_tasks`). It then runs the honest client code.

`build_attacked_client_work` wraps the honest client work in a
`tff.learning.templates.ClientWorkProcess` whose client data carries each
client's attack parameters; honest clients carry (1, 1) and are unchanged.
`build_attacked_process` composes it with TFF's broadcast, a defence's
aggregator (`DEFENCES`, `build_defence`) and the apply-optimizer finalizer
by `algorithms.fl_process.compose_learning_process` (TFF's
`tff.learning.templates.compose_learning_process`, keeping the per-client
outputs when asked for), as `algorithms.build_fl_process` does for the
honest process.
"""

import collections
from collections.abc import Callable
import dataclasses
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.algorithms import fl_process as fl_process_lib
from tff_nlp.aggregators import trimmed_mean
from tff_nlp.aggregators import weight_cap
from tff_nlp.aggregators import weighting as weighting_lib

EXAMPLES_KEY = 'examples'
ATTACK_KEY = 'attack'
UPDATE_SCALE_KEY = 'update_scale'
WEIGHT_SCALE_KEY = 'weight_scale'

DEFENCES = ('none', 'cap', 'robust', 'both', 'trimmed', 'cap_trimmed')
# The defences that cap the weight shares.
CAPPED_DEFENCES = ('cap', 'both', 'cap_trimmed')
# The trimmed mean's β: one client of eight trimmed from each end.
TRIM_FRACTION = 0.125


@dataclasses.dataclass(frozen=True)
class Attack:
  """What an attacking client does.

  Attributes:
    name: The attack's name in tables.
    update_scale: Its model delta is multiplied by this.
    weight_scale: Its claimed |D_i| is multiplied by this (its weight too,
      under the weightings that use |D_i|).
    data: '' (trains on its own examples), 'label_flip' or 'inflate_loss':
      the task alters the attacker's examples (`robustness_tasks`).
  """

  name: str
  update_scale: float = 1.0
  weight_scale: float = 1.0
  data: str = ''

  def __post_init__(self):
    if not np.isfinite(self.update_scale) or self.update_scale == 0.0:
      raise ValueError(f'Attack {self.name!r}: update_scale must be finite '
                       f'and non-zero, got {self.update_scale!r}.')
    if not (np.isfinite(self.weight_scale) and self.weight_scale > 0.0):
      raise ValueError(f'Attack {self.name!r}: weight_scale must be finite '
                       f'and positive, got {self.weight_scale!r}.')
    if self.data not in ('', 'label_flip', 'inflate_loss'):
      raise ValueError(f'Attack {self.name!r}: unknown data attack '
                       f'{self.data!r}.')


HONEST = Attack('honest')
ATTACKS = collections.OrderedDict(
    (a.name, a) for a in (
        Attack('scaled', update_scale=10.0),
        Attack('sign_flip', update_scale=-10.0),
        Attack('inflated_count', weight_scale=10.0),
        Attack('label_flip', data='label_flip'),
        Attack('inflate_loss', data='inflate_loss'),
        Attack('negated', update_scale=-1.0),
    ))


def _attack_element_spec() -> collections.OrderedDict:
  return collections.OrderedDict([
      (UPDATE_SCALE_KEY, tf.TensorSpec([], tf.float32)),
      (WEIGHT_SCALE_KEY, tf.TensorSpec([], tf.float32)),
  ])


def attack_parameters(attack: Attack) -> tf.data.Dataset:
  """The `attack` part of a client's data: `<update_scale, weight_scale>*`.

  A dataset of exactly one element: a client's data must be sequences
  (`tff.learning.templates.ClientWorkProcess` refuses a tensor there), as
  `templates.with_client_config` carries its config.
  """
  return tf.data.Dataset.from_tensors(collections.OrderedDict([
      (UPDATE_SCALE_KEY, tf.constant(attack.update_scale, tf.float32)),
      (WEIGHT_SCALE_KEY, tf.constant(attack.weight_scale, tf.float32)),
  ]))


def attacked_client_data(examples, attack: Attack) -> collections.OrderedDict:
  """A client's data for the attacked client work: `<examples, attack>`.

  Args:
    examples: The data the honest client work takes (a dataset, or
      `templates.with_client_config` data); for a data attack, the already
      altered examples.
    attack: `HONEST` or an attack.
  """
  return collections.OrderedDict([
      (EXAMPLES_KEY, examples), (ATTACK_KEY, attack_parameters(attack))])


def uses_claimed_count(weighting: weighting_lib.Weighting) -> bool:
  """Whether the client's weight scales with its claimed |D_i|."""
  return weighting in (weighting_lib.Weighting.NUM_EXAMPLES,
                       weighting_lib.Weighting.LORAR)


def build_attacked_client_work(
    client_work: client_work_lib.WeightedClientWorkProcess,
    weighting: Union[str, weighting_lib.Weighting],
) -> client_work_lib.WeightedClientWorkProcess:
  """Wraps honest client work so that some clients attack.

  With D the data type of `client_work` and A =
  `<update_scale=float32,weight_scale=float32>`, the returned process has

  *   `initialize`: that of `client_work`, `( -> H@SERVER)`;
  *   `next`: `(<H@SERVER, M@CLIENTS, <examples=D,attack=A>@CLIENTS> ->
      <state=H@SERVER, result=ClientResult<update=T,
      update_weight=float32>@CLIENTS, measurements=X@SERVER>)`: each client
      runs `client_work` on its `examples`, then sends update·update_scale
      and, if `weighting` uses |D_i| (`uses_claimed_count`),
      update_weight·weight_scale; X are `client_work`'s measurements (of
      the honest computation, before the attack). If `client_work` was
      built with `client_outputs=True`, `next` also returns its per-client
      statistics, `client_outputs={C}@CLIENTS` (a
      `templates.client_work.ClientWorkOutput`), with `weight` the weight
      actually sent.

  Args:
    client_work: From `templates.build_weighted_client_work`.
    weighting: The weighting `client_work` was built with.

  Returns:
    A `WeightedClientWorkProcess`, with per-client outputs if `client_work`
    has them.
  """
  weighting = weighting_lib.parse_option(
      weighting, weighting_lib.Weighting, 'weighting')
  if not isinstance(client_work, client_work_lib.WeightedClientWorkProcess):
    raise TypeError('client_work must come from '
                    'templates.build_weighted_client_work, got '
                    f'{type(client_work)}.')
  state_type, weights_type, inner_data_type = (
      client_work.next.type_signature.parameter)
  attack_type = tff.SequenceType(
      tff.types.tensorflow_to_type(_attack_element_spec()))
  data_type = tff.StructWithPythonType(
      [(EXAMPLES_KEY, inner_data_type.member), (ATTACK_KEY, attack_type)],
      collections.OrderedDict)
  inner_result_type = client_work.next.type_signature.result
  result_type = inner_result_type.result.member
  scale_weight = uses_claimed_count(weighting)

  @tff.tensorflow.computation(result_type, attack_type)
  def attack_result(result, attack_dataset):
    # The one element of the dataset (its last, read in graph mode).
    attack = attack_dataset.reduce(
        collections.OrderedDict(
            (key, tf.constant(1.0)) for key in _attack_element_spec()),
        lambda _, element: element)
    update = tf.nest.map_structure(
        lambda u: u * attack[UPDATE_SCALE_KEY], result.update)
    weight = result.update_weight
    if scale_weight:
      weight = weight * attack[WEIGHT_SCALE_KEY]
    return tff.learning.templates.ClientResult(
        update=update, update_weight=weight)

  if client_work.client_outputs:

    @tff.tensorflow.computation(inner_result_type.client_outputs.member,
                                result_type)
    def attack_outputs(outputs, result):
      outputs = collections.OrderedDict(outputs)
      outputs['weight'] = result.update_weight
      return outputs

  @tff.federated_computation(state_type, weights_type,
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, data):
    inner = client_work.next(state, weights, getattr(data, EXAMPLES_KEY))
    result = tff.federated_map(attack_result,
                               (inner.result, getattr(data, ATTACK_KEY)))
    if not client_work.client_outputs:
      return tff.templates.MeasuredProcessOutput(
          inner.state, result, inner.measurements)
    return client_work_lib.ClientWorkOutput(
        inner.state, result, inner.measurements,
        tff.federated_map(attack_outputs, (inner.client_outputs, result)))

  return client_work_lib.WeightedClientWorkProcess(
      client_work.initialize,
      next_fn,
      get_hparams_fn=client_work.get_hparams,
      set_hparams_fn=client_work.set_hparams,
  )


def build_defence(
    defence: str, *, max_share: Optional[float] = None,
) -> tff.aggregators.WeightedAggregationFactory:
  """The model aggregator of a defence (`DEFENCES`).

  *   'none': `tff.aggregators.MeanFactory()`, the weighted mean;
  *   'cap': `aggregators.WeightShareCapFactory(max_share)`, no client's
      normalised weight above `max_share`;
  *   'robust': `tff.learning.robust_aggregator(zeroing=True, clipping=True,
      weighted=True)`, adaptive zeroing and L2 clipping of each update;
  *   'both': the cap outermost (it decides the weights), the robust
      aggregator inside it (it bounds the updates);
  *   'trimmed': `aggregators.TrimmedMeanFactory(TRIM_FRACTION)`, the
      coordinate-wise trimmed weighted mean;
  *   'cap_trimmed': the cap outermost, the trimmed mean inside it.

  Args:
    defence: One of `DEFENCES`.
    max_share: The cap, for the `CAPPED_DEFENCES` (e.g. 2/N).

  Returns:
    A `tff.aggregators.WeightedAggregationFactory`.
  """
  if defence not in DEFENCES:
    raise ValueError(f'Unknown defence {defence!r}; expected one of '
                     f'{list(DEFENCES)}.')
  if defence in CAPPED_DEFENCES and not (
      max_share is not None and 0.0 < max_share <= 1.0):
    raise ValueError(f'defence={defence!r} needs max_share in (0, 1], got '
                     f'{max_share!r}.')

  def robust():
    return tff.learning.robust_aggregator(
        zeroing=True, clipping=True, weighted=True)

  inner = {
      'none': tff.aggregators.MeanFactory,
      'cap': tff.aggregators.MeanFactory,
      'robust': robust,
      'both': robust,
      'trimmed': lambda: trimmed_mean.TrimmedMeanFactory(TRIM_FRACTION),
      'cap_trimmed': lambda: trimmed_mean.TrimmedMeanFactory(TRIM_FRACTION),
  }[defence]()
  if defence in CAPPED_DEFENCES:
    return weight_cap.WeightShareCapFactory(max_share, inner=inner)
  return inner


def build_attacked_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    weighting: Union[str, weighting_lib.Weighting],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: tff.aggregators.WeightedAggregationFactory,
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
    with_client_config: bool = False,
    client_outputs: bool = False,
) -> tff.learning.templates.LearningProcess:
  """FedAvg in which clients may attack (`build_attacked_client_work`).

  Composed by `algorithms.fl_process.compose_learning_process` (TFF's
  composer, keeping the per-client outputs) from `build_broadcast_process`,
  the attacked client work, `model_aggregator` and
  `build_apply_optimizer_finalizer`. Its `next` is `(<S@SERVER,
  {<examples=D,attack=A>}@CLIENTS> -> <state=S@SERVER, metrics=M@SERVER>)`,
  with D and M those of `algorithms.build_fl_process(model_fn,
  algorithm='fedavg', ...)` and A `<update_scale=float32,
  weight_scale=float32>`; with every client honest (A = (1, 1)) it computes
  the same round. With `client_outputs=True`, an `algorithms.FLProcess`
  whose `next` also returns each client's statistics,
  `client_outputs={C}@CLIENTS` with C as in `build_fl_process` and `weight`
  the weight the client sent.

  Args:
    model_fn: No-arg callable returning a `tff.learning.models.VariableModel`.
    weighting: 'num_examples', 'uniform', 'loss_reduction' or 'lorar'.
    client_optimizer_fn: The client optimizer.
    model_aggregator: The defence (`build_defence`).
    server_optimizer_fn: The server optimizer; FedAvg's SGD at 1.0 if None.
    with_client_config: Whether `examples` carry a per-client learning rate
      and epochs (`templates.with_client_config`).
    client_outputs: Whether `next` also returns each client's statistics
      (the benchmark reads the weights sent from them).

  Returns:
    A `tff.learning.templates.LearningProcess`; with `client_outputs`, an
    `algorithms.FLProcess`.
  """
  weighting = weighting_lib.parse_option(
      weighting, weighting_lib.Weighting, 'weighting')
  if not isinstance(model_aggregator,
                    tff.aggregators.WeightedAggregationFactory):
    raise TypeError('model_aggregator must be a '
                    'tff.aggregators.WeightedAggregationFactory, got '
                    f'{type(model_aggregator)}.')
  if server_optimizer_fn is None:
    server_optimizer_fn = fl_process_lib.default_server_optimizer(
        fl_process_lib.Algorithm.FEDAVG)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  model_weights_type = initial_model_weights_fn.type_signature.result
  distributor = tff.learning.templates.build_broadcast_process(
      model_weights_type)
  client_work = build_attacked_client_work(
      client_work_lib.build_weighted_client_work(
          model_fn, optimizer=client_optimizer_fn, weighting=weighting,
          with_client_config=with_client_config,
          client_outputs=client_outputs),
      weighting)
  aggregator = model_aggregator.create(
      model_weights_type.trainable, tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, model_weights_type)
  return fl_process_lib.compose_learning_process(
      initial_model_weights_fn, distributor, client_work, aggregator,
      finalizer)
