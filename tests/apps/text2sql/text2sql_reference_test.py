"""Tests of the committed benchmark shown beside a short run (make demo)."""

import json
import math
import os
import re

from absl.testing import parameterized
import tensorflow as tf

from apps.text2sql import reference as text2sql_reference


def _method(label, per_seed, run_dirs, ci95=None, both=None):
  return {
      'label': label, 'num_seeds': len(per_seed),
      'seeds': [{'seed': s, 'run_dir': d,
                 'test': {'exact_match': {'macro_avg': v}}}
                for s, (v, d) in enumerate(zip(per_seed, run_dirs))],
      'test': {'exact_match': {
          'macro_avg': sum(per_seed) / len(per_seed), 'num_seeds':
              len(per_seed), 'macro_avg_ci95': ci95,
          'macro_avg_bootstrap_seeds_ci95': both}}}


def _report(base, lorar, run_dirs=('runs/a', 'runs/b', 'runs/c'),
            difference_ci=None):
  return {
      'seeds': list(range(len(base))),
      'methods': {
          'fedavg-num_examples': _method('FedAvg', base, run_dirs,
                                         [0.40, 0.45], [0.39, 0.46]),
          'fedavg-lorar': _method('FedAvg + Lorar', lorar, run_dirs,
                                  [0.41, 0.51], [0.43, 0.50])},
      'lorar_vs_num_examples': {'fedavg': {'exact_match': {'macro_avg': {
          'difference': (sum(lorar) - sum(base)) / len(base),
          'seed_ci95': difference_ci,
          'bootstrap_seeds_ci95': [0.01, 0.06]}}}},
      'baseline': {'label': 'Template retrieval (no learning)', 'test': {
          'exact_match': {'macro_avg': 0.4691,
                          'macro_avg_bootstrap_seeds_ci95': [0.43, 0.50]}}},
  }


def _write_config(path, rounds, seed=0):
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'config.json'), 'w') as f:
    json.dump({'experiment': {'seed': seed, 'training': {'lr': 0.01}},
               'loop': {'rounds': rounds, 'seed': seed, 'progress': True}}, f)


class PredictionIntervalTest(tf.test.TestCase):

  def test_matches_hand_derived(self):
    # [1, 2, 3]: mean 2, sd 1; t_{2, 0.975} = 4.302653; one new seed:
    # 2 ± 4.302653 sqrt(1 + 1/3) = 2 ± 4.968275.
    low, high = text2sql_reference.prediction_interval([1., 2., 3.], 1)
    self.assertAllClose([low, high], [2 - 4.968275, 2 + 4.968275])
    # Three new seeds: 2 ± 4.302653 sqrt(2/3) = 2 ± 3.513101.
    low, high = text2sql_reference.prediction_interval([1., 2., 3.], 3)
    self.assertAllClose([low, high], [2 - 3.513101, 2 + 3.513101])
    self.assertIsNone(text2sql_reference.prediction_interval([1.], 1))


class CompareTest(tf.test.TestCase, parameterized.TestCase):

  def _compare(self, run_difference, reference_rounds=20):
    root = self.create_tempdir().full_path
    # The reference: per-seed differences +0.06, +0.04, +0.02 (mean +0.04,
    # sd 0.02): one more seed in 0.04 ± 4.302653 · 0.02 · sqrt(4/3)
    # = [-0.0594, +0.1394].
    reference = _report([0.42, 0.43, 0.44], [0.48, 0.47, 0.46],
                        run_dirs=['../../elsewhere/r0', 'x/r1', 'x/r2'],
                        difference_ci=[-0.01, 0.09])
    reference_dir = os.path.join(root, 'docs')
    _write_config(os.path.join(reference_dir, 'runs', 'r0'),
                  rounds=reference_rounds)
    os.makedirs(reference_dir, exist_ok=True)
    reference_path = os.path.join(reference_dir, 'results.json')
    with open(reference_path, 'w') as f:
      json.dump(reference, f)
    run_dir = os.path.join(root, 'demo')
    _write_config(os.path.join(run_dir, 'runs', 'r'), rounds=8, seed=0)
    run = _report([0.30], [0.30 + run_difference], run_dirs=['runs/r'])
    return text2sql_reference.compare(run, output_dir=run_dir,
                                      reference_path=reference_path)

  def test_table_and_settings(self):
    comparison = self._compare(-0.0161)
    self.assertIn('| FedAvg | 3 | 43.00 | [40.00, 45.00] | [39.00, 46.00] |',
                  comparison.markdown)
    self.assertIn('| FedAvg + Lorar | 3 | 47.00 | [41.00, 51.00] | '
                  '[43.00, 50.00] |', comparison.markdown)
    self.assertIn('| Lorar − num_examples | 3 paired | +4.00 | '
                  '[-1.00, +9.00] | [+1.00, +6.00] |', comparison.markdown)
    self.assertIn('| Template retrieval (no learning) | – | 46.91 | – | '
                  '[43.00, 50.00] |', comparison.markdown)
    # The reference's run was found in its archive (runs/<name>): rounds
    # differ, seeds are not settings.
    self.assertEqual(comparison.record['differing_settings'],
                     ['rounds 8 here, 20 there'])
    self.assertIn('Settings that differ from this run: rounds 8 here, 20 '
                  'there.', comparison.markdown)
    self.assertAllClose(comparison.record['reference']['per_seed'],
                        [0.06, 0.04, 0.02])

  def test_same_settings_said(self):
    comparison = self._compare(0.05, reference_rounds=8)
    self.assertEqual(comparison.record['differing_settings'], [])
    self.assertIn("Its settings are this run's but for the seeds.",
                  comparison.markdown)
    self.assertNotIn('other settings', comparison.record['sentence'])

  def test_reference_runs_found_in_the_checkouts_records(self):
    # A committed report, docs/results/<page>/results.json, whose runs are
    # kept in records/<page>/runs/ of the same checkout (records/README.md),
    # recorded relative to the folder it was written in (runs/<bench>).
    root = self.create_tempdir().full_path
    page_dir = os.path.join(root, 'docs', 'results', 'page')
    self.assertEqual(text2sql_reference.records_dir(page_dir),
                     os.path.join(root, 'records', 'page', 'runs'))
    _write_config(os.path.join(root, 'records', 'page', 'runs', 'r0'),
                  rounds=20)
    os.makedirs(page_dir)
    reference_path = os.path.join(page_dir, 'results.json')
    with open(reference_path, 'w') as f:
      json.dump(_report([0.42, 0.43, 0.44], [0.48, 0.47, 0.46],
                        run_dirs=['../../records/page/runs/r0', 'x/r1',
                                  'x/r2'],
                        difference_ci=[-0.01, 0.09]), f)
    run_dir = os.path.join(root, 'demo')
    _write_config(os.path.join(run_dir, 'runs', 'r'), rounds=8, seed=0)
    comparison = text2sql_reference.compare(
        _report([0.30], [0.29], run_dirs=['runs/r']), output_dir=run_dir,
        reference_path=reference_path)
    self.assertEqual(comparison.record['differing_settings'],
                     ['rounds 8 here, 20 there'])

  @parameterized.named_parameters(
      # Inside [-5.94, +13.94]: the benchmark's own seed spread.
      ('inside', -0.0161, 'neither confirms nor contradicts', '-1.61'),
      ('below', -0.0700, 'lies below that range, with other settings, so it '
       'does not reproduce the benchmark', '-7.00'),
      ('above', 0.1500, 'lies above that range', '+15.00'),
  )
  def test_sentence(self, run_difference, says, points):
    sentence = self._compare(run_difference).record['sentence']
    half = 4.302653 * 0.02 * math.sqrt(4 / 3)
    self.assertIn(f"This run's Lorar − FedAvg MacroAvg is {points} points "
                  '(1 seed, other settings)', sentence)
    self.assertIn(f'[{100 * (0.04 - half):+.2f}, {100 * (0.04 + half):+.2f}]'
                  ' (95 % prediction interval)', sentence)
    self.assertIn('its seeds gave +6.00, +4.00, +2.00', sentence)
    self.assertIn(says, sentence)
    # One sentence.
    self.assertTrue(sentence.endswith('.'))
    self.assertIsNone(re.search(r'\.\s+[A-Z]', sentence), sentence)

  @parameterized.named_parameters(
      ('missing', None),
      ('not_json', 'not json'),
      ('no_fedavg', json.dumps({'methods': {}, 'lorar_vs_num_examples': {}})),
  )
  def test_a_bad_reference_is_said_not_raised(self, content):
    root = self.create_tempdir().full_path
    path = os.path.join(root, 'results.json')
    if content is not None:
      with open(path, 'w') as f:
        f.write(content)
    comparison = text2sql_reference.compare(
        _report([0.3], [0.31], run_dirs=['r']), output_dir=root,
        reference_path=path)
    self.assertIsNone(comparison.record)
    self.assertIn(f'Not shown: {path}: cannot be read', comparison.markdown)


class WhatTheModelSawTest(tf.test.TestCase):

  def test_stated_protocol_and_unstated_values(self):
    from apps.text2sql import summary_markdown as text2sql_summary_markdown  # pylint: disable=g-import-not-at-top
    run_dir = self.create_tempdir().full_path
    with open(os.path.join(run_dir, 'results.json'), 'w') as f:
      json.dump({
          'config': {'experiment': {'data': {
              'with_values': True, 'max_eval_examples': 0,
              'max_train_examples': {'default': 0, 'overrides': []}}}},
          'examples': {'atis': {'train': 4347, 'dev': 486, 'test': 447}},
          'truncated': {'atis': {'test': {'sources': 0, 'targets': 0}}},
          'template_coverage': {'atis': {'covered': 306, 'total': 447}},
          'template_values': 'stated',
          'unstated_values': {'atis': {'questions': 170, 'total': 447}},
      }, f)
    section = text2sql_summary_markdown.what_the_model_saw(run_dir)
    self.assertIn('with the values the question states only', section)
    self.assertNotIn('oracle', section)
    self.assertIn('does not state** (e.g. ATIS "on monday" annotated '
                  'day_number0 = 21): atis 170 of 447.', section)
    self.assertIn('**Truncation:** none', section)
    self.assertNotIn('hint', section)

  def test_retrieve_and_edit_hint_filling(self):
    from apps.text2sql import summary_markdown as text2sql_summary_markdown  # pylint: disable=g-import-not-at-top
    for values, expected in (
        (None, 'oracle entities in the hint'),  # Recorded before the field.
        ('stated', '`--retrieved_sql_values=stated`')):
      run_dir = self.create_tempdir().full_path
      data = {'with_values': True, 'max_eval_examples': 0,
              'retrieved_sql': True,
              'max_train_examples': {'default': 0, 'overrides': []}}
      if values:
        data['retrieved_sql_values'] = values
      with open(os.path.join(run_dir, 'results.json'), 'w') as f:
        json.dump({'config': {'experiment': {'data': data}},
                   'examples': {'imdb': {'train': 79}},
                   'truncated': {'imdb': {'test': {'sources': 0,
                                                   'targets': 0}}}}, f)
      self.assertIn(expected,
                    text2sql_summary_markdown.what_the_model_saw(run_dir))

  def test_section_from_a_runs_record(self):
    from apps.text2sql import summary_markdown as text2sql_summary_markdown  # pylint: disable=g-import-not-at-top
    run_dir = self.create_tempdir().full_path
    with open(os.path.join(run_dir, 'results.json'), 'w') as f:
      json.dump({
          'config': {'experiment': {'data': {
              'with_values': True, 'max_eval_examples': 0,
              'max_train_examples': {'default': 200, 'overrides': []}}}},
          'examples': {'atis': {'train': 200, 'dev': 5, 'test': 447}},
          'truncated': {'atis': {'train': {'sources': 0, 'targets': 3},
                                 'test': {'sources': 447, 'targets': 0}}},
          'template_coverage': {'atis': {'covered': 306, 'total': 447}},
      }, f)
    section = text2sql_summary_markdown.what_the_model_saw(run_dir)
    self.assertStartsWith(section, '## What the model saw\n')
    self.assertIn('**Training data:** atis 200 examples per client (capped '
                  'by `max_train_examples`).', section)
    self.assertIn('**Truncation:** atis train 0 inputs / 3 targets; atis '
                  'test 447 inputs / 0 targets.', section)
    # 447 - 306 = 141 can never be right.
    self.assertIn('atis 141 of 447', section)
    self.assertIn(text2sql_summary_markdown.VERDICT_RULE, section)
    # A record without `template_values` predates the field: annotated.
    self.assertIn('**oracle entities**', section)
    self.assertIn('**Shared before training:**', section)
    self.assertIn("does not say what data it used",
                  text2sql_summary_markdown.what_the_model_saw(
                      self.create_tempdir().full_path))


if __name__ == '__main__':
  tf.test.main()
