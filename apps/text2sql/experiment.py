"""Federated text-to-SQL: one run of finetuning, centralized or federated.

Reproduces the protocol of Zhang et al., "Federated Learning for Semantic
Parsing: Task Formulation, Evaluation Setup, New Algorithms", ACL 2023
(arXiv 2305.17221; `shared/docs/lorar.md`) on the task of
`apps.text2sql.task` (data and configurations) and
`apps.text2sql.process` (parsers, processes, client data). Three
paradigms:

*   `finetune`: one model per client, trained on its own data, selected on
    its own dev set;
*   `centralized`: one model trained on the union of the training sets,
    selected on the merged dev set;
*   `federated`: FedAvg / FedOPT / FedProx with a client weighting
    (`num_examples`, `uniform`, `loss_reduction`, `lorar`), every client in
    every round with its own local epochs, learning rate and batch size;
    the global model is evaluated on the merged dev set every `eval_every`
    rounds.

In every paradigm the model with the best dev exact match is evaluated on
every client's test set (exact match, and execution accuracy where a SQLite
database exists). Teacher-forced token loss and accuracy
(`seq2seq_examples.make_token_metrics_fn`) are recorded beside them, on dev
at every evaluation and on test at the end: they separate models whose exact
match is still 0.

All three paradigms run through the same resumable loop
(`tff_nlp.training.run_training`) and the same TFF learning process
(`text2sql_process.build_process`), which gives them checkpoints, resume and
metrics for free.

A run is a `Text2SqlSpec` (`apps.text2sql.spec`: data, model, training,
loop and options) given to `run_text2sql` with where to read and write;
`apps.text2sql.run_results` scores the selected models and writes the
results.
"""

import collections
import dataclasses
import json
import os
import time
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import training as training_lib
from apps.text2sql import vocab_sliced
from tff_nlp.data import text2sql_source
from apps.text2sql import start as text2sql_start
from tff_nlp.metrics import text2sql as text2sql_metrics
from tff_nlp.models import seq2seq
from apps.text2sql import task as text2sql_task
from apps.text2sql import task_data as text2sql_task_data
from apps.text2sql import process as text2sql_process
from apps.text2sql import run_results
from apps.text2sql import spec as spec_lib

Text2SqlSpec = spec_lib.Text2SqlSpec

# The run layout that `init_from` reads (`text2sql_start`).
TOKENIZER_DIR = text2sql_start.TOKENIZER_DIR
BEST_CHECKPOINT_DIR = text2sql_start.BEST_CHECKPOINT_DIR
BEST_CHECKPOINT_PREFIX = text2sql_start.BEST_CHECKPOINT_PREFIX
INIT_FROM_FREE_FIELDS = text2sql_start.INIT_FROM_FREE_FIELDS
BEST_MODEL_FILE = 'best_model.npz'
BEST_MODEL_INFO_FILE = 'best_model.json'
# What `run_results` writes.
RESULTS_FILE = run_results.RESULTS_FILE
TABLE_FILE = run_results.TABLE_FILE
PREDICTIONS_DIR = run_results.PREDICTIONS_DIR
LOSS_PLOT_FILE = run_results.LOSS_PLOT_FILE
DEV_PLOT_FILE = run_results.DEV_PLOT_FILE
DEV_METRIC = run_results.DEV_METRIC
write_plots = run_results.write_plots


class _DevEvaluator:
  """Dev exact match of global weights; keeps the best weights on disk.

  The best is the last evaluation with the highest dev EM: a tie goes to the
  more trained model (so a run whose dev EM stays 0 does not select its
  untrained initial model). The best EM and its weights survive a restart,
  so a resumed run selects the same model as an uninterrupted one.
  """

  def __init__(self, task, unit, parser, run_dir):
    self._task = task
    self._dev_clients = list(unit.dev_clients)
    self._dev_parts = [task.splits[c]['dev'] for c in unit.dev_clients]
    self._dev = text2sql_task.concatenate(self._dev_parts)
    self._parser = parser
    self._keras_model = self._predict = self._token_metrics_fn = None
    self._weights_path = os.path.join(run_dir, BEST_MODEL_FILE)
    self._info_path = os.path.join(run_dir, BEST_MODEL_INFO_FILE)
    self.best = -1.0
    if os.path.exists(self._info_path):
      with open(self._info_path) as f:
        self.best = json.load(f)[DEV_METRIC]

  def scorer(self):
    """(Keras model, predictor, token metrics fn) this evaluator scores with.

    Built on first use, after the learning process: a Keras model built
    before TFF traces `model_fn` fails when first called in a tf.function
    afterwards ("invalid state", a v1 layer). The unit's test scoring
    reuses them (every weight of either parser is trainable, so
    `load_best` sets the whole model): building and tracing them again
    costs more than a small run's rounds.
    """
    if self._keras_model is None:
      self._keras_model = self._parser.keras_model()
      self._predict = self._parser.predictor(self._keras_model)
      self._token_metrics_fn = self._parser.metrics_fn(self._keras_model)
    return self._keras_model, self._predict, self._token_metrics_fn

  def __call__(self, model_weights):
    self.scorer()
    self._parser.assign_weights(model_weights, self._keras_model)
    # Client by client: a batch then holds one client's SQL, of similar
    # lengths, and stops decoding when its longest output ends.
    predictions = [p for client, part in zip(self._dev_clients,
                                             self._dev_parts)
                   for p in self._predict(client, part)]
    correct = sum(text2sql_metrics.exact_match(p, g)
                  for p, g in zip(predictions, self._dev.gold_sql))
    em = correct / len(self._dev)
    tokens = self._token_metrics_fn(self._dev)
    if em >= self.best:
      self.best = em
      weights = [np.asarray(w) for w in
                 tf.nest.flatten(model_weights.trainable)]
      temp = self._weights_path + '.tmp.npz'
      np.savez(temp, *weights)
      os.replace(temp, self._weights_path)
      with open(self._info_path, 'w') as f:
        json.dump({DEV_METRIC: em}, f)
    return collections.OrderedDict(
        [(DEV_METRIC, em), ('dev_correct', correct),
         ('dev_examples', len(self._dev)),
         ('dev_token_loss', tokens['token_loss']),
         ('dev_token_accuracy', tokens['token_accuracy'])])

  def load_best(self, keras_model) -> None:
    with np.load(self._weights_path) as best:
      arrays = [best[f'arr_{i}'] for i in range(len(best.files))]
    for variable, value in zip(keras_model.trainable_weights, arrays):
      variable.assign(value)


def run_text2sql(
    spec: spec_lib.Text2SqlSpec,
    *,
    data_dir: Optional[str],
    output_dir: str,
    processes: Optional[training_lib.ProcessCache] = None,
    restart: bool = False,
) -> dict[str, Any]:
  """Trains and evaluates one method of the paper's Table 2.

  Writes to `output_dir`: `config.json`, `tokenizer/`, one run directory per
  trained model (`federated/`, `centralized/` or `finetune/<client>/`, each
  with checkpoints, metrics, `best_model.npz`), `predictions/<client>.jsonl`
  (each test example's prediction, exact match and teacher-forced
  `correct_tokens` of its `tokens`), `results.json`, `results.md` (Table 2
  layout, the paper's numbers beside ours), `dev_exact_match.png` and, for
  federated runs, `training_loss.png`. Running it again resumes; another
  experiment, or changed data files (`data_fingerprint.json`: the clients'
  `<client>.json` and `<client>-schema.csv` read), is refused. `config.json`
  and `data_fingerprint.json` are written once the data is read and the
  parser built, so a call refused before leaves nothing behind.

  `results.json` holds the test exact match and execution accuracy per
  client with MacroAvg and MicroAvg (`test`), and
  `test_exact_match_bootstrap_ci95`: their 95 % percentile bootstrap
  intervals over the test examples (`tff_nlp.metrics.bootstrap.bootstrap_accuracy`, as
  fractions). One run is one seed; `text2sql_benchmark` aggregates seeds.
  `seconds` is the run's wall time: this call's, plus, for a run resumed
  from a checkpoint, the recorded round and evaluation times of the rounds
  before it (`seconds_before_resume`; earlier processes' start-up is not
  recorded, so not counted).
  A differentially private run (`spec.aggregation`) also records its ε:
  after each round in the round's record (`privacy`), and after the run
  under `privacy` (with δ, the noise multiplier, clients per round,
  population, rounds and the accountant).

  Args:
    spec: The run: data, model, training, loop and options
      (`spec.Text2SqlSpec`, which refuses options that do not fit
      together).
    data_dir: The `shared/data` (or text2sql) folder; None finds it.
    output_dir: The run directory.
    processes: Learning processes built by earlier calls, reused by a call
      with the same configuration (seed included) and data folder, and
      kept for later ones (e.g. a timing that runs each setting twice:
      building a process traces the model, which costs more than a few
      rounds). None: this Python process's `training.shared_processes()`.
    restart: Remove the run `output_dir` holds and start over.

  Returns:
    The content of `results.json`.

  Raises:
    CheckpointError: If `spec.init_from` holds no single selected model, or
      one of another configuration (checked before `output_dir` is
      written).
    InputError: An `aggregation` that does not fit the run (checked before
      `output_dir` is written).
  """
  spec.model_aggregator()  # Refuses an aggregation that does not fit.
  run = _prepare_run(spec, data_dir=data_dir, output_dir=output_dir,
                     restart=restart)
  task, training = run.task, spec.training
  logging.info('text2sql: %s, vocabulary %d, train sizes %s',
               training.method, task.tokenizer.vocabulary_size(),
               {c: len(task.splits[c]['train']) for c in task.clients})
  # Building a process traces the model (most of a small run's time); the
  # finetuning units of one learning rate share one, and so do calls with
  # this configuration given the same `processes`.
  if processes is None:
    processes = training_lib.shared_processes()
  # What the computation depends on: the experiment (seed included), the
  # data folder, the parser's kind and resolved configuration (vocabulary,
  # lengths, copying, seed) and the frozen weights a LoRA computation
  # carries (the checkpoint at `init_from` may have changed since).
  process_key = training_lib.config_digest(
      [run.config['experiment'], data_dir and os.path.abspath(data_dir),
       type(run.parser).__name__, run.parser.config,
       text2sql_process.frozen_weights_digest(run.parser)])
  trained = run_results.Trained()
  for unit in text2sql_process.training_units(training, task.clients):
    aggregator, accounting = spec.model_aggregator(_unit_clients(spec, unit))
    # Only the finetuning paradigm has several units, each of one client
    # and without `aggregation` (refused outside the federated paradigm, so
    # `aggregator` is None): they differ in their learning rate only, the
    # other inputs of `build_process` being the spec's.
    process = processes.get(
        (process_key, text2sql_process.unit_learning_rate(training, unit)),
        lambda: text2sql_process.build_process(
            training, run.parser, unit, spec.vocab_slice_keys,
            spec.num_examples_fallback, model_aggregator=aggregator))
    _train_unit(spec, run, unit, process, accounting,
                output_dir=output_dir, trained=trained)
  return run_results.write_results(
      output_dir, spec=spec, config=run.config, task=task,
      parser=run.parser, slices=run.slices, trained=trained,
      start=run.start)


@dataclasses.dataclass(frozen=True)
class _Run:
  """A started run: its recorded config, task, parser and starting point."""
  config: collections.OrderedDict
  task: Any
  parser: Any
  slices: dict[str, tuple[Any, ...]]
  initial_weights: Any
  start: float  # time.perf_counter() when the run started.


def _prepare_run(spec: spec_lib.Text2SqlSpec, *, data_dir: Optional[str],
                 output_dir: str, restart: bool) -> _Run:
  """Records the run in `output_dir`; reads the data, builds the parser."""
  data, model, loop = spec.data, spec.model, spec.loop
  config = collections.OrderedDict(
      experiment=spec.experiment(),
      loop=loop,
      data_dir=data_dir,
      versions=collections.OrderedDict(
          tensorflow=tf.__version__, tensorflow_federated=tff.__version__,
          numpy=np.__version__),
  )
  # Before `output_dir` records this run's config: a refused starting point
  # leaves nothing that would refuse the corrected call.
  start_from = text2sql_start.starting_point(
      data, model, seed=loop.seed, init_from=spec.init_from,
      tokenizer_from=spec.tokenizer_from,
      init_from_keras_nlp=spec.init_from_keras_nlp)
  start = time.perf_counter()
  with training_lib.prepare_run_dir(output_dir, config,
                                    restart=restart) as run:
    if start_from.tokenizer_file is not None:
      text2sql_start.copy_tokenizer_file(
          start_from.tokenizer_file, os.path.join(output_dir, TOKENIZER_DIR))
    if spec.templates:
      task = text2sql_task_data.prepare_template_task(
          data, data_dir=data_dir, seed=loop.seed, ngrams=model.ngrams,
          values=model.values)
    else:
      task = text2sql_task_data.prepare_task(
          data, data_dir=data_dir, seed=loop.seed,
          tokenizer_dir=os.path.join(output_dir, TOKENIZER_DIR),
          tokenizer=start_from.preset_tokenizer)
    parser = text2sql_process.build_parser(
        task, model, spec.training.decode_batch_size, lora_config=spec.lora,
        checkpoint=start_from.checkpoint, preset=start_from.preset)
    slices = _vocab_slices(task, spec.vocab_slice_keys)
    initial_weights = start_from.initial_weights(
        parser.config, lora=spec.lora is not None)
    # The fingerprint's names are relative to the folder holding the
    # text2sql folder, however `data_dir` named it.
    run.data_root = os.path.dirname(
        text2sql_source.find_text2sql_dir(data_dir))
  # The run has started: its config and data fingerprint are recorded.
  return _Run(config=config, task=task, parser=parser, slices=slices,
              initial_weights=initial_weights, start=start)


def _unit_clients(spec: spec_lib.Text2SqlSpec, unit) -> int:
  """The clients a unit trains: 1 for centralized training."""
  return (1 if spec.training.paradigm == 'centralized'
          else len(unit.train_clients))


def _train_unit(spec: spec_lib.Text2SqlSpec, run: _Run, unit, process,
                accounting, *, output_dir: str,
                trained: run_results.Trained) -> None:
  """Trains `unit` with `process` (and DP `accounting`, or None), saves its
  selected model and scores it on test into `trained`."""
  training, loop, task, parser = spec.training, spec.loop, run.task, run.parser
  run_dir = (os.path.join(output_dir, 'finetune', unit.name)
             if training.paradigm == 'finetune'
             else os.path.join(output_dir, unit.name))
  os.makedirs(run_dir, exist_ok=True)
  evaluator = _DevEvaluator(task, unit, parser, run_dir)
  result = training_lib.run_training(
      process,
      client_data_fn=text2sql_process.build_client_data_fn(
          task, unit, training, loop.seed, parser, run.slices),
      num_clients=_unit_clients(spec, unit),
      # Sampling is for federated rounds; a centralized or finetuning unit
      # trains its one client whatever --clients_per_round says.
      config=(loop if training.paradigm == 'federated'
              else dataclasses.replace(loop, clients_per_round=0)),
      output_dir=run_dir,
      evaluate_fn=evaluator,
      tensorboard_dir=os.path.join(output_dir, training_lib.TENSORBOARD_DIR,
                                   unit.name),
      description=unit.name,
      initial_model_weights=run.initial_weights,
      round_metrics_fn=accounting and accounting.round_metrics,
  )
  trained.records[unit.name] = result.records
  if result.resumed_from:
    trained.seconds_before_resume += sum(
        r.get('round_seconds', 0.0) + r.get('eval_seconds', 0.0)
        for r in result.records if r['round'] <= result.resumed_from)
  if accounting is not None:
    trained.privacy[unit.name] = accounting.to_json(loop.rounds)
  keras_model, predict, token_metrics_fn = evaluator.scorer()
  evaluator.load_best(keras_model)
  # Either parser's weights: `save_checkpoint` is not seq2seq-specific.
  seq2seq.save_checkpoint(parser.export_model(keras_model), os.path.join(
      output_dir, BEST_CHECKPOINT_DIR, unit.name, BEST_CHECKPOINT_PREFIX))
  trained.scores.add(task, unit.test_clients, predict, token_metrics_fn)


def _vocab_slices(task, vocab_slice_keys: int) -> dict[str, tuple[Any, ...]]:
  """Per client: (its vocabulary, its sliced train split, ids made UNK)."""
  slices = {}
  if not vocab_slice_keys:
    return slices
  for client in task.clients:
    train = task.splits[client]['train']
    vocabulary, local_x, local_y, unknown = vocab_sliced.local_examples(
        train.x, train.y, max_keys=vocab_slice_keys)
    slices[client] = (vocabulary, dataclasses.replace(
        train, x=local_x, y=local_y), unknown)
    logging.info('text2sql: %s keeps %d of its %d distinct ids (%d ids '
                 'became UNK)', client, vocabulary.num_keys,
                 vocabulary.distinct_ids, unknown)
  return slices
