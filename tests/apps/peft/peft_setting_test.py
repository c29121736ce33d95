"""Tests of the PEFT report's "What the model saw" on hand-built run records.

The records are `results.json` contents as `experiments.text2sql` writes
them (`config`, `examples`, `truncated`, `vocabulary_size`), built here by
hand with small numbers, so every count the section reports is derived in
the comments.
"""

import json
import os

from absl.testing import absltest

from apps.peft import setting as peft_setting
from tff_nlp.metrics import intervals

# The data, before any cap: imdb 50 training and 10 test questions, yelp 30
# and 8.
_SIZES = {'imdb': {'train': 50, 'dev': 5, 'test': 10},
          'yelp': {'train': 30, 'dev': 4, 'test': 8}}
# Caps: 20 per client, yelp 25; every test question (max_eval_examples 0).
_DATA = {'with_values': True, 'schema_columns': False,
         'max_source_length': 128, 'max_target_length': 160,
         'max_train_examples': {'default': 20,
                                'overrides': [['yelp', 25]]},
         'max_eval_examples': 0, 'lowercase_sql': True}


def _run(seed, train_targets_cut, *, test_targets_cut=(3, 5),
         tokenizer_from=None, init_from='/somewhere/runs/pretrain_cpu'):
  """A run's record. Test cuts (the same tokenizer and data: the same in
  every seed): imdb 0 inputs and 3 SQL, yelp all 8 inputs and 5 SQL.
  Training SQL cut per client (imdb, yelp): `train_targets_cut`, which
  differs by seed (each seed draws its own training subset)."""
  imdb_cut, yelp_cut = train_targets_cut
  experiment = {'seed': seed, 'data': _DATA}
  if tokenizer_from:
    experiment['tokenizer_from'] = tokenizer_from
  elif init_from:
    experiment['init_from'] = init_from
  return {
      'config': {'experiment': experiment},
      'vocabulary_size': 8000,
      'examples': {'imdb': {'train': 20, 'dev': 5, 'test': 10},
                   'yelp': {'train': 25, 'dev': 4, 'test': 8}},
      'truncated': {
          'imdb': {'train': {'sources': 0, 'targets': imdb_cut},
                   'dev': {'sources': 0, 'targets': 1},
                   'test': {'sources': 0, 'targets': test_targets_cut[0]}},
          'yelp': {'train': {'sources': 25, 'targets': yelp_cut},
                   'dev': {'sources': 4, 'targets': 2},
                   'test': {'sources': 8, 'targets': test_targets_cut[1]}}},
  }


class SettingJsonTest(absltest.TestCase):

  def test_counts(self):
    # Full fine-tuning, seeds 0 and 1, LoRA seed 0 (the same subset as full
    # fine-tuning's seed 0), and from scratch with the same run's tokenizer
    # (`tokenizer_from`): one setting. Training SQL cut: seed 0 imdb 4,
    # yelp 6 (10 in all), seed 1 imdb 7, yelp 2 (9 in all): per client
    # [4, 7] and [2, 6], in all [9, 10] (run by run, not [6, 13]).
    (setting,) = peft_setting.setting_json({
        'pretrained_full': [_run(0, (4, 6)), _run(1, (7, 2))],
        'lora_r4': [_run(0, (4, 6))],
        'scratch_full': [_run(0, (4, 6), tokenizer_from='/x/pretrain_cpu')],
    }, _SIZES)
    self.assertEqual(setting['variants'],
                     ['pretrained_full', 'lora_r4', 'scratch_full'])
    self.assertEqual(setting['runs'], 4)
    self.assertEqual(
        setting['tokenizer'], "the pre-trained model's SentencePiece "
        'tokenizer (`pretrain_cpu`, 8,000 pieces)')
    imdb, yelp = setting['per_client']['imdb'], setting['per_client']['yelp']
    self.assertEqual(
        dict(imdb), {'train': [20, 20], 'train_split': 50, 'test': 10,
                     'test_split': 10, 'test_inputs_cut': 0,
                     'test_targets_cut': 3, 'train_inputs_cut': [0, 0],
                     'train_targets_cut': [4, 7]})
    self.assertEqual(
        (yelp['train'], yelp['train_split'], yelp['test_inputs_cut'],
         yelp['test_targets_cut'], yelp['train_targets_cut']),
        ([25, 25], 30, 8, 5, [2, 6]))
    # In all: 45 of 80 training questions; 18 test questions, 8 inputs cut,
    # 3 + 5 = 8 that can never match.
    self.assertEqual(
        dict(setting['total']),
        {'train': [45, 45], 'train_split': 80, 'test': 18, 'test_split': 18,
         'test_inputs_cut': 8, 'test_targets_cut': 8,
         'train_inputs_cut': [25, 25], 'train_targets_cut': [9, 10]})

  def test_other_tokenizer_is_another_setting(self):
    # A tokenizer of the clients' own text cuts other test SQL (1 and 0):
    # its variant gets a setting of its own.
    first, second = peft_setting.setting_json({
        'pretrained_full': [_run(0, (4, 6))],
        'scratch_full_own_tokenizer': [
            _run(0, (1, 0), test_targets_cut=(1, 0), init_from=None)],
    }, _SIZES)
    self.assertEqual(first['variants'], ['pretrained_full'])
    self.assertEqual(second['variants'], ['scratch_full_own_tokenizer'])
    self.assertEqual(second['total']['test_targets_cut'], 1)
    self.assertIn("clients' training text", second['tokenizer'])

  def test_without_sizes_or_cuts(self):
    # Older records: no `truncated`; no data sizes given.
    run = _run(0, (4, 6))
    del run['truncated']
    (setting,) = peft_setting.setting_json({'lora_r4': [run]})
    self.assertIsNone(setting['per_client']['imdb']['train_split'])
    self.assertIsNone(setting['total']['test_targets_cut'])
    lines = '\n'.join(peft_setting.markdown_lines([setting]))
    self.assertIn('| imdb | 20 | 10 | ? | ? | ? |', lines)


class MarkdownTest(absltest.TestCase):

  def test_section(self):
    setting = peft_setting.setting_json(
        {'pretrained_full': [_run(0, (4, 6)), _run(1, (7, 2))]}, _SIZES)
    text = '\n'.join(peft_setting.markdown_lines(setting))
    self.assertTrue(text.startswith('## What the model saw\n'))
    self.assertIn('yelp 25, every other client 20): 45 of 80 training '
                  'questions in all.', text)
    self.assertIn('**8 of 18 test queries can never be matched exactly**; '
                  '8 test inputs are cut.', text)
    self.assertIn("every client's full test split (18 questions)", text)
    self.assertIn('the question with its values → SQL with values', text)
    self.assertIn('`--lowercase_sql`', text)
    self.assertIn('| imdb | 20 of 50 | 10 of 10 | 0 | 3 | 4–7 |', text)
    self.assertIn('| yelp | 25 of 30 | 8 of 8 | 8 | 5 | 2–6 |', text)
    self.assertIn('| **All** | 45 of 80 | 18 of 18 | 8 | 8 | 9–10 |', text)
    # The one verdict rule, quoted once.
    self.assertEqual(text.count(intervals.VERDICT_RULE), 1)

  def test_subset_of_the_test_split(self):
    data = dict(_DATA, max_eval_examples=5)
    run = _run(0, (4, 6))
    run['config']['experiment']['data'] = data
    text = '\n'.join(peft_setting.markdown_lines(
        peft_setting.setting_json({'lora_r4': [run]}, _SIZES)))
    self.assertIn('a seeded subset of at most 5 test questions per client '
                  '(`max_eval_examples`) (18 questions), the same for every '
                  'run.', text)


class ReadTest(absltest.TestCase):

  def test_read_run_and_split_sizes(self):
    run_dir = self.create_tempdir().full_path
    with open(os.path.join(run_dir, 'results.json'), 'w') as f:
      json.dump(_run(0, (4, 6)), f)
    self.assertEqual(peft_setting.read_run(run_dir), _run(0, (4, 6)))
    # The real data's splits (tff_nlp.data.text2sql, the paper's folds).
    self.assertEqual(
        peft_setting.split_sizes(('imdb', 'yelp'), data_dir=None),
        {'imdb': {'train': 79, 'dev': 26, 'test': 26},
         'yelp': {'train': 78, 'dev': 26, 'test': 24}})


if __name__ == '__main__':
  absltest.main()
