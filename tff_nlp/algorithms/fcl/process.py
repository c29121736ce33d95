"""`build_fcl_process`: the computations of a federated continual-learning
method (see the `fcl` package docstring)."""

import collections
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.aggregators import delta_aggregation
from tff_nlp.algorithms.fcl import common
from tff_nlp.algorithms.fcl import core
from tff_nlp.algorithms.fcl import rounds
from tff_nlp.algorithms.fcl import task_start
from tff_nlp.models import fcl_cnn


def build_fcl_process(
    config: core.FclConfig, spec: fcl_cnn.FclCnnSpec, *,
    model_aggregator: Optional[
        tff.aggregators.WeightedAggregationFactory] = None,
    initial_embedding: Optional[np.ndarray] = None,
) -> core.FclProcess:
  """Builds the computations of `config.method` for `spec`'s model.

  With a `model_aggregator` (federated methods; 'local' ignores it) each
  client sends the deltas of its shared weights from the broadcast ones,
  g - w_k, weighted by its training-set size (capped with
  `config.max_weight_share`), through the factory's process, and the server
  sets g - D for its mean D (`delta_aggregation`: deltas, because clipping,
  zeroing and DP noise act on updates, not on weights; with
  `tff.aggregators.MeanFactory()` this is the plain weighted average). The
  server state `ServerState` is the same type as without one but for its
  `aggregator` field (`()` without one): `<first_task=A0, later_tasks=A1>`,
  the states of the factory's processes for task 0's shared weights (with
  the embedding) and for later tasks', each carried between the rounds of
  its phase. The rounds' metrics then end with `aggregator=Am` (the
  measurements of the phase's process), and with `config.max_weight_share` with
  `weight_cap=<max_share_before=float32, max_share_after=float32,
  num_capped=int32, cap_infeasible=int32>`. E.g. `next`:
  `<S@SERVER, {D}@CLIENTS, {C}@CLIENTS> -> <state=S@SERVER,
  client_states={C}@CLIENTS, metrics=<..., aggregator=Am1>@SERVER>`.

  Args:
    config: The method and its hyperparameters.
    spec: The model, from `model_spec(config, ...)`.
    model_aggregator: A `tff.aggregators.WeightedAggregationFactory` for the
      deltas of the shared weights (e.g.
      `tff.learning.robust_aggregator(weighted=True)`); None: the plain
      weighted average.
    initial_embedding: If set, the word embedding's initial value,
      float32 [spec.vocab_size, spec.embedding_dim] (e.g. pre-trained
      vectors, `word_vectors.embedding_table`; with
      `config.train_embedding=False` it stays so); None: the model's seeded
      initialisation.

  Returns:
    An `FclProcess`; the round computations take each client's training
    data as a dataset of `(token_ids int32 [B, L], labels int32 [B])`
    batches (`batch_spec`).

  Raises:
    ValueError: If `spec` is not the model of `config`'s method.
    TypeError: If `model_aggregator` is not a weighted aggregation factory.
  """
  if model_aggregator is not None:
    delta_aggregation.check_factory(model_aggregator)
  if (spec.architecture, spec.kb_size, spec.num_tasks) != (
      config.architecture, config.kb_size, config.tasks_per_client):
    raise ValueError(
        f'spec (architecture {spec.architecture!r}, kb_size {spec.kb_size}, '
        f'num_tasks {spec.num_tasks}) is not the model of method '
        f'{config.method!r} (architecture {config.architecture!r}, kb_size '
        f'{config.kb_size}, num_tasks {config.tasks_per_client}); build it '
        'with model_spec(config, ...).')
  num_clients, num_tasks = config.num_clients, config.tasks_per_client
  num_slots = config.num_slots
  optimizer = tff.learning.optimizers.build_adam(config.learning_rate)
  trainable = common.trainable_keys(spec)
  shared = fcl_cnn.shared_keys(spec)
  adaptive = fcl_cnn.adaptive_keys(spec)
  kb = fcl_cnn.kb_keys(spec)
  attention = fcl_cnn.attention_keys(spec)
  widths = spec.filter_widths
  sit_rows = config.sit_max_vectors if config.uses_sit else 1
  sit_dim = spec.embedding_dim if config.uses_sit else 1
  kb_size = config.kb_size

  def new_model():
    return fcl_cnn.FclTextCnn(spec)

  with tf.Graph().as_default():
    shapes = {k: tuple(v.shape) for k, v in new_model().weight_dict().items()}
  bank_shapes = [shapes[f'conv{w}/base'] for w in widths]
  adaptive_bytes = (sum(common.num_bytes(s) for s in bank_shapes) if adaptive
                    else 0)
  embedding_bytes = common.num_bytes(shapes['embedding'])
  if initial_embedding is not None:
    initial_embedding = np.asarray(initial_embedding, np.float32)
    if initial_embedding.shape != shapes['embedding']:
      raise ValueError(
          f'initial_embedding has shape {initial_embedding.shape}; the '
          f'model\'s embedding is {shapes["embedding"]} (vocab_size, '
          'embedding_dim).')
    if not np.all(np.isfinite(initial_embedding)):
      raise ValueError('initial_embedding holds non-finite values.')

  # ---- initial values ----------------------------------------------------

  @tff.tensorflow.computation
  def initial_server_state():
    weights = dict(new_model().weight_dict())
    if initial_embedding is not None:
      weights['embedding'] = tf.constant(initial_embedding)
    return core.ServerState(
        shared=collections.OrderedDict(
            (k, tf.identity(weights[k])) for k in shared),
        adaptive_store=[tf.zeros((num_slots,) + s) for s in bank_shapes]
        if adaptive else [],
        stored=tf.zeros([num_slots], tf.bool),
        representations=tf.zeros([num_slots, sit_rows, sit_dim]),
        representation_counts=tf.zeros([num_slots], tf.int32),
        task=tf.constant(-1, tf.int32),
        round_num=tf.constant(0, tf.int32),
        aggregator=())

  base_type = initial_server_state.type_signature.result
  shared_type = base_type.shared
  aggregators = None
  if model_aggregator is not None and config.federated:
    aggregators = collections.OrderedDict(
        (phase, delta_aggregation.DeltaAggregator(
            model_aggregator, rounds.sent_shared_type(
                config, shared_type,
                train_embedding=(phase == 'first_task'
                                 and config.train_embedding))))
        for phase in core.AGGREGATOR_PHASES)

  @tff.federated_computation
  def initialize():
    state = tff.federated_eval(initial_server_state, tff.SERVER)
    if aggregators is None:
      return state
    aggregator_state = tff.federated_zip(collections.OrderedDict(
        (phase, aggregator.initialize())
        for phase, aggregator in aggregators.items()))

    @tff.tensorflow.computation(base_type,
                                aggregator_state.type_signature.member)
    def with_aggregator(state, aggregator_state):
      return state._replace(aggregator=aggregator_state)

    return tff.federated_map(with_aggregator, (state, aggregator_state))

  server_type = initialize.type_signature.result.member

  @tff.tensorflow.computation(server_type, np.int32)
  def initial_client_state(server_state, client_id):
    weights = collections.OrderedDict(
        (k, tf.identity(server_state.shared[k]) if k in shared
         else tf.identity(v))
        for k, v in new_model().weight_dict().items())
    snapshots = ([tf.zeros((num_tasks,) + s) for s in bank_shapes]
                 if spec.decomposed else [])
    return core.ClientState(
        client_id=client_id, weights=weights, snapshots=snapshots,
        optimizer=common.initial_optimizer_state(optimizer, weights, trainable),
        task=tf.constant(-1, tf.int32))

  client_type = initial_client_state.type_signature.result
  ctx = common.BuildContext(
      config=config, spec=spec, optimizer=optimizer, trainable=trainable,
      shared=shared, adaptive=adaptive, kb=kb, attention=attention,
      widths=widths, sit_rows=sit_rows, sit_dim=sit_dim, kb_size=kb_size,
      num_clients=num_clients, num_tasks=num_tasks, num_slots=num_slots,
      new_model=new_model, shapes=shapes, bank_shapes=bank_shapes,
      adaptive_bytes=adaptive_bytes, embedding_bytes=embedding_bytes,
      server_type=server_type, shared_type=shared_type,
      client_type=client_type, aggregators=aggregators)

  next_round = rounds.build_round(ctx, train_embedding=False)
  # With a frozen embedding the rounds of task 0 are the same computation;
  # building it once halves the tracing cost of that configuration.
  first_task_round = (rounds.build_round(ctx, train_embedding=True)
                      if config.train_embedding else next_round)
  return core.FclProcess(
      config=config, spec=spec, initialize=initialize,
      initial_client_state=initial_client_state,
      start_task=task_start.build_start_task(ctx),
      next_first_task=first_task_round, next=next_round)

