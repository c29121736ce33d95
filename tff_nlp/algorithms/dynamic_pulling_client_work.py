"""The client work of dynamic pulling (steps 1-6 of `dynamic_pulling`).

A client starts from the server's tensors it takes and its own private ones,
trains with the library's weighted client work, measures each tensor's
change and sends the tensors its selection rule picks; its new state is its
trained weights and that mask. `dynamic_pulling.build_dynamic_pulling_process`
composes it with the aggregator and finalizer
(`stateful_composer.compose_stateful_clients_process`).
"""

import collections
import math

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import dynamic_pulling_state
from tff_nlp.algorithms import tensor_selection
from tff_nlp.templates import client_work as client_work_lib

UPDATE = 'update'
CLIENT_STATES = 'client_states'
# The per-client outputs this client work adds to the weighted client work's
# (`client_work.WeightedClientWorkProcess`), with `client_outputs`.
SENT = 'sent'
PARAMETERS_PULLED = 'parameters_pulled'
BYTES_PULLED = 'bytes_pulled'

_TRAINING_DATA = dynamic_pulling_state.TRAINING_DATA
_SEED = dynamic_pulling_state.SEED
_DATA_SIZE = dynamic_pulling_state.DATA_SIZE
_ClientState = dynamic_pulling_state.ClientState


def _sizes(tensor_types):
  sizes = [math.prod(t.shape) for t in tensor_types]
  return sizes, [size * np.dtype(t.dtype).itemsize
                 for size, t in zip(sizes, tensor_types)]


def build_client_work(
    selection: tensor_selection.Selection, weights_type,
    weighted_work: client_work_lib.WeightedClientWorkProcess,
) -> tff.templates.MeasuredProcess:
  """Steps 1-6 of `dynamic_pulling`'s docstring, as client work.

  `next`: `(<H@SERVER, M@CLIENTS, {D}@CLIENTS, {C}@CLIENTS> ->
  <state=H@SERVER, result=<client_states=C, update=<trained=M.trainable,
  sent=bool[T], weight=float32>>@CLIENTS, measurements=X@SERVER>)`, H the
  weighted client work's state and X the process's metrics up to
  `weighting` (without `tensors_updated`).

  If `weighted_work` returns per-client outputs (built with
  `client_outputs=True`), so does this one (a
  `client_work.MeasuredProcessWithClientOutputs` whose `next` returns a
  `client_work.ClientWorkOutput`): the weighted work's per-client
  statistics with `weight` the weight the round applied (the client's
  `data_size` when it gives one), plus `sent` (bool[T], the tensors the
  client sent), `parameters_pulled` and `bytes_pulled` (int64, what it
  sent).

  Args:
    selection: The resolved tensor selection.
    weights_type: The model weights' type M.
    weighted_work: The library's weighted client work (`num_examples`
      weighting) that trains the client.

  Returns:
    The client work, a `tff.templates.MeasuredProcess`.
  """
  num_tensors = len(weights_type.trainable)
  groups = tensor_selection.group_indices(selection.tensor_groups)
  sizes, num_bytes = _sizes(weights_type.trainable)
  non_trainable_sizes, non_trainable_bytes = _sizes(
      weights_type.non_trainable)
  keep_private, push = selection.keep_private, selection.push
  work_data_type = weighted_work.next.type_signature.parameter[2]
  result_type = weighted_work.next.type_signature.result.result.member
  measurements_type = (
      weighted_work.next.type_signature.result.measurements.member)
  data_type = tff.StructWithPythonType(
      [(_TRAINING_DATA, work_data_type.member),
       (_SEED, tff.TensorType(np.int64, [2])),
       (_DATA_SIZE, tff.TensorType(np.float32))],
      collections.OrderedDict,
  )

  @tff.tensorflow.computation(weights_type)
  def new_client_state(weights):
    return _ClientState(weights=weights,
                        shared=tf.ones([num_tensors], tf.bool))

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
            math.sqrt(size) if selection.change_norm == 'rms' else 1.0)
        for w, p, size in zip(trained, state.weights.trainable, sizes)
    ])
    mask = tensor_selection.select_tensors(
        norms, seed, mode=selection.mode,
        tensor_groups=selection.tensor_groups,
        exchanged=selection.exchanged, split_by=selection.split_by,
        sizes=sizes)
    weight = tf.where(result.update_weight > 0.0,
                      tf.where(data_size > 0.0, data_size,
                               result.update_weight), 0.0)
    sent = tf.logical_and(mask, weight > 0.0)
    pushed = (state.shared if push is tensor_selection.Push.SHARED
              else tf.ones_like(mask))
    new_state = _ClientState(
        weights=tff.learning.models.ModelWeights(
            trainable=trained, non_trainable=list(start.non_trainable)),
        shared=mask,
    )
    stats = collections.OrderedDict(
        num_clients=tf.constant(1, tf.int32),
        parameters_pulled=masked_sum(sent, sizes),
        parameters_pushed=masked_sum(pushed, sizes)
        + sum(non_trainable_sizes),
        bytes_pulled=masked_sum(sent, num_bytes),
        bytes_pushed=masked_sum(pushed, num_bytes) + sum(non_trainable_bytes),
        tensors_sent=collections.OrderedDict(
            (group, tf.reduce_sum(tf.cast(tf.gather(sent, indices),
                                          tf.int32)))
            for group, indices in groups.items()),
    )
    output = collections.OrderedDict([
        (CLIENT_STATES, new_state),
        (UPDATE, collections.OrderedDict(
            trained=trained, sent=mask, weight=weight)),
    ])
    return collections.OrderedDict(output=output, stats=stats)

  stats_type = client_round.type_signature.result['stats']

  @tff.tensorflow.computation(stats_type, measurements_type)
  def work_metrics(stats, measurements):
    n = tf.cast(tf.maximum(stats['num_clients'], 1), tf.float64)

    def per_client(total):
      return tf.cast(total, tf.float64) / n

    return collections.OrderedDict(
        parameters_pulled=stats['parameters_pulled'],
        parameters_pushed=stats['parameters_pushed'],
        parameters_pulled_per_client=per_client(stats['parameters_pulled']),
        parameters_pushed_per_client=per_client(stats['parameters_pushed']),
        bytes_pulled_per_client=per_client(stats['bytes_pulled']),
        bytes_pushed_per_client=per_client(stats['bytes_pushed']),
        tensors_sent=stats['tensors_sent'],
        non_finite_clients=measurements['weighting']['num_non_finite_clients'],
        train=measurements['train'],
        weighting=measurements['weighting'],
    )

  with_client_outputs = client_work_lib.returns_client_outputs(weighted_work)
  if with_client_outputs:
    update_type = client_round.type_signature.result['output'][UPDATE]

    @tff.tensorflow.computation(
        weighted_work.next.type_signature.result.client_outputs.member,
        stats_type, update_type)
    def client_output(work_output, stats, update):
      # The weighted client work's statistics, with the weight this round
      # applied (the client's data_size when it gives one) and what the
      # client sent.
      merged = collections.OrderedDict(work_output)
      merged['weight'] = update['weight']
      merged[SENT] = tf.logical_and(update['sent'], update['weight'] > 0.0)
      merged[PARAMETERS_PULLED] = stats['parameters_pulled']
      merged[BYTES_PULLED] = stats['bytes_pulled']
      return merged

  @tff.federated_computation(
      weighted_work.initialize.type_signature.result,
      tff.FederatedType(weights_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS),
      tff.FederatedType(client_state_type, tff.CLIENTS),
  )
  def next_fn(state, pushed, data, client_states):
    # A dense broadcast; with push='shared' the metrics count only the
    # tensors the client takes.
    start = tff.federated_map(start_weights, (pushed, client_states))
    work = weighted_work.next(state, start, getattr(data, _TRAINING_DATA))
    outputs = tff.federated_map(
        client_round, (start, client_states, work.result,
                       getattr(data, _SEED), getattr(data, _DATA_SIZE)))
    metrics = tff.federated_map(
        work_metrics, (tff.federated_sum(outputs.stats), work.measurements))
    if not with_client_outputs:
      return tff.templates.MeasuredProcessOutput(
          state=work.state, result=outputs.output, measurements=metrics)
    return client_work_lib.ClientWorkOutput(
        state=work.state, result=outputs.output, measurements=metrics,
        client_outputs=tff.federated_map(
            client_output, (work.client_outputs, outputs.stats,
                            outputs.output[UPDATE])))

  if with_client_outputs:
    return client_work_lib.MeasuredProcessWithClientOutputs(
        weighted_work.initialize, next_fn)
  return tff.templates.MeasuredProcess(weighted_work.initialize, next_fn)
