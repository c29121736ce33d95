"""What the shared process cache saves on a sweep of runs in one process.

A sweep (seeds of a benchmark, a notebook's runs) trains several runs of one
configuration in one Python process. Each run builds its learning processes,
and building traces the model into TFF computations, most of a small run's
time. `tff_nlp.training.shared_processes()` keeps the built processes per
configuration, so the runs after the first only train.

`run_sweep` runs the sparse-tags comparison (`apps.partial_models`,
`run_sparse_tags`) `runs` times with seeds `seed, seed + 1, ...`, each
seed twice side by side: without the cache (`TFF_NLP_PROCESS_CACHE=0`, every
run builds) and with it (the shared cache, emptied once before the sweep),
alternating so that both see the same machine load. The two runs of a seed
must give the same results (precision@1 of every method): a cached process
computes what a fresh one does.
"""

import collections
import contextlib
import dataclasses
import os
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from apps.partial_models import tag_experiment as sparse_tags
from tff_nlp import training as training_lib
from tff_nlp.training import process_cache

MODES = ('without_cache', 'with_cache')
RESULTS_FILE = 'process_cache_sweep.json'


@contextlib.contextmanager
def _cache_off():
  previous = os.environ.get(process_cache.ENV_VAR)
  os.environ[process_cache.ENV_VAR] = '0'
  try:
    yield
  finally:
    if previous is None:
      del os.environ[process_cache.ENV_VAR]
    else:
      os.environ[process_cache.ENV_VAR] = previous


def _results_of(results: dict[str, Any]) -> dict[str, Any]:
  """The numbers a run computed (what both modes must agree on): each
  method's final evaluation and per-test-example hits@1."""
  return {method: (dict(result['final']), list(result['test_hits_at_1']))
          for method, result in results['methods'].items()}


def run_sweep(*, data_dir: Optional[str], output_dir: str,
              data: sparse_tags.TagDataConfig,
              training: sparse_tags.TagTrainingConfig,
              loop: training_lib.LoopConfig,
              methods: Sequence[str] = sparse_tags.METHODS, runs: int = 10,
              log: Callable[[str], None] = print) -> dict[str, Any]:
  """`runs` runs without and with the shared cache; writes the JSON."""
  if runs < 1:
    raise ValueError(f'runs must be >= 1, got {runs}.')
  shared = training_lib.shared_processes()
  shared.clear()
  seconds = {mode: [] for mode in MODES}
  agree = []
  # Lookups of the shared cache per mode (without it, every lookup builds).
  lookups = {mode: {'reused': 0, 'built': 0} for mode in MODES}
  for i in range(runs):
    seed = loop.seed + i
    outcome = {}
    for mode in MODES:
      run_loop = dataclasses.replace(loop, seed=seed)
      run_dir = os.path.join(output_dir, mode, f'seed_{seed}')
      before = shared.stats()
      start = time.perf_counter()
      with (_cache_off() if mode == 'without_cache'
            else contextlib.nullcontext()):
        results = sparse_tags.run_sparse_tags(
            data_dir=data_dir, output_dir=run_dir, data=data,
            training=training, loop=run_loop, methods=methods, restart=True)
      seconds[mode].append(time.perf_counter() - start)
      after = shared.stats()
      lookups[mode]['reused'] += after.hits - before.hits
      lookups[mode]['built'] += after.misses - before.misses
      outcome[mode] = _results_of(results)
    agree.append(outcome['without_cache'] == outcome['with_cache'])
    log(f'seed {seed}: ' + ', '.join(
        f'{mode} {seconds[mode][-1]:.1f} s' for mode in MODES)
        + f', same results: {agree[-1]}')
  total = {mode: float(sum(s)) for mode, s in seconds.items()}
  summary = collections.OrderedDict(
      runs=runs, methods=list(methods), seconds=seconds, total_seconds=total,
      saved_seconds=total['without_cache'] - total['with_cache'],
      saved_fraction=1.0 - total['with_cache'] / total['without_cache'],
      first_run_seconds={mode: s[0] for mode, s in seconds.items()},
      later_runs_median_seconds={
          mode: float(np.median(s[1:])) if runs > 1 else None
          for mode, s in seconds.items()},
      builds=lookups,
      same_results=all(agree),
      machine=training_lib.machine_info())
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE),
                          summary)
  log(f'{runs} runs: without the cache {total["without_cache"]:.1f} s, with '
      f'it {total["with_cache"]:.1f} s (saved {summary["saved_seconds"]:.1f} '
      f's, {100 * summary["saved_fraction"]:.0f} %); processes reused and built '
      f'{lookups}; '
      f'same results: {summary["same_results"]}')
  return summary
