"""Scale of the tag task: clients per round, and memory over many rounds.

Both measurements run the processes of `experiments.sparse_tags` on its
task; by default every TREC-50 training question is a client (5,452
clients of one example, the cross-device population of the
`train_sparse_tags.paper` preset), sampled per round with
`training.sample_clients` (seeded by `(seed, round)`). The rounds are the
round loop's core (sample, build the clients' datasets, `process.next`)
without checkpoints or metric files, so what is measured is TFF and the
client data, not the disk.

This module holds the rounds both use (`run_rounds`, `prepare_run`) and
the memory growth; the client scaling is `client_scaling`'s.

*   Client scaling (`client_scaling.measure_clients_per_round`,
    `client_scaling.run_client_scaling`): for
    each clients-per-round setting, warm-up rounds and then timed rounds;
    the median round time, the time per client, and the peak resident memory
    (`VmHWM`) of the Python process and of each TFF worker. A peak since
    process start is only the setting's own if the setting has the
    processes to itself, so `apps/scaling/bin/client_scaling.py` runs every
    setting in a fresh child process (with fresh workers) and this module
    collects
    them (`subprocess_measure`). `fit_scaling` checks the growth of round
    time: the time ratio of the largest to the smallest setting against
    their clients ratio, and the slope of log(time) on log(clients) (1 is
    linear).
*   Memory growth (`run_memory_growth` of a `MemoryGrowthSpec`): many
    rounds of a small process, with the resident memory (`VmRSS`) of the
    Python process and of each worker sampled every few rounds;
    `growth_after` is the growth from a baseline round (after warm-up) to
    the last sample, in percent.

What the memory benchmark found (`apps/scaling/bin/memory_growth.py`: the dense
process, 20 of the 5,452 question clients per round; growth of resident
memory from round 20 to the last round, on 2 cores):

*   The Python process grew by ~9 MiB a round (+79% by round 100) while each
    round built its clients' `tf.data` datasets anew with
    `tags.to_dataset`: every eager `Dataset.map` (also the one inside
    `ragged_batch`) leaves ~0.4 MiB behind that garbage collection never
    returns (TensorFlow issue 43969); passing the same dataset objects
    every round kept it flat. `tags.BatchBuilder` builds them
    through one traced `tf.function` (the same batches): Python then stays
    flat (-0.2% over 200 rounds), and a round's datasets take 10 ms
    instead of 580 ms.
*   The worker grew by +17% by round 100 with glibc's default malloc, also
    with the same dataset objects every round, and not in repeated calls of
    small computations (no per-call leak): fragmentation, from per-thread
    arenas and from glibc raising its mmap threshold once a model-sized
    block is freed. Capping the arenas alone left +13% over 200 rounds, a
    fixed mmap (and trim) threshold alone +8% over 120; both
    (`--worker_malloc_arena_max=2 --worker_malloc_mmap_threshold=131072`,
    the defaults of `apps/scaling/bin/memory_growth.py`) +2.0% over 200 rounds.
"""

import collections
import dataclasses
from collections.abc import Callable, Mapping, Sequence
import gc
import json
import os
import time
from typing import Any, Optional

from matplotlib import figure
from matplotlib.backends import backend_agg
import numpy as np
import tensorflow_federated as tff

from tff_nlp import training as training_lib
from apps.partial_models import tag_experiment as sparse_tags
from tff_nlp.runtime import memory


MEMORY_GROWTH_JSON = 'memory_growth.json'
MEMORY_GROWTH_TABLE = 'memory_growth.md'
MEMORY_GROWTH_PLOT = 'memory_growth.png'
# Sizes are binary (docs/results/README.md): memory is read in bytes and
# reported in MiB.
MIB = 1024 ** 2

AfterRoundFn = Callable[[int, Mapping[str, Any]], None]


def run_rounds(
    process: tff.learning.templates.LearningProcess,
    state: Any,
    *,
    client_data_fn: training_lib.ClientDataFn,
    num_clients: int,
    clients_per_round: int,
    rounds: int,
    seed: int,
    after_round: Optional[AfterRoundFn] = None,
) -> tuple[Any, list[collections.OrderedDict]]:
  """Runs rounds 1..`rounds` as `training.run_training` does, timing them.

  Args:
    process: The learning process.
    state: Its state before round 1.
    client_data_fn: `(round_num, client_ids) -> [client data]`.
    num_clients: Clients to sample from.
    clients_per_round: Clients per round (`training.sample_clients`).
    rounds: How many rounds.
    seed: The sampling seed.
    after_round: Called after each round with its number and record.

  Returns:
    The final state and per round `round`, `clients` (how many),
    `sample_seconds` (sampling them), `data_seconds` (building their data:
    datasets, or ids when the worker builds the datasets) and `round_seconds`
    (`process.next`, as the round loop records it).
  """
  records = []
  for round_num in range(1, rounds + 1):
    sample_start = time.perf_counter()
    client_ids = training_lib.sample_clients(
        num_clients, clients_per_round, seed=seed, round_num=round_num)
    start = time.perf_counter()
    client_data = client_data_fn(round_num, client_ids)
    data_end = time.perf_counter()
    state = process.next(state, client_data).state
    # Drop the datasets before the next round builds its own, so a memory
    # sample never counts two rounds' datasets.
    del client_data
    record = collections.OrderedDict(
        round=round_num, clients=len(client_ids),
        sample_seconds=start - sample_start,
        data_seconds=data_end - start,
        round_seconds=time.perf_counter() - data_end)
    records.append(record)
    if after_round is not None:
      after_round(round_num, record)
  return state, records


@dataclasses.dataclass(frozen=True)
class PreparedRun:
  """What a scaling run needs: the task, its clients, process and data."""

  task: sparse_tags.TagTask
  num_clients: int
  process: tff.learning.templates.LearningProcess
  client_data_fn: training_lib.ClientDataFn


def prepare_run(data_dir, data, training, method, seed,
                population=None) -> PreparedRun:
  """The task, its clients, and `method`'s process and client data.

  With `population` (a `data.population.PopulationConfig`), the clients are
  that many simulated users drawn from the training examples, whose datasets
  the worker builds from their ids (`sparse_tags.population_run`); without,
  the task's clients (`data.partition`), whose datasets Python builds.
  """
  task = sparse_tags.prepare_task(data_dir, data, seed=seed)
  if population is not None:
    process, data_fn = sparse_tags.population_run(method, task, training,
                                                   population)
    return PreparedRun(task, population.num_users, process, data_fn)
  process = sparse_tags.build_process(method, task.vocabularies, training)
  data_fn = sparse_tags.client_data_fn(method, task, training, seed)
  return PreparedRun(task, len(task.clients), process, data_fn)


# --- Report helpers (also the client scaling's) -----------------------------


def format_mib(value: Optional[float]) -> str:
  """Bytes as whole MiB with thousands separators; None as a dash."""
  return '–' if value is None else f'{value / MIB:,.0f}'


def workload_section(config: Optional[Mapping[str, Any]],
                     num_clients: Optional[int] = None) -> str:
  """Markdown: what the measured rounds train on, for the report's top.

  Read from the run's `config` (and the clients it sampled from); these
  reports measure time and memory, so the section says that no accuracy is
  claimed and no difference called.
  """
  config = dict(config or {})
  if not config:
    return ''
  dataset = config.get('dataset', 'the tag task\'s dataset')
  if config.get('population_size'):
    clients = (f'{config["population_size"]:,} simulated users of '
               f'{config.get("examples_per_user", "?")} {dataset} training '
               f'questions each (Dirichlet label skew, α = '
               f'{config.get("population_alpha", "?")}), datasets built in '
               f'the worker from their ids')
  elif config.get('partition') == 'document':
    clients = (f'every {dataset} training question its own client'
               + (f' ({num_clients:,} clients of one example)'
                  if num_clients else ''))
  else:
    clients = (f'{dataset} split over {num_clients or "?"} clients '
               f'({config.get("partition", "?")})')
  method = config.get('method')
  model = (f'the tag model (one logistic regression per tag over a bag of '
           f'words), {method or "sparse and/or dense"} process'
           + (f', M = {config["max_keys"]} rows per sparse client'
              if 'max_keys' in config and method != 'dense' else ''))
  epochs = config.get('client_epochs')
  epochs = (f'{epochs} local epoch(s)' if epochs else
            'one local epoch (the default; not in the configuration)')
  return ('## What the model saw\n\n'
          f'- **Training data.** {clients}; batch size '
          f'{config.get("batch_size", "?")}, {epochs}.\n'
          f'- **Model.** {model}.\n'
          '- **Truncation.** None that a result depends on: no score is '
          'computed, so no test example can be right or wrong.\n'
          '- **Test set.** None: time and memory only, no accuracy is '
          'measured or claimed.\n'
          '- **Protocol.** Wall time per round and resident memory of this '
          'process and its workers; sizes are binary (1 MiB = 1,024² '
          'bytes).\n'
          '- **Verdict rule.** No difference is called (the rule of '
          'docs/results/README.md has nothing to apply to).\n\n')


def new_figure(ncols, *, width=5.0, height=3.8):
  """A figure of `ncols` axes side by side: (figure, axes)."""
  # An Agg canvas of its own, as `apps.common.plots`: no pyplot state.
  fig = figure.Figure(figsize=(width * ncols, height), layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  return fig, fig.subplots(1, ncols, squeeze=False)[0]


def config_line(config: Optional[Mapping[str, Any]]) -> str:
  """The report's line naming the configuration; empty without one."""
  if not config:
    return ''
  return ('Configuration: '
          + ', '.join(f'{k} = {v}' for k, v in config.items()) + '.\n\n')


# --- Memory growth --------------------------------------------------------


def memory_sample(round_num: int) -> collections.OrderedDict:
  """RSS of this process and of each owned worker after a full GC."""
  # Garbage awaiting collection is not a leak: collect it first, so a
  # sample counts only what is still referenced (or lost in TF's C++).
  gc.collect()
  snap = memory.snapshot()
  return collections.OrderedDict(
      round=round_num,
      python_rss_bytes=snap.python.rss_bytes,
      workers=[collections.OrderedDict(pid=w.pid, rss_bytes=w.rss_bytes)
               for w in snap.workers],
      workers_rss_bytes=snap.workers_rss_bytes)


def _percent(before: float, after: float) -> float:
  return 100.0 * (after - before) / before


def growth_after(samples: Sequence[Mapping[str, Any]],
                 baseline_round: int) -> collections.OrderedDict:
  """Growth of resident memory from a baseline sample to the last one.

  Args:
    samples: `memory_sample` records in round order.
    baseline_round: The growth is measured from the first sample at or
      after this round (after warm-up, when caches are full).

  Returns:
    `baseline_round` and `last_round` (the samples compared),
    `python_percent`, `workers_percent` (their summed RSS; None without
    workers), `per_worker_percent` (by pid, for workers in both samples) and
    `max_percent` (the largest of Python's and each worker's).

  Raises:
    ValueError: If no sample is at or after `baseline_round`.
  """
  later = [s for s in samples if s['round'] >= baseline_round]
  if not later:
    raise ValueError(f'No memory sample at or after round {baseline_round} '
                     f'(last: {samples[-1]["round"] if samples else None}).')
  base, last = later[0], samples[-1]
  python = _percent(base['python_rss_bytes'], last['python_rss_bytes'])
  base_workers = {w['pid']: w['rss_bytes'] for w in base['workers']}
  per_worker = collections.OrderedDict(
      (str(w['pid']), _percent(base_workers[w['pid']], w['rss_bytes']))
      for w in last['workers'] if w['pid'] in base_workers)
  workers = (_percent(base['workers_rss_bytes'], last['workers_rss_bytes'])
             if base['workers_rss_bytes'] else None)
  return collections.OrderedDict(
      baseline_round=base['round'], last_round=last['round'],
      python_percent=python, workers_percent=workers,
      per_worker_percent=per_worker,
      max_percent=max([python, *per_worker.values()]))


def memory_growth_table(samples: Sequence[Mapping[str, Any]]) -> str:
  """Markdown: RSS per sample of the Python process and each worker."""
  pids = list(dict.fromkeys(w['pid'] for s in samples for w in s['workers']))
  lines = ['| round | Python RSS MiB | '
           + ''.join(f'worker {p} RSS MiB | ' for p in pids),
           '|---:|---:|' + '---:|' * len(pids)]
  for s in samples:
    rss = {w['pid']: w['rss_bytes'] for w in s['workers']}
    lines.append(f'| {s["round"]} | {format_mib(s["python_rss_bytes"])} | '
                 + ''.join(f'{format_mib(rss.get(p))} | ' for p in pids))
  return '\n'.join(line.rstrip() for line in lines)


def write_memory_growth_plot(samples: Sequence[Mapping[str, Any]],
                             baseline_round: int, path: str) -> None:
  """RSS of the Python process and of each worker against rounds."""
  fig, (axis,) = new_figure(1, width=6.5)
  rounds = [s['round'] for s in samples]
  axis.plot(rounds, [s['python_rss_bytes'] / MIB for s in samples],
            marker='o', label='Python process')
  pids = list(dict.fromkeys(w['pid'] for s in samples for w in s['workers']))
  for pid in pids:
    points = [(s['round'], w['rss_bytes'] / MIB) for s in samples
              for w in s['workers'] if w['pid'] == pid]
    axis.plot(*zip(*points), marker='s', label=f'worker {pid}')
  axis.axvline(baseline_round, color='grey', linestyle=':',
               label=f'baseline (round {baseline_round})')
  axis.set_xlabel('round')
  axis.set_ylabel('resident memory (MiB)')
  axis.set_ylim(bottom=0)
  axis.grid(alpha=0.3)
  axis.legend(fontsize='small')
  fig.savefig(path, dpi=120)


# The task's settings a memory-growth run records (those the binary's flags
# set: `apps.partial_models.tag_task_flags`), in the order it records them.
_RECORDED_DATA = ('dataset', 'partition', 'num_clients', 'max_words',
                  'max_tags')
_RECORDED_TRAINING = ('max_keys', 'client_learning_rate', 'batch_size')


@dataclasses.dataclass(frozen=True)
class MemoryGrowthSpec:
  """What defines one memory-growth run (`run_memory_growth`).

  Where the run reads and writes, and the TFF runtime it runs in, are the
  call's, not the spec's. A spec refuses values that do not fit together
  when it is built, naming the field.

  Attributes:
    data: The tag task's data and client split.
    training: Client training.
    method: The process, one of `sparse_tags.METHODS`.
    clients_per_round: Clients sampled per round (`training.sample_clients`;
      0: every client).
    rounds: Rounds to run (>= 1).
    sample_every: Sample memory every this many rounds (>= 1; and before
      round 1 and after the last).
    baseline_round: Growth is measured from the first sample at or after
      this round (0 <= `baseline_round` <= `rounds`).
    seed: Seed of the sampling and the example order.
    target_percent: The growth allowed (each process), in percent.

  Raises (when built):
    ValueError: A field out of its range, or an unknown `method`.
  """

  data: sparse_tags.TagDataConfig
  training: sparse_tags.TagTrainingConfig
  method: str = sparse_tags.DENSE
  clients_per_round: int = 20
  rounds: int = 200
  sample_every: int = 10
  baseline_round: int = 20
  seed: int = 0
  target_percent: float = 5.0

  def __post_init__(self):
    if self.method not in sparse_tags.METHODS:
      raise ValueError(f'method: unknown {self.method!r}; expected one of '
                       f'{list(sparse_tags.METHODS)}.')
    for name, low in (('clients_per_round', 0), ('rounds', 1),
                      ('sample_every', 1)):
      if getattr(self, name) < low:
        raise ValueError(f'{name} must be >= {low}, got '
                         f'{getattr(self, name)}.')
    if not 0 <= self.baseline_round <= self.rounds:
      raise ValueError(f'baseline_round must be in 0..rounds '
                       f'({self.rounds}), got {self.baseline_round}.')

  def config(self, context: Optional[Mapping[str, Any]] = None
             ) -> collections.OrderedDict:
    """The run's `config` record: method, clients per round, the task's
    settings, `context` (the runtime's, e.g. the workers' malloc
    settings), seed."""
    return collections.OrderedDict(
        method=self.method, clients_per_round=self.clients_per_round,
        **{f: getattr(self.data, f) for f in _RECORDED_DATA},
        **{f: getattr(self.training, f) for f in _RECORDED_TRAINING},
        **(context or {}), seed=self.seed)


def run_memory_growth(
    spec: MemoryGrowthSpec,
    *,
    data_dir: Optional[str],
    output_dir: str,
    context: Optional[Mapping[str, Any]] = None,
) -> collections.OrderedDict:
  """Runs many rounds in the current TFF context, sampling memory.

  Args:
    spec: The run (`MemoryGrowthSpec`): the task's `data` and `training`,
      `method`, `clients_per_round`, `rounds`, `sample_every`,
      `baseline_round`, `seed` and `target_percent`.
    data_dir: The `shared/data` folder; None finds it.
    output_dir: Gets `memory_growth.{json,md,png}`.
    context: The settings of the TFF runtime the caller runs this in (e.g.
      the workers' malloc settings), recorded in `config`
      (`MemoryGrowthSpec.config`).

  Returns:
    The results written to `memory_growth.json`: `config`, `samples`,
    `growth` (`growth_after`), `passed` (max growth < target),
    per-round `round_seconds` and `data_seconds`.
  """
  rounds, sample_every = spec.rounds, spec.sample_every
  run = prepare_run(data_dir, spec.data, spec.training, spec.method,
                    spec.seed)
  num_clients, process, data_fn = (run.num_clients, run.process,
                                   run.client_data_fn)
  state = process.initialize()
  samples = [memory_sample(0)]

  def after_round(round_num, record):
    del record
    if round_num % sample_every == 0 or round_num == rounds:
      samples.append(memory_sample(round_num))

  _, records = run_rounds(
      process, state, client_data_fn=data_fn, num_clients=num_clients,
      clients_per_round=spec.clients_per_round, rounds=rounds,
      seed=spec.seed, after_round=after_round)
  growth = growth_after(samples, spec.baseline_round)
  summary = collections.OrderedDict(
      config=dict(spec.config(context)),
      num_clients=num_clients,
      target_percent=spec.target_percent,
      growth=growth,
      passed=bool(growth['max_percent'] < spec.target_percent),
      samples=samples,
      round_seconds=[r['round_seconds'] for r in records],
      data_seconds=[r['data_seconds'] for r in records],
      machine=training_lib.machine_info())
  os.makedirs(output_dir, exist_ok=True)
  summary['markdown'] = write_memory_growth_report(summary, output_dir)
  return summary


def write_memory_growth_report(summary: Mapping[str, Any],
                               output_dir: str) -> str:
  """`memory_growth.{json,md,png}` of a run; returns the sentence + table."""
  training_lib.write_json(os.path.join(output_dir, MEMORY_GROWTH_JSON),
                          {k: v for k, v in summary.items()
                           if k != 'markdown'})
  samples, config = summary['samples'], summary.get('config')
  sentence = memory_growth_sentence(summary)
  table = memory_growth_table(samples)
  with open(os.path.join(output_dir, MEMORY_GROWTH_TABLE), 'w',
            encoding='utf-8') as f:
    f.write(f'# Resident memory over {len(summary["round_seconds"])} '
            f'rounds\n\n' + config_line(config)
            + workload_section(config, summary.get('num_clients'))
            + sentence + '\n\n' + table + '\n')
  write_memory_growth_plot(samples, summary['growth']['baseline_round'],
                           os.path.join(output_dir, MEMORY_GROWTH_PLOT))
  return sentence + '\n\n' + table


def rewrite_memory_growth_report(output_dir: str) -> str:
  """The report again from its `memory_growth.json`, running nothing."""
  with open(os.path.join(output_dir, MEMORY_GROWTH_JSON),
            encoding='utf-8') as f:
    summary = json.load(f, object_pairs_hook=collections.OrderedDict)
  return write_memory_growth_report(summary, output_dir)


def memory_growth_sentence(summary: Mapping[str, Any]) -> str:
  """One line: growth of each process against the target."""
  growth = summary['growth']
  parts = [f'Python {growth["python_percent"]:+.1f}%']
  parts += [f'worker {pid} {p:+.1f}%'
            for pid, p in growth['per_worker_percent'].items()]
  verdict = 'pass' if summary['passed'] else 'FAIL'
  seconds = summary['round_seconds']
  return (f'Growth of resident memory from round {growth["baseline_round"]} '
          f'to round {growth["last_round"]}: {", ".join(parts)} (target: '
          f'under {summary["target_percent"]:g}% each: {verdict}). Median '
          f'round {np.median(seconds):.3f} s, building the datasets '
          f'{np.median(summary["data_seconds"]):.3f} s.')
