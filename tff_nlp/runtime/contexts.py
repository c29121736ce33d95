"""Execution contexts for tff_nlp: TFF's local C++ runtime, owned and torn down.

TFF's own `tff.backends.native.set_sync_local_cpp_execution_context()` starts
its C++ `worker_binary` lazily inside a closure, lets it inherit the caller's
stdout and stderr, and stops it only from a finalizer. The worker can therefore
outlive Python and keep a pipe open, so `python train.py | tee log` never ends.

This module starts the worker itself, so it owns the process:

*   the worker writes to a log file, never to the caller's inherited pipes;
*   the worker is stopped by its pid when the context closes, at interpreter
    exit (`atexit`), and on Linux by the kernel when the Python process dies
    for any reason, SIGKILL included (`PR_SET_PDEATHSIG`);
*   a worker that dies mid-run is reported with the tail of its log instead of
    being silently restarted.

Typical use::

  with tff_nlp.runtime.local_cpp_context(max_concurrent_computation_calls=4):
    state = process.initialize()
    output = process.next(state, client_datasets)

In a notebook, `set_local_cpp_context()` installs the context as TFF's default
for the rest of the session.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Optional, Union
import weakref

from absl import logging
import grpc
import portpicker
import tensorflow_federated as tff

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
) -> tuple[list[str], dict[str, str]]:
  """The argv and environment of a TFF worker (see `WorkerProcess`)."""
  argv = [
      worker_binary_path(),
      f'--port={port}',
      f'--max_concurrent_computation_calls={max_concurrent_computation_calls}',
  ]
  env = dict(os.environ)
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
    if log_path is None:
      log_dir = tempfile.mkdtemp(prefix='tff_nlp_worker_')
      log_path = os.path.join(log_dir, f'worker_{self.port}.log')
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
        self.stop()
        raise WorkerError(
            f'TFF worker exited with code {code} during start-up; log '
            f'{self.log_path}:\n{self.log_tail()}'
        )
      if time.monotonic() > deadline:
        self.stop()
        raise WorkerError(
            f'TFF worker on {self.address} not ready after '
            f'{self.start_timeout_seconds:.0f}s; log {self.log_path}:\n'
            f'{self.log_tail()}'
        )
      time.sleep(0.05)
    return self

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

  def stop(self, timeout_seconds: float = 10.0) -> None:
    """Stops the worker by its pid: SIGTERM, then SIGKILL. Idempotent."""
    with self._lock:
      if self._channel is not None:
        self._channel.close()
        self._channel = None
      process = self._process
      if process is None or process.poll() is not None:
        _LIVE_WORKERS.discard(self)
        return
      process.terminate()
      try:
        process.wait(timeout=timeout_seconds)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
      _LIVE_WORKERS.discard(self)


class RemoteWorker:
  """A TFF `worker_binary` someone else started, reached at `host:port`.

  Use it for workers on other machines (`python -m tff_nlp.bin.tff_worker
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
          'tff_nlp.bin.tff_worker --port=...) and reachable from here?'
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


def context_kwargs(
    worker: Union[WorkerProcess, RemoteWorker], default_num_clients: int
) -> dict:
  """Arguments of a TFF (Sync|Async)ExecutionContext running on `worker`."""
  return dict(
      executor_fn=executor_factory(worker, default_num_clients),
      compiler_fn=tff.backends.native.desugar_and_transform_to_native,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result,
  )


@atexit.register
def _stop_live_workers() -> None:
  for worker in list(_LIVE_WORKERS):
    worker.stop()


class _ClosedContext(tff.framework.SyncContext):
  """The default TFF context after interpreter exit began: refuses to run."""

  def invoke(self, comp, arg):
    raise RuntimeError('The interpreter is exiting; no TFF context is left.')


@atexit.register
def _drop_tff_import_time_context() -> None:
  # `import tensorflow_federated` installs a default context whose
  # ServiceManager.__del__ uses the `subprocess` module. Left for interpreter
  # teardown, it runs after `subprocess` is gone and prints "Exception ignored
  # ... 'NoneType' object has no attribute 'Popen'" after our error messages.
  # Replaced here, while modules are intact, it is collected quietly.
  tff.framework.set_default_context(_ClosedContext())


@dataclasses.dataclass(frozen=True)
class ContextSettings:
  """Settings of a C++ execution context: its workers and their devices.

  Attributes:
    default_num_clients: Number of clients assumed when a computation's
      arguments do not determine it (e.g. a `tff.federated_value` at CLIENTS).
    max_concurrent_computation_calls: Maximum number of concurrent calls of one
      computation (e.g. client updates trained in parallel) in each worker
      this process starts. Non-positive: no limit. On GPUs, bound it to fit
      memory.
    cuda_visible_devices: If set, `CUDA_VISIBLE_DEVICES` of the workers this
      process starts, i.e. the GPUs client computations may use ('' hides all
      GPUs). One value for every worker, or one per worker separated by ';'
      ('0;1': worker 0 sees GPU 0, worker 1 sees GPU 1).
    gpu_memory_growth: Let TensorFlow grow GPU memory as needed instead of
      taking all of it up front, in the workers this process starts
      (`TF_FORCE_GPU_ALLOW_GROWTH`) and in this process, so several workers
      can share a GPU.
    worker_malloc_arena_max: glibc `MALLOC_ARENA_MAX` of the workers started
      here; 0 keeps glibc's default. See `worker_malloc_mmap_threshold`.
    worker_malloc_mmap_threshold: glibc `MALLOC_MMAP_THRESHOLD_` (bytes) of
      the workers started here; 0 keeps glibc's default. With glibc's
      defaults a worker's resident memory creeps up over hundreds of rounds
      without a leak: every training thread may get its own malloc arena,
      and once a model-sized block is freed glibc raises its mmap threshold,
      so later model-sized tensors fragment the arenas. Two arenas and a
      fixed 128 KiB threshold kept a worker within +2% over 200 rounds
      (docs/results/scaling.md).
    log_dir: Directory for the worker logs; a fresh temporary one if None.
    num_workers: Workers to start on 127.0.0.1. With more than one, each
      computation's clients are split across them (see
      `tff_nlp.runtime.multi_worker`).
    worker_addresses: `host:port` of workers started elsewhere (`python -m
      tff_nlp.bin.tff_worker`); if given, no worker is started here and
      `num_workers`, `max_concurrent_computation_calls` and the device
      settings are the remote workers' business.
  """

  default_num_clients: int = 0
  max_concurrent_computation_calls: int = -1
  cuda_visible_devices: Optional[str] = None
  gpu_memory_growth: bool = False
  worker_malloc_arena_max: int = 0
  worker_malloc_mmap_threshold: int = 0
  log_dir: Optional[str] = None
  num_workers: int = 1
  worker_addresses: tuple[str, ...] = ()

  def __post_init__(self):
    if self.num_workers < 1:
      raise ValueError(f'num_workers must be >= 1, got {self.num_workers}.')
    for name in ('worker_malloc_arena_max', 'worker_malloc_mmap_threshold'):
      if getattr(self, name) < 0:
        raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}.')
    if self.worker_addresses and self.num_workers != 1:
      raise ValueError(
          'Give either num_workers (workers started here) or '
          'worker_addresses (workers started elsewhere), not both; got '
          f'num_workers={self.num_workers} and worker_addresses='
          f'{list(self.worker_addresses)}.'
      )
    for address in self.worker_addresses:
      parse_address(address)
    self.worker_cuda_visible_devices()  # Validates the per-worker form.

  def worker_cuda_visible_devices(self) -> list[Optional[str]]:
    """`CUDA_VISIBLE_DEVICES` of each worker started here (None: inherit)."""
    value = self.cuda_visible_devices
    if value is None or ';' not in value:
      return [value] * self.num_workers
    per_worker = value.split(';')
    if len(per_worker) != self.num_workers:
      raise ValueError(
          f'cuda_visible_devices {value!r} names {len(per_worker)} workers\' '
          f'devices, but num_workers is {self.num_workers}.'
      )
    return per_worker


def _allow_gpu_memory_growth_here() -> None:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for gpu in tf.config.list_physical_devices('GPU'):
    try:
      tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as e:  # TF already initialised this GPU.
      logging.warning('Cannot enable memory growth on %s: %s', gpu.name, e)


class CppContext:
  """TFF's synchronous C++ execution context on workers this object manages.

  With one worker, every computation runs in it. With several (local or
  remote), computations are split across them by client
  (`multi_worker.SplittingContext`).

  Use it as a context manager (installs it as the current TFF context and
  stops the workers it started on exit, exception or not), or call
  `install_as_default()` and `close()` yourself. Workers this process started
  are also stopped at interpreter exit and when the process dies.

  Attributes:
    settings: The `ContextSettings`.
    workers: The `WorkerProcess`es started here, or the `RemoteWorker`s.
    tff_context: The TFF context computations run in.
  """

  def __init__(self, settings: ContextSettings = ContextSettings()):
    self.settings = settings
    if settings.gpu_memory_growth:
      _allow_gpu_memory_growth_here()
    self.workers: list[Union[WorkerProcess, RemoteWorker]] = []
    try:
      if settings.worker_addresses:
        self.workers = [RemoteWorker(a) for a in settings.worker_addresses]
      else:
        for i, devices in enumerate(settings.worker_cuda_visible_devices()):
          log_path = None
          if settings.log_dir is not None:
            log_path = os.path.join(
                settings.log_dir, f'tff_worker_{os.getpid()}_{i}.log'
            )
          self.workers.append(
              WorkerProcess(
                  max_concurrent_computation_calls=(
                      settings.max_concurrent_computation_calls
                  ),
                  log_path=log_path,
                  cuda_visible_devices=devices,
                  gpu_memory_growth=settings.gpu_memory_growth,
                  malloc_arena_max=settings.worker_malloc_arena_max,
                  malloc_mmap_threshold=settings.worker_malloc_mmap_threshold,
              ).start()
          )
    except BaseException:
      self.close()
      raise
    if len(self.workers) == 1:
      self.tff_context = tff.framework.SyncExecutionContext(
          **context_kwargs(self.workers[0], settings.default_num_clients)
      )
    else:
      from tff_nlp.runtime import multi_worker  # pylint: disable=g-import-not-at-top
      self.tff_context = multi_worker.SplittingContext(
          self.workers, default_num_clients=settings.default_num_clients
      )
    self._install: Optional[contextlib.AbstractContextManager] = None

  @property
  def worker(self) -> Union[WorkerProcess, RemoteWorker]:
    """The first (with one worker: the) worker."""
    return self.workers[0]

  def install_as_default(self) -> 'CppContext':
    """Makes this TFF's default context (until another one is set)."""
    tff.framework.set_default_context(self.tff_context)
    return self

  def close(self) -> None:
    """Stops the workers started here (closes connections to remote ones).

    Later calls of computations fail with a `WorkerError`.
    """
    for worker in self.workers:
      worker.stop()

  def __enter__(self) -> 'CppContext':
    self._install = tff.framework.get_context_stack().install(self.tff_context)
    self._install.__enter__()
    return self

  def __exit__(self, exc_type, exc, tb) -> None:
    try:
      if self._install is not None:
        self._install.__exit__(exc_type, exc, tb)
        self._install = None
    finally:
      self.close()


def local_cpp_context(
    *,
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    cuda_visible_devices: Optional[str] = None,
    gpu_memory_growth: bool = False,
    log_dir: Optional[str] = None,
) -> CppContext:
  """Starts one worker and returns its context; use it in a `with` statement.

  Args:
    default_num_clients: See `ContextSettings`.
    max_concurrent_computation_calls: See `ContextSettings`.
    cuda_visible_devices: See `ContextSettings`.
    gpu_memory_growth: See `ContextSettings`.
    log_dir: See `ContextSettings`.

  Returns:
    A `CppContext` whose worker is already running.
  """
  return multi_worker_context(
      num_workers=1,
      default_num_clients=default_num_clients,
      max_concurrent_computation_calls=max_concurrent_computation_calls,
      cuda_visible_devices=cuda_visible_devices,
      gpu_memory_growth=gpu_memory_growth,
      log_dir=log_dir,
  )


def multi_worker_context(
    *,
    num_workers: int = 2,
    worker_addresses: Sequence[str] = (),
    default_num_clients: int = 0,
    max_concurrent_computation_calls: int = -1,
    cuda_visible_devices: Optional[str] = None,
    gpu_memory_growth: bool = False,
    log_dir: Optional[str] = None,
) -> CppContext:
  """A context over workers started here, or at `worker_addresses`.

  Args:
    num_workers: Workers to start on 127.0.0.1 (ignored, and must be left at
      its default, when `worker_addresses` is given).
    worker_addresses: `host:port` of running workers; none are started then.
    default_num_clients: See `ContextSettings`.
    max_concurrent_computation_calls: See `ContextSettings`.
    cuda_visible_devices: See `ContextSettings` (';' gives one per worker).
    gpu_memory_growth: See `ContextSettings`.
    log_dir: See `ContextSettings`.

  Returns:
    A `CppContext` whose workers are running (or reachable).
  """
  return CppContext(
      ContextSettings(
          default_num_clients=default_num_clients,
          max_concurrent_computation_calls=max_concurrent_computation_calls,
          cuda_visible_devices=cuda_visible_devices,
          gpu_memory_growth=gpu_memory_growth,
          log_dir=log_dir,
          num_workers=1 if worker_addresses else num_workers,
          worker_addresses=tuple(worker_addresses),
      )
  )


def set_local_cpp_context(**kwargs) -> CppContext:
  """Starts a worker and installs its context as TFF's default (notebooks).

  Args:
    **kwargs: The arguments of `local_cpp_context`.

  Returns:
    The installed `CppContext`; its worker stops at interpreter exit or on
    `close()`.
  """
  return local_cpp_context(**kwargs).install_as_default()


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
