"""Partial models on real text: sparse (federated_select) vs dense FedAvg.

The tag-prediction task of TFF's federated_select tutorial on a
`shared/data/text_classification` dataset (`tff_nlp.data.tags`: labels as
tags; TREC-50's 'DESC:manner' gives the two tags 'DESC' and
'DESC:manner'). Clients are either label-skewed shards (Dirichlet split) or
single documents (a cross-device population, sampled per round). Each method
trains the same per-tag logistic regression from zeros with the same client
batches:

*   `dense`: FedAvg with uniform weights, every client downloading and
    uploading the whole [V, T] matrix (`tag_process.build_dense_tag_process`);
*   `sparse`: federated_select of each client's M rows, IndexedSlices
    upload, the update divided by the number of clients (the tutorial);
*   `sparse_per_row`: the same, each row's update divided by the number of
    clients that uploaded that row.

Every method is evaluated on the test set with precision@k and recall@k over
the tag vocabulary, and its per-client traffic is read from its round
computation (`tff_nlp.analysis.communication`). A run writes `config.json`,
`results.json`, `results.md` and `precision_at_1.png`.
"""

import collections
from collections.abc import Sequence
import dataclasses
import functools
import os
import time
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


from apps.partial_models import tag_process
from tff_nlp import analysis
from tff_nlp import data as data_lib
from tff_nlp import training as training_lib
from tff_nlp.data import population as population_lib
from tff_nlp.data import tags as tags_lib
from apps.partial_models import tag_model as tag_regression

DENSE = 'dense'
SPARSE = 'sparse'
SPARSE_PER_ROW = 'sparse_per_row'
METHODS = (DENSE, SPARSE, SPARSE_PER_ROW)
METHOD_LABELS = {
    DENSE: 'Dense FedAvg (whole model)',
    SPARSE: 'Sparse, ÷ clients (tutorial)',
    SPARSE_PER_ROW: 'Sparse, ÷ clients per row',
}
LABEL_SKEW = 'label_skew'
DOCUMENT = 'document'
PARTITIONS = (LABEL_SKEW, DOCUMENT)
CONFIG_FILE = 'config.json'
RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
PLOT_FILE = 'precision_at_1.png'


@dataclasses.dataclass(frozen=True)
class TagDataConfig:
  """Which data, how it is split into clients, and the vocabularies.

  Attributes:
    dataset: A folder of `shared/data/text_classification`.
    partition: 'label_skew' (Dirichlet label skew into `num_clients`) or
      'document' (every training document is a client).
    num_clients: Clients of the label-skew split.
    dirichlet_alpha: Label-skew concentration; smaller is more skewed.
    min_train_examples: Minimum training examples per label-skew client.
    max_words: In-vocabulary words (most frequent in training).
    max_tags: In-vocabulary tags.
    num_oov_word_buckets: Hashed rows of unknown words.
    num_oov_tag_buckets: Hashed columns of unknown tags.
  """

  dataset: str = 'trec50'
  partition: str = LABEL_SKEW
  num_clients: int = 50
  dirichlet_alpha: float = 0.5
  min_train_examples: int = 10
  max_words: int = 10000
  max_tags: int = 100
  num_oov_word_buckets: int = 1
  num_oov_tag_buckets: int = 1

  def __post_init__(self):
    if self.partition not in PARTITIONS:
      raise ValueError(f'Unknown partition {self.partition!r}; expected one '
                       f'of {list(PARTITIONS)}.')
    for name in ('num_clients', 'max_words', 'max_tags',
                 'num_oov_word_buckets', 'num_oov_tag_buckets'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be >= 1, got {getattr(self, name)}.')


@dataclasses.dataclass(frozen=True)
class TagTrainingConfig:
  """Client training and evaluation, the same for every method.

  Attributes:
    max_keys: M, keys a sparse client selects (rows, or blocks of rows).
    block_size: B, rows per key of a sparse client (1: a key is a row; see
      `tag_process.build_sparse_tag_process`).
    client_learning_rate: Client SGD step size.
    client_epochs: Passes over a client's data per round.
    batch_size: Client batch size.
    k_values: The k of precision@k and recall@k.
  """

  max_keys: int = 1000
  block_size: int = 1
  client_learning_rate: float = 1.0
  client_epochs: int = 1
  batch_size: int = 16
  k_values: tuple[int, ...] = (1, 3)

  def __post_init__(self):
    for name in ('max_keys', 'block_size', 'client_epochs', 'batch_size'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be >= 1, got {getattr(self, name)}.')
    if not self.client_learning_rate > 0:
      raise ValueError('client_learning_rate must be > 0, got '
                       f'{self.client_learning_rate}.')
    if not self.k_values or min(self.k_values) < 1:
      raise ValueError(f'k_values must be positive, got {self.k_values}.')


@dataclasses.dataclass(frozen=True)
class TagTask:
  """The encoded data of a run.

  Attributes:
    vocabularies: Word and tag vocabularies (from training data).
    clients: Per client, its encoded training examples.
    test: The encoded test set.
    distinct_words: Per client, its number of distinct word ids.
    train: Every encoded training example (the clients' union; the pool of
      a simulated population).
    train_labels: The training examples' label ids.
  """

  vocabularies: tags_lib.TagVocabularies
  clients: tuple[tags_lib.EncodedTags, ...]
  test: tags_lib.EncodedTags
  distinct_words: tuple[int, ...]
  train: Optional[tags_lib.EncodedTags] = None
  train_labels: Optional[np.ndarray] = None

  @functools.cached_property
  def test_bag(self) -> tf.SparseTensor:
    """The test set as one [examples, word rows] bag of counts.

    Built on first use and kept: every evaluation of a run scores it.
    """
    rows = np.repeat(np.arange(len(self.test)),
                     [len(i) for i in self.test.word_ids])
    return tf.SparseTensor(
        indices=np.stack([rows, np.concatenate(self.test.word_ids)], axis=1),
        values=np.concatenate(self.test.word_counts).astype(np.float32),
        dense_shape=[len(self.test), self.vocabularies.num_word_rows])


def prepare_task(data_dir: Optional[str], config: TagDataConfig, *,
                 seed: int) -> TagTask:
  """Reads the dataset, builds vocabularies and splits the clients.

  Args:
    data_dir: The `shared/data` folder; None finds it.
    config: The data configuration.
    seed: Seed of the label-skew split.

  Returns:
    A `TagTask`.

  Raises:
    ValueError: If the data is missing or malformed, or the split fails.
  """
  dataset = data_lib.load_dataset(config.dataset, data_dir)

  def examples(split):
    return tags_lib.examples_from_labels(
        split.texts, [dataset.label_names[i] for i in split.labels])

  train = examples(dataset.train)
  vocabularies = tags_lib.TagVocabularies.build(
      train, max_words=config.max_words, max_tags=config.max_tags,
      num_oov_word_buckets=config.num_oov_word_buckets,
      num_oov_tag_buckets=config.num_oov_tag_buckets)
  encoded = tags_lib.encode(train, vocabularies)
  if config.partition == DOCUMENT:
    shards = [[i] for i in range(len(train))]
  else:
    shards = data_lib.dirichlet_label_skew(
        dataset.train.labels, dataset.test.labels,
        num_clients=config.num_clients, alpha=config.dirichlet_alpha,
        seed=seed, min_train_examples=config.min_train_examples,
    ).train_indices
  clients = tuple(encoded.subset(s) for s in shards)
  return TagTask(
      vocabularies=vocabularies, clients=clients,
      test=tags_lib.encode(examples(dataset.test), vocabularies),
      distinct_words=tuple(
          len(set(np.concatenate(c.word_ids).tolist())) for c in clients),
      train=encoded, train_labels=np.asarray(dataset.train.labels))


def build_process(method: str, vocabularies: tags_lib.TagVocabularies,
                  training: TagTrainingConfig, *, client_outputs: bool = True,
                  ) -> tff.learning.templates.LearningProcess:
  """The learning process of `method` (one of `METHODS`).

  `client_outputs`: whether the dense process's `next` also returns each
  client's outputs (for the loop's records; see `build_dense_tag_process`).
  """
  shape = dict(num_words=vocabularies.num_word_rows,
               num_tags=vocabularies.num_tag_columns)
  # Built once per configuration in this Python process (seeds of a sweep,
  # runs resumed in it): the process is a function of the method, the
  # matrix's shape and the client training below, not of the data or seed.
  key = ('partial_models.tag', method, shape['num_words'], shape['num_tags'],
         training.max_keys, training.block_size,
         training.client_learning_rate, training.client_epochs,
         client_outputs)
  return training_lib.shared_processes().get(
      key, lambda: _build_process(method, shape, training, client_outputs))


def _build_process(method: str, shape: dict[str, int],
                   training: TagTrainingConfig, client_outputs: bool
                   ) -> tff.learning.templates.LearningProcess:
  if method == DENSE:
    if training.client_epochs != 1:
      raise ValueError('The dense baseline runs one local epoch; got '
                       f'client_epochs={training.client_epochs}.')
    return tag_process.build_dense_tag_process(
        **shape, client_learning_rate=training.client_learning_rate,
        client_outputs=client_outputs)
  if method not in (SPARSE, SPARSE_PER_ROW):
    raise ValueError(f'Unknown method {method!r}; expected one of '
                     f'{list(METHODS)}.')
  return tag_process.build_sparse_tag_process(
      **shape, max_keys=training.max_keys, block_size=training.block_size,
      client_learning_rate=training.client_learning_rate,
      client_epochs=training.client_epochs,
      divisor='clients' if method == SPARSE else 'touching_clients')


def _test_scores(weights: np.ndarray, task: TagTask) -> np.ndarray:
  return tf.sparse.sparse_dense_matmul(
      task.test_bag, tf.constant(weights, tf.float32)).numpy()


def test_hits_at_1(weights: np.ndarray, task: TagTask) -> list[int]:
  """Per test example, 1 if its top-scored tag is a true tag, else 0.

  The outcomes behind precision@1, in test-set order, for the paired
  bootstrap over test examples (`apps.partial_models.tag_seeds`).
  """
  return tag_regression.hits_at_k(
      _test_scores(weights, task), task.test.tags, k=1,
      num_real_tags=len(task.vocabularies.tags)).tolist()


def evaluate(weights: np.ndarray, task: TagTask,
             k_values: Sequence[int]) -> collections.OrderedDict:
  """precision@k and recall@k on the test set for each k."""
  scores = _test_scores(weights, task)
  metrics = collections.OrderedDict()
  for k in k_values:
    result = tag_regression.precision_recall_at_k(
        scores, task.test.tags, k=k,
        num_real_tags=len(task.vocabularies.tags))
    metrics[f'precision_at_{k}'] = result['precision']
    metrics[f'recall_at_{k}'] = result['recall']
  return metrics


def client_data_fn(method: str, task: TagTask, training: TagTrainingConfig,
                   seed: int) -> training_lib.ClientDataFn:
  """The clients' datasets of a round for `run_training`.

  Args:
    method: One of `METHODS`; the dense method takes Keras `(x, y)` batches.
    task: The clients.
    training: Its `batch_size` is used.
    seed: The run's seed (example order per `(seed, round, client)`).

  Returns:
    `(round_num, client_ids) -> [tf.data.Dataset]`, built by one traced
    `tags_lib.BatchBuilder`, so that hundreds of rounds leave nothing behind.
  """
  if method not in METHODS:
    raise ValueError(f'Unknown method {method!r}; expected one of '
                     f'{list(METHODS)}.')
  build = tags_lib.BatchBuilder(
      num_words=task.vocabularies.num_word_rows,
      num_tags=task.vocabularies.num_tag_columns,
      batch_size=training.batch_size,
      transform=tag_regression.as_keras_batches if method == DENSE else None)

  def client_data(round_num, client_ids):
    return [build(task.clients[c], shuffle_seed=(seed, round_num, c))
            for c in client_ids]

  return client_data


def simulated_population(
    task: TagTask, training: TagTrainingConfig,
    config: population_lib.PopulationConfig,
) -> population_lib.SimulatedPopulation:
  """The users of `config`, drawn from the task's training examples.

  Args:
    task: The task; its `train` and `train_labels` are the pool.
    training: Its `batch_size` batches a user's examples.
    config: The population.

  Returns:
    The population, its bags as wide as the task's model.

  Raises:
    ValueError: If the task has no training pool.
  """
  if task.train is None or task.train_labels is None:
    raise ValueError('The task has no training pool (prepare_task keeps it).')
  return population_lib.SimulatedPopulation(
      task.train, task.train_labels, config,
      num_words=task.vocabularies.num_word_rows,
      batch_size=training.batch_size)


def population_run(
    method: str, task: TagTask, training: TagTrainingConfig,
    config: population_lib.PopulationConfig,
) -> tuple[tff.learning.templates.LearningProcess, training_lib.ClientDataFn]:
  """`method` on a simulated population drawn from the training examples.

  The clients are `population.SimulatedPopulation` users (config.num_users of
  them, each with config.examples_per_user examples drawn with Dirichlet
  label skew). The returned process's `next` takes the sampled users' ids,
  `{string}@CLIENTS`, and builds each user's dataset inside the TFF worker
  (`tff.simulation.compose_dataset_computation_with_learning_process`), so
  no dataset crosses from Python.

  Args:
    method: One of `METHODS`.
    task: The task; its `train` and `train_labels` are the pool.
    training: Client training (its `batch_size` batches a user's examples).
    config: The population.

  Returns:
    The process and `(round_num, user numbers) -> [user id]`.
  """
  population = simulated_population(task, training, config)
  transform = tag_regression.as_keras_batches if method == DENSE else None

  @tff.tensorflow.computation(np.str_)
  def user_dataset(user_id):
    dataset = population.user_dataset(user_id)
    return dataset if transform is None else transform(dataset)

  process = tff.simulation.compose_dataset_computation_with_learning_process(
      # TFF's wrapper takes a plain LearningProcess.
      user_dataset, build_process(method, task.vocabularies, training,
                                  client_outputs=False))

  def client_data(round_num, users):
    del round_num  # A user's examples are a function of its id.
    return population.client_ids(users)

  return process, client_data


def population_pipeline(
    population: population_lib.SimulatedPopulation) -> tff.Computation:
  """The population's data pipeline alone, for timing it.

  Args:
    population: The users (`simulated_population`).

  Returns:
    `({str}@CLIENTS -> int64@SERVER)`: builds each user's dataset in the
    worker, as `population_run`'s process does, and sums their examples.
  """

  @tff.tensorflow.computation(np.str_)
  def count_examples(user_id):
    return population.user_dataset(user_id).reduce(
        np.int64(0),
        lambda n, batch: n + tf.shape(batch['tags'], out_type=tf.int64)[0])

  @tff.federated_computation(tff.FederatedType(np.str_, tff.CLIENTS))
  def pipeline(user_ids):
    return tff.federated_sum(tff.federated_map(count_examples, user_ids))

  return pipeline


def run_method(method: str, task: TagTask, *, training: TagTrainingConfig,
               loop: training_lib.LoopConfig,
               output_dir: str) -> collections.OrderedDict:
  """Trains one method (resuming if checkpointed) and summarises it."""
  process = build_process(method, task.vocabularies, training)
  traffic = analysis.round_communication(process.next)
  start = time.perf_counter()
  run = training_lib.run_training(
      process,
      client_data_fn=client_data_fn(method, task, training, loop.seed),
      num_clients=len(task.clients), config=loop,
      output_dir=os.path.join(output_dir, method),
      evaluate_fn=lambda w: evaluate(np.asarray(w.trainable[0]), task,
                                     training.k_values),
      description=method)
  rounds = [r for r in run.records if 'train' in r]
  evals = [(r[training_lib.KEY_FIELD], r['eval']) for r in run.records
           if 'eval' in r]
  return collections.OrderedDict(
      label=METHOD_LABELS[method],
      final=evals[-1][1] if evals else {},
      eval_curve=[collections.OrderedDict(round=i, **e) for i, e in evals],
      bytes_down_per_client=float(np.mean(
          [r['communication']['bytes_down_per_client'] for r in rounds])),
      bytes_up_per_client=float(np.mean(
          [r['communication']['bytes_up_per_client'] for r in rounds])),
      round_seconds_median=float(np.median(
          [r['round_seconds'] for r in rounds])),
      transfers=[str(t) for t in traffic.transfers],
      dropped_tokens_per_round=(float(np.mean(
          [r['train']['client_work']['train']['dropped_tokens']
           for r in rounds])) if method != DENSE else 0.0),
      # Of this call (short when the run was finished and only reloads) and
      # of every round (the training time, across resumes).
      seconds=time.perf_counter() - start,
      rounds_seconds=float(sum(r['round_seconds'] for r in rounds)),
      # The final model's, also when the run was finished before (resumed
      # from its last checkpoint).
      test_hits_at_1=test_hits_at_1(
          np.asarray(process.get_model_weights(run.state).trainable[0]),
          task))


def results_table(results: dict[str, Any], k_values: Sequence[int]) -> str:
  """Markdown: one row per method, P@k / R@k (%) and bytes per client."""
  header = ['Method'] + [f'{m}@{k}' for k in k_values for m in ('P', 'R')]
  header += ['KiB down / client / round', 'KiB up / client / round',
             'round s (median)']
  lines = ['| ' + ' | '.join(header) + ' |',
           '|---|' + '---:|' * (len(header) - 1)]
  for result in results.values():
    cells = [result['label']]
    for k in k_values:
      for metric in ('precision', 'recall'):
        value = result['final'].get(f'{metric}_at_{k}')
        cells.append('–' if value is None else f'{100 * value:.2f}')
    cells += [f'{result["bytes_down_per_client"] / 1024:.1f}',
              f'{result["bytes_up_per_client"] / 1024:.1f}',
              f'{result["round_seconds_median"]:.2f}']
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def write_plot(results: dict[str, Any], path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axis = plt.subplots(figsize=(6, 4))
  for result in results.values():
    curve = [p for p in result['eval_curve'] if 'precision_at_1' in p]
    axis.plot([p['round'] for p in curve],
              [100 * p['precision_at_1'] for p in curve],
              marker='o', label=result['label'])
  axis.set_xlabel('round')
  axis.set_ylabel('test precision@1 (%)')
  axis.legend()
  axis.grid(alpha=0.3)
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)


def run_sparse_tags(
    *,
    data_dir: Optional[str],
    output_dir: str,
    data: TagDataConfig,
    training: TagTrainingConfig,
    loop: training_lib.LoopConfig,
    methods: Sequence[str] = METHODS,
    restart: bool = False,
) -> collections.OrderedDict:
  """Runs every method on the same task, writes the comparison and prints
  its table.

  Args:
    data_dir: The `shared/data` folder; None finds it.
    output_dir: Run directory (each method in a subfolder; rerunning
      resumes).
    data: Data and vocabularies.
    training: Client training and evaluation.
    loop: Rounds, sampling (`clients_per_round`), seed, cadence.
    methods: A subset of `METHODS`, in table order.
    restart: Remove the run `output_dir` holds and start over.

  `config.json` and `data_fingerprint.json` (the dataset's files read) are
  written once the data is read and the clients checked: a call refused
  before leaves nothing behind, and a rerun after the data changed is
  refused.

  Returns:
    The results written to `results.json`.

  Raises:
    InputError: If `output_dir` cannot be used (checked before any data is
      read, see `training.check_output_dir`).
    CheckpointError: If `output_dir` holds a run of another experiment, or
      of other data (see `training.prepare_run_dir`).
  """
  unknown = [m for m in methods if m not in METHODS]
  if unknown or not methods:
    raise ValueError(f'methods must be from {list(METHODS)}, got '
                     f'{list(methods)}.')
  # What defines the experiment: a run directory can only be resumed with
  # these unchanged. Rounds, cadences and the methods (each trains in its
  # own folder) may change.
  experiment = collections.OrderedDict(
      seed=loop.seed, clients_per_round=loop.clients_per_round,
      data=dataclasses.asdict(data), training=dataclasses.asdict(training))
  config = collections.OrderedDict(
      experiment=experiment, loop=dataclasses.asdict(loop),
      methods=list(methods))
  # Checks the output directory (`check_output_dir`) before any data is read.
  with training_lib.prepare_run_dir(output_dir, config, restart=restart,
                                    data_root=data_dir):
    task = prepare_task(data_dir, data, seed=loop.seed)
    training_lib.check_clients_per_round(loop, len(task.clients))
  # The run has started: its config and data fingerprint are recorded.
  sizes = [len(c) for c in task.clients]
  vocab = task.vocabularies
  logging.info('sparse_tags: %d clients (%d-%d examples), V=%d, T=%d, M=%d',
               len(sizes), min(sizes), max(sizes), vocab.num_word_rows,
               vocab.num_tag_columns, training.max_keys)
  results = collections.OrderedDict(
      (m, run_method(m, task, training=training, loop=loop,
                     output_dir=output_dir)) for m in methods)
  summary = collections.OrderedDict(
      config=config,
      task=collections.OrderedDict(
          num_clients=len(sizes), train_examples=sum(sizes),
          client_examples_min=min(sizes), client_examples_max=max(sizes),
          test_examples=len(task.test), num_words=vocab.num_word_rows,
          num_tags=vocab.num_tag_columns,
          # Clients with more distinct words than the rows they select.
          clients_over_max_keys=sum(
              d > training.max_keys * training.block_size
              for d in task.distinct_words),
          distinct_words_median=float(np.median(task.distinct_words)),
          # The (example, word) entries of an epoch over every client: what
          # `dropped_tokens_per_round` is a part of.
          train_word_entries=sum(
              len(w) for c in task.clients for w in c.word_ids),
          # Test examples with no in-vocabulary tag: never right at any k.
          test_examples_no_known_tag=int(np.sum(
              task.test.tags[:, :len(vocab.tags)].sum(axis=1) == 0)),
          dense_model_bytes=4 * vocab.num_word_rows * vocab.num_tag_columns),
      methods=results)
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE), summary)
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write(
        f'# Partial models on {data.dataset}: sparse vs dense FedAvg\n\n'
        f'{len(sizes)} clients ({data.partition}; {min(sizes)}–{max(sizes)} '
        f'training examples), V = {vocab.num_word_rows} word rows, T = '
        f'{vocab.num_tag_columns} tag columns, M = {training.max_keys}'
        + (f' keys of B = {training.block_size} rows'
           if training.block_size > 1 else '') + '; '
        f'{summary["task"]["clients_over_max_keys"]} clients have more '
        f'distinct words than the rows they select. {loop.rounds} rounds, '
        f'{loop.clients_per_round or "all"} clients per round. Test '
        f'precision/recall@k (%) after the last round:\n\n'
        + results_table(results, training.k_values) + '\n')
  write_plot(results, os.path.join(output_dir, PLOT_FILE))
  print(results_table(results, training.k_values))
  return summary
