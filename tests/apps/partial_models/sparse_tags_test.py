"""Tests of the sparse-vs-dense tag experiment on real TREC data."""

import dataclasses
import json
import os
import shutil
import tempfile

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp import training
from tff_nlp.data import population as population_lib
from tff_nlp.data import tags
from apps.partial_models import tag_experiment as experiment
from apps.partial_models import tag_model as tag_regression


class TagTaskExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_prepare_task_on_trec50_gives_two_tags_per_question(self):
    task = experiment.prepare_task(
        None, experiment.TagDataConfig(dataset='trec50', num_clients=5,
                                       max_words=300),
        seed=0)
    vocab = task.vocabularies
    self.assertEqual(vocab.num_word_rows, 301)
    # 6 coarse + 50 fine training labels as tags, plus one OOV column.
    self.assertEqual(vocab.num_tag_columns, 57)
    self.assertLen(task.clients, 5)
    self.assertEqual(sum(len(c) for c in task.clients), 5452)
    # Every question has its coarse and its fine tag.
    self.assertEqual(set(task.clients[0].tags.sum(axis=1)), {2.0})
    self.assertLen(task.test, 500)
    self.assertTrue(all(0 < d <= 301 for d in task.distinct_words))

  def test_document_partition_makes_one_client_per_question(self):
    task = experiment.prepare_task(
        None, experiment.TagDataConfig(dataset='trec6', partition='document',
                                       max_words=100), seed=0)
    self.assertLen(task.clients, 5452)
    self.assertEqual({len(c) for c in task.clients}, {1})

  def test_evaluate_matches_hand_computed_precision(self):
    vocab = tags.TagVocabularies(words=('a', 'b'), tags=('x', 'y'))
    test = tags.encode([tags.TagExample('a', '', 'x'),
                        tags.TagExample('b b', '', 'y'),
                        tags.TagExample('a b', '', 'y')], vocab)
    task = experiment.TagTask(vocabularies=vocab, clients=(), test=test,
                              distinct_words=())
    # Word a votes for x, word b for y (twice as strongly): the top tag is x,
    # y, y; the third example's true tag is y, so P@1 = 3/3.
    weights = np.array([[1., 0., 0.], [0., 2., 0.], [0., 0., 0.]])
    metrics = experiment.evaluate(weights, task, k_values=(1,))
    np.testing.assert_allclose(metrics['precision_at_1'], 1.0, rtol=1e-6)
    weights[0, 0] = 5.0  # Now example 3 ranks x first: P@1 = 2/3.
    np.testing.assert_allclose(
        experiment.evaluate(weights, task, (1,))['precision_at_1'], 2 / 3,
        rtol=1e-6)

  @parameterized.named_parameters(
      ('partition', dict(partition='random'), "Unknown partition 'random'"),
      ('max_words', dict(max_words=0), 'max_words must be >= 1'),
  )
  def test_data_config_rejects(self, kwargs, match):
    with self.assertRaisesRegex(ValueError, match):
      experiment.TagDataConfig(**kwargs)

  def test_dense_baseline_takes_one_epoch(self):
    vocab = tags.TagVocabularies(words=('a',), tags=('x',))
    with self.assertRaisesRegex(ValueError, 'one local epoch'):
      experiment.build_process('dense', vocab, experiment.TagTrainingConfig(
          client_epochs=2))


class PopulationRunTest(tf.test.TestCase, parameterized.TestCase):
  """A simulated population whose datasets the worker builds from ids."""

  _DATA = experiment.TagDataConfig(dataset='trec6', partition='document',
                                   max_words=100, max_tags=20)
  _TRAINING = experiment.TagTrainingConfig(max_keys=8,
                                           client_learning_rate=1.0,
                                           batch_size=2)
  _POPULATION = population_lib.PopulationConfig(num_users=100_000,
                                                examples_per_user=3)

  def test_next_takes_user_ids_at_clients(self):
    task = experiment.prepare_task(None, self._DATA, seed=0)
    process, client_data = experiment.population_run(
        experiment.SPARSE, task, self._TRAINING, self._POPULATION)
    parameter = process.next.type_signature.parameter
    self.assertEqual(str(parameter[1]), '{str}@CLIENTS')
    self.assertEqual(client_data(1, [0, 99_999]), ['0', '99999'])

  @parameterized.named_parameters(('sparse', experiment.SPARSE),
                                  ('dense', experiment.DENSE))
  def test_round_equals_the_round_on_datasets_built_here(self, method):
    # The reference: the plain process on the same users' datasets, built
    # in Python by the same population (and, for dense, as Keras pairs).
    task = experiment.prepare_task(None, self._DATA, seed=0)
    process, client_data = experiment.population_run(
        method, task, self._TRAINING, self._POPULATION)
    plain = experiment.build_process(method, task.vocabularies,
                                     self._TRAINING)
    population = population_lib.SimulatedPopulation(
        task.train, task.train_labels, self._POPULATION,
        num_words=task.vocabularies.num_word_rows,
        batch_size=self._TRAINING.batch_size)
    users = [3, 41_000, 99_998]
    datasets = [population.user_dataset(tf.constant(i))
                for i in client_data(1, users)]
    if method == experiment.DENSE:
      datasets = [tag_regression.as_keras_batches(d) for d in datasets]
    lazy = process.next(process.initialize(), client_data(1, users))
    eager = plain.next(plain.initialize(), datasets)
    lazy_weights = process.get_model_weights(lazy.state).trainable
    eager_weights = plain.get_model_weights(eager.state).trainable
    self.assertAllClose(lazy_weights, eager_weights, atol=1e-6, rtol=0)
    self.assertGreater(np.abs(np.asarray(lazy_weights[0])).max(), 1e-3)

  def test_task_without_a_pool_is_refused(self):
    task = experiment.TagTask(vocabularies=tags.TagVocabularies(
        words=('a',), tags=('x',)), clients=(), test=None, distinct_words=())
    with self.assertRaisesRegex(ValueError, 'no training pool'):
      experiment.population_run(experiment.SPARSE, task, self._TRAINING,
                                self._POPULATION)


class RunSparseTagsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # M = V rows.
      ('rows', 201, 1),
      # 51 keys of 4 rows: blocks 0..50 cover rows 0..203, so all V = 201.
      ('blocks', 51, 4))
  def test_run_sparse_equals_dense_when_every_word_is_selected(
      self, max_keys, block_size):
    # Four trec6 clients, a 200-word vocabulary and every row selected: no
    # client drops a word, so the sparse round is FedAvg with uniform weights
    # and both methods must give the same test metrics.
    output_dir = self.create_tempdir().full_path
    data = experiment.TagDataConfig(dataset='trec6', num_clients=4,
                                    max_words=200, min_train_examples=20)
    train = experiment.TagTrainingConfig(max_keys=max_keys,
                                         block_size=block_size,
                                         client_learning_rate=20,
                                         batch_size=64, k_values=(1, 2))
    summary = experiment.run_sparse_tags(
        data_dir=None, output_dir=output_dir, data=data, training=train,
        loop=training.LoopConfig(rounds=2, eval_every=1, progress=False),
        methods=['dense', 'sparse'])
    dense, sparse = summary['methods']['dense'], summary['methods']['sparse']
    # It learned something.
    self.assertGreater(dense['final']['precision_at_1'], 0.3)
    for key, value in dense['final'].items():
      self.assertAlmostEqual(sparse['final'][key], value, delta=1e-6,
                             msg=key)
    self.assertEqual(summary['task']['clients_over_max_keys'], 0)
    # Down: the dense model vs the M * B selected rows of T float32 each.
    num_tags = summary['task']['num_tags']
    self.assertEqual(dense['bytes_down_per_client'], 4 * 201 * num_tags + 4)
    self.assertEqual(sparse['bytes_down_per_client'],
                     4 * max_keys * block_size * num_tags)
    for name in (experiment.RESULTS_FILE, experiment.TABLE_FILE,
                 experiment.CONFIG_FILE, experiment.PLOT_FILE):
      self.assertTrue(os.path.exists(os.path.join(output_dir, name)), name)
    with open(os.path.join(output_dir, experiment.RESULTS_FILE)) as f:
      self.assertEqual(set(json.load(f)['methods']), {'dense', 'sparse'})
    with open(os.path.join(output_dir, experiment.TABLE_FILE)) as f:
      table = f.read()
    self.assertIn('| Dense FedAvg (whole model) |', table)


_RESUME_DATA = experiment.TagDataConfig(dataset='trec6', num_clients=4,
                                        max_words=200, min_train_examples=20)
_RESUME_TRAINING = experiment.TagTrainingConfig(max_keys=50, batch_size=64,
                                                k_values=(1,))


def _run_sparse(output_dir, *, rounds=1, seed=0, data=_RESUME_DATA,
                training_config=_RESUME_TRAINING, **loop_kwargs):
  return experiment.run_sparse_tags(
      data_dir=None, output_dir=str(output_dir), data=data,
      training=training_config,
      loop=training.LoopConfig(rounds=rounds, seed=seed, progress=False,
                               **loop_kwargs),
      methods=['sparse'])


def _read(path):
  with open(path) as f:
    return f.read()


class ResumeExecutionTest(tf.test.TestCase, parameterized.TestCase):
  """Reruns of one one-round run, shared by the class (it is slow)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.output_dir = tempfile.mkdtemp(prefix='sparse_tags_run')
    cls.first = _run_sparse(cls.output_dir)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.output_dir, ignore_errors=True)
    super().tearDownClass()

  def test_rerun_resumes_and_extends(self):
    output_dir, first = self.output_dir, self.first
    metrics = os.path.join(output_dir, 'sparse', 'metrics.jsonl')
    records = _read(metrics)
    # Same call again: everything is checkpointed, nothing is retrained (a
    # retrained round would rewrite its record, wall times included).
    again = _run_sparse(output_dir)
    self.assertEqual(_read(metrics), records)
    self.assertEqual(again['methods']['sparse']['eval_curve'],
                     first['methods']['sparse']['eval_curve'])
    # More rounds continue the run: round 1 is kept as it was.
    longer = _run_sparse(output_dir, rounds=2)
    self.assertEqual(
        [p['round'] for p in longer['methods']['sparse']['eval_curve']],
        [0, 1, 2])
    self.assertTrue(_read(metrics).startswith(records))
    with open(os.path.join(output_dir, experiment.CONFIG_FILE)) as f:
      self.assertEqual(json.load(f)['loop']['rounds'], 2)

  @parameterized.named_parameters(
      ('seed', dict(seed=4), 'seed: 0 -> 4'),
      ('clients_per_round', dict(clients_per_round=2),
       'clients_per_round: 0 -> 2'),
      ('max_words', dict(data=dataclasses.replace(_RESUME_DATA,
                                                  max_words=300)),
       'data.max_words: 200 -> 300'),
      ('training', dict(training_config=dataclasses.replace(
          _RESUME_TRAINING, max_keys=60, client_learning_rate=2.0)),
       'training.client_learning_rate: 1.0 -> 2.0; '
       'training.max_keys: 50 -> 60'),
  )
  def test_rerun_of_another_experiment_is_refused(self, change, difference):
    output_dir = self.output_dir
    config = os.path.join(output_dir, experiment.CONFIG_FILE)
    recorded = _read(config)
    with self.assertRaises(errors.CheckpointError) as e:
      _run_sparse(output_dir, rounds=2, **change)
    self.assertEqual(
        str(e.exception),
        f"{config}: '{output_dir}' holds a run of a different experiment "
        f'({difference}). Pass --restart (restart=True) to remove this run '
        'and start over, or use another output directory.')
    self.assertEqual(_read(config), recorded)  # Left as it was.


if __name__ == '__main__':
  tf.test.main()
