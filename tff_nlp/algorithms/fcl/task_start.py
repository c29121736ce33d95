"""`start_task` of an `FclProcess`: knowledge bases and task starts.

See the `fcl` package docstring for what it does and its type signature.
`build_start_task` composes its parts, each built by its own function:
the clients' task representations (`build_representation_upload`), the
knowledge-base selection (`build_selection`: SIT's top-K, FedWeIT's foreign
slots or none), the clients' task start (`build_begin_task`: the embedding
and the KB they receive) and the metrics (`build_start_metrics`).
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import sit as sit_lib
from tff_nlp.templates import stateful_clients
from tff_nlp.algorithms.fcl import common
from tff_nlp.algorithms.fcl import core
from tff_nlp.models import fcl_cnn


def start_input_type(ctx: common.BuildContext) -> tff.Type:
  """The type of a client's input to `start_task` (`task_start_input`)."""
  return tff.StructWithPythonType(
      [(core.TASK, np.int32),
       (core.REPRESENTATIONS, tff.TensorType(
           np.float32,
           [core.MAX_NEW_REPRESENTATIONS, ctx.sit_rows, ctx.sit_dim])),
       (core.REPRESENTATION_COUNTS, tff.TensorType(
           np.int32, [core.MAX_NEW_REPRESENTATIONS])),
       (core.REPRESENTATION_TASKS, tff.TensorType(
           np.int32, [core.MAX_NEW_REPRESENTATIONS]))],
      collections.OrderedDict)


def build_representation_upload(ctx: common.BuildContext,
                                input_type: tff.Type) -> tff.Computation:
  """`<C, TaskStart> -> <slots, sent, values=<vectors, counts>>`: what a
  client sends of its task representations (SIT; else zero rows)."""
  num_tasks = ctx.num_tasks

  @tff.tensorflow.computation(ctx.client_type, input_type)
  def representation_upload(client, inputs):
    counts = inputs[core.REPRESENTATION_COUNTS]
    return collections.OrderedDict(
        slots=client.client_id * num_tasks + inputs[core.REPRESENTATION_TASKS],
        sent=counts > 0,
        values=collections.OrderedDict(vectors=inputs[core.REPRESENTATIONS],
                                       counts=counts))

  return representation_upload


def _build_sit_selection(ctx: common.BuildContext, received_type: tff.Type):
  """SIT's server side: stores the new representations and ranks the A's.

  Returns:
    `(sit_selection, selection_row, own_key, only_row)`: the server's
    `<S, received> -> <state=S, selection=<keys, alphas, valid> [C, K]>`
    and the pieces that `tff.federated_select` each client's own row.
  """
  config, num_clients, num_tasks = ctx.config, ctx.num_clients, ctx.num_tasks
  kb_size = ctx.kb_size

  @tff.tensorflow.computation(ctx.server_type, received_type)
  def sit_selection(state, received):
    """Stores the new representations; top-K slots for every client."""
    new = received['received']
    vectors = tf.where(new[:, None, None], received['values']['vectors'],
                       state.representations)
    counts = tf.where(new, received['values']['counts'],
                      state.representation_counts)
    rows = []
    for client in range(num_clients):
      query = client * num_tasks + state.task
      scores = sit_lib.overlap_score(
          vectors[query], counts[query], vectors, counts,
          method=config.sit_score, threshold=config.sit_threshold)
      candidates = sit_lib.candidate_mask(
          num_clients, num_tasks, client, state.task, state.stored,
          include_own=config.kb_include_own)
      rows.append(sit_lib.select_top_k(scores, candidates, kb_size))
    selection = collections.OrderedDict(
        keys=tf.stack([r[0] for r in rows]),
        alphas=tf.stack([r[1] for r in rows]),
        valid=tf.stack([r[2] for r in rows]))
    return collections.OrderedDict(
        state=state._replace(representations=vectors,
                             representation_counts=counts),
        selection=selection)

  selections_type = sit_selection.type_signature.result['selection']

  @tff.tensorflow.computation(selections_type, np.int32)
  def selection_row(selections, client_id):
    # A tuple: a sequence of OrderedDicts would reach the client with its
    # components in another (sorted) order.
    return tuple(selections[k][client_id] for k in core.SELECTION_KEYS)

  @tff.tensorflow.computation(ctx.client_type)
  def own_key(client):
    return tf.reshape(client.client_id, [1])

  @tff.tensorflow.computation(tff.SequenceType(
      selection_row.type_signature.result))
  def only_row(rows):
    return collections.OrderedDict(
        zip(core.SELECTION_KEYS, rows.get_single_element()))

  return sit_selection, selection_row, own_key, only_row


def build_selection(ctx: common.BuildContext, input_type: tff.Type,
                    upload_type: tff.Type):
  """The knowledge-base selection of a task start.

  Args:
    ctx: The process's build context.
    input_type: `start_input_type(ctx)`.
    upload_type: The type of `build_representation_upload`'s result.

  Returns:
    `(select, selection_type)`: `select`, a Python function called in a
    federated computation, of `(state S@SERVER, inputs@CLIENTS,
    client_states@CLIENTS, uploads@CLIENTS)` to `(state S@SERVER,
    selection@CLIENTS)` (SIT stores the representations in the state), and
    the type of a client's selection, `<keys, alphas, valid>` [K].
  """
  config, kb, kb_size = ctx.config, ctx.kb, ctx.kb_size
  num_clients, num_tasks = ctx.num_clients, ctx.num_tasks
  client_type = ctx.client_type
  rep_aggregation = common.slot_aggregation(upload_type, ctx.num_slots)

  @tff.tensorflow.computation(client_type, input_type)
  def no_selection(client, inputs):
    del client, inputs
    return collections.OrderedDict(
        keys=tf.zeros([0], tf.int32), alphas=tf.zeros([0]),
        valid=tf.zeros([0], tf.bool))

  if kb and not config.uses_sit:
    @tff.tensorflow.computation(client_type, input_type)
    def foreign_selection(client, inputs):
      """FedWeIT / FedSeIT: the other clients' slots of task t − 1."""
      task = inputs[core.TASK]
      if config.kb_include_own:
        clients = tf.range(num_clients)
      else:
        others = tf.range(num_clients - 1)
        clients = tf.where(others < client.client_id, others, others + 1)
      valid = tf.fill([kb_size], task > 0)
      keys = tf.where(valid, clients * num_tasks + task - 1,
                      tf.zeros([kb_size], tf.int32))
      return collections.OrderedDict(keys=keys, alphas=tf.zeros([kb_size]),
                                     valid=valid)

    selection_type = foreign_selection.type_signature.result
  elif kb:
    selection_type = tff.StructWithPythonType([
        ('keys', tff.TensorType(np.int32, [kb_size])),
        ('alphas', tff.TensorType(np.float32, [kb_size])),
        ('valid', tff.TensorType(np.bool_, [kb_size]))],
        collections.OrderedDict)
  else:
    selection_type = no_selection.type_signature.result

  if config.uses_sit:
    sit_selection, selection_row, own_key, only_row = _build_sit_selection(
        ctx, rep_aggregation[0].type_signature.result)

  def select(state, inputs, client_states, uploads):
    if config.uses_sit:
      received = tff.federated_aggregate(uploads, *[
          c() if i == 0 else c for i, c in enumerate(rep_aggregation)])
      result = tff.federated_map(sit_selection, (state, received))
      state = result.state
      # Each client receives only its own row of the selection table.
      selection = tff.federated_map(only_row, tff.federated_select(
          tff.federated_map(own_key, client_states),
          tff.federated_value(np.int32(num_clients - 1), tff.SERVER),
          result.selection, selection_row))
    elif kb:
      selection = tff.federated_map(foreign_selection,
                                    (client_states, inputs))
    else:
      selection = tff.federated_map(no_selection, (client_states, inputs))
    return state, selection

  return select, selection_type


def _begin_task_body(ctx, client, embedding, kb_values, selection, inputs):
  """A client's new state at a task start (see the package docstring)."""
  config, spec, kb = ctx.config, ctx.spec, ctx.kb
  task = inputs[core.TASK]
  weights = collections.OrderedDict(client.weights)
  if embedding is not None:
    weights['embedding'] = embedding
  snapshots = list(client.snapshots)
  if spec.decomposed:
    snapshots = fcl_cnn.local_kernels(weights, spec)
    for key, width in zip(ctx.adaptive, ctx.widths):
      weights[key] = common.set_task_slice(
          weights[key], task,
          weights[f'conv{width}/base'] / core.ADAPTIVE_INIT_DIVISOR)
  if kb:
    values = kb_values.batch(ctx.kb_size).get_single_element()
    valid = tf.cast(selection['valid'], tf.float32)
    for key, value in zip(kb, values):
      # `batch` leaves the KB's first dimension unknown; the state's is K.
      weights[key] = tf.ensure_shape(value * valid[:, None, None, None],
                                     client.weights[key].shape)
    if config.uses_sit:
      for key in ctx.attention:
        weights[key] = common.set_task_slice(
            weights[key], task,
            tf.where(selection['valid'], selection['alphas'],
                     weights[key][task]))
  return core.ClientState(
      client_id=client.client_id, weights=weights, snapshots=snapshots,
      optimizer=common.initial_optimizer_state(ctx.optimizer, weights,
                                               ctx.trainable),
      task=task)


def build_begin_task(ctx: common.BuildContext, input_type: tff.Type,
                     selection_type: tff.Type):
  """The clients' task start: the embedding and KB they receive.

  Returns:
    A Python function, called in a federated computation, of `(state
    S@SERVER, client_states@CLIENTS, selection@CLIENTS, inputs@CLIENTS)` to
    the clients' new states: the server broadcasts the embedding (federated
    methods) and `tff.federated_select`s each client's KB entries of the A
    store; each client runs `_begin_task_body`.
  """
  config, adaptive, kb = ctx.config, ctx.adaptive, ctx.kb
  server_type, client_type = ctx.server_type, ctx.client_type
  num_slots = ctx.num_slots

  @tff.tensorflow.computation(server_type)
  def embedding_of(state):
    return state.shared['embedding']

  @tff.tensorflow.computation(selection_type)
  def keys_of(selection):
    return selection['keys']

  @tff.tensorflow.computation(server_type)
  def adaptive_store_of(state):
    return state.adaptive_store

  if adaptive:
    @tff.tensorflow.computation(server_type.adaptive_store, np.int32)
    def select_adaptive(store, key):
      return [bank[key] for bank in store]

    kb_sequence_type = tff.SequenceType(
        select_adaptive.type_signature.result)
  else:
    kb_sequence_type = None

  embedding_type = ctx.shared_type['embedding']
  if kb:
    @tff.tensorflow.computation(client_type, embedding_type, kb_sequence_type,
                                selection_type, input_type)
    def begin_task(client, embedding, kb_values, selection, inputs):
      return _begin_task_body(ctx, client, embedding, kb_values, selection,
                              inputs)
  elif config.federated:
    @tff.tensorflow.computation(client_type, embedding_type, input_type)
    def begin_task(client, embedding, inputs):
      return _begin_task_body(ctx, client, embedding, None, None, inputs)
  else:
    @tff.tensorflow.computation(client_type, input_type)
    def begin_task(client, inputs):
      return _begin_task_body(ctx, client, None, None, None, inputs)

  def begin(state, client_states, selection, inputs):
    if kb:
      kb_values = tff.federated_select(
          tff.federated_map(keys_of, selection),
          tff.federated_value(np.int32(num_slots - 1), tff.SERVER),
          tff.federated_map(adaptive_store_of, state), select_adaptive)
      embedding = tff.federated_broadcast(
          tff.federated_map(embedding_of, state))
      return tff.federated_map(
          begin_task,
          (client_states, embedding, kb_values, selection, inputs))
    if config.federated:
      embedding = tff.federated_broadcast(
          tff.federated_map(embedding_of, state))
      return tff.federated_map(begin_task,
                               (client_states, embedding, inputs))
    return tff.federated_map(begin_task, (client_states, inputs))

  return begin


def build_start_metrics(ctx: common.BuildContext, selection_type: tff.Type,
                        upload_type: tff.Type):
  """`(start_stats, start_metrics)`: a client's statistics of a task start
  (`<selection, upload> -> stats`) and the metrics of their sum."""
  config, sit_dim = ctx.config, ctx.sit_dim
  adaptive_bytes, embedding_bytes = ctx.adaptive_bytes, ctx.embedding_bytes

  @tff.tensorflow.computation(selection_type, upload_type)
  def start_stats(selection, upload):
    num_kb = tf.reduce_sum(tf.cast(selection['valid'], tf.int64))
    num_vectors = tf.reduce_sum(tf.cast(upload['values']['counts'],
                                        tf.int64))
    down = collections.OrderedDict(
        embedding=tf.constant(embedding_bytes if config.federated else 0,
                              tf.int64),
        knowledge_base=num_kb * adaptive_bytes)
    up = collections.OrderedDict(
        representations=(num_vectors * sit_dim * common.BYTES_PER_FLOAT
                         if config.uses_sit else tf.constant(0, tf.int64)))
    return collections.OrderedDict(
        num_clients=tf.constant(1, tf.int64),
        bytes_down=tf.add_n(list(down.values())),
        bytes_up=tf.add_n(list(up.values())),
        bytes_down_by_part=down, bytes_up_by_part=up,
        kb_entries=num_kb)

  @tff.tensorflow.computation(start_stats.type_signature.result)
  def start_metrics(stats):
    n = tf.cast(tf.maximum(stats['num_clients'], 1), tf.float64)
    return collections.OrderedDict(
        bytes_down_per_client=tf.cast(stats['bytes_down'], tf.float64) / n,
        bytes_up_per_client=tf.cast(stats['bytes_up'], tf.float64) / n,
        kb_entries_per_client=tf.cast(stats['kb_entries'], tf.float64) / n,
        bytes_down_by_part_per_client=common.per_client(
            stats['bytes_down_by_part'], n),
        bytes_up_by_part_per_client=common.per_client(stats['bytes_up_by_part'],
                                                      n))

  return start_stats, start_metrics


def build_start_task(ctx: common.BuildContext) -> tff.Computation:
  """The `start_task` computation of the process `ctx` describes."""
  server_type, client_type = ctx.server_type, ctx.client_type
  input_type = start_input_type(ctx)
  representation_upload = build_representation_upload(ctx, input_type)
  upload_type = representation_upload.type_signature.result
  select, selection_type = build_selection(ctx, input_type, upload_type)
  begin = build_begin_task(ctx, input_type, selection_type)
  start_stats, start_metrics = build_start_metrics(ctx, selection_type,
                                                   upload_type)

  @tff.tensorflow.computation(server_type)
  def next_task(state):
    return state._replace(task=state.task + 1)

  @tff.federated_computation(
      tff.FederatedType(server_type, tff.SERVER),
      tff.FederatedType(input_type, tff.CLIENTS),
      tff.FederatedType(client_type, tff.CLIENTS))
  def start_task(state, inputs, client_states):
    state = tff.federated_map(next_task, state)
    uploads = tff.federated_map(representation_upload,
                                (client_states, inputs))
    state, selection = select(state, inputs, client_states, uploads)
    new_clients = begin(state, client_states, selection, inputs)
    stats = tff.federated_sum(
        tff.federated_map(start_stats, (selection, uploads)))
    return stateful_clients.RoundOutput(
        state=state, client_states=new_clients,
        metrics=tff.federated_map(start_metrics, stats))

  return start_task
