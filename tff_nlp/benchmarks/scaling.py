"""Scale of the tag task: clients per round, and memory over many rounds.

Both measurements run the processes of `experiments.sparse_tags` on its
task; by default every TREC-50 training question is a client (5,452
clients of one example, the cross-device population of the
`train_sparse_tags.paper` preset), sampled per round with
`training.sample_clients` (seeded by `(seed, round)`). The rounds are the
round loop's core (sample, build the clients' datasets, `process.next`)
without checkpoints or metric files, so what is measured is TFF and the
client data, not the disk.

*   Client scaling (`measure_clients_per_round`, `run_client_scaling`): for
    each clients-per-round setting, warm-up rounds and then timed rounds;
    the median round time, the time per client, and the peak resident memory
    (`VmHWM`) of the Python process and of each TFF worker. A peak since
    process start is only the setting's own if the setting has the
    processes to itself, so `bench/client_scaling.py` runs every setting in
    a fresh child process (with fresh workers) and this module collects
    them (`subprocess_measure`). `fit_scaling` checks the growth of round
    time: the time ratio of the largest to the smallest setting against
    their clients ratio, and the slope of log(time) on log(clients) (1 is
    linear).
*   Memory growth (`run_memory_growth`): many rounds of a small process,
    with the resident memory (`VmRSS`) of the Python process and of each
    worker sampled every few rounds; `growth_after` is the growth from a
    baseline round (after warm-up) to the last sample, in percent.

What the memory benchmark found (`bench/memory_growth.py`: the dense
process, 20 of the 5,452 question clients per round; growth of resident
memory from round 20 to the last round, on 2 cores):

*   The Python process grew by ~9 MB a round (+79% by round 100) while each
    round built its clients' `tf.data` datasets anew with
    `tags.to_dataset`: every eager `Dataset.map` (also the one inside
    `ragged_batch`) leaves ~0.4 MB behind that garbage collection never
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
    the defaults of `bench/memory_growth.py`) +2.0% over 200 rounds.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any, Optional

from matplotlib import figure
from matplotlib import ticker
from matplotlib.backends import backend_agg
import numpy as np
import tensorflow_federated as tff

from tff_nlp import training as training_lib
from tff_nlp.experiments import sparse_tags
from tff_nlp.runtime import memory

CLIENT_SCALING_JSON = 'client_scaling.json'
CLIENT_SCALING_TABLE = 'client_scaling.md'
CLIENT_SCALING_PLOT = 'client_scaling.png'
SETTINGS_DIR = 'settings'
MEMORY_GROWTH_JSON = 'memory_growth.json'
MEMORY_GROWTH_TABLE = 'memory_growth.md'
MEMORY_GROWTH_PLOT = 'memory_growth.png'
_MB = 1024 ** 2

# Measures one setting: (method, clients_per_round) -> its record (as
# `measure_clients_per_round` returns it, or with an 'error').
MeasureFn = Callable[[str, int], Mapping[str, Any]]
# Called after each round with (round_num, round record).
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
    `data_seconds` (building the datasets) and `round_seconds`
    (`process.next`, as the round loop records it).
  """
  records = []
  for round_num in range(1, rounds + 1):
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
        data_seconds=data_end - start,
        round_seconds=time.perf_counter() - data_end)
    records.append(record)
    if after_round is not None:
      after_round(round_num, record)
  return state, records


def _prepare(data_dir, data, training, method, seed):
  task = sparse_tags.prepare_task(data_dir, data, seed=seed)
  process = sparse_tags.build_process(method, task.vocabularies, training)
  data_fn = sparse_tags.client_data_fn(method, task, training, seed)
  return task, process, data_fn


# --- Client scaling -------------------------------------------------------


def measure_clients_per_round(
    *,
    data_dir: Optional[str],
    data: sparse_tags.TagDataConfig,
    training: sparse_tags.TagTrainingConfig,
    method: str,
    clients_per_round: int,
    rounds: int,
    warmup_rounds: int,
    seed: int,
) -> collections.OrderedDict:
  """Times rounds of one setting in the current TFF context.

  Run it in a fresh process for a peak memory of this setting alone (see
  the module docstring).

  Args:
    data_dir: The `shared/data` folder; None finds it.
    data: The task's data and client split.
    training: Client training.
    method: One of `sparse_tags.METHODS`.
    clients_per_round: Clients sampled per round (1..number of clients).
    rounds: Timed rounds (after the warm-up).
    warmup_rounds: Untimed first rounds (tracing, executor set-up).
    seed: Seed of the sampling and the example order.

  Returns:
    The setting, the timed rounds' `round_seconds` and `data_seconds` and
    their medians, `seconds_per_client` (median round time per client), a
    memory snapshot before the first round and after the last
    (`memory.Snapshot.to_dict`), and the peaks `python_peak_bytes` and
    `workers_peak_bytes` (summed over the workers).
  """
  if rounds < 1 or warmup_rounds < 0:
    raise ValueError(f'Need rounds >= 1 and warmup_rounds >= 0, got '
                     f'{rounds} and {warmup_rounds}.')
  task, process, data_fn = _prepare(data_dir, data, training, method, seed)
  num_clients = len(task.clients)
  if not 1 <= clients_per_round <= num_clients:
    raise ValueError(f'clients_per_round must be in 1..{num_clients} (the '
                     f'clients of the task), got {clients_per_round}.')
  state = process.initialize()
  before = memory.snapshot()
  _, records = run_rounds(
      process, state, client_data_fn=data_fn, num_clients=num_clients,
      clients_per_round=clients_per_round, rounds=warmup_rounds + rounds,
      seed=seed)
  after = memory.snapshot()
  timed = records[warmup_rounds:]
  round_seconds = [r['round_seconds'] for r in timed]
  median = float(np.median(round_seconds))
  return collections.OrderedDict(
      method=method,
      clients_per_round=clients_per_round,
      num_clients=num_clients,
      rounds=rounds,
      warmup_rounds=warmup_rounds,
      round_seconds=round_seconds,
      data_seconds=[r['data_seconds'] for r in timed],
      warmup_round_seconds=[r['round_seconds']
                            for r in records[:warmup_rounds]],
      round_seconds_median=median,
      seconds_per_client=median / clients_per_round,
      data_seconds_median=float(np.median([r['data_seconds']
                                           for r in timed])),
      memory_before_rounds=before.to_dict(),
      memory_after_rounds=after.to_dict(),
      python_peak_bytes=after.python.peak_bytes,
      workers_peak_bytes=after.workers_peak_bytes,
      num_workers=len(after.workers),
      machine=training_lib.machine_info())


def subprocess_measure(
    command_fn: Callable[[str, int, str], Sequence[str]],
    output_dir: str,
    *,
    timeout_seconds: Optional[float] = None,
) -> MeasureFn:
  """A `MeasureFn` that measures each setting in a child process.

  Args:
    command_fn: `(method, clients_per_round, json_path) -> argv` of a child
      that measures the setting (e.g. with `measure_clients_per_round` in a
      context of its own) and writes its record as JSON to `json_path`.
    output_dir: The children's JSON files go to `output_dir/settings/`.
    timeout_seconds: Kill a child after this long; None waits.

  Returns:
    `(method, clients_per_round) -> record`; a child that fails (exit
    status, timeout, no JSON) gives `{method, clients_per_round, error}`
    instead, so one setting running out of memory still leaves the others'
    report.
  """
  settings_dir = os.path.join(output_dir, SETTINGS_DIR)

  def measure(method: str, clients_per_round: int):
    os.makedirs(settings_dir, exist_ok=True)
    path = os.path.join(settings_dir, f'{method}_{clients_per_round}.json')
    if os.path.exists(path):
      os.remove(path)  # Never report an earlier run's numbers.
    argv = list(command_fn(method, clients_per_round, path))
    failure = collections.OrderedDict(
        method=method, clients_per_round=clients_per_round)
    try:
      subprocess.run(argv, check=True, stdin=subprocess.DEVNULL,
                     stdout=_stderr_fileno(), timeout=timeout_seconds)
    except subprocess.CalledProcessError as e:
      return collections.OrderedDict(
          failure, error=f'child exited with status {e.returncode}')
    except subprocess.TimeoutExpired:
      return collections.OrderedDict(
          failure, error=f'child killed after {timeout_seconds:g} s')
    try:
      with open(path, encoding='utf-8') as f:
        return json.load(f)
    except (OSError, ValueError) as e:
      return collections.OrderedDict(
          failure, error=f'no result from the child ({e})')

  return measure


def _stderr_fileno() -> Optional[int]:
  """Our stderr for a child's stdout (our stdout is the report), if real."""
  try:
    return sys.stderr.fileno()
  except (AttributeError, OSError, ValueError):
    return None  # A captured stream (e.g. under pytest): inherit stdout.


def fit_scaling(clients: Sequence[float],
                seconds: Sequence[float]) -> collections.OrderedDict:
  """How round time grows with clients per round.

  Args:
    clients: Clients per round of each setting (positive, two distinct at
      least).
    seconds: The settings' round times (positive).

  Returns:
    `log_log_slope`: the least-squares slope of log(seconds) on
    log(clients), i.e. the exponent b of seconds ~ a * clients^b (1:
    linear); `seconds_per_client` and `intercept_seconds`: the
    least-squares line seconds = intercept + slope * clients (the marginal
    cost of a client and the fixed cost of a round); `time_ratio` and
    `clients_ratio`: largest over smallest setting; and
    `no_worse_than_linear`: time_ratio <= clients_ratio.
  """
  x = np.asarray(clients, np.float64)
  y = np.asarray(seconds, np.float64)
  if x.shape != y.shape or x.ndim != 1:
    raise ValueError(f'Need as many times as settings, got {len(x)} and '
                     f'{len(y)}.')
  if len(set(x.tolist())) < 2 or min(x) <= 0 or min(y) <= 0:
    raise ValueError('Need positive times of at least two distinct positive '
                     f'client counts, got {x.tolist()} and {y.tolist()}.')
  log_slope = np.polyfit(np.log(x), np.log(y), 1)[0]
  slope, intercept = np.polyfit(x, y, 1)
  smallest, largest = int(np.argmin(x)), int(np.argmax(x))
  time_ratio = y[largest] / y[smallest]
  clients_ratio = x[largest] / x[smallest]
  return collections.OrderedDict(
      log_log_slope=float(log_slope),
      seconds_per_client=float(slope),
      intercept_seconds=float(intercept),
      time_ratio=float(time_ratio),
      clients_ratio=float(clients_ratio),
      no_worse_than_linear=bool(time_ratio <= clients_ratio))


def _mb(value: Optional[float]) -> str:
  return '–' if value is None else f'{value / _MB:,.0f}'


def client_scaling_table(settings: Sequence[Mapping[str, Any]]) -> str:
  """Markdown: one row per (method, clients per round)."""
  lines = [
      '| method | clients / round | round s (median) | ms / client '
      '| data s (median) | Python peak MB | Python MB before rounds '
      '| worker peak MB | workers |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for s in settings:
    head = f'| {s["method"]} | {s["clients_per_round"]:,} '
    if 'error' in s:
      lines.append(head + f'| failed: {s["error"]} |' + ' |' * 6)
      continue
    lines.append(
        head
        + f'| {s["round_seconds_median"]:.3f} '
        f'| {1000 * s["seconds_per_client"]:.2f} '
        f'| {s["data_seconds_median"]:.3f} '
        f'| {_mb(s["python_peak_bytes"])} '
        f'| {_mb(s["memory_before_rounds"]["python"]["rss_bytes"])} '
        f'| {_mb(s["workers_peak_bytes"] if s["num_workers"] else None)} '
        f'| {s["num_workers"]} |')
  return '\n'.join(lines)


def _fit_sentence(method: str, fit: Mapping[str, Any]) -> str:
  verdict = 'yes' if fit['no_worse_than_linear'] else 'NO'
  return (
      f'{method}: round time grew {fit["time_ratio"]:.1f}x for '
      f'{fit["clients_ratio"]:.0f}x the clients (no worse than linear: '
      f'{verdict}); log-log slope {fit["log_log_slope"]:.2f} (1 = linear); '
      f'least squares {fit["intercept_seconds"]:.2f} s + '
      f'{1000 * fit["seconds_per_client"]:.2f} ms per client.')


def _new_figure(ncols, *, width=5.0, height=3.8):
  # An Agg canvas of its own, as `tff_nlp.plots`: no pyplot state.
  fig = figure.Figure(figsize=(width * ncols, height), layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  return fig, fig.subplots(1, ncols, squeeze=False)[0]


def write_client_scaling_plot(settings: Sequence[Mapping[str, Any]],
                              path: str) -> None:
  """Round time and peak memory against clients per round, log-log."""
  fig, (time_axis, memory_axis) = _new_figure(2)
  done = [s for s in settings if 'error' not in s]
  for method in dict.fromkeys(s['method'] for s in done):
    rows = sorted((s for s in done if s['method'] == method),
                  key=lambda s: s['clients_per_round'])
    n = [s['clients_per_round'] for s in rows]
    seconds = [s['round_seconds_median'] for s in rows]
    time_axis.plot(n, seconds, marker='o', label=f'{method}')
    time_axis.plot(n, [seconds[0] * c / n[0] for c in n], linestyle=':',
                   color='grey',
                   label=f'{method}: linear from {n[0]:,}')
    memory_axis.plot(n, [s['python_peak_bytes'] / _MB for s in rows],
                     marker='o', label=f'{method}: Python')
    if all(s['num_workers'] for s in rows):
      memory_axis.plot(n, [s['workers_peak_bytes'] / _MB for s in rows],
                       marker='s', label=f'{method}: worker(s)')
  for axis, label in ((time_axis, 'round time (s, median)'),
                      (memory_axis, 'peak resident memory (MB)')):
    axis.set_xscale('log')
    axis.set_yscale('log')
    for scale in (axis.xaxis, axis.yaxis):  # 1000, not 10^3.
      scale.set_major_formatter(ticker.FuncFormatter(lambda v, _: f'{v:g}'))
      scale.set_minor_formatter(ticker.NullFormatter())
    axis.set_xlabel('clients per round')
    axis.set_ylabel(label)
    axis.grid(alpha=0.3, which='both')
    axis.legend(fontsize='small')
  fig.savefig(path, dpi=120)


def run_client_scaling(
    *,
    measure: MeasureFn,
    methods: Sequence[str],
    clients_per_round_values: Sequence[int],
    output_dir: str,
    config: Optional[Mapping[str, Any]] = None,
) -> collections.OrderedDict:
  """Measures every setting and writes the report.

  Args:
    measure: Measures one setting (`subprocess_measure` for a clean peak
      per setting; tests pass an in-process function).
    methods: Methods of `sparse_tags.METHODS` to measure.
    clients_per_round_values: The settings, each measured per method.
    output_dir: Gets `client_scaling.{json,md,png}`.
    config: What defines the run (recorded in the JSON and the report).

  Returns:
    The results written to `client_scaling.json`: `config`, `settings` (one
    record per method and setting, in order of clients per round), `fits`
    (per method with two or more measured settings, `fit_scaling`).
  """
  if not methods or not clients_per_round_values:
    raise ValueError('Need at least one method and one setting.')
  if min(clients_per_round_values) < 1:
    raise ValueError('clients per round must be >= 1, got '
                     f'{list(clients_per_round_values)}.')
  os.makedirs(output_dir, exist_ok=True)
  settings = [measure(method, n) for method in methods
              for n in sorted(set(clients_per_round_values))]
  fits = collections.OrderedDict()
  for method in methods:
    done = [s for s in settings
            if s['method'] == method and 'error' not in s]
    if len({s['clients_per_round'] for s in done}) >= 2:
      fits[method] = fit_scaling(
          [s['clients_per_round'] for s in done],
          [s['round_seconds_median'] for s in done])
  summary = collections.OrderedDict(
      config=dict(config or {}), settings=settings, fits=fits,
      machine=training_lib.machine_info())
  training_lib.write_json(os.path.join(output_dir, CLIENT_SCALING_JSON),
                          summary)
  table = client_scaling_table(settings)
  sentences = [_fit_sentence(m, f) for m, f in fits.items()]
  with open(os.path.join(output_dir, CLIENT_SCALING_TABLE), 'w',
            encoding='utf-8') as f:
    f.write('# Round time and peak memory against clients per round\n\n'
            + _config_line(config) + table + '\n\n'
            + ''.join(f'* {s}\n' for s in sentences))
  if any('error' not in s for s in settings):
    write_client_scaling_plot(
        settings, os.path.join(output_dir, CLIENT_SCALING_PLOT))
  summary['markdown'] = table + '\n\n' + '\n'.join(sentences)
  return summary


def _config_line(config: Optional[Mapping[str, Any]]) -> str:
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
  lines = ['| round | Python RSS MB | '
           + ''.join(f'worker {p} RSS MB | ' for p in pids),
           '|---:|---:|' + '---:|' * len(pids)]
  for s in samples:
    rss = {w['pid']: w['rss_bytes'] for w in s['workers']}
    lines.append(f'| {s["round"]} | {_mb(s["python_rss_bytes"])} | '
                 + ''.join(f'{_mb(rss.get(p))} | ' for p in pids))
  return '\n'.join(line.rstrip() for line in lines)


def write_memory_growth_plot(samples: Sequence[Mapping[str, Any]],
                             baseline_round: int, path: str) -> None:
  """RSS of the Python process and of each worker against rounds."""
  fig, (axis,) = _new_figure(1, width=6.5)
  rounds = [s['round'] for s in samples]
  axis.plot(rounds, [s['python_rss_bytes'] / _MB for s in samples],
            marker='o', label='Python process')
  pids = list(dict.fromkeys(w['pid'] for s in samples for w in s['workers']))
  for pid in pids:
    points = [(s['round'], w['rss_bytes'] / _MB) for s in samples
              for w in s['workers'] if w['pid'] == pid]
    axis.plot(*zip(*points), marker='s', label=f'worker {pid}')
  axis.axvline(baseline_round, color='grey', linestyle=':',
               label=f'baseline (round {baseline_round})')
  axis.set_xlabel('round')
  axis.set_ylabel('resident memory (MB)')
  axis.set_ylim(bottom=0)
  axis.grid(alpha=0.3)
  axis.legend(fontsize='small')
  fig.savefig(path, dpi=120)


def run_memory_growth(
    *,
    data_dir: Optional[str],
    data: sparse_tags.TagDataConfig,
    training: sparse_tags.TagTrainingConfig,
    method: str,
    clients_per_round: int,
    rounds: int,
    sample_every: int,
    baseline_round: int,
    seed: int,
    output_dir: str,
    target_percent: float = 5.0,
    config: Optional[Mapping[str, Any]] = None,
) -> collections.OrderedDict:
  """Runs many rounds in the current TFF context, sampling memory.

  Args:
    data_dir: The `shared/data` folder; None finds it.
    data: The task's data and client split.
    training: Client training.
    method: One of `sparse_tags.METHODS`.
    clients_per_round: Clients sampled per round.
    rounds: Rounds to run.
    sample_every: Sample memory every this many rounds (and before round 1
      and after the last).
    baseline_round: Growth is measured from the first sample at or after
      this round.
    seed: Seed of the sampling and the example order.
    output_dir: Gets `memory_growth.{json,md,png}`.
    target_percent: The growth allowed (each process).
    config: What defines the run (recorded in the JSON and the report).

  Returns:
    The results written to `memory_growth.json`: `config`, `samples`,
    `growth` (`growth_after`), `passed` (max growth < target),
    per-round `round_seconds` and `data_seconds`.
  """
  if sample_every < 1 or not 0 <= baseline_round <= rounds:
    raise ValueError(f'Need sample_every >= 1 and 0 <= baseline_round <= '
                     f'rounds, got {sample_every}, {baseline_round}, '
                     f'{rounds}.')
  task, process, data_fn = _prepare(data_dir, data, training, method, seed)
  state = process.initialize()
  samples = [memory_sample(0)]

  def after_round(round_num, record):
    del record
    if round_num % sample_every == 0 or round_num == rounds:
      samples.append(memory_sample(round_num))

  _, records = run_rounds(
      process, state, client_data_fn=data_fn, num_clients=len(task.clients),
      clients_per_round=clients_per_round, rounds=rounds, seed=seed,
      after_round=after_round)
  growth = growth_after(samples, baseline_round)
  summary = collections.OrderedDict(
      config=dict(config or {}),
      num_clients=len(task.clients),
      target_percent=target_percent,
      growth=growth,
      passed=bool(growth['max_percent'] < target_percent),
      samples=samples,
      round_seconds=[r['round_seconds'] for r in records],
      data_seconds=[r['data_seconds'] for r in records],
      machine=training_lib.machine_info())
  os.makedirs(output_dir, exist_ok=True)
  training_lib.write_json(os.path.join(output_dir, MEMORY_GROWTH_JSON),
                          summary)
  sentence = memory_growth_sentence(summary)
  table = memory_growth_table(samples)
  with open(os.path.join(output_dir, MEMORY_GROWTH_TABLE), 'w',
            encoding='utf-8') as f:
    f.write(f'# Resident memory over {rounds} rounds\n\n'
            + _config_line(config) + sentence + '\n\n' + table + '\n')
  write_memory_growth_plot(samples, growth['baseline_round'],
                           os.path.join(output_dir, MEMORY_GROWTH_PLOT))
  summary['markdown'] = sentence + '\n\n' + table
  return summary


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
