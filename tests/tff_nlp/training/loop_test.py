"""Tests of `training.run_training` on the tiny linear model of the algorithm
tests: records, checkpoints, resume after a stop or a death, bad checkpoints.
"""

import asyncio
import csv
import glob
import io
import os
import re
import shutil
import sys
import tempfile
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tff_nlp import algorithms
from tff_nlp import errors
from tff_nlp import training
from tff_nlp.templates import stateful_clients

_CLIENTS = linear_model.three_clients()
_ROUNDS = 5


def _process():
  # With per-client outputs: the loop records the `client_outputs` of `next`.
  return algorithms.build_fl_process(
      linear_model.model_fn,
      algorithm='fedavg',
      weighting='lorar',
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
      client_outputs=True,
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


def _train(output_dir, rounds, round_metrics_fn=None, **config):
  config.setdefault('clients_per_round', 2)
  config.setdefault('seed', 7)
  return training.run_training(
      _process(),
      client_data_fn=_client_data,
      num_clients=len(_CLIENTS),
      config=training.LoopConfig(rounds=rounds, progress=False, **config),
      output_dir=str(output_dir),
      evaluate_fn=_evaluate,
      round_metrics_fn=round_metrics_fn,
  )


def _weights(run):
  return [np.asarray(w)
          for w in _process().get_model_weights(run.state).trainable]


def _csv_keys(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv'), newline='') as f:
    return [int(row['key']) for row in csv.DictReader(f)]


def _checkpoints(output_dir):
  """The rounds of the complete checkpoints (`round_<N>`) in `output_dir`."""
  return sorted(
      int(name[len('round_'):])
      for name in os.listdir(os.path.join(output_dir, 'checkpoints'))
      if re.fullmatch(r'round_\d+', name))


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
    try:
      _train(output_dir, 4, checkpoint_every=2, eval_every=3)
    except _Killed:
      pass
    else:
      raise AssertionError('The save of round 4 was not interrupted.')
  leftovers = glob.glob(os.path.join(output_dir, 'checkpoints',
                                     'round_4_temp*'))
  assert len(leftovers) == 1 and os.listdir(leftovers[0]), leftovers
  assert _checkpoints(output_dir) == [0, 2]
  return leftovers


class SampleClientsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((3, 2), (10, 4), (5, 1))
  def test_sample_clients_is_a_seeded_function_of_the_round(self, num_clients,
                                                           per_round):
    samples = [training.sample_clients(num_clients, per_round, seed=1,
                                       round_num=r) for r in range(1, 30)]
    for ids in samples:
      self.assertEqual(ids, sorted(set(ids)))
      self.assertLen(ids, per_round)
      self.assertTrue(all(0 <= i < num_clients for i in ids))
    self.assertEqual(samples, [
        training.sample_clients(num_clients, per_round, seed=1, round_num=r)
        for r in range(1, 30)])
    # Rounds differ.
    self.assertGreater(len({tuple(ids) for ids in samples}), 1)
    self.assertNotEqual(samples, [
        training.sample_clients(num_clients, per_round, seed=2, round_num=r)
        for r in range(1, 30)])

  @parameterized.parameters(0, 3, 4)
  def test_sample_clients_takes_all(self, per_round):
    self.assertEqual(
        training.sample_clients(3, per_round, seed=0, round_num=1), [0, 1, 2])


class RunTrainingExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._uninterrupted_dir = tempfile.mkdtemp()
    cls._uninterrupted = _train(cls._uninterrupted_dir, _ROUNDS,
                                checkpoint_every=2, eval_every=3)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls._uninterrupted_dir, ignore_errors=True)
    super().tearDownClass()

  def _tmp(self):
    return self.create_tempdir().full_path

  def test_records_each_round_once_with_eval_when_due(self):
    output_dir, run = self._uninterrupted_dir, self._uninterrupted
    self.assertEqual(run.resumed_from, 0)
    self.assertEqual([r['round'] for r in run.records], [0, 1, 2, 3, 4, 5])
    # eval_every=3: the initial model, round 3 and the last round.
    self.assertEqual([r['round'] for r in run.records if 'eval' in r],
                     [0, 3, 5])
    for r in run.records[1:]:
      self.assertEqual(r['client_ids'], training.sample_clients(
          3, 2, seed=7, round_num=r['round']))
      self.assertLen(r['client_outputs'], 2)
      self.assertEqual(
          r['train']['client_work']['train']['num_examples'],
          sum(len(_CLIENTS[i].x) for i in r['client_ids']))
    self.assertAllClose(
        run.records[-1]['eval']['mse'],
        _evaluate(_process().get_model_weights(run.state))['mse'])
    self.assertLess(run.records[-1]['eval']['mse'],
                    run.records[0]['eval']['mse'])
    self.assertEqual(_csv_keys(output_dir), [0, 1, 2, 3, 4, 5])
    # checkpoint_every=2 and the last round; the oldest is kept
    # (keep_first), then the latest two (keep_total=3).
    self.assertEqual(_checkpoints(output_dir), [0, 4, 5])
    self.assertNotEmpty(
        glob.glob(os.path.join(output_dir, 'tensorboard', 'events.out.*')))

  @parameterized.named_parameters(
      ('stop', _stop_after_round_2, 2),
      ('die_between_records_and_checkpoint',
       _die_between_records_and_checkpoint_of_round_3, 2),
      ('die_while_saving', _die_while_saving_the_checkpoint_of_round_4, 2),
  )
  def test_resumed_run_equals_uninterrupted_run(self, interrupt,
                                                resumed_from):
    tmp_path = self._tmp()
    leftovers = interrupt(tmp_path)
    with self.assertLogs(logger='absl', level='INFO') as logs:
      run = _train(tmp_path, _ROUNDS, checkpoint_every=2, eval_every=3)
    self.assertEqual(run.resumed_from, resumed_from)
    # A checkpoint left unfinished by a kill is removed, and said so; round 4
    # was saved again.
    self.assertEqual(sorted(os.listdir(os.path.join(tmp_path, 'checkpoints'))),
                     ['round_0', 'round_4', 'round_5'])
    self.assertEqual(
        [(r.levelname, r.getMessage()) for r in logs.records
         if 'unfinished checkpoint' in r.getMessage()],
        [('INFO', f'Removed {path}: an unfinished checkpoint, left by a '
          'run killed while saving it.') for path in leftovers])
    reference = self._uninterrupted
    for w, w_ref in zip(_weights(run), _weights(reference)):
      np.testing.assert_allclose(w, w_ref, rtol=0, atol=1e-6)
    self.assertEqual([r['round'] for r in run.records], [0, 1, 2, 3, 4, 5])
    self.assertEqual(_csv_keys(tmp_path), [0, 1, 2, 3, 4, 5])
    for r, r_ref in zip(run.records, reference.records):
      self.assertEqual(r.get('train'), r_ref.get('train'))
      if 'eval' in r_ref:  # A stopped run also evaluated its last round.
        self.assertEqual(r['eval'], r_ref['eval'])

  def test_round_metrics_fn_adds_to_every_round_record(self):
    tmp_path = self._tmp()
    run = _train(tmp_path, 2,
                 round_metrics_fn=lambda r: {'privacy': {'epsilon': r / 4}})
    self.assertEqual([r.get('privacy') for r in run.records],
                     [None, {'epsilon': 0.25}, {'epsilon': 0.5}])
    with open(os.path.join(tmp_path, 'metrics.csv'), newline='') as f:
      self.assertEqual([row['privacy/epsilon'] for row in csv.DictReader(f)],
                       ['', '0.25', '0.5'])
    # The training itself is that of a run without the extra metrics.
    for r, r_ref in zip(run.records[1:], self._uninterrupted.records[1:]):
      self.assertEqual(r['train'], r_ref['train'])

  def test_completed_run_is_not_trained_again(self):
    tmp_path = self._tmp()
    shutil.copytree(self._uninterrupted_dir, tmp_path, dirs_exist_ok=True)
    run = _train(tmp_path, _ROUNDS, checkpoint_every=2, eval_every=3)
    self.assertEqual(run.resumed_from, _ROUNDS)
    self.assertEqual(run.records, self._uninterrupted.records)

  def test_corrupt_checkpoint_is_reported_and_left_untouched(self):
    tmp_path = self._tmp()
    _train(tmp_path, 2)
    saved_model = os.path.join(tmp_path, 'checkpoints', 'round_2',
                               'saved_model.pb')
    with open(saved_model, 'wb') as f:
      f.write(b'not a saved model')
    with self.assertRaises(errors.CheckpointError) as e:
      _train(tmp_path, 3)
    self.assertIn(
        f'{tmp_path}/checkpoints/round_2: the checkpoint cannot be loaded',
        str(e.exception))
    with open(saved_model, 'rb') as f:
      self.assertEqual(f.read(), b'not a saved model')
    self.assertEqual(_checkpoints(tmp_path), [0, 1, 2])
    self.assertEqual(_csv_keys(tmp_path), [0, 1, 2])

  def test_checkpoint_beyond_the_requested_rounds_is_refused(self):
    tmp_path = self._tmp()
    _train(tmp_path, 3)
    with self.assertRaisesRegex(
        errors.CheckpointError,
        r'round_3: the run already has 3 rounds, more than the 2 asked for'):
      _train(tmp_path, 2)

  @parameterized.parameters(
      ('rounds', 0), ('clients_per_round', -1), ('checkpoint_every', 0),
      ('eval_every', -2), ('rounds', 1.5),
  )
  def test_loop_config_rejects(self, field, value):
    kwargs = {'rounds': 3, field: value}
    with self.assertRaisesRegex(ValueError,
                                f'{field} must be an integer >= '):
      training.LoopConfig(**kwargs)

  @parameterized.parameters(len(_CLIENTS) + 1, 100)
  def test_more_clients_per_round_than_clients_is_refused(self, per_round):
    tmp_path = self._tmp()
    with self.assertRaisesRegex(
        errors.InputError,
        rf'clients_per_round={per_round} is more than the '
        rf'{len(_CLIENTS)} clients of this run; use 1 to {len(_CLIENTS)}'):
      training.run_training(
          _process(), client_data_fn=_client_data, num_clients=len(_CLIENTS),
          config=training.LoopConfig(rounds=1, clients_per_round=per_round),
          output_dir=tmp_path)
    # Refused before anything was written.
    self.assertEmpty(os.listdir(tmp_path))

  @parameterized.parameters((True, True), (False, False), (None, False))
  def test_progress_bar(self, progress, shown):
    stderr = io.StringIO()
    with mock.patch.object(sys, 'stderr', stderr):
      training.run_training(
          _process(), client_data_fn=_client_data, num_clients=len(_CLIENTS),
          config=training.LoopConfig(rounds=2, progress=progress),
          output_dir=self._tmp(), description='demo')
    err = stderr.getvalue()
    # None: shown only on a terminal, and a StringIO is not one.
    self.assertEqual('demo: 100%' in err and '2/2' in err and 'loss=' in err,
                     shown)

  def test_leaves_the_threads_event_loop_usable(self):
    # `asyncio.run` would unset the main thread's event loop, and TFF's
    # `tff.simulation.run_training_process` (asyncio.get_event_loop()) would
    # then fail after our loop ran.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
      _train(self._tmp(), 1)
      self.assertIs(asyncio.get_event_loop(), loop)
    finally:
      asyncio.set_event_loop(None)
      loop.close()

  def test_starts_from_initial_model_weights_unless_resuming(self):
    tmp_path = self._tmp()
    process = _process()
    start = tff.learning.models.ModelWeights(
        trainable=[np.full([3, 1], 0.5, np.float32),
                   np.array([-1.0], np.float32)],
        non_trainable=[])
    run = training.run_training(
        process, client_data_fn=_client_data, num_clients=3,
        config=training.LoopConfig(rounds=1, progress=False),
        output_dir=tmp_path, evaluate_fn=_evaluate,
        initial_model_weights=start)
    self.assertEqual(run.records[0]['eval'], _evaluate(start))
    # Resuming ignores them: the checkpoint wins.
    resumed = training.run_training(
        process, client_data_fn=_client_data, num_clients=3,
        config=training.LoopConfig(rounds=1, progress=False),
        output_dir=tmp_path, evaluate_fn=_evaluate,
        initial_model_weights=process.get_model_weights(process.initialize()))
    self.assertEqual(resumed.resumed_from, 1)
    for w, w_run in zip(_weights(resumed), _weights(run)):
      np.testing.assert_array_equal(w, w_run)


class _CountingClientsProcess:
  """A `stateful_clients.StatefulClientsProcess` without TFF computations:
  the server counts rounds and task starts, each client its rounds."""

  def initialize(self):
    return {'rounds': np.int32(0), 'task': np.int32(-1)}

  def initial_client_states(self, state, num_clients):
    del state  # Unused.
    return [{'rounds': np.int32(0)} for _ in range(num_clients)]

  def round_computation_for(self, state):
    del state  # Unused.
    return self.next

  def next(self, server, client_data, clients):
    del client_data  # Unused.
    return stateful_clients.RoundOutput(
        state={'rounds': server['rounds'] + 1, 'task': server['task']},
        client_states=[{'rounds': c['rounds'] + 1} for c in clients],
        metrics={'train_loss': 1.0})

  def start_task(self, server, inputs, clients):
    del inputs  # Unused.
    return stateful_clients.RoundOutput(
        state={'rounds': server['rounds'], 'task': server['task'] + 1},
        client_states=clients, metrics={'kb_entries': 0.0})


class TaskScheduleExecutionTest(tf.test.TestCase):

  def _train(self, output_dir, rounds, calls):
    process = stateful_clients.SimulationProcess(_CountingClientsProcess(), 2)

    def start_task(task, state):
      calls.append(('start', task, int(state.server['rounds'])))
      return process.apply(process.process.start_task, state, [None, None])

    def end_task(task, state, train_metrics):
      calls.append(('end', task, int(state.server['rounds'])))
      return {'accuracy': [[float(task)]],
              'loss': float(train_metrics['train_loss'])}

    # Its round is no TFF computation: no traffic to read from it.
    no_traffic = mock.Mock(round_metrics=lambda **kwargs: {})
    with mock.patch.object(training.loop.communication_lib,
                           'round_communication', return_value=no_traffic):
      return training.run_training(
          process, client_data_fn=lambda r, ids: [r] * len(ids),
          num_clients=2,
          config=training.LoopConfig(rounds=rounds, checkpoint_every=2,
                                     progress=False),
          output_dir=output_dir,
          tasks=training.TaskSchedule(rounds_per_task=2,
                                      start_task=start_task,
                                      end_task=end_task))

  def test_tasks_start_and_end_at_their_rounds_and_resume(self):
    output_dir = self.create_tempdir().full_path
    calls = []
    run = self._train(output_dir, 4, calls)
    self.assertEqual(calls, [('start', 0, 0), ('end', 0, 2),
                             ('start', 1, 2), ('end', 1, 4)])
    self.assertEqual([r['task'] for r in run.records], [0, 0, 1, 1])
    self.assertEqual([('task_start' in r, 'task_end' in r)
                      for r in run.records],
                     [(True, False), (False, True)] * 2)
    self.assertEqual(run.records[3]['task_end'],
                     {'accuracy': [[1.0]], 'loss': 1.0})
    self.assertEqual(int(run.state.server['task']), 1)
    self.assertEqual([int(c['rounds']) for c in run.state.clients], [4, 4])
    # Six rounds: resumed after round 4 (the end of task 1), task 2 starts.
    calls.clear()
    resumed = self._train(output_dir, 6, calls)
    self.assertEqual(resumed.resumed_from, 4)
    self.assertEqual(calls, [('start', 2, 4), ('end', 2, 6)])
    self.assertEqual([r['round'] for r in resumed.records], list(range(1, 7)))
    self.assertEqual(int(resumed.state.server['task']), 2)

  def test_rejects_rounds_per_task_below_one(self):
    with self.assertRaisesRegex(ValueError, 'rounds_per_task must be'):
      training.TaskSchedule(rounds_per_task=0, start_task=None,
                            end_task=None)


if __name__ == '__main__':
  tf.test.main()
