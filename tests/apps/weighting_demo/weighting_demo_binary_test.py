"""The weighting demo binary as a user runs it: `python -m`, in a subprocess.

Covers what only a separate process shows: exit status 2 with one line for
bad input, and resumption after SIGKILL (no round lost or repeated, the same
final model as an uninterrupted run).
"""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf

from tff_nlp.analysis import privacy
from tests.apps import bad_input_driver

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
_SMOKE_FLAGS = os.path.join(_REPO, 'apps', 'weighting_demo', 'flags',
                            'weighting_demo.smoke.flags')
_WEIGHTINGS = ('uniform', 'lorar')
_ROUNDS = 8
# Small but real: 3 clients of r8, 2 sampled per round, checkpoints every
# second round, so a kill usually lands between checkpoints.
_TINY_RUN = [
    f'--flagfile={_SMOKE_FLAGS}',
    f'--weightings={",".join(_WEIGHTINGS)}',
    f'--rounds={_ROUNDS}',
    '--clients_per_round=2',
    '--checkpoint_every=2',
    '--eval_every=4',
    '--seed=5',
    '--progress=off',
]


def _command(*args):
  return [sys.executable, '-m', 'apps.weighting_demo.bin.weighting_demo', *args]


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')


def _run(*args, timeout=600, env=None):
  return subprocess.run(_command(*args), cwd=_REPO, env=env or _env(),
                        capture_output=True, text=True, timeout=timeout,
                        check=False)


def _rounds(path):
  if not os.path.exists(path):
    return []
  with open(path, 'rb') as f:
    lines = f.read().split(b'\n')
  return [json.loads(line)['round'] for line in lines if line.strip()
          and line.endswith(b'}')]


def _final_variables(output_dir, weighting):
  reader = tf.train.load_checkpoint(os.path.join(
      output_dir, weighting, 'checkpoints', f'round_{_ROUNDS}', 'variables',
      'variables'))
  names = sorted(reader.get_variable_to_shape_map())
  return {n: reader.get_tensor(n) for n in names
          if n != '_CHECKPOINTABLE_OBJECT_GRAPH'}


def _group_alive(pgid):
  try:
    os.killpg(pgid, 0)
  except ProcessLookupError:
    return False
  return True


# (arguments after the smoke preset, what the one error line says).
_BAD_INPUT = (
      (['--data_dir=/no/such/dir'],
       r"Data directory '/no/such/dir' .*does not exist"),
      (['--flagfile=/no/such.flags'], r'/no/such\.flags'),
      (['--progress=sometimes'], r'--progress'),
      (['--no_such_flag=1'], r"Unknown command line flag 'no_such_flag'"),
      (['--rounds=0'], r'--rounds'),
      (['--weightings=lorar,median'], r'--weightings must name distinct'),
      (['--dataset=no_such_dataset'], r'no_such_dataset'),
      # DP needs uniform weighting; the default --weightings has all four.
      (['--target_epsilon=5'],
       r"needs weighting='uniform', got weighting='num_examples'"),
      (['--weightings=uniform', '--target_epsilon=5',
        '--dp_noise_multiplier=0.2'],
       r'dp_noise_multiplier and target_epsilon both set'),
      # 3 clients in every round: adaptive clipping allows a noise
      # multiplier below 0.3, which gives epsilon 15.8 after 2 rounds.
      (['--weightings=uniform', '--target_epsilon=0.5'],
       r'target_epsilon=0.5 is not reachable: even noise_multiplier=0.3 '
       r'gives epsilon=15.77'),
      (['--weightings=uniform', '--dp_noise_multiplier=0.5'],
       r'dp_noise_multiplier=0.5 is too large .* below 0.3'),
      (['--dp_delta=0.01'], r'dp_delta is only used with differential'),
      (['--weightings=uniform', '--dp_noise_multiplier=0.2',
        '--robust_aggregation'],
       r'--robust_aggregation=True with differential privacy'),
      (['--max_weight_share=1.5'], r'--max_weight_share'),
)


class WeightingDemoBadInputExecutionTest(parameterized.TestCase,
                                         tf.test.TestCase):

  # bad_input_driver.Outcome of every _BAD_INPUT line, all run once in
  # one process (tests/apps/bad_input_driver.py).
  _outcomes = None

  @parameterized.parameters(*range(len(_BAD_INPUT)))
  def test_bad_input_exits_2_with_one_line(self, case):
    cls = type(self)
    if cls._outcomes is None:
      cls._outcomes = bad_input_driver.run_in_one_process(
          'weighting_demo', _SMOKE_FLAGS, [args for args, _ in _BAD_INPUT])
    returncode, stderr, written = cls._outcomes[case]
    self.assertEqual(returncode, 2, stderr[-2000:])
    error_lines = [line for line in stderr.splitlines() if 'error:' in line]
    self.assertLen(error_lines, 1, stderr[-2000:])
    self.assertTrue(error_lines[0].startswith('weighting_demo.py: error: '),
                    error_lines[0])
    self.assertRegex(error_lines[0], _BAD_INPUT[case][1])
    self.assertNotIn('Traceback', stderr)
    # Nothing was trained, nor left behind (a config.json would refuse the
    # corrected command as another experiment).
    self.assertEqual(written, [])

  def test_other_experiment_in_output_dir_exits_2(self):
    run_dir = os.path.join(self.create_tempdir().full_path, 'run')
    os.mkdir(run_dir)
    # A run that trained (a folder with nothing but a config is no run).
    os.mkdir(os.path.join(run_dir, 'uniform'))
    config_path = os.path.join(run_dir, 'config.json')
    with open(config_path, 'w') as f:
      f.write(json.dumps({'experiment': {'seed': 99}}))
    result = _run(f'--flagfile={_SMOKE_FLAGS}', f'--output_dir={run_dir}')
    self.assertEqual(result.returncode, 2, result.stderr[-2000:])
    self.assertIn('holds a run of a different experiment', result.stderr)
    self.assertIn('seed: 99 -> 0', result.stderr)
    with open(config_path) as f:
      self.assertEqual(json.loads(f.read()), {'experiment': {'seed': 99}})


class WeightingDemoRefusedRunExecutionTest(tf.test.TestCase):
  """A refused run leaves nothing that would refuse the corrected one."""

  def test_corrected_runs_after_refused_ones_and_restart(self):
    root = self.create_tempdir().full_path
    first, second, third, fresh = (os.path.join(root, name)
                                   for name in ('a', 'b', 'c', 'fresh'))
    smoke = [f'--flagfile={_SMOKE_FLAGS}', '--weightings=uniform',
             '--rounds=1', '--progress=off']
    cases = [
        # A refused run leaves nothing, not even the folder it made.
        ([f'--output_dir={third}', '--dataset=nope'], 2, r'nope'),
        # A typo in --dataset, then the corrected command, in one folder.
        ([f'--output_dir={first}', '--dataset=nope'], 2, r'nope'),
        ([f'--output_dir={first}'], 0, None),
        # Too many clients per round (the smoke preset has 3 clients).
        ([f'--output_dir={second}', '--clients_per_round=4'], 2,
         r'clients_per_round=4 is more than the 3 clients'),
        ([f'--output_dir={second}', '--clients_per_round=2'], 0, None),
        # Another experiment in a folder with a run: refused, unless
        # --restart, which starts over.
        ([f'--output_dir={first}', '--seed=1'], 2,
         r'holds a run of a different experiment \(seed: 0 -> 1\)'),
        ([f'--output_dir={first}', '--seed=1', '--restart'], 0, None),
        ([f'--output_dir={fresh}', '--seed=1'], 0, None),
    ]
    outcomes = bad_input_driver.run_command_lines(
        'weighting_demo', [smoke + args for args, _, _ in cases])
    for (args, status, message), (returncode, stderr) in zip(cases,
                                                              outcomes):
      self.assertEqual(returncode, status, f'{args}: {stderr[-2000:]}')
      if message:
        error_lines = [l for l in stderr.splitlines() if 'error:' in l]
        self.assertLen(error_lines, 1, stderr[-2000:])
        self.assertRegex(error_lines[0], message)
    self.assertEqual(sorted(os.listdir(root)), ['a', 'b', 'fresh'])
    with open(os.path.join(second, 'config.json')) as f:
      self.assertEqual(json.load(f)['experiment']['clients_per_round'], 2)
    # The restarted run is the seed-1 run alone: its metrics are those of a
    # seed-1 run in a fresh folder.
    with open(os.path.join(first, 'config.json')) as f:
      self.assertEqual(json.load(f)['experiment']['seed'], 1)

    def records(output_dir):
      with open(os.path.join(output_dir, 'uniform', 'metrics.jsonl')) as f:
        return [{k: v for k, v in json.loads(line).items()
                 if not k.endswith('_seconds')} for line in f]

    self.assertEqual([r['round'] for r in records(first)], [0, 1])
    self.assertEqual(records(first), records(fresh))


class WeightingDemoPrivacyExecutionTest(tf.test.TestCase):

  def test_target_epsilon_run_records_the_epsilon_it_reaches(self):
    # The smoke preset: 3 clients, all in each of 2 rounds; delta = 1/3.
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    target = 20.0
    result = _run(f'--flagfile={_SMOKE_FLAGS}', f'--output_dir={output_dir}',
                  '--weightings=uniform', f'--target_epsilon={target}',
                  '--progress=off')
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(output_dir, 'results.json')) as f:
      results = json.load(f)
    recorded = results['weightings']['uniform']['privacy']
    sigma = recorded['noise_multiplier']
    self.assertEqual(
        {k: v for k, v in recorded.items()
         if k not in ('epsilon', 'noise_multiplier')},
        dict(delta=1 / 3, clients_per_round=3, population=3, rounds=2,
             sampling='full_participation',
             accountant='dp_accounting.rdp.RdpAccountant',
             target_epsilon=target, target_rounds=2))
    # Recomputed from the recorded noise multiplier: with the library and
    # directly with dp_accounting (every client in every round: 2 Gaussian
    # mechanisms, no sampling).
    self.assertEqual(recorded['epsilon'],
                     privacy.epsilon(sigma, 3, 3, 2, 1 / 3))
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(sigma), 2))
    self.assertAlmostEqual(recorded['epsilon'],
                           accountant.get_epsilon(1 / 3), places=9)
    self.assertLessEqual(recorded['epsilon'], target)
    self.assertGreater(recorded['epsilon'], 0.999 * target)
    # Every round's record holds the epsilon spent so far.
    rounds = results['weightings']['uniform']['rounds']
    self.assertEqual(
        [r.get('privacy') for r in rounds],
        [None] + [{'epsilon': privacy.epsilon(sigma, 3, 3, r, 1 / 3)}
                  for r in (1, 2)])
    with open(os.path.join(output_dir, 'uniform', 'metrics.csv')) as f:
      self.assertEqual(
          [row['privacy/epsilon'] for row in csv.DictReader(f)][1:],
          [str(r['privacy']['epsilon']) for r in rounds[1:]])
    with open(os.path.join(output_dir, 'config.json')) as f:
      aggregation = json.load(f)['experiment']['aggregation']
    self.assertEqual(aggregation['target_epsilon'], target)
    with open(os.path.join(output_dir, 'results.md')) as f:
      self.assertIn('uniform: differentially private, epsilon 20 at delta',
                    f.read())

  def test_default_run_config_has_no_aggregation(self):
    # Unset aggregation flags leave the experiment (and so the resumption
    # of existing run directories) as it was.
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    result = _run(f'--flagfile={_SMOKE_FLAGS}', f'--output_dir={output_dir}',
                  '--weightings=uniform', '--rounds=1', '--progress=off')
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertNotIn('aggregation', json.load(f)['experiment'])
    with open(os.path.join(output_dir, 'results.json')) as f:
      results = json.load(f)['weightings']['uniform']
    self.assertNotIn('privacy', results)
    self.assertTrue(all('privacy' not in r for r in results['rounds']))


class WeightingDemoResumeExecutionTest(tf.test.TestCase):
  """Against one uninterrupted run of the tiny configuration."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._tempdir = tempfile.mkdtemp()
    cls.uninterrupted_dir = os.path.join(cls._tempdir, 'uninterrupted')
    # As a user runs it: no TF_CPP_MIN_LOG_LEVEL (the Makefile sets one).
    cls.uninterrupted = _run(
        *_TINY_RUN, f'--output_dir={cls.uninterrupted_dir}',
        env={k: v for k, v in os.environ.items()
             if k != 'TF_CPP_MIN_LOG_LEVEL'})

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls._tempdir, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    result = self.uninterrupted
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])

  def test_uninterrupted_run_is_quiet_and_prints_the_table(self):
    result = self.uninterrupted
    # Quiet by default: no INFO line (TFF's per-checkpoint 'Program state
    # saved' once broke the progress bar into lines); the table on stdout.
    self.assertIsNone(re.search(r'^I\d{4} ', result.stderr, re.MULTILINE),
                      result.stderr[-3000:])
    self.assertNotIn('Program state saved', result.stderr)
    # Nor TensorFlow's C++ start-up lines (its CUDA plugins registered twice,
    # at ERROR level; oneDNN and CPU notices) or the two grappler INFO lines
    # per computation compiled for the worker (hundreds): stderr is empty.
    self.assertNotIn('Unable to register', result.stderr)
    self.assertNotIn('grappler', result.stderr)
    self.assertEqual(result.stderr, '')
    # The table, then the report's path.
    *table, last = result.stdout.splitlines()
    self.assertIn('| lorar |', table[-1])
    report = os.path.join(self.uninterrupted_dir, 'results.md')
    self.assertEqual(last, f'Report: {report}')
    self.assertTrue(os.path.isfile(report))

  def test_sigkill_then_rerun_resumes_to_the_uninterrupted_model(self):
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    args = [*_TINY_RUN, f'--output_dir={output_dir}']
    # A session of its own, so the kill takes the TFF worker with it, as a
    # killed terminal or a preempted job does.
    process = subprocess.Popen(_command(*args), cwd=_REPO, env=_env(),
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL,
                               start_new_session=True)
    first_jsonl = os.path.join(output_dir, _WEIGHTINGS[0], 'metrics.jsonl')
    try:
      deadline = time.monotonic() + 600
      while max(_rounds(first_jsonl), default=-1) < 3:
        self.assertIsNone(process.poll(),
                          'the run ended before it was killed')
        self.assertLess(time.monotonic(), deadline, 'the run made no progress')
        time.sleep(0.05)
    finally:
      os.killpg(process.pid, signal.SIGKILL)
      process.wait()
    killed_at = max(_rounds(first_jsonl))
    self.assertLess(killed_at, _ROUNDS)
    for _ in range(100):  # The worker is reaped by init, not by us.
      if not _group_alive(process.pid):
        break
      time.sleep(0.1)
    self.assertFalse(_group_alive(process.pid))

    # --verbosity=0 brings the INFO lines back; TensorFlow's per-SavedModel
    # INFO line stays dropped.
    result = _run(*args, '--verbosity=0')
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertIn('Program state loaded', result.stderr)
    self.assertNotIn('fingerprinting_utils', result.stderr)

    for weighting in _WEIGHTINGS:
      jsonl = os.path.join(output_dir, weighting, 'metrics.jsonl')
      self.assertEqual(_rounds(jsonl), list(range(_ROUNDS + 1)), weighting)
      with open(os.path.join(output_dir, weighting, 'metrics.csv')) as f:
        self.assertEqual([int(r['key']) for r in csv.DictReader(f)],
                         list(range(_ROUNDS + 1)))
      resumed = _final_variables(output_dir, weighting)
      reference = _final_variables(self.uninterrupted_dir, weighting)
      self.assertEqual(resumed.keys(), reference.keys())
      self.assertTrue(any('global_model_weights' in name for name in resumed))
      for name in reference:
        np.testing.assert_allclose(resumed[name], reference[name], rtol=0,
                                   atol=1e-6, err_msg=f'{weighting}: {name}')
    with open(os.path.join(output_dir, 'results.json')) as f:
      results = json.load(f)
    with open(os.path.join(self.uninterrupted_dir, 'results.json')) as f:
      reference_results = json.load(f)
    for weighting in _WEIGHTINGS:
      for key in ('correct', 'per_client_accuracy'):
        self.assertEqual(results['weightings'][weighting][key],
                         reference_results['weightings'][weighting][key])

  def test_corrupt_checkpoint_exits_2_and_is_kept(self):
    output_dir = os.path.join(self.create_tempdir().full_path, 'run')
    subprocess.run(['cp', '-r', self.uninterrupted_dir, output_dir],
                   check=True)
    checkpoint = os.path.join(output_dir, _WEIGHTINGS[0], 'checkpoints',
                              f'round_{_ROUNDS}')
    with open(os.path.join(checkpoint, 'saved_model.pb'), 'wb') as f:
      f.write(b'\0garbage')
    result = _run(*_TINY_RUN, f'--output_dir={output_dir}',
                  f'--rounds={_ROUNDS + 2}')
    self.assertEqual(result.returncode, 2, result.stderr[-3000:])
    self.assertIn(f'{checkpoint}: the checkpoint cannot be loaded',
                  result.stderr)
    with open(os.path.join(checkpoint, 'saved_model.pb'), 'rb') as f:
      self.assertEqual(f.read(), b'\0garbage')
    self.assertEqual(sorted(os.listdir(os.path.dirname(checkpoint)))[-1],
                     f'round_{_ROUNDS}')


if __name__ == '__main__':
  tf.test.main()
