"""Tests of the sparse-vs-dense tag experiment on real TREC data."""

import dataclasses
import json
import os

import numpy as np
import pytest

from tff_nlp import errors
from tff_nlp import training
from tff_nlp.data import tags
from tff_nlp.experiments import sparse_tags as experiment


def test_prepare_task_on_trec50_gives_two_tags_per_question():
  task = experiment.prepare_task(
      None, experiment.TagDataConfig(dataset='trec50', num_clients=5,
                                     max_words=300),
      seed=0)
  vocab = task.vocabularies
  assert vocab.num_word_rows == 301
  # 6 coarse + 50 fine training labels as tags, plus one OOV column.
  assert vocab.num_tag_columns == 57
  assert len(task.clients) == 5
  assert sum(len(c) for c in task.clients) == 5452
  # Every question has its coarse and its fine tag.
  assert set(task.clients[0].tags.sum(axis=1)) == {2.0}
  assert len(task.test) == 500
  assert all(0 < d <= 301 for d in task.distinct_words)


def test_document_partition_makes_one_client_per_question():
  task = experiment.prepare_task(
      None, experiment.TagDataConfig(dataset='trec6', partition='document',
                                     max_words=100), seed=0)
  assert len(task.clients) == 5452
  assert {len(c) for c in task.clients} == {1}


def test_evaluate_matches_hand_computed_precision():
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
  assert metrics['precision_at_1'] == pytest.approx(1.0)
  weights[0, 0] = 5.0  # Now example 3 ranks x first: P@1 = 2/3.
  assert experiment.evaluate(weights, task, (1,))['precision_at_1'] == (
      pytest.approx(2 / 3))


@pytest.mark.parametrize('kwargs,match', [
    (dict(partition='random'), "Unknown partition 'random'"),
    (dict(max_words=0), 'max_words must be >= 1'),
])
def test_data_config_rejects(kwargs, match):
  with pytest.raises(ValueError, match=match):
    experiment.TagDataConfig(**kwargs)


def test_dense_baseline_takes_one_epoch():
  vocab = tags.TagVocabularies(words=('a',), tags=('x',))
  with pytest.raises(ValueError, match='one local epoch'):
    experiment.build_process('dense', vocab, experiment.TagTrainingConfig(
        client_epochs=2))


def test_run_sparse_equals_dense_when_every_word_is_selected(tmp_path):
  # Four trec6 clients, a 200-word vocabulary and M = V: no client drops a
  # word, so the sparse round is FedAvg with uniform weights and both
  # methods must give the same test metrics.
  data = experiment.TagDataConfig(dataset='trec6', num_clients=4,
                                  max_words=200, min_train_examples=20)
  train = experiment.TagTrainingConfig(max_keys=201, client_learning_rate=20,
                                       batch_size=64, k_values=(1, 2))
  summary = experiment.run_sparse_tags(
      data_dir=None, output_dir=str(tmp_path), data=data, training=train,
      loop=training.LoopConfig(rounds=2, eval_every=1, progress=False),
      methods=['dense', 'sparse'])
  dense, sparse = summary['methods']['dense'], summary['methods']['sparse']
  assert dense['final']['precision_at_1'] > 0.3  # It learned something.
  for key, value in dense['final'].items():
    assert sparse['final'][key] == pytest.approx(value, abs=1e-6), key
  assert summary['task']['clients_over_max_keys'] == 0
  # Down: the dense model vs M = V selected rows of T float32 each.
  num_tags = summary['task']['num_tags']
  assert dense['bytes_down_per_client'] == 4 * 201 * num_tags + 4
  assert sparse['bytes_down_per_client'] == 4 * 201 * num_tags
  for name in (experiment.RESULTS_FILE, experiment.TABLE_FILE,
               experiment.CONFIG_FILE, experiment.PLOT_FILE):
    assert os.path.exists(tmp_path / name), name
  with open(tmp_path / experiment.RESULTS_FILE) as f:
    assert set(json.load(f)['methods']) == {'dense', 'sparse'}
  table = (tmp_path / experiment.TABLE_FILE).read_text()
  assert '| Dense FedAvg (whole model) |' in table


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


@pytest.fixture(scope='module')
def one_round_run(tmp_path_factory):
  output_dir = tmp_path_factory.mktemp('sparse_tags_run')
  return output_dir, _run_sparse(output_dir)


def test_rerun_resumes_and_extends(one_round_run):
  output_dir, first = one_round_run
  metrics = output_dir / 'sparse' / 'metrics.jsonl'
  records = metrics.read_text()
  # Same call again: everything is checkpointed, nothing is retrained (a
  # retrained round would rewrite its record, wall times included).
  again = _run_sparse(output_dir)
  assert metrics.read_text() == records
  assert again['methods']['sparse']['eval_curve'] == (
      first['methods']['sparse']['eval_curve'])
  # More rounds continue the run: round 1 is kept as it was.
  longer = _run_sparse(output_dir, rounds=2)
  assert [p['round'] for p in longer['methods']['sparse']['eval_curve']] == [
      0, 1, 2]
  assert metrics.read_text().startswith(records)
  with open(output_dir / experiment.CONFIG_FILE) as f:
    assert json.load(f)['loop']['rounds'] == 2


@pytest.mark.parametrize('change, difference', [
    (dict(seed=4), 'seed: 0 -> 4'),
    (dict(clients_per_round=2), 'clients_per_round: 0 -> 2'),
    (dict(data=dataclasses.replace(_RESUME_DATA, max_words=300)),
     'data.max_words: 200 -> 300'),
    (dict(training_config=dataclasses.replace(_RESUME_TRAINING, max_keys=60,
                                              client_learning_rate=2.0)),
     'training.client_learning_rate: 1.0 -> 2.0; training.max_keys: 50 -> 60'),
])
def test_rerun_of_another_experiment_is_refused(one_round_run, change,
                                                difference):
  output_dir, _ = one_round_run
  config = output_dir / experiment.CONFIG_FILE
  recorded = config.read_text()
  with pytest.raises(errors.CheckpointError) as e:
    _run_sparse(output_dir, rounds=2, **change)
  assert str(e.value) == (
      f"{config}: '{output_dir}' holds a run of a different experiment "
      f'({difference}). Use another output directory, or remove this one to '
      'start over.')
  assert config.read_text() == recorded  # Left as it was.
