"""What a binary's terminal shows of TensorFlow's C++ logging.

`apps/__init__.py` calls `start_if_binary()` before anything imports
TensorFlow. In a process started as an application's binary (`python -m
apps.<application>.bin.<name>`, or `apps/<application>/bin/<name>.py` run as
a script, as `bazel run` does), and nowhere
else (tests, notebooks and programs that import tff_nlp keep TensorFlow's
defaults):

*   `TF_CPP_MIN_LOG_LEVEL` defaults to 1: TensorFlow's C++ INFO lines are not
    printed (among them two grappler lines per computation that TFF compiles
    for its worker, 532 in the FCL smoke run, and the oneDNN and CPU feature
    notices at import); its warnings and errors are. A value in the
    environment is kept (`TF_CPP_MIN_LOG_LEVEL=0` shows the INFO lines).
*   File descriptor 2, where C and C++ code write (TensorFlow's logging,
    SentencePiece's, and child processes that inherit it), goes through a
    filter process that drops the lines of `DROPPED`, known to be harmless,
    and passes on everything else as it comes. Python's own `sys.stderr`
    (absl logging, warnings, tracebacks, the progress bar) is a copy of the
    original descriptor and bypasses the filter, so the progress bar still
    writes to the terminal. The filter runs in its own process and session:
    it outlives a crash of the binary, passing on what the binary wrote
    before it died, and Ctrl-C does not stop it before the binary's last
    lines.

`TFF_NLP_RAW_STDERR=1` in the environment turns both off.

Run as a script, this file is that filter (stdin to stdout); it imports the
standard library only.
"""

import os
import re
import sys

RAW_ENV_VAR = 'TFF_NLP_RAW_STDERR'

# Lines on file descriptor 2 that are never passed on, with why they are
# harmless. Each is matched anywhere in one line.
DROPPED = (
    # At `import tensorflow`, TF 2.14 and the XLA bundled in it each register
    # their CUDA plugins; the second registration fails, at ERROR level,
    # whether or not there is a GPU (the first one stays in effect).
    r'cuda_(dnn|fft|blas)\.cc:\d+\] Unable to register cu(DNN|FFT|BLAS) '
    r'factory: Attempting to register factory for plugin cu(DNN|FFT|BLAS) '
    r'when one has already been registered',
    # At import: TensorRT (NVIDIA's GPU inference library) is not installed;
    # nothing here uses TF-TRT.
    r'py_utils\.cc:\d+\] TF-TRT Warning: Could not find TensorRT$',
    # TFF's compiler runs grappler on each TensorFlow computation before it
    # goes to the worker; for one without outputs grappler logs this at
    # ERROR level and raises, and TFF keeps the graph as it is
    # (tensorflow_federated graph_optimizations.optimize_graph_spec).
    r'grappler_item_builder\.cc:\d+\] Failed to detect the fetch node\(s\), '
    r'skipping this input$',
    # XLA's CPU stream logs this at ERROR level when a `jit_compile`
    # function first runs (seq2seq decoding): the host platform has no
    # stream priorities, and XLA goes on with the default.
    r'stream_executor_internal\.h:\d+\] SetPriority unimplemented for this '
    r'stream\.$',
    # SentencePiece's own INFO lines (it ignores TF_CPP_MIN_LOG_LEVEL), e.g.
    # "normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use
    # identity normalization."
    r'^[\w./-]+\.cc\(\d+\) LOG\(INFO\) ',
)
_DROPPED = re.compile('|'.join(f'(?:{p})' for p in DROPPED))

# A partial line (no newline yet) waits this long for the rest before it is
# passed on as it is.
_PARTIAL_LINE_SECONDS = 0.2
# How long the binary waits at exit for the filter to pass on the last lines.
_EXIT_WAIT_SECONDS = 2.0


# `python -m` of a binary: apps.<application>.bin.<name>.
_BINARY_MODULE = re.compile(r'apps\.\w+\.bin\.\w+$')


def dropped(line: bytes) -> bool:
  """Whether the filter drops `line` (without its newline)."""
  return bool(_DROPPED.search(line.decode('utf-8', errors='replace')))


def started_as_binary(orig_argv=None, argv0=None) -> bool:
  """Whether this process is an application's binary (see the module doc)."""
  orig_argv = list(getattr(sys, 'orig_argv', []) if orig_argv is None
                   else orig_argv)
  args = iter(orig_argv[1:])
  for arg in args:
    if arg == '-m':
      return bool(_BINARY_MODULE.match(next(args, '')))
    if arg.startswith('-m'):
      return bool(_BINARY_MODULE.match(arg[2:]))
    if arg in ('-X', '-W'):
      next(args, None)  # The option's value.
    elif arg == '-c' or not arg.startswith('-'):
      break  # -c, or a script: the script is sys.argv[0].
  script = os.path.abspath(sys.argv[0] if argv0 is None else argv0)
  folder, name = os.path.split(script)
  return (name.endswith('.py') and os.path.basename(folder) == 'bin'
          and os.path.basename(os.path.dirname(os.path.dirname(folder)))
          == 'apps')


def start_if_binary() -> None:
  """Quiets TensorFlow's C++ logging if this process is a binary."""
  if os.environ.get(RAW_ENV_VAR, '') not in ('', '0') or (
      not started_as_binary()):
    return
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')
  _start_filter()


def _start_filter() -> None:
  # Imported here: only a binary needs them.
  import atexit  # pylint: disable=g-import-not-at-top
  import io  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  try:
    os.fstat(2)
    sys.stderr.flush()
    # Our own session: a Ctrl-C meant for the binary leaves the filter to
    # pass on the binary's last lines; it ends when every writer is gone.
    process = subprocess.Popen(
        [sys.executable, '-I', '-S', os.path.abspath(__file__)],
        stdin=subprocess.PIPE, stdout=2, stderr=2, start_new_session=True)
  except (OSError, ValueError, AttributeError):
    return  # No stderr, or no Python to run the filter: leave fd 2 as is.
  terminal = os.dup(2)  # The original stderr; not inherited by children.
  os.dup2(process.stdin.fileno(), 2)
  process.stdin.close()
  old = sys.stderr
  sys.stderr = io.TextIOWrapper(
      io.FileIO(terminal, 'w', closefd=False),
      encoding=getattr(old, 'encoding', None) or 'utf-8',
      errors=getattr(old, 'errors', None) or 'backslashreplace',
      line_buffering=True, write_through=True)

  def stop():
    # Registered before tff_nlp's exit handlers (apps/__init__ runs
    # first), so it runs after them: the TFF workers are stopped by then.
    try:
      sys.stderr.flush()
    except (OSError, ValueError):
      pass
    os.dup2(terminal, 2)  # Closes this process's end of the pipe.
    try:
      process.wait(timeout=_EXIT_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
      pass  # A child still holds the pipe; the filter ends with it.

  atexit.register(stop)


def _write_all(fd: int, data: bytes) -> None:
  while data:
    data = data[os.write(fd, data):]


def _filter(read_fd: int = 0, write_fd: int = 1) -> None:
  """Copies `read_fd` to `write_fd` line by line, without `dropped` lines."""
  import select  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  pending = b''
  writable = True

  def emit(data):
    nonlocal writable
    if data and writable:
      try:
        _write_all(write_fd, data)
      except OSError:
        writable = False  # The terminal is gone: keep draining the pipe.

  while True:
    if pending and not select.select([read_fd], [], [],
                                     _PARTIAL_LINE_SECONDS)[0]:
      emit(pending)
      pending = b''
    chunk = os.read(read_fd, 1 << 16)
    if not chunk:
      break
    *lines, pending = (pending + chunk).split(b'\n')
    emit(b''.join(line + b'\n' for line in lines if not dropped(line)))
  if not dropped(pending):
    emit(pending)


if __name__ == '__main__':
  _filter()
