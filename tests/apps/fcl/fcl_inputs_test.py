"""FCL reports: "What the model saw", and reports written without training."""

import json
import os
from unittest import mock

import numpy as np
import tensorflow as tf

from tff_nlp import errors
from apps.fcl import experiment as fcl
from apps.fcl import inputs as fcl_inputs
from tff_nlp.metrics import intervals

# Two labels, hence one task of both (labels_per_task 2). Training: 4
# documents of 5 tokens labelled a, 4 of 2 tokens labelled b; one of each
# label is held out for validation, so 3 of each are trained on. Test: a
# with 4 and 3 tokens, b with 1, 6 and 2 tokens, the last of a word the
# training split never has.
_TRAIN_TSV = 'a\tw w w w w\n' * 4 + 'b\tw w\n' * 4
_TEST_TSV = 'a\tw w w w\na\tw w w\nb\tw\nb\tw w w w w w\nb\tz z\n'
# Cut at 3 tokens: training documents 3 (the a's of 5), test documents 2
# (4 and 6 tokens); 'z z' has no word in the vocabulary.
_DATA = fcl.DataConfig(num_clients=1, tasks_per_client=1,
                       vocabulary_size=10, max_length=3, seed=0)
_TRAINING = fcl.TrainingConfig(rounds_per_task=2, local_epochs=3,
                               embedding_dim=4)


def _toy_data_dir(root: str) -> str:
  folder = os.path.join(root, 'text_classification', 'toy')
  os.makedirs(folder)
  for name, content in (('train', _TRAIN_TSV), ('test', _TEST_TSV)):
    with open(os.path.join(folder, name + '.tsv'), 'w') as f:
      f.write(content)
  return root


def _run(accuracy: float) -> dict:
  """A finished 1-client, 1-task run's results, as `run_method` records."""
  return {'accuracy': accuracy, 'macro_f1': accuracy, 'forgetting': 0.0,
          'backward_transfer': 0.0, 'accuracy_matrix': [[[accuracy]]],
          'macro_f1_matrix': [[[accuracy]]], 'kb_entries_per_client': [0.0],
          'bytes_down_per_client_round': 1024.0,
          'bytes_up_per_client_round': 1024.0,
          'adaptive_nonzero_per_client_round': 0.0, 'seconds': 1.0,
          'truncated_documents': 5}


class WhatTheModelSawExecutionTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.data_dir = _toy_data_dir(self.create_tempdir().full_path)

  def test_describe_counts_what_the_runs_train_and_score(self):
    encoded = fcl.encode_dataset('toy', _DATA, data_dir=self.data_dir)
    inputs = fcl_inputs.describe({0: encoded})
    self.assertEqual(dict(inputs['0']), {
        'train_documents': [[6]], 'test_documents': [[5]], 'labels': [[2]],
        'train_documents_cut': 3, 'test_documents_cut': 2,
        'test_documents_no_known_word': 1})
    # The same documents the run records as cut, training and test.
    self.assertEqual(encoded.truncated_documents, 3 + 2)

  def test_section_numbers_protocol_and_rule(self):
    encoded = fcl.encode_dataset('toy', _DATA, data_dir=self.data_dir)
    # Two seeds of the same tasks: every count doubles.
    inputs = {'toy': fcl_inputs.describe({0: encoded, 1: encoded})}
    section = '\n'.join(fcl_inputs.markdown(inputs, data=_DATA,
                                            training=_TRAINING))
    self.assertStartsWith(section, '## What the model saw\n')
    self.assertIn('| toy | 6 (mean 6) | 5 (mean 5) | 4 of 10 (40.0 %) | '
                  '2 of 10 (20.0 %) | 6 of 12 (50.0 %) |', section)
    self.assertIn('cut at 3 tokens', section)
    self.assertIn('each of the 2 rounds × 3 local epoch(s)', section)
    self.assertIn('Labels per task: toy 2', section)
    self.assertIn('every training document of the task\'s labels', section)
    self.assertIn('all of them;', section)  # No test cap.
    self.assertIn('the task is known at test time', section)
    self.assertIn('a 4-d word embedding learned on the first task', section)
    self.assertIn('truncation makes no test document impossible', section)
    # The rule is quoted once, not reworded.
    self.assertEqual(section.count(intervals.VERDICT_RULE), 1)

    capped = fcl.DataConfig(max_train_per_task=400, max_test_per_task=300)
    glove = fcl.TrainingConfig(word_vectors='glove.6B.50d.top50k.txt',
                               embedding_dim=50)
    section = '\n'.join(fcl_inputs.markdown(
        inputs, data=capped, training=glove, coverage={'toy': 0.838}))
    self.assertIn('at most 400 training + validation documents', section)
    self.assertIn('at most 300 of them, so not the whole test split',
                  section)
    self.assertIn('GloVe 6B 50d vectors (`glove.6B.50d.top50k.txt`, the '
                  '50,000 most frequent words), frozen from the start; the '
                  'vocabulary\'s words with a vector: toy 83.8 %', section)


class ReportOnlyExecutionTest(tf.test.TestCase):
  """`run_fcl(report_only=True)` reads finished runs and trains nothing."""

  def setUp(self):
    super().setUp()
    self.data_dir = _toy_data_dir(self.create_tempdir().full_path)
    self.output_dir = self.create_tempdir().full_path
    # A report from before --seeds (docs/results/fcl.md's first setting):
    # one run per method, of the training seed, its settings partly unset.
    data = {k: v for k, v in vars(_DATA).items()
            if k not in ('construction', 'allow_repeated_label_sets')}
    training = {k: v for k, v in vars(_TRAINING).items()
                if k not in ('word_vectors', 'max_weight_share')}
    with open(os.path.join(self.output_dir, 'results.json'), 'w') as f:
      json.dump({'command': 'trained so', 'data': data, 'training': training,
                 'results': {'toy': {'fedweit': _run(0.5),
                                     'fedseit': _run(0.75)}}}, f)

  def _report_only(self, methods):
    with mock.patch.object(fcl, 'run_method',
                           side_effect=AssertionError('trained')):
      return fcl.run_fcl(datasets=['toy'], methods=methods, data=_DATA,
                         training=_TRAINING, output_dir=self.output_dir,
                         data_dir=self.data_dir, command='cmd --report_only',
                         report_only=True)

  def test_reads_the_earlier_report_and_opens_with_what_the_model_saw(self):
    results = self._report_only(['fedweit', 'fedseit'])
    self.assertEqual(results['toy']['fedseit']['seeds'],
                     {str(_TRAINING.seed): _run(0.75)})
    with open(os.path.join(self.output_dir, 'results.md'),
              encoding='utf-8') as f:
      report = f.read()
    # After the title and the intro paragraph, before any number.
    sections = [line for line in report.split('\n')
                if line.startswith('## ')]
    self.assertEqual(sections[0], '## What the model saw')
    self.assertIn('| toy | 6 (mean 6) | 5 (mean 5) | 2 of 5 (40.0 %) |',
                  report)
    self.assertEqual(report.count(intervals.VERDICT_RULE), 1)
    self.assertIn('The runs were trained by:\n\n```\ntrained so\n```', report)
    # One seed: the pairs' interval [0.25, 0.25] excludes 0, no verdict.
    self.assertIn('| toy | FedSeIT − FedWeIT | +25.00 | n=1 | '
                  '[25.00, 25.00] | undetermined |', report)
    with open(os.path.join(self.output_dir, 'results.json')) as f:
      saved = json.load(f)
    self.assertEqual(saved['inputs']['toy'][str(_TRAINING.seed)][
        'test_documents_cut'], 2)
    self.assertEqual(saved['trained_by'], 'trained so')
    self.assertFalse(saved['seeds_are_replicates'])
    # Written again from its own output: the same runs, the same command.
    self._report_only(['fedweit', 'fedseit'])
    with open(os.path.join(self.output_dir, 'results.json')) as f:
      self.assertEqual(json.load(f)['trained_by'], 'trained so')

  def test_a_run_found_nowhere_is_named_not_trained(self):
    with self.assertRaisesRegex(errors.InputError,
                                r'1 run\(s\) not finished.*toy-fedavg-'):
      self._report_only(['fedweit', 'fedavg'])

  def test_a_finished_run_folder_comes_first(self):
    directory = fcl.run_dir(self.output_dir, 'toy', 'fedseit', _DATA,
                            _TRAINING)
    os.makedirs(directory)
    with open(os.path.join(directory, 'results.json'), 'w') as f:
      json.dump(_run(1.0), f)
    results = self._report_only(['fedweit', 'fedseit'])
    self.assertTrue(np.isclose(results['toy']['fedseit']['acc'], 1.0))


if __name__ == '__main__':
  tf.test.main()
