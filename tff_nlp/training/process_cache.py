"""Processes (or other traced pieces) built once per configuration.

Building a TFF learning process traces its model into TFF computations, and
that costs more than the few rounds of a small run: an experiment that
trains several runs of one configuration (seeds, domains, finetuning
clients of one learning rate) builds the process once and reuses it. A
process holds no training state (that is the state its `initialize` and
`next` return), so runs may share it.

`shared_processes()` is the cache of this Python process: the applications
build their learning processes through it (a key per configuration, see
`ProcessCache`), so that the runs of a sweep in one process (seeds of a
benchmark, a notebook's runs, the tests of one pytest worker) trace each
configuration once. `TFF_NLP_PROCESS_CACHE=0` in the environment turns the
sharing off (every `get` of the shared cache builds); an own `ProcessCache`
shares only among the calls given it.

Across Python processes: with `TFF_NLP_PROCESS_CACHE_DIR=<folder>` the
shared cache also keeps what it builds in that folder (a
`process_store.ProcessStore`), and a `get` that misses in memory loads from
there before building, so the programs of a sweep (one per seed, a resumed
run, the binaries `make test` starts) trace each configuration once.
"""

import collections
import dataclasses
import os
from typing import Callable, Hashable, Optional, TypeVar

from tff_nlp.training import process_store

_T = TypeVar('_T')

# Environment variable: '0' (or 'off', 'false', 'no') makes
# `shared_processes()` build on every `get`.
ENV_VAR = 'TFF_NLP_PROCESS_CACHE'
# Entries the shared cache keeps (least recently used dropped first): a
# process holds its computations (a few MB of graphs for a small model).
SHARED_MAX_SIZE = 64


@dataclasses.dataclass(frozen=True)
class CacheStats:
  """Lookups of a cache: `hits` reused a built object, `misses` built one,
  `loaded` took one from the cache's `ProcessStore` (built by another
  program)."""
  hits: int
  misses: int
  size: int
  loaded: int = 0


class ProcessCache:
  """Built processes (or evaluators, ...), keyed by what they are built from.

  The key must tell apart everything the build depends on: two builds with
  equal keys get the same object. So a key holds the builder's arguments
  that determine the computation's type signature and traced graph (model
  configuration with its vocabulary size, lengths and seed, optimizer and
  its hyperparameters, algorithm, number of clients, ...), as hashable
  values (frozen dataclasses, tuples, strings, numbers, or a
  `training.config_digest` of them), never a closure or a Keras model,
  which differ per call and would make every lookup a miss (or, keyed by
  identity, could match an object that has changed).
  """

  def __init__(
      self, max_size: Optional[int] = None,
      enabled: Callable[[], bool] = lambda: True,
      store: Callable[[], Optional[process_store.ProcessStore]] = (
          lambda: None)):
    """A cache.

    Args:
      max_size: Entries kept in memory (least recently used dropped first);
        None: no limit.
      enabled: False: every `get` builds (read at each `get`).
      store: The `ProcessStore` that keeps built objects for other programs,
        or None (read at each `get`).
    """
    if max_size is not None and max_size < 1:
      raise ValueError(f'max_size must be >= 1 or None, got {max_size}.')
    self._built = collections.OrderedDict()
    self._max_size = max_size
    self._enabled = enabled
    self._store = store
    self._hits = 0
    self._misses = 0
    self._loaded = 0

  def get(self, key: Hashable, build_fn: Callable[[], _T]) -> _T:
    """`build_fn()`, or what it returned for an equal `key` before.

    Raises:
      TypeError: If `key` is not hashable.
    """
    hash(key)  # An unhashable key fails here, before building.
    if not self._enabled():
      self._misses += 1
      return build_fn()
    if key in self._built:
      self._hits += 1
      self._built.move_to_end(key)
      return self._built[key]
    store = self._store()
    built = store.get(key) if store is not None else None
    if built is not None:
      self._loaded += 1
    else:
      self._misses += 1
      built = build_fn()  # A failed build is not cached.
      if store is not None:
        store.put(key, built)
    self._built[key] = built
    if self._max_size is not None and len(self._built) > self._max_size:
      self._built.popitem(last=False)
    return built

  def __contains__(self, key: Hashable) -> bool:
    return self._enabled() and key in self._built

  def __len__(self) -> int:
    return len(self._built)

  def stats(self) -> CacheStats:
    return CacheStats(hits=self._hits, misses=self._misses,
                      size=len(self._built), loaded=self._loaded)

  def clear(self) -> None:
    """Forgets every built object and the counts."""
    self._built.clear()
    self._hits = self._misses = self._loaded = 0


def _shared_enabled() -> bool:
  return os.environ.get(ENV_VAR, '1').strip().lower() not in (
      '0', 'off', 'false', 'no')


def _shared_store() -> Optional[process_store.ProcessStore]:
  directory = os.environ.get(process_store.DIR_ENV_VAR, '').strip()
  return process_store.ProcessStore(directory) if directory else None


_SHARED = ProcessCache(max_size=SHARED_MAX_SIZE, enabled=_shared_enabled,
                       store=_shared_store)


def shared_processes() -> ProcessCache:
  """This Python process's cache of built processes (see the module doc)."""
  return _SHARED
