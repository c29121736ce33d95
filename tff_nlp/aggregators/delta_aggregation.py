"""A weighted TFF aggregator for processes whose server averages weights.

Dynamic pulling (`dynamic_pulling`) and federated continual learning
(`fcl`) average the clients' *weights*: tensor t of the new global model is

    w^t = Σ_k n_k m_kt w_k^t / S_t,   S_t = Σ_k n_k m_kt,          (1)

with n_k client k's weight and m_kt whether it sent tensor t (FCL: every
client of weight > 0 sends every shared tensor); a tensor no client sent
keeps its global value g^t. To run such a round through any
`tff.aggregators.WeightedAggregationFactory` (`tff.learning.
robust_aggregator`, `clipping_factory`, `zeroing_factory`, DP, compression),
`DeltaAggregator` has each client send the *delta* from the global model
it was broadcast,

    d_k^t = m_kt (g^t - w_k^t)   (zero where not sent),

with weight n_k. Deltas, not weights, because what those aggregators do is
defined on model updates: a clipping norm bounds how far one client can
move the model, zeroing drops a client whose update is implausibly large,
and DP noise is calibrated to the sensitivity of a clipped update. Clipping
a weight vector would shrink the model itself towards zero, and its norm
says nothing about a client's influence. The delta is from the global
model, not from the client's start (which can differ: dynamic pulling's
private tensors), so that the server can recover (1) exactly.

The factory's mean of the deltas is D^t = Σ_k n_k d_k^t / N with N =
Σ_k n_k; as Σ_k n_k d_k^t = S_t g^t - Σ_k n_k m_kt w_k^t, the server sets

    w^t = g^t - D^t · N / S_t   if S_t > 0, else g^t,              (2)

which with `tff.aggregators.MeanFactory()` is (1) (to float rounding). The
server computes N and S_t with a `tff.federated_sum` of the weights and of
the per-tensor weights n_k m_kt (which the plain process sums anyway). With
a robust aggregator, D is its robust mean and (2) rescales it per tensor in
the same way (for FCL N / S_t = 1: (2) is g - D, FedAvg's server step with
learning rate 1).
"""

import collections
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# Keys of the per-round sums of the clients' weights.
WEIGHT = 'weight'
TENSOR_WEIGHTS = 'tensor_weights'


def check_factory(model_aggregator: Any, name: str = 'model_aggregator'):
  """Raises a TypeError naming `name` unless it is a weighted factory."""
  if not isinstance(model_aggregator,
                    tff.aggregators.WeightedAggregationFactory):
    raise TypeError(
        f'{name} must be a tff.aggregators.WeightedAggregationFactory (wrap '
        'an unweighted one with tff.aggregators.as_weighted_aggregator), got '
        f'{type(model_aggregator)}.')


class DeltaAggregationOutput(NamedTuple):
  """What `DeltaAggregator.next` returns.

  Attributes:
    state: The aggregator's new state, A@SERVER.
    result: The new global value of the aggregated tensors, V@SERVER ((2)).
    measurements: The aggregator's measurements@SERVER.
    sums: `<weight=float32, tensor_weights=float32[T]>@SERVER`: N and S_t.
  """

  state: Any
  result: Any
  measurements: Any
  sums: Any


class DeltaAggregator:
  """Aggregates client values of type V as deltas from the global value.

  For use inside a `tff.federated_computation` (see the module docstring).
  V is a structure of T float tensors (in `tf.nest.flatten` order).
  """

  def __init__(self, model_aggregator: tff.aggregators
               .WeightedAggregationFactory, value_type: tff.Type):
    check_factory(model_aggregator)
    self.process = model_aggregator.create(value_type,
                                           tff.TensorType(np.float32))
    num_tensors = len(tff.structure.flatten(value_type))
    mask_type = tff.TensorType(np.bool_, [num_tensors])

    def sent_tensors(weight, sent):
      return tf.logical_and(sent, weight > 0.0)

    @tff.tensorflow.computation(value_type, value_type, np.float32,
                                mask_type)
    def client_delta(global_value, trained, weight, sent):
      sent = sent_tensors(weight, sent)
      flat = [tf.where(sent[t], g - w, tf.zeros_like(g))
              for t, (g, w) in enumerate(zip(tf.nest.flatten(global_value),
                                             tf.nest.flatten(trained)))]
      return tf.nest.pack_sequence_as(global_value, flat)

    @tff.tensorflow.computation(np.float32, mask_type)
    def client_weights(weight, sent):
      return collections.OrderedDict([
          (WEIGHT, weight),
          (TENSOR_WEIGHTS, tf.where(sent_tensors(weight, sent), weight, 0.0)),
      ])

    sums_type = client_weights.type_signature.result

    @tff.tensorflow.computation(value_type, value_type, sums_type)
    def apply_mean_delta(global_value, mean_delta, sums):
      received = sums[TENSOR_WEIGHTS] > 0.0
      # N / S_t of (2); 1 where every client of weight > 0 sent tensor t.
      scale = tf.math.divide_no_nan(sums[WEIGHT], sums[TENSOR_WEIGHTS])
      flat = [tf.where(received[t], g - d * tf.cast(scale[t], d.dtype), g)
              for t, (g, d) in enumerate(zip(tf.nest.flatten(global_value),
                                             tf.nest.flatten(mean_delta)))]
      return tf.nest.pack_sequence_as(global_value, flat)

    @tff.tensorflow.computation(np.float32)
    def all_sent(weight):
      del weight  # Unused: `sent_tensors` checks it.
      return tf.ones([num_tensors], tf.bool)

    self._client_delta = client_delta
    self._client_weights = client_weights
    self._apply_mean_delta = apply_mean_delta
    self._all_sent = all_sent

  def initialize(self):
    """The aggregator's initial state, A@SERVER (federated context)."""
    return self.process.initialize()

  def next(self, state, global_value, global_at_clients, trained, weights,
           sent: Optional[Any] = None) -> DeltaAggregationOutput:
    """One aggregation (call in a `tff.federated_computation`).

    Args:
      state: A@SERVER.
      global_value: The global value g, V@SERVER.
      global_at_clients: g broadcast, V@CLIENTS.
      trained: The clients' values w_k, V@CLIENTS.
      weights: Their weights n_k, float32@CLIENTS (0: sends nothing).
      sent: bool[T]@CLIENTS, the tensors each client sends; None: all.

    Returns:
      A `DeltaAggregationOutput`.
    """
    if sent is None:
      sent = tff.federated_map(self._all_sent, weights)
    deltas = tff.federated_map(
        self._client_delta, (global_at_clients, trained, weights, sent))
    output = self.process.next(state, deltas, weights)
    sums = tff.federated_sum(
        tff.federated_map(self._client_weights, (weights, sent)))
    result = tff.federated_map(
        self._apply_mean_delta, (global_value, output.result, sums))
    return DeltaAggregationOutput(
        state=output.state, result=result,
        measurements=output.measurements, sums=sums)


def with_measurements(metrics, extra: 'collections.OrderedDict[str, Any]'):
  """`metrics@SERVER` (an OrderedDict) with the entries of `extra` (each
  @SERVER) appended, in a federated context; `metrics` if `extra` is empty."""
  if not extra:
    return metrics
  zipped = tff.federated_zip(
      collections.OrderedDict([('metrics', metrics)] + list(extra.items())))

  @tff.tensorflow.computation(zipped.type_signature.member)
  def append(values):
    merged = collections.OrderedDict(values['metrics'])
    for key in extra:
      merged[key] = values[key]
    return merged

  return tff.federated_map(append, zipped)
