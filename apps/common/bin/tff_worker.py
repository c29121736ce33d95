"""Serves a TFF C++ worker for training runs on other machines.

On each worker machine (same tff_nlp and TFF versions as the driver):

  python -m apps.common.bin.tff_worker --port=8000

then on the driver, any tff_nlp binary with

  --worker_addresses=worker-a:8000,worker-b:8000

splits each round's clients across the workers
(`tff_nlp.runtime.multi_worker`). This process *becomes* TFF's
`worker_binary` (exec, same pid), so stopping it (Ctrl-C, SIGTERM, a process
supervisor) stops the worker.

The worker speaks unauthenticated, unencrypted gRPC and runs any TensorFlow
graph sent to it, which can read and write this user's files. So it listens
on 127.0.0.1 only unless --bind_address names another address of this
machine: reach it through an SSH tunnel (`ssh -N -L 8000:127.0.0.1:8000
worker-a`, then --worker_addresses=127.0.0.1:8000 on the driver), or name
the address of a private interface only trusted machines can reach
(--bind_address=10.0.0.5). --bind_address=0.0.0.0 listens on every
interface, as TFF's own worker does.
"""

import os
import sys

from absl import app
from absl import flags

_PORT = flags.DEFINE_integer(
    'port', None, 'TCP port to serve on.', lower_bound=1, upper_bound=65535)
_MAX_CONCURRENT_COMPUTATION_CALLS = flags.DEFINE_integer(
    'max_concurrent_computation_calls', -1,
    'Maximum client computations run at once (non-positive: no limit). Bound '
    'it to fit client training into (GPU) memory.')
_CUDA_VISIBLE_DEVICES = flags.DEFINE_string(
    'cuda_visible_devices', None,
    'CUDA_VISIBLE_DEVICES of the worker ("" hides all GPUs). Unset: inherit '
    'the environment.')
_GPU_MEMORY_GROWTH = flags.DEFINE_bool(
    'gpu_memory_growth', False,
    'Allocate GPU memory as needed instead of all of it at start.')

_MALLOC_ARENA_MAX = flags.DEFINE_integer(
    'malloc_arena_max', 0,
    'glibc MALLOC_ARENA_MAX of the worker; 0: glibc\'s default. 2 (with '
    '--malloc_mmap_threshold=131072) keeps its memory flat over hundreds of '
    'rounds.', lower_bound=0)
_MALLOC_MMAP_THRESHOLD = flags.DEFINE_integer(
    'malloc_mmap_threshold', 0,
    'glibc MALLOC_MMAP_THRESHOLD_ (bytes) of the worker; 0: glibc\'s '
    'default.', lower_bound=0)

_BIND_ADDRESS = flags.DEFINE_string(
    'bind_address', '127.0.0.1',
    'The address of this machine to listen on: 127.0.0.1 (default; reach '
    'the worker through an SSH tunnel), ::1, the address of a private '
    'interface, or 0.0.0.0 / :: for every interface. See the module '
    'docstring and the README\'s "Security".')

flags.mark_flag_as_required('port')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  # Imported here: TFF's import is slow and --help should not wait for it.
  from tff_nlp.runtime import bind_address  # pylint: disable=g-import-not-at-top
  from tff_nlp.runtime import workers  # pylint: disable=g-import-not-at-top
  try:
    bind_address.check_address(_BIND_ADDRESS.value)
  except bind_address.BindAddressError as e:
    raise app.UsageError(f'--bind_address: {e}') from None
  command, env = workers.worker_command(
      _PORT.value,
      max_concurrent_computation_calls=_MAX_CONCURRENT_COMPUTATION_CALLS.value,
      cuda_visible_devices=_CUDA_VISIBLE_DEVICES.value,
      gpu_memory_growth=_GPU_MEMORY_GROWTH.value,
      malloc_arena_max=_MALLOC_ARENA_MAX.value,
      malloc_mmap_threshold=_MALLOC_MMAP_THRESHOLD.value,
      bind_address=_BIND_ADDRESS.value)
  where = (f'every interface, port {_PORT.value}'
           if bind_address.is_wildcard(_BIND_ADDRESS.value)
           else f'{_BIND_ADDRESS.value} port {_PORT.value}')
  if bind_address.ADDRESS_ENV_VAR not in env and not bind_address.is_wildcard(
      _BIND_ADDRESS.value):
    where = f'every interface, port {_PORT.value} (see the warning above)'
  print(f'tff_worker: serving on {where} (pid {os.getpid()})',
        file=sys.stderr, flush=True)
  os.execve(command[0], command, env)


if __name__ == '__main__':
  app.run(main)
