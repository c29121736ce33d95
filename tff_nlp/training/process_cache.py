"""Processes (or other traced pieces) built once per configuration.

Building a TFF learning process traces its model into TFF computations, and
that costs more than the few rounds of a small run: an experiment that
trains several runs of one configuration (seeds, domains, finetuning
clients of one learning rate) builds the process once and reuses it. A
process holds no training state (that is the state its `initialize` and
`next` return), so runs may share it.
"""

from typing import Callable, Hashable, TypeVar

_T = TypeVar('_T')


class ProcessCache:
  """Built processes (or evaluators, ...), keyed by what they are built from.

  The key must tell apart everything the build depends on: two builds with
  equal keys get the same object.
  """

  def __init__(self):
    self._built = {}

  def get(self, key: Hashable, build_fn: Callable[[], _T]) -> _T:
    """`build_fn()`, or what it returned for an equal `key` before."""
    if key not in self._built:
      self._built[key] = build_fn()
    return self._built[key]
