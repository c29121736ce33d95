"""The rounds of an `FclProcess`: local training, averaging, the A store.

See the `fcl` package docstring for what a round does and its type
signature. A round is composed of three parts, each built by its own
function, as TFF's learning processes are of client work, aggregator and
finalizer:

*   `build_client_work`: the clients' training (`client_train`), which
    returns each client's new state, its aggregand, its A upload and its
    round statistics;
*   `build_server_update`: the aggregation of the shared weights (a plain
    weighted sum, capped weights or a model aggregator) and of the A's, and
    the server's new state;
*   `build_round_metrics`: the round's metrics from the summed statistics.

`build_round` composes them with the broadcast into the round computation.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.templates import batch_loop
from tff_nlp.aggregators import delta_aggregation
from tff_nlp.templates import optimizers as optimizers_lib
from tff_nlp.templates import stateful_clients
from tff_nlp.aggregators import weight_cap
from tff_nlp.algorithms.fcl import common
from tff_nlp.algorithms.fcl import core
from tff_nlp.models import dropout_seeds
from tff_nlp.models import fcl_cnn


def _round_shared_keys(shared_type, train_embedding):
  keys = tff.structure.name_list(shared_type)
  return tuple(keys) if train_embedding else tuple(
      k for k in keys if k != 'embedding')


def _sent_shared_keys(config, shared_type, train_embedding):
  """The shared weights the clients send (none for 'local')."""
  return (_round_shared_keys(shared_type, train_embedding)
          if config.federated else ())


def _batch_type(spec) -> tff.SequenceType:
  return tff.SequenceType(
      (tff.TensorType(np.int32, [None, spec.max_length]),
       tff.TensorType(np.int32, [None])))


def _round_shared_type(shared_type, train_embedding):
  return tff.StructWithPythonType(
      [(k, shared_type[k])
       for k in _round_shared_keys(shared_type, train_embedding)],
      collections.OrderedDict)


def _build_broadcast_part(ctx, train_embedding) -> tff.Computation:
  """The server's shared weights of the round (S -> round shared)."""
  round_shared = _round_shared_keys(ctx.shared_type, train_embedding)

  @tff.tensorflow.computation(ctx.server_type)
  def broadcast_part(state):
    return collections.OrderedDict((k, state.shared[k])
                                   for k in round_shared)

  return broadcast_part


def sent_shared_type(config, shared_type,
                     train_embedding: bool) -> tff.StructWithPythonType:
  """The type of the shared weights the clients send in a round (the
  rounds of task 0 with `train_embedding`; none for 'local')."""
  keys = _round_shared_keys(shared_type, train_embedding)
  return tff.StructWithPythonType(
      [(k, shared_type[k]) for k in keys if config.federated],
      collections.OrderedDict)


def _client_result(ctx, train_embedding, client, start, stats, trained,
                   optimizer_state):
  """A client's round output after its local training (inside `train`).

  Args:
    ctx: The process's build context.
    train_embedding: Whether the round shares the embedding.
    client: The client's state before the round.
    start: Its weights at the round's start (the broadcast ones in).
    stats: The loop's `num_examples`, `loss_sum` and `finite`.
    trained: Its weights after training.
    optimizer_state: Adam's state after training.

  Returns:
    `<client=C, aggregand=<weighted, weight>, upload=<slots, sent, values>,
    stats=...>`; a rejected client (non-finite, or no examples) keeps its
    state and sends weight 0 and zeros.
  """
  config, adaptive = ctx.config, ctx.adaptive
  sent_shared = _sent_shared_keys(config, ctx.shared_type, train_embedding)
  shared_bytes = sum(common.num_bytes(ctx.shapes[k]) for k in sent_shared)
  adaptive_bytes = ctx.adaptive_bytes
  task = client.task
  finite = tf.logical_and(stats['finite'], tf.reduce_all(
      [tf.reduce_all(tf.math.is_finite(v)) for v in trained.values()]))
  valid = tf.logical_and(finite, stats['num_examples'] > 0.0)
  # A rejected client keeps its state and sends weight 0 and zeros
  # (0·NaN would still poison a weighted sum).
  weights = tf.nest.map_structure(
      lambda new, old: tf.where(valid, new, old), trained, start)
  optimizer_state = tf.nest.map_structure(
      lambda new, old: tf.where(valid, new, old), optimizer_state,
      common.as_loop_state(client.optimizer))
  size = tf.where(valid, stats['num_examples'] / config.local_epochs,
                  0.0)
  aggregand = collections.OrderedDict(
      weighted=collections.OrderedDict(
          (k, size * weights[k]) for k in sent_shared),
      weight=size)
  upload = collections.OrderedDict(
      slots=tf.reshape(client.client_id * ctx.num_tasks + task, [1]),
      sent=tf.reshape(valid, [1]),
      values=[fcl_cnn.prune(weights[k][task], config.sparsity)[None]
              for k in adaptive])
  nonzero = tf.add_n([tf.math.count_nonzero(v, dtype=tf.int64)
                      for v in upload['values']]) if adaptive else (
                          tf.constant(0, tf.int64))
  sent = tf.cast(valid, tf.int64)
  round_stats = collections.OrderedDict(
      num_clients=tf.constant(1, tf.int64),
      num_examples=tf.cast(stats['num_examples'], tf.float64),
      loss_sum=tf.where(valid, tf.cast(stats['loss_sum'], tf.float64),
                        0.0),
      # The examples behind loss_sum (a rejected client's loss is left
      # out of both).
      valid_examples=tf.where(
          valid, tf.cast(stats['num_examples'], tf.float64), 0.0),
      non_finite_clients=tf.cast(tf.logical_not(finite), tf.int64),
      bytes_down=tf.constant(shared_bytes, tf.int64),
      bytes_up=sent * (shared_bytes + adaptive_bytes),
      bytes_up_by_part=collections.OrderedDict(
          shared_weights=sent * shared_bytes,
          adaptive=sent * adaptive_bytes),
      adaptive_nonzero=sent * nonzero)
  new_client = core.ClientState(
      client_id=client.client_id, weights=weights,
      snapshots=client.snapshots, optimizer=optimizer_state, task=task)
  return collections.OrderedDict(
      client=new_client, aggregand=aggregand, upload=upload,
      stats=round_stats)


def build_client_work(ctx: common.BuildContext,
                      train_embedding: bool) -> tff.Computation:
  """The clients' part of a round: `local_epochs` of Adam on their data.

  Args:
    ctx: The process's build context.
    train_embedding: Whether the word embedding is trained and shared.

  Returns:
    `client_train: <C, round shared weights, D> -> <client=C,
    aggregand=<weighted, weight>, upload=<slots, sent, values>, stats>`
    (`_client_result`).
  """
  config, spec, optimizer = ctx.config, ctx.spec, ctx.optimizer
  trainable, new_model = ctx.trainable, ctx.new_model
  round_shared = _round_shared_keys(ctx.shared_type, train_embedding)

  @tf.function
  def train(model, variables, client, start_shared, dataset):
    start = collections.OrderedDict(client.weights)
    start.update(start_shared)
    for key, variable in variables.items():
      variable.assign(start[key])
    train_vars = [variables[k] for k in trainable]
    task = client.task
    frozen = () if train_embedding else ('embedding',)

    # Keys the dropout masks (see `dropout_seeds`): a resumed or repeated
    # run draws the same masks for the same start, task, batch and step.
    round_key = dropout_seeds.fingerprint((start, client.client_id, task))

    def train_on_batch(loop_state, batch):
      stats, carried = loop_state
      token_ids, labels = batch
      # Examples seen so far number the step: batches are never empty.
      step_key = dropout_seeds.fingerprint(
          (round_key, batch, stats['num_examples']))
      with tf.GradientTape() as tape, dropout_seeds.step_seed(step_key):
        logits = model((token_ids, task), training=True)
        cross_entropy = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        loss = cross_entropy + fcl_cnn.regularization(
            model, task, client.snapshots, sparsity=config.sparsity,
            drift=config.drift, weight_decay=config.weight_decay,
            is_first_task=tf.equal(task, 0))
        if config.method == 'fedprox':
          loss += 0.5 * config.proximal_strength * tf.add_n([
              tf.reduce_sum(tf.square(variables[k] - start_shared[k]))
              for k in round_shared])
      # Only the trained variables are sources: a frozen embedding's
      # gradient would cost a backward convolution per bank.
      trained = [v for k, v in zip(trainable, train_vars) if k not in frozen]
      trained_gradients = iter(tape.gradient(loss, trained))
      gradients = []
      for k, v in zip(trainable, train_vars):
        g = None if k in frozen else next(trained_gradients)
        gradients.append(tf.zeros_like(v) if g is None
                         else tf.convert_to_tensor(g))
      new_state, new_values = optimizer.next(
          carried, tuple(tf.identity(v) for v in train_vars),
          tuple(gradients))
      for variable, value in zip(train_vars, new_values):
        variable.assign(value)
      new_state = optimizers_lib.match_dtypes(carried, new_state)
      batch_size = tf.cast(tf.shape(labels)[0], tf.float32)
      stats = collections.OrderedDict(
          num_examples=stats['num_examples'] + batch_size,
          loss_sum=stats['loss_sum'] + cross_entropy * batch_size,
          finite=tf.logical_and(stats['finite'],
                                tf.math.is_finite(loss)))
      return stats, new_state

    initial = (collections.OrderedDict(
        num_examples=tf.constant(0.0), loss_sum=tf.constant(0.0),
        finite=tf.constant(True)), common.as_loop_state(client.optimizer))
    stats, optimizer_state = batch_loop.for_each_batch(
        dataset, initial, train_on_batch)
    trained = collections.OrderedDict(
        (k, tf.identity(v)) for k, v in variables.items())
    return _client_result(ctx, train_embedding, client, start, stats,
                          trained, optimizer_state)

  @tff.tensorflow.computation(
      ctx.client_type, _round_shared_type(ctx.shared_type, train_embedding),
      _batch_type(spec))
  def client_train(client, start_shared, dataset):
    model = new_model()
    variables = model.weight_dict()
    # A tf.function orders the variable reads after the training loop's
    # assignments (automatic control dependencies).
    return train(model, variables, client, start_shared, dataset)

  return client_train


def build_server_update(ctx: common.BuildContext, train_embedding: bool,
                        result_type: tff.Type):
  """The server's part of a round: aggregation and the new server state.

  Args:
    ctx: The process's build context.
    train_embedding: Whether the round shares the embedding (and so uses
      the aggregator of phase 'first_task').
    result_type: The type of `client_train`'s result.

  Returns:
    A Python function, called in a federated computation, of
    `(state S@SERVER, start_shared@CLIENTS, results@CLIENTS)` to
    `(new state S@SERVER, extra metrics)`: the extra metrics an
    OrderedDict of `aggregator` (with a model aggregator) and `weight_cap`
    (with `config.max_weight_share`) SERVER values.
  """
  config, adaptive = ctx.config, ctx.adaptive
  server_type, shared_type = ctx.server_type, ctx.shared_type
  sent_shared = _sent_shared_keys(config, shared_type, train_embedding)
  phase = core.AGGREGATOR_PHASES[0 if train_embedding else 1]
  aggregator = ctx.aggregators[phase] if ctx.aggregators else None
  capped = config.max_weight_share is not None and config.federated
  broadcast_part = _build_broadcast_part(ctx, train_embedding)
  adaptive_aggregation = (common.slot_aggregation(result_type['upload'],
                                                  ctx.num_slots)
                          if adaptive else None)
  store_type = (adaptive_aggregation[0].type_signature.result
                if adaptive else tff.StructType([]))

  def updated_state(state, new_shared, received):
    store, stored = state.adaptive_store, state.stored
    if adaptive:
      got = received['received']
      store = [tf.where(got[:, None, None, None], new, old)
               for new, old in zip(received['values'], store)]
      stored = tf.logical_or(stored, got)
    return state._replace(shared=new_shared, adaptive_store=store,
                          stored=stored, round_num=state.round_num + 1)

  @tff.tensorflow.computation(server_type, result_type['aggregand'],
                              store_type)
  def server_update(state, sums, received):
    new_shared = collections.OrderedDict(state.shared)
    for key in sent_shared:
      new_shared[key] = tf.where(
          sums['weight'] > 0.0,
          tf.math.divide_no_nan(sums['weighted'][key], sums['weight']),
          state.shared[key])
    return updated_state(state, new_shared, received)

  if capped or aggregator is not None:
    sent_type = sent_shared_type(config, shared_type, train_embedding)

    @tff.tensorflow.computation(result_type)
    def sent_values(result):
      # A rejected client's weights are its start (the broadcast ones).
      return (collections.OrderedDict(
          (k, result['client'].weights[k]) for k in sent_shared),
              result['aggregand']['weight'])

    @tff.tensorflow.computation(sent_type, np.float32)
    def reweighted_aggregand(values, weight):
      return collections.OrderedDict(
          weighted=collections.OrderedDict(
              (k, weight * values[k]) for k in sent_shared),
          weight=weight)

  if aggregator is not None:

    @tff.tensorflow.computation(server_type)
    def aggregator_state(state):
      return state.aggregator[phase]

    @tff.tensorflow.computation(
        server_type, sent_type,
        aggregator.process.initialize.type_signature.result.member,
        store_type)
    def server_update_aggregated(state, new_values, new_aggregator,
                                 received):
      new_shared = collections.OrderedDict(state.shared)
      new_shared.update(new_values)
      aggregators = collections.OrderedDict(state.aggregator)
      aggregators[phase] = new_aggregator
      return updated_state(state._replace(aggregator=aggregators),
                           new_shared, received)

  @tff.tensorflow.computation
  def no_store():
    return collections.OrderedDict()

  def update(state, start_shared, results):
    extra_metrics = collections.OrderedDict()
    if capped or aggregator is not None:
      values, weights = tff.federated_map(sent_values, results)
    if capped:
      weights, cap_metrics = weight_cap.cap_client_weights(
          weights, config.max_weight_share)
    if aggregator is None:
      sums = tff.federated_sum(
          tff.federated_map(reweighted_aggregand, (values, weights))
          if capped else results.aggregand)
    else:
      aggregated = aggregator.next(
          tff.federated_map(aggregator_state, state),
          tff.federated_map(broadcast_part, state), start_shared, values,
          weights)
      extra_metrics['aggregator'] = aggregated.measurements
    if capped:
      extra_metrics['weight_cap'] = cap_metrics
    if adaptive:
      zero, accumulate, merge, report = adaptive_aggregation
      received = tff.federated_aggregate(
          results.upload, zero(), accumulate, merge, report)
    else:
      received = tff.federated_eval(no_store, tff.SERVER)
    if aggregator is None:
      new_state = tff.federated_map(server_update, (state, sums, received))
    else:
      new_state = tff.federated_map(
          server_update_aggregated,
          (state, aggregated.result, aggregated.state, received))
    return new_state, extra_metrics

  return update


def build_round_metrics(stats_type: tff.Type) -> tff.Computation:
  """The round's metrics from the clients' summed statistics."""

  @tff.tensorflow.computation(stats_type)
  def round_metrics(stats):
    n = tf.cast(tf.maximum(stats['num_clients'], 1), tf.float64)
    return collections.OrderedDict(
        train_loss=tf.math.divide_no_nan(stats['loss_sum'],
                                         stats['valid_examples']),
        num_examples=stats['num_examples'],
        non_finite_clients=stats['non_finite_clients'],
        bytes_down_per_client=tf.cast(stats['bytes_down'], tf.float64) / n,
        bytes_up_per_client=tf.cast(stats['bytes_up'], tf.float64) / n,
        adaptive_nonzero_per_client=tf.cast(stats['adaptive_nonzero'],
                                            tf.float64) / n,
        # Down, a round sends only the shared weights (bytes_down).
        bytes_up_by_part_per_client=common.per_client(
            stats['bytes_up_by_part'], n))

  return round_metrics


def build_round(ctx: common.BuildContext,
                train_embedding: bool) -> tff.Computation:
  """A round computation of the process `ctx` describes.

  Args:
    ctx: The process's build context.
    train_embedding: Whether the word embedding is trained and shared (the
      first task's rounds, `next_first_task`) or frozen (`next`).

  Returns:
    The round, `<S@SERVER, {D}@CLIENTS, {C}@CLIENTS> ->
    RoundOutput<state=S@SERVER, client_states={C}@CLIENTS, metrics=M@SERVER>`
    (with a model aggregator or a weight cap, see `build_fcl_process`).
  """
  config, server_type, client_type = (ctx.config, ctx.server_type,
                                      ctx.client_type)
  round_shared = _round_shared_keys(ctx.shared_type, train_embedding)
  broadcast_part = _build_broadcast_part(ctx, train_embedding)
  client_train = build_client_work(ctx, train_embedding)
  result_type = client_train.type_signature.result
  server_update = build_server_update(ctx, train_embedding, result_type)
  round_metrics = build_round_metrics(result_type['stats'])

  @tff.tensorflow.computation(client_type)
  def own_part(client):
    return collections.OrderedDict((k, client.weights[k])
                                   for k in round_shared)

  @tff.federated_computation(
      tff.FederatedType(server_type, tff.SERVER),
      tff.FederatedType(_batch_type(ctx.spec), tff.CLIENTS),
      tff.FederatedType(client_type, tff.CLIENTS))
  def next_fn(state, client_data, client_states):
    if config.federated:
      start_shared = tff.federated_broadcast(
          tff.federated_map(broadcast_part, state))
    else:
      start_shared = tff.federated_map(own_part, client_states)
    results = tff.federated_map(
        client_train, (client_states, start_shared, client_data))
    new_state, extra_metrics = server_update(state, start_shared, results)
    metrics = delta_aggregation.with_measurements(
        tff.federated_map(round_metrics, tff.federated_sum(results.stats)),
        extra_metrics)
    return stateful_clients.RoundOutput(
        state=new_state, client_states=results.client, metrics=metrics)

  return next_fn
