"""Tests of the partial-model comparison over seeds."""

import collections
import dataclasses
import json
import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp import training
from tff_nlp.experiments import sparse_tags
from tff_nlp.experiments import sparse_tags_seeds as seeds_lib


def _result(hits, label='m', **extra):
  """A method's results in one seed's run, as `sparse_tags.run_method`."""
  return dict(label=label, test_hits_at_1=list(hits),
              eval_curve=[dict(round=0, precision_at_1=0.0),
                          dict(round=1, precision_at_1=float(np.mean(hits)))],
              final=collections.OrderedDict(
                  precision_at_1=float(np.mean(hits)), **extra),
              bytes_down_per_client=1024.0, bytes_up_per_client=2048.0,
              round_seconds_median=1.0, rounds_seconds=60.0,
              dropped_tokens_per_round=0.0)


# Per-seed P@1: A 0.5, 0.5, 0.75; B 0.25, 0.25, 0.0.
_A = {0: _result([1, 1, 0, 0]), 1: _result([1, 0, 1, 0]),
      2: _result([1, 1, 1, 0])}
_B = {0: _result([1, 0, 0, 0]), 1: _result([0, 0, 1, 0]),
      2: _result([0, 0, 0, 0])}


class SummaryTest(tf.test.TestCase, parameterized.TestCase):

  def test_summarize_method_gives_seed_means_and_t_intervals(self):
    summary = seeds_lib.summarize_method(
        {s: _result(r['test_hits_at_1'], recall_at_1=v)
         for (s, r), v in zip(_A.items(), (0.1, 0.2, 0.3))})
    # P@1 0.5, 0.5, 0.75: mean 7/12, s = sqrt(1/48) = 0.144338, half width
    # t_{2,0.975} s / sqrt(3) = 4.302653 * 0.0833333 = 0.358554.
    self.assertAlmostEqual(summary['final']['precision_at_1'], 7 / 12)
    self.assertAllClose(summary['final_ci95']['precision_at_1'],
                        [7 / 12 - 0.358554, 7 / 12 + 0.358554], atol=1e-6)
    # Recall 0.1, 0.2, 0.3: mean 0.2, s = 0.1, half 4.302653 * 0.1 / sqrt(3).
    self.assertAllClose(summary['final_ci95']['recall_at_1'],
                        [0.2 - 0.248414, 0.2 + 0.248414], atol=1e-6)
    self.assertEqual(list(summary['seeds']), ['0', '1', '2'])
    self.assertEqual(summary['rounds_seconds'], 60.0)
    self.assertEqual(summary['precision_at_1_curve'], [
        dict(round=0, mean=0.0, low=0.0, high=0.0),
        dict(round=1, mean=7 / 12, low=0.5, high=0.75)])

  def test_compare_gives_both_intervals(self):
    result = seeds_lib.compare(_A, _B, names=('A', 'B'), num_replicates=500)
    # Per-seed differences 0.25, 0.25, 0.75: mean 5/12, s = sqrt(1/12),
    # half width 4.302653 * sqrt(1/12) / sqrt(3) = 0.717109: holds 0.
    self.assertAllClose(result['per_seed'], [0.25, 0.25, 0.75])
    self.assertAlmostEqual(result['difference'], 5 / 12)
    self.assertAllClose(result['seed_ci95'],
                        [5 / 12 - 0.717109, 5 / 12 + 0.717109], atol=1e-6)
    self.assertEqual(result['seed_verdict'], 'no difference')
    # Example 0 is A's in every seed; the bootstrap interval lies in [-1, 1]
    # around the mean difference over seeds and examples.
    low, high = result['bootstrap_ci95']
    self.assertLessEqual(low, 5 / 12)
    self.assertGreaterEqual(high, 5 / 12)

  @parameterized.named_parameters(
      ('identical', [1, 0, 1, 0], [1, 0, 1, 0], [0.0, 0.0], 'no difference'),
      ('a_always', [1, 1, 1, 1], [0, 0, 0, 0], [1.0, 1.0], 'A higher'),
      ('b_always', [0, 0, 0, 0], [1, 1, 1, 1], [-1.0, -1.0], 'B higher'),
  )
  def test_bootstrap_of_degenerate_outcomes(self, a, b, interval, verdict):
    result = seeds_lib.compare({0: _result(a), 1: _result(a)},
                               {0: _result(b), 1: _result(b)},
                               names=('A', 'B'), num_replicates=200)
    self.assertEqual(result['bootstrap_ci95'], interval)
    self.assertEqual(result['bootstrap_verdict'], verdict)

  def test_compare_refuses_outcomes_of_another_model(self):
    wrong = _result([1, 0, 0, 0])
    wrong['final']['precision_at_1'] = 0.5
    with self.assertRaisesRegex(
        errors.InputError, 'A, seed 0: the test outcomes give precision@1 '
        '0.250000, the run recorded 0.500000'):
      seeds_lib.compare({0: wrong}, {0: _result([0, 0, 0, 0])},
                        names=('A', 'B'))

  def test_compare_refuses_two_test_sets(self):
    with self.assertRaisesRegex(errors.InputError, 'different lengths'):
      seeds_lib.compare({0: _result([1, 0])}, {0: _result([1, 0, 0])},
                        names=('A', 'B'))

  def test_compare_needs_a_common_seed(self):
    with self.assertRaisesRegex(ValueError, 'share no seed'):
      seeds_lib.compare({0: _result([1])}, {1: _result([1])},
                        names=('A', 'B'))

  def test_summarize_compares_the_pairs_present(self):
    runs = {s: dict(task=dict(num_clients=4), methods=collections.OrderedDict(
        dense=_B[s], sparse=_A[s])) for s in _A}
    summary = seeds_lib.summarize(runs)
    self.assertEqual(list(summary['comparisons']), ['sparse - dense'])
    self.assertAlmostEqual(summary['comparisons']['sparse - dense']
                           ['difference'], 5 / 12)
    table = seeds_lib.summary_table(summary, k_values=(1,))
    self.assertIn('| sparse - dense | 3 | +41.67 | [-30.04, +113.38] | '
                  'no difference |', table)


_DATA = sparse_tags.TagDataConfig(dataset='trec6', num_clients=4,
                                  max_words=200, min_train_examples=20)
_TRAINING = sparse_tags.TagTrainingConfig(max_keys=50, batch_size=64,
                                          k_values=(1,))
_LOOP = training.LoopConfig(rounds=1, progress=False)


class RunSeedsExecutionTest(tf.test.TestCase):

  def test_seeds_run_apart_and_are_reported_and_compared(self):
    output_dir = self.create_tempdir().full_path
    run = lambda **kw: seeds_lib.run_seeds(
        data_dir=None, output_dir=output_dir, data=_DATA, training=_TRAINING,
        loop=_LOOP, seeds=(0, 1), methods=['sparse'], **kw)
    summary = run()
    for seed in (0, 1):
      with open(os.path.join(output_dir, f'seed_{seed}',
                             sparse_tags.RESULTS_FILE)) as f:
        result = json.load(f)
      self.assertEqual(result['config']['experiment']['seed'], seed)
      hits = result['methods']['sparse']['test_hits_at_1']
      # The final model's outcomes, on the 500 trec6 test questions.
      self.assertLen(hits, 500)
      self.assertAlmostEqual(
          np.mean(hits),
          result['methods']['sparse']['final']['precision_at_1'])
    per_seed = summary['methods']['sparse']['seeds']
    # Seeds split the clients differently, so the models differ.
    self.assertNotEqual(per_seed['0'], per_seed['1'])
    self.assertEqual(summary['comparisons'], {})
    with open(os.path.join(output_dir, seeds_lib.SUMMARY_FILE)) as f:
      written = json.load(f)
    self.assertEqual(written['seeds'], [0, 1])
    # The report of the finished seeds is the same summary.
    self.assertEqual(json.loads(json.dumps(run(report_only=True))), written)
    with open(os.path.join(output_dir, seeds_lib.SUMMARY_TABLE_FILE)) as f:
      self.assertIn('| Sparse, ÷ clients (tutorial) |', f.read())
    self.assertTrue(os.path.exists(
        os.path.join(output_dir, seeds_lib.SUMMARY_PLOT_FILE)))

    # Another run of seed 0 with other keys, compared method by method.
    other_dir = self.create_tempdir().full_path
    seeds_lib.run_seeds(
        data_dir=None, output_dir=other_dir, data=_DATA,
        training=dataclasses.replace(_TRAINING, max_keys=13, block_size=4),
        loop=_LOOP, seeds=(0,), methods=['sparse'])
    compared = seeds_lib.compare_runs(other_dir, output_dir, seeds=(0,),
                                      output_dir=other_dir)
    self.assertEqual(dict(compared['training_differs']),
                     dict(max_keys=[13, 50], block_size=[4, 1]))
    self.assertEqual(list(compared['comparisons']), ['sparse'])
    self.assertTrue(os.path.exists(
        os.path.join(other_dir, seeds_lib.COMPARISON_TABLE_FILE)))
    with self.assertRaisesRegex(errors.InputError, 'seed 1 has not finished'):
      seeds_lib.compare_runs(other_dir, output_dir, seeds=(0, 1))

  def test_seeds_are_checked(self):
    for seeds, match in (((), 'no seed given'), ((1, 1), 'repeats a seed')):
      with self.assertRaisesRegex(errors.InputError, match):
        seeds_lib.run_seeds(data_dir=None, output_dir='unused', data=_DATA,
                            training=_TRAINING, loop=_LOOP, seeds=seeds)

  def test_report_without_a_finished_seed_is_refused(self):
    with self.assertRaisesRegex(errors.InputError, 'no seed of'):
      seeds_lib.run_seeds(data_dir=None,
                          output_dir=self.create_tempdir().full_path,
                          data=_DATA, training=_TRAINING, loop=_LOOP,
                          seeds=(0,), report_only=True)


if __name__ == '__main__':
  tf.test.main()
