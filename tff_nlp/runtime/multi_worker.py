"""Running one TFF computation on several C++ workers, split by client.

TFF 0.87's C++ `worker_binary` serves a whole executor stack over gRPC; it
does not fan out to other workers itself. What TFF offers for several
workers is the *mergeable computation* form
(`tff.backends.native.compile_to_mergeable_comp_form`): a computation with a
single aggregation stage is cut into `up_to_merge` (client work and the
partial aggregate of a slice of the clients), `merge` (two partial aggregates
into one) and `after_merge` (the server's work on the merged aggregate).
`tff.framework.MergeableCompExecutionContext` then runs `up_to_merge` on each
worker with its slice of the clients, merges as slices finish, and runs
`after_merge` once.

`SplittingContext` uses that for every computation that has client-placed
inputs and compiles to the form, which is nearly every round in tff_nlp:
FedAvg, FedOPT and FedProx of `tff_nlp.algorithms.build_fl_process` with
`num_examples` or `uniform` weighting, partial-model rounds
(`tff.federated_select` is lowered to per-client work), dynamic pulling,
every FCL round and task start. The rest runs whole on the first worker:

*   computations without client-placed inputs (`initialize`, getters),
    where there is nothing to split;
*   computations with two dependent aggregation stages, which the form cannot
    express: Lorar and `loss_reduction` rounds with their default fallback
    to `num_examples` weights when every client's ΔL is 0 (a sum of the
    weights, then the weighted mean; `num_examples_fallback=False` removes
    the first stage), and FedSeIT+SIT's task start (selection by the
    aggregated task representations). Each is logged once and listed in
    `SplittingContext.unsplit_computations`.

**Subrounds bound a worker's memory.** TFF's C++ worker keeps every
client's outputs and intermediate accumulators of a call until the call
ends, so its memory grows with the clients it is given at once (2.3 MB per
client on the tag task: docs/results/scaling.md). With
`clients_per_subround=S`, a round of N clients is cut into ceil(N / S)
slices (at least one per worker) that the workers take in turn, each slice's
partial aggregate merged into the round's as it finishes: a worker then holds
at most S clients, whatever N is, at the price of one more call (and one
merge) per slice. This also applies with a single worker.

A worker that dies mid-round raises `tff_nlp.runtime.WorkerError` naming it
(with the tail of its log when it was started here) instead of TFF's
endless retries.
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
import math
from typing import Any, Optional

from absl import logging
import tensorflow_federated as tff

from tff_nlp.runtime import workers as workers_lib

def _has_clients_placed_part(type_spec: Optional[tff.types.Type]) -> bool:
  if type_spec is None:
    return False
  if isinstance(type_spec, tff.FederatedType):
    return type_spec.placement is tff.CLIENTS
  if isinstance(type_spec, tff.StructType):
    return any(_has_clients_placed_part(t) for t in type_spec)
  return False


def num_clients_in(value: Any, type_spec: Optional[tff.types.Type]) -> int:
  """How many clients a computation's argument holds (0 if none).

  Args:
    value: The argument, as a context's `invoke` receives it.
    type_spec: The computation's parameter type.

  Returns:
    The length of the first CLIENTS-placed value that is not all-equal (every
    such value of one call has the same length), or 0.
  """
  if type_spec is None or value is None:
    return 0
  if isinstance(type_spec, tff.FederatedType):
    if type_spec.placement is tff.CLIENTS and not type_spec.all_equal:
      return len(value)
    return 0
  if isinstance(type_spec, tff.StructType):
    elements = tff.structure.to_elements(tff.structure.from_container(value))
    for (_, element), (_, element_type) in zip(
        elements, tff.structure.to_elements(type_spec)):
      count = num_clients_in(element, element_type)
      if count:
        return count
  return 0


class SplittingContext(tff.framework.SyncContext):
  """A synchronous TFF context that splits each round's clients over workers.

  Clients are cut into contiguous slices in their given order: one per
  worker, or with `clients_per_subround=S` ceil(N / S) slices of N clients
  (at least one per worker), of sizes that differ by at most one. The first
  slices start on the workers in order; each later one goes to the first
  worker that is free. Partial aggregates are merged in the order the slices
  finish, so sums may differ from a single call's in the last float bits
  (about 1e-7 relative in float32); with one worker the order is fixed.

  Attributes:
    workers: The workers, in slice order.
    clients_per_subround: S, or 0 for one slice per worker.
    unsplit_computations: Type signatures of the computations with client
      inputs that could not be split and ran whole on the first worker.
  """

  def __init__(self, workers: Sequence[workers_lib.Worker], *,
               default_num_clients: int, clients_per_subround: int = 0):
    if not workers:
      raise ValueError('SplittingContext needs at least one worker.')
    if clients_per_subround < 0:
      raise ValueError('clients_per_subround must be >= 0 (0: one slice per '
                       f'worker), got {clients_per_subround}.')
    if len(workers) < 2 and not clients_per_subround:
      raise ValueError(
          'With one worker, SplittingContext needs clients_per_subround > 0 '
          '(there is nothing to split across).'
      )
    self.workers = list(workers)
    self.clients_per_subround = clients_per_subround
    self.unsplit_computations: list[str] = []
    self._first_worker = tff.framework.SyncExecutionContext(
        **workers_lib.context_kwargs(self.workers[0], default_num_clients)
    )
    self._async_contexts = [
        tff.framework.AsyncExecutionContext(
            **workers_lib.context_kwargs(w, default_num_clients)
        )
        for w in self.workers
    ]

  def num_subrounds(self, num_clients: int) -> int:
    """Slices of a call with `num_clients` clients."""
    if not self.clients_per_subround:
      return len(self.workers)
    return max(len(self.workers),
               math.ceil(num_clients / self.clients_per_subround))

  @functools.lru_cache(maxsize=8)
  def _mergeable(self, num_subrounds: int):
    # TFF fixes the number of slices per context; rounds usually have one
    # size, so there is usually one of these.
    return tff.framework.MergeableCompExecutionContext(
        async_contexts=self._async_contexts, num_subrounds=num_subrounds)

  @functools.lru_cache(maxsize=128)
  def _split_form(
      self, comp: tff.Computation
  ) -> Optional[tff.framework.MergeableCompForm]:
    """The computation's mergeable form, or None to run it on one worker."""
    if not _has_clients_placed_part(comp.type_signature.parameter):
      return None
    try:
      return tff.backends.native.compile_to_mergeable_comp_form(comp)
    except ValueError as e:
      # The compiler's message ends in a dump of the whole computation.
      reason = str(e).split('. ', 1)[0]
      signature = str(comp.type_signature)
      self.unsplit_computations.append(signature)
      logging.warning(
          'This computation cannot be split across workers (%s); it runs '
          'whole on the first worker: %.300s',
          reason,
          signature,
      )
      return None

  def invoke(self, comp, arg):
    form = self._split_form(comp)
    if form is None:
      return self._first_worker.invoke(comp, arg)
    num_clients = num_clients_in(arg, comp.type_signature.parameter)
    return self._mergeable(self.num_subrounds(num_clients)).invoke(form, arg)
