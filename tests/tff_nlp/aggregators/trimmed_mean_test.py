"""Tests of the coordinate-wise trimmed weighted mean aggregator."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import lorar_reference
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp.aggregators import trimmed_mean


def numpy_trimmed_mean(values, weights, trim_fraction):
  """Per coordinate: sort the positive-weight clients, drop k each end."""
  values = np.asarray(values, np.float64)
  weights = np.asarray(weights, np.float64)
  valid = np.flatnonzero(weights > 0)
  if valid.size == 0:
    return np.zeros(values.shape[1:])
  k = min(int(np.floor(trim_fraction * valid.size)), (valid.size - 1) // 2)
  flat = values.reshape(len(values), -1)
  out = np.empty(flat.shape[1])
  for j in range(flat.shape[1]):
    ranked = valid[np.argsort(flat[valid, j], kind='stable')]
    kept = ranked[k:valid.size - k]
    out[j] = np.sum(weights[kept] * flat[kept, j]) / np.sum(weights[kept])
  return out.reshape(values.shape[1:])


def _process(value_type, trim_fraction):
  return trimmed_mean.TrimmedMeanFactory(trim_fraction).create(
      value_type, tff.TensorType(np.float32))


class TrimmedMeanComputationTest(tf.test.TestCase):

  def test_type_signature(self):
    value_type = tff.to_type([tff.TensorType(np.float32, [3, 1]),
                              tff.TensorType(np.float32, [1])])
    process = _process(value_type, 0.125)
    self.assertEqual(process.initialize.type_signature.result,
                     tff.FederatedType((), tff.SERVER))
    result = process.next.type_signature.result
    self.assertEqual(result.result.member, value_type)
    self.assertEqual(result.measurements.member, tff.to_type(
        collections.OrderedDict(clients=np.int32, trimmed_per_side=np.int32)))

  def test_bad_arguments(self):
    for bad in (-0.1, 0.5, 1.0, True, 'x'):
      with self.assertRaisesRegex(ValueError, 'trim_fraction'):
        trimmed_mean.TrimmedMeanFactory(bad)
    with self.assertRaisesRegex(TypeError, 'float32 scalar weights'):
      trimmed_mean.TrimmedMeanFactory(0.1).create(
          tff.TensorType(np.float32), tff.TensorType(np.float64))
    with self.assertRaisesRegex(TypeError, 'float32 values'):
      trimmed_mean.TrimmedMeanFactory(0.1).create(
          tff.TensorType(np.int32), tff.TensorType(np.float32))


class TrimmedMeanExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_hand_derived(self):
    process = _process(tff.TensorType(np.float32, [2]), 0.25)
    values = [np.array(v, np.float32) for v in
              ([1, 10], [2, 20], [3, -30], [100, 40], [9, 9])]
    # The fifth client has weight 0: n+ = 4, k = floor(0.25·4) = 1.
    # Coordinate 0: 1, 2, 3, 100 → keep 2, 3 (weights 1, 1) → 2.5.
    # Coordinate 1: -30, 10, 20, 40 → keep 10, 20 → 15.
    output = process.next(process.initialize(), values,
                          [1.0, 1.0, 1.0, 1.0, 0.0])
    self.assertAllClose(output.result, [2.5, 15.0])
    self.assertEqual(output.measurements,
                     collections.OrderedDict(clients=4, trimmed_per_side=1))

  @parameterized.parameters((0.0, 0), (0.2, 1), (0.3, 2), (0.45, 3))
  def test_matches_numpy(self, trim_fraction, seed):
    rng = np.random.default_rng(seed)
    n = 7
    values = rng.normal(size=(n, 3, 2)).astype(np.float32)
    weights = rng.uniform(0.5, 3.0, size=n).astype(np.float32)
    weights[seed % n] = 0.0
    process = _process(tff.TensorType(np.float32, [3, 2]), trim_fraction)
    output = process.next(process.initialize(), list(values),
                          weights.tolist())
    self.assertAllClose(
        output.result, numpy_trimmed_mean(values, weights, trim_fraction),
        atol=1e-6)

  def test_one_wild_client_is_trimmed_away(self):
    # Four equal honest updates and a client sending -100x: with one
    # client trimmed from each end the result is the honest update.
    process = _process(tff.TensorType(np.float32, [2]), 0.2)
    honest = np.array([0.3, -0.2], np.float32)
    output = process.next(process.initialize(),
                          [honest] * 4 + [-100.0 * honest], [1.0] * 5)
    self.assertAllClose(output.result, honest)

  def test_composes_with_build_fl_process_and_the_cap(self):
    clients = linear_model.three_clients()
    # Three clients, β = 0.4: k = min(floor(1.2), 1) = 1, so every
    # coordinate is the update of the middle client on it.
    process = process_fixtures.build_fl(
        'fedavg', 'lorar', max_weight_share=0.5,
        model_aggregator=trimmed_mean.TrimmedMeanFactory(0.4))
    output = process.next(process.initialize(),
                          [linear_model.to_dataset(c) for c in clients])
    _, rounds, _ = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting='lorar')
    deltas = np.stack([r.delta_w for r in rounds])
    kernel, _ = linear_model.global_weights(process, output.state)
    self.assertAllClose(kernel,
                        linear_model.INITIAL_KERNEL - np.median(deltas, 0),
                        atol=1e-6, rtol=0)


if __name__ == '__main__':
  tf.test.main()
