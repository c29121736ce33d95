"""A cap on any client's share of a round's weight.

Lorar's weight |D_i|·ΔL_i (and ΔL_i, and |D_i| when a client reports it) is
decided by the client's own data: one client with odd data, a bug or an
attacker can take almost all of a round's weight, and the weighted mean then
ignores everyone else. `max_weight_share` bounds that: no client's normalised
weight exceeds the cap c in a round.

The rule. Let w_1..w_n >= 0 be the round's weights and n+ the number of
positive ones. The capped shares are

    s_i = min(c', λ·w_i),   c' = max(c, 1/n+),

with λ > 0 the one number for which Σ s_i = 1. That is the fixed point of
"normalise; cap every share above c' at c'; hand the excess to the uncapped
clients in proportion to their weights; repeat": each step keeps the order
of the shares and caps at least one more client until none is above c', so it
stops after at most n+ steps with exactly these shares (the tests check the
closed form against that iteration). Properties:

*   a client below the cap keeps its weight relative to every other client
    below the cap (s_i / s_j = w_i / w_j);
*   with c >= the largest share w_max / Σw nothing changes;
*   every client equal: s_i = 1/n+ whatever c is;
*   zero-weight clients (rejected, empty, ΔL = 0) stay at 0 and do not count
    in n+;
*   c < 1/n+ cannot be met with shares that sum to 1: the cap becomes 1/n+,
    i.e. every positive client gets the same share (the measurement
    `cap_infeasible` says so);
*   all weights 0: all shares 0 (the weighted mean is 0/0, which the
    processes treat as "no update").

Computing λ needs every weight of the round at the server (n float32
scalars, gathered with `tff.federated_aggregate`), then one broadcast of
(λ, c'): the server learns each client's weight (not which client sent it),
and the round has a second aggregation stage, so it cannot run under secure
aggregation alone (see docs/algorithms.md, "Untrusted clients").
"""

import collections
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# Shares may exceed the cap by float32 rounding; the check allows this much.
_RELATIVE_TOLERANCE = 1e-6


def _cap_parameters(weights: tf.Tensor, max_share) -> dict[str, tf.Tensor]:
  """λ, the effective cap c' and the round's measurements for `weights`."""
  weights = tf.convert_to_tensor(weights, tf.float32)
  max_share = tf.cast(max_share, tf.float32)
  positive = tf.cast(weights > 0.0, tf.float32)
  num_positive = tf.reduce_sum(positive)
  cap = tf.maximum(max_share, tf.math.divide_no_nan(1.0, num_positive))
  ordered = tf.sort(weights * positive, direction='DESCENDING')
  total = tf.reduce_sum(ordered)
  # With the k largest capped, the rest share 1 - k·c' in proportion to
  # their weights: λ_k = (1 - k·c') / (Σ of the rest). The smallest k whose
  # largest uncapped share λ_k·w_(k) is within the cap is the fixed point.
  k = tf.cast(tf.range(tf.size(ordered)), tf.float32)
  rest = total - (tf.cumsum(ordered) - ordered)
  scale = tf.math.divide_no_nan(1.0 - k * cap, rest)
  valid = tf.logical_and(
      scale * ordered <= cap * (1.0 + _RELATIVE_TOLERANCE), k < num_positive)
  first_valid = tf.argmax(tf.cast(valid, tf.int32), output_type=tf.int32)
  # With no positive weight `scale` is empty: 0 then, and every share 0.
  scale = tf.where(num_positive > 0.0,
                   tf.gather(tf.concat([scale, [0.0]], 0), first_valid), 0.0)
  largest = tf.reduce_max(tf.concat([ordered, [0.0]], 0))
  return collections.OrderedDict(
      scale=scale,
      cap=cap,
      max_share_before=tf.math.divide_no_nan(largest, total),
      max_share_after=tf.minimum(cap, scale * largest),
      num_capped=tf.reduce_sum(
          tf.cast(scale * ordered > cap * (1.0 + _RELATIVE_TOLERANCE),
                  tf.int32)),
      cap_infeasible=tf.cast(
          tf.logical_and(num_positive > 0.0, max_share * num_positive < 1.0),
          tf.int32),
  )


def _apply(weight, scale, cap):
  return tf.where(weight > 0.0, tf.minimum(cap, scale * weight), 0.0)


def capped_shares(weights, max_share: float) -> tf.Tensor:
  """The capped shares s_i = min(c', λ·w_i) of `weights` (module docstring).

  Args:
    weights: float32 [n], the round's non-negative client weights.
    max_share: The cap c, in (0, 1].

  Returns:
    float32 [n] shares summing to 1 (to float32 precision), or all zeros
    if every weight is 0.
  """
  check_max_share(max_share)
  parameters = _cap_parameters(weights, max_share)
  return _apply(tf.convert_to_tensor(weights, tf.float32),
                parameters['scale'], parameters['cap'])


def check_max_share(max_share) -> None:
  """Raises ValueError naming `max_weight_share` unless it is in (0, 1]."""
  if isinstance(max_share, bool) or not isinstance(
      max_share, (int, float, np.floating, np.integer)) or not (
          0.0 < max_share <= 1.0):
    raise ValueError(
        'max_weight_share must be a number in (0, 1] (a share of the '
        f"round's total weight, e.g. 2 / clients_per_round), got "
        f'{max_share!r}.')


@tff.tensorflow.computation
def _no_weights():
  return tf.zeros([0], tf.float32)


@tff.tensorflow.computation(tff.TensorType(np.float32, [None]), np.float32)
def _append(gathered, weight):
  return tf.concat([gathered, [weight]], 0)


@tff.tensorflow.computation(tff.TensorType(np.float32, [None]),
                            tff.TensorType(np.float32, [None]))
def _concat(a, b):
  return tf.concat([a, b], 0)


@tff.tensorflow.computation(tff.TensorType(np.float32, [None]))
def _identity(gathered):
  return gathered


def cap_client_weights(weights, max_share: float):
  """Caps CLIENTS-placed weights; call inside a `tff.federated_computation`.

  Type signature, with W = float32:
  `({W}@CLIENTS -> <{W}@CLIENTS, <max_share_before=W, max_share_after=W,
  num_capped=int32, cap_infeasible=int32>@SERVER>)`.

  Args:
    weights: A `tff.Value` of type `{float32}@CLIENTS`, the weights.
    max_share: The cap c, in (0, 1].

  Returns:
    `(shares, measurements)`: the capped shares at the clients (they sum to
    1 over the round) and the round's measurements at the server:
    the largest share before and after the cap, how many clients it capped,
    and whether c was below 1/n+ (module docstring).
  """
  check_max_share(max_share)
  gathered = tff.federated_aggregate(
      weights, _no_weights(), _append, _concat, _identity)

  @tff.tensorflow.computation(tff.TensorType(np.float32, [None]))
  def parameters(all_weights):
    return _cap_parameters(all_weights, max_share)

  @tff.tensorflow.computation(
      np.float32, tff.StructType([('scale', np.float32),
                                  ('cap', np.float32)]))
  def share(weight, scale_and_cap):
    return _apply(weight, scale_and_cap[0], scale_and_cap[1])

  @tff.tensorflow.computation(parameters.type_signature.result)
  def split(values):
    return (collections.OrderedDict(scale=values['scale'],
                                    cap=values['cap']),
            collections.OrderedDict(
                (key, values[key]) for key in (
                    'max_share_before', 'max_share_after', 'num_capped',
                    'cap_infeasible')))

  scale_and_cap, measurements = tff.federated_map(
      split, tff.federated_map(parameters, gathered))
  shares = tff.federated_map(
      share, (weights, tff.federated_broadcast(scale_and_cap)))
  return shares, measurements


class WeightShareCapFactory(tff.aggregators.WeightedAggregationFactory):
  """Caps each client's share of the weight, then aggregates with `inner`.

  The process it creates has type signatures

  *   `initialize`: `( -> S@SERVER)`, S the inner aggregator's state;
  *   `next`: `(<S@SERVER, {V}@CLIENTS, {float32}@CLIENTS> ->
      <state=S@SERVER, result=R@SERVER, measurements=<weight_cap=C,
      inner=M>@SERVER>)`,

  where R and M are the inner aggregator's result and measurements and C
  the cap's measurements (`cap_client_weights`). The inner aggregator sees
  the capped shares as the clients' weights, so a weighted mean
  (`tff.aggregators.MeanFactory`, `tff.learning.robust_aggregator(
  weighted=True)`, ...) becomes the capped-share mean.

  Args:
    max_share: The cap c in (0, 1]; the module docstring gives the rule.
      `2 / clients_per_round` lets a client weigh at most twice its
      uniform share.
    inner: A `tff.aggregators.WeightedAggregationFactory`;
      `tff.aggregators.MeanFactory()` if None.
  """

  def __init__(self, max_share: float,
               inner: Optional[tff.aggregators.WeightedAggregationFactory]
               = None):
    check_max_share(max_share)
    if inner is None:
      inner = tff.aggregators.MeanFactory()
    if not isinstance(inner, tff.aggregators.WeightedAggregationFactory):
      raise TypeError(
          'inner must be a tff.aggregators.WeightedAggregationFactory, got '
          f'{type(inner)}.')
    self._max_share = float(max_share)
    self._inner = inner

  @property
  def max_share(self) -> float:
    return self._max_share

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    weight_type = tff.types.to_type(weight_type)
    if weight_type != tff.TensorType(np.float32):
      raise TypeError(
          f'WeightShareCapFactory needs float32 scalar weights, got '
          f'{weight_type}.')
    inner_process = self._inner.create(value_type, weight_type)

    @tff.federated_computation
    def init_fn():
      return inner_process.initialize()

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.FederatedType(value_type, tff.CLIENTS),
        tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      shares, cap_measurements = cap_client_weights(weight, self._max_share)
      output = inner_process.next(state, value, shares)
      return tff.templates.MeasuredProcessOutput(
          state=output.state,
          result=output.result,
          measurements=tff.federated_zip(collections.OrderedDict(
              weight_cap=cap_measurements, inner=output.measurements)))

    return tff.templates.AggregationProcess(init_fn, next_fn)
