"""Tests of the weighting demo: its report, and an end-to-end run on r8."""

import dataclasses
import json
import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import data
from tff_nlp import errors
from tff_nlp import runtime
from tff_nlp import training
from apps.weighting_demo import experiment as weighting_demo
from apps.common import text_classification_task as text_classification

_TINY_DATA = text_classification.ClientDataConfig(
    dataset='r8', num_clients=2, dirichlet_alpha=0.5, min_train_examples=50,
    vocab_size=500, max_length=16)
_TINY_TRAINING = weighting_demo.WeightingTrainingConfig(
    local_epochs=1, batch_size=256, client_learning_rate=1.0, embedding_dim=8)
_TINY_LOOP = training.LoopConfig(rounds=2, seed=3, progress=False)


def _without_timing(records):
  # Wall times (`round_seconds`, `eval_seconds`) differ between runs.
  return [{k: v for k, v in r.items() if not k.endswith('_seconds')}
          for r in records]


def _table_rows(markdown: str) -> dict[str, list[str]]:
  """The cells of each row of the Markdown table, keyed by the first cell."""
  rows = {}
  for line in markdown.splitlines():
    if line.startswith('| ') and not line.startswith('|---'):
      cells = [c.strip() for c in line.strip('|').split('|')]
      rows[cells[0]] = cells[1:]
  return rows


class ResultsTableExecutionTest(tf.test.TestCase):

  def test_table_layout_and_percentages(self):
    result = weighting_demo.WeightingResult(
        weighting='lorar',
        accuracies=text_classification.Accuracies(correct=(1, 2),
                                                  totals=(3, 4)),
        records=[],
    )
    # 1/3 = 33.33%, 2/4 = 50%; MacroAvg 41.67%, MicroAvg 3/7 = 42.86%.
    self.assertEqual(
        weighting_demo.results_table([result], train_sizes=[30, 7]),
        '| Weighting | C1 (30) | C2 (7) | MacroAvg | MicroAvg |\n'
        '|---|---:|---:|---:|---:|\n'
        '| lorar | 33.33 | 50.00 | 41.67 | 42.86 |')


class WhatTheModelSawTest(tf.test.TestCase):

  def test_section_states_the_counts_it_is_given(self):
    # The committed r8 run (seed 0, max_length 128): counted with
    # text_classification.prepare_clients.
    section = weighting_demo.what_the_model_saw(
        train_examples=[424, 1820, 635, 353, 357, 616, 260, 1020],
        test_examples=[152, 697, 259, 145, 153, 261, 109, 413],
        truncated=dict(max_length=128, train=1276, test=438),
        local_epochs=2, rounds=20, dataset='r8')
    self.assertStartsWith(section, '## What the model saw')
    self.assertIn('2 local epoch(s) a round for 20 rounds: 424 / 1,820 / 635',
                  section)
    # 424 + 1,820 + 635 + 353 + 357 + 616 + 260 + 1,020 = 5,485; the test
    # splits add up to 2,189.
    self.assertIn('(5,485 r8 training texts)', section)
    self.assertIn('(2,189 in all)', section)
    self.assertIn('cut to 128: 1,276 training and 438 test texts', section)
    self.assertIn('no difference between weightings is called', section)


class ArgumentsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('local_epochs', dict(local_epochs=0), 'local_epochs must be positive'),
      ('batch_size', dict(batch_size=-1), 'batch_size must be positive'),
      ('optimizer', dict(client_optimizer='lamb'),
       r"Unknown client_optimizer 'lamb'; expected one of "
       r"\['adafactor', 'adam', 'sgd'\]"),
  )
  def test_bad_training_config(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      weighting_demo.WeightingTrainingConfig(**kwargs)

  @parameterized.named_parameters(
      ('unknown', ['lorar', 'lora']),
      ('repeated', ['uniform', 'uniform']),
      ('none', []),
  )
  def test_bad_weightings_fail_before_any_work(self, weightings):
    output_dir = os.path.join(self.create_tempdir().full_path, 'out')
    with self.assertRaisesRegex(ValueError, 'weightings must be distinct'):
      weighting_demo.run_weighting_demo(
          data_dir='/nonexistent', output_dir=output_dir,
          client_data=_TINY_DATA, training=_TINY_TRAINING, loop=_TINY_LOOP,
          weightings=weightings)
    self.assertFalse(os.path.exists(output_dir))


class WeightingDemoExecutionTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(runtime.local_cpp_context())

  def _run(self, weightings, output_dir=None, loop=_TINY_LOOP, **kwargs):
    output_dir = output_dir or self.create_tempdir().full_path
    kwargs = dict(dict(data_dir=None, client_data=_TINY_DATA), **kwargs)
    results = weighting_demo.run_weighting_demo(
        output_dir=output_dir, training=_TINY_TRAINING, loop=loop,
        weightings=weightings, **kwargs)
    return output_dir, results

  def test_real_r8_reports_are_consistent_and_reproducible(self):
    output_dir, results = self._run(weighting_demo.WEIGHTINGS)
    self.assertEqual([r.weighting for r in results],
                     list(weighting_demo.WEIGHTINGS))
    for name in ('config.json', 'results.json', 'results.md',
                 'training_loss.png', 'macro_accuracy.png',
                 'lorar/metrics.csv', 'lorar/metrics.jsonl'):
      self.assertTrue(os.path.isfile(os.path.join(output_dir, name)), name)
    for name in ('training_loss.png', 'macro_accuracy.png'):
      with open(os.path.join(output_dir, name), 'rb') as f:
        self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')
    self.assertNotEmpty(os.listdir(
        os.path.join(output_dir, 'tensorboard', 'uniform')))
    with open(os.path.join(output_dir, 'config.json')) as f:
      config = json.load(f)
    with open(os.path.join(output_dir, 'results.json')) as f:
      report = json.load(f)
    with open(os.path.join(output_dir, 'results.md')) as f:
      markdown = f.read()
    rows = _table_rows(markdown)
    self.assertIn('## What the model saw', markdown)

    clients = report['clients']
    train_sizes = [c['train_examples'] for c in clients]
    test_sizes = [c['test_examples'] for c in clients]
    self.assertLen(clients, 2)
    self.assertEqual(config['loop']['rounds'], 2)
    self.assertEqual(config['experiment']['seed'], 3)
    self.assertEqual(config['experiment']['client_data']['dataset'], 'r8')
    self.assertEqual(config['data_dir'], data.find_data_dir())
    # The clients hold all of r8 (5485 train, 2189 test), split by label.
    self.assertEqual(sum(train_sizes), 5485)
    self.assertEqual(sum(test_sizes), 2189)
    for c in clients:
      self.assertEqual(sum(c['train_label_counts']), c['train_examples'])
    # Texts of more than max_length=16 tokens are cut and counted; the
    # reference counts r8's texts with the encoder's tokenizer.
    r8 = data.load_dataset('r8')
    def longer(texts):
      return sum(len(data.tokenize(t)) > 16 for t in texts)
    truncated = report['truncated']
    self.assertEqual(truncated['max_length'], 16)
    self.assertEqual((truncated['train'], truncated['test']),
                     (longer(r8.train.texts), longer(r8.test.texts)))
    self.assertGreater(truncated['train'], 0)
    self.assertEqual(sum(c['train'] for c in truncated['clients']),
                     truncated['train'])
    self.assertEqual(rows['Weighting'], [
        f'C1 ({train_sizes[0]})', f'C2 ({train_sizes[1]})', 'MacroAvg',
        'MicroAvg'])

    self.assertEqual(list(report['weightings']),
                     list(weighting_demo.WEIGHTINGS))
    for name, entry in report['weightings'].items():
      accuracy = np.array(entry['per_client_accuracy'])
      self.assertAllInRange(accuracy, 0.0, 1.0)
      self.assertEqual(entry['test_examples'], test_sizes)
      self.assertAllClose(accuracy,
                          np.divide(entry['correct'], test_sizes))
      self.assertAlmostEqual(entry['macro_avg'], np.mean(accuracy))
      self.assertAlmostEqual(entry['micro_avg'],
                             sum(entry['correct']) / sum(test_sizes))
      self.assertEqual(
          rows[name],
          [f'{100 * v:.2f}' for v in (*accuracy, entry['macro_avg'],
                                      entry['micro_avg'])])
      # Round 0 holds the initial evaluation; the last round the final one.
      records = entry['rounds']
      self.assertEqual([r['round'] for r in records], [0, 1, 2])
      self.assertEqual(records[-1]['eval']['correct'], entry['correct'])
      weighting_metrics = records[1]['train']['client_work']['weighting']
      self.assertEqual(weighting_metrics['num_clients'], 2)
      # num_examples counts all examples processed: one epoch here.
      self.assertEqual(weighting_metrics['num_examples'], 5485)
      for record in records[1:]:
        self.assertEqual(record['client_ids'], [0, 1])
        self.assertEqual([c['dataset_size'] for c in record['client_outputs']],
                         train_sizes)
      # Every weighting starts from the same model on the same batches.
      first = report['weightings']['num_examples']['rounds'][1]
      self.assertAllClose(
          records[1]['client_outputs'][0]['first_batch_loss'],
          first['client_outputs'][0]['first_batch_loss'])
    for record in report['weightings']['uniform']['rounds'][1:]:
      self.assertEqual([c['weight'] for c in record['client_outputs']],
                       [1.0, 1.0])
    for record in report['weightings']['num_examples']['rounds'][1:]:
      self.assertEqual([c['weight'] for c in record['client_outputs']],
                       train_sizes)
    initial = report['initial_model']
    self.assertAllInRange(initial['per_client_accuracy'], 0.0, 1.0)
    self.assertIn(f'Initial model: MacroAvg {100 * initial["macro_avg"]:.2f}',
                  markdown)

    # A separate run of one weighting gives the same numbers.
    _, (again,) = self._run(['lorar'])
    lorar = results[-1]
    self.assertEqual(again.accuracies, lorar.accuracies)
    self.assertEqual(_without_timing(again.records),
                     _without_timing(lorar.records))

  def test_rerun_resumes_and_extends_but_refuses_another_experiment(self):
    output_dir, (first,) = self._run(['uniform'])
    # Same command again: everything is checkpointed, nothing is retrained.
    _, (again,) = self._run(['uniform'], output_dir=output_dir)
    self.assertEqual(again.records, first.records)
    # More rounds continue the run: rounds 1-2 are kept as they were.
    _, (longer,) = self._run(
        ['uniform'], output_dir=output_dir,
        loop=training.LoopConfig(rounds=3, seed=3, progress=False))
    self.assertEqual([r['round'] for r in longer.records], [0, 1, 2, 3])
    self.assertEqual(longer.records[:3], first.records)
    # Another seed is another experiment.
    with self.assertRaisesRegex(
        errors.CheckpointError,
        r'config.json: .* holds a run of a different experiment '
        r'\(seed: 3 -> 4\)'):
      self._run(['uniform'], output_dir=output_dir,
                loop=training.LoopConfig(rounds=3, seed=4, progress=False))


  def test_changed_data_is_refused_and_restart_starts_over(self):
    # A small dataset of one's own: r8's first 400 training texts.
    data_dir = self.create_tempdir('data').full_path
    folder = os.path.join(data_dir, 'text_classification', 'tiny')
    os.makedirs(folder)
    r8 = os.path.join(data.find_data_dir(), 'text_classification', 'r8')
    with open(os.path.join(r8, 'train.tsv')) as f:
      train = [next(f) for _ in range(400)]
    labels = {line.split('\t')[0] for line in train[:300]}
    with open(os.path.join(r8, 'test.tsv')) as f:
      test = [line for line in f if line.split('\t')[0] in labels][:200]
    train_path = os.path.join(folder, 'train.tsv')
    with open(train_path, 'w') as f:
      f.writelines(train)
    with open(os.path.join(folder, 'test.tsv'), 'w') as f:
      f.writelines(test)
    setup = dict(data_dir=data_dir,
                 client_data=dataclasses.replace(_TINY_DATA, dataset='tiny'))
    output_dir, (first,) = self._run(['uniform'], **setup)
    with open(os.path.join(output_dir, 'data_fingerprint.json')) as f:
      self.assertEqual(sorted(json.load(f)['files']),
                       ['text_classification/tiny/test.tsv',
                        'text_classification/tiny/train.tsv'])

    def train_examples():
      with open(os.path.join(output_dir, 'results.json')) as f:
        return sum(c['train_examples'] for c in json.load(f)['clients'])

    def metrics_rounds():
      return [r['round'] for r in training.read_json_lines(
          os.path.join(output_dir, 'uniform', 'metrics.jsonl'))]

    self.assertEqual(train_examples(), 400)
    with open(train_path, 'w') as f:
      f.writelines(train[:300])
    longer = training.LoopConfig(rounds=3, seed=3, progress=False)
    with self.assertRaises(errors.CheckpointError) as e:
      self._run(['uniform'], output_dir=output_dir, loop=longer, **setup)
    self.assertRegex(
        str(e.exception),
        r'text_classification/tiny/train\.tsv changed since this run started '
        r'\(sha256 [0-9a-f]{12}… -> [0-9a-f]{12}…\)')
    self.assertEqual(metrics_rounds(), [0, 1, 2])  # Nothing trained.
    # restart: the old rounds are gone, the new run has rounds 0-3 of the
    # 300 examples only.
    _, (restarted,) = self._run(['uniform'], output_dir=output_dir,
                                loop=longer, restart=True, **setup)
    self.assertEqual([r['round'] for r in restarted.records], [0, 1, 2, 3])
    self.assertEqual(metrics_rounds(), [0, 1, 2, 3])
    self.assertEqual(train_examples(), 300)
    self.assertNotEqual(_without_timing(restarted.records[1:2]),
                        _without_timing(first.records[1:2]))


if __name__ == '__main__':
  tf.test.main()
