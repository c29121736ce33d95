"""Tests of several TFF workers: same model as one worker, clear failures."""

import functools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from absl.testing import flagsaver
from absl.testing import parameterized
import numpy as np
import portpicker
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import tag_fixtures
from tff_nlp import algorithms
from apps.partial_models import tag_process
from tff_nlp import runtime
from tff_nlp.runtime import bind_address
from tff_nlp.runtime import flags as runtime_flags
from tff_nlp.runtime import multi_worker

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    __file__))))


def _clients():
  """Five clients of different sizes: a 3/2 split over two workers."""
  return linear_model.three_clients() + [
      linear_model.make_client(6, 2, seed=4),
      linear_model.make_client(9, 4, seed=5),
  ]


@functools.cache
def _process(algorithm, weighting, fallback):
  """One process per configuration, shared by this file's tests.

  A process holds no training state, and tracing it costs more than the
  rounds run with it.
  """
  kwargs = {}
  if algorithm == 'fedprox':
    kwargs['proximal_strength'] = 0.01
  return algorithms.build_fl_process(
      linear_model.model_fn,
      algorithm=algorithm,
      weighting=weighting,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
      num_examples_fallback=fallback,
      **kwargs,
  )


def _two_rounds(process):
  datasets = [linear_model.to_dataset(c) for c in _clients()]
  state = process.initialize()
  for _ in range(2):
    output = process.next(state, datasets)
    state = output.state
  kernel, bias = linear_model.global_weights(process, state)
  return kernel, bias, output.metrics


@functools.cache
def _reference_rounds(algorithm, weighting, fallback):
  """`_two_rounds` in the suite's default context: one worker, one call.

  Computed once per configuration (the tests only read it); call it outside
  any other context.
  """
  return _two_rounds(_process(algorithm, weighting, fallback))


def _assert_same_rounds(test, split, reference):
  """`_two_rounds` on split calls gave the one-call result (5 clients)."""
  (split_kernel, split_bias, split_metrics), (kernel, bias, metrics) = (
      split, reference)
  test.assertAllClose(split_kernel, kernel, atol=1e-6, rtol=0)
  test.assertAllClose(split_bias, bias, atol=1e-6, rtol=0)
  # The update is not trivially zero: the model moved from its start.
  test.assertGreater(
      np.max(np.abs(kernel - linear_model.INITIAL_KERNEL)), 1e-2)
  test.assertEqual(
      split_metrics['client_work']['weighting']['num_clients'], 5)
  test.assertAllClose(
      split_metrics['client_work']['train']['loss'],
      metrics['client_work']['train']['loss'], rtol=1e-6)


def _wait_listening(server, timeout=600.0):
  """Waits until `server` (a `tff_worker` process) listens on a port."""
  deadline = time.monotonic() + timeout
  while not bind_address.listening_addresses(server.pid):
    if server.poll() is not None:
      raise AssertionError(f'tff_worker exited ({server.returncode})')
    if time.monotonic() > deadline:
      raise AssertionError(f'tff_worker listens on nothing after {timeout}s')
    time.sleep(0.1)


def _pid_alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  with open(f'/proc/{pid}/stat', 'rb') as f:
    return f.read().rsplit(b')', 1)[-1].split()[0] != b'Z'


class MultiWorkerExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.context = runtime.multi_worker_context(num_workers=2)

  @classmethod
  def tearDownClass(cls):
    cls.context.close()
    super().tearDownClass()

  def _installed(self):
    # Not `with self.context`: leaving that stops the shared workers.
    return tff.framework.get_context_stack().install(self.context.tff_context)

  @parameterized.named_parameters(
      ('fedavg_num_examples', 'fedavg', 'num_examples', True, True),
      ('fedavg_lorar', 'fedavg', 'lorar', False, True),
      ('fedprox_lorar', 'fedprox', 'lorar', False, True),
      ('fedopt_uniform', 'fedopt', 'uniform', True, True),
      # The fallback is a second aggregation stage: runs on one worker.
      ('lorar_with_fallback', 'fedavg', 'lorar', True, False),
  )
  def test_two_workers_give_the_single_worker_model(
      self, algorithm, weighting, fallback, splits):
    process = _process(algorithm, weighting, fallback)
    # The reference: the suite's default context, one worker (conftest).
    kernel, bias, metrics = _reference_rounds(algorithm, weighting, fallback)
    unsplit_before = len(self.context.tff_context.unsplit_computations)
    with self._installed():
      split_kernel, split_bias, split_metrics = _two_rounds(process)
    _assert_same_rounds(self, (split_kernel, split_bias, split_metrics),
                        (kernel, bias, metrics))
    unsplit = self.context.tff_context.unsplit_computations[unsplit_before:]
    self.assertEqual(unsplit == [], splits, unsplit)

  @parameterized.named_parameters(('clients', 'clients'),
                                  ('touching_clients', 'touching_clients'))
  def test_federated_select_round_is_split_and_matches_numpy(self, divisor):
    # Partial models: each client selects its rows with federated_select;
    # the split round must equal the numpy re-implementation of one round.
    process = tag_process.build_sparse_tag_process(
        num_words=tag_fixtures.V, num_tags=tag_fixtures.T,
        max_keys=3, client_learning_rate=tag_fixtures.LR,
        divisor=divisor)
    table = tag_fixtures.start_table()
    unsplit_before = len(self.context.tff_context.unsplit_computations)
    with self._installed():
      new_table, _ = tag_fixtures.run_round(
          process, table, tag_fixtures.datasets())
    expected = tag_fixtures.reference_round(
        table, tag_fixtures.CLIENTS, max_keys=3, divisor=divisor)
    np.testing.assert_allclose(new_table, expected, rtol=1e-5, atol=1e-6)
    self.assertLen(
        self.context.tff_context.unsplit_computations, unsplit_before)

  def test_initialize_runs_on_one_worker_without_being_listed(self):
    process = _process('fedavg', 'num_examples', True)
    unsplit_before = len(self.context.tff_context.unsplit_computations)
    with self._installed():
      state = process.initialize()
    kernel, _ = linear_model.global_weights(process, state)
    self.assertAllEqual(kernel, linear_model.INITIAL_KERNEL)
    self.assertLen(
        self.context.tff_context.unsplit_computations, unsplit_before)


class SubroundExecutionTest(tf.test.TestCase, parameterized.TestCase):
  """Rounds cut into slices of at most S clients that workers take in turn."""

  @parameterized.named_parameters(
      # 5 clients: ceil(5/2) = 3 slices (2, 2, 1) on one worker, in turn.
      ('one_worker_fedavg', 1, 2, 'fedavg', 'num_examples', 3),
      ('one_worker_fedopt', 1, 2, 'fedopt', 'uniform', 3),
      # Every client its own slice, two workers taking them as they free up.
      ('two_workers_slices_of_one', 2, 1, 'fedavg', 'num_examples', 5),
      # More workers than ceil(N/S) slices: still one slice per worker.
      ('slices_at_least_workers', 2, 4, 'fedavg', 'num_examples', 2),
  )
  def test_subrounds_give_the_single_call_model(
      self, num_workers, clients_per_subround, algorithm, weighting,
      num_subrounds):
    process = _process(algorithm, weighting, True)
    # One worker, one call.
    kernel, bias, metrics = _reference_rounds(algorithm, weighting, True)
    with runtime.multi_worker_context(
        num_workers=num_workers,
        clients_per_subround=clients_per_subround) as context:
      self.assertIsInstance(context.tff_context, runtime.SplittingContext)
      self.assertEqual(context.tff_context.num_subrounds(5), num_subrounds)
      split_kernel, split_bias, split_metrics = _two_rounds(process)
      self.assertEqual(context.tff_context.unsplit_computations, [])
    _assert_same_rounds(self, (split_kernel, split_bias, split_metrics),
                        (kernel, bias, metrics))

  @parameterized.named_parameters(
      # (workers, S, clients, slices): ceil(N/S), at least one per worker.
      ('off_one_per_worker', 3, 0, 10_000, 3),
      ('ten_thousand_by_250', 1, 250, 10_000, 40),
      ('remainder_rounds_up', 1, 250, 10_001, 41),
      ('fewer_clients_than_s', 2, 250, 10, 2),
  )
  def test_number_of_slices(self, num_workers, clients_per_subround,
                            num_clients, expected):
    # The arithmetic needs no workers.
    got = runtime.SplittingContext.num_subrounds(
        _Slices(num_workers, clients_per_subround), num_clients)
    self.assertEqual(got, expected)

  def test_clients_counted_in_nested_arguments(self):
    clients = tff.FederatedType(np.float32, tff.CLIENTS)
    server = tff.FederatedType(np.float32, tff.SERVER)
    signature = tff.StructType([('state', server),
                                ('data', tff.StructType([('x', clients)]))])
    self.assertEqual(multi_worker.num_clients_in(
        tff.structure.Struct([('state', 1.0),
                              ('data', tff.structure.Struct(
                                  [('x', [1.0, 2.0, 3.0])]))]),
        signature), 3)
    self.assertEqual(multi_worker.num_clients_in([1.0, 2.0], clients), 2)
    self.assertEqual(multi_worker.num_clients_in(1.0, server), 0)
    self.assertEqual(multi_worker.num_clients_in(None, None), 0)

  def test_one_worker_without_subrounds_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'clients_per_subround > 0'):
      runtime.SplittingContext([object()], default_num_clients=0)
    with self.assertRaisesRegex(ValueError, 'clients_per_subround must be'):
      runtime.ContextSettings(clients_per_subround=-1)

  @flagsaver.flagsaver(clients_per_subround=250)
  def test_flag_reaches_the_settings(self):
    self.assertEqual(
        runtime_flags.settings_from_flags().clients_per_subround, 250)


class _Slices:
  """What `SplittingContext.num_subrounds` reads, without workers."""

  def __init__(self, num_workers, clients_per_subround):
    self.workers = [None] * num_workers
    self.clients_per_subround = clients_per_subround


class WorkerFailureExecutionTest(tf.test.TestCase):

  def test_worker_killed_mid_round_is_a_clear_error(self):
    marker = os.path.join(tempfile.mkdtemp(), 'release')

    # Each client spins until the test creates `marker` (or 60 s pass, so a
    # broken test ends instead of hanging), keeping the round in flight
    # while a worker is killed.
    @tff.tensorflow.computation(np.float32)
    def slow_client(x):
      start = tf.timestamp()

      def waiting(i):
        released = tf.size(tf.io.matching_files(marker)) > 0
        return tf.logical_and(
            tf.logical_not(released), tf.timestamp() - start < 60.0)

      steps = tf.while_loop(waiting, lambda i: i + 1, [tf.constant(0)])
      return x + 0.0 * tf.cast(steps, tf.float32)

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def round_fn(values):
      return tff.federated_sum(tff.federated_map(slow_client, values))

    context = runtime.multi_worker_context(num_workers=2)
    victim = context.workers[1]
    outcome = {}

    def run_round():
      try:
        with context:
          outcome['result'] = round_fn([1.0, 2.0, 3.0, 4.0])
      except Exception as e:  # pylint: disable=broad-except
        outcome['error'] = e

    thread = threading.Thread(target=run_round)
    thread.start()
    time.sleep(3.0)  # Let both workers start their clients.
    os.kill(victim.pid, signal.SIGKILL)
    victim._process.wait()  # pylint: disable=protected-access
    with open(marker, 'w'):
      pass  # Releases the surviving worker's clients.
    thread.join()
    self.assertNotIn('result', outcome)
    self.assertIsInstance(outcome['error'], runtime.WorkerError)
    self.assertIn(f'pid {victim.pid}', str(outcome['error']))
    self.assertIn('exited with code -9', str(outcome['error']))
    for worker in context.workers:
      self.assertFalse(_pid_alive(worker.pid))


class RemoteWorkerExecutionTest(tf.test.TestCase):

  def _start_tff_worker_binary(self, port):
    worker = subprocess.Popen(
        [sys.executable, '-m', 'apps.common.bin.tff_worker', f'--port={port}',
         '--max_concurrent_computation_calls=2', '--malloc_arena_max=2'],
        cwd=_REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    self.addCleanup(lambda: (worker.kill(), worker.wait()))
    return worker

  def test_workers_at_addresses_run_rounds_and_report_when_gone(self):
    ports = [portpicker.pick_unused_port() for _ in range(2)]
    servers = [self._start_tff_worker_binary(p) for p in ports]
    process = _process('fedavg', 'num_examples', True)
    kernel, bias, _ = _reference_rounds('fedavg', 'num_examples', True)
    # The reference is shared, so nothing here gives the servers the time
    # it took to compute: wait until both listen (their Python start,
    # TFF's import, can outlast the 60 s a worker is given to answer).
    for server in servers:
      _wait_listening(server)
    context = runtime.multi_worker_context(
        worker_addresses=[f'127.0.0.1:{p}' for p in ports])
    with context:
      split_kernel, split_bias, _ = _two_rounds(process)
    self.assertAllClose(split_kernel, kernel, atol=1e-6, rtol=0)
    self.assertAllClose(split_bias, bias, atol=1e-6, rtol=0)
    # The context did not stop workers it did not start ...
    for server in servers:
      self.assertIsNone(server.poll())
      # ... which became TFF's worker (same pid) with the asked settings.
      with open(f'/proc/{server.pid}/cmdline', 'rb') as f:
        self.assertIn(b'--max_concurrent_computation_calls=2', f.read())
      with open(f'/proc/{server.pid}/environ', 'rb') as f:
        self.assertIn(b'MALLOC_ARENA_MAX=2', f.read().split(b'\0'))
    # ... and an unreachable one is an error naming it, not endless retries.
    servers[1].kill()
    servers[1].wait()
    context = runtime.multi_worker_context(
        worker_addresses=[f'127.0.0.1:{p}' for p in ports])
    context.workers[1].connect_timeout_seconds = 2.0
    with self.assertRaisesRegex(
        runtime.WorkerError, f'127.0.0.1:{ports[1]} did not answer'):
      with context:
        _two_rounds(process)

  def test_bad_address_is_rejected_up_front(self):
    with self.assertRaisesRegex(ValueError, "'nohost' is not host:port"):
      runtime.multi_worker_context(worker_addresses=['nohost'])


class WorkerSettingsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_per_worker_devices_memory_and_malloc_settings_reach_workers(self):
    with runtime.CppContext(runtime.ContextSettings(
        num_workers=2, cuda_visible_devices='0;1', gpu_memory_growth=True,
        worker_malloc_arena_max=2,
        worker_malloc_mmap_threshold=131072)) as context:
      pids = [w.pid for w in context.workers]
      self.assertCountEqual(
          [p for p in runtime.owned_worker_pids() if p in pids], pids)
      for pid, devices in zip(pids, ('0', '1')):
        with open(f'/proc/{pid}/environ', 'rb') as f:
          environ = f.read().split(b'\0')
        self.assertIn(f'CUDA_VISIBLE_DEVICES={devices}'.encode(), environ)
        self.assertIn(b'TF_FORCE_GPU_ALLOW_GROWTH=true', environ)
        self.assertIn(b'MALLOC_ARENA_MAX=2', environ)
        self.assertIn(b'MALLOC_MMAP_THRESHOLD_=131072', environ)
    for pid in pids:
      self.assertFalse(_pid_alive(pid))

  @flagsaver.flagsaver(num_workers=3, cuda_visible_devices='',
                       max_concurrent_computation_calls=2)
  def test_settings_from_flags(self):
    settings = runtime_flags.settings_from_flags()
    self.assertEqual(settings.num_workers, 3)
    self.assertEqual(settings.worker_cuda_visible_devices(), ['', '', ''])

  @parameterized.named_parameters(
      ('both_kinds_of_worker',
       dict(num_workers=2, worker_addresses=('a:1',)), 'not both'),
      ('devices_per_worker_mismatch',
       dict(num_workers=3, cuda_visible_devices='0;1'), 'names 2 workers'),
      ('no_port', dict(worker_addresses=('host',)), 'not host:port'),
      ('zero_workers', dict(num_workers=0), 'num_workers must be >= 1'),
      ('negative_arenas', dict(worker_malloc_arena_max=-1),
       'worker_malloc_arena_max must be >= 0'),
  )
  def test_inconsistent_settings_are_rejected(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      runtime.ContextSettings(**kwargs)

  def test_inconsistent_flags_fail_at_parse_time(self):
    result = subprocess.run(
        [sys.executable, '-m', 'apps.partial_models.bin.train_sparse_tags',
         '--num_workers=2', '--worker_addresses=a:1', '--output_dir=/nowhere'],
        cwd=_REPO_ROOT, capture_output=True, text=True, check=False)
    self.assertEqual(result.returncode, 2, result.stderr)
    self.assertIn('not both', result.stderr)


if __name__ == '__main__':
  tf.test.main()
