"""Tests of `max_weight_share`: the rule, its TFF aggregator, FL processes."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import lorar_reference
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import algorithms
from tff_nlp.aggregators import weight_cap


def iterative_reference(weights, max_share):
  """The rule as the issue states it, step by step (not the closed form).

  Normalise; cap every share above the cap; hand the excess to the
  uncapped clients in proportion to their weights; repeat until no share is
  above the cap. A cap below 1/n+ (n+ positive clients) cannot be met with
  shares that sum to 1; it becomes 1/n+.
  """
  weights = np.asarray(weights, np.float64)
  positive = weights > 0
  if not positive.any():
    return np.zeros_like(weights)
  cap = max(max_share, 1.0 / positive.sum())
  shares = weights / weights.sum()
  capped = np.zeros_like(positive)
  for _ in range(len(weights) + 1):
    over = (shares > cap * (1 + 1e-9)) & ~capped
    if not over.any():
      break
    capped |= over
    excess = 1.0 - cap * capped.sum()
    free = ~capped & positive
    shares = np.where(capped, cap, 0.0)
    shares[free] = excess * weights[free] / weights[free].sum()
  return shares


# (weights, cap, shares derived by hand).
_HAND_DERIVED = (
    # 6/8 = 0.75 > 0.5: capped; its excess 0.25 goes to the two others in
    # proportion 1:1, so each gets 1/8 + 1/8.
    ('one_large', [6.0, 1.0, 1.0], 0.5, [0.5, 0.25, 0.25]),
    # 10/20 and 5/20 exceed 0.3. Cap both; the other three share
    # 1 - 0.6 = 0.4 in proportion 3:1:1: 0.24, 0.08, 0.08 (all below 0.3).
    ('two_capped', [10.0, 5.0, 3.0, 1.0, 1.0], 0.3,
     [0.3, 0.3, 0.24, 0.08, 0.08]),
    # A cap of 0.1 < 1/4 cannot hold with shares summing to 1: each 1/4.
    ('below_one_over_n', [1.0, 2.0, 3.0, 4.0], 0.1, [0.25] * 4),
    # Every client equal: 1/3 each, under any cap at or above 1/3.
    ('all_equal', [2.0, 2.0, 2.0], 0.5, [1 / 3] * 3),
    # One client takes everything: the cap cannot apply.
    ('one_client', [3.0], 0.2, [1.0]),
    # Zero-weight clients stay at 0 and do not count: n+ = 2, so the cap
    # 0.25 < 1/2 becomes 1/2.
    ('zero_weights', [5.0, 0.0, 0.0, 1.0], 0.25, [0.5, 0.0, 0.0, 0.5]),
    ('all_zero', [0.0, 0.0], 0.5, [0.0, 0.0]),
    # A cap above the largest share changes nothing: 1/6, 2/6, 3/6.
    ('no_effect', [1.0, 2.0, 3.0], 0.6, [1 / 6, 2 / 6, 3 / 6]),
)


class CappedSharesExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*_HAND_DERIVED)
  def test_hand_derived(self, weights, max_share, expected):
    shares = weight_cap.capped_shares(np.array(weights, np.float32), max_share)
    self.assertAllClose(shares, expected, atol=1e-6, rtol=0)
    self.assertAllClose(iterative_reference(weights, max_share), expected,
                        atol=1e-9, rtol=0)

  @parameterized.parameters(range(6))
  def test_matches_the_iterative_rule_on_random_weights(self, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    # Heavy-tailed weights with some zeros, as Lorar's |D_i|·ΔL_i can be.
    weights = rng.lognormal(sigma=2.0, size=n) * (rng.random(n) > 0.2)
    max_share = float(rng.uniform(0.02, 0.6))
    shares = weight_cap.capped_shares(weights.astype(np.float32), max_share)
    expected = iterative_reference(weights, max_share)
    self.assertAllClose(shares, expected, atol=1e-5, rtol=1e-4)
    if expected.sum() > 0:
      self.assertAllClose(np.sum(shares), 1.0, atol=1e-5)
      cap = max(max_share, 1 / np.count_nonzero(weights))
      self.assertLessEqual(np.max(shares), cap * (1 + 1e-5))

  def test_uncapped_clients_keep_their_ratios(self):
    weights = np.array([100.0, 4.0, 2.0, 1.0, 1.0], np.float32)
    shares = weight_cap.capped_shares(weights, 0.5).numpy()
    # 100 is capped at 0.5; the rest share 0.5 in proportion 4:2:1:1.
    self.assertAllClose(shares, [0.5, 0.25, 0.125, 0.0625, 0.0625])
    self.assertAllClose(shares[1:] / shares[4], [4.0, 2.0, 1.0, 1.0])

  @parameterized.parameters(0.0, -0.1, 1.5, float('nan'), True, '0.5', None)
  def test_bad_cap_names_the_argument(self, max_share):
    with self.assertRaisesRegex(ValueError, 'max_weight_share'):
      weight_cap.capped_shares(np.ones([3], np.float32), max_share)


class WeightShareCapFactoryComputationTest(tf.test.TestCase):

  def test_type_signature(self):
    process = weight_cap.WeightShareCapFactory(0.5).create(
        tff.TensorType(np.float32, [2]), tff.TensorType(np.float32))
    cap_type = tff.to_type(collections.OrderedDict(
        max_share_before=np.float32, max_share_after=np.float32,
        num_capped=np.int32, cap_infeasible=np.int32))
    self.assertEqual(
        process.next.type_signature.result.measurements.member,
        tff.to_type(collections.OrderedDict(
            weight_cap=cap_type,
            inner=collections.OrderedDict(mean_value=(), mean_weight=()))))
    self.assertEqual(process.next.type_signature.result.result,
                     tff.FederatedType(tff.TensorType(np.float32, [2]),
                                       tff.SERVER))

  def test_inner_state_is_the_state(self):
    inner = tff.learning.robust_aggregator(weighted=True)
    value_type = tff.TensorType(np.float32, [2])
    capped = weight_cap.WeightShareCapFactory(0.5, inner=inner).create(
        value_type, tff.TensorType(np.float32))
    alone = inner.create(value_type, tff.TensorType(np.float32))
    self.assertEqual(capped.initialize.type_signature,
                     alone.initialize.type_signature)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'max_weight_share'):
      weight_cap.WeightShareCapFactory(2.0)
    with self.assertRaisesRegex(TypeError, 'WeightedAggregationFactory'):
      weight_cap.WeightShareCapFactory(
          0.5, inner=tff.aggregators.SumFactory())
    with self.assertRaisesRegex(TypeError, 'float32 scalar weights'):
      weight_cap.WeightShareCapFactory(0.5).create(
          tff.TensorType(np.float32), tff.TensorType(np.float64))


class WeightShareCapFactoryExecutionTest(tf.test.TestCase):

  def test_capped_weighted_mean_and_measurements(self):
    process = weight_cap.WeightShareCapFactory(0.5).create(
        tff.TensorType(np.float32, [2]), tff.TensorType(np.float32))
    values = [np.array([1.0, 0.0], np.float32),
              np.array([0.0, 1.0], np.float32),
              np.array([0.0, 2.0], np.float32)]
    output = process.next(process.initialize(), values, [6.0, 1.0, 1.0])
    # Shares 0.5, 0.25, 0.25 (the 'one_large' case above):
    # 0.5·[1, 0] + 0.25·[0, 1] + 0.25·[0, 2] = [0.5, 0.75].
    self.assertAllClose(output.result, [0.5, 0.75])
    self.assertEqual(
        output.measurements['weight_cap'],
        collections.OrderedDict(max_share_before=0.75, max_share_after=0.5,
                                num_capped=1, cap_infeasible=0))


class FlProcessWeightCapExecutionTest(tf.test.TestCase,
                                      parameterized.TestCase):

  @parameterized.parameters('lorar', 'num_examples')
  def test_round_is_the_capped_mean_of_algorithm_1(self, weighting):
    clients = linear_model.three_clients()
    max_share = 0.4
    process = process_fixtures.build_fl(
        'fedavg', weighting, max_weight_share=max_share)
    output = process.next(process.initialize(),
                          [linear_model.to_dataset(c) for c in clients])
    _, rounds, info = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting=weighting)
    shares = iterative_reference(info['weights'], max_share)
    # The cap must bind, or this test would not test it.
    self.assertGreater(np.max(info['weights']) / info['weights'].sum(),
                       max_share)
    delta_w = sum(s * r.delta_w for s, r in zip(shares, rounds))
    kernel, _ = linear_model.global_weights(process, output.state)
    self.assertAllClose(kernel, linear_model.INITIAL_KERNEL - delta_w,
                        atol=1e-6, rtol=0)
    measured = output.metrics['aggregator']['weight_cap']
    self.assertAllClose(measured['max_share_after'], max_share, atol=1e-6)
    self.assertEqual(measured['num_capped'],
                     np.count_nonzero(np.isclose(shares, max_share)))

  def test_stateful_robust_aggregator_is_carried_under_the_cap(self):
    # tff.learning.robust_aggregator(weighted=True): zeroing and adaptive
    # clipping, whose norms follow quantile estimates kept in its state.
    # Reference: that aggregator's process run alone on the reference
    # deltas with the iteratively capped shares, its state carried.
    clients = linear_model.three_clients()
    max_share = 0.4
    robust = tff.learning.robust_aggregator(weighted=True)
    process = process_fixtures.build_fl(
        'fedavg', 'lorar', max_weight_share=max_share,
        model_aggregator=robust)
    weights_type = linear_model.weights_type()
    alone = robust.create(weights_type.trainable, tff.TensorType(np.float32))
    alone_state = alone.initialize()
    state = process.initialize()
    reference = linear_model.initial_state()
    aggregator_states = []
    for _ in range(2):
      state = process.next(
          state, [linear_model.to_dataset(c) for c in clients]).state
      _, rounds, info = lorar_reference.run_round(reference, clients,
                                                  weighting='lorar')
      shares = iterative_reference(info['weights'], max_share)
      alone_output = alone.next(
          alone_state,
          [[r.delta_w.astype(np.float32), r.delta_b.astype(np.float32)]
           for r in rounds],
          shares.astype(np.float32).tolist())
      alone_state = alone_output.state
      mean_w, mean_b = alone_output.result
      reference = lorar_reference.ServerState(reference.w - mean_w,
                                              reference.b - mean_b)
      kernel, bias = linear_model.global_weights(process, state)
      self.assertAllClose(kernel, reference.w, atol=1e-5, rtol=0)
      self.assertAllClose(bias, reference.b, atol=1e-5, rtol=0)
      aggregator_states.append(state.aggregator)
    self.assertAllClose(tf.nest.flatten(aggregator_states[1]),
                        tf.nest.flatten(alone_state))
    self.assertNotAllClose(tf.nest.flatten(aggregator_states[0]),
                           tf.nest.flatten(aggregator_states[1]))

  def test_bad_cap_is_rejected_by_the_builder(self):
    with self.assertRaisesRegex(ValueError, 'max_weight_share'):
      process_fixtures.build_fl('fedavg', 'lorar', max_weight_share=0.0)


if __name__ == '__main__':
  tf.test.main()
