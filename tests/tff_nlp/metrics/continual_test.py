"""Tests of continual-learning metrics, heatmaps and the FedSeIT table."""

import math

from absl.testing import parameterized
import matplotlib.image
import numpy as np
import tensorflow as tf

from tff_nlp import metrics
from tff_nlp.metrics import continual

_NAN = math.nan

# acc[i, j]: accuracy on task j after learning task i.
#
# _ACC_A:              task 0  task 1  task 2
#   after task 0       0.90
#   after task 1       0.80    0.85
#   after task 2       0.70    0.90    0.75
# ACC = (0.70 + 0.90 + 0.75) / 3 = 2.35 / 3 = 0.78333.
# Forgetting: task 0: max(0.90, 0.80) - 0.70 = 0.20; task 1: 0.85 - 0.90
#   = -0.05 (it improved); mean 0.15 / 2 = 0.075.
# BWT: task 0: 0.70 - 0.90 = -0.20; task 1: 0.90 - 0.85 = 0.05; mean -0.075.
_ACC_A = [[0.90, _NAN, _NAN],
          [0.80, 0.85, _NAN],
          [0.70, 0.90, 0.75]]
# _ACC_B: task 0 peaks after task 1, so forgetting (from the best earlier
# accuracy) and -BWT (from the accuracy when learned) differ.
#   after task 0       0.60
#   after task 1       0.90    0.80
#   after task 2       0.50    0.70    0.90
# ACC = 2.1 / 3 = 0.7. Forgetting: max(0.60, 0.90) - 0.50 = 0.40 and
# 0.80 - 0.70 = 0.10: mean 0.25. BWT: 0.50 - 0.60 = -0.10 and 0.70 - 0.80 =
# -0.10: mean -0.10.
_ACC_B = [[0.60, _NAN, _NAN],
          [0.90, 0.80, _NAN],
          [0.50, 0.70, 0.90]]


class MacroF1ExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_hand_example(self):
    # labels      0 0 1 1 2      class 0: TP 1 (doc 0), FN 1 (doc 1),
    # predictions 0 1 1 1 0      FP 1 (doc 4): F1 = 2/(2+1+1) = 0.5;
    # class 1: TP 2, FP 1 (doc 1), FN 0: F1 = 4/5 = 0.8; class 2: TP 0,
    # FN 1: F1 = 0; class 3 is in neither and is left out:
    # (0.5 + 0.8 + 0) / 3 = 13/30 = 0.43333.
    self.assertAlmostEqual(
        continual.macro_f1([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], 4), 13 / 30)

  @parameterized.named_parameters(
      ('perfect', [0, 1, 2, 2], [0, 1, 2, 2], 1.0),
      # Class 1 only predicted (F1 0), class 0: TP 1, FN 1: 2/3.
      ('predicted_only_class_counts', [0, 0], [0, 1], (2 / 3 + 0) / 2),
      ('all_wrong', [0, 1], [1, 0], 0.0),
  )
  def test_cases(self, labels, predictions, expected):
    self.assertAlmostEqual(continual.macro_f1(labels, predictions, 3),
                           expected)

  def test_matches_scikit_learn(self):
    try:
      # pylint: disable-next=g-import-not-at-top
      from sklearn import metrics as sk_metrics
    except ImportError:
      self.skipTest('scikit-learn is not installed.')
    rng = np.random.default_rng(0)
    for _ in range(10):
      labels = rng.integers(0, 3, size=20)
      predictions = rng.integers(0, 4, size=20)
      self.assertAlmostEqual(
          continual.macro_f1(labels, predictions, 5),
          sk_metrics.f1_score(labels, predictions, average='macro'))

  @parameterized.named_parameters(
      ('lengths', [0, 1], [0], 'one length'),
      ('empty', [], [], 'non-empty'),
      ('out_of_range', [0, 3], [0, 1], r'\[0, 3\)'),
  )
  def test_invalid_input_raises(self, labels, predictions, message):
    with self.assertRaisesRegex(ValueError, message):
      continual.macro_f1(np.array(labels, int), np.array(predictions, int), 3)


class AccuracyMatrixExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('a', _ACC_A, 2.35 / 3, 0.075, -0.075),
      ('b', _ACC_B, 0.7, 0.25, -0.10),
      # One task: nothing to forget.
      ('single_task', [[0.8]], 0.8, 0.0, 0.0),
      # Two tasks: task 0 0.9 -> 0.6: forgetting 0.3, BWT -0.3;
      # ACC (0.6 + 0.7) / 2.
      ('two_tasks', [[0.9, _NAN], [0.6, 0.7]], 0.65, 0.3, -0.3),
  )
  def test_hand_computed(self, acc, average, forget, bwt):
    self.assertAlmostEqual(continual.average_accuracy(acc), average)
    self.assertAlmostEqual(continual.forgetting(acc), forget)
    self.assertAlmostEqual(continual.backward_transfer(acc), bwt)

  def test_entries_above_the_diagonal_are_ignored(self):
    filled = np.nan_to_num(np.array(_ACC_B), nan=0.99)
    self.assertAlmostEqual(continual.average_accuracy(filled), 0.7)
    self.assertAlmostEqual(continual.forgetting(filled), 0.25)
    self.assertAlmostEqual(continual.backward_transfer(filled), -0.10)

  def test_summary_of_several_clients_is_the_mean(self):
    self.assertEqual(list(continual.summary(_ACC_A)),
                     ['average_accuracy', 'forgetting', 'backward_transfer'])
    both = continual.summary(np.stack([_ACC_A, _ACC_B]))
    # ACC (0.78333 + 0.7) / 2; F (0.075 + 0.25) / 2; BWT (-0.075 - 0.1) / 2.
    self.assertAlmostEqual(both['average_accuracy'], (2.35 / 3 + 0.7) / 2)
    self.assertAlmostEqual(both['forgetting'], 0.1625)
    self.assertAlmostEqual(both['backward_transfer'], -0.0875)

  @parameterized.named_parameters(
      ('nan_below_diagonal', [[0.9, _NAN], [_NAN, 0.7]], 'finite'),
      ('not_square', [[0.9, 0.8]], r'\[T, T\]'),
      ('empty', np.zeros([0, 0]), r'\[T, T\]'),
  )
  def test_invalid_matrix_raises(self, acc, message):
    for fn in (continual.average_accuracy, continual.forgetting,
               continual.backward_transfer):
      with self.assertRaisesRegex(ValueError, message):
        fn(acc)


class PairBootstrapExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_final_accuracies_are_the_last_rows(self):
    nan = np.nan
    acc = [[[0.5, nan], [0.4, 0.9]], [[0.7, nan], [0.6, 0.8]]]
    self.assertAllClose(continual.final_accuracies(acc), [0.4, 0.9, 0.6, 0.8])

  def test_two_pairs_by_hand(self):
    # a - b = [0.1, 0.3]: a replicate's mean is 0.1, 0.2 or 0.3 with
    # probabilities 1/4, 1/2, 1/4; the 95% percentile interval is [0.1, 0.3].
    interval = continual.pair_bootstrap_difference([[0.6, 0.8]],
                                                   [[0.5, 0.5]], seed=3)
    self.assertAlmostEqual(interval.estimate, 0.2)
    self.assertAlmostEqual(interval.low, 0.1)
    self.assertAlmostEqual(interval.high, 0.3)

  def test_matches_a_loop_reference(self):
    rng = np.random.default_rng(0)
    a, b = rng.uniform(size=(3, 10)), rng.uniform(size=(3, 10))
    interval = continual.pair_bootstrap_difference(a, b, num_replicates=500,
                                                   seed=7)
    # The same draws, one replicate and one seed at a time.
    draws = np.random.default_rng(7).integers(0, 10, size=(500, 3, 10))
    replicates = [np.mean([np.mean((a - b)[s, draws[r, s]])
                           for s in range(3)]) for r in range(500)]
    self.assertAllClose(
        list(interval),
        [np.mean(a - b), *np.percentile(replicates, [2.5, 97.5])])
    # Identical methods: exactly [0, 0].
    self.assertAllClose(list(continual.pair_bootstrap_difference(a, a)),
                        [0, 0, 0])

  @parameterized.parameters(
      (np.zeros([2, 3]), np.zeros([2, 4]), 'must both be'),
      (np.zeros([3]), np.zeros([3]), 'must both be'),
      (np.full([1, 2], np.nan), np.zeros([1, 2]), 'finite'),
  )
  def test_refusals(self, a, b, message):
    with self.assertRaisesRegex(ValueError, message):
      continual.pair_bootstrap_difference(a, b)


class HeatmapExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_writes_an_annotated_png_with_blank_nan_cells(self):
    path = self.create_tempfile('acc.png').full_path
    fig = continual.heatmap_png(
        _ACC_A, path, 'client 0', row_labels=['t0', 't1', 't2'],
        col_labels=['R8-a', 'R8-b', 'R8-c'])
    image = matplotlib.image.imread(path)
    self.assertEqual(image.ndim, 3)
    self.assertGreater(image[..., :3].std(), 0.01)  # Not a blank canvas.
    ax = fig.axes[0]
    # Six finite cells, three NaN cells without text.
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])):
             t.get_text() for t in ax.texts}
    self.assertEqual(texts, {(0, 0): '0.90', (1, 0): '0.80', (1, 1): '0.85',
                             (2, 0): '0.70', (2, 1): '0.90', (2, 2): '0.75'})
    self.assertEqual([t.get_text() for t in ax.get_xticklabels()],
                     ['R8-a', 'R8-b', 'R8-c'])
    self.assertEqual(ax.get_title(), 'client 0')

  def test_rectangular_matrix_and_format(self):
    path = self.create_tempfile('rounds.png').full_path
    fig = continual.heatmap_png(np.array([[50.0, 61.25, 70.5]]), path,
                                fmt='.1f', x_label='round', y_label='task')
    self.assertEqual(sorted(t.get_text() for t in fig.axes[0].texts),
                     ['50.0', '61.2', '70.5'])

  def test_wrong_labels_raise(self):
    with self.assertRaisesRegex(ValueError, '2 row and 3 column labels'):
      continual.heatmap_png(_ACC_A, '/dev/null', row_labels=['a', 'b'])


# Avg: Local (80 + 70)/2 = 75, FedAvg 77, FedWeIT 80, FedSeIT (90 + 78)/2 =
# 84, FedSeIT + SIT (92 + 80)/2 = 86.
_RESULTS = {
    'Local': {'R8': 80.0, 'TMN': 70.0},
    'FedAvg': {'R8': 82.0, 'TMN': 72.0},
    'FedWeIT': {'R8': 85.0, 'TMN': 75.0},
    'FedSeIT': {'R8': 90.0, 'TMN': 78.0},
    'FedSeIT + SIT': {'R8': 92.0, 'TMN': 80.0},
}
# FedSeIT over Local 9/75 = 12 %, over FedAvg 7/77 = 9.0909 %, over FedWeIT
# 4/80 = 5 %: mean 26.0909 / 3 = 8.6970 %; points (9 + 7 + 4)/3 = 6.6667.
# (Over the baselines' mean Avg, 77.333, it would be 8.62 %: not our rule.)
_FEDSEIT_GAIN = (12.0 + 700 / 77 + 5.0) / 3
# FedSeIT + SIT: 11/75 = 14.6667 %, 9/77 = 11.6883 %, 6/80 = 7.5 %: mean
# 11.2850 %; points (11 + 9 + 6)/3 = 8.6667.
_SIT_GAIN = (1100 / 75 + 900 / 77 + 7.5) / 3


class ResultsTableExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_table_and_gain_line(self):
    self.assertAlmostEqual(_FEDSEIT_GAIN, 8.6970, places=4)
    self.assertAlmostEqual(_SIT_GAIN, 11.2850, places=4)
    self.assertEqual(
        continual.results_table_markdown(_RESULTS),
        '| Model | R8 | TMN | Avg |\n'
        '|---|---:|---:|---:|\n'
        '| Local | 80.00 | 70.00 | 75.00 |\n'
        '| FedAvg | 82.00 | 72.00 | 77.00 |\n'
        '| FedWeIT | 85.00 | 75.00 | 80.00 |\n'
        '| FedSeIT | 90.00 | 78.00 | 84.00 |\n'
        '| FedSeIT + SIT | 92.00 | 80.00 | 86.00 |\n'
        '\n'
        'Average gain over the baselines (Local, FedAvg, FedWeIT; relative '
        'gain of Avg over each baseline, averaged): FedSeIT +8.70 % (+6.67 '
        'points); FedSeIT + SIT +11.28 % (+8.67 points). Paper (abstract): '
        'FedSeIT +12.4 %.')

  def test_average_gain(self):
    gain = continual.average_gain(_RESULTS, 'FedSeIT')
    self.assertAlmostEqual(gain.relative, _FEDSEIT_GAIN)
    self.assertAlmostEqual(gain.points, 20 / 3)
    self.assertEqual(gain.baselines, ('Local', 'FedAvg', 'FedWeIT'))
    sit_gain = continual.average_gain(_RESULTS, 'FedSeIT + SIT')
    self.assertAlmostEqual(sit_gain.relative, _SIT_GAIN)
    self.assertAlmostEqual(sit_gain.points, 26 / 3)
    # A baseline's gain over the others (itself excluded): FedWeIT over
    # Local 5/75, FedAvg 3/77.
    weit = continual.average_gain(_RESULTS, 'FedWeIT')
    self.assertEqual(weit.baselines, ('Local', 'FedAvg'))
    self.assertAlmostEqual(weit.relative, (500 / 75 + 300 / 77) / 2)

  def test_partial_row_uses_the_shared_datasets(self):
    # SIT on R8 only (91): over Local's R8 (80) 13.75 %, FedAvg's (82)
    # 10.9756 %, FedWeIT's (85) 7.0588 %: mean 10.5948 %; points
    # (11 + 9 + 6)/3 = 8.67. Its Avg is marked partial, its TMN cell
    # missing.
    results = dict(_RESULTS)
    results['FedSeIT + SIT'] = {'R8': 91.0}
    gain = continual.average_gain(results, 'FedSeIT + SIT')
    self.assertAlmostEqual(gain.relative,
                           (1100 / 80 + 900 / 82 + 600 / 85) / 3)
    self.assertAlmostEqual(gain.relative, 10.5948, places=4)
    table = continual.results_table_markdown(results, paper_average_gain=None)
    self.assertIn('| FedSeIT + SIT | 91.00 | – | 91.00* |', table)
    self.assertIn('FedSeIT + SIT +10.59 % (+8.67 points).', table)
    self.assertNotIn('Paper', table)

  @parameterized.named_parameters(
      # Lower-case keys still match the default baselines.
      ('case_insensitive', {'fedavg': {'R8': 50.0}, 'FedSeIT': {'R8': 60.0}},
       {}, 'baselines (fedavg; ', 'FedSeIT +20.00 % (+10.00 points)'),
      ('custom_baselines', {'STL': {'R8': 40.0}, 'FedSeIT': {'R8': 60.0}},
       {'baselines': ('STL',)}, 'baselines (STL; ',
       'FedSeIT +50.00 % (+20.00 points)'),
      ('no_baselines', {'FedSeIT': {'R8': 60.0}}, {},
       'baselines (none present; ', 'FedSeIT –.'),
      ('proposed_subset', _RESULTS, {'proposed': ['FedSeIT + SIT']},
       'averaged): FedSeIT + SIT +11.28 %', 'FedSeIT + SIT +11.28 %'),
  )
  def test_gain_line_variants(self, results, kwargs, *expected):
    table = continual.results_table_markdown(results, **kwargs)
    for text in expected:
      self.assertIn(text, table)

  def test_dataset_order_and_missing_cells(self):
    table = continual.results_table_markdown(
        {'FedAvg': {'TMN': 1.0}, 'FedSeIT': {'R8': 3.0, 'TMN': 2.0}},
        datasets=['R8', 'TMN', 'SUBJ'])
    self.assertIn('| Model | R8 | TMN | SUBJ | Avg |', table)
    self.assertIn('| FedAvg | – | 1.00 | – | 1.00* |', table)
    # Gain on TMN only: (2 - 1)/1 = 100 %.
    self.assertIn('FedSeIT +100.00 % (+1.00 points)', table)

  @parameterized.named_parameters(
      ('nan', {'FedAvg': {'R8': math.nan}}, {}, 'not a finite number'),
      ('unknown_dataset', {'FedAvg': {'R8': 1.0}}, {'datasets': ['TMN']},
       'not in'),
      ('unknown_proposed', {'FedAvg': {'R8': 1.0}}, {'proposed': ['X']},
       'not in results'),
      ('empty', {}, {}, 'empty'),
  )
  def test_invalid_input_raises(self, results, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      continual.results_table_markdown(results, **kwargs)

  def test_exported_from_metrics(self):
    self.assertIs(metrics.continual, continual)


if __name__ == '__main__':
  tf.test.main()
