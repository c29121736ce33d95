"""The workers we start listen on loopback only, or where the user says.

The kernel is the witness: each test reads the worker process's listening
sockets from /proc (`bind_address.listening_addresses`), after a real
computation ran on it.
"""

import os
import socket
import subprocess
import sys
import time
from unittest import mock

from absl.testing import parameterized
import portpicker
import tensorflow as tf

from tests.tff_nlp.runtime import computations
from tff_nlp import runtime
from tff_nlp.runtime import bind_address
from tff_nlp.runtime import workers


def _wait_listening(pid, timeout=60.0):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    listening = bind_address.listening_addresses(pid)
    if listening:
      return listening
    time.sleep(0.1)
  raise AssertionError(f'pid {pid} listens on nothing after {timeout}s')


def _accepts(host, port):
  try:
    with socket.create_connection((host, port), timeout=5):
      return True
  except OSError:
    return False


class ProcNetParsingTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      # /proc/net/tcp: the address's 32-bit words in host (little-endian)
      # order: 127.0.0.1 = 7F 00 00 01 -> "0100007F".
      ('0100007F', 4, '127.0.0.1'),
      ('00000000', 4, '0.0.0.0'),
      ('0200007F', 4, '127.0.0.2'),
      # ::ffff:127.0.0.1, word by word: 0, 0, 0000FFFF, 7F000001.
      ('0000000000000000FFFF00000100007F', 6, '127.0.0.1'),
      # ::1: last word 00000001 -> "01000000".
      ('00000000000000000000000001000000', 6, '::1'),
      ('00000000000000000000000000000000', 6, '::'),
  )
  def test_address(self, hex_address, family, expected):
    self.assertEqual(bind_address._parse_address(hex_address, family),
                     expected)

  @parameterized.parameters(('0.0.0.0', True), ('::', True),
                            ('127.0.0.1', False), ('::1', False))
  def test_wildcard(self, address, expected):
    self.assertEqual(bind_address.is_wildcard(address), expected)

  def test_bad_address(self):
    with self.assertRaisesRegex(bind_address.BindAddressError,
                                "'localhost' is not an IPv4 or IPv6 address"):
      bind_address.check_address('localhost')


class LocalWorkersTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('one_worker', 1), ('two_workers', 2))
  def test_local_workers_listen_on_loopback_only(self, num_workers):
    context_fn = (runtime.local_cpp_context if num_workers == 1 else
                  lambda: runtime.multi_worker_context(num_workers=2))
    with context_fn() as context:
      # 2 + 3 + 4, computed on the workers.
      self.assertEqual(computations.sum_plus_one([1.0, 2.0, 3.0]), 9.0)
      self.assertLen(context.workers, num_workers)
      for worker in context.workers:
        self.assertEqual(bind_address.listening_addresses(worker.pid),
                         [('127.0.0.1', worker.port)])

  def test_without_the_library_it_says_so_once_and_goes_on(self):
    bind_address._library_or_reason.cache_clear()
    bind_address.warn_once.cache_clear()
    self.addCleanup(bind_address._library_or_reason.cache_clear)
    self.addCleanup(bind_address.warn_once.cache_clear)
    with mock.patch.dict(os.environ, {
        'CC': '/nonexistent/cc',
        bind_address.CACHE_ENV_VAR: self.create_tempdir().full_path}), \
        mock.patch('sys.stderr', new_callable=lambda: _Capture()) as stderr:
      for _ in range(2):
        _, env = workers.worker_command(portpicker.pick_unused_port())
        self.assertNotIn(bind_address.ADDRESS_ENV_VAR, env)
      with runtime.local_cpp_context() as context:
        self.assertEqual(computations.sum_plus_one([1.0]), 2.0)
        # TFF's own behaviour: every interface.
        self.assertEqual(bind_address.listening_addresses(context.worker.pid),
                         [('::', context.worker.port)])
    self.assertEqual(stderr.text.count('WARNING: tff_nlp cannot limit TFF '
                                       'workers to 127.0.0.1'), 1)
    self.assertIn('cannot run the C compiler /nonexistent/cc', stderr.text)


class _Capture:
  def __init__(self):
    self.text = ''

  def write(self, text):
    self.text += text

  def flush(self):
    pass


# The `tff_worker` command lines of TffWorkerBindAddressTest, by name.
_WORKER_FLAGS = {
    # Default: loopback, reached through an SSH tunnel.
    'default': (),
    # A named address (all of 127/8 is this machine's loopback): only it.
    'named': ('--bind_address=127.0.0.2',),
    # Every interface, asked for by name.
    'every_interface': ('--bind_address=0.0.0.0',),
    'bad': ('--bind_address=localhost',),
}


class TffWorkerBindAddressTest(tf.test.TestCase, parameterized.TestCase):
  """`python -m apps.common.bin.tff_worker`, one process per command line.

  The processes start together in setUpClass: each spends most of its start
  importing TFF, and started one after another they cost the sum. Each test
  checks its own process (the named worker serves two of them).
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workers = {}
    for name, flags in _WORKER_FLAGS.items():
      cls.workers[name] = cls._start(*flags)

  @classmethod
  def _start(cls, *flags):
    port = portpicker.pick_unused_port()
    process = subprocess.Popen(
        [sys.executable, '-m', 'apps.common.bin.tff_worker', f'--port={port}',
         *flags], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    def stop():
      process.kill()
      process.wait()
      process.stderr.close()
    cls.addClassCleanup(stop)
    return process, port

  @parameterized.named_parameters(
      ('default', 'default', '127.0.0.1', '127.0.0.1', '127.0.0.2'),
      ('named', 'named', '127.0.0.2', '127.0.0.2', '127.0.0.1'),
      ('every_interface', 'every_interface', '::', '127.0.0.2', None),
  )
  def test_listens_where_asked(self, name, listening, reachable,
                               unreachable):
    process, port = self.workers[name]
    self.assertEqual(_wait_listening(process.pid), [(listening, port)])
    self.assertTrue(_accepts(reachable, port))
    if unreachable:
      self.assertFalse(_accepts(unreachable, port))

  def test_a_computation_runs_on_a_named_address(self):
    process, port = self.workers['named']
    _wait_listening(process.pid)
    with runtime.multi_worker_context(
        worker_addresses=[f'127.0.0.2:{port}']):
      self.assertEqual(computations.sum_plus_one([1.0, 2.0]), 5.0)  # 2 + 3

  def test_a_bad_address_is_refused(self):
    process, _ = self.workers['bad']
    self.assertNotEqual(process.wait(timeout=120), 0)
    self.assertIn("--bind_address: 'localhost' is not an IPv4 or IPv6 "
                  'address', process.stderr.read())


if __name__ == '__main__':
  tf.test.main()
