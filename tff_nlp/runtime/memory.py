"""Resident memory of this process and of the TFF workers it started (Linux).

Reads `/proc/<pid>/status`: `VmRSS` is the resident set now, `VmHWM` its
peak ("high water mark") since the process started. Both include shared
pages (e.g. TensorFlow's libraries), so they measure what the process keeps
in RAM, not what it alone allocated. The kernel counts pages per thread and
folds them in batches, so both may be off by some hundred KB; a peak read
later can even be a little below an RSS read earlier.

  snapshot = memory.snapshot()        # this process and its owned workers
  snapshot.python.rss_bytes, [w.peak_bytes for w in snapshot.workers]

The worker pids come from `tff_nlp.runtime.owned_worker_pids()` at the time
of the call, so a snapshot sees however many workers the current context
runs. Workers on other machines (remote addresses) are not visible here.
"""

import collections
from collections.abc import Sequence
import dataclasses
import os
from typing import Optional

from tff_nlp.runtime import workers as workers_lib

_STATUS_FIELDS = {'VmRSS': 'rss_bytes', 'VmHWM': 'peak_bytes'}
_UNITS = {'kb': 1024, 'mb': 1024 ** 2, 'gb': 1024 ** 3, 'b': 1}


class MemoryUnavailableError(OSError):
  """The memory of a process cannot be read (not Linux, or no such pid)."""


@dataclasses.dataclass(frozen=True)
class ProcessMemory:
  """Resident memory of one process.

  Attributes:
    pid: The process id.
    rss_bytes: Resident set size now (`VmRSS`).
    peak_bytes: Peak resident set size since the process started (`VmHWM`).
  """

  pid: int
  rss_bytes: int
  peak_bytes: int

  def to_dict(self) -> collections.OrderedDict:
    return collections.OrderedDict(dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True)
class Snapshot:
  """This process and its workers at one moment.

  Attributes:
    python: This (the Python) process.
    workers: The TFF workers this process started and that were running,
      by pid.
  """

  python: ProcessMemory
  workers: tuple[ProcessMemory, ...]

  @property
  def workers_rss_bytes(self) -> int:
    return sum(w.rss_bytes for w in self.workers)

  @property
  def workers_peak_bytes(self) -> int:
    """The sum of the workers' peaks (an upper bound of their joint peak)."""
    return sum(w.peak_bytes for w in self.workers)

  def to_dict(self) -> collections.OrderedDict:
    return collections.OrderedDict(
        python=self.python.to_dict(),
        workers=[w.to_dict() for w in self.workers])


def parse_status(text: str, pid: int = 0) -> ProcessMemory:
  """The memory fields of the text of a `/proc/<pid>/status` file.

  Args:
    text: The file's text (`Name:\\tvalue unit` lines).
    pid: The pid to record.

  Returns:
    A `ProcessMemory`.

  Raises:
    MemoryUnavailableError: If `VmRSS` or `VmHWM` is missing (e.g. a zombie,
      or a kernel thread).
  """
  values = {}
  for line in text.splitlines():
    name, _, rest = line.partition(':')
    if name in _STATUS_FIELDS:
      number, _, unit = rest.strip().partition(' ')
      values[_STATUS_FIELDS[name]] = int(number) * _UNITS[
          unit.strip().lower() or 'b']
  missing = [name for name, field in _STATUS_FIELDS.items()
             if field not in values]
  if missing:
    raise MemoryUnavailableError(
        f'/proc/{pid}/status has no {", ".join(missing)} (a zombie or a '
        'kernel thread?).')
  return ProcessMemory(pid=pid, **values)


def process_memory(pid: Optional[int] = None) -> ProcessMemory:
  """Resident and peak memory of `pid` (this process if None).

  Raises:
    MemoryUnavailableError: If `/proc/<pid>/status` cannot be read (not
      Linux, or the process is gone).
  """
  pid = os.getpid() if pid is None else pid
  try:
    with open(f'/proc/{pid}/status', encoding='utf-8') as f:
      text = f.read()
  except OSError as e:
    raise MemoryUnavailableError(
        f'Cannot read the memory of pid {pid}: {e}') from e
  return parse_status(text, pid)


def snapshot(worker_pids: Optional[Sequence[int]] = None) -> Snapshot:
  """This process and its running workers, now.

  Args:
    worker_pids: The workers to read; None asks
      `tff_nlp.runtime.owned_worker_pids()` (the workers this process
      started). A worker that exits meanwhile is left out.

  Returns:
    A `Snapshot` with the workers in ascending pid order.
  """
  if worker_pids is None:
    worker_pids = workers_lib.owned_worker_pids()
  workers = []
  for pid in sorted(worker_pids):
    try:
      workers.append(process_memory(pid))
    except MemoryUnavailableError:
      continue  # Exited between listing and reading.
  return Snapshot(python=process_memory(), workers=tuple(workers))
