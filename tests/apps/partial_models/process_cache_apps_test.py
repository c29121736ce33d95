"""The applications' processes through `training.shared_processes()`.

The sparse-tags processes (cheap to build) stand for every call site: one
build per configuration, a key that tells configurations apart (method,
matrix shape, client training, outputs), and a reused process that computes
what a freshly built one does, round after round of another run.
"""

import os
from unittest import mock

import numpy as np
import tensorflow as tf

from apps.partial_models import tag_experiment as experiment
from tff_nlp import training
from tff_nlp.data import tags
from tff_nlp.training import process_cache
from tff_nlp.training import process_store

_TRAINING = experiment.TagTrainingConfig(max_keys=8, client_learning_rate=5.0,
                                         batch_size=8)


def _vocab(words: int, tag_count: int = 3) -> tags.TagVocabularies:
  return tags.TagVocabularies(
      words=tuple(f'w{i}' for i in range(words)),
      tags=tuple(f't{i}' for i in range(tag_count)))


class SharedTagProcessTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    # Builds counted here are this test's, whatever ran before in this
    # process (the others' processes are only built again if needed).
    training.shared_processes().clear()
    # Builds are counted: none may come from the session's process store
    # (tests/conftest.py), which other tests and programs fill.
    self.enter_context(mock.patch.dict(
        os.environ, {process_store.DIR_ENV_VAR: ''}))

  def test_one_build_per_configuration(self):
    vocab = _vocab(11)
    with mock.patch.object(experiment.tag_process, 'build_sparse_tag_process',
                           wraps=experiment.tag_process
                           .build_sparse_tag_process) as build:
      first = experiment.build_process('sparse', vocab, _TRAINING)
      # Equal configuration, new (equal) objects: the same process.
      self.assertIs(experiment.build_process('sparse', _vocab(11), _TRAINING),
                    first)
      self.assertIs(experiment.build_process(
          'sparse', vocab, experiment.TagTrainingConfig(
              max_keys=8, client_learning_rate=5.0, batch_size=8)), first)
      # Each of these changes the computation: a build of its own.
      others = [
          experiment.build_process('sparse_per_row', vocab, _TRAINING),
          experiment.build_process('sparse', _vocab(12), _TRAINING),
          experiment.build_process('sparse', _vocab(11, 4), _TRAINING),
          experiment.build_process('sparse', vocab, experiment.TagTrainingConfig(
              max_keys=9, client_learning_rate=5.0, batch_size=8)),
          experiment.build_process('sparse', vocab, experiment.TagTrainingConfig(
              max_keys=8, client_learning_rate=4.0, batch_size=8)),
          experiment.build_process('sparse', vocab, experiment.TagTrainingConfig(
              max_keys=8, client_learning_rate=5.0, batch_size=8,
              client_epochs=2)),
      ]
    self.assertEqual(build.call_count, 1 + len(others))
    self.assertLen({id(p) for p in [first, *others]}, 1 + len(others))
    # Each build got its configuration (the vocabularies' one OOV row and
    # column included).
    built_with = [call.kwargs for call in build.call_args_list]
    self.assertEqual([(k['num_words'], k['num_tags'], k['max_keys'],
                       k['client_learning_rate'], k['client_epochs'],
                       k['divisor']) for k in built_with], [
                           (12, 4, 8, 5.0, 1, 'clients'),
                           (12, 4, 8, 5.0, 1, 'touching_clients'),
                           (13, 4, 8, 5.0, 1, 'clients'),
                           (12, 5, 8, 5.0, 1, 'clients'),
                           (12, 4, 9, 5.0, 1, 'clients'),
                           (12, 4, 8, 4.0, 1, 'clients'),
                           (12, 4, 8, 5.0, 2, 'clients')])
    dense = experiment.build_process('dense', vocab, _TRAINING)
    self.assertIs(experiment.build_process('dense', vocab, _TRAINING), dense)
    self.assertIsNot(experiment.build_process('dense', vocab, _TRAINING,
                                              client_outputs=False), dense)

  def test_the_reused_process_gives_the_numbers_of_a_fresh_one(self):
    task = experiment.prepare_task(None, experiment.TagDataConfig(
        dataset='trec6', num_clients=3, min_train_examples=5, max_words=60,
        max_tags=8), seed=0)
    loop = training.LoopConfig(rounds=2, seed=0)

    def train(process, method):
      data_fn = experiment.client_data_fn(method, task, _TRAINING, loop.seed)
      state = process.initialize()
      for round_num in (1, 2):
        state = process.next(state, data_fn(round_num, [0, 1, 2])).state
      return [np.asarray(w)
              for w in process.get_model_weights(state).trainable]

    for method in (experiment.DENSE, experiment.SPARSE):
      cached = experiment.build_process(method, task.vocabularies, _TRAINING)
      first = train(cached, method)
      # A second run on the cached process (its state from a new
      # initialize) and a run on a process built afresh.
      again = experiment.build_process(method, task.vocabularies, _TRAINING)
      self.assertIs(again, cached)
      second = train(again, method)
      with mock.patch.dict(os.environ, {process_cache.ENV_VAR: '0'}):
        fresh_process = experiment.build_process(method, task.vocabularies,
                                                 _TRAINING)
      self.assertIsNot(fresh_process, cached)
      fresh = train(fresh_process, method)
      self.assertNotAllClose(first[0], np.zeros_like(first[0]))
      for a, b, c in zip(first, second, fresh):
        np.testing.assert_array_equal(a, b, err_msg=method)
        np.testing.assert_array_equal(a, c, err_msg=method)


if __name__ == '__main__':
  tf.test.main()
