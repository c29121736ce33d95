"""Secure summation (`tff.aggregators.SecureSumFactory`) with every weighting.

Every weighting's model update is Σ p_i·Δw_i / Σ p_i: two sums, so it can run
under secure summation whatever p_i is (Lorar's |D_i|·ΔL_i included). The
session's context runs the secure intrinsics by their insecure bodies
(`tff_nlp.runtime.workers.compile_for_worker`), so these tests check the
numbers a secure deployment would compute: bounds clip, the rest is exact to
the quantisation of the bit-width sum.
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import lorar_reference
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import analysis


def _secure_mean(value_bound: float, weight_bound: float):
  # MeanFactory multiplies each update by its weight before the value sum,
  # so `value_bound` bounds every coordinate of p_i·Δw_i, not of Δw_i.
  return tff.aggregators.MeanFactory(
      value_sum_factory=tff.aggregators.SecureSumFactory(
          upper_bound_threshold=value_bound),
      weight_sum_factory=tff.aggregators.SecureSumFactory(
          upper_bound_threshold=weight_bound, lower_bound_threshold=0.0))


class SecureAggregationComputationTest(tf.test.TestCase):

  def test_the_update_and_weights_leave_only_through_secure_sums(self):
    process = process_fixtures.build_fl(
        'fedavg', 'lorar', model_aggregator=_secure_mean(100.0, 1000.0),
        metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize)
    flows = analysis.client_to_server_flows(process.next)
    # The kernel is [3, 1] (a bit-width sum carries it as int64[3,1]).
    model_shaped = [f for f in flows if '[3,1]' in str(f.value_type)]
    self.assertNotEmpty(model_shaped)
    self.assertEqual({f.intrinsic for f in model_shaped},
                     {'federated_secure_sum_bitwidth'})
    plain = [f for f in flows if not f.intrinsic.startswith(
        'federated_secure')]
    # What stays outside secure summation: the client work's scalar round
    # statistics (the fallback total, the weighting statistics and the
    # weight's min and max; docs/algorithms.md, "What leaves a client").
    self.assertTrue(all(f.is_scalar_only for f in plain), plain)
    self.assertEqual([f.intrinsic for f in plain], [
        'federated_sum', 'federated_sum', 'federated_min', 'federated_max'])


class SecureAggregationExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(*process_fixtures.FL_WEIGHTINGS)
  def test_secure_mean_matches_algorithm_1(self, weighting):
    clients = linear_model.three_clients()
    process = process_fixtures.build_fl(
        'fedavg', weighting, model_aggregator=_secure_mean(100.0, 1000.0))
    output = process.next(process.initialize(),
                          [linear_model.to_dataset(c) for c in clients])
    reference, _, _ = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting=weighting)
    kernel, bias = linear_model.global_weights(process, output.state)
    # Bounds well above every value: only the 32-bit quantisation differs.
    self.assertAllClose(kernel, reference.w, atol=1e-5, rtol=0)
    self.assertAllClose(bias, reference.b, atol=1e-5, rtol=0)

  def test_value_bound_clips_the_weighted_update(self):
    clients = linear_model.three_clients()
    bound = 0.5
    process = process_fixtures.build_fl(
        'fedavg', 'lorar', model_aggregator=_secure_mean(bound, 1000.0))
    output = process.next(process.initialize(),
                          [linear_model.to_dataset(c) for c in clients])
    _, rounds, info = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting='lorar')
    weights = info['weights']
    # SecureSumFactory clips every coordinate of p_i·Δw_i to [-bound, bound]
    # before summing; the weight sum is within its bound.
    clipped = sum(np.clip(p * r.delta_w, -bound, bound)
                  for p, r in zip(weights, rounds))
    self.assertGreater(np.max(np.abs([p * r.delta_w for p, r in
                                      zip(weights, rounds)])), bound)
    kernel, _ = linear_model.global_weights(process, output.state)
    self.assertAllClose(kernel,
                        linear_model.INITIAL_KERNEL - clipped / weights.sum(),
                        atol=1e-5, rtol=0)


if __name__ == '__main__':
  tf.test.main()
