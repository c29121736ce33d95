"""Tests of the federated continual-learning experiment (runs, cache, report)."""

import dataclasses
import functools
import json
import os
import shutil
from typing import Any, NamedTuple
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import shared_runs
from tff_nlp import data as data_lib
from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.algorithms import fcl as fcl_lib
from apps.fcl import experiment as fcl
from apps.fcl import report as fcl_report
from tff_nlp.models import skipgram
from tff_nlp.runtime import contexts as runtime_contexts
from tff_nlp.training import loop

# Two clients × two tasks of TREC-6 at the smallest size that trains.
_DATA = fcl.DataConfig(num_clients=2, tasks_per_client=2,
                       max_train_per_task=24, max_test_per_task=16,
                       vocabulary_size=500, max_length=16)
_TRAINING = fcl.TrainingConfig(rounds_per_task=1, local_epochs=1,
                               batch_size=8, embedding_dim=4, num_filters=2,
                               sit_top_k=1, sit_clusters=4)


class SummarizeExecutionTest(tf.test.TestCase):

  def test_hand_derived_summary(self):
    # Client 0: acc after task 0 on task 0 = 0.8; after task 1: 0.6 on
    # task 0, 0.9 on task 1. Client 1: 0.5; then 0.5, 0.7.
    # ACC = mean of last rows = (0.6 + 0.9 + 0.5 + 0.7) / 4 = 0.675.
    # Forgetting = mean over clients of (best earlier − final) on task 0:
    # ((0.8 − 0.6) + (0.5 − 0.5)) / 2 = 0.1; BWT = −0.1.
    # Bytes per client: rounds 100 + 200 down, 10 + 20 up; task starts 1000
    # + 2000 down, 0 + 5 up: 3300 down, 35 up over 2 rounds.
    progress = [
        {'accuracy': [[0.8], [0.5]], 'macro_f1': [[0.7], [0.4]],
         'start': {'bytes_down_per_client': 1000.0,
                   'bytes_up_per_client': 0.0, 'kb_entries_per_client': 0.0},
         'rounds': [{'bytes_down_per_client': 100.0,
                     'bytes_up_per_client': 10.0,
                     'adaptive_nonzero_per_client': 4.0,
                     'non_finite_clients': 0}]},
        {'accuracy': [[0.6, 0.9], [0.5, 0.7]],
         'macro_f1': [[0.5, 0.8], [0.4, 0.6]],
         'start': {'bytes_down_per_client': 2000.0,
                   'bytes_up_per_client': 5.0, 'kb_entries_per_client': 1.0},
         'rounds': [{'bytes_down_per_client': 200.0,
                     'bytes_up_per_client': 20.0,
                     'adaptive_nonzero_per_client': 6.0,
                     'non_finite_clients': 1}]},
    ]
    config = fcl_lib.FclConfig(method='fedweit', num_clients=2,
                               tasks_per_client=2)
    results = fcl_report.summarize(progress, config, seconds=12.0)
    self.assertAllClose(results['accuracy'], 0.675)
    self.assertAllClose(results['forgetting'], 0.1)
    self.assertAllClose(results['backward_transfer'], -0.1)
    # Final macro-F1: (0.5 + 0.8 + 0.4 + 0.6) / 4.
    self.assertAllClose(results['macro_f1'], 0.575)
    self.assertEqual(results['bytes_down_per_client'], 3300.0)
    self.assertEqual(results['bytes_up_per_client'], 35.0)
    self.assertEqual(results['bytes_down_per_client_round'], 1650.0)
    self.assertEqual(results['adaptive_nonzero_per_client_round'], 5.0)
    self.assertEqual(results['kb_entries_per_client'], [0.0, 1.0])
    self.assertEqual(results['non_finite_clients'], 1)
    self.assertEqual(results['accuracy_matrix'],
                     [[[0.8, None], [0.6, 0.9]], [[0.5, None], [0.5, 0.7]]])
    # The matrices survive JSON and come back with NaN above the diagonal.
    matrix = fcl_report.results_matrix(
        json.loads(json.dumps(results))['accuracy_matrix'])
    self.assertTrue(np.isnan(matrix[0, 0, 1]))


class EncodeExecutionTest(tf.test.TestCase):

  def test_encoded_tasks(self):
    encoded = fcl.encode_dataset('trec6', _DATA)
    self.assertLen(encoded.clients, 2)
    for tasks in encoded.clients:
      self.assertLen(tasks, 2)
      for task in tasks:
        self.assertEqual(task.x_train.shape[1], 16)
        self.assertEqual(task.x_train.dtype, np.int32)
        self.assertLen(task.label_names, 4)
        self.assertLess(task.y_train.max(), 4)
        self.assertLessEqual(len(task.y_test), 16)
    self.assertEqual(encoded.num_classes, 4)
    self.assertLessEqual(encoded.vocab_size, 500)
    again = fcl.encode_dataset('trec6', _DATA)
    np.testing.assert_array_equal(again.clients[1][1].x_train,
                                  encoded.clients[1][1].x_train)

  def test_unknown_method(self):
    with self.assertRaisesRegex(ValueError, "fedx"):
      fcl.check_methods(['fedavg', 'fedx'])


# Two labels, hence one task of both (labels_per_task 2). Training: 4
# documents of 5 tokens labelled a, 4 of 2 tokens labelled b; one of each
# label is held out for validation (not encoded), so 3 of each are encoded.
# Test (all encoded): a with 4 and 3 tokens, b with 1 and 6.
_TRAIN_TSV = 'a\tw w w w w\n' * 4 + 'b\tw w\n' * 4
_TEST_TSV = 'a\tw w w w\na\tw w w\nb\tw\nb\tw w w w w w\n'


class EncodeTruncationExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # Encoded training documents cut (3 per label whose length exceeds
      # max_length) plus test documents cut (lengths 4, 3, 1, 6).
      ('length_1', 1, 3 + 3 + 3),  # Train 5, 2 > 1; test 4, 3, 6 > 1.
      ('length_3', 3, 3 + 2),  # Train 5 > 3; test 4, 6 > 3.
      ('length_5', 5, 0 + 1),  # Train none (5 is kept whole); test 6.
      ('length_6', 6, 0),
  )
  def test_counts_documents_cut_at_max_length(self, max_length, expected):
    root = self.create_tempdir().full_path
    folder = os.path.join(root, 'text_classification', 'toy')
    os.makedirs(folder)
    for name, content in (('train', _TRAIN_TSV), ('test', _TEST_TSV)):
      with open(os.path.join(folder, name + '.tsv'), 'w') as f:
        f.write(content)
    data = fcl.DataConfig(num_clients=1, tasks_per_client=1,
                          vocabulary_size=10, max_length=max_length, seed=0)
    encoded = fcl.encode_dataset('toy', data, data_dir=root)
    ((task,),) = encoded.clients
    self.assertEqual((len(task.y_train), len(task.y_test)), (6, 4))
    self.assertEqual(encoded.truncated_documents, expected)


class ConstructionTest(tf.test.TestCase):

  def test_random_keeps_every_run_key_and_shared_labels_keys_the_runs(self):
    before = {k: v for k, v in dataclasses.asdict(_DATA).items()
              if k not in ('allow_repeated_label_sets', 'construction')}
    relayed = dataclasses.replace(_DATA, construction='shared_labels')
    for method in fcl.METHODS:
      self.assertEqual(fcl.run_key('trec6', method, _DATA, _TRAINING)['data'],
                       before)
      self.assertEqual(fcl.run_key('trec6', method, relayed, _TRAINING)[
          'data']['construction'], 'shared_labels')

  def test_encoded_clients_follow_the_construction(self):
    relayed = fcl.encode_dataset(
        'trec6', dataclasses.replace(_DATA, construction='shared_labels'))
    labels = [[t.label_names for t in tasks] for tasks in relayed.clients]
    # 2 clients x 2 tasks: client 1's first task is client 0's second.
    self.assertEqual(labels[0][1], labels[1][0])
    self.assertNotEqual(labels[0][0], labels[0][1])


class SkipGramVectorsTest(tf.test.TestCase):

  def test_trained_once_cached_and_keyed(self):
    texts = ['what is the capital of france', 'who wrote the book'] * 50
    training = dataclasses.replace(_TRAINING, word_vectors=fcl.SKIPGRAM)
    output_dir = self.create_tempdir().full_path
    with mock.patch.object(skipgram, 'public_english_text',
                           return_value=texts) as corpus:
      vectors = fcl.load_word_vectors(training, output_dir=output_dir)
      again = fcl.load_word_vectors(training, output_dir=output_dir)
    corpus.assert_called_once()  # the second call read the cache
    self.assertEqual(vectors.dim, _TRAINING.embedding_dim)
    self.assertCountEqual(vectors.words, set(' '.join(texts).split()))
    self.assertAllEqual(vectors.vectors, again.vectors)
    self.assertStartsWith(
        vectors.path, os.path.join(output_dir, fcl.WORD_VECTORS_DIR,
                                   'skipgram-'))
    # The run key holds the vectors' whole configuration.
    key = fcl.run_key('trec6', 'fedseit', _DATA, training)
    self.assertEqual(key['training']['word_vectors'], {
        'skipgram': dataclasses.asdict(fcl.skipgram_config(training))})


class MaxWeightShareExecutionTest(tf.test.TestCase):

  def test_unset_cap_keeps_every_run_key(self):
    # The key of a config that never names the field, as before it existed.
    before = {k: v for k, v in dataclasses.asdict(_TRAINING).items()
              if k not in ('max_weight_share', 'word_vectors')}
    for method in fcl.METHODS:
      key = fcl.run_key('trec6', method, _DATA, _TRAINING)
      self.assertNotIn('max_weight_share', key['training'])
      self.assertEqual(key['training'], before)

  def test_cap_defines_the_federated_runs(self):
    capped = dataclasses.replace(_TRAINING, max_weight_share=0.5)
    for method in ('fedavg', 'fedseit', fcl.NO_FOREIGN):
      self.assertEqual(
          fcl.run_key('trec6', method, _DATA, capped)['training'][
              'max_weight_share'], 0.5)
      self.assertNotEqual(fcl.run_dir('out', 'trec6', method, _DATA, capped),
                          fcl.run_dir('out', 'trec6', method, _DATA,
                                      _TRAINING))
      self.assertEqual(
          fcl.fcl_config(method, _DATA, capped).max_weight_share, 0.5)
      self.assertIsNone(
          fcl.fcl_config(method, _DATA, _TRAINING).max_weight_share)
    # 'local' averages nothing: the cap changes none of its runs.
    self.assertEqual(fcl.run_dir('out', 'trec6', 'local', _DATA, capped),
                     fcl.run_dir('out', 'trec6', 'local', _DATA, _TRAINING))

  def test_cap_out_of_range_is_refused(self):
    for value in (0.0, 1.5):
      with self.assertRaisesRegex(
          ValueError, r'max_weight_share must be a number in \(0, 1\]'):
        fcl.TrainingConfig(max_weight_share=value)


_SEEDED_METHODS = ('fedseit', 'fedseit_no_foreign')


class _SeededRuns(NamedTuple):
  output_dir: str
  results: dict[str, Any]
  contexts_made: list[runtime_contexts.CppContext]
  # Per run_method call: whether it ran in the context made for its seed.
  in_own_context: list[bool]


@functools.cache
def _seeded_runs() -> _SeededRuns:
  """`run_fcl` of `_SEEDED_METHODS`, seeds 0 and 1, a fresh context per seed.

  Run once: the seeds test checks it, the report test reads its runs.
  """
  output_dir = shared_runs.temp_dir('fcl_seeds')
  contexts_made = []
  in_own_context = []

  def fresh_context():
    contexts_made.append(runtime_contexts.local_cpp_context())
    return contexts_made[-1]

  real_run_method = fcl.run_method

  def run_method(*args, **kwargs):
    in_own_context.append(tff.framework.get_context_stack().current
                          is contexts_made[-1].tff_context)
    return real_run_method(*args, **kwargs)

  with mock.patch.object(fcl, 'run_method', run_method):
    results = fcl.run_fcl(datasets=['trec6'], methods=list(_SEEDED_METHODS),
                          data=_DATA, training=_TRAINING,
                          output_dir=output_dir, seeds=(0, 1), command='cmd',
                          context_fn=fresh_context)
  return _SeededRuns(output_dir, results, contexts_made, in_own_context)


class RunExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.encoded = fcl.encode_dataset('trec6', _DATA)

  @parameterized.named_parameters(('fedavg', 'fedavg'),
                                  ('fedseit_sit', 'fedseit_sit'))
  def test_run_is_cached_and_resumes_exactly(self, method):
    output_dir = self.create_tempdir().full_path
    messages = []
    results = fcl.run_method(self.encoded, method, data=_DATA,
                             training=_TRAINING, output_dir=output_dir,
                             log=messages.append)
    matrix = fcl_report.results_matrix(results['accuracy_matrix'])
    self.assertEqual(matrix.shape, (2, 2, 2))
    self.assertTrue(np.all((matrix[:, 1] >= 0.0) & (matrix[:, 1] <= 1.0)))
    self.assertEqual(results['non_finite_clients'], 0)
    # The split by what is sent adds up to the totals.
    split = results['bytes_per_client_by_part']
    for direction in ('down', 'up'):
      self.assertAllClose(
          sum(v for k, v in split.items() if k.startswith(direction + '/')),
          results[f'bytes_{direction}_per_client'])
    if method == 'fedseit_sit':
      # No KB at task 0; one foreign A (K=1) at task 1.
      self.assertEqual(results['kb_entries_per_client'], [0.0, 1.0])
      # Task 1 sends two representations of at most 4 vectors of 4 floats.
      self.assertBetween(split['up/representations'], 4 * 4 * 2, 4 * 4 * 8)
      self.assertGreater(split['down/knowledge_base'], 0.0)

    # A second call reads the cached results.
    messages.clear()
    cached = fcl.run_method(self.encoded, method, data=_DATA,
                            training=_TRAINING, output_dir=output_dir,
                            log=messages.append)
    self.assertIn('done before', messages[0])
    self.assertEqual(cached['accuracy_matrix'], results['accuracy_matrix'])

    # Interrupted after task 0 (round 1): only its checkpoint and record
    # remain. The resumed run trains task 1 again and ends with the same
    # numbers.
    directory = fcl.run_dir(output_dir, 'trec6', method, _DATA, _TRAINING)
    os.remove(os.path.join(directory, fcl.RESULTS_FILE))
    shutil.rmtree(os.path.join(directory, loop.CHECKPOINT_DIR,
                               f'{loop.CHECKPOINT_PREFIX}2'))
    records_path = os.path.join(directory, loop.METRICS_JSONL)
    with open(records_path) as f:
      records = f.readlines()
    with open(records_path, 'w') as f:
      f.writelines(records[:1])
    messages.clear()
    resumed = fcl.run_method(self.encoded, method, data=_DATA,
                             training=_TRAINING, output_dir=output_dir,
                             log=messages.append)
    self.assertTrue(any('resumed after round 1' in m for m in messages))
    self.assertEqual(resumed['accuracy_matrix'], results['accuracy_matrix'])
    self.assertEqual(resumed['macro_f1_matrix'], results['macro_f1_matrix'])

  def test_run_whose_data_changed_is_refused_even_when_finished(self):
    output_dir = self.create_tempdir().full_path
    directory = fcl.run_dir(output_dir, 'trec6', 'fedavg', _DATA, _TRAINING)
    os.makedirs(directory)
    training_lib.write_json(os.path.join(directory, fcl.RESULTS_FILE),
                            {'accuracy': 0.5})
    train = os.path.join(data_lib.find_data_dir(), 'text_classification',
                         'trec6', 'train.tsv')
    name = 'text_classification/trec6/train.tsv'
    read_now = {os.path.realpath(train): 'b' * 64}

    def run():
      return fcl.run_method(self.encoded, 'fedavg', data=_DATA,
                            training=_TRAINING, output_dir=output_dir,
                            data_files=read_now)

    training_lib.write_data_fingerprint(directory, {name: 'a' * 64})
    with self.assertRaisesRegex(
        errors.CheckpointError,
        f'{name} changed since this run started '
        r'\(sha256 aaaaaaaaaaaa… -> bbbbbbbbbbbb…\)'):
      run()
    # The same data: read back. A run recorded without a fingerprint (an
    # archived run) too.
    training_lib.write_data_fingerprint(directory, {name: 'b' * 64})
    self.assertEqual(run(), {'accuracy': 0.5})
    os.remove(os.path.join(directory, 'data_fingerprint.json'))
    self.assertEqual(run(), {'accuracy': 0.5})

  def test_report(self):
    output_dir = self.create_tempdir().full_path
    # At seed 0 the FedSeIT runs are the seeds test's seed-0 runs (the same
    # configuration and run directory): read from a copy, not trained again.
    training = dataclasses.replace(_TRAINING, seed=0)
    self.assertEqual(fcl.replicate(_DATA, _TRAINING, 0), (_DATA, training))
    shutil.copytree(os.path.join(_seeded_runs().output_dir, 'runs'),
                    os.path.join(output_dir, 'runs'))
    results = fcl.run_fcl(datasets=['trec6'],
                          methods=['local', 'fedseit', 'fedseit_no_foreign'],
                          data=_DATA, training=training,
                          output_dir=output_dir, command='cmd')
    with open(os.path.join(output_dir, 'results.md'), encoding='utf-8') as f:
      report = f.read()
    acc = 100 * results['trec6']['fedseit']['accuracy']
    self.assertIn(f'| FedSeIT | {acc:.2f} | {acc:.2f} |', report)
    self.assertIn('Paper (abstract): FedSeIT +12.4 %', report)
    self.assertIn('FedSeIT, no foreign branch (ablation)', report)
    self.assertIn('| down/shared_weights | down/embedding |', report)
    for method in ('local', 'fedseit', 'fedseit_no_foreign'):
      self.assertTrue(os.path.exists(os.path.join(
          output_dir, 'heatmaps', f'trec6-{method}.png')))
    with open(os.path.join(output_dir, fcl.RESULTS_FILE)) as f:
      saved = json.load(f)
    self.assertEqual(saved['command'], 'cmd')
    self.assertEqual(saved['results']['trec6']['local']['bytes_up_per_client'],
                     0.0)

  def test_seeds_are_replicates_with_their_own_tasks_and_intervals(self):
    output_dir, results, contexts_made, in_own_context = _seeded_runs()
    methods = list(_SEEDED_METHODS)
    # Every run trains in the context of its dataset and seed.
    self.assertEqual(in_own_context, [True] * 4)
    # One worker per seed, each stopped after its seed's runs.
    self.assertLen(contexts_made, 2)
    self.assertNotEqual(*(c.worker.pid for c in contexts_made))
    for context in contexts_made:
      self.assertFalse(context.worker.is_running())
    # Seed s: training seed s on the tasks of task_seed + s.
    for seed in (0, 1):
      seed_data, seed_training = fcl.replicate(_DATA, _TRAINING, seed)
      self.assertEqual((seed_data.seed, seed_training.seed), (42 + seed, seed))
      for method in methods:
        self.assertEqual(
            results['trec6'][method]['seeds'][str(seed)],
            fcl.run_method(fcl.encode_dataset('trec6', seed_data), method,
                           data=seed_data, training=seed_training,
                           output_dir=output_dir))
    # Each run records the files of its dataset.
    for name in os.listdir(os.path.join(output_dir, 'runs')):
      with open(os.path.join(output_dir, 'runs', name,
                             'data_fingerprint.json')) as f:
        self.assertEqual(sorted(json.load(f)['files']),
                         ['text_classification/trec6/test.tsv',
                          'text_classification/trec6/train.tsv'])
    tasks = [[t.label_names for c in fcl.encode_dataset(
        'trec6', fcl.replicate(_DATA, _TRAINING, s)[0]).clients for t in c]
             for s in (0, 1)]
    self.assertNotEqual(*tasks)
    fedseit = results['trec6']['fedseit']
    per_seed = [fedseit['seeds'][s]['accuracy'] for s in ('0', '1')]
    self.assertAlmostEqual(fedseit['acc'], np.mean(per_seed))
    self.assertLen(fedseit['acc_ci95'], 2)
    with open(os.path.join(output_dir, fcl.RESULTS_FILE)) as f:
      saved = json.load(f)
    self.assertEqual(saved['seeds'], [0, 1])
    # The comparisons of `fcl.COMPARISONS` whose methods both ran.
    self.assertEqual(list(saved['differences']['trec6']),
                     ['fedseit - fedseit_no_foreign'])
    difference = saved['differences']['trec6'][
        'fedseit - fedseit_no_foreign']
    self.assertAllClose(difference['per_seed'], [
        results['trec6']['fedseit']['seeds'][s]['accuracy']
        - results['trec6']['fedseit_no_foreign']['seeds'][s]['accuracy']
        for s in ('0', '1')])
    with open(os.path.join(output_dir, 'results.md'), encoding='utf-8') as f:
      report = f.read()
    self.assertIn('| trec6 | FedSeIT − FedSeIT, no foreign branch (ablation) '
                  f'| {100 * difference["difference"]:+.2f} |', report)
    self.assertIn(f'| FedSeIT | {100 * fedseit["acc"]:.2f} [', report)

  def test_a_users_dataset_left_out_is_named(self):
    tmp_path = self.create_tempdir().full_path
    folder = os.path.join(tmp_path, 'text_classification')
    for name in ('trec6', 'mine'):
      os.makedirs(os.path.join(folder, name))
      for split in ('train', 'test'):
        with open(os.path.join(folder, name, f'{split}.tsv'), 'w') as f:
          f.write('a\tx\nb\ty\n')
    with self.assertLogs(level='WARNING') as logs:
      # 'nowhere' is refused after the warning, before any training.
      with self.assertRaisesRegex(errors.InputError, 'nowhere'):
        fcl.run_fcl(datasets=['nowhere', 'trec6'], methods=['fedavg'],
                    data=_DATA, training=_TRAINING,
                    output_dir=os.path.join(tmp_path, 'out'),
                    data_dir=tmp_path)
    # The built-in trec6 is listed; 'mine', a user's own, is named.
    (warning,) = [r.getMessage() for r in logs.records
                  if r.levelname == 'WARNING']
    self.assertTrue(warning.endswith(
        'not used, as --datasets does not list them: mine.'), warning)


if __name__ == '__main__':
  tf.test.main()
