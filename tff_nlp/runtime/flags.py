"""absl flags for the execution context, shared by every tff_nlp binary.

Importing this module defines the flags; `context_from_flags()` turns their
values into a started `LocalCppContext`.
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
    'Maximum client computations the TFF worker runs at once (non-positive: '
    'no limit). Bound it to fit client training into (GPU) memory.',
)
_CUDA_VISIBLE_DEVICES = flags.DEFINE_string(
    'cuda_visible_devices',
    None,
    'CUDA_VISIBLE_DEVICES of the TFF worker, i.e. the GPUs client training '
    'may use ("" hides all GPUs). Unset: inherit the environment.',
)
_WORKER_LOG_DIR = flags.DEFINE_string(
    'worker_log_dir',
    None,
    'Directory for the TFF worker log. Unset: a new temporary directory.',
)


def settings_from_flags() -> contexts.ContextSettings:
  return contexts.ContextSettings(
      default_num_clients=_DEFAULT_NUM_CLIENTS.value,
      max_concurrent_computation_calls=_MAX_CONCURRENT_COMPUTATION_CALLS.value,
      cuda_visible_devices=_CUDA_VISIBLE_DEVICES.value,
      log_dir=_WORKER_LOG_DIR.value,
  )


def context_from_flags() -> contexts.LocalCppContext:
  """Starts the local C++ context configured by this module's flags."""
  return contexts.LocalCppContext(settings_from_flags())
