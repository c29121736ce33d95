"""The attack benchmark: attackers × weightings × defences, resumably.

Issue 25's point 3. For a task (`robustness_tasks`), every configuration

  weighting (num_examples, uniform, lorar) × defence (none, cap, robust,
  both; `attacks.DEFENCES`) × attack (`attacks.ATTACKS`) × number of
  attackers (1-3 of 8: clients 0..k-1, or the first k of the task's
  `attacker_order`) × seed

is one FedAvg run of `attacks.build_attacked_process`, plus per weighting,
defence and seed one run with every client honest. Each run records, per
round, the weights the clients sent and the attackers' total share of the
round's normalised weights (after the cap, `weight_cap.capped_shares`,
when the defence caps), and at the end the final model's L2 distance to
the honest run's (same weighting and seed, no defence), to the truth where
the task knows it, and the task's metric.

Runs are cached under their configuration (`training.run_cache`): running
the benchmark again reads finished runs back and runs only the others.

The target of the issue: with both defences, one attacker of eight gets at
most 2/N of the weight in every round, and the final model is at most twice
as far from the truth as the honest run's (`meets_target`).
"""

import collections
from collections.abc import Callable, Sequence
import dataclasses
import os
import time
from typing import Any, Optional

from absl import logging
import numpy as np

from tff_nlp.aggregators import weight_cap
from apps.robustness import attacks
from apps.robustness import tasks as robustness_tasks
from tff_nlp.training import release
from tff_nlp.training import run_cache

WEIGHTINGS = ('num_examples', 'uniform', 'lorar')
RUNS_DIR = 'runs'
MODEL_FILE = 'final_model.npy'
# The factor of the target: at most 2/N of the weight and at most 2× the
# honest run's distance to the truth.
TARGET_FACTOR = 2.0
# Float32 shares of a capped round can exceed the cap by rounding.
SHARE_TOLERANCE = 1e-5


@dataclasses.dataclass(frozen=True)
class Grid:
  """The configurations of one task.

  Attributes:
    weightings: Client weightings.
    defences: Defences of `attacks.DEFENCES`.
    attacks: Names of `attacks.ATTACKS`.
    num_attackers: Attacker counts (clients 0..k-1 attack).
    seeds: Seeds of the data (and model) of the runs.
    max_share: The cap of `attacks.CAPPED_DEFENCES`; None gives 2/N.
  """

  weightings: tuple[str, ...] = WEIGHTINGS
  defences: tuple[str, ...] = attacks.DEFENCES
  attacks: tuple[str, ...] = tuple(attacks.ATTACKS)
  num_attackers: tuple[int, ...] = (1, 2, 3)
  seeds: tuple[int, ...] = (0, 1, 2)
  max_share: Optional[float] = None

  def __post_init__(self):
    for name, valid in (('weightings', WEIGHTINGS),
                        ('defences', attacks.DEFENCES),
                        ('attacks', tuple(attacks.ATTACKS))):
      values = getattr(self, name)
      if not values or not set(values) <= set(valid) or len(
          set(values)) != len(values):
        raise ValueError(f'{name} must be distinct names from {list(valid)},'
                         f' got {list(values)}.')
    if not self.num_attackers or min(self.num_attackers) < 1:
      raise ValueError('num_attackers must be positive counts, got '
                       f'{list(self.num_attackers)}.')
    if not self.seeds:
      raise ValueError('seeds must not be empty.')

  def cap(self, num_clients: int) -> float:
    return self.max_share if self.max_share is not None else 2.0 / num_clients


def attacker_shares(weights: np.ndarray, attackers: Sequence[int], *,
                    capped: bool, max_share: float) -> float:
  """The attackers' total share of a round's normalised weights.

  Args:
    weights: The weights the clients sent, [N].
    attackers: Indices of the attackers.
    capped: Whether the defence caps the shares (`weight_cap.capped_shares`,
      the cap's own rule).
    max_share: The cap.

  Returns:
    Σ over attackers of their share (0 if every weight is 0).
  """
  weights = np.asarray(weights, np.float32)
  if capped:
    shares = np.asarray(weight_cap.capped_shares(weights, max_share))
  else:
    total = float(np.sum(weights, dtype=np.float64))
    shares = weights / total if total > 0 else np.zeros_like(weights)
  return float(np.sum(shares[list(attackers)], dtype=np.float64))


class _Processes:
  """Learning processes by (weighting, defence, seed), built once each."""

  def __init__(self, task, max_share: float):
    self._task, self._max_share = task, max_share
    self._processes = {}

  def get(self, weighting: str, defence: str, seed: int):
    key = (weighting, defence, seed)
    if key not in self._processes:
      self._processes[key] = attacks.build_attacked_process(
          self._task.model_fn(seed),
          weighting=weighting,
          client_optimizer_fn=self._task.client_optimizer(),
          model_aggregator=attacks.build_defence(
              defence, max_share=self._max_share),
          with_client_config=self._task.with_client_config,
          client_outputs=True)
    return self._processes[key]


def _run_rounds(task, process, *, attack: attacks.Attack,
                attackers: Sequence[int], seed: int, capped: bool,
                max_share: float):
  """Trains `task.rounds` rounds; returns (final weights, round records)."""
  state = process.initialize()
  records = []
  for round_num in range(1, task.rounds + 1):
    data = []
    for client_id in range(task.num_clients):
      client_attack = attack if client_id in attackers else attacks.HONEST
      data.append(attacks.attacked_client_data(
          task.client_data(seed, round_num, client_id, client_attack.data),
          client_attack))
    output = process.next(state, data)
    state = output.state
    metrics = output.metrics
    weights = np.array([float(c['weight']) for c in output.client_outputs])
    records.append(collections.OrderedDict(
        round=round_num,
        weights=weights.tolist(),
        attacker_share=attacker_shares(weights, attackers, capped=capped,
                                       max_share=max_share),
        train_loss=float(metrics['client_work']['train']['loss']),
        update_non_finite=int(metrics['finalizer']['update_non_finite']),
        # The defence's measurements: the robust aggregator's zeroing and
        # clipping norms and counts, the cap's shares before and after.
        aggregator=release.to_json_value(metrics['aggregator']),
    ))
  final = robustness_tasks.flatten_weights(
      process.get_model_weights(state).trainable)
  return final, records


def run_configuration(
    task, processes: _Processes, *, parent: str, weighting: str,
    defence: str, attack: str, num_attackers: int, seed: int,
    max_share: float,
) -> dict[str, Any]:
  """One cached run; `attack='honest'` with `num_attackers=0` is the honest.

  Returns:
    The run's results (also in `<run dir>/results.json`, its final model
    in `final_model.npy` beside it).
  """
  key = collections.OrderedDict(
      task=task.config(), weighting=weighting, defence=defence,
      attack=attack, num_attackers=num_attackers, seed=seed,
      max_share=max_share if defence in attacks.CAPPED_DEFENCES else None)
  if defence in ('trimmed', 'cap_trimmed'):
    key['trim_fraction'] = attacks.TRIM_FRACTION
  directory = run_cache.run_dir(
      parent, f'{weighting}-{defence}-{attack}-{num_attackers}-s{seed}', key)
  attack_spec = attacks.HONEST if attack == 'honest' else attacks.ATTACKS[
      attack]
  # The key names the attack; a run of an attack whose parameters have
  # changed since is run again (runs recorded before the parameters were,
  # without `attack_spec`, are taken as they are).
  spec = release.to_json_value(dataclasses.asdict(attack_spec))
  cached = run_cache.finished_results(
      directory, is_complete=lambda r: r.get('attack_spec', spec) == spec)
  if cached is not None:
    return cached
  # The first k of the task's attacker order (default: clients 0..k-1).
  order = getattr(task, 'attacker_order', None) or range(task.num_clients)
  attackers = list(order)[:num_attackers]
  start = time.monotonic()
  final, records = _run_rounds(
      task, processes.get(weighting, defence, seed), attack=attack_spec,
      attackers=attackers, seed=seed,
      capped=defence in attacks.CAPPED_DEFENCES, max_share=max_share)
  seconds = time.monotonic() - start
  metric = task.evaluate(seed, final)
  os.makedirs(directory, exist_ok=True)
  np.save(os.path.join(directory, MODEL_FILE), final)
  shares = [r['attacker_share'] for r in records]
  truth = task.truth()
  results = collections.OrderedDict(
      **key,
      attack_spec=spec,
      attackers=attackers,
      attacker_share_mean=float(np.mean(shares)),
      attacker_share_max=float(np.max(shares)),
      distance_to_truth=(None if truth is None
                         else float(np.linalg.norm(final - truth))),
      metric=metric,
      seconds=seconds,
      rounds=records,
      directory=os.path.basename(directory),
  )
  release.write_json(os.path.join(directory, run_cache.RESULTS_FILE), results)
  logging.info('%s %s %s x%d seed %d: share %.3f, %s, %.1f s', weighting,
               defence, attack, num_attackers, seed,
               results['attacker_share_max'], metric, seconds)
  return results


def _configurations(grid: Grid):
  """(weighting, defence, attack, k, seed), honest runs first.

  The honest runs without a defence, every other run's reference, are
  always among them.
  """
  honest_defences = ('none',) + tuple(d for d in grid.defences if d != 'none')
  for seed in grid.seeds:
    for weighting in grid.weightings:
      for defence in honest_defences:
        yield weighting, defence, 'honest', 0, seed
  for num_attackers in grid.num_attackers:
    for attack in grid.attacks:
      for seed in grid.seeds:
        for weighting in grid.weightings:
          for defence in grid.defences:
            yield weighting, defence, attack, num_attackers, seed


def run_grid(task, grid: Grid, output_dir: str, *,
             on_run: Optional[Callable[[dict[str, Any]], None]] = None
             ) -> list[dict[str, Any]]:
  """Runs (or reads back) every configuration of `grid` on `task`.

  Executes TFF computations in the current context. Each run is cached in
  `output_dir/runs/<name>-<digest>/`; the honest runs (every defence) come
  first, since every other run is compared with them.

  Args:
    task: A task of `robustness_tasks`.
    grid: The configurations.
    output_dir: The task's folder.
    on_run: Called with each run's row as it finishes (progress, reports).

  Returns:
    One row per run (the run's results without its rounds) with
    `distance_to_honest` (L2, to the honest run of its weighting and seed
    without defence), `truth_ratio` (its distance to the truth over that
    honest run's, for a task with a truth) and `meets_target`.
  """
  max_share = grid.cap(task.num_clients)
  processes = _Processes(task, max_share)
  parent = os.path.join(output_dir, RUNS_DIR)
  honest, rows = {}, []
  for weighting, defence, attack, k, seed in _configurations(grid):
    results = run_configuration(
        task, processes, parent=parent, weighting=weighting, defence=defence,
        attack=attack, num_attackers=k, seed=seed, max_share=max_share)
    final = np.load(os.path.join(parent, results['directory'], MODEL_FILE))
    if attack == 'honest' and defence == 'none':
      honest[(weighting, seed)] = (final, results)
    reference, reference_results = honest[(weighting, seed)]
    row = collections.OrderedDict(
        (name, value) for name, value in results.items() if name != 'rounds')
    row['distance_to_honest'] = float(np.linalg.norm(final - reference))
    if results['distance_to_truth'] is not None:
      row['truth_ratio'] = (results['distance_to_truth']
                            / reference_results['distance_to_truth'])
    else:
      row['truth_ratio'] = None
    row['meets_target'] = meets_target(row, task.num_clients)
    rows.append(row)
    if on_run is not None:
      on_run(row)
  return rows


def meets_target(row: dict[str, Any], num_clients: int) -> bool:
  """The issue's target for one run: share ≤ 2/N, distance ≤ 2× honest.

  Without a truth (R8, text-to-SQL) only the share is checked.
  """
  share_ok = row['attacker_share_max'] <= (
      TARGET_FACTOR * max(row['num_attackers'], 1) / num_clients
      + SHARE_TOLERANCE)
  ratio = row['truth_ratio']
  return bool(share_ok and (ratio is None or ratio <= TARGET_FACTOR))


# The grid of each task when the command line does not narrow it: the full
# grid where a run takes seconds; one attacker and one seed on R8; on
# text-to-SQL (a minute a run) one attacker, the three attacks that moved
# the regression's model furthest with both defences on, and the two
# weightings that use |D_i|. Every defence on every task.
DEFAULT_GRIDS = collections.OrderedDict(
    linear_regression=Grid(),
    r8=Grid(num_attackers=(1,), seeds=(0,)),
    text2sql=Grid(weightings=('num_examples', 'lorar'),
                  attacks=('sign_flip', 'label_flip', 'inflate_loss'),
                  num_attackers=(1,), seeds=(0,)),
)


def build_task(name: str, data_dir: Optional[str] = None):
  """The task `name` of `DEFAULT_GRIDS` with its benchmark settings."""
  if name == 'linear_regression':
    return robustness_tasks.LinearRegressionTask()
  if name == 'r8':
    return robustness_tasks.TextClassificationTask(data_dir=data_dir)
  if name == 'text2sql':
    # Imported here: it loads the text-to-SQL pipeline.
    from apps.robustness import text2sql_task as robustness_text2sql  # pylint: disable=g-import-not-at-top
    return robustness_text2sql.Text2SqlTask(data_dir=data_dir)
  raise ValueError(f'Unknown task {name!r}; expected one of '
                   f'{list(DEFAULT_GRIDS)}.')


def run_benchmark(
    tasks: Sequence[str], *, output_dir: str,
    report_dir: Optional[str] = None,
    seeds: Optional[Sequence[int]] = None,
    defences: Optional[Sequence[str]] = None,
    grids: Optional[dict[str, Grid]] = None,
    data_dir: Optional[str] = None,
    build_task_fn: Callable[..., Any] = build_task,
    report_every: int = 10,
    keep_reported: bool = True,
) -> dict[str, list[dict[str, Any]]]:
  """Runs each task's grid in turn and writes the reports.

  Executes TFF computations in the current context. Runs are cached under
  `output_dir/<task>/runs/`; the reports (`robustness_report.write_reports`:
  `results.json`, `tables.md`, a PNG per task) go to `report_dir` (default
  `output_dir`), rewritten every `report_every` new runs and at the end, so
  a long benchmark shows what has finished.

  Args:
    tasks: Names of `DEFAULT_GRIDS`, in order.
    output_dir: The cache of runs.
    report_dir: Where the reports go.
    seeds: If given, replaces every grid's seeds.
    defences: If given, replaces every grid's defences (names of
      `attacks.DEFENCES`).
    grids: Task name -> grid, replacing `DEFAULT_GRIDS`' for those tasks.
    data_dir: The `shared/data` folder (None: found as usual).
    build_task_fn: `(name, data_dir) -> task` (tests pass tiny tasks).
    report_every: Runs between two rewrites of the reports.
    keep_reported: Keep what `report_dir`'s reports hold that this run does
      not measure (`robustness_report.write_reports`): other tasks, and
      other configurations of a task with the same settings.

  Returns:
    Task name -> its rows (`run_grid`).
  """
  # Imported here: it loads matplotlib.
  from apps.robustness import report as robustness_report  # pylint: disable=g-import-not-at-top
  unknown = [t for t in tasks if t not in DEFAULT_GRIDS]
  if unknown or not tasks or len(set(tasks)) != len(tasks):
    raise ValueError(f'tasks must be distinct names from '
                     f'{list(DEFAULT_GRIDS)}, got {list(tasks)}.')
  report_dir = report_dir or output_dir
  grids = dict(DEFAULT_GRIDS, **(grids or {}))
  overrides = {field: tuple(values) for field, values in
               (('seeds', seeds), ('defences', defences)) if values}
  grids = {name: dataclasses.replace(grid, **overrides)
           for name, grid in grids.items()}
  built = collections.OrderedDict()
  rows = collections.OrderedDict()

  def report():
    robustness_report.write_reports(
        report_dir, built, rows,
        config=collections.OrderedDict(
            tasks=list(tasks),
            grids={name: dataclasses.asdict(grids[name]) for name in rows}),
        keep_reported=keep_reported)

  for name in tasks:
    built[name] = build_task_fn(name, data_dir)
    rows[name] = []

    def on_run(row, task_rows=rows[name]):
      task_rows.append(row)
      if len(task_rows) % report_every == 0:
        report()

    run_grid(built[name], grids[name], os.path.join(output_dir, name),
             on_run=on_run)
    report()
  return rows
