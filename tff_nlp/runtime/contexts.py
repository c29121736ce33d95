"""Execution contexts for tff_nlp: TFF's C++ runtime on owned workers.

A `CppContext` runs TFF computations on workers of `tff_nlp.runtime.workers`:
one or several started here (and always stopped: see that module), or
several started elsewhere. With more than one worker, each computation's
clients are split across them (`tff_nlp.runtime.multi_worker`).

Typical use::

  with tff_nlp.runtime.local_cpp_context(max_concurrent_computation_calls=4):
    state = process.initialize()
    output = process.next(state, client_datasets)

In a notebook, `set_local_cpp_context()` installs the context as TFF's default
for the rest of the session.
"""

from __future__ import annotations

import atexit
from collections.abc import Sequence
import contextlib
import dataclasses
import os
from typing import Optional

from absl import logging
import tensorflow_federated as tff

from tff_nlp.runtime import multi_worker
from tff_nlp.runtime import workers as workers_lib


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
      apps.common.bin.tff_worker`); if given, no worker is started here and
      `num_workers`, `max_concurrent_computation_calls` and the device
      settings are the remote workers' business.
    clients_per_subround: If positive, each round's clients are cut into
      slices of about this many that the workers (one or several) take in
      turn, so that a worker's memory is bounded by this, not by the clients
      per round (`multi_worker.SplittingContext`). 0: one slice per worker.
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
  clients_per_subround: int = 0

  def __post_init__(self):
    if self.num_workers < 1:
      raise ValueError(f'num_workers must be >= 1, got {self.num_workers}.')
    if self.clients_per_subround < 0:
      raise ValueError('clients_per_subround must be >= 0, got '
                       f'{self.clients_per_subround}.')
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
      workers_lib.parse_address(address)
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
  remote), or with `clients_per_subround` set, computations are split by
  client into slices the workers take in turn
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
    self.workers: list[workers_lib.Worker] = []
    try:
      if settings.worker_addresses:
        self.workers = [workers_lib.RemoteWorker(a) for a in settings.worker_addresses]
      else:
        for i, devices in enumerate(settings.worker_cuda_visible_devices()):
          log_path = None
          if settings.log_dir is not None:
            log_path = os.path.join(
                settings.log_dir, f'tff_worker_{os.getpid()}_{i}.log'
            )
          self.workers.append(
              workers_lib.WorkerProcess(
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
    if len(self.workers) == 1 and not settings.clients_per_subround:
      self.tff_context = tff.framework.SyncExecutionContext(
          **workers_lib.context_kwargs(
              self.workers[0], settings.default_num_clients)
      )
    else:
      self.tff_context = multi_worker.SplittingContext(
          self.workers, default_num_clients=settings.default_num_clients,
          clients_per_subround=settings.clients_per_subround,
      )
    self._install: Optional[contextlib.AbstractContextManager] = None

  @property
  def worker(self) -> workers_lib.Worker:
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
    clients_per_subround: int = 0,
) -> CppContext:
  """Starts one worker and returns its context; use it in a `with` statement.

  Args:
    default_num_clients: See `ContextSettings`.
    max_concurrent_computation_calls: See `ContextSettings`.
    cuda_visible_devices: See `ContextSettings`.
    gpu_memory_growth: See `ContextSettings`.
    log_dir: See `ContextSettings`.
    clients_per_subround: See `ContextSettings`.

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
      clients_per_subround=clients_per_subround,
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
    clients_per_subround: int = 0,
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
    clients_per_subround: See `ContextSettings`.

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
          clients_per_subround=clients_per_subround,
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
