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

A worker that dies mid-round raises `tff_nlp.runtime.WorkerError` naming it
(with the tail of its log when it was started here) instead of TFF's
endless retries.
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
from typing import Optional

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


class SplittingContext(tff.framework.SyncContext):
  """A synchronous TFF context that splits each round's clients over workers.

  Clients are cut into `len(workers)` contiguous slices in their given
  order; slice i runs on worker i. Partial aggregates are merged in the order
  the slices finish, so sums may differ from a single worker's in the last
  float bits (about 1e-7 relative in float32).

  Attributes:
    workers: The workers, in slice order.
    unsplit_computations: Type signatures of the computations with client
      inputs that could not be split and ran whole on the first worker.
  """

  def __init__(self, workers: Sequence[workers_lib.Worker], *,
               default_num_clients: int):
    if len(workers) < 2:
      raise ValueError(
          f'SplittingContext needs at least 2 workers, got {len(workers)}.'
      )
    self.workers = list(workers)
    self.unsplit_computations: list[str] = []
    self._first_worker = tff.framework.SyncExecutionContext(
        **workers_lib.context_kwargs(self.workers[0], default_num_clients)
    )
    self._mergeable = tff.framework.MergeableCompExecutionContext(
        async_contexts=[
            tff.framework.AsyncExecutionContext(
                **workers_lib.context_kwargs(w, default_num_clients)
            )
            for w in self.workers
        ],
    )

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
    return self._mergeable.invoke(form, arg)
