"""TFF C++ workers that tff_nlp starts, supervises and always stops.

TFF's own `tff.backends.native.set_sync_local_cpp_execution_context()` starts
its C++ `worker_binary` lazily inside a closure, lets it inherit the caller's
stdout and stderr, and stops it only from a finalizer. The worker can therefore
outlive Python and keep a pipe open, so `python train.py | tee log` never ends.

`WorkerProcess` starts the worker itself, so it owns the process:

*   the worker writes to a log file, never to the caller's inherited pipes;
    unless `log_path` is given, the file is in a temporary folder
    (`$TMPDIR/tff_nlp_worker_*`) that is removed when the worker is stopped,
    and kept only if the worker failed (the error or a warning names it);
*   the worker is stopped by its pid when the context closes, at interpreter
    exit (`atexit`), and on Linux by the kernel when the Python process dies
    for any reason, SIGKILL included (`PR_SET_PDEATHSIG`);
*   a worker that dies mid-run is reported with the tail of its log instead of
    being silently restarted.

`RemoteWorker` is a worker started elsewhere; `context_kwargs` makes the
arguments of a TFF execution context running on either kind. The contexts
themselves are assembled in `tff_nlp.runtime.contexts`.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional, Union
import weakref

from absl import logging
import grpc
import portpicker
import tensorflow_federated as tff

from tff_nlp.runtime import bind_address as bind_address_lib

# gRPC limits of TFF's own local factory: model weights can be large.
_GRPC_MAX_MESSAGE_BYTES = 2 * 1000 * 1000 * 1000
_GRPC_OPTIONS = (
    ('grpc.max_message_length', _GRPC_MAX_MESSAGE_BYTES),
    ('grpc.max_receive_message_length', _GRPC_MAX_MESSAGE_BYTES),
    ('grpc.max_send_message_length', _GRPC_MAX_MESSAGE_BYTES),
)
_PR_SET_PDEATHSIG = 1
# Marks workers we started, so tests and tools can tell them from others.
OWNER_ENV_VAR = 'TFF_NLP_WORKER_OWNER_PID'

_LIVE_WORKERS: 'weakref.WeakSet[WorkerProcess]' = weakref.WeakSet()


class WorkerError(RuntimeError):
  """A TFF worker could not be started or stopped working."""


def worker_binary_path() -> str:
  """Returns the path of the `worker_binary` shipped in the TFF wheel."""
  package_dir = os.path.dirname(os.path.abspath(tff.__file__))
  path = os.path.join(package_dir, 'data', 'worker_binary')
  if not os.path.isfile(path):
    raise WorkerError(
        f'TFF worker binary not found at {path}; is tensorflow-federated '
        '0.87.0 installed (see DEVELOPERS.md)?'
    )
  return path


def worker_command(
    port: int,
    *,
    max_concurrent_computation_calls: int = -1,
    cuda_visible_devices: Optional[str] = None,
    gpu_memory_growth: bool = False,
    malloc_arena_max: int = 0,
    malloc_mmap_threshold: int = 0,
    bind_address: Optional[str] = bind_address_lib.LOOPBACK,
) -> tuple[list[str], dict[str, str]]:
  """The argv and environment of a TFF worker (see `WorkerProcess`).

  `bind_address` is the one address it listens on (`runtime.bind_address`:
  TFF's worker would listen on every interface); None or a wildcard (0.0.0.0,
  ::): every interface.
  """
  argv = [
      worker_binary_path(),
      f'--port={port}',
      f'--max_concurrent_computation_calls={max_concurrent_computation_calls}',
  ]
  env = dict(os.environ)
  env.pop(bind_address_lib.ADDRESS_ENV_VAR, None)
  env.update(bind_address_lib.worker_environment(bind_address))
  if cuda_visible_devices is not None:
    env['CUDA_VISIBLE_DEVICES'] = cuda_visible_devices
  if gpu_memory_growth:
    env['TF_FORCE_GPU_ALLOW_GROWTH'] = 'true'
  if malloc_arena_max:
    env['MALLOC_ARENA_MAX'] = str(malloc_arena_max)
  if malloc_mmap_threshold:
    env['MALLOC_MMAP_THRESHOLD_'] = str(malloc_mmap_threshold)
  return argv, env


def _die_with_parent(parent_pid: int) -> None:
  """Runs in the child between fork and exec: tie its life to the parent's."""
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  except (OSError, AttributeError):
    return  # Not Linux: rely on atexit and explicit close().
  if os.getppid() != parent_pid:  # The parent died before prctl took effect.
    os._exit(1)


class WorkerProcess:
  """One TFF C++ `worker_binary` serving executors over gRPC on 127.0.0.1.

  Attributes:
    max_concurrent_computation_calls: Cap on parallel calls of one computation
      inside the worker (e.g. clients trained at once); non-positive means no
      cap. Lower it when client training runs out of (GPU) memory.
    port: The TCP port the worker listens on.
    log_path: File receiving the worker's stdout and stderr.
    cuda_visible_devices: If not None, the `CUDA_VISIBLE_DEVICES` value of the
      worker, which is where client computations run.
    gpu_memory_growth: Whether the worker's TensorFlow allocates GPU memory
      as needed (`TF_FORCE_GPU_ALLOW_GROWTH=true`) instead of all at once.
    malloc_arena_max: glibc `MALLOC_ARENA_MAX` of the worker; 0: glibc's
      default (up to 8 arenas per core).
    malloc_mmap_threshold: glibc `MALLOC_MMAP_THRESHOLD_` (bytes) of the
      worker; 0: glibc's default, which rises as large blocks are freed.
  """

  def __init__(
      self,
      *,
      max_concurrent_computation_calls: int = -1,
      port: Optional[int] = None,
      log_path: Optional[str] = None,
      cuda_visible_devices: Optional[str] = None,
      gpu_memory_growth: bool = False,
      malloc_arena_max: int = 0,
      malloc_mmap_threshold: int = 0,
      start_timeout_seconds: float = 120.0,
  ):
    self.max_concurrent_computation_calls = max_concurrent_computation_calls
    self.port = port if port is not None else portpicker.pick_unused_port()
    # A log folder made here is removed when the worker is stopped, unless
    # the worker failed (then its log is where the error says).
    self._own_log_dir: Optional[str] = None
    if log_path is None:
      self._own_log_dir = tempfile.mkdtemp(prefix='tff_nlp_worker_')
      log_path = os.path.join(self._own_log_dir, f'worker_{self.port}.log')
    self.log_path = log_path
    self.cuda_visible_devices = cuda_visible_devices
    self.gpu_memory_growth = gpu_memory_growth
    self.malloc_arena_max = malloc_arena_max
    self.malloc_mmap_threshold = malloc_mmap_threshold
    self.start_timeout_seconds = start_timeout_seconds
    self._process: Optional[subprocess.Popen] = None
    self._channel: Optional[grpc.Channel] = None
    self._stub = None
    self._lock = threading.Lock()

  @property
  def address(self) -> str:
    return f'127.0.0.1:{self.port}'

  @property
  def pid(self) -> Optional[int]:
    return self._process.pid if self._process is not None else None

  @property
  def stub(self) -> tff.framework.RemoteExecutorGrpcStub:
    if self._stub is None:
      raise WorkerError('The worker has not been started.')
    return self._stub

  def start(self) -> 'WorkerProcess':
    """Starts the worker and blocks until it accepts gRPC calls."""
    if self._process is not None:
      raise WorkerError(f'Worker on port {self.port} was already started.')
    args, env = worker_command(
        self.port,
        max_concurrent_computation_calls=self.max_concurrent_computation_calls,
        cuda_visible_devices=self.cuda_visible_devices,
        gpu_memory_growth=self.gpu_memory_growth,
        malloc_arena_max=self.malloc_arena_max,
        malloc_mmap_threshold=self.malloc_mmap_threshold,
    )
    env[OWNER_ENV_VAR] = str(os.getpid())
    log_dir = os.path.dirname(self.log_path)
    if log_dir:
      os.makedirs(log_dir, exist_ok=True)
    parent_pid = os.getpid()
    with open(self.log_path, 'ab') as log:
      self._process = subprocess.Popen(
          args,
          stdin=subprocess.DEVNULL,
          stdout=log,
          stderr=subprocess.STDOUT,
          env=env,
          close_fds=True,
          preexec_fn=lambda: _die_with_parent(parent_pid),
      )
    _LIVE_WORKERS.add(self)
    self._channel = grpc.insecure_channel(self.address, _GRPC_OPTIONS)
    self._stub = tff.framework.RemoteExecutorGrpcStub(self._channel)
    deadline = time.monotonic() + self.start_timeout_seconds
    while not self._stub.is_ready:
      if self._process.poll() is not None:
        code = self._process.returncode
        self.stop(keep_log=True)
        raise WorkerError(
            f'TFF worker exited with code {code} during start-up; log '
            f'{self.log_path}:\n{self.log_tail()}'
        )
      if time.monotonic() > deadline:
        self.stop(keep_log=True)
        raise WorkerError(
            f'TFF worker on {self.address} not ready after '
            f'{self.start_timeout_seconds:.0f}s; log {self.log_path}:\n'
            f'{self.log_tail()}'
        )
      time.sleep(0.05)
    self._check_listening_on_loopback()
    return self

  def _check_listening_on_loopback(self) -> None:
    """Warns if the kernel shows the worker listening beyond 127.0.0.1.

    Once per start (a few /proc reads), so a preload library that did not
    take (e.g. a changed worker binary) is said, not assumed.
    """
    if not bind_address_lib.library_available():
      return  # Already said once (`bind_address.worker_environment`).
    try:
      listening = bind_address_lib.listening_addresses(self._process.pid)
    except OSError:  # Not Linux, or /proc unreadable: nothing to check.
      return
    exposed = [f'{a}:{p}' for a, p in listening
               if a != bind_address_lib.LOOPBACK]
    if exposed:
      bind_address_lib.warn_once(
          f'TFF worker pid {self._process.pid} listens on {exposed}, not '
          f'only on {bind_address_lib.LOOPBACK}: anyone who can reach it '
          'can run code as this user.')

  def is_running(self) -> bool:
    return self._process is not None and self._process.poll() is None

  def check_alive(self) -> None:
    """Raises `WorkerError` (with the log's tail) if the worker has died."""
    if self._process is None:
      raise WorkerError('The worker has not been started.')
    if self._process.poll() is not None:
      raise WorkerError(
          f'TFF worker pid {self._process.pid} on {self.address} exited with '
          f'code {self._process.returncode}; log {self.log_path}:\n'
          f'{self.log_tail()}'
      )

  def log_tail(self, max_lines: int = 20) -> str:
    try:
      with open(self.log_path, 'rb') as f:
        lines = f.read().decode('utf-8', errors='replace').splitlines()
    except OSError:
      return '(no log)'
    return '\n'.join(lines[-max_lines:])

  def stop(self, timeout_seconds: float = 10.0, *,
           keep_log: bool = False) -> None:
    """Stops the worker by its pid: SIGTERM, then SIGKILL. Idempotent.

    The log folder this object made (no `log_path` given) is then removed,
    unless `keep_log` or the worker had exited by itself (it failed): then
    the log stays at `log_path`, and a warning says where.

    Args:
      timeout_seconds: How long to wait after SIGTERM before SIGKILL.
      keep_log: Keep the log (e.g. an error message names it).
    """
    with self._lock:
      if self._channel is not None:
        self._channel.close()
        self._channel = None
      process = self._process
      failed = process is not None and process.poll() is not None
      if process is not None and not failed:
        process.terminate()
        try:
          process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
          process.kill()
          process.wait()
      _LIVE_WORKERS.discard(self)
      self._remove_own_log_dir(
          keep=keep_log or failed,
          reason=(f'TFF worker pid {process.pid} exited with code '
                  f'{process.returncode} before it was stopped'
                  if failed else None))

  def _remove_own_log_dir(self, *, keep: bool, reason: Optional[str]) -> None:
    if self._own_log_dir is None:
      return
    if keep:
      if reason is not None and os.path.exists(self.log_path):
        logging.warning('%s; its log is kept: %s', reason, self.log_path)
    else:
      shutil.rmtree(self._own_log_dir, ignore_errors=True)
    self._own_log_dir = None


class RemoteWorker:
  """A TFF `worker_binary` someone else started, reached at `host:port`.

  Use it for workers on other machines (`python -m apps.common.bin.tff_worker
  --port=P` on each). tff_nlp neither starts nor stops such a worker; `stop()`
  only closes the connection.

  A worker that cannot be reached raises `WorkerError` after
  `connect_timeout_seconds` instead of letting TFF retry forever (TFF treats
  gRPC UNAVAILABLE as retryable and would wait for a dead worker for good).

  Attributes:
    address: `host:port` of the worker.
    connect_timeout_seconds: How long to wait for the worker to accept calls.
  """

  def __init__(self, address: str, *, connect_timeout_seconds: float = 60.0):
    parse_address(address)
    self.address = address
    self.connect_timeout_seconds = connect_timeout_seconds
    self._channel: Optional[grpc.Channel] = grpc.insecure_channel(
        address, _GRPC_OPTIONS
    )
    self._stub = tff.framework.RemoteExecutorGrpcStub(self._channel)

  @property
  def stub(self) -> tff.framework.RemoteExecutorGrpcStub:
    if self._channel is None:
      raise WorkerError(f'The connection to {self.address} was closed.')
    return self._stub

  def check_alive(self) -> None:
    """Raises `WorkerError` if the worker does not answer within the timeout."""
    if self._channel is None:
      raise WorkerError(f'The connection to {self.address} was closed.')
    try:
      grpc.channel_ready_future(self._channel).result(
          timeout=self.connect_timeout_seconds
      )
    except grpc.FutureTimeoutError:
      raise WorkerError(
          f'TFF worker at {self.address} did not answer within '
          f'{self.connect_timeout_seconds:.0f}s; is it running (python -m '
          'apps.common.bin.tff_worker --port=...) and reachable from here?'
      ) from None

  def stop(self) -> None:
    """Closes the connection (the worker itself keeps running). Idempotent."""
    if self._channel is not None:
      self._channel.close()
      self._channel = None


def parse_address(address: str) -> tuple[str, int]:
  """Splits `host:port`, raising `ValueError` naming the bad address."""
  host, sep, port = address.rpartition(':')
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(
        f'Worker address {address!r} is not host:port (e.g. '
        '10.0.0.2:8000).'
    )
  return host, int(port)


def executor_factory(
    worker: Union[WorkerProcess, RemoteWorker], default_num_clients: int
) -> tff.framework.ResourceManagingExecutorFactory:
  """TFF executors served by `worker`, checked alive at each (re)creation.

  TFF re-creates the executor after a retryable gRPC error; checking the
  worker then turns a dead worker into a `WorkerError` instead of retries.
  """

  def executor_stack(cardinalities):
    if cardinalities.get(tff.CLIENTS) is None:
      cardinalities[tff.CLIENTS] = default_num_clients
    worker.check_alive()
    executor = tff.framework.RemoteExecutor(worker.stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return tff.framework.ResourceManagingExecutorFactory(executor_stack)


# The intrinsics TFF's C++ runtime cannot execute ("Cannot embed a federated
# value"): `tff.federated_secure_sum`, `..._secure_sum_bitwidth`,
# `..._secure_modular_sum`, used by `tff.aggregators.SecureSumFactory`.
_SECURE_INTRINSIC_PREFIX = b'federated_secure_'


def compile_for_worker(comp: tff.Computation) -> tff.Computation:
  """Compiles `comp` for a `worker_binary`, simulating secure summation.

  A computation that uses secure summation (e.g. a model aggregator built
  with `tff.aggregators.SecureSumFactory`) runs with those intrinsics
  replaced by their insecure TensorFlow bodies
  (`tff.backends.test.replace_secure_intrinsics_with_bodies`, as TFF's own
  test contexts do): the simulation gives the numbers of a secure-aggregation
  deployment (bounds, clipping and quantisation included), not its privacy.
  Other computations are compiled as before (the check is a byte search of
  the serialised computation; the replacement costs about 0.5 s a
  computation, so it is not run where it is not needed).
  """
  proto = tff.framework.ConcreteComputation.get_proto(comp)
  if _SECURE_INTRINSIC_PREFIX in proto.SerializeToString():
    comp = tff.backends.test.replace_secure_intrinsics_with_bodies(comp)
  return tff.backends.native.desugar_and_transform_to_native(comp)


def context_kwargs(
    worker: Union[WorkerProcess, RemoteWorker], default_num_clients: int
) -> dict:
  """Arguments of a TFF (Sync|Async)ExecutionContext running on `worker`."""
  return dict(
      executor_fn=executor_factory(worker, default_num_clients),
      compiler_fn=compile_for_worker,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result,
  )


# A worker of a context: one started here or one started elsewhere.
Worker = Union[WorkerProcess, RemoteWorker]


@atexit.register
def _stop_live_workers() -> None:
  for worker in list(_LIVE_WORKERS):
    worker.stop()


def owned_worker_pids() -> list[int]:
  """Pids of running `worker_binary` processes started by this process."""
  pids = []
  me = str(os.getpid())
  for entry in os.listdir('/proc') if sys.platform.startswith('linux') else []:
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        cmdline = f.read()
      if b'worker_binary' not in cmdline.split(b'\0', 1)[0]:
        continue
      with open(f'/proc/{entry}/environ', 'rb') as f:
        environ = f.read().split(b'\0')
    except OSError:
      continue
    if f'{OWNER_ENV_VAR}={me}'.encode() in environ:
      with open(f'/proc/{entry}/stat', 'rb') as f:
        state = f.read().rsplit(b')', 1)[-1].split()[0]
      if state != b'Z':
        pids.append(int(entry))
  return pids
