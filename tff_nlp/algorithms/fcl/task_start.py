"""`start_task` of an `FclProcess`: knowledge bases and task starts.

See the `fcl` package docstring for what it does and its type signature.
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


def build_start_task(ctx: common.BuildContext) -> tff.Computation:
  """The `start_task` computation of the process `ctx` describes."""
  config, spec, optimizer = ctx.config, ctx.spec, ctx.optimizer
  trainable, adaptive, kb = ctx.trainable, ctx.adaptive, ctx.kb
  attention, widths, sit_rows = ctx.attention, ctx.widths, ctx.sit_rows
  sit_dim, kb_size, num_clients = ctx.sit_dim, ctx.kb_size, ctx.num_clients
  num_tasks, num_slots = ctx.num_tasks, ctx.num_slots
  adaptive_bytes, embedding_bytes = ctx.adaptive_bytes, ctx.embedding_bytes
  server_type, shared_type = ctx.server_type, ctx.shared_type
  client_type = ctx.client_type

  start_input_type = tff.StructWithPythonType(
      [(core.TASK, np.int32),
       (core.REPRESENTATIONS, tff.TensorType(
           np.float32, [core.MAX_NEW_REPRESENTATIONS, sit_rows, sit_dim])),
       (core.REPRESENTATION_COUNTS, tff.TensorType(
           np.int32, [core.MAX_NEW_REPRESENTATIONS])),
       (core.REPRESENTATION_TASKS, tff.TensorType(
           np.int32, [core.MAX_NEW_REPRESENTATIONS]))],
      collections.OrderedDict)

  @tff.tensorflow.computation(server_type)
  def next_task(state):
    return state._replace(task=state.task + 1)

  @tff.tensorflow.computation(server_type)
  def embedding_of(state):
    return state.shared['embedding']

  @tff.tensorflow.computation(client_type, start_input_type)
  def representation_upload(client, inputs):
    counts = inputs[core.REPRESENTATION_COUNTS]
    return collections.OrderedDict(
        slots=client.client_id * num_tasks + inputs[core.REPRESENTATION_TASKS],
        sent=counts > 0,
        values=collections.OrderedDict(vectors=inputs[core.REPRESENTATIONS],
                                       counts=counts))

  rep_aggregation = common.slot_aggregation(
      representation_upload.type_signature.result, num_slots)

  @tff.tensorflow.computation(client_type, start_input_type)
  def no_selection(client, inputs):
    del client, inputs
    return collections.OrderedDict(
        keys=tf.zeros([0], tf.int32), alphas=tf.zeros([0]),
        valid=tf.zeros([0], tf.bool))

  if kb and not config.uses_sit:
    @tff.tensorflow.computation(client_type, start_input_type)
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
    @tff.tensorflow.computation(server_type, rep_aggregation[0].type_signature
                                .result)
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

    @tff.tensorflow.computation(client_type)
    def own_key(client):
      return tf.reshape(client.client_id, [1])

    @tff.tensorflow.computation(tff.SequenceType(
        selection_row.type_signature.result))
    def only_row(rows):
      return collections.OrderedDict(
          zip(core.SELECTION_KEYS, rows.get_single_element()))

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

  def begin_task_body(client, embedding, kb_values, selection, inputs):
    task = inputs[core.TASK]
    weights = collections.OrderedDict(client.weights)
    if embedding is not None:
      weights['embedding'] = embedding
    snapshots = list(client.snapshots)
    if spec.decomposed:
      snapshots = fcl_cnn.local_kernels(weights, spec)
      for key, width in zip(adaptive, widths):
        weights[key] = common.set_task_slice(
            weights[key], task,
            weights[f'conv{width}/base'] / core.ADAPTIVE_INIT_DIVISOR)
    if kb:
      values = kb_values.batch(kb_size).get_single_element()
      valid = tf.cast(selection['valid'], tf.float32)
      for key, value in zip(kb, values):
        # `batch` leaves the KB's first dimension unknown; the state's is K.
        weights[key] = tf.ensure_shape(value * valid[:, None, None, None],
                                       client.weights[key].shape)
      if config.uses_sit:
        for key in attention:
          weights[key] = common.set_task_slice(
              weights[key], task,
              tf.where(selection['valid'], selection['alphas'],
                       weights[key][task]))
    return core.ClientState(
        client_id=client.client_id, weights=weights, snapshots=snapshots,
        optimizer=common.initial_optimizer_state(optimizer, weights, trainable),
        task=task)

  embedding_type = shared_type['embedding']
  if kb:
    @tff.tensorflow.computation(client_type, embedding_type, kb_sequence_type,
                                selection_type, start_input_type)
    def begin_task(client, embedding, kb_values, selection, inputs):
      return begin_task_body(client, embedding, kb_values, selection, inputs)
  elif config.federated:
    @tff.tensorflow.computation(client_type, embedding_type, start_input_type)
    def begin_task(client, embedding, inputs):
      return begin_task_body(client, embedding, None, None, inputs)
  else:
    @tff.tensorflow.computation(client_type, start_input_type)
    def begin_task(client, inputs):
      return begin_task_body(client, None, None, None, inputs)

  @tff.tensorflow.computation(selection_type,
                              representation_upload.type_signature.result)
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

  @tff.federated_computation(
      tff.FederatedType(server_type, tff.SERVER),
      tff.FederatedType(start_input_type, tff.CLIENTS),
      tff.FederatedType(client_type, tff.CLIENTS))
  def start_task(state, inputs, client_states):
    state = tff.federated_map(next_task, state)
    uploads = tff.federated_map(representation_upload,
                                (client_states, inputs))
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
    if kb:
      kb_values = tff.federated_select(
          tff.federated_map(keys_of, selection),
          tff.federated_value(np.int32(num_slots - 1), tff.SERVER),
          tff.federated_map(adaptive_store_of, state), select_adaptive)
      embedding = tff.federated_broadcast(
          tff.federated_map(embedding_of, state))
      new_clients = tff.federated_map(
          begin_task,
          (client_states, embedding, kb_values, selection, inputs))
    elif config.federated:
      embedding = tff.federated_broadcast(
          tff.federated_map(embedding_of, state))
      new_clients = tff.federated_map(begin_task,
                                      (client_states, embedding, inputs))
    else:
      new_clients = tff.federated_map(begin_task, (client_states, inputs))
    stats = tff.federated_sum(
        tff.federated_map(start_stats, (selection, uploads)))
    return stateful_clients.RoundOutput(
        state=state, client_states=new_clients,
        metrics=tff.federated_map(start_metrics, stats))

  return start_task

