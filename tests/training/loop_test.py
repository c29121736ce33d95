"""Tests of `training.run_training` on the tiny linear model of the algorithm
tests: records, checkpoints, resume after a stop or a death, bad checkpoints.
"""

import asyncio
import csv
import glob
import logging
import os
import re
import shutil
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.algorithms import linear_model
from tff_nlp import algorithms
from tff_nlp import errors
from tff_nlp import training

_CLIENTS = linear_model.three_clients()
_ROUNDS = 5


def _process():
  return algorithms.build_fl_process(
      linear_model.model_fn,
      algorithm='fedavg',
      weighting='lorar',
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
  )


def _client_data(round_num, client_ids):
  """Each client's examples in an order seeded by (round, client)."""
  datasets = []
  for i in client_ids:
    client = _CLIENTS[i]
    order = np.random.default_rng((round_num, i)).permutation(len(client.x))
    datasets.append(tf.data.Dataset.from_tensor_slices(
        (client.x[order], client.y[order])).batch(client.batch_size))
  return datasets


def _evaluate(weights):
  kernel, bias = (np.asarray(w) for w in weights.trainable)
  x = np.concatenate([c.x for c in _CLIENTS])
  y = np.concatenate([c.y for c in _CLIENTS])
  return {'mse': float(np.mean((x @ kernel + bias - y) ** 2))}


def _train(output_dir, rounds, **config):
  config.setdefault('clients_per_round', 2)
  config.setdefault('seed', 7)
  return training.run_training(
      _process(),
      client_data_fn=_client_data,
      num_clients=len(_CLIENTS),
      config=training.LoopConfig(rounds=rounds, progress=False, **config),
      output_dir=str(output_dir),
      evaluate_fn=_evaluate,
  )


def _weights(run):
  return [np.asarray(w) for w in _process().get_model_weights(run.state).trainable]


def _csv_keys(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv'), newline='') as f:
    return [int(row['key']) for row in csv.DictReader(f)]


def _checkpoints(output_dir):
  """The rounds of the complete checkpoints (`round_<N>`) in `output_dir`."""
  return sorted(
      int(name[len('round_'):])
      for name in os.listdir(os.path.join(output_dir, 'checkpoints'))
      if re.fullmatch(r'round_\d+', name))


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
  output_dir = tmp_path_factory.mktemp('uninterrupted')
  return output_dir, _train(output_dir, _ROUNDS, checkpoint_every=2,
                            eval_every=3)


@pytest.mark.parametrize('num_clients, per_round', [(3, 2), (10, 4), (5, 1)])
def test_sample_clients_is_a_seeded_function_of_the_round(num_clients,
                                                         per_round):
  samples = [training.sample_clients(num_clients, per_round, seed=1,
                                     round_num=r) for r in range(1, 30)]
  for ids in samples:
    assert ids == sorted(set(ids)) and len(ids) == per_round
    assert all(0 <= i < num_clients for i in ids)
  assert samples == [training.sample_clients(num_clients, per_round, seed=1,
                                             round_num=r) for r in range(1, 30)]
  assert len({tuple(ids) for ids in samples}) > 1  # Rounds differ.
  assert samples != [training.sample_clients(num_clients, per_round, seed=2,
                                             round_num=r) for r in range(1, 30)]


@pytest.mark.parametrize('per_round', [0, 3, 4])
def test_sample_clients_takes_all(per_round):
  assert training.sample_clients(3, per_round, seed=0, round_num=1) == [0, 1, 2]


def test_records_each_round_once_with_eval_when_due(uninterrupted):
  output_dir, run = uninterrupted
  assert run.resumed_from == 0
  assert [r['round'] for r in run.records] == [0, 1, 2, 3, 4, 5]
  # eval_every=3: the initial model, round 3 and the last round.
  assert [r['round'] for r in run.records if 'eval' in r] == [0, 3, 5]
  for r in run.records[1:]:
    assert r['client_ids'] == training.sample_clients(3, 2, seed=7,
                                                      round_num=r['round'])
    assert len(r['client_outputs']) == 2
    assert r['train']['client_work']['train']['num_examples'] == sum(
        len(_CLIENTS[i].x) for i in r['client_ids'])
  assert run.records[-1]['eval']['mse'] == pytest.approx(
      _evaluate(_process().get_model_weights(run.state))['mse'])
  assert run.records[-1]['eval']['mse'] < run.records[0]['eval']['mse']
  assert _csv_keys(output_dir) == [0, 1, 2, 3, 4, 5]
  # checkpoint_every=2 and the last round; the oldest is kept
  # (keep_first), then the latest two (keep_total=3).
  assert _checkpoints(output_dir) == [0, 4, 5]
  assert glob.glob(os.path.join(output_dir, 'tensorboard', 'events.out.*'))


# Each interrupts a run in `output_dir` and returns the folders it left in
# `checkpoints/` that are not complete checkpoints.


def _stop_after_round_2(output_dir):
  _train(output_dir, 2, checkpoint_every=2, eval_every=3)
  return []


def _die_between_records_and_checkpoint_of_round_3(output_dir):
  # Round 3's records are written, its checkpoint is not: what a kill
  # between the two leaves behind.
  _train(output_dir, 3, checkpoint_every=2, eval_every=3)
  shutil.rmtree(os.path.join(output_dir, 'checkpoints', 'round_3'))
  return []


class _Killed(Exception):
  pass


def _die_while_saving_the_checkpoint_of_round_4(output_dir):
  # TFF writes a checkpoint to `round_4_temp<4 random digits>` and renames
  # that folder to `round_4` once it is complete: a kill before the rename
  # leaves the temp folder, named by TFF itself.
  rename = tf.io.gfile.rename

  def rename_unless_round_4(source, target, overwrite=False):
    if os.path.basename(target) == 'round_4':
      raise _Killed(source)
    rename(source, target, overwrite)

  with mock.patch.object(tf.io.gfile, 'rename', rename_unless_round_4):
    with pytest.raises(_Killed):
      _train(output_dir, 4, checkpoint_every=2, eval_every=3)
  leftovers = glob.glob(os.path.join(output_dir, 'checkpoints',
                                     'round_4_temp*'))
  assert len(leftovers) == 1 and os.listdir(leftovers[0]), leftovers
  assert _checkpoints(output_dir) == [0, 2]
  return leftovers


@pytest.mark.parametrize('interrupt, resumed_from', [
    (_stop_after_round_2, 2),
    (_die_between_records_and_checkpoint_of_round_3, 2),
    (_die_while_saving_the_checkpoint_of_round_4, 2),
])
def test_resumed_run_equals_uninterrupted_run(tmp_path, caplog, uninterrupted,
                                              interrupt, resumed_from):
  leftovers = interrupt(tmp_path)
  caplog.set_level(logging.INFO, logger='absl')  # tff_nlp logs with absl.
  run = _train(tmp_path, _ROUNDS, checkpoint_every=2, eval_every=3)
  assert run.resumed_from == resumed_from
  # A checkpoint left unfinished by a kill is removed, and said so; round 4
  # was saved again.
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == [
      'round_0', 'round_4', 'round_5']
  assert [(r.levelname, r.getMessage()) for r in caplog.records
          if 'unfinished checkpoint' in r.getMessage()] == [
              ('INFO', f'Removed {path}: an unfinished checkpoint, left by a '
               'run killed while saving it.') for path in leftovers]
  _, reference = uninterrupted
  for w, w_ref in zip(_weights(run), _weights(reference)):
    np.testing.assert_allclose(w, w_ref, rtol=0, atol=1e-6)
  assert [r['round'] for r in run.records] == [0, 1, 2, 3, 4, 5]
  assert _csv_keys(tmp_path) == [0, 1, 2, 3, 4, 5]
  for r, r_ref in zip(run.records, reference.records):
    assert r.get('train') == r_ref.get('train')
    if 'eval' in r_ref:  # A stopped run also evaluated its last round.
      assert r['eval'] == r_ref['eval']


def test_completed_run_is_not_trained_again(uninterrupted, tmp_path):
  output_dir, reference = uninterrupted
  shutil.copytree(output_dir, tmp_path, dirs_exist_ok=True)
  run = _train(tmp_path, _ROUNDS, checkpoint_every=2, eval_every=3)
  assert run.resumed_from == _ROUNDS
  assert run.records == reference.records


def test_corrupt_checkpoint_is_reported_and_left_untouched(tmp_path):
  _train(tmp_path, 2)
  saved_model = tmp_path / 'checkpoints' / 'round_2' / 'saved_model.pb'
  saved_model.write_bytes(b'not a saved model')
  with pytest.raises(errors.CheckpointError) as e:
    _train(tmp_path, 3)
  assert f'{tmp_path}/checkpoints/round_2: the checkpoint cannot be loaded' in (
      str(e.value))
  assert saved_model.read_bytes() == b'not a saved model'
  assert _checkpoints(tmp_path) == [0, 1, 2]
  assert _csv_keys(tmp_path) == [0, 1, 2]


def test_checkpoint_beyond_the_requested_rounds_is_refused(tmp_path):
  _train(tmp_path, 3)
  with pytest.raises(errors.CheckpointError,
                     match=r'round_3: the run already has 3 rounds, more than '
                     r'the 2 asked for'):
    _train(tmp_path, 2)


@pytest.mark.parametrize('field, value', [
    ('rounds', 0), ('clients_per_round', -1), ('checkpoint_every', 0),
    ('eval_every', -2), ('rounds', 1.5),
])
def test_loop_config_rejects(field, value):
  kwargs = {'rounds': 3, field: value}
  with pytest.raises(ValueError, match=f'{field} must be an integer >= '):
    training.LoopConfig(**kwargs)


@pytest.mark.parametrize('per_round', [len(_CLIENTS) + 1, 100])
def test_more_clients_per_round_than_clients_is_refused(tmp_path, per_round):
  with pytest.raises(errors.InputError,
                     match=rf'clients_per_round={per_round} is more than the '
                     rf'{len(_CLIENTS)} clients of this run; use 1 to '
                     rf'{len(_CLIENTS)}'):
    training.run_training(
        _process(), client_data_fn=_client_data, num_clients=len(_CLIENTS),
        config=training.LoopConfig(rounds=1, clients_per_round=per_round),
        output_dir=str(tmp_path))
  # Refused before anything was written.
  assert not os.listdir(tmp_path)


@pytest.mark.parametrize('progress, shown', [(True, True), (False, False),
                                             (None, False)])
def test_progress_bar(tmp_path, capsys, progress, shown):
  training.run_training(
      _process(), client_data_fn=_client_data, num_clients=len(_CLIENTS),
      config=training.LoopConfig(rounds=2, progress=progress),
      output_dir=str(tmp_path), description='demo')
  err = capsys.readouterr().err
  # None: shown only on a terminal, and pytest's stderr is not one.
  assert ('demo: 100%' in err and '2/2' in err and 'loss=' in err) == shown


def test_leaves_the_threads_event_loop_usable(tmp_path):
  # `asyncio.run` would unset the main thread's event loop, and TFF's
  # `tff.simulation.run_training_process` (asyncio.get_event_loop()) would
  # then fail after our loop ran.
  loop = asyncio.new_event_loop()
  asyncio.set_event_loop(loop)
  try:
    _train(tmp_path, 1)
    assert asyncio.get_event_loop() is loop
  finally:
    asyncio.set_event_loop(None)
    loop.close()


def test_starts_from_initial_model_weights_unless_resuming(tmp_path):
  process = _process()
  start = tff.learning.models.ModelWeights(
      trainable=[np.full([3, 1], 0.5, np.float32),
                 np.array([-1.0], np.float32)],
      non_trainable=[])
  run = training.run_training(
      process, client_data_fn=_client_data, num_clients=3,
      config=training.LoopConfig(rounds=1, progress=False),
      output_dir=str(tmp_path), evaluate_fn=_evaluate,
      initial_model_weights=start)
  assert run.records[0]['eval'] == _evaluate(start)
  # Resuming ignores them: the checkpoint wins.
  resumed = training.run_training(
      process, client_data_fn=_client_data, num_clients=3,
      config=training.LoopConfig(rounds=1, progress=False),
      output_dir=str(tmp_path), evaluate_fn=_evaluate,
      initial_model_weights=process.get_model_weights(process.initialize()))
  assert resumed.resumed_from == 1
  for w, w_run in zip(_weights(resumed), _weights(run)):
    np.testing.assert_array_equal(w, w_run)
