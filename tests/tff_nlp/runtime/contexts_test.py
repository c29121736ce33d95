"""Tests that the TFF worker we start is always stopped, and configured as asked."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from unittest import mock

from absl.testing import flagsaver
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests.tff_nlp.runtime import computations
from tff_nlp import runtime
from tff_nlp.runtime import flags as runtime_flags

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    __file__))))

# A child Python process: starts a context, runs a federated round, prints the
# worker pid, waits for a line on stdin (the test's go, once it has seen the
# worker alive), then ends as the scenario says.
_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    import tensorflow as tf
    import tensorflow_federated as tff
    from tff_nlp import runtime

    @tff.tensorflow.computation(np.float32)
    def add_one(x):
      # Fails at run time, inside the worker, for a negative client value.
      with tf.control_dependencies([tf.debugging.assert_non_negative(x)]):
        return x + 1.0

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def one_round(x):
      return tff.federated_sum(tff.federated_map(add_one, x))

    scenario = sys.argv[1]
    if scenario == 'with_block_then_continue':
      with runtime.local_cpp_context() as context:
        assert one_round([1.0, 2.0]) == 5.0
        print(context.worker.pid, flush=True)
        sys.stdin.readline()
      time.sleep(600)  # the test checks the worker died while we live on
    context = runtime.set_local_cpp_context()
    assert one_round([1.0, 2.0]) == 5.0
    print(context.worker.pid, flush=True)
    sys.stdin.readline()
    if scenario == 'normal_exit':
      sys.exit(0)
    if scenario == 'exception_in_round':
      one_round([1.0, -1.0])  # a client fails inside the worker
    if scenario == 'sigkill':
      time.sleep(600)  # killed by the test
""")


def _pid_alive(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat', 'rb') as f:
      state = f.read().rsplit(b')', 1)[-1].split()[0]
  except FileNotFoundError:
    return False
  return state != b'Z'  # a zombie has exited; only its parent can reap it


def _worker_log_folders(tmpdir: str) -> list[str]:
  return sorted(name for name in os.listdir(tmpdir)
                if name.startswith('tff_nlp_worker_'))


def _wait_until_gone(pid: int, patience_seconds: float = 60.0) -> bool:
  deadline = time.monotonic() + patience_seconds
  while time.monotonic() < deadline:
    if not _pid_alive(pid):
      return True
    time.sleep(0.1)
  return False


_SCENARIOS = ('normal_exit', 'exception_in_round', 'sigkill',
              'with_block_then_continue')


class WorkerTeardownExecutionTest(tf.test.TestCase, parameterized.TestCase):
  """One child per scenario, all started in setUpClass.

  Each child spends most of its start importing TensorFlow and TFF; started
  together they cost about the slowest one, not the sum. A child waits,
  worker running, until its test has read the worker's pid and seen it
  alive, and only then ends as its scenario says.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.children = {}
    for scenario in _SCENARIOS:
      tmpdir = tempfile.mkdtemp(prefix=f'contexts_test_{scenario}_')
      cls.addClassCleanup(shutil.rmtree, tmpdir, ignore_errors=True)
      # stdout is a pipe, as in `make test | tee`: if the worker inherited
      # it, reading to EOF in the test would never finish.
      child = subprocess.Popen(
          [sys.executable, '-c', _CHILD, scenario],
          stdin=subprocess.PIPE,
          stdout=subprocess.PIPE,
          stderr=subprocess.DEVNULL,
          cwd=_REPO_ROOT,
          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', TMPDIR=tmpdir),
      )
      cls.addClassCleanup(_stop_child, child)
      cls.children[scenario] = child, tmpdir

  # The last value: log folders ($TMPDIR/tff_nlp_worker_*) left behind. A
  # worker stopped by tff_nlp leaves none; after a SIGKILL of Python nothing
  # runs to remove its folder.
  @parameterized.named_parameters(
      ('normal_exit', 'normal_exit', 0, 0),
      ('exception_in_round', 'exception_in_round', 1, 0),
      ('sigkill_of_python', 'sigkill', -signal.SIGKILL, 1),
      ('with_block_exit', 'with_block_then_continue', -signal.SIGKILL, 0),
  )
  def test_worker_is_gone(self, scenario, expected_returncode,
                          expected_log_folders):
    child, tmpdir = self.children[scenario]
    worker_pid = int(child.stdout.readline())
    self.assertTrue(_pid_alive(worker_pid))
    child.stdin.close()  # The go: the child's readline returns.
    if scenario == 'with_block_then_continue':
      self.assertTrue(_wait_until_gone(worker_pid),
                      'worker outlived its `with` block')
      self.assertIsNone(child.poll())  # ... while Python still runs
      child.kill()
    elif scenario == 'sigkill':
      child.kill()
    try:
      child.stdout.read()  # EOF only once no process holds the pipe
      returncode = child.wait(timeout=120)
    except subprocess.TimeoutExpired:
      child.kill()
      self.fail('child did not exit')
    self.assertEqual(returncode, expected_returncode)
    self.assertTrue(_wait_until_gone(worker_pid),
                    f'worker {worker_pid} survived scenario {scenario}')
    self.assertLen(_worker_log_folders(tmpdir), expected_log_folders)


def _stop_child(child):
  if child.poll() is None:
    child.kill()
  child.wait()
  for pipe in (child.stdin, child.stdout):
    if pipe and not pipe.closed:
      pipe.close()


def _proc_cmdline(pid):
  with open(f'/proc/{pid}/cmdline', 'rb') as f:
    return f.read().decode().split('\0')


def _proc_environ(pid):
  with open(f'/proc/{pid}/environ', 'rb') as f:
    return f.read().decode(errors='replace').split('\0')


class LocalCppContextExecutionTest(tf.test.TestCase):

  def test_worker_gets_settings_and_is_stopped(self):
    log_dir = self.create_tempdir().full_path
    with runtime.local_cpp_context(
        max_concurrent_computation_calls=3,
        cuda_visible_devices='',
        log_dir=log_dir,
    ) as context:
      pid = context.worker.pid
      self.assertEqual(computations.sum_plus_one([1.0, 2.0, 3.0]), 9.0)  # 2 + 3 + 4
      self.assertIn('--max_concurrent_computation_calls=3', _proc_cmdline(pid))
      self.assertIn('CUDA_VISIBLE_DEVICES=', _proc_environ(pid))
      self.assertIn(pid, runtime.owned_worker_pids())
      self.assertStartsWith(context.worker.log_path, log_dir)
    self.assertFalse(_pid_alive(pid))
    self.assertNotIn(pid, runtime.owned_worker_pids())

  def test_default_num_clients_sets_cardinality(self):

    @tff.federated_computation
    def count_clients():
      return tff.federated_sum(tff.federated_value(1, tff.CLIENTS))

    with runtime.local_cpp_context(default_num_clients=7):
      self.assertEqual(count_clients(), 7)

  def test_dead_worker_is_a_clear_error(self):
    with runtime.local_cpp_context() as context:
      self.assertEqual(computations.sum_plus_one([1.0]), 2.0)
      os.kill(context.worker.pid, signal.SIGKILL)
      context.worker._process.wait()  # pylint: disable=protected-access
      with self.assertRaisesRegex(runtime.WorkerError, 'exited with code -9'):
        computations.sum_plus_one([1.0])

  def test_log_folder_is_removed_when_the_context_exits(self):
    tmpdir = self.create_tempdir().full_path
    with mock.patch.object(tempfile, 'tempdir', tmpdir):
      with runtime.local_cpp_context() as context:
        self.assertEqual(computations.sum_plus_one([1.0]), 2.0)
        log_path = context.worker.log_path
        self.assertStartsWith(log_path,
                              os.path.join(tmpdir, 'tff_nlp_worker_'))
        self.assertTrue(os.path.exists(log_path))
    self.assertEqual(_worker_log_folders(tmpdir), [])

  def test_log_of_a_failed_worker_is_kept_and_named(self):
    tmpdir = self.create_tempdir().full_path
    with mock.patch.object(tempfile, 'tempdir', tmpdir):
      with runtime.local_cpp_context() as context:
        log_path = context.worker.log_path
        os.kill(context.worker.pid, signal.SIGKILL)
        context.worker._process.wait()  # pylint: disable=protected-access
        with self.assertRaisesRegex(runtime.WorkerError, re.escape(log_path)):
          computations.sum_plus_one([1.0])
    self.assertTrue(os.path.isfile(log_path))
    self.assertLen(_worker_log_folders(tmpdir), 1)

  def test_a_given_log_dir_is_kept(self):
    log_dir = self.create_tempdir().full_path
    with runtime.local_cpp_context(log_dir=log_dir) as context:
      log_path = context.worker.log_path
    self.assertTrue(os.path.isfile(log_path))

  def test_stop_is_idempotent(self):
    context = runtime.local_cpp_context()
    context.close()
    context.close()
    self.assertFalse(context.worker.is_running())


class RuntimeFlagsExecutionTest(tf.test.TestCase):

  @flagsaver.flagsaver(default_num_clients=4,
                       max_concurrent_computation_calls=2,
                       cuda_visible_devices='0,1')
  def test_settings_from_flags(self):
    self.assertEqual(
        runtime_flags.settings_from_flags(),
        runtime.ContextSettings(
            default_num_clients=4,
            max_concurrent_computation_calls=2,
            cuda_visible_devices='0,1',
            log_dir=None,
        ),
    )


if __name__ == '__main__':
  tf.test.main()
