"""Where a TFF worker listens: loopback by default, or the address named.

TFF 0.87's `worker_binary` listens on every interface ("[::]:<port>") and
has no flag for the address, while it executes any TensorFlow graph a client
sends it over unauthenticated gRPC. So every worker tff_nlp starts runs with
a small preload library (`bind_address.c`, built here with the machine's C
compiler on first use and cached) that turns its wildcard bind into a bind
to one address: 127.0.0.1 for the workers of `local_cpp_context` and the
multi-worker contexts, the `--bind_address` of `tff_worker`.

If the library cannot be built (no C compiler) or loaded, the worker still
starts, listening everywhere as TFF's own does, and the run says so once.
`listening_addresses` reads what a process really listens on from the
kernel (`/proc`), which the workers check after start-up and the tests
assert.
"""

import functools
import hashlib
import ipaddress
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Optional

from absl import logging

# The address local workers listen on: our clients connect to 127.0.0.1.
LOOPBACK = '127.0.0.1'
# Read by the preload library (bind_address.c).
ADDRESS_ENV_VAR = 'TFF_NLP_WORKER_BIND_ADDRESS'
# Where the built library is cached; default ~/.cache/tff_nlp.
CACHE_ENV_VAR = 'TFF_NLP_CACHE_DIR'
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       'bind_address.c')


class BindAddressError(Exception):
  """The preload library cannot be built or an address is not valid."""


def is_wildcard(address: str) -> bool:
  """Whether `address` means every interface (0.0.0.0 or ::)."""
  return ipaddress.ip_address(address).is_unspecified


def check_address(address: str) -> str:
  """`address` if it is an IPv4 or IPv6 address, else BindAddressError."""
  try:
    ipaddress.ip_address(address)
  except ValueError:
    raise BindAddressError(
        f'{address!r} is not an IPv4 or IPv6 address (a worker binds to an '
        'address of this machine, e.g. 127.0.0.1, ::1 or the address of a '
        'private interface; 0.0.0.0 listens on all of them).') from None
  return address


def _cache_dir() -> str:
  return os.environ.get(CACHE_ENV_VAR) or os.path.join(
      os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'),
      'tff_nlp')


def build_library() -> str:
  """Builds (or finds, cached by its source's digest) the preload library.

  Returns:
    The path of the shared library.

  Raises:
    BindAddressError: If it cannot be built (no C compiler, a failed
      compilation, an unwritable cache), with the reason.
  """
  if not sys.platform.startswith('linux'):
    raise BindAddressError(
        f'only Linux is supported (TFF 0.87 ships its worker for Linux), not '
        f'{sys.platform}')
  with open(_SOURCE, 'rb') as f:
    digest = hashlib.sha256(f.read()).hexdigest()[:16]
  path = os.path.join(_cache_dir(), f'bind_address-{digest}.so')
  if os.path.isfile(path):
    return path
  compiler = os.environ.get('CC') or shutil.which('cc') or shutil.which('gcc')
  if not compiler:
    raise BindAddressError('no C compiler found (cc, gcc or $CC)')
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, temp = tempfile.mkstemp(suffix='.so', dir=os.path.dirname(path))
    os.close(fd)
  except OSError as e:
    raise BindAddressError(f'cannot write {os.path.dirname(path)}: {e}') from e
  try:
    try:
      result = subprocess.run(
          [compiler, '-O2', '-shared', '-fPIC', '-o', temp, _SOURCE, '-ldl'],
          capture_output=True, text=True, check=False)
    except OSError as e:
      raise BindAddressError(f'cannot run the C compiler {compiler}: {e}'
                             ) from e
    if result.returncode:
      raise BindAddressError(
          f'{compiler} failed on {_SOURCE}: {result.stderr.strip()}')
    os.replace(temp, path)  # Atomic: concurrent builders write the same file.
  finally:
    if os.path.exists(temp):
      os.remove(temp)
  return path


@functools.lru_cache(maxsize=None)
def _library_or_reason() -> tuple[Optional[str], Optional[str]]:
  try:
    return build_library(), None
  except (BindAddressError, OSError) as e:
    return None, str(e)


def library_available() -> bool:
  """Whether the preload library is built (or could be built just now)."""
  return _library_or_reason()[0] is not None


def worker_environment(address: Optional[str]) -> dict[str, str]:
  """Environment entries that make a worker listen on `address` only.

  Args:
    address: An address of this machine; None or a wildcard (0.0.0.0, ::):
      every interface, TFF's own behaviour.

  Returns:
    `LD_PRELOAD` and `ADDRESS_ENV_VAR` to add to the worker's environment
    (`LD_PRELOAD` with any the caller's environment already has), or {} for
    every interface or when the library is not available; then the reason
    is logged once, as a warning, and the worker listens everywhere.
  """
  if address is None or is_wildcard(check_address(address)):
    return {}
  library, reason = _library_or_reason()
  if library is None:
    warn_once(f'tff_nlp cannot limit TFF workers to {address}: {reason}. '
               'Workers will listen on every interface, as TFF\'s own do; '
               'anyone who can reach their port can run code as this user. '
               'Install a C compiler (e.g. apt install gcc) to fix this.')
    return {}
  preload = ' '.join(p for p in (library, os.environ.get('LD_PRELOAD')) if p)
  return {'LD_PRELOAD': preload, ADDRESS_ENV_VAR: address}


@functools.lru_cache(maxsize=None)
def warn_once(message: str) -> None:
  """Logs `message` as a warning and prints it to stderr, once a process."""
  logging.warning(message)
  print(f'WARNING: {message}', file=sys.stderr, flush=True)


def _socket_inodes(pid: int) -> set[str]:
  inodes = set()
  fd_dir = f'/proc/{pid}/fd'
  for name in os.listdir(fd_dir):
    try:
      target = os.readlink(os.path.join(fd_dir, name))
    except OSError:  # Closed meanwhile.
      continue
    if target.startswith('socket:['):
      inodes.add(target[len('socket:['):-1])
  return inodes


def _parse_address(hex_address: str, family: int) -> str:
  """An address of /proc/net/tcp{,6} ("0100007F", host byte order words)."""
  raw = bytes.fromhex(hex_address)
  # Each 32-bit word is in the host's (little-endian) byte order.
  words = b''.join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
  address = ipaddress.ip_address(words)
  if family == 6 and address.ipv4_mapped:
    return str(address.ipv4_mapped)
  return str(address)


def listening_addresses(pid: int) -> list[tuple[str, int]]:
  """(address, port) of every TCP socket process `pid` listens on.

  Read from the kernel: the process's socket inodes (`/proc/<pid>/fd`)
  matched against `/proc/net/tcp` and `/proc/net/tcp6` in state LISTEN. An
  IPv4-mapped IPv6 address is given in its IPv4 form; every interface is
  '0.0.0.0' or '::'.
  """
  inodes = _socket_inodes(pid)
  found = []
  for family, table in ((4, 'tcp'), (6, 'tcp6')):
    try:
      with open(f'/proc/{pid}/net/{table}', encoding='ascii') as f:
        lines = f.read().splitlines()[1:]
    except OSError:
      continue
    for line in lines:
      fields = line.split()
      local, state, inode = fields[1], fields[3], fields[9]
      if state == '0A' and inode in inodes:  # 0A: TCP_LISTEN.
        hex_address, hex_port = local.split(':')
        found.append((_parse_address(hex_address, family), int(hex_port, 16)))
  return sorted(found)


if __name__ == '__main__':
  # `make venv` builds the library by this file's path, which imports
  # neither tff_nlp nor TensorFlow.
  try:
    print('loopback-only TFF workers:', build_library())
  except BindAddressError as error:
    sys.exit(f'WARNING: cannot build tff_nlp\'s loopback-bind library '
             f'({error}): TFF workers will listen on every interface.')
