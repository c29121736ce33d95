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
from apps.partial_models import tag_experiment as sparse_tags
from apps.partial_models import tag_inputs
from apps.partial_models import tag_seeds as seeds_lib
from tff_nlp.metrics import intervals


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
    self.assertNotIn('seed_verdict', result)
    # Example 0 is A's in every seed; the bootstrap interval lies in [-1, 1]
    # around the mean difference over seeds and examples.
    low, high = result['bootstrap_ci95']
    self.assertLessEqual(low, 5 / 12)
    self.assertGreaterEqual(high, 5 / 12)
    # One verdict from both: the seed interval holds 0, so whatever the
    # bootstrap says, no difference is called.
    self.assertEqual(result['verdict'], 'no difference')
    self.assertNotIn('bootstrap_verdict', result)

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
    # Both seeds give the same difference: the seed interval is that point,
    # on the same side as the bootstrap's.
    self.assertEqual(result['seed_ci95'], interval)
    self.assertEqual(result['verdict'], verdict)

  def test_one_seed_is_undetermined_when_the_bootstrap_excludes_zero(self):
    result = seeds_lib.compare({0: _result([1, 1, 1, 1])},
                               {0: _result([0, 0, 0, 0])},
                               names=('A', 'B'), num_replicates=200)
    self.assertIsNone(result['seed_ci95'])
    self.assertEqual(result['bootstrap_ci95'], [1.0, 1.0])
    self.assertEqual(result['verdict'], 'undetermined')

  @parameterized.named_parameters(
      # The committed blocks-vs-rows comparison of the tutorial's divisor
      # (docs/results/federated_select/blocks/comparison.json): the seed
      # interval holds 0, the bootstrap lies below it.
      ('seed_holds_zero', [-0.0126, 0.0046], [-0.0080, -0.0007],
       'no difference'),
      ('both_above', [0.0049, 0.0311], [0.0020, 0.0333], 'A higher'),
      ('both_below', [-0.0102, -0.0045], [-0.0133, -0.0027], 'B higher'),
      ('one_seed', None, [0.01, 0.02], 'undetermined'),
      ('one_seed_holds_zero', None, [-0.01, 0.02], 'no difference'),
  )
  def test_reverdict_applies_the_rule_to_stored_intervals(
      self, seed_ci95, bootstrap_ci95, verdict):
    stored = collections.OrderedDict(
        a='A', b='B', seeds=[0, 1, 2], difference=0.0, per_seed=[],
        seed_ci95=seed_ci95, seed_verdict='A higher',
        bootstrap_ci95=bootstrap_ci95, bootstrap_verdict='B higher')
    result = seeds_lib.reverdict(stored)
    self.assertEqual(result['verdict'], verdict)
    self.assertNotIn('seed_verdict', result)
    self.assertNotIn('bootstrap_verdict', result)
    self.assertEqual(result['seed_ci95'], seed_ci95)
    self.assertEqual(result['bootstrap_ci95'], bootstrap_ci95)

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
    # The bootstrap's bounds depend on its draws; the row ends in the one
    # verdict.
    self.assertRegex(table, r'\| sparse - dense \| 3 \| \+41\.67 \| '
                     r'\[-30\.04, \+113\.38\] \| \[[-+.0-9]+, [-+.0-9]+\] \| '
                     r'no difference \|')
    # Bytes in KiB: 1,024 bytes down and 2,048 up are 1.0 and 2.0 KiB.
    self.assertIn('KiB down / client / round | KiB up / client / round',
                  table)
    self.assertIn('| 1.0 | 2.0 |', table)
    self.assertNotIn('KB', table)


def _stored_summary():
  """A `seeds.json` as the committed one: 45,600 bytes down (200 rows of 57
  float32), 14,474.33 of 53,731 entries dropped, stored old-style verdicts."""
  method = lambda label, dropped: collections.OrderedDict(
      label=label, seeds={}, final=dict(precision_at_1=0.66),
      final_ci95=dict(precision_at_1=[0.65, 0.67]),
      bytes_down_per_client=45600.0, bytes_up_per_client=48011.5,
      round_seconds_median=5.7, rounds_seconds=174.0,
      dropped_tokens_per_round=dropped, precision_at_1_curve=[])
  return collections.OrderedDict(
      seeds=[0, 1, 2],
      task=collections.OrderedDict(
          num_clients=50, train_examples=5452, client_examples_min=40,
          client_examples_max=192, test_examples=500, num_words=8679,
          num_tags=57, clients_over_max_keys=49, distinct_words_median=468.5,
          dense_model_bytes=1978812, train_word_entries=53731,
          test_examples_no_known_tag=0),
      setup=collections.OrderedDict(
          dataset='trec50', partition='label_skew', dirichlet_alpha=0.5,
          max_keys=200, block_size=1, client_epochs=1, batch_size=16,
          rounds=30, clients_per_round=0, k_values=[1]),
      methods=collections.OrderedDict(
          dense=method('Dense', 0.0),
          sparse=method('Sparse', 14474 + 1 / 3)),
      comparisons=collections.OrderedDict([('sparse - dense', dict(
          a='sparse', b='dense', seeds=[0, 1, 2], difference=-0.004,
          per_seed=[0.0, -0.006, -0.006],
          seed_ci95=[-0.0126, 0.0046], seed_verdict='no difference',
          bootstrap_ci95=[-0.0080, -0.0007],
          bootstrap_verdict='dense higher'))]))


class ReportTest(tf.test.TestCase):

  def test_what_the_model_saw_reads_the_summary(self):
    text = tag_inputs.what_the_model_saw(_stored_summary())
    self.assertStartsWith(text, '## What the model saw')
    self.assertIn('5,452 trec50 training examples, split over 50 clients', text)
    self.assertIn('40–192 examples per client in seed 0', text)
    self.assertIn('all clients train 1 epoch(s)', text)
    self.assertIn('for 30 rounds', text)
    # 14,474.33 / 53,731 = 26.94 %.
    self.assertIn('M = 200 of the V = 8,679 word rows; 49 of the 50', text)
    self.assertIn('14,474 of 53,731 (27%)', text)
    self.assertIn('never be right: 0 of the 500', text)

  def test_unrecorded_numbers_are_said_to_be_so(self):
    summary = _stored_summary()
    del summary['task']['train_word_entries']
    del summary['task']['test_examples_no_known_tag']
    del summary['setup']
    text = tag_inputs.what_the_model_saw(summary)
    self.assertIn('5,452 training examples', text)
    self.assertIn('every sparse method: 14,474.', text)
    self.assertIn('never be right: not recorded', text)
    self.assertIn('for not recorded rounds', text)

  def test_rewrite_reports_applies_the_rule_and_writes_kib(self):
    output_dir = self.create_tempdir().full_path
    training.write_json(os.path.join(output_dir, seeds_lib.SUMMARY_FILE),
                        _stored_summary())
    training.write_json(
        os.path.join(output_dir, seeds_lib.COMPARISON_FILE),
        dict(a='runs/blocks', b='runs/rows',
             training_differs=dict(max_keys=[50, 200]),
             comparisons=_stored_summary()['comparisons']))
    seeds_lib.rewrite_reports(output_dir)
    with open(os.path.join(output_dir, seeds_lib.SUMMARY_FILE)) as f:
      written = json.load(f)
    comparison = written['comparisons']['sparse - dense']
    self.assertEqual(comparison['verdict'], 'no difference')
    self.assertNotIn('bootstrap_verdict', comparison)
    with open(os.path.join(output_dir, seeds_lib.SUMMARY_TABLE_FILE)) as f:
      table = f.read()
    # 45,600 bytes / 1,024 = 44.53 KiB; 48,011.5 / 1,024 = 46.89 KiB.
    self.assertIn('| 44.5 | 46.9 |', table)
    self.assertIn('KiB down', table)
    self.assertNotIn(' KB ', table)
    self.assertEqual(table.count(intervals.VERDICT_RULE), 1)
    self.assertIn('## What the model saw', table)
    with open(os.path.join(output_dir, seeds_lib.COMPARISON_TABLE_FILE)) as f:
      table = f.read()
    self.assertIn('| [-1.26, +0.46] | [-0.80, -0.07] | no difference |',
                  table)
    self.assertEqual(table.count(intervals.VERDICT_RULE), 1)
    # The seeds.json beside it is not A's run (200 keys, not 50) and B's
    # folder is not there: what the model saw is not recorded, not guessed.
    self.assertIn('## What the model saw', table)
    self.assertIn('Training data, the same in A and B (checked).** not '
                  'recorded', table)
    self.assertIn('A: not recorded; B: not recorded', table)
    self.assertIn('(../../README.md#the-verdict-rule)', table)
    self.assertLess(table.index('## What the model saw'),
                    table.index('| A − B (precision@1)'))
    with open(os.path.join(output_dir, seeds_lib.COMPARISON_FILE)) as f:
      self.assertNotIn('inputs', json.load(f))

  def test_rewrite_reports_reads_what_the_model_saw_from_both_runs(self):
    output_dir = self.create_tempdir().full_path
    b_dir = self.create_tempdir().full_path
    training.write_json(os.path.join(output_dir, seeds_lib.SUMMARY_FILE),
                        _stored_summary())
    blocks = _stored_summary()
    blocks['setup'].update(max_keys=50, block_size=4)
    blocks['methods']['sparse']['dropped_tokens_per_round'] = 18251.0
    training.write_json(os.path.join(b_dir, seeds_lib.SUMMARY_FILE), blocks)
    comparisons = collections.OrderedDict(
        sparse=_stored_summary()['comparisons']['sparse - dense'])
    training.write_json(
        os.path.join(output_dir, seeds_lib.COMPARISON_FILE),
        dict(a='runs/rows', b='runs/blocks',
             training_differs=dict(max_keys=[200, 50], block_size=[1, 4]),
             comparisons=comparisons))
    seeds_lib.rewrite_reports(output_dir, b_dir=b_dir)
    with open(os.path.join(output_dir, seeds_lib.COMPARISON_TABLE_FILE)) as f:
      table = f.read()
    self.assertIn('5,452 trec50 training examples, split over 50 clients',
                  table)
    self.assertIn('M = 200 one-row keys (A) or 50 keys of 4 rows (B) of the '
                  'V = 8,679 word rows', table)
    self.assertIn('A (49 of the 50 clients drop words) 14,474 of 53,731 '
                  '(27%), every method compared; B (49 of the 50 clients '
                  'drop words) 18,251 of 53,731 (34%)', table)
    self.assertIn('never be right: 0 of the 500', table)


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
      report = f.read()
    self.assertIn('| Sparse, ÷ clients (tutorial) |', report)
    # The section reads the run's own task and settings.
    self.assertEqual(written['setup']['max_keys'], 50)
    self.assertIn('## What the model saw', report)
    self.assertIn(f'{written["task"]["train_word_entries"]:,}', report)
    self.assertEqual(written['task']['test_examples_no_known_tag'], 0)
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
    with open(os.path.join(other_dir, seeds_lib.COMPARISON_TABLE_FILE)) as f:
      table = f.read()
    # What each run saw is recorded from the runs themselves.
    self.assertEqual(compared['inputs']['A']['setup']['max_keys'], 13)
    self.assertEqual(compared['inputs']['B']['task'], written['task'])
    self.assertIn('M = 13 keys of 4 rows (A) or 50 one-row keys (B)', table)
    self.assertIn(f'{written["task"]["train_examples"]:,} trec6 training '
                  'examples', table)
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
