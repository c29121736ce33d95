"""Tests of the one report engine (`apps.common.report_engine`).

Numbers are derived by hand (in the comments) or by a numpy re-implementation
of the bootstraps from their documented draw order, not by the code under
test.
"""

import math

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from apps.common import report_engine as engine
from tff_nlp import errors
from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals

# t_{1, 0.975} and t_{2, 0.975}.
_T1 = 12.706204736174707
_T2 = 4.302652729749464

# Two methods, two seeds, units x (3 examples) and y (2), one test set:
#
#   A  x  seed 0: 1 1 1   y  seed 0: 1 0      B  x  seed 0: 0 1 0   y  0 0
#         seed 1: 1 1 0      seed 1: 1 1            seed 1: 1 0 0      1 0
#
# MICRO (over a seed's 5 examples): A 4/5, 4/5; B 1/5, 2/5; A - B 0.6, 0.4.
# MACRO (mean of x's and y's means): A (1 + 1/2)/2 = 3/4, (2/3 + 1)/2 = 5/6;
#   B (1/3 + 0)/2 = 1/6, (1/3 + 1/2)/2 = 5/12; A - B 7/12, 5/12.
# Either way the mean difference is 1/2 and the two per-seed differences are
# 1/2 ± d (d = 0.1 or 1/12): s = sqrt(2) d, half width t_1 s / sqrt(2) = t_1 d.
_OUTCOMES = {
    'A': {0: {'x': [1, 1, 1], 'y': [1, 0]}, 1: {'x': [1, 1, 0], 'y': [1, 1]}},
    'B': {0: {'x': [0, 1, 0], 'y': [0, 0]}, 1: {'x': [1, 0, 0], 'y': [1, 0]}},
}


def _records(outcomes, metric='hits'):
  return [engine.Record(method, seed, metric, value, unit=unit, example=i)
          for method, seeds in outcomes.items()
          for seed, units in seeds.items()
          for unit, values in units.items()
          for i, value in enumerate(values)]


def _shared_reference(outcomes, average, num_replicates, seed):
  """The stratified paired bootstrap of A - B re-implemented from its
  documented draw order (`intervals`): per unit in order, integers(0, n,
  size=(B, n)), shared by A and B and by the seeds."""
  rng = np.random.default_rng(seed)
  units = list(outcomes['A'][0])
  correct = {m: [] for m in 'AB'}
  sizes = []
  for unit in units:
    n = len(outcomes['A'][0][unit])
    index = rng.integers(0, n, size=(num_replicates, n))
    sizes.append(n)
    for m in 'AB':
      y = np.array([outcomes[m][s][unit] for s in outcomes[m]], float)
      correct[m].append(y[:, index].sum(axis=(0, 2)) / len(y))
  if average == engine.MICRO:
    replicates = (np.sum(correct['A'], axis=0)
                  - np.sum(correct['B'], axis=0)) / sum(sizes)
  else:
    replicates = np.mean([(a - b) / n for a, b, n in
                          zip(correct['A'], correct['B'], sizes)], axis=0)
  return np.quantile(replicates, [0.025, 0.975])


def _per_seed_reference(a, b, num_replicates, seed):
  """The per-seed pair bootstrap re-implemented (`continual`): integers(0,
  P, size=(B, S, P)), the mean of the drawn differences."""
  difference = np.asarray(a, float) - np.asarray(b, float)
  num_seeds, num_pairs = difference.shape
  draws = np.random.default_rng(seed).integers(
      0, num_pairs, size=(num_replicates, num_seeds, num_pairs))
  replicates = np.array([
      np.mean([difference[s, draws[r, s]] for s in range(num_seeds)])
      for r in range(num_replicates)])
  return np.percentile(replicates, [2.5, 97.5])


class TableExecutionTest(tf.test.TestCase):

  def test_seed_values_micro_and_macro_by_hand(self):
    table = engine.Table(_records(_OUTCOMES))
    micro = [table.seed_value(m, 'hits', s) for m in 'AB' for s in (0, 1)]
    self.assertAllClose(micro, [0.8, 0.8, 0.2, 0.4])
    macro = [table.seed_value(m, 'hits', s, engine.MACRO)
             for m in 'AB' for s in (0, 1)]
    self.assertAllClose(macro, [3 / 4, 5 / 6, 1 / 6, 5 / 12])
    self.assertEqual(table.seeds('A', 'hits'), [0, 1])
    self.assertEqual(list(table.examples('A', 'hits', 0)), ['x', 'y'])

  def test_a_seed_record_is_the_seed_number_and_must_match_its_examples(self):
    # The run recorded 0.8 + 1e-12 (another summation order): within
    # TOLERANCE, so the run's own number is kept.
    records = _records({'A': {0: {'x': [1, 1, 1, 1, 0]}}}) + [
        engine.Record('A', 0, 'hits', 0.8 + 1e-12)]
    self.assertEqual(engine.Table(records).seed_value('A', 'hits', 0),
                     0.8 + 1e-12)
    records[-1] = engine.Record('A', 0, 'hits', 0.6)
    with self.assertRaisesRegex(
        errors.InputError, 'A, seed 0: its hits examples give 0.800000, the '
        'run recorded 0.600000'):
      engine.Table(records).seed_value('A', 'hits', 0)

  def test_repeated_records_are_refused(self):
    with self.assertRaisesRegex(errors.InputError, 'two records of acc'):
      engine.Table([engine.Record('A', 0, 'acc', 0.5),
                    engine.Record('A', 0, 'acc', 0.6)])
    with self.assertRaisesRegex(errors.InputError, 'repeats an example'):
      engine.Table([engine.Record('A', 0, 'hits', 1, example=3),
                    engine.Record('A', 0, 'hits', 0, example=3)])


class MethodIntervalsExecutionTest(tf.test.TestCase):

  def test_mean_and_t_interval_by_hand(self):
    # ACC 0.6, 0.7, 0.8: mean 0.7, s = 0.1, 0.7 ± t_2 0.1 / sqrt(3)
    # = 0.7 ± 0.248414. Bytes 10, 20, 60: mean 30. `late` misses seed 2.
    records = [engine.Record('A', s, 'acc', v)
               for s, v in enumerate((0.6, 0.7, 0.8))]
    records += [engine.Record('A', s, 'bytes', v)
                for s, v in enumerate((10, 20, 60))]
    records += [engine.Record('A', 0, 'late', 1.0),
                engine.Record('A', 1, 'late', 1.0)]
    means = engine.method_intervals(engine.Table(records), 'A')
    self.assertEqual(list(means), ['acc', 'bytes'])
    half = _T2 * 0.1 / math.sqrt(3)
    self.assertAllClose(list(means['acc']), [0.7, 0.7 - half, 0.7 + half])
    self.assertAlmostEqual(half, 0.248414, places=6)
    self.assertEqual(means['bytes'].estimate, 30.0)

  def test_one_seed_or_a_non_finite_number_has_no_interval(self):
    table = engine.Table([engine.Record('A', 0, 'acc', 0.5),
                          engine.Record('A', 0, 'loss', 1.0),
                          engine.Record('A', 1, 'loss', math.nan),
                          engine.Record('B', 3, 'acc', 0.25)])
    self.assertIsNone(engine.method_intervals(table, 'B')['acc'].bounds())
    self.assertEqual(engine.method_intervals(table, 'B')['acc'].estimate, 0.25)
    loss = engine.method_intervals(table, 'A')['loss']
    self.assertTrue(math.isnan(loss.estimate))
    self.assertIsNone(loss.bounds())
    # 'acc' of A is in seed 0 only, not in each of A's seeds (0 and 1).
    self.assertNotIn('acc', engine.method_intervals(table, 'A'))


class CompareExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('micro', engine.MICRO, [0.6, 0.4], 0.1),
      ('macro', engine.MACRO, [7 / 12, 5 / 12], 1 / 12))
  def test_shared_examples(self, average, per_seed, spread):
    table = engine.Table(_records(_OUTCOMES))
    result = engine.compare(
        table, engine.Comparison('A', 'B', 'hits', average=average),
        num_replicates=500, seed=3)
    self.assertEqual(result.seeds, [0, 1])
    self.assertAllClose(result.per_seed, per_seed)
    self.assertAllClose(list(result.seed), [0.5, 0.5 - _T1 * spread,
                                      0.5 + _T1 * spread])
    self.assertAllClose(
        [result.bootstrap.low, result.bootstrap.high],
        _shared_reference(_OUTCOMES, average, 500, 3), atol=1e-12)
    # The seed interval holds 0: whatever the bootstrap says, no call.
    self.assertEqual(result.verdict, 'no difference')

  def test_one_unit_is_the_client_difference_bit_for_bit(self):
    # A report moved onto the engine keeps its numbers: the one-unit shared
    # bootstrap is `bootstrap_lib.client_difference` exactly.
    outcomes = {m: {s: {'': u['x'] + u['y']} for s, u in seeds.items()}
                for m, seeds in _OUTCOMES.items()}
    result = engine.compare(engine.Table(_records(outcomes)),
                            engine.Comparison('A', 'B', 'hits'))
    want = bootstrap_lib.client_difference(
        [outcomes['A'][s][''] for s in (0, 1)],
        [outcomes['B'][s][''] for s in (0, 1)])
    self.assertEqual(tuple(result.bootstrap), tuple(want))

  @parameterized.named_parameters(
      ('a_always', 1, 0, [1.0, 1.0], 'Sparse higher'),
      ('b_always', 0, 1, [-1.0, -1.0], 'Dense higher'),
      ('identical', 1, 1, [0.0, 0.0], 'no difference'))
  def test_degenerate_outcomes(self, a, b, interval, verdict):
    # Every seed gives the same difference (s = 0: the seed interval is that
    # point), and every replicate too.
    outcomes = {'sparse': {s: {'': [a] * 4} for s in (0, 1)},
                'dense': {s: {'': [b] * 4} for s in (0, 1)}}
    result = engine.compare(
        engine.Table(_records(outcomes)),
        engine.Comparison('sparse', 'dense', 'hits',
                          names=('Sparse', 'Dense')), num_replicates=200)
    self.assertEqual(result.seed.bounds(), interval)
    self.assertEqual([result.bootstrap.low, result.bootstrap.high], interval)
    self.assertEqual(result.verdict, verdict)

  def test_per_seed_examples_by_hand(self):
    # One seed, one client, two tasks: A - B = 0.1 and 0.3. The replicates
    # are 0.1, 0.2, 0.3 with probabilities 1/4, 1/2, 1/4, so the 2.5% and
    # 97.5% percentiles are 0.1 and 0.3 around 0.2; one seed: undetermined.
    outcomes = {'A': {0: {0: [0.6, 0.8]}}, 'B': {0: {0: [0.5, 0.5]}}}
    result = engine.compare(
        engine.Table(_records(outcomes, 'acc')),
        engine.Comparison('A', 'B', 'acc', examples=engine.PER_SEED))
    self.assertAllClose(list(result.bootstrap), [0.2, 0.1, 0.3])
    self.assertIsNone(result.seed.bounds())
    self.assertEqual(result.verdict, 'undetermined')

  def test_per_seed_examples_against_numpy(self):
    # Three seeds, each with its own tasks: 2 clients x 3 tasks, the run's
    # recorded ACC beside them (the mean of the clients' means).
    rng = np.random.default_rng(0)
    finals = {m: rng.uniform(size=(3, 2, 3)) for m in 'AB'}
    records = []
    for m, final in finals.items():
      for s, matrix in enumerate(final):
        records.append(engine.Record(m, s, 'acc',
                                     float(np.mean(matrix.mean(axis=1)))))
        records += [engine.Record(m, s, 'acc', v, unit=c, example=t)
                    for c, row in enumerate(matrix) for t, v in enumerate(row)]
    result = engine.compare(
        engine.Table(records),
        engine.Comparison('A', 'B', 'acc', average=engine.MACRO,
                          examples=engine.PER_SEED), num_replicates=300)
    per_seed = (finals['A'] - finals['B']).mean(axis=(1, 2))
    self.assertAllClose(result.per_seed, per_seed)
    self.assertAllClose(
        [result.bootstrap.low, result.bootstrap.high],
        _per_seed_reference(finals['A'].reshape(3, 6),
                            finals['B'].reshape(3, 6), 300, 0), atol=1e-12)

  def test_seeds_agreeing_do_not_call_what_the_pairs_do_not_support(self):
    # Every seed: pair differences +0.5 and -0.3, mean +0.1. The seeds agree
    # exactly ([0.1, 0.1]); the pairs' interval holds 0: no difference.
    outcomes = {'A': {s: {0: [0.9, 0.3]} for s in (0, 1)},
                'B': {s: {0: [0.4, 0.6]} for s in (0, 1)}}
    result = engine.compare(
        engine.Table(_records(outcomes, 'acc')),
        engine.Comparison('A', 'B', 'acc', examples=engine.PER_SEED))
    self.assertAllClose(result.seed.bounds(), [0.1, 0.1])
    self.assertLess(result.bootstrap.low, 0.0)
    self.assertGreater(result.bootstrap.high, 0.0)
    self.assertEqual(result.verdict, 'no difference')

  def test_without_examples_only_the_seed_interval(self):
    # BLEU 0.31, 0.30 against 0.10, 0.10: differences 0.21 and 0.20, mean
    # 0.205, s = 0.005 sqrt(2), 0.205 ± t_1 0.005 = [0.1415, 0.2685]. It
    # excludes 0, yet without the bootstrap's interval nothing is called.
    records = [engine.Record('A', 0, 'bleu', 0.31),
               engine.Record('A', 1, 'bleu', 0.30),
               engine.Record('B', 0, 'bleu', 0.10),
               engine.Record('B', 1, 'bleu', 0.10)]
    result = engine.compare(engine.Table(records),
                            engine.Comparison('A', 'B', 'bleu'))
    self.assertIsNone(result.bootstrap)
    self.assertAllClose(list(result.seed), [0.205, 0.205 - _T1 * 0.005,
                                      0.205 + _T1 * 0.005])
    self.assertEqual(result.verdict, 'undetermined')
    self.assertIsNone(result.to_json()['bootstrap_ci95'])

  def test_compare_all_skips_methods_not_run(self):
    table = engine.Table(_records(_OUTCOMES))
    found = engine.compare_all(table, [
        engine.Comparison('A', 'B', 'hits'),
        engine.Comparison('A', 'C', 'hits'),
        engine.Comparison('B', 'A', 'other')], num_replicates=50)
    self.assertEqual(list(found), ['A - B'])
    self.assertAllClose(found['A - B'].per_seed, [0.6, 0.4])


class CompareRefusesExecutionTest(tf.test.TestCase):

  def test_no_common_seed(self):
    table = engine.Table([engine.Record('A', 0, 'acc', 0.5),
                          engine.Record('B', 1, 'acc', 0.5)])
    with self.assertRaisesRegex(ValueError, 'A and B share no seed'):
      engine.compare(table, engine.Comparison('A', 'B', 'acc'))

  def test_unpaired_examples(self):
    for b, match in (([1, 0], 'different lengths'),
                     ([1, 0, 1], 'different examples')):
      records = _records({'A': {0: {'': [1, 0, 1]}}}) + [
          engine.Record('B', 0, 'hits', v, example=i + (len(b) == 3))
          for i, v in enumerate(b)]
      with self.assertRaisesRegex(errors.InputError,
                                  f'A and B, seed 0, .*{match}'):
        engine.compare(engine.Table(records),
                       engine.Comparison('A', 'B', 'hits'))

  def test_shared_examples_must_be_one_test_set(self):
    outcomes = {m: {0: {'': [1, 0]}, 1: {'': [1, 0, 1]}} for m in 'AB'}
    with self.assertRaisesRegex(errors.InputError, 'shared examples'):
      engine.compare(engine.Table(_records(outcomes)),
                     engine.Comparison('A', 'B', 'hits'))

  def test_macro_per_seed_needs_units_of_one_size(self):
    outcomes = {m: {0: {0: [0.5], 1: [0.5, 0.5]}} for m in 'AB'}
    with self.assertRaisesRegex(errors.InputError, 'units of different'):
      engine.compare(engine.Table(_records(outcomes, 'acc')),
                     engine.Comparison('A', 'B', 'acc', average=engine.MACRO,
                                       examples=engine.PER_SEED))


# Token accuracy: each example scores `size` tokens, its value the correct
# ones. Two methods, two seeds, units x (2 examples of 3 and 1 tokens) and y
# (1 example of 2 tokens), the same sizes in every seed:
#
#   A  seed 0: x 3 1  y 2     B  seed 0: x 1 0  y 0
#      seed 1: x 2 1  y 1        seed 1: x 3 0  y 2
#
# MICRO (correct tokens over 6): A 6/6, 4/6; B 1/6, 5/6.
# MACRO (x's over 4 tokens, y's over 2): A (1 + 1)/2 = 1, (3/4 + 1/2)/2 = 5/8;
#   B (1/4 + 0)/2 = 1/8, (3/4 + 1)/2 = 7/8.
_TOKENS = {
    'A': {0: {'x': [3, 1], 'y': [2]}, 1: {'x': [2, 1], 'y': [1]}},
    'B': {0: {'x': [1, 0], 'y': [0]}, 1: {'x': [3, 0], 'y': [2]}},
}
_SIZES = {'x': [3, 1], 'y': [2]}


def _token_records(outcomes=_TOKENS, sizes=_SIZES):
  return [engine.Record(method, seed, 'tokens', value, unit=unit, example=i,
                        size=sizes[unit][i])
          for method, seeds in outcomes.items()
          for seed, units in seeds.items()
          for unit, values in units.items()
          for i, value in enumerate(values)]


def _stacked(outcomes, method):
  return {unit: np.array([outcomes[method][s][unit]
                          for s in outcomes[method]], np.float64)
          for unit in outcomes[method][0]}


class SizedExamplesExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_seed_values_are_ratios_of_sums_by_hand(self):
    table = engine.Table(_token_records())
    micro = [table.seed_value(m, 'tokens', s) for m in 'AB' for s in (0, 1)]
    self.assertAllClose(micro, [1.0, 4 / 6, 1 / 6, 5 / 6])
    macro = [table.seed_value(m, 'tokens', s, engine.MACRO)
             for m in 'AB' for s in (0, 1)]
    self.assertAllClose(macro, [1.0, 5 / 8, 1 / 8, 7 / 8])
    # One unit alone: A's x in seed 1, 3 of 4 tokens.
    self.assertEqual(table.seed_value('A', 'tokens', 1, unit='x'), 0.75)
    self.assertEqual(engine.Table(_records(_OUTCOMES)).seed_value(
        'A', 'hits', 1, unit='x'), 2 / 3)

  @parameterized.named_parameters(
      ('micro', engine.MICRO, False), ('macro', engine.MACRO, False),
      ('macro_resampling_seeds', engine.MACRO, True))
  def test_shared_bootstrap_weighs_sizes_bit_for_bit(self, average,
                                                     resample_seeds):
    result = engine.compare(
        engine.Table(_token_records()),
        engine.Comparison('A', 'B', 'tokens', average=average,
                          resample_seeds=resample_seeds),
        num_replicates=300, seed=5)
    want = bootstrap_lib.bootstrap_difference(
        _stacked(_TOKENS, 'A'), _stacked(_TOKENS, 'B'), num_replicates=300,
        seed=5, resample_seeds=resample_seeds,
        units={u: np.array(v, np.float64) for u, v in _SIZES.items()})
    self.assertEqual(
        tuple(result.bootstrap),
        tuple(want.macro if average == engine.MACRO else want.micro))
    self.assertEqual(result.drawn, want)
    self.assertEqual(list(result.drawn.per_client), ['x', 'y'])

  def test_resampled_seeds_and_drawn_without_sizes(self):
    table = engine.Table(_records(_OUTCOMES))
    result = engine.compare(
        table, engine.Comparison('A', 'B', 'hits', resample_seeds=True),
        num_replicates=200)
    want = bootstrap_lib.bootstrap_difference(
        _stacked(_OUTCOMES, 'A'), _stacked(_OUTCOMES, 'B'),
        num_replicates=200, resample_seeds=True)
    self.assertEqual(tuple(result.bootstrap), tuple(want.micro))
    self.assertEqual(result.drawn, want)
    self.assertIsNone(engine.compare(
        engine.Table(_records({'A': {0: {0: [0.6]}}, 'B': {0: {0: [0.5]}}})),
        engine.Comparison('A', 'B', 'hits', examples=engine.PER_SEED)).drawn)

  @parameterized.named_parameters(('plain', False), ('seeds', True))
  def test_bootstrap_method_is_bootstrap_accuracy(self, resample_seeds):
    table = engine.Table(_token_records())
    self.assertEqual(
        engine.bootstrap_method(table, 'A', 'tokens', num_replicates=100,
                                seed=2, resample_seeds=resample_seeds),
        bootstrap_lib.bootstrap_accuracy(
            _stacked(_TOKENS, 'A'), num_replicates=100, seed=2,
            resample_seeds=resample_seeds,
            units={u: np.array(v, np.float64) for u, v in _SIZES.items()}))
    self.assertIsNone(engine.bootstrap_method(
        engine.Table([engine.Record('A', 0, 'acc', 0.5)]), 'A', 'acc'))

  def test_sizes_must_be_everywhere_and_the_same(self):
    records = _token_records()
    records[0] = records[0]._replace(size=None)
    with self.assertRaisesRegex(errors.InputError, 'some examples have a size'):
      engine.Table(records)
    other = _token_records(sizes={'x': [3, 1], 'y': [3]})
    records = [r for r in _token_records() if r.method == 'A'] + [
        r for r in other if r.method == 'B']
    with self.assertRaisesRegex(errors.InputError, 'other example sizes'):
      engine.compare(engine.Table(records),
                     engine.Comparison('A', 'B', 'tokens'))
    with self.assertRaisesRegex(ValueError, 'shared only'):
      engine.compare(engine.Table(_token_records()),
                     engine.Comparison('A', 'B', 'tokens',
                                       examples=engine.PER_SEED))


class RenderTest(tf.test.TestCase):

  def test_json_fields_and_renames(self):
    result = engine.Difference(
        engine.Comparison('a', 'b', 'acc'), [0, 1], [0.1, 0.3],
        intervals.Interval(0.2, -0.1, 0.5), intervals.Interval(0.2, 0.1, 0.3),
        'no difference')
    self.assertEqual(list(result.to_json().items()), [
        ('a', 'a'), ('b', 'b'), ('seeds', [0, 1]), ('difference', 0.2),
        ('per_seed', [0.1, 0.3]), ('seed_ci95', [-0.1, 0.5]),
        ('bootstrap_ci95', [0.1, 0.3]), ('verdict', 'no difference')])
    self.assertEqual(
        list(result.to_json(('difference', 'bootstrap_ci95'),
                            {'bootstrap_ci95': 'pair_bootstrap_ci95'})),
        ['difference', 'pair_bootstrap_ci95'])

  def test_difference_cells(self):
    # -0.0126 -> -1.26 points, 0.0046 -> +0.46 (signed) or 0.46.
    self.assertEqual(
        engine.difference_cells(0.0123, [-0.0126, 0.0046],
                                [-0.0080, -0.0007], 'no difference'),
        ['+1.23', '[-1.26, +0.46]', '[-0.80, -0.07]', 'no difference'])
    self.assertEqual(
        engine.difference_cells(-1.5, None, [-2.0, -1.0], 'B higher',
                                scale=1.0, signed=False),
        ['-1.50', 'n=1', '[-2.00, -1.00]', 'B higher'])
    self.assertEqual(engine.difference_cells(0.0, None, None, 'x')[1:3],
                     ['n=1', '–'])
    self.assertEqual(engine.markdown_row(['a', 'b']), '| a | b |')
    self.assertEqual(engine.interval_cell(None, missing='(n=1)'), '(n=1)')
    self.assertEqual(engine.verdict_note().count(intervals.VERDICT_RULE), 1)

  def test_digits_and_missing(self):
    # 0.0126 -> 1.26 points -> 1.3 to one decimal; 0.0044 -> 0.4.
    self.assertEqual(
        engine.difference_cells(0.0123, None, [-0.0126, 0.0044], 'x',
                                digits=1, missing='–'),
        ['+1.2', '–', '[-1.3, +0.4]', 'x'])
    self.assertEqual(engine.interval_cell([0.1234, 0.5], digits=1),
                     '[12.3, 50.0]')

  def test_with_bootstrap(self):
    # Seed records only: A - B = 0.4 in both seeds, a seed interval above 0
    # and no bootstrap (undetermined). SacreBLEU's bootstrap, say, above 0
    # too: A higher; containing 0: no difference.
    table = engine.Table(
        engine.Record(m, s, 'bleu', v) for m, s, v in (
            ('a', 0, 0.5), ('a', 1, 0.6), ('b', 0, 0.1), ('b', 1, 0.2)))
    difference = engine.compare(
        table, engine.Comparison('a', 'b', 'bleu', names=('A', 'B')))
    self.assertIsNone(difference.bootstrap)
    self.assertEqual(difference.verdict, intervals.UNDETERMINED)
    above = intervals.Interval(0.3, 0.1, 0.5)
    called = difference.with_bootstrap(above)
    self.assertEqual((called.bootstrap, called.verdict), (above, 'A higher'))
    self.assertEqual(called.seed, difference.seed)
    self.assertEqual(difference.with_bootstrap(
        intervals.Interval(0.0, -0.1, 0.1)).verdict, intervals.NO_DIFFERENCE)

  def test_stored_bounds(self):
    self.assertEqual(engine.stored_bounds([0.1, 0.2]), (0.1, 0.2))
    self.assertEqual(engine.stored_bounds(
        {'estimate': 0.15, 'low': 0.1, 'high': 0.2}), (0.1, 0.2))
    for missing in (None, [], {'estimate': 0.1, 'low': None, 'high': None},
                    [None, None]):
      self.assertIsNone(engine.stored_bounds(missing))

  def test_stored_verdict(self):
    # Both intervals above 0: A higher; one of them missing: undetermined;
    # one containing 0: no difference.
    self.assertEqual(engine.stored_verdict(
        [0.1, 0.2], {'estimate': 0.2, 'low': 0.05, 'high': 0.3}, 'A', 'B'),
                     'A higher')
    self.assertEqual(engine.stored_verdict(None, [0.1, 0.2]),
                     intervals.UNDETERMINED)
    self.assertEqual(engine.stored_verdict([-0.1, 0.2], [0.1, 0.2]),
                     intervals.NO_DIFFERENCE)


if __name__ == '__main__':
  tf.test.main()
