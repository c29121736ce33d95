"""What defines an FCL run: its configurations, encoded data and cache key.

`DataConfig` (how the task sequences are built and encoded) and
`TrainingConfig` (the model's and training's hyperparameters, shared by
every method) configure a run of `experiment.run_method`; `encode_dataset`
builds a dataset's task sequences (`tff_nlp.data.continual_tasks`) and
encodes them with a vocabulary of its training split (`EncodedDataset`);
`fcl_config` is a method's `fcl.FclConfig`; `run_key` is what defines a run
(its cache key) and `run_dir` where it is cached.
"""

from collections.abc import Sequence
import dataclasses
import os
from typing import Any, Optional

import numpy as np

from tff_nlp import errors
from tff_nlp.algorithms import fcl
from tff_nlp.aggregators import weight_cap
from tff_nlp.data import continual_tasks
from tff_nlp.data import text_classification
from tff_nlp.data import vocabulary as vocabulary_lib
from apps.fcl import report as fcl_report
from apps.fcl import word_vectors as fcl_word_vectors
from tff_nlp.training import run_cache

NO_FOREIGN = fcl_report.NO_FOREIGN
METHODS = fcl.METHODS + (NO_FOREIGN,)
# `TrainingConfig.word_vectors` for the library's own skip-gram vectors.
SKIPGRAM = fcl_word_vectors.SKIPGRAM


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """How the task sequences are built and encoded.

  Attributes:
    num_clients: C.
    tasks_per_client: T.
    max_train_per_task: Cap on a task's training (+ validation) documents,
      stratified and seeded (None: no cap).
    max_test_per_task: Cap on a task's test documents (None: no cap).
    vocabulary_size: Word ids including padding and OOV.
    max_length: Tokens kept per document (longer ones are cut and counted).
    seed: Seed of the task generation (spec: 42).
    allow_repeated_label_sets: Accept a dataset with too few labels for a
      client's tasks to differ (see `continual_tasks.build_task_sequences`;
      the paper's Subj). It changes no task, so no run's cache key.
    construction: How label sets are drawn and assigned
      (`continual_tasks.CONSTRUCTIONS`): 'random', the authors' generator
      (the control), or 'shared_labels', label sets relayed from client
      c + 1 to client c one task later, so that a client's knowledge base
      holds a foreign task of its own labels.
  """

  num_clients: int = 3
  tasks_per_client: int = 5
  max_train_per_task: Optional[int] = None
  max_test_per_task: Optional[int] = None
  vocabulary_size: int = 20000
  max_length: int = 64
  seed: int = 42
  allow_repeated_label_sets: bool = False
  construction: str = 'random'


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """Model and training hyperparameters shared by every method.

  Attributes:
    rounds_per_task: R.
    local_epochs: Epochs per round.
    batch_size: Batch size.
    learning_rate: Adam's learning rate.
    embedding_dim: D.
    num_filters: Filters per width.
    dropout: Dropout on the pooled features.
    sparsity: λ1.
    drift: λ2.
    weight_decay: wd.
    proximal_strength: FedProx's μ.
    sit_top_k: SIT's K.
    sit_threshold: SIT's τ.
    sit_clusters: Clusters of a task representation.
    kb_include_own: Own A's in the knowledge base (the authors' code).
    seed: Seed of the models' initial weights and of the batch order.
    max_weight_share: If set, a cap c in (0, 1] on any client's share of a
      round's weight (its training-set size), the excess going to the others
      in proportion to their sizes (`fcl.FclConfig.max_weight_share`);
      None: no cap. 'local' averages nothing and ignores it.
    word_vectors: '' to learn the word embedding on the first task (then
      frozen); else pre-trained vectors, frozen from the start as in the
      papers: `SKIPGRAM` for skip-gram vectors of `embedding_dim` values
      that the library pre-trains once on the public text of `shared/data`
      (`tff_nlp.models.skipgram`, cached under `<output_dir>/word_vectors`),
      or a file of `<data_dir>/word_vectors/` (e.g.
      `word_vectors.GLOVE_50D`) or a path, in GloVe's text format, with
      `embedding_dim` values per word (`tff_nlp.data.word_vectors`).
  """

  rounds_per_task: int = 3
  local_epochs: int = 1
  batch_size: int = 64
  learning_rate: float = 1e-3
  embedding_dim: int = 100
  num_filters: int = 128
  dropout: float = 0.3
  sparsity: float = 1e-3
  drift: float = 1.0
  weight_decay: float = 1e-4
  proximal_strength: float = 0.01
  sit_top_k: int = 3
  sit_threshold: float = 0.7
  sit_clusters: int = 200
  kb_include_own: bool = False
  seed: int = 1
  max_weight_share: Optional[float] = None
  word_vectors: str = ''

  def __post_init__(self):
    if self.max_weight_share is not None:
      weight_cap.check_max_share(self.max_weight_share)


@dataclasses.dataclass(frozen=True)
class EncodedTask:
  """One task of one client, encoded; `*_truncated`: documents cut at
  `max_length` (for the report's "What the model saw")."""

  name: str
  label_names: tuple[str, ...]
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  train_truncated: int = 0
  test_truncated: int = 0

  @property
  def num_classes(self) -> int:
    return len(self.label_names)


@dataclasses.dataclass(frozen=True)
class EncodedDataset:
  """A dataset's task sequences, encoded with its vocabulary."""

  name: str
  clients: tuple[tuple[EncodedTask, ...], ...]
  vocab_size: int
  max_length: int
  num_classes: int
  truncated_documents: int
  summary_markdown: str
  vocabulary: Optional[vocabulary_lib.Vocabulary] = None


def check_methods(methods: Sequence[str]) -> None:
  unknown = [m for m in methods if m not in METHODS]
  if unknown or not methods:
    raise errors.InputError(
        f'Unknown FCL method(s) {unknown} (or none given); expected a '
        f'comma-separated list of {list(METHODS)}.')


def encode_dataset(name: str, data: DataConfig,
                   data_dir: Optional[str] = None) -> EncodedDataset:
  """Builds and encodes `name`'s task sequences.

  Args:
    name: A folder of `<data_dir>/text_classification/`.
    data: The task and encoding settings.
    data_dir: The `shared/data` folder (see
      `data_root.find_data_dir`).

  Returns:
    An `EncodedDataset`; a task's validation split is not used (training
    runs a fixed number of rounds; the authors' code used it for early
    stopping).
  """
  dataset = text_classification.load_dataset(name, data_dir)
  sequences = continual_tasks.build_task_sequences(
      dataset, num_clients=data.num_clients,
      tasks_per_client=data.tasks_per_client,
      max_train_per_task=data.max_train_per_task,
      max_test_per_task=data.max_test_per_task, seed=data.seed,
      allow_repeated_label_sets=data.allow_repeated_label_sets,
      construction=data.construction)
  vocabulary = vocabulary_lib.Vocabulary.build(dataset.train.texts,
                                               data.vocabulary_size)

  def encode(task):
    (x_train, train_cut), (x_test, test_cut) = (
        vocabulary.encode_with_truncation(split.texts, data.max_length)
        for split in (task.train, task.test))
    return EncodedTask(
        name=task.name, label_names=task.label_names, x_train=x_train,
        y_train=task.train.labels.astype(np.int32), x_test=x_test,
        y_test=task.test.labels.astype(np.int32),
        train_truncated=int(train_cut.sum()),
        test_truncated=int(test_cut.sum()))

  clients = tuple(tuple(encode(task) for task in tasks)
                  for tasks in sequences.clients)
  truncated = sum(t.train_truncated + t.test_truncated
                  for tasks in clients for t in tasks)
  num_classes = max(t.num_classes for tasks in clients for t in tasks)
  return EncodedDataset(
      name=name, clients=clients, vocab_size=vocabulary.size,
      max_length=data.max_length, num_classes=num_classes,
      truncated_documents=truncated,
      summary_markdown=continual_tasks.summary_markdown(sequences),
      vocabulary=vocabulary)


def fcl_config(method: str, data: DataConfig,
               training: TrainingConfig) -> fcl.FclConfig:
  """The `fcl.FclConfig` of an experiment method."""
  check_methods([method])
  return fcl.FclConfig(
      method='fedseit' if method == NO_FOREIGN else method,
      num_clients=data.num_clients, tasks_per_client=data.tasks_per_client,
      learning_rate=training.learning_rate,
      local_epochs=training.local_epochs, sparsity=training.sparsity,
      drift=training.drift, weight_decay=training.weight_decay,
      proximal_strength=training.proximal_strength,
      foreign_branch=method != NO_FOREIGN,
      kb_include_own=training.kb_include_own, sit_top_k=training.sit_top_k,
      sit_threshold=training.sit_threshold,
      sit_max_vectors=training.sit_clusters,
      max_weight_share=training.max_weight_share,
      train_embedding=not training.word_vectors)


def run_key(dataset: str, method: str, data: DataConfig,
            training: TrainingConfig) -> dict[str, Any]:
  """What defines a run (its cache key)."""
  data_key = dataclasses.asdict(data)
  del data_key['allow_repeated_label_sets']  # Refuses or not; changes no task.
  if data.construction == 'random':  # Runs cached before the option.
    del data_key['construction']
  training_key = dataclasses.asdict(training)
  # Unset, the cap is left out, so runs cached before it existed keep their
  # keys; 'local' averages nothing, so a cap changes none of its runs.
  if training.max_weight_share is None or method == 'local':
    del training_key['max_weight_share']
  if not training.word_vectors:  # Learned, as before the option.
    del training_key['word_vectors']
  elif training.word_vectors == SKIPGRAM:
    training_key['word_vectors'] = {
        SKIPGRAM: dataclasses.asdict(
            fcl_word_vectors.skipgram_config(training))}
  return {'dataset': dataset, 'method': method,
          'data': data_key,
          'training': training_key}


def run_dir(output_dir: str, dataset: str, method: str, data: DataConfig,
            training: TrainingConfig) -> str:
  """`output_dir/runs/<dataset>-<method>-<hash of run_key>`."""
  return run_cache.run_dir(os.path.join(output_dir, 'runs'),
                           f'{dataset}-{method}',
                           run_key(dataset, method, data, training))
