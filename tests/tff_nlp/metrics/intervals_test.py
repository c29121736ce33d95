"""Tests of seed intervals, t quantiles and the paired stratified bootstrap."""

import json
import math

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals

_NAN = math.nan

# The tiny example: clients x (3 examples) and y (4 examples); A has 2
# seeds, B has 3.
#
# A:  x  seed 0: 1 0 1 (2/3)   y  seed 0: 1 1 0 0 (2/4)
#        seed 1: 1 1 0 (2/3)      seed 1: 1 0 0 0 (1/4)
#   x: 4 of 6 = 2/3; y: 3 of 8 = 3/8; MacroAvg (2/3 + 3/8) / 2 = 25/48;
#   MicroAvg (4 + 3) / (2 * 7) = 1/2.
# B:  x  seed 0: 0 0 1 (1/3)   y  seed 0: 1 1 1 0 (3/4)
#        seed 1: 1 0 1 (2/3)      seed 1: 1 1 0 0 (2/4)
#        seed 2: 0 0 0 (0)        seed 2: 1 1 1 1 (4/4)
#   x: 3 of 9 = 1/3; y: 9 of 12 = 3/4; MacroAvg (1/3 + 3/4) / 2 = 13/24;
#   MicroAvg (3 + 9) / (3 * 7) = 4/7 (each seed's MicroAvg is 4/7).
# A - B: x 1/3, y -3/8, MacroAvg 25/48 - 26/48 = -1/48, MicroAvg
#   1/2 - 4/7 = -1/14.
_A = {'x': [[1, 0, 1], [1, 1, 0]],
      'y': [[1, 1, 0, 0], [1, 0, 0, 0]]}
_B = {'x': [[0, 0, 1], [1, 0, 1], [0, 0, 0]],
      'y': [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]}
# (per_client, macro, micro) point estimates from the comment above.
_POINT_A = ({'x': 2 / 3, 'y': 3 / 8}, 25 / 48, 1 / 2)
_POINT_B = ({'x': 1 / 3, 'y': 3 / 4}, 13 / 24, 4 / 7)
_POINT_A_MINUS_B = ({'x': 1 / 3, 'y': -3 / 8}, -1 / 48, -1 / 14)

# With units (e.g. target tokens): x's 3 examples have 2, 1, 3 units (6), y's
# 2 have 4, 1 (5); outcomes count correct units.
#
# A (1 seed):  x 1 1 2 (4/6 = 2/3)      y 3 0 (3/5)
#   MacroAvg (2/3 + 3/5) / 2 = 19/30; MicroAvg (4 + 3) / 11 = 7/11.
# B (2 seeds): x seed 0: 2 0 3 (5)      y seed 0: 4 1 (5)
#                seed 1: 0 1 0 (1)        seed 1: 2 0 (2)
#   x: 6 / (2 * 6) = 1/2; y: 7 / (2 * 5) = 7/10; MacroAvg 3/5;
#   MicroAvg (6 + 7) / (2 * 11) = 13/22.
# A - B: x 1/6, y -1/10, MacroAvg 19/30 - 18/30 = 1/30, MicroAvg 1/22.
_UNITS = {'x': [2, 1, 3], 'y': [4, 1]}
_UNITS_A = {'x': [[1, 1, 2]], 'y': [[3, 0]]}
_UNITS_B = {'x': [[2, 0, 3], [0, 1, 0]], 'y': [[4, 1], [2, 0]]}
_UNITS_POINT_A = ({'x': 2 / 3, 'y': 3 / 5}, 19 / 30, 7 / 11)
_UNITS_POINT_B = ({'x': 1 / 2, 'y': 7 / 10}, 3 / 5, 13 / 22)
_UNITS_POINT_A_MINUS_B = ({'x': 1 / 6, 'y': -1 / 10}, 1 / 30, 1 / 22)

# Student-t quantiles from scipy 1.9.3 (`scipy.stats.t.ppf`), accurate to
# about 1e-9 relative here: its df = 1 and 2 values at 0.975 are 2e-11 off
# the closed forms, and at (0.995, 3) the exact CDF of its 5.84090929975643
# is 0.995 - 2.4e-11 (of `t_quantile`'s 5.8409093097333, 0.995 - 1e-16):
# (p, df, quantile).
_SCIPY_T = (
    (0.975, 3, 3.182446305284263),
    (0.975, 4, 2.7764451051977987),
    (0.975, 5, 2.5705818366147395),
    (0.975, 7, 2.3646242510102993),
    (0.975, 10, 2.2281388519649385),
    (0.975, 30, 2.0422724563012373),
    (0.975, 100, 1.9839715184496334),
    (0.975, 1000, 1.9623390808264074),
    (0.95, 3, 2.3533634348018264),
    (0.95, 10, 1.8124611228107335),
    (0.995, 3, 5.84090929975643),
    (0.995, 4, 4.604094871415897),
    (0.995, 30, 2.7499956535670305),
    (0.6, 3, 0.27667066230490933),
    (0.6, 100, 0.25402218245699415),
)


def _percentile(values, q):
  """The q quantile with linear interpolation, by sorting (numpy's default)."""
  ordered = sorted(values)
  position = q * (len(ordered) - 1)
  below = math.floor(position)
  above = min(below + 1, len(ordered) - 1)
  return ordered[below] + (position - below) * (
      ordered[above] - ordered[below])


def _reference(methods, num_replicates, resample_seeds, seed, confidence,
               units=None):
  """Slow loop-based bootstrap with the draws documented in `intervals`.

  Args:
    methods: One or two outcome mappings; with two, the difference.
    units: Client -> each example's units (None: one each); an accuracy is
      then the drawn examples' correct units over their units.

  Returns:
    (per_client, macro, micro) with an (estimate, low, high) each.
  """
  methods = [{c: np.asarray(v) for c, v in m.items()} for m in methods]
  clients = list(methods[0])
  units = {c: np.ones(len(methods[0][c][0])) if units is None
           else np.asarray(units[c], dtype=float) for c in clients}
  rng = np.random.default_rng(seed)
  seed_draws = []
  for m in methods:
    num_seeds = len(m[clients[0]])
    seed_draws.append(
        rng.integers(0, num_seeds, size=(num_replicates, num_seeds))
        if resample_seeds else
        [list(range(num_seeds))] * num_replicates)
  example_draws = {
      c: rng.integers(0, len(methods[0][c][0]),
                      size=(num_replicates, len(methods[0][c][0])))
      for c in clients}

  def statistics(m, seeds, examples):
    # Per seed, that seed's accuracies on the drawn examples; then the
    # mean over the drawn seeds.
    per_client = {c: np.mean([np.sum(m[c][s][examples[c]])
                              / np.sum(units[c][examples[c]]) for s in seeds])
                  for c in clients}
    macro = np.mean(list(per_client.values()))
    micro = np.mean([
        sum(np.sum(m[c][s][examples[c]]) for c in clients) /
        sum(np.sum(units[c][examples[c]]) for c in clients) for s in seeds])
    return [per_client[c] for c in clients] + [macro, micro]

  def combined(all_seeds, examples):
    values = [np.array(statistics(m, s, examples))
              for m, s in zip(methods, all_seeds)]
    return values[0] if len(values) == 1 else values[0] - values[1]

  point = combined(
      [list(range(len(m[clients[0]]))) for m in methods],
      {c: np.arange(len(methods[0][c][0])) for c in clients})
  replicates = np.array([
      combined([draws[b] for draws in seed_draws],
               {c: example_draws[c][b] for c in clients})
      for b in range(num_replicates)])
  result = [
      (point[k], _percentile(replicates[:, k], (1 - confidence) / 2),
       _percentile(replicates[:, k], (1 + confidence) / 2))
      for k in range(len(point))]
  return dict(zip(clients, result[:-2])), result[-2], result[-1]


class TQuantileExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(p=(0.975, 0.95, 0.995, 0.6, 0.025, 0.9999))
  def test_closed_form_quantiles(self, p):
    # df = 1 (Cauchy): tan(pi (p - 1/2)); df = 2: (2p - 1) / sqrt(2p(1-p)).
    # Far in the tail the float p itself limits both to ~1e-13.
    expected = math.tan(math.pi * (p - 0.5))
    self.assertAlmostEqual(intervals.t_quantile(p, 1), expected,
                           delta=1e-12 * abs(expected))
    expected = (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    self.assertAlmostEqual(intervals.t_quantile(p, 2), expected,
                           delta=1e-12 * abs(expected))

  @parameterized.product(p=(0.975, 0.95, 0.995, 0.6, 0.025, 0.9999))
  def test_closed_form_cdfs(self, p):
    # The CDFs of df = 3 and 4 in closed form, at t_quantile(p):
    # F_3(t) = 1/2 + (x / (1 + x^2) + atan(x)) / pi, x = t / sqrt(3);
    # F_4(t) = 1/2 + 3/8 u (1 - u^2 / 12), u = t / sqrt(1 + t^2 / 4).
    x = intervals.t_quantile(p, 3) / math.sqrt(3)
    self.assertAlmostEqual(0.5 + (x / (1 + x * x) + math.atan(x)) / math.pi,
                           p, delta=1e-15)
    t = intervals.t_quantile(p, 4)
    u = t / math.sqrt(1 + t * t / 4)
    self.assertAlmostEqual(0.5 + 3 / 8 * u * (1 - u * u / 12), p,
                           delta=1e-15)

  @parameterized.parameters(*_SCIPY_T)
  def test_against_scipy(self, p, df, expected):
    self.assertAlmostEqual(intervals.t_quantile(p, df), expected,
                           delta=1e-8 * expected)
    self.assertAlmostEqual(intervals.t_quantile(1 - p, df), -expected,
                           delta=1e-8 * expected)

  def test_median_and_normal_limit(self):
    self.assertEqual(intervals.t_quantile(0.5, 7), 0.0)
    # Far out in df, the normal quantile 1.959964 (t_1e5 = 1.959988).
    self.assertAlmostEqual(intervals.t_quantile(0.975, 100_000), 1.959988,
                           delta=1e-6)

  @parameterized.named_parameters(
      ('p_zero', 0.0, 3, 'p must be'),
      ('p_one', 1.0, 3, 'p must be'),
      ('df_zero', 0.9, 0, 'df must be'),
      ('df_fraction', 0.9, 2.5, 'df must be'),
  )
  def test_invalid(self, p, df, message):
    with self.assertRaisesRegex(ValueError, message):
      intervals.t_quantile(p, df)


class SeedIntervalExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # Mean 2, s = 1, t_{2,0.975} = 4.302652729749464 (= 0.95 /
      # sqrt(0.04875)): half-width 4.302652729749464 / sqrt(3) = 2.48413771.
      ('three_seeds', [1, 2, 3], 0.95, 2.0, 2.4841377117503285),
      # t_{2,0.95} = 0.9 / sqrt(2 * 0.95 * 0.05) = 2.9199855803537; / sqrt(3).
      ('confidence_90', [1, 2, 3], 0.9, 2.0, 1.6858544608470485),
      # Mean 0.6, s = 0.1 sqrt(2), s / sqrt(2) = 0.1; t_{1,0.975} =
      # tan(0.475 pi) = 12.7062047361747: half-width 1.27062047361747.
      ('two_seeds', [0.5, 0.7], 0.95, 0.6, 1.27062047361747),
      # Five seeds: mean 0.4, s = sqrt(0.001 / 4) = 0.0158114; t_{4,0.975}
      # = 2.7764451052 (scipy): 2.7764451052 * 0.0158114 / sqrt(5).
      ('five_seeds', [0.38, 0.40, 0.42, 0.41, 0.39], 0.95, 0.4,
       2.7764451051977987 * math.sqrt(0.001 / 4) / math.sqrt(5)),
      ('constant', [0.3, 0.3, 0.3], 0.95, 0.3, 0.0),
  )
  def test_interval(self, values, confidence, mean, half_width):
    estimate, low, high = intervals.seed_interval(values, confidence)
    self.assertAlmostEqual(estimate, mean, places=12)
    self.assertAlmostEqual(low, mean - half_width, places=9)
    self.assertAlmostEqual(high, mean + half_width, places=9)

  def test_one_seed(self):
    interval = intervals.seed_interval([0.7])
    self.assertEqual(interval.estimate, 0.7)
    self.assertTrue(math.isnan(interval.low) and math.isnan(interval.high))
    self.assertEqual(intervals.verdict(interval), intervals.UNDETERMINED)
    self.assertEqual(interval.to_json(),
                     {'estimate': 0.7, 'low': None, 'high': None})
    self.assertIsNone(interval.bounds())
    self.assertEqual(intervals.Interval(0.5, 0.25, 0.75).bounds(),
                     [0.25, 0.75])

  @parameterized.named_parameters(
      ('empty', [], 0.95, 'non-empty'),
      ('two_dimensional', [[1, 2]], 0.95, 'non-empty 1-D'),
      ('nan', [1, _NAN], 0.95, 'finite'),
      ('confidence', [1, 2], 1.0, 'confidence'),
  )
  def test_invalid(self, values, confidence, message):
    with self.assertRaisesRegex(ValueError, message):
      intervals.seed_interval(values, confidence)


class VerdictExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('contains_zero', (0.01, -0.02, 0.04), {}, 'no difference'),
      ('low_at_zero', (0.02, 0.0, 0.04), {}, 'no difference'),
      ('high_at_zero', (-0.02, -0.04, 0.0), {}, 'no difference'),
      ('zero_width_zero', (0.0, 0.0, 0.0), {}, 'no difference'),
      ('a_higher', (0.03, 0.01, 0.05), {}, 'A higher'),
      ('b_higher', (-0.03, -0.05, -0.01), {}, 'B higher'),
      ('named', (0.03, 0.01, 0.05), {'a': 'Lorar', 'b': 'FedAvg'},
       'Lorar higher'),
      ('named_b', (-0.03, -0.05, -0.01), {'a': 'Lorar', 'b': 'FedAvg'},
       'FedAvg higher'),
      ('nan', (0.1, _NAN, _NAN), {}, 'undetermined'),
  )
  def test_verdict(self, interval, names, expected):
    self.assertEqual(
        intervals.verdict(intervals.Interval(*interval), **names), expected)

  # The one rule of every page: both intervals exclude 0 on the same side.
  @parameterized.named_parameters(
      ('both_above', (0.1, 0.4), (0.05, 0.3), 'SIT higher'),
      ('both_below', (-0.60, -0.37), (-0.5, -0.1), 'FedSeIT higher'),
      # The FCL case of issue 65: the seed interval excludes 0, the
      # bootstrap does not: no difference (not "SIT lower").
      ('seed_only', (-0.60, -0.37), (-0.5, 0.1), 'no difference'),
      ('bootstrap_only', (-0.2, 0.3), (0.1, 0.2), 'no difference'),
      ('opposite_sides', (0.1, 0.2), (-0.3, -0.1), 'no difference'),
      ('touching_zero', (0.0, 0.2), (0.1, 0.2), 'no difference'),
      ('one_seed_bootstrap_excludes', None, (0.1, 0.2), 'undetermined'),
      ('one_seed_nan_bounds', (float('nan'), float('nan')), (0.1, 0.2),
       'undetermined'),
      ('one_seed_bootstrap_contains', None, (-0.1, 0.2), 'no difference'),
      ('nothing_defined', None, None, 'undetermined'),
      ('three_tuples', (0.2, 0.1, 0.3), (0.2, 0.15, 0.25), 'SIT higher'),
  )
  def test_comparison_verdict(self, seed, bootstrap, expected):
    self.assertEqual(
        intervals.comparison_verdict(seed, bootstrap, 'SIT', 'FedSeIT'),
        expected)

  def test_rule_text_names_both_intervals(self):
    self.assertIn('both of its 95 % intervals exclude 0',
                  intervals.VERDICT_RULE)


class BootstrapReferenceExecutionTest(tf.test.TestCase, parameterized.TestCase):
  """The vectorised bootstrap against `_reference` with the same draws."""

  def _assert_matches(self, result, expected):
    per_client, macro, micro = expected
    self.assertEqual(list(result.per_client), list(per_client))
    for client, interval in result.per_client.items():
      np.testing.assert_allclose(interval, per_client[client], rtol=0,
                                 atol=1e-12, err_msg=client)
    np.testing.assert_allclose(result.macro, macro, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.micro, micro, rtol=0, atol=1e-12)

  def _assert_point(self, result, point):
    per_client, macro, micro = point
    for client, value in per_client.items():
      self.assertAlmostEqual(result.per_client[client].estimate, value,
                             places=14)
    self.assertAlmostEqual(result.macro.estimate, macro, places=14)
    self.assertAlmostEqual(result.micro.estimate, micro, places=14)

  @parameterized.product(
      method=('a', 'b', 'difference'),
      resample_seeds=(False, True),
      confidence=(0.95, 0.8),
      seed=(0, 7),
  )
  def test_tiny_example(self, method, resample_seeds, confidence, seed):
    num_replicates = 400
    kwargs = dict(num_replicates=num_replicates, confidence=confidence,
                  seed=seed, resample_seeds=resample_seeds)
    if method == 'difference':
      result = bootstrap_lib.bootstrap_difference(_A, _B, **kwargs)
      methods, point, num_seeds = [_A, _B], _POINT_A_MINUS_B, (2, 3)
    else:
      outcomes, point, num_seeds = {
          'a': (_A, _POINT_A, (2,)), 'b': (_B, _POINT_B, (3,))}[method]
      result = bootstrap_lib.bootstrap_accuracy(outcomes, **kwargs)
      methods = [outcomes]
    self._assert_point(result, point)
    self._assert_matches(
        result, _reference(methods, num_replicates, resample_seeds, seed,
                           confidence))
    self.assertEqual(
        (result.num_seeds, result.num_replicates, result.confidence,
         result.resample_seeds, result.seed),
        (num_seeds, num_replicates, confidence, resample_seeds, seed))
    for interval in [result.macro, result.micro,
                     *result.per_client.values()]:
      self.assertLessEqual(interval.low, interval.high)

  @parameterized.product(resample_seeds=(False, True))
  def test_random_example(self, resample_seeds):
    # Three clients of unequal sizes, 3 and 4 seeds, B ordered differently.
    rng = np.random.default_rng(42)
    sizes = {'p': 23, 'q': 7, 'r': 41}
    a = {c: rng.random((3, n)) < 0.6 for c, n in sizes.items()}
    b = {c: rng.random((4, n)) < 0.5 for c, n in reversed(sizes.items())}
    result = bootstrap_lib.bootstrap_difference(
        a, b, num_replicates=300, seed=3, resample_seeds=resample_seeds)
    self._assert_matches(result, _reference([a, b], 300, resample_seeds, 3,
                                            0.95))

  @parameterized.product(
      method=('a', 'b', 'difference'),
      resample_seeds=(False, True),
  )
  def test_tiny_example_with_units(self, method, resample_seeds):
    kwargs = dict(num_replicates=300, seed=5, resample_seeds=resample_seeds,
                  units=_UNITS)
    if method == 'difference':
      result = bootstrap_lib.bootstrap_difference(_UNITS_A, _UNITS_B, **kwargs)
      methods, point = [_UNITS_A, _UNITS_B], _UNITS_POINT_A_MINUS_B
    else:
      outcomes, point = {'a': (_UNITS_A, _UNITS_POINT_A),
                         'b': (_UNITS_B, _UNITS_POINT_B)}[method]
      result = bootstrap_lib.bootstrap_accuracy(outcomes, **kwargs)
      methods = [outcomes]
    self._assert_point(result, point)
    self._assert_matches(
        result, _reference(methods, 300, resample_seeds, 5, 0.95, _UNITS))

  @parameterized.product(resample_seeds=(False, True))
  def test_random_example_with_units(self, resample_seeds):
    # Token counts of 1 to 30 per example; correct tokens up to them.
    rng = np.random.default_rng(7)
    sizes = {'p': 19, 'q': 6, 'r': 33}
    units = {c: rng.integers(1, 31, size=n) for c, n in sizes.items()}
    a = {c: rng.binomial(units[c], 0.6, size=(3, n))
         for c, n in sizes.items()}
    b = {c: rng.binomial(units[c], 0.4, size=(2, n))
         for c, n in sizes.items()}
    result = bootstrap_lib.bootstrap_difference(
        a, b, num_replicates=300, seed=4, resample_seeds=resample_seeds,
        units=units)
    self._assert_matches(result, _reference(
        [a, b], 300, resample_seeds, 4, 0.95, units))

  @parameterized.product(resample_seeds=(False, True))
  def test_one_unit_per_example_is_exact_match(self, resample_seeds):
    # Units of 1 give the very numbers of 0/1 outcomes (same draws).
    ones = {c: np.ones(len(v[0])) for c, v in _A.items()}
    kwargs = dict(num_replicates=200, seed=2, resample_seeds=resample_seeds)
    self.assertEqual(
        bootstrap_lib.bootstrap_difference(_A, _B, units=ones, **kwargs),
        bootstrap_lib.bootstrap_difference(_A, _B, **kwargs))


class BootstrapPropertiesExecutionTest(tf.test.TestCase,
                                       parameterized.TestCase):

  @parameterized.product(resample_seeds=(False, True))
  def test_identical_methods_give_zero(self, resample_seeds):
    # Paired: every replicate applies the same examples to A and B, so
    # A - B is 0 in every replicate (also with their seeds resampled apart,
    # since all seeds of a method agree here).
    rng = np.random.default_rng(0)
    outcomes = {c: np.tile(rng.random(n) < 0.4, (3, 1))
                for c, n in (('x', 50), ('y', 80))}
    result = bootstrap_lib.bootstrap_difference(outcomes, outcomes,
                                            resample_seeds=resample_seeds)
    for interval in [result.macro, result.micro,
                     *result.per_client.values()]:
      self.assertEqual(tuple(interval), (0.0, 0.0, 0.0))
    self.assertEqual(intervals.verdict(result.macro), 'no difference')

  def test_identical_seeds_without_seed_resampling_give_zero(self):
    # With seeds that disagree, A = B still gives exactly [0, 0] when only
    # examples are resampled.
    rng = np.random.default_rng(1)
    outcomes = {c: rng.random((3, n)) < 0.5 for c, n in (('x', 30),
                                                         ('y', 9))}
    result = bootstrap_lib.bootstrap_difference(outcomes, outcomes)
    self.assertEqual(tuple(result.macro), (0.0, 0.0, 0.0))
    self.assertEqual(tuple(result.micro), (0.0, 0.0, 0.0))

  @parameterized.product(resample_seeds=(False, True))
  def test_all_correct_against_all_wrong(self, resample_seeds):
    a = {'x': np.ones((3, 20)), 'y': np.ones((3, 5), dtype=bool)}
    b = {'x': np.zeros((2, 20)), 'y': np.zeros((2, 5))}
    result = bootstrap_lib.bootstrap_difference(a, b,
                                            resample_seeds=resample_seeds)
    for interval in [result.macro, result.micro,
                     *result.per_client.values()]:
      self.assertEqual(tuple(interval), (1.0, 1.0, 1.0))
    self.assertEqual(intervals.verdict(result.macro, 'A', 'B'), 'A higher')
    self.assertEqual(intervals.verdict(
        bootstrap_lib.bootstrap_difference(b, a).micro), 'B higher')

  def test_width_matches_normal_approximation(self):
    # One client, 1700 examples, one seed, 510 correct (p = 0.3): the
    # bootstrap's 95 % half-width is close to 1.96 sqrt(p (1-p) / n)
    # = 0.021784.
    outcomes = np.zeros((1, 1700))
    outcomes[0, np.random.default_rng(5).permutation(1700)[:510]] = 1
    result = bootstrap_lib.bootstrap_accuracy({'c': outcomes}, seed=11)
    expected = 1.959964 * math.sqrt(0.3 * 0.7 / 1700)
    self.assertAlmostEqual(result.macro.estimate, 0.3, places=14)
    self.assertAlmostEqual((result.macro.high - result.macro.low) / 2,
                           expected, delta=0.1 * expected)
    self.assertEqual(result.macro, result.micro)

  def test_seed_resampling_widens_with_seed_spread(self):
    # Seeds at 20 %, 50 % and 80 % on the same 200 examples: resampling
    # seeds adds their spread; on examples only the interval is narrow.
    outcomes = np.zeros((3, 200))
    for s, correct in enumerate((40, 100, 160)):
      outcomes[s, :correct] = 1
    fixed = bootstrap_lib.bootstrap_accuracy({'c': outcomes})
    both = bootstrap_lib.bootstrap_accuracy({'c': outcomes}, resample_seeds=True)
    self.assertEqual(fixed.macro.estimate, both.macro.estimate)
    self.assertGreater(both.macro.high - both.macro.low,
                       3 * (fixed.macro.high - fixed.macro.low))

  @parameterized.product(resample_seeds=(False, True))
  def test_client_difference(self, resample_seeds):
    interval = bootstrap_lib.client_difference(
        _A['x'], _B['x'], num_replicates=500, seed=4,
        resample_seeds=resample_seeds)
    # 2/3 - 1/3 (see the tiny example).
    self.assertAlmostEqual(interval.estimate, 1 / 3, places=14)
    per_client, _, _ = _reference([{'x': _A['x']}, {'x': _B['x']}], 500,
                                  resample_seeds, 4, 0.95)
    np.testing.assert_allclose(interval, per_client['x'], rtol=0, atol=1e-12)

  def test_reproducible(self):
    rng = np.random.default_rng(2)
    a = {'x': rng.random((3, 60)) < 0.5, 'y': rng.random((3, 90)) < 0.5}
    b = {'x': rng.random((2, 60)) < 0.4, 'y': rng.random((2, 90)) < 0.4}
    first = bootstrap_lib.bootstrap_difference(a, b, seed=5)
    self.assertEqual(first, bootstrap_lib.bootstrap_difference(a, b, seed=5))
    other = bootstrap_lib.bootstrap_difference(a, b, seed=6)
    self.assertEqual(first.macro.estimate, other.macro.estimate)
    self.assertNotEqual(first.macro, other.macro)

  def test_to_json(self):
    result = bootstrap_lib.bootstrap_accuracy(_A, num_replicates=10)
    data = json.loads(json.dumps(result.to_json()))
    self.assertEqual(list(data), [
        'macro_avg', 'micro_avg', 'per_client', 'num_seeds',
        'num_replicates', 'confidence', 'resample_seeds', 'seed'])
    self.assertAlmostEqual(data['macro_avg']['estimate'], 25 / 48)
    self.assertEqual(list(data['per_client']), ['x', 'y'])
    self.assertEqual(data['num_seeds'], [2])


class BootstrapInputExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('no_clients', {}, _B, 'at least one client'),
      ('one_dimensional', {'x': [1, 0, 1], 'y': _A['y']}, _B,
       r"client 'x'.*shape \[num_seeds, num_examples\]"),
      ('no_examples', {'x': [[], []], 'y': _A['y']}, _B, r"client 'x'"),
      ('not_binary', {'x': [[1, 0, 2], [1, 1, 0]], 'y': _A['y']}, _B,
       r"client 'x'.*0 or 1"),
      ('seed_counts', {'x': _A['x'], 'y': _B['y']}, _B,
       'same number of seeds'),
      ('other_clients', {'x': _A['x']}, _B, 'same clients'),
      ('other_examples', {'x': [[1, 0], [1, 1]], 'y': _A['y']}, _B,
       r"Client 'x'.*same examples, got 2 and 3"),
  )
  def test_invalid_outcomes(self, a, b, message):
    with self.assertRaisesRegex(ValueError, message):
      bootstrap_lib.bootstrap_difference(a, b)

  @parameterized.named_parameters(
      ('above_units', {'x': [[1, 2, 2]], 'y': [[3, 0]]}, _UNITS,
       r"A, client 'x'.*whole numbers from 0 to each example's units"),
      ('fraction', {'x': [[1, 0.5, 2]], 'y': [[3, 0]]}, _UNITS,
       r"A, client 'x'.*whole numbers"),
      ('negative', {'x': [[1, -1, 2]], 'y': [[3, 0]]}, _UNITS,
       r"A, client 'x'.*whole numbers"),
      ('unit_count', _UNITS_A, {'x': [2, 1], 'y': [4, 1]},
       r"A, client 'x': 3 examples but 2 units"),
      ('client_without_units', _UNITS_A, {'x': [2, 1, 3]},
       r"A: client 'y' has no units"),
      ('no_units', _UNITS_A, {'x': [2, 1, 3], 'y': [0, 0]},
       r"units, client 'y'.*positive sum"),
      ('fractional_units', _UNITS_A, {'x': [2, 1.5, 3], 'y': [4, 1]},
       r"units, client 'x'.*whole numbers"),
  )
  def test_invalid_units(self, a, units, message):
    with self.assertRaisesRegex(ValueError, message):
      bootstrap_lib.bootstrap_difference(a, _UNITS_B, units=units)

  def test_a_client_whose_replicates_draw_no_units_is_reported_not_raised(
      self):
    # Client x: 1 of 4 examples has units, so a replicate drawing only the
    # other three (probability (3/4)^4 = 0.32 each) has no accuracy for x;
    # the report names x and counts those replicates, and y and MicroAvg
    # keep their intervals (the demo's academic client, issue 63).
    outcomes = {'x': [[1, 0, 0, 0]], 'y': [[2, 0, 1]]}
    units = {'x': [1, 0, 0, 0], 'y': [2, 1, 3]}
    result = bootstrap_lib.bootstrap_accuracy(outcomes, units=units,
                                          num_replicates=200, seed=3)
    # Reference: the same draws (`_draw`'s order: x's, then y's).
    rng = np.random.default_rng(3)
    x_indices = rng.integers(0, 4, size=(200, 4))
    y_indices = rng.integers(0, 3, size=(200, 3))
    without_units = int(np.sum(np.all(x_indices != 0, axis=1)))
    self.assertBetween(without_units, 1, 199)
    y_acc = (np.sum(np.array([2., 0., 1.])[y_indices], axis=1)
             / np.sum(np.array([2., 1., 3.])[y_indices], axis=1))
    x_correct = np.sum(x_indices == 0, axis=1)  # Example 0: 1 of 1 unit.
    micro = (x_correct + np.sum(np.array([2., 0., 1.])[y_indices], axis=1)) / (
        x_correct + np.sum(np.array([2., 1., 3.])[y_indices], axis=1))

    x = result.per_client['x']
    self.assertEqual(x.estimate, 1.0)
    self.assertTrue(np.isnan(x.low) and np.isnan(x.high))
    self.assertIsNone(x.bounds())
    self.assertTrue(np.isnan(result.macro.low))
    self.assertEqual(intervals.verdict(result.macro), intervals.UNDETERMINED)
    self.assertEqual(result.undefined, {
        'x': f'{without_units} of 200 replicates drew only examples '
             'without scored units',
        'MacroAvg': f'{without_units} of 200 replicates drew only examples '
                    "without scored units on 'x'"})
    self.assertAllClose(result.per_client['y'][1:],
                        np.quantile(y_acc, [0.025, 0.975]))
    self.assertAllClose(result.micro[1:], np.quantile(micro, [0.025, 0.975]))
    self.assertEqual(result.to_json()['undefined'], result.undefined)
    # Without units every interval is drawn and nothing is reported.
    self.assertNotIn('undefined',
                     bootstrap_lib.bootstrap_accuracy(outcomes={'x': [[1, 0]]})
                     .to_json())

  @parameterized.named_parameters(
      ('replicates', dict(num_replicates=0), 'num_replicates'),
      ('confidence', dict(confidence=0.0), 'confidence'),
  )
  def test_invalid_arguments(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      bootstrap_lib.bootstrap_accuracy(_A, **kwargs)


if __name__ == '__main__':
  tf.test.main()
