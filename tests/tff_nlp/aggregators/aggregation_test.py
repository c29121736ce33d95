"""Tests of `aggregation`: the model aggregator a run's flags compose."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp.aggregators import factory as aggregation
from tff_nlp.aggregators import trimmed_mean
from tff_nlp.aggregators import weight_cap
from tff_nlp.analysis import privacy

_VALUE = tff.TensorType(np.float32, [2])
_WEIGHT = tff.TensorType(np.float32)
_COHORT = dict(clients_per_round=8, population=8, rounds=5)


def _build(config, weighting='uniform', **cohort):
  return aggregation.build_model_aggregator(
      config, weighting=weighting, **{**_COHORT, **cohort})


def _process(factory):
  return factory.create(_VALUE, _WEIGHT)


class BuildModelAggregatorComputationTest(tf.test.TestCase,
                                          parameterized.TestCase):

  def _assert_same_types(self, factory, expected):
    built, reference = _process(factory), _process(expected)
    # Equivalent: the same types; the Python containers of the DP query's
    # state may differ between two builds.
    built.initialize.type_signature.check_equivalent_to(
        reference.initialize.type_signature)
    built.next.type_signature.check_equivalent_to(
        reference.next.type_signature)

  @parameterized.parameters('num_examples', 'uniform', 'lorar')
  def test_default_is_the_weighted_mean(self, weighting):
    factory, accounting = _build(aggregation.AggregationConfig(), weighting)
    self.assertIsInstance(factory, tff.aggregators.MeanFactory)
    self.assertIsNone(accounting)

  def test_robust(self):
    factory, accounting = _build(aggregation.AggregationConfig(robust=True),
                                 'lorar')
    self.assertIsNone(accounting)
    self._assert_same_types(factory, tff.learning.robust_aggregator(
        zeroing=True, clipping=True, weighted=True))

  def test_trimmed_mean(self):
    factory, accounting = _build(
        aggregation.AggregationConfig(trim_fraction=0.125), 'lorar')
    self.assertIsNone(accounting)
    self.assertIsInstance(factory, trimmed_mean.TrimmedMeanFactory)
    self.assertEqual(factory.trim_fraction, 0.125)

  def test_dp_with_adaptive_clipping(self):
    factory, accounting = _build(
        aggregation.AggregationConfig(dp_noise_multiplier=0.5))
    self.assertIsInstance(factory, tff.aggregators.WeightedAggregationFactory)
    self._assert_same_types(factory, tff.aggregators.as_weighted_aggregator(
        tff.learning.dp_aggregator(0.5, 8)))
    self.assertEqual(accounting, privacy.DpAccounting(
        noise_multiplier=0.5, clients_per_round=8, population=8,
        delta=1 / 8))

  def test_zero_clients_per_round_is_every_client(self):
    _, accounting = _build(
        aggregation.AggregationConfig(dp_noise_multiplier=0.5),
        clients_per_round=0, population=8)
    self.assertEqual(accounting.clients_per_round, 8)

  def test_dp_with_fixed_clip(self):
    factory, accounting = _build(aggregation.AggregationConfig(
        dp_noise_multiplier=3.0, dp_clip=0.1, dp_delta=1e-4))
    self._assert_same_types(factory, tff.aggregators.as_weighted_aggregator(
        tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
            3.0, 8, 0.1)))
    self.assertEqual(accounting.delta, 1e-4)

  @parameterized.named_parameters(
      ('mean', aggregation.AggregationConfig(max_weight_share=0.25),
       tff.aggregators.MeanFactory()),
      ('robust', aggregation.AggregationConfig(max_weight_share=0.25,
                                               robust=True),
       tff.learning.robust_aggregator(weighted=True)),
      ('dp', aggregation.AggregationConfig(max_weight_share=0.25,
                                           dp_noise_multiplier=0.5),
       tff.aggregators.as_weighted_aggregator(
           tff.learning.dp_aggregator(0.5, 8))),
  )
  def test_weight_cap_is_outermost(self, config, inner):
    factory, _ = _build(config)
    self.assertIsInstance(factory, weight_cap.WeightShareCapFactory)
    self.assertEqual(factory.max_share, 0.25)
    self._assert_same_types(
        factory, weight_cap.WeightShareCapFactory(0.25, inner=inner))
    measurements = _process(factory).next.type_signature.result.measurements
    self.assertEqual(
        [name for name, _ in tff.structure.iter_elements(measurements.member)],
        ['weight_cap', 'inner'])

  def test_dp_state_is_carried_by_the_fl_process(self):
    # The DP aggregator's adaptive clip norm is state: the process's
    # aggregator state is the DP aggregator's, and it changes over rounds.
    factory, _ = _build(aggregation.AggregationConfig(dp_noise_multiplier=0.2),
                        clients_per_round=3, population=3)
    process = process_fixtures.build_fl('fedavg', 'uniform',
                                        model_aggregator=factory)
    # Equivalent: the same types, up to Python containers.
    state_type = process.initialize.type_signature.result.member
    state_type.aggregator.check_equivalent_to(
        factory.create(linear_model.weights_type().trainable,
                       _WEIGHT).initialize.type_signature.result.member)
    data = [linear_model.to_dataset(c) for c in linear_model.three_clients()]
    state = process.initialize()
    states = []
    for _ in range(2):
      state = process.next(state, data).state
      states.append(tf.nest.flatten(state.aggregator))
    self.assertNotAllClose(states[0], states[1])


class AggregationConfigErrorsExecutionTest(tf.test.TestCase,
                                           parameterized.TestCase):

  @parameterized.named_parameters(
      ('cap_above_one', dict(max_weight_share=1.5), 'max_weight_share'),
      ('cap_zero', dict(max_weight_share=0.0), 'max_weight_share'),
      ('noise_zero', dict(dp_noise_multiplier=0.0), 'dp_noise_multiplier'),
      ('epsilon_negative', dict(target_epsilon=-1.0), 'target_epsilon'),
      ('clip_zero', dict(dp_noise_multiplier=1.0, dp_clip=0.0), 'dp_clip'),
      ('delta_one', dict(target_epsilon=1.0, dp_delta=1.0), 'dp_delta'),
      ('both', dict(dp_noise_multiplier=1.0, target_epsilon=1.0),
       'dp_noise_multiplier and target_epsilon both set'),
      ('delta_without_dp', dict(dp_delta=1e-3), 'dp_delta is only used'),
      ('clip_without_dp', dict(dp_clip=1.0), 'dp_clip is only used'),
      ('robust_with_dp', dict(robust=True, dp_noise_multiplier=1.0),
       'robust=True with differential privacy'),
      ('trim_half', dict(trim_fraction=0.5), 'trim_fraction must be'),
      ('trim_with_robust', dict(trim_fraction=0.1, robust=True),
       'trim_fraction is a mean of its own'),
  )
  def test_config_rejects(self, fields, message):
    with self.assertRaisesRegex(ValueError, f'^{message}'):
      aggregation.AggregationConfig(**fields)

  @parameterized.parameters('num_examples', 'loss_reduction', 'lorar')
  def test_dp_needs_uniform_weighting(self, weighting):
    for config in (aggregation.AggregationConfig(dp_noise_multiplier=0.5),
                   aggregation.AggregationConfig(target_epsilon=50.0)):
      with self.assertRaisesRegex(
          ValueError, rf"needs weighting='uniform', got "
          rf"weighting='{weighting}'"):
        _build(config, weighting)

  def test_noise_too_large_for_adaptive_clipping(self):
    # Adaptive clipping with 8 clients: the noise must stay below 0.8.
    with self.assertRaisesRegex(ValueError,
                                r'^dp_noise_multiplier=0.8 is too large'):
      _build(aggregation.AggregationConfig(dp_noise_multiplier=0.8))
    # A fixed clip has no such bound.
    _build(aggregation.AggregationConfig(dp_noise_multiplier=0.8, dp_clip=1.0))

  def test_unreachable_target_epsilon(self):
    with self.assertRaisesRegex(
        ValueError, r'^target_epsilon=1.0 is not reachable.* Adaptive '
        r'clipping allows a noise multiplier below 0.8 with 8 clients'):
      _build(aggregation.AggregationConfig(target_epsilon=1.0))

  @parameterized.named_parameters(
      ('cohort', dict(clients_per_round=9), 'clients_per_round=9 is more'),
      ('population', dict(population=0), 'population must be'),
      ('negative_cohort', dict(clients_per_round=-1), 'clients_per_round'),
      ('rounds', dict(rounds=0), 'rounds must be'),
  )
  def test_bad_cohort(self, cohort, message):
    with self.assertRaisesRegex(ValueError, message):
      _build(aggregation.AggregationConfig(), **cohort)

  def test_unknown_weighting(self):
    with self.assertRaisesRegex(ValueError, 'weighting'):
      _build(aggregation.AggregationConfig(), 'median')


class BuildModelAggregatorExecutionTest(tf.test.TestCase,
                                        parameterized.TestCase):

  @parameterized.parameters((50.0, 8, 8, 5), (20.0, 4, 40, 20))
  def test_target_epsilon_sets_the_noise_multiplier(self, target, cohort,
                                                    population, rounds):
    _, accounting = _build(
        aggregation.AggregationConfig(target_epsilon=target),
        clients_per_round=cohort, population=population, rounds=rounds)
    expected = privacy.noise_multiplier_for_epsilon(
        target, cohort, population, rounds, 1 / population,
        max_noise_multiplier=0.1 * cohort * (1 - 1e-9))
    self.assertEqual(accounting.noise_multiplier, expected)
    self.assertEqual(accounting.delta, 1 / population)
    self.assertEqual(accounting.target_epsilon, target)
    self.assertEqual(accounting.target_rounds, rounds)
    reached = accounting.epsilon(rounds)
    self.assertLessEqual(reached, target)
    self.assertGreater(reached, 0.999 * target)

  def test_robust_is_the_weighted_mean_of_small_updates(self):
    # Norms 0.1 and 0.2 are below the initial clip (1.0) and zeroing (10.0)
    # norms: (1·[0.1, 0] + 3·[0, 0.2]) / 4 = [0.025, 0.15].
    factory, _ = _build(aggregation.AggregationConfig(robust=True), 'lorar')
    process = _process(factory)
    output = process.next(
        process.initialize(),
        [np.array([0.1, 0.0], np.float32), np.array([0.0, 0.2], np.float32)],
        [1.0, 3.0])
    self.assertAllClose(output.result, [0.025, 0.15])

  def test_dp_ignores_the_weights(self):
    # Uniform weighting gives every client weight 1; the DP mean divides
    # the clipped sum by the expected cohort whatever the weights. Without
    # noise and with a fixed clip above the norms: ([1, 0] + [0, 2]) / 2.
    config = aggregation.AggregationConfig(dp_noise_multiplier=1.0,
                                           dp_clip=10.0)
    factory, _ = _build(config, clients_per_round=2, population=2)
    # The same composition without noise, to compare numbers.
    quiet = tff.aggregators.as_weighted_aggregator(
        tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
            0.0, 2, 10.0))
    _process(factory).next.type_signature.check_equivalent_to(
        _process(quiet).next.type_signature)
    process = _process(quiet)
    values = [np.array([1.0, 0.0], np.float32),
              np.array([0.0, 2.0], np.float32)]
    for weights in ([1.0, 1.0], [1.0, 9.0]):
      output = process.next(process.initialize(), values, weights)
      self.assertAllClose(output.result, [0.5, 1.0])


if __name__ == '__main__':
  tf.test.main()
