"""Clients-per-round scaling of the tag task (see `scaling`).

For each clients-per-round setting (`measure_clients_per_round`), warm-up
rounds and then timed rounds of `scaling.run_rounds`: the median round time,
the time per client, and the peak resident memory (`VmHWM`) of the Python
process and of each TFF worker. A peak since process start is only the
setting's own if the setting has the processes to itself, so
`python -m apps.scaling.bin.client_scaling` runs every setting in a fresh child
process (with fresh workers) and this module collects them
(`subprocess_measure`). `fit_scaling` checks the growth of round time: the
time ratio of the largest to the smallest setting against their clients
ratio, and the slope of log(time) on log(clients) (1 is linear).
"""

import collections
import dataclasses
from collections.abc import Callable, Mapping, Sequence
import json
import os
import subprocess
import sys
import time
from typing import Any, Optional

from matplotlib import ticker
import numpy as np

from tff_nlp import training as training_lib
from apps.scaling import scaling
from tff_nlp.data import population as population_lib
from apps.partial_models import tag_experiment as sparse_tags
from tff_nlp.runtime import memory


CLIENT_SCALING_JSON = 'client_scaling.json'
CLIENT_SCALING_TABLE = 'client_scaling.md'
CLIENT_SCALING_PLOT = 'client_scaling.png'
SETTINGS_DIR = 'settings'


# Measures one setting: (method, clients_per_round) -> its record (as
# `measure_clients_per_round` returns it, or with an 'error').
MeasureFn = Callable[[str, int], Mapping[str, Any]]
# Called after each round with (round_num, round record).


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
    population: Optional[population_lib.PopulationConfig] = None,
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
    population: If set, the clients are this simulated population, their
      datasets built in the worker from their ids (`scaling.prepare_run`).

  Returns:
    The setting, the timed rounds' `round_seconds` and `data_seconds` and
    their medians, `seconds_per_client` (median round time per client), a
    memory snapshot before the first round and after the last
    (`memory.Snapshot.to_dict`), and the peaks `python_peak_bytes` and
    `workers_peak_bytes` (summed over the workers). With a population, also
    `pipeline_seconds`, `pipeline_seconds_per_client` and
    `pipeline_examples`: building the first timed round's users' datasets in
    the worker alone, without training (`sparse_tags.population_pipeline`).
  """
  if rounds < 1 or warmup_rounds < 0:
    raise ValueError(f'Need rounds >= 1 and warmup_rounds >= 0, got '
                     f'{rounds} and {warmup_rounds}.')
  run = scaling.prepare_run(data_dir, data, training, method, seed,
                            population)
  num_clients, process, data_fn = (run.num_clients, run.process,
                                   run.client_data_fn)
  if not 1 <= clients_per_round <= num_clients:
    raise ValueError(f'clients_per_round must be in 1..{num_clients} (the '
                     f'clients of the task), got {clients_per_round}.')
  state = process.initialize()
  before = memory.snapshot()
  _, records = scaling.run_rounds(
      process, state, client_data_fn=data_fn, num_clients=num_clients,
      clients_per_round=clients_per_round, rounds=warmup_rounds + rounds,
      seed=seed)
  after = memory.snapshot()
  pipeline = {}
  if population is not None:  # After the snapshot: the peaks are the rounds'.
    pipeline = _time_population_pipeline(
        sparse_tags.simulated_population(run.task, training, population),
        data_fn(0, training_lib.sample_clients(
            num_clients, clients_per_round, seed=seed,
            round_num=warmup_rounds + 1)))
  timed = records[warmup_rounds:]
  round_seconds = [r['round_seconds'] for r in timed]
  median = float(np.median(round_seconds))
  return collections.OrderedDict(
      method=method,
      clients_per_round=clients_per_round,
      num_clients=num_clients,
      population=(None if population is None
                  else dataclasses.asdict(population)),
      rounds=rounds,
      warmup_rounds=warmup_rounds,
      round_seconds=round_seconds,
      data_seconds=[r['data_seconds'] for r in timed],
      sample_seconds_median=float(np.median([r['sample_seconds']
                                             for r in timed])),
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
      **pipeline,
      machine=training_lib.machine_info())


def _time_population_pipeline(population, user_ids) -> dict[str, Any]:
  """Times building the users' datasets in the worker, without training.

  `user_ids` are the first timed round's users; their datasets are built
  (and their examples counted) once untimed for ten of them, then timed for
  all.
  """
  pipeline = sparse_tags.population_pipeline(population)
  pipeline(user_ids[:10])  # Tracing and the worker's first call.
  start = time.perf_counter()
  examples = int(pipeline(user_ids))
  seconds = time.perf_counter() - start
  return dict(pipeline_seconds=seconds,
              pipeline_seconds_per_client=seconds / len(user_ids),
              pipeline_examples=examples)


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


def _milliseconds(seconds: Optional[float]) -> str:
  return '–' if seconds is None else f'{1000 * seconds:.1f}'


def client_scaling_table(settings: Sequence[Mapping[str, Any]]) -> str:
  """Markdown: one row per (method, clients per round)."""
  mib = scaling.format_mib
  lines = [
      '| method | clients / round | round s (median) | ms / client '
      '| data s (median) | sampling ms | data in worker ms / client '
      '| Python peak MiB | Python MiB before rounds | worker peak MiB '
      '| workers |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for s in settings:
    head = f'| {s["method"]} | {s["clients_per_round"]:,} '
    if 'error' in s:
      lines.append(head + f'| failed: {s["error"]} |' + ' |' * 8)
      continue
    lines.append(
        head
        + f'| {s["round_seconds_median"]:.3f} '
        f'| {1000 * s["seconds_per_client"]:.2f} '
        f'| {s["data_seconds_median"]:.3f} '
        f'| {_milliseconds(s.get("sample_seconds_median"))} '
        f'| {_milliseconds(s.get("pipeline_seconds_per_client"))} '
        f'| {mib(s["python_peak_bytes"])} '
        f'| {mib(s["memory_before_rounds"]["python"]["rss_bytes"])} '
        f'| {mib(s["workers_peak_bytes"] if s["num_workers"] else None)} '
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


def write_client_scaling_plot(settings: Sequence[Mapping[str, Any]],
                              path: str) -> None:
  """Round time and peak memory against clients per round, log-log."""
  fig, (time_axis, memory_axis) = scaling.new_figure(2)
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
    memory_axis.plot(n, [s['python_peak_bytes'] / scaling.MIB for s in rows],
                     marker='o', label=f'{method}: Python')
    if all(s['num_workers'] for s in rows):
      memory_axis.plot(n, [s['workers_peak_bytes'] / scaling.MIB for s in rows],
                       marker='s', label=f'{method}: worker(s)')
  for axis, label in ((time_axis, 'round time (s, median)'),
                      (memory_axis, 'peak resident memory (MiB)')):
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
  summary['markdown'] = write_client_scaling_report(summary, output_dir)
  return summary


def write_client_scaling_report(summary: Mapping[str, Any],
                                output_dir: str) -> str:
  """`client_scaling.{json,md,png}` of a run; returns table + sentences."""
  training_lib.write_json(os.path.join(output_dir, CLIENT_SCALING_JSON),
                          {k: v for k, v in summary.items()
                           if k != 'markdown'})
  settings, config = summary['settings'], summary.get('config')
  table = client_scaling_table(settings)
  sentences = [_fit_sentence(m, f) for m, f in summary['fits'].items()]
  num_clients = next((s['num_clients'] for s in settings
                      if 'num_clients' in s), None)
  with open(os.path.join(output_dir, CLIENT_SCALING_TABLE), 'w',
            encoding='utf-8') as f:
    f.write('# Round time and peak memory against clients per round\n\n'
            + scaling.config_line(config)
            + scaling.workload_section(
                dict(config or {}, method=', '.join(dict.fromkeys(
                    s['method'] for s in settings))), num_clients) + table
            + '\n\n' + ''.join(f'* {s}\n' for s in sentences))
  if any('error' not in s for s in settings):
    write_client_scaling_plot(
        settings, os.path.join(output_dir, CLIENT_SCALING_PLOT))
  return table + '\n\n' + '\n'.join(sentences)


def rewrite_client_scaling_report(output_dir: str) -> str:
  """The report again from its `client_scaling.json`, measuring nothing."""
  with open(os.path.join(output_dir, CLIENT_SCALING_JSON),
            encoding='utf-8') as f:
    summary = json.load(f, object_pairs_hook=collections.OrderedDict)
  return write_client_scaling_report(summary, output_dir)
