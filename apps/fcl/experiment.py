"""Federated continual text classification experiments (FedWeIT / FedSeIT /
SIT and their baselines), spec ../shared/docs/fedseit_spec.md.

For each dataset: the task sequences of C clients × T tasks
(`tff_nlp.data.continual_tasks`), a word vocabulary built from the dataset's
training split (a stand-in for GloVe's public vocabulary), and for each
method one run of `tff_nlp.algorithms.fcl`: at every task a `start_task`,
`rounds_per_task` rounds, then every client's model is scored on the test
set of every task it has learned so far (each with its own head): the
accuracy and macro-F1 matrices of spec §8.

Each run is cached under its configuration (`run_dir`): its rounds run in
`tff_nlp.training.run_training`, which checkpoints the server's and the
clients' states after every task and resumes from the last finished task,
so a benchmark can be completed across sittings; `run_fcl(report_only=True)`
trains nothing and reports the finished runs (`fcl_finished`). Every report
opens with what the model saw (`fcl_inputs`).

Methods (`METHODS`) are `fcl.METHODS` plus 'fedseit_no_foreign', FedSeIT
with its foreign-knowledge branch turned off (the ablation that shows how
much of FedSeIT's result is transfer).

What defines a run (`DataConfig`, `TrainingConfig`, the encoded task
sequences of `encode_dataset`, the cache key `run_key`) is in `fcl_configs`
(`apps.fcl.configs`); this module runs and reports.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import contextlib
import dataclasses
import os
import shutil
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.algorithms import fcl
from tff_nlp.algorithms import sit as sit_lib
from tff_nlp.templates import stateful_clients
from tff_nlp.data import data_root
from tff_nlp.data import files
from tff_nlp.data import text_classification
from tff_nlp.data import word_vectors as word_vectors_lib
from apps.fcl import configs as fcl_configs
from apps.fcl import finished as fcl_finished
from apps.fcl import inputs as fcl_inputs
from apps.fcl import report as fcl_report
from apps.fcl import word_vectors as fcl_word_vectors
from tff_nlp.metrics import continual as continual_metrics
from tff_nlp import training as training_lib
from tff_nlp.training import run_cache

RESULTS_FILE = run_cache.RESULTS_FILE
# `TrainingConfig.word_vectors` for the library's own skip-gram vectors, and
# where they are cached (`fcl_word_vectors`).
SKIPGRAM = fcl_word_vectors.SKIPGRAM
WORD_VECTORS_DIR = fcl_word_vectors.WORD_VECTORS_DIR
skipgram_config = fcl_word_vectors.skipgram_config
load_word_vectors = fcl_word_vectors.load_word_vectors

# What defines a run (configurations, encoded data, cache key), now in
# `apps.fcl.configs`, kept importable from here.
NO_FOREIGN = fcl_configs.NO_FOREIGN
METHODS = fcl_configs.METHODS
DataConfig = fcl_configs.DataConfig
TrainingConfig = fcl_configs.TrainingConfig
EncodedTask = fcl_configs.EncodedTask
EncodedDataset = fcl_configs.EncodedDataset
check_methods = fcl_configs.check_methods
encode_dataset = fcl_configs.encode_dataset
fcl_config = fcl_configs.fcl_config
run_key = fcl_configs.run_key
run_dir = fcl_configs.run_dir


def _client_dataset(task: EncodedTask, *, batch_size: int, epochs: int,
                    seed: int) -> tf.data.Dataset:
  examples = tf.data.Dataset.from_tensor_slices((task.x_train, task.y_train))
  return examples.shuffle(len(task.y_train), seed=seed).repeat(epochs).batch(
      batch_size)


def _representation(task: EncodedTask, embedding: np.ndarray,
                    training: TrainingConfig) -> np.ndarray:
  vectors = sit_lib.document_vectors(task.x_train, np.asarray(embedding))
  return sit_lib.task_representation(vectors,
                                     num_clusters=training.sit_clusters,
                                     seed=training.seed)


def _task_inputs(process: fcl.FclProcess, encoded: EncodedDataset,
                 clients, task: int, training: TrainingConfig):
  """Each client's `start_task` input; SIT clients send representations."""
  inputs = []
  for c, client in enumerate(clients):
    if not process.config.uses_sit or task == 0:
      inputs.append(process.task_start_input(task))
      continue
    # The embedding is frozen from task 1 on: task 0's representation is
    # computed (and sent) at the start of task 1.
    tasks = [task - 1, task] if task == 1 else [task]
    embedding = client.weights['embedding']
    inputs.append(process.task_start_input(
        task, [_representation(encoded.clients[c][t], embedding, training)
               for t in tasks], tasks))
  return inputs


def _evaluate(predictor: fcl.Predictor, encoded: EncodedDataset, clients,
              task: int):
  """Accuracy and macro-F1 of every client on its tasks 0..task."""
  accuracy, f1 = [], []
  for c, client in enumerate(clients):
    acc_row, f1_row = [], []
    for j in range(task + 1):
      test = encoded.clients[c][j]
      predictions = predictor.predict(client.weights, j, test.x_test)
      acc_row.append(float(np.mean(predictions == test.y_test)))
      f1_row.append(continual_metrics.macro_f1(test.y_test, predictions,
                                               test.num_classes))
    accuracy.append(acc_row)
    f1.append(f1_row)
  return accuracy, f1


def run_method(encoded: EncodedDataset, method: str, *, data: DataConfig,
               training: TrainingConfig, output_dir: str,
               word_vectors: Optional[word_vectors_lib.WordVectors] = None,
               log: Callable[[str], None] = logging.info,
               data_files: Optional[Mapping[str, str]] = None,
               data_dir: Optional[str] = None,
               restart: bool = False) -> dict[str, Any]:
  """Trains and evaluates one method on one dataset, resuming if cached.

  The rounds run in `training.run_training` (`checkpoint_every` a task),
  whose task boundaries (`training.TaskSchedule`) start every task and, at
  its end, score every client on the tasks it has learned.

  Args:
    encoded: The dataset's encoded tasks.
    method: One of `METHODS`.
    data: The data settings `encoded` was built with (part of the cache key).
    training: The training settings.
    output_dir: The benchmark's folder; the run lives in `run_dir(...)`.
    word_vectors: `training.word_vectors`, read (`load_word_vectors`);
      needed when it is set.
    log: Progress messages.
    data_files: The data files `encoded` and `word_vectors` were read from
      (real path -> SHA-256, `files.recording_reads`), recorded in the run's
      `data_fingerprint.json`: a run (finished or not) whose files changed
      since it started is refused. None: not checked.
    data_dir: The `shared/data` folder (the fingerprint's names are relative
      to it); None finds it.
    restart: Start the run over if it is unfinished, or its data changed.

  Returns:
    The run's results (also in `<run dir>/results.json`): accuracy and
    macro-F1 matrices per client `[C, T, T]`, their summaries (ACC,
    forgetting, BWT; final macro-F1), bytes per client, seconds.
  """
  directory = run_dir(output_dir, encoded.name, method, data, training)
  root = data_root.locate_data_dir(data_dir).path
  fingerprint = (None if data_files is None
                 else training_lib.data_fingerprint(data_files, root))
  if fingerprint is not None and os.path.isdir(directory):
    try:
      fingerprint = training_lib.check_data_fingerprint(directory,
                                                        fingerprint, root)
    except errors.CheckpointError as e:
      if not restart:
        raise
      log(f'{encoded.name} {method}: starting over in {directory} (restart; '
          f'{e})')
      shutil.rmtree(directory)
  done = run_cache.finished_results(directory)
  if done is not None:
    log(f'{encoded.name} {method}: done before, read from {directory}')
    return done
  if restart and os.path.isdir(directory):
    log(f'{encoded.name} {method}: starting over in {directory} (restart)')
    shutil.rmtree(directory)
  os.makedirs(directory, exist_ok=True)
  training_lib.write_json(os.path.join(directory, 'config.json'),
                          run_key(encoded.name, method, data, training))
  if fingerprint is not None:
    training_lib.write_data_fingerprint(directory, fingerprint)
  config = fcl_config(method, data, training)
  spec = fcl.model_spec(
      config, vocab_size=encoded.vocab_size, max_length=encoded.max_length,
      num_classes=encoded.num_classes, embedding_dim=training.embedding_dim,
      num_filters=training.num_filters, dropout=training.dropout,
      seed=training.seed)
  initial_embedding, coverage = None, None
  if training.word_vectors:
    if word_vectors is None or encoded.vocabulary is None:
      raise ValueError(f'--word_vectors={training.word_vectors}: pass the '
                       'vectors read and a dataset encoded with its '
                       'vocabulary.')
    initial_embedding, coverage = word_vectors_lib.embedding_table(
        encoded.vocabulary, word_vectors, seed=training.seed)
    log(f'{encoded.name} {method}: {100 * coverage:.1f}% of the vocabulary '
        f'has a vector in {word_vectors.path}')
  # Built once per configuration in this Python process (a method's runs
  # on several datasets or seeds of equal shapes): the computation is a
  # function of the method's configuration, the model spec (vocabulary,
  # lengths, classes, seed) and the initial embedding it carries.
  process = stateful_clients.SimulationProcess(
      training_lib.shared_processes().get(
          ('fcl', training_lib.config_digest([config, spec]),
           None if initial_embedding is None
           else training_lib.weights_digest([initial_embedding])),
          lambda: fcl.build_fcl_process(config, spec,
                                        initial_embedding=initial_embedding)),
      config.num_clients)
  predictor = fcl.Predictor(spec, adaptive_threshold=config.sparsity)
  rounds_per_task = training.rounds_per_task

  def start_task(task, state):
    inputs = _task_inputs(process.process, encoded, state.clients, task,
                          training)
    return process.apply(process.process.start_task, state, inputs)

  def end_task(task, state, train_metrics):
    accuracy, f1 = _evaluate(predictor, encoded, state.clients, task)
    mean_acc = np.mean([row[-1] for row in accuracy])
    log(f'{encoded.name} {method}: task {task} done, loss '
        f'{float(train_metrics["train_loss"]):.3f}, accuracy on it '
        f'{100 * mean_acc:.1f}')
    return {'accuracy': accuracy, 'macro_f1': f1}

  def client_data(round_num, client_ids):
    task, r = divmod(round_num - 1, rounds_per_task)
    return [_client_dataset(encoded.clients[c][task],
                            batch_size=training.batch_size,
                            epochs=training.local_epochs,
                            seed=training.seed * 1_000_003 + task * 1000
                            + r * 10 + c)
            for c in client_ids]

  run = training_lib.run_training(
      process, client_data_fn=client_data, num_clients=config.num_clients,
      config=training_lib.LoopConfig(
          rounds=config.tasks_per_client * rounds_per_task,
          checkpoint_every=rounds_per_task),
      output_dir=directory, description=f'{encoded.name} {method}',
      tasks=training_lib.TaskSchedule(rounds_per_task=rounds_per_task,
                                      start_task=start_task,
                                      end_task=end_task))
  if run.resumed_from:
    log(f'{encoded.name} {method}: resumed after round {run.resumed_from}')
  tasks = fcl_report.task_records(run.records, rounds_per_task)
  results = fcl_report.summarize(tasks, config,
                      seconds=sum(t['seconds'] for t in tasks))
  results.update(dataset=encoded.name, method=method,
                 truncated_documents=encoded.truncated_documents)
  if coverage is not None:
    results['word_vector_coverage'] = coverage
  training_lib.write_json(os.path.join(directory, RESULTS_FILE), results)
  return results


# The paired comparisons of the report: (A, B) for ACC(A) - ACC(B). The
# paper's headline (FedSeIT over its strongest baseline, FedWeIT, the method
# it extends), its ablation and its selection; each where both were run.
COMPARISONS = (('fedseit', 'fedweit'), ('fedseit', NO_FOREIGN),
               ('fedseit_sit', 'fedseit'))


def replicate(data: DataConfig, training: TrainingConfig,
              seed: Optional[int]) -> tuple[DataConfig, TrainingConfig]:
  """The configuration of replicate `seed`: training seed `seed` and tasks
  drawn with `data.seed + seed`; None: `data` and `training` as given."""
  if seed is None:
    return data, training
  return (dataclasses.replace(data, seed=data.seed + seed),
          dataclasses.replace(training, seed=seed))


def run_fcl(*, datasets: Sequence[str], methods: Sequence[str],
            data: DataConfig, training: TrainingConfig, output_dir: str,
            data_dir: Optional[str] = None, seeds: Sequence[int] = (),
            command: str = '', log: Callable[[str], None] = logging.info,
            context_fn: Optional[
                Callable[[], contextlib.AbstractContextManager]] = None,
            restart: bool = False, report_only: bool = False,
            ) -> dict[str, dict[str, Any]]:
  """Runs every method on every dataset and seed (cached runs are read) and
  writes the report (`fcl_report.write_report`).

  Args:
    datasets: Folders of `<data_dir>/text_classification/`.
    methods: Of `METHODS`.
    data: The task settings.
    training: The training settings.
    output_dir: The benchmark's folder.
    data_dir: The `shared/data` folder.
    seeds: Replicates (`replicate`): seed s trains with seed s on the tasks
      of `data.seed + s`, so that seeds vary both the runs and the tasks,
      and the methods of one seed share its tasks (paired). Empty: one run
      of `data` and `training` as given.
    command: The command line, for the report.
    log: Progress messages.
    context_fn: Makes a TFF execution context to run the methods of one
      dataset and seed in, entered around them and closed after, e.g.
      `tff_nlp.runtime.flags.context_from_flags`: a fresh TFF worker per
      dataset and seed. One worker for every run grows by gigabytes over
      tens of runs (glibc malloc fragmentation; docs/results/fcl.md) and
      was OOM-killed at 8.4 GB; its memory is returned when it stops. None:
      the runs use the current context.
    restart: Start over the runs that would resume, and the finished runs
      whose data changed (`run_method`); other finished runs are read back.
    report_only: Train nothing: read every run from its folder or the
      earlier report in `output_dir` (`fcl_finished`), and fail naming the
      runs found in neither. The datasets are still encoded, for "What the
      model saw"; the word vectors are not read.

  Every run records the data files it read (its dataset's, and the word
  vectors) in its `data_fingerprint.json`; a run whose files changed since
  it started is refused without `restart`.

  Returns:
    results[dataset][method]: `fcl_seeds.summarize_method` of its seeds
    (per-seed results under `seeds`, keyed by seed; the seed of `training`
    when `seeds` is empty).
  """
  check_methods(methods)
  training_lib.check_output_dir(output_dir)
  if len(set(seeds)) != len(seeds):
    raise errors.InputError(f'--seeds: {list(seeds)} repeats a seed.')
  # A dataset folder a user added is never silently left out.
  unused = [d for d in text_classification.list_datasets(data_dir)
            if d not in datasets
            and d not in text_classification.BUILT_IN_DATASETS]
  if unused:
    logging.warning(
        'Datasets of %s not used, as --datasets does not list them: %s.',
        os.path.join(data_root.find_data_dir(data_dir),
                     text_classification.TEXT_CLASSIFICATION_SUBDIR),
        ', '.join(unused))
  replicates = [(s, *replicate(data, training, s)) for s in seeds] or [
      (training.seed, data, training)]
  # Every dataset and seed is read and checked before any training; the
  # files read are each run's data fingerprint.
  encoded = collections.OrderedDict()
  data_files = collections.defaultdict(dict)
  for name in datasets:
    for seed, seed_data, _ in replicates:
      with files.recording_reads() as reads:
        encoded[name, seed] = encode_dataset(name, seed_data, data_dir)
      data_files[name].update(reads)
  finished = (fcl_finished.FinishedRuns(output_dir, _report_run_name)
              if report_only else None)
  with files.recording_reads() as reads:
    word_vectors = (None if report_only else
                    load_word_vectors(training, data_dir, output_dir))
  # The vectors' file only (skip-gram vectors are trained from the public
  # text on first use, then read from their cache).
  vector_files = {path: digest for path, digest in reads.items()
                  if word_vectors is not None
                  and path == os.path.realpath(word_vectors.path)}
  per_seed = collections.OrderedDict(
      (name, collections.OrderedDict((m, collections.OrderedDict())
                                     for m in methods))
      for name in datasets)
  summaries = collections.OrderedDict()
  for name in datasets:
    for seed, seed_data, seed_training in replicates:
      dataset = encoded[name, seed]
      summaries.setdefault(name, dataset.summary_markdown)
      log(f'{name}, seed {seed}: vocabulary {dataset.vocab_size} ids, '
          f'{dataset.truncated_documents} documents cut at '
          f'{data.max_length} tokens')
      if finished is not None:
        for method in methods:
          per_seed[name][method][seed] = finished.get(run_dir(
              output_dir, name, method, seed_data, seed_training))
        continue
      with (context_fn or contextlib.nullcontext)():
        for method in methods:
          per_seed[name][method][seed] = run_method(
              dataset, method, data=seed_data, training=seed_training,
              output_dir=output_dir, word_vectors=word_vectors, log=log,
              data_files={**data_files[name], **vector_files},
              data_dir=data_dir, restart=restart)
  if finished is not None:
    finished.check()
    log(f'--report_only: {finished.from_report} run(s) read from the earlier '
        'report, the others from their folders')
  results, differences = fcl_report.seed_results(per_seed, COMPARISONS)
  fcl_report.write_report(
      results, output_dir, data=data, training=training, command=command,
      task_summaries=summaries, seeds=[s for s, _, _ in replicates],
      differences=differences, seeds_are_replicates=bool(seeds),
      inputs=collections.OrderedDict(
          (name, fcl_inputs.describe(collections.OrderedDict(
              (s, encoded[name, s]) for s, _, _ in replicates)))
          for name in datasets),
      trained_by=finished and finished.earlier_command)
  return results


def _report_run_name(dataset: str, method: str, data: Mapping[str, Any],
                     training: Mapping[str, Any], seed: Optional[int]) -> str:
  """The run folder name of a run of an earlier report (`fcl_finished`),
  from its settings as `results.json` holds them."""
  return os.path.basename(run_dir('', dataset, method, *replicate(
      DataConfig(**data), TrainingConfig(**training), seed)))
