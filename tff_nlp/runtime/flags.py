"""absl flags for the execution context, shared by every tff_nlp binary.

Importing this module defines the flags; `context_from_flags()` turns their
values into a started `CppContext`:

*   nothing set: one TFF worker on 127.0.0.1, started and stopped by us;
*   `--num_workers=N`: N local workers, each round's clients split across
    them (`tff_nlp.runtime.multi_worker`);
*   `--worker_addresses=host:port,...`: workers started elsewhere with
    `python -m apps.common.bin.tff_worker --port=...`.
"""

from absl import flags

from tff_nlp.runtime import contexts

_DEFAULT_NUM_CLIENTS = flags.DEFINE_integer(
    'default_num_clients',
    0,
    'Clients assumed by TFF when a computation does not determine the number.',
)
_MAX_CONCURRENT_COMPUTATION_CALLS = flags.DEFINE_integer(
    'max_concurrent_computation_calls',
    -1,
    'Maximum client computations each TFF worker started here runs at once '
    '(non-positive: no limit). Bound it to fit client training into (GPU) '
    'memory.',
)
_CUDA_VISIBLE_DEVICES = flags.DEFINE_string(
    'cuda_visible_devices',
    None,
    'CUDA_VISIBLE_DEVICES of the TFF workers started here, i.e. the GPUs '
    'client training may use ("" hides all GPUs); one value for all workers '
    'or one per worker separated by ";" ("0;1"). Unset: inherit the '
    'environment.',
)
_GPU_MEMORY_GROWTH = flags.DEFINE_bool(
    'gpu_memory_growth',
    False,
    'Let TensorFlow allocate GPU memory as needed (in the workers started '
    'here and in this process) instead of all of it at start, so that '
    'several workers can share a GPU.',
)
WORKER_MALLOC_ARENA_MAX = flags.DEFINE_integer(
    'worker_malloc_arena_max',
    0,
    'glibc MALLOC_ARENA_MAX of the TFF workers started here; 0: glibc\'s '
    'default. 2 (with --worker_malloc_mmap_threshold=131072) keeps a '
    'worker\'s memory flat over hundreds of rounds.',
    lower_bound=0,
)
WORKER_MALLOC_MMAP_THRESHOLD = flags.DEFINE_integer(
    'worker_malloc_mmap_threshold',
    0,
    'glibc MALLOC_MMAP_THRESHOLD_ (bytes) of the TFF workers started here; '
    '0: glibc\'s default, which rises as large blocks are freed.',
    lower_bound=0,
)
_WORKER_LOG_DIR = flags.DEFINE_string(
    'worker_log_dir',
    None,
    'Directory for the TFF worker logs. Unset: a new temporary directory.',
)
_NUM_WORKERS = flags.DEFINE_integer(
    'num_workers',
    1,
    'TFF workers to start on 127.0.0.1; with more than one, each round\'s '
    'clients are split across them.',
    lower_bound=1,
)
_CLIENTS_PER_SUBROUND = flags.DEFINE_integer(
    'clients_per_subround',
    0,
    'If positive, each round\'s clients are cut into slices of about this '
    'many that the workers take in turn, so that a worker\'s memory is '
    'bounded by it instead of the clients per round (one more call and merge '
    'per slice). 0: one slice per worker.',
    lower_bound=0,
)
_WORKER_ADDRESSES = flags.DEFINE_list(
    'worker_addresses',
    [],
    'host:port of TFF workers started elsewhere (python -m '
    'apps.common.bin.tff_worker --port=...); when set, no worker is started here.',
)


@flags.multi_flags_validator(
    ['num_workers', 'worker_addresses', 'cuda_visible_devices'],
    message='Inconsistent worker flags.',
)
def _check_worker_flags(values) -> bool:
  try:
    contexts.ContextSettings(
        num_workers=values['num_workers'],
        worker_addresses=tuple(values['worker_addresses'] or ()),
        cuda_visible_devices=values['cuda_visible_devices'],
    )
  except ValueError as e:
    raise flags.ValidationError(str(e)) from None
  return True


def settings_from_flags() -> contexts.ContextSettings:
  """The `ContextSettings` given by this module's flags.

  Raises:
    flags.IllegalFlagValueError: If the flags contradict each other or an
      address is not host:port.
  """
  try:
    return contexts.ContextSettings(
        default_num_clients=_DEFAULT_NUM_CLIENTS.value,
        max_concurrent_computation_calls=(
            _MAX_CONCURRENT_COMPUTATION_CALLS.value
        ),
        cuda_visible_devices=_CUDA_VISIBLE_DEVICES.value,
        gpu_memory_growth=_GPU_MEMORY_GROWTH.value,
        worker_malloc_arena_max=WORKER_MALLOC_ARENA_MAX.value,
        worker_malloc_mmap_threshold=WORKER_MALLOC_MMAP_THRESHOLD.value,
        log_dir=_WORKER_LOG_DIR.value,
        num_workers=_NUM_WORKERS.value,
        worker_addresses=tuple(_WORKER_ADDRESSES.value),
        clients_per_subround=_CLIENTS_PER_SUBROUND.value,
    )
  except ValueError as e:
    raise flags.IllegalFlagValueError(str(e)) from None


def context_from_flags() -> contexts.CppContext:
  """Starts (or connects to) the workers configured by this module's flags."""
  return contexts.CppContext(settings_from_flags())
