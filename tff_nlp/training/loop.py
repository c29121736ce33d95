"""A resumable federated training loop built from `tff.program` pieces.

`run_training` drives any `tff.learning.templates.LearningProcess` round by
round and, in `output_dir`:

*   saves the process state with a `tff.program.FileProgramStateManager`
    (`checkpoints/round_<N>`) every `checkpoint_every` rounds, at round 0 (the
    initial state) and at the last round;
*   releases each round's metrics (training metrics, evaluation metrics when
    due, the bytes each client downloaded and uploaded under `communication`
    (`analysis.communication`), and wall times: keys ending in `_seconds`,
    the only values that differ between two runs with the same seed, and
    what the caller's `round_metrics_fn` adds, e.g. a DP run's ε) to
    TensorBoard (`tff.program.TensorBoardReleaseManager`), to `metrics.csv`
    (`tff.program.CSVFileReleaseManager`) and, with the per-client outputs
    a process's `next` returns (`client_outputs`, e.g. an `FLProcess`), to
    `metrics.jsonl`;
*   shows a progress bar (round, elapsed time, ETA, latest loss) when stderr
    is a terminal.

A process with stateful clients runs in a
`tff_nlp.templates.stateful_clients.SimulationProcess`, whose state holds
the clients' states; a continual-learning run (`TaskSchedule`) also starts
and ends its tasks in the loop: every `rounds_per_task` rounds, with their
records in the round's.

Running the same call again after the process died resumes after the latest
checkpoint. Rounds between that checkpoint and the death are run again and
their records replaced, so `metrics.csv` and `metrics.jsonl` hold each round
exactly once; with per-round client data that depends only on the round
number (as `client_data_fn` must provide), the final model equals that of an
uninterrupted run. A checkpoint whose saving the death interrupted is removed
(`_remove_unfinished_checkpoints`).
"""

import asyncio
from collections.abc import Callable, Mapping, Sequence
import concurrent.futures
import dataclasses
import os
import re
import shutil
import sys
import time
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow_federated as tff
import tqdm

from tff_nlp import errors
from tff_nlp.analysis import communication as communication_lib
from tff_nlp.training import release

CHECKPOINT_DIR = 'checkpoints'
CHECKPOINT_PREFIX = 'round_'
# `tff.program.FileProgramStateManager` writes checkpoint `round_<N>` to
# `round_<N>_temp<random digits>` and renames that folder when it is complete
# (`tff.program`'s `file_utils.write_saved_model`). A death in between leaves
# the temp folder: its name is no version to `get_versions`, so resuming
# ignores it, and the next save of round N picks another temp name; but
# nothing ever deletes it, and it can be as large as a checkpoint.
_UNFINISHED_CHECKPOINT = re.compile(
    rf'{re.escape(CHECKPOINT_PREFIX)}\d+_temp\d+')
METRICS_CSV = 'metrics.csv'
METRICS_JSONL = 'metrics.jsonl'
# The metric in which a process whose clients upload a variable number of
# rows (partial models) reports the round's total; see
# `analysis.communication`.
ROWS_RECEIVED_METRIC = 'rows_received'
TENSORBOARD_DIR = 'tensorboard'

# The arguments of `client_data_fn`: the round number (1-based) and the ids
# of the clients sampled for it; it returns their data, in that order.
ClientDataFn = Callable[[int, Sequence[int]], list[Any]]
# Maps global model weights to named evaluation metrics.
EvaluateFn = Callable[[tff.learning.models.ModelWeights], Mapping[str, Any]]
# Maps a round number (1-based) to metrics known outside the process, e.g.
# the privacy spent after that many rounds (`analysis.privacy`).
RoundMetricsFn = Callable[[int], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class TaskSchedule:
  """The task boundaries of a continual-learning run.

  Round r (1-based) is a round of task `(r - 1) // rounds_per_task`. Before
  a task's first round the loop calls `start_task(task, state)`, which
  returns the new state and metrics; after its last, `end_task(task, state,
  train_metrics)` (the last round's metrics), which returns metrics (e.g.
  every client's accuracy on the tasks it has learned). Each round's record
  holds its `task`, and at the boundaries `task_start` / `task_end` with
  their wall times `task_start_seconds` / `task_end_seconds`. The state a
  checkpoint holds is the round's, so a resumed run starts a task anew only
  when the checkpoint ended the previous one.

  Attributes:
    rounds_per_task: Rounds of every task.
    start_task: `(task, state) -> (state, metrics)`.
    end_task: `(task, state, train_metrics) -> metrics`.
  """

  rounds_per_task: int
  start_task: Callable[[int, Any], tuple[Any, Mapping[str, Any]]]
  end_task: Callable[[int, Any, Any], Mapping[str, Any]]

  def __post_init__(self):
    if (not isinstance(self.rounds_per_task, (int, np.integer))
        or self.rounds_per_task < 1):
      raise ValueError('rounds_per_task must be an integer >= 1, got '
                       f'{self.rounds_per_task!r}.')


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """How many rounds to run and what to do around them.

  Attributes:
    rounds: Total training rounds (a resumed run continues up to this).
    clients_per_round: Clients sampled each round, without replacement and
      seeded by `(seed, round)`; 0 takes every client every round.
    seed: Seed of the client sampling.
    checkpoint_every: Save the state every this many rounds (and at the last).
    eval_every: Evaluate every this many rounds; 0 evaluates only the initial
      and the final model. Ignored without an `evaluate_fn`.
    progress: Show a progress bar; None shows it when stderr is a terminal.
    evaluate_initial: Evaluate the initial model (round 0). False saves an
      evaluation whose answer is known (an untrained model), which costs
      most when it decodes: it never stops before the maximum length.
  """

  rounds: int
  clients_per_round: int = 0
  seed: int = 0
  checkpoint_every: int = 1
  eval_every: int = 0
  progress: Optional[bool] = None
  evaluate_initial: bool = True

  def __post_init__(self):
    for name, minimum in (('rounds', 1), ('clients_per_round', 0),
                          ('checkpoint_every', 1), ('eval_every', 0)):
      value = getattr(self, name)
      if not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f'{name} must be an integer >= {minimum}, got '
                         f'{value!r}.')


@dataclasses.dataclass
class TrainingRun:
  """What `run_training` did.

  Attributes:
    state: The learning process state after the last round.
    resumed_from: The checkpointed round the run resumed from; 0 for a run
      that started from the initial state.
    records: Every round's record from `metrics.jsonl` (round 0 holds the
      initial evaluation, if any), including rounds run before a resume.
  """

  state: Any
  resumed_from: int
  records: list[dict[str, Any]]


def sample_clients(
    num_clients: int, clients_per_round: int, *, seed: int, round_num: int
) -> list[int]:
  """The sorted ids of the clients of a round, a function of the round only.

  Args:
    num_clients: Number of clients to sample from (ids `0..num_clients-1`).
    clients_per_round: How many to take; 0 (or `>= num_clients`) takes all.
    seed: The run's seed.
    round_num: The round.

  Returns:
    Sorted client ids.
  """
  if num_clients < 1:
    raise ValueError(f'num_clients must be positive, got {num_clients}.')
  if clients_per_round == 0 or clients_per_round >= num_clients:
    return list(range(num_clients))
  rng = np.random.default_rng((seed, round_num))
  return sorted(
      int(i) for i in rng.choice(num_clients, clients_per_round, replace=False)
  )


def _run_sync(coroutine):
  """Runs a `tff.program` coroutine, also from inside a running event loop.

  The coroutine runs on a private event loop, never installed as the
  thread's current loop: `asyncio.run` would leave the main thread with no
  current loop, after which TFF's `tff.simulation.run_training_process`
  (which calls `asyncio.get_event_loop()`) fails. Jupyter kernels run cells
  inside an event loop, where a second loop cannot run in the same thread;
  there the coroutine runs in a helper thread.
  """
  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return _run_on_private_loop(coroutine)
  with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
    return pool.submit(_run_on_private_loop, coroutine).result()


def _run_on_private_loop(coroutine):
  loop = asyncio.new_event_loop()
  try:
    return loop.run_until_complete(coroutine)
  finally:
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


async def _gather(*coroutines):
  return await asyncio.gather(*coroutines)


def _find_metric(metrics, name: str) -> Optional[float]:
  """The first value named `name` in nested metrics (depth first), if any."""
  if isinstance(metrics, Mapping):
    if name in metrics:
      return float(metrics[name])
    for value in metrics.values():
      found = _find_metric(value, name)
      if found is not None:
        return found
  return None


def _latest_loss(metrics) -> Optional[float]:
  try:
    return float(metrics['client_work']['train']['loss'])
  except (KeyError, TypeError, ValueError):
    return None


class _Progress:
  """A tqdm bar over rounds, or nothing when disabled."""

  def __init__(self, *, enabled, total, initial, description):
    self._bar = tqdm.tqdm(
        total=total, initial=initial, unit='round', desc=description,
        file=sys.stderr, disable=not enabled, dynamic_ncols=True)

  def update(self, metrics) -> None:
    loss = _latest_loss(metrics)
    if loss is not None:
      self._bar.set_postfix(loss=f'{loss:.4f}', refresh=False)
    self._bar.update(1)

  def close(self) -> None:
    self._bar.close()


def _remove_unfinished_checkpoints(checkpoint_dir: str) -> None:
  """Deletes the checkpoints a death left half-written in `checkpoint_dir`.

  Only one process trains in a run directory, so before its first save no
  save is under way: every temp folder is a dead process's.
  """
  for name in sorted(os.listdir(checkpoint_dir)):
    path = os.path.join(checkpoint_dir, name)
    if _UNFINISHED_CHECKPOINT.fullmatch(name) and os.path.isdir(path):
      shutil.rmtree(path)
      logging.info('Removed %s: an unfinished checkpoint, left by a run '
                   'killed while saving it.', path)


def _load_latest_checkpoint(state_manager, root_dir, template, rounds):
  """(state, version) of the latest checkpoint, or (None, 0) if none."""
  versions = _run_sync(state_manager.get_versions())
  if not versions:
    return None, 0
  version = max(versions)
  path = os.path.join(root_dir, f'{CHECKPOINT_PREFIX}{version}')
  if version > rounds:
    raise errors.CheckpointError(
        f'{path}: the run already has {version} rounds, more than the '
        f'{rounds} asked for. Ask for at least {version} rounds, or use '
        'another output directory.')
  try:
    state = _run_sync(state_manager.load(version, template))
  except Exception as e:  # pylint: disable=broad-except
    # Whatever TF or TFF raises for a damaged SavedModel, the user needs the
    # path; the checkpoint is left as it is, never overwritten.
    raise errors.CheckpointError(
        f'{path}: the checkpoint cannot be loaded ({type(e).__name__}: '
        f'{str(e).splitlines()[0] if str(e) else ""}). It was left untouched: '
        'move it away to resume from an earlier checkpoint, or use another '
        'output directory.') from e
  return state, version


def check_clients_per_round(config: LoopConfig, num_clients: int) -> None:
  """Refuses `config.clients_per_round` > `num_clients` (`InputError`).

  `run_training` checks it; an experiment checks it too once it knows its
  clients, before its run starts (`training.prepare_run_dir`).
  """
  if config.clients_per_round > num_clients:
    raise errors.InputError(
        f'clients_per_round={config.clients_per_round} is more than the '
        f'{num_clients} clients of this run; use 1 to {num_clients}, or 0 '
        'for every client in every round.')


def run_training(
    process: tff.learning.templates.LearningProcess,
    *,
    client_data_fn: ClientDataFn,
    num_clients: int,
    config: LoopConfig,
    output_dir: str,
    evaluate_fn: Optional[EvaluateFn] = None,
    tensorboard_dir: Optional[str] = None,
    description: Optional[str] = None,
    initial_model_weights: Optional[tff.learning.models.ModelWeights] = None,
    tasks: Optional[TaskSchedule] = None,
    round_metrics_fn: Optional[RoundMetricsFn] = None,
) -> TrainingRun:
  """Trains `process` for `config.rounds` rounds, resuming if checkpointed.

  Executes TFF computations in the current context (e.g. inside `with
  tff_nlp.runtime.local_cpp_context():`).

  Args:
    process: The learning process. If its `next`'s output has
      `client_outputs` (an `algorithms.FLProcess`, e.g.
      `build_fl_process(..., client_outputs=True)`), those simulation-only
      per-client outputs are recorded in `metrics.jsonl`.
      Or an `templates.stateful_clients.SimulationProcess`, which keeps
      clients' states in the loop's state (its `next` is Python around the
      federated round `round_computation_for(state)`).
    client_data_fn: `(round_num, client_ids) -> [client data]`. For exact
      resumption it must depend only on its arguments (e.g. seed the example
      order with `(seed, round_num, client_id)`).
    num_clients: Number of clients `client_data_fn` can serve.
    config: Rounds, sampling, checkpoint and evaluation cadence, progress.
    output_dir: Where checkpoints and metrics go (created if missing).
    evaluate_fn: Evaluates global model weights; its metrics are recorded
      under `eval` for round 0 (initial model), every `config.eval_every`
      rounds and the last round.
    tensorboard_dir: TensorBoard log directory; `output_dir/tensorboard` if
      None.
    description: Label of the progress bar.
    initial_model_weights: Global model weights to start from (e.g. a
      pre-trained model) instead of the process's initial ones; ignored when
      resuming from a checkpoint.
    tasks: The task boundaries of a continual-learning run, if any.
    round_metrics_fn: If given, `round_metrics_fn(round_num)` is added to
      each round's record (its keys next to `train`, e.g. `privacy`, the ε
      of a DP run after the round).

  Returns:
    A `TrainingRun` with the final state and every round's record.

  Raises:
    InputError: If `config.clients_per_round` is more than `num_clients`.
    CheckpointError: If the latest checkpoint cannot be loaded or holds more
      rounds than `config.rounds`.
  """
  check_clients_per_round(config, num_clients)
  checkpoint_dir = os.path.join(output_dir, CHECKPOINT_DIR)
  state_manager = tff.program.FileProgramStateManager(
      checkpoint_dir, prefix=CHECKPOINT_PREFIX, keep_total=3, keep_first=True)
  scalar_managers = [
      tff.program.TensorBoardReleaseManager(
          tensorboard_dir or os.path.join(output_dir, TENSORBOARD_DIR)),
      tff.program.CSVFileReleaseManager(os.path.join(output_dir, METRICS_CSV)),
  ]
  jsonl_manager = release.JsonLinesReleaseManager(
      os.path.join(output_dir, METRICS_JSONL))

  def publish(record, jsonl_extra, round_num):
    _run_sync(_gather(
        *[m.release(record, key=round_num) for m in scalar_managers],
        jsonl_manager.release({**record, **jsonl_extra}, key=round_num)))

  def evaluate(state):
    return dict(evaluate_fn(process.get_model_weights(state)))

  _remove_unfinished_checkpoints(checkpoint_dir)
  template = process.initialize()
  state, resumed_from = _load_latest_checkpoint(
      state_manager, checkpoint_dir, template, config.rounds)
  if state is not None:
    logging.info('%s: resuming after round %d.', output_dir, resumed_from)
  else:
    state = template
    if initial_model_weights is not None:
      state = process.set_model_weights(state, initial_model_weights)
    if evaluate_fn is not None and config.evaluate_initial:
      publish({'eval': evaluate(state)}, {}, 0)
    _run_sync(state_manager.save(state, 0))

  # By round computation: a process with stateful clients can run another
  # one in another task (FCL's first task also trains the embedding).
  traffics = {}

  def traffic_of(state):
    # A process whose `next` is Python around a federated round (a
    # `stateful_clients.SimulationProcess`) names that round.
    computation = (process.round_computation_for(state)
                   if hasattr(process, 'round_computation_for')
                   else process.next)
    if id(computation) not in traffics:
      traffics[id(computation)] = (
          computation, communication_lib.round_communication(computation))
    return traffics[id(computation)][1]
  progress = _Progress(
      enabled=sys.stderr.isatty() if config.progress is None
      else config.progress,
      total=config.rounds, initial=resumed_from, description=description)
  try:
    for round_num in range(resumed_from + 1, config.rounds + 1):
      client_ids = sample_clients(num_clients, config.clients_per_round,
                                  seed=config.seed, round_num=round_num)
      client_data = client_data_fn(round_num, client_ids)
      task_record = {}
      if tasks is not None:
        task, task_round = divmod(round_num - 1, tasks.rounds_per_task)
        task_record['task'] = task
        if task_round == 0:
          task_start = time.perf_counter()
          state, task_record['task_start'] = tasks.start_task(task, state)
          task_record['task_start_seconds'] = (time.perf_counter()
                                               - task_start)
      traffic = traffic_of(state)
      start = time.perf_counter()
      output = process.next(state, client_data)
      client_outputs = getattr(output, 'client_outputs', None)
      state = output.state
      record = {'train': output.metrics,
                'round_seconds': time.perf_counter() - start,
                'communication': traffic.round_metrics(
                    num_clients=len(client_ids),
                    rows_received=_find_metric(output.metrics,
                                               ROWS_RECEIVED_METRIC)),
                **task_record}
      if round_metrics_fn is not None:
        record.update(round_metrics_fn(round_num))
      if tasks is not None and round_num % tasks.rounds_per_task == 0:
        task_end = time.perf_counter()
        record['task_end'] = tasks.end_task(task_record['task'], state,
                                            output.metrics)
        record['task_end_seconds'] = time.perf_counter() - task_end
      is_last = round_num == config.rounds
      if evaluate_fn is not None and (is_last or (
          config.eval_every and round_num % config.eval_every == 0)):
        eval_start = time.perf_counter()
        record['eval'] = evaluate(state)
        record['eval_seconds'] = time.perf_counter() - eval_start
      jsonl_extra = {'client_ids': client_ids}
      if client_outputs is not None:
        jsonl_extra['client_outputs'] = client_outputs
      # Records first, checkpoint second: a death in between replays the
      # round on resume, which replaces its records.
      publish(record, jsonl_extra, round_num)
      if is_last or round_num % config.checkpoint_every == 0:
        _run_sync(state_manager.save(state, round_num))
      progress.update(output.metrics)
  finally:
    progress.close()
  return TrainingRun(
      state=state,
      resumed_from=resumed_from,
      records=release.read_json_lines(jsonl_manager.path),
  )
