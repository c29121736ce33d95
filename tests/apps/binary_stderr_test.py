"""What a binary's stderr lets through (`apps._binary_stderr`).

The filter process on its own, fed lines measured in the smoke runs, and the
redirection in a small process started on a terminal (a pty): Python's
stderr still is the terminal, C-level lines go through the filter, and what
was written before a SIGKILL still arrives. (The binaries themselves:
tests/apps/weighting_demo/weighting_demo_binary_test.py and experiment_binaries_test.py.)
"""

import os
import pty
import select
import signal
import subprocess
import sys
import time

from absl.testing import absltest
from absl.testing import parameterized

from apps import _binary_stderr

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_MODULE = os.path.join(_REPO, 'apps', '_binary_stderr.py')

# Lines of the smoke runs without TF_CPP_MIN_LOG_LEVEL (issue 63): dropped.
_HARMLESS = [
    b'2026-12-03 10:15:56.998158: E tensorflow/compiler/xla/stream_executor/'
    b'cuda/cuda_dnn.cc:9342] Unable to register cuDNN factory: Attempting to '
    b'register factory for plugin cuDNN when one has already been registered',
    b'2026-12-03 10:15:56.998201: E tensorflow/compiler/xla/stream_executor/'
    b'cuda/cuda_fft.cc:609] Unable to register cuFFT factory: Attempting to '
    b'register factory for plugin cuFFT when one has already been registered',
    b'2026-12-03 10:15:56.998225: E tensorflow/compiler/xla/stream_executor/'
    b'cuda/cuda_blas.cc:1518] Unable to register cuBLAS factory: Attempting '
    b'to register factory for plugin cuBLAS when one has already been '
    b'registered',
    b'2026-12-03 10:15:57.984618: W tensorflow/compiler/tf2tensorrt/utils/'
    b'py_utils.cc:38] TF-TRT Warning: Could not find TensorRT',
    b'2026-12-03 10:16:10.180385: E tensorflow/core/grappler/'
    b'grappler_item_builder.cc:435] Failed to detect the fetch node(s), '
    b'skipping this input',
    b'2026-12-03 10:21:02.435864: E ./tensorflow/compiler/xla/stream_executor/'
    b'stream_executor_internal.h:124] SetPriority unimplemented for this '
    b'stream.',
    b'normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity '
    b'normalization.',
]
# Passed on as they are: other errors and warnings, the same messages from
# elsewhere, and bytes that are not UTF-8.
_KEPT = [
    b'2026-12-03 10:16:10.180385: E tensorflow/core/grappler/'
    b'grappler_item_builder.cc:435] Failed to detect the fetch node(s) of '
    b'something else',
    b'2026-12-03 10:15:56.998158: E tensorflow/core/framework/op_kernel.cc:1] '
    b'OOM when allocating tensor',
    b'2026-12-03 10:15:56.998158: W tensorflow/core/kernels/data/'
    b'cache_dataset_ops.cc:854] The calling iterator did not fully read the '
    b'dataset being cached.',
    b'Unable to register cuDNN factory (said by someone else)',
    b'trainer_interface.cc(1) LOG(WARNING) not an INFO line',
    b'\xff\xfe not UTF-8',
    b'',
]


def _run_filter(data: bytes) -> bytes:
  return subprocess.run([sys.executable, '-I', '-S', _MODULE], input=data,
                        capture_output=True, timeout=60, check=True).stdout


class FilterExecutionTest(absltest.TestCase):

  def test_drops_the_known_harmless_lines_and_passes_the_rest(self):
    lines = [line for pair in zip(_HARMLESS, _KEPT) for line in pair]
    self.assertEqual(_run_filter(b'\n'.join(lines) + b'\nno newline'),
                     b''.join(line + b'\n' for line in _KEPT) + b'no newline')

  def test_dropped_matches_whole_lines(self):
    for line in _HARMLESS:
      self.assertTrue(_binary_stderr.dropped(line), line)
    for line in _KEPT:
      self.assertFalse(_binary_stderr.dropped(line), line)


class StartedAsBinaryTest(parameterized.TestCase):

  @parameterized.parameters(
      (['python', '-m', 'apps.fcl.bin.train_fcl', '--flagfile=x'], '-m', True),
      (['python', '-u', '-X', 'dev', '-m', 'apps.nmt.bin.train_nmt'], '-m',
       True),
      (['python', '-mapps.weighting_demo.bin.weighting_demo'], '-m', True),
      # `bazel run` starts the binary's file.
      (['python3', '/r/tff_nlp/apps/fcl/bin/train_fcl.py'],
       '/r/tff_nlp/apps/fcl/bin/train_fcl.py', True),
      (['python', '-m', 'apps.common.binary'], '-m', False),
      (['python', '-m', 'pytest', 'tests'], '-m', False),
      (['python', '-m', 'apps.fcl.binx.train_fcl'], '-m', False),
      (['python', '-c', 'import tff_nlp'], '-c', False),
      (['python', 'my_script.py'], 'my_script.py', False),
      (['python', '-m', 'ipykernel_launcher', '-f', 'k.json'], '-m', False),
  )
  def test_only_a_binary(self, orig_argv, argv0, expected):
    self.assertEqual(_binary_stderr.started_as_binary(orig_argv, argv0),
                     expected)


# A process that starts the filter as a binary does, then writes to both.
_PROBE = r'''
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location('probe', sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module._start_filter()
print(sys.stderr.isatty(), os.isatty(2), flush=True)
os.write(2, sys.argv[2].encode() + b'\n')  # dropped
os.write(2, b'E before the end\n')
sys.stderr.write('from Python\n')
if sys.argv[3] == 'kill':
  os.kill(os.getpid(), signal.SIGKILL)
'''


def _read_until_closed(fd: int, timeout: float = 60) -> bytes:
  data = b''
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if not select.select([fd], [], [], 0.5)[0]:
      continue
    try:
      chunk = os.read(fd, 4096)
    except OSError:  # EIO: every process holding the terminal has ended.
      break
    if not chunk:
      break
    data += chunk
  return data


class RedirectionExecutionTest(parameterized.TestCase):

  @parameterized.parameters('exit', 'kill')
  def test_python_writes_to_the_terminal_and_c_through_the_filter(self, end):
    terminal, child_end = pty.openpty()
    try:
      process = subprocess.Popen(
          [sys.executable, '-c', _PROBE, _MODULE,
           _HARMLESS[0].decode(), end],
          stdout=subprocess.PIPE, stderr=child_end, cwd=_REPO)
      os.close(child_end)
      child_end = None
      stdout = process.communicate(timeout=60)[0]
      shown = _read_until_closed(terminal).replace(b'\r\n', b'\n')
    finally:
      os.close(terminal)
      if child_end is not None:
        os.close(child_end)
    self.assertEqual(process.returncode,
                     -signal.SIGKILL if end == 'kill' else 0)
    # The progress bar's test: Python's stderr is the terminal; C's is not.
    self.assertEqual(stdout, b'True False\n')
    self.assertCountEqual(shown.splitlines(),
                          [b'E before the end', b'from Python'])


if __name__ == '__main__':
  absltest.main()
