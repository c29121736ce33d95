"""Tests of `runtime.memory`: /proc parsing on fixtures and real buffers."""

import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tff_nlp import runtime
from tff_nlp.runtime import memory

_MB = 1024 ** 2
# A trimmed /proc/<pid>/status of a real process.
_STATUS = """Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
Pid:\t4242
VmPeak:\t 9021516 kB
VmSize:\t 8915056 kB
VmHWM:\t  734212 kB
VmRSS:\t  702180 kB
RssAnon:\t  521332 kB
Threads:\t45
"""


class MemoryExecutionTest(tf.test.TestCase):

  def test_parse_status_reads_rss_and_peak_in_bytes(self):
    parsed = memory.parse_status(_STATUS, pid=4242)
    self.assertEqual(parsed, memory.ProcessMemory(
        pid=4242, rss_bytes=702180 * 1024, peak_bytes=734212 * 1024))

  def test_parse_status_without_memory_fields_raises(self):
    # A zombie's status has no Vm* lines.
    zombie = 'Name:\tworker_binary\nState:\tZ (zombie)\nPid:\t7\n'
    with self.assertRaisesRegex(memory.MemoryUnavailableError, 'VmRSS|VmHWM'):
      memory.parse_status(zombie, pid=7)

  def test_rss_and_peak_grow_by_a_touched_buffer(self):
    before = memory.process_memory()
    buffer = np.ones(256 * _MB, np.uint8)  # Written, so every page is resident.
    during = memory.process_memory()
    del buffer
    after = memory.process_memory()
    self.assertEqual(before.pid, os.getpid())
    self.assertGreaterEqual(during.rss_bytes - before.rss_bytes,
                            0.95 * 256 * _MB)
    self.assertGreaterEqual(during.peak_bytes, during.rss_bytes)
    # The peak keeps the high-water mark after the buffer is freed (up to the
    # kernel's batched per-thread page counts).
    self.assertGreaterEqual(after.peak_bytes, during.rss_bytes - _MB)
    self.assertLess(after.rss_bytes, during.rss_bytes - 0.9 * 256 * _MB)

  def test_reads_another_process(self):
    # A child holding a known touched buffer, read by its pid.
    child = subprocess.Popen(
        [sys.executable, '-c',
         'import sys; b = bytearray(b"x" * (128 * 2**20)); '
         'print("ready", flush=True); sys.stdin.read()'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
      self.assertEqual(child.stdout.readline().strip(), b'ready')
      seen = memory.process_memory(child.pid)
      self.assertEqual(seen.pid, child.pid)
      self.assertGreaterEqual(seen.rss_bytes, 128 * _MB)
      snap = memory.snapshot(worker_pids=[child.pid])
      self.assertEqual([w.pid for w in snap.workers], [child.pid])
      self.assertGreaterEqual(snap.workers_rss_bytes, 128 * _MB)
    finally:
      child.communicate(b'')
    with self.assertRaisesRegex(memory.MemoryUnavailableError, str(child.pid)):
      memory.process_memory(child.pid)
    # A worker that exited between listing and reading is left out.
    self.assertEqual(memory.snapshot(worker_pids=[child.pid]).workers, ())

  def test_snapshot_covers_this_process_and_its_owned_workers(self):
    # tests/conftest.py runs the session's worker.
    pids = sorted(runtime.owned_worker_pids())
    self.assertTrue(pids)
    snap = memory.snapshot()
    self.assertEqual(snap.python.pid, os.getpid())
    self.assertEqual([w.pid for w in snap.workers], pids)
    self.assertTrue(all(0 < w.rss_bytes <= w.peak_bytes for w in snap.workers))
    self.assertEqual(snap.workers_rss_bytes,
                     sum(w.rss_bytes for w in snap.workers))
    self.assertEqual(snap.workers_peak_bytes,
                     sum(w.peak_bytes for w in snap.workers))
    as_dict = snap.to_dict()
    self.assertEqual(as_dict['python']['pid'], os.getpid())
    self.assertEqual([w['pid'] for w in as_dict['workers']], pids)


if __name__ == '__main__':
  tf.test.main()
