"""The federated text classification task: clients, model, evaluation.

The shared set-up of the experiments and benchmarks that train the
fastText-style classifier of `tff_nlp.models` on a dataset of
`shared/data/text_classification` split into label-skewed clients:

*   `prepare_clients` loads the dataset, splits train and test into clients
    (`tff_nlp.data.dirichlet_label_skew`), builds the vocabulary from the
    training texts and encodes every client's examples;
*   `train_dataset` turns a client's training examples into the batched
    `tf.data.Dataset` a learning process consumes;
*   `evaluate_classifier` measures a Keras model on every client's own test
    set with the two averages of the Lorar paper (Zhang et al., ACL 2023):
    MacroAvg, the mean of the per-client accuracies, and MicroAvg, the
    accuracy over all test examples pooled.

Texts longer than `ClientDataConfig.max_length` tokens are cut, and counted:
`prepare_clients` logs how many, and `FederatedTextClassification.truncated`
gives the counts for a run's results, as the seq2seq experiments record
theirs.
"""

import collections
from collections.abc import Sequence
import dataclasses
from typing import Any, Optional, Union

from absl import logging
import numpy as np
import tensorflow as tf

from tff_nlp import data
from tff_nlp import models


@dataclasses.dataclass(frozen=True)
class ClientDataConfig:
  """Which data the clients hold and how it is encoded.

  Attributes:
    dataset: A folder of `shared/data/text_classification`, e.g. 'r8'.
    num_clients: Number of clients.
    dirichlet_alpha: Label-skew concentration; smaller gives clients with
      fewer labels and more different sizes (see `tff_nlp.data.partition`).
    min_train_examples: Minimum training examples of every client.
    vocab_size: Token ids, padding and OOV included.
    max_length: Tokens kept per text (longer texts are cut and counted).
  """

  dataset: str = 'r8'
  num_clients: int = 8
  dirichlet_alpha: float = 0.3
  min_train_examples: int = 50
  vocab_size: int = 10000
  max_length: int = 128


@dataclasses.dataclass(frozen=True)
class ClientExamples:
  """One client's encoded examples.

  Attributes:
    train_x: int32 token ids [n_train, L].
    train_y: int32 label ids [n_train].
    test_x: int32 token ids [n_test, L].
    test_y: int32 label ids [n_test].
    train_truncated: Training texts of more than L tokens, cut to L.
    test_truncated: Test texts of more than L tokens, cut to L.
  """

  train_x: np.ndarray
  train_y: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  train_truncated: int = 0
  test_truncated: int = 0

  @property
  def num_train(self) -> int:
    return len(self.train_y)

  @property
  def num_test(self) -> int:
    return len(self.test_y)


@dataclasses.dataclass(frozen=True)
class FederatedTextClassification:
  """A text-classification dataset split into clients and encoded.

  Attributes:
    config: The configuration it was built from.
    label_names: Label names; label id i is `label_names[i]`.
    vocabulary: The vocabulary of the (pooled) training texts.
    partition: Which examples of the dataset each client holds.
    clients: Every client's encoded examples, in partition order.
  """

  config: ClientDataConfig
  label_names: tuple[str, ...]
  vocabulary: data.Vocabulary
  partition: data.Partition
  clients: tuple[ClientExamples, ...]

  def model_spec(
      self, *, embedding_dim: int, seed: int
  ) -> models.TextClassifierSpec:
    """The classifier spec matching this data's vocabulary and labels."""
    return models.TextClassifierSpec(
        vocab_size=self.vocabulary.size,
        num_classes=len(self.label_names),
        max_length=self.config.max_length,
        embedding_dim=embedding_dim,
        seed=seed,
    )

  def truncated(self) -> collections.OrderedDict[str, Any]:
    """Texts longer than `config.max_length` tokens (cut), for results JSON.

    Returns:
      `OrderedDict(max_length=L, train=n, test=m, clients=[OrderedDict(
      train=n_i, test=m_i), ...])`: the counts of all clients (every example
      of the dataset belongs to one client) and of each, in client order.
    """
    return collections.OrderedDict(
        max_length=self.config.max_length,
        train=sum(c.train_truncated for c in self.clients),
        test=sum(c.test_truncated for c in self.clients),
        clients=[collections.OrderedDict(train=c.train_truncated,
                                         test=c.test_truncated)
                 for c in self.clients])


def prepare_clients(
    config: ClientDataConfig, *, data_dir: Optional[str], seed: int
) -> FederatedTextClassification:
  """Loads, splits and encodes a dataset for federated training.

  Args:
    config: The dataset, split and encoding.
    data_dir: The `shared/data` folder, or None to locate it (see
      `tff_nlp.data.find_data_dir`).
    seed: Seed of the client split.

  Returns:
    A `FederatedTextClassification`; how many texts were cut at
    `config.max_length` tokens is logged and kept (see its `truncated`).

  Raises:
    ValueError: If the data is missing or malformed, or no split meets
      `config.min_train_examples`.
  """
  dataset = data.load_dataset(config.dataset, data_dir)
  partition = data.dirichlet_label_skew(
      dataset.train.labels,
      dataset.test.labels,
      num_clients=config.num_clients,
      alpha=config.dirichlet_alpha,
      seed=seed,
      min_train_examples=config.min_train_examples,
  )
  vocabulary = data.Vocabulary.build(dataset.train.texts, config.vocab_size)
  train_x, train_cut = vocabulary.encode_with_truncation(
      dataset.train.texts, config.max_length)
  test_x, test_cut = vocabulary.encode_with_truncation(
      dataset.test.texts, config.max_length)
  logging.info('%s: %d of %d training and %d of %d test texts cut at %d '
               'tokens', config.dataset, train_cut.sum(), len(train_cut),
               test_cut.sum(), len(test_cut), config.max_length)
  clients = tuple(
      ClientExamples(
          train_x=train_x[train_indices],
          train_y=dataset.train.labels[train_indices],
          test_x=test_x[test_indices],
          test_y=dataset.test.labels[test_indices],
          train_truncated=int(train_cut[train_indices].sum()),
          test_truncated=int(test_cut[test_indices].sum()),
      )
      for train_indices, test_indices in zip(
          partition.train_indices, partition.test_indices
      )
  )
  return FederatedTextClassification(
      config=config,
      label_names=dataset.label_names,
      vocabulary=vocabulary,
      partition=partition,
      clients=clients,
  )


def train_dataset(
    client: ClientExamples,
    *,
    batch_size: int,
    shuffle_seed: Optional[Union[int, Sequence[int]]],
) -> tf.data.Dataset:
  """One pass over a client's training examples in batches.

  The order is shuffled in numpy rather than by `tf.data`: TFF rebuilds a
  dataset from its graph for every round, so a `shuffle` op would replay the
  same order each round, while a new seed per round gives a new order,
  reproducibly.

  Args:
    client: The client's examples.
    batch_size: Examples per batch (the last batch may be smaller).
    shuffle_seed: Seed of the example order (an int or a sequence of ints,
      e.g. `(seed, round, client)`, as `np.random.default_rng` takes); None
      keeps the stored order.

  Returns:
    A dataset of `(token_ids int32 [B, L], labels int32 [B])` batches.
  """
  order = np.arange(client.num_train)
  if shuffle_seed is not None:
    order = np.random.default_rng(shuffle_seed).permutation(order)
  return tf.data.Dataset.from_tensor_slices(
      (client.train_x[order], client.train_y[order])
  ).batch(batch_size)


@dataclasses.dataclass(frozen=True)
class Accuracies:
  """Accuracy of one model on every client's test set.

  Attributes:
    correct: Per client, the number of correctly classified test examples.
    totals: Per client, the number of test examples.
  """

  correct: tuple[int, ...]
  totals: tuple[int, ...]

  @property
  def per_client(self) -> list[float]:
    return [c / n for c, n in zip(self.correct, self.totals)]

  @property
  def macro(self) -> float:
    """MacroAvg: the unweighted mean of the per-client accuracies."""
    return float(np.mean(self.per_client))

  @property
  def micro(self) -> float:
    """MicroAvg: correct over all clients' test examples."""
    return sum(self.correct) / sum(self.totals)


def evaluate_classifier(
    keras_model: tf.keras.Model,
    clients: tuple[ClientExamples, ...],
    *,
    batch_size: int = 512,
) -> Accuracies:
  """Top-1 accuracy of `keras_model` on each client's test examples.

  Args:
    keras_model: Maps token ids to class scores.
    clients: The clients; each needs at least one test example.
    batch_size: Examples per forward pass (memory, not results).

  Returns:
    The `Accuracies` of the clients, in order.
  """
  correct = []
  for client in clients:
    scores = keras_model.predict(client.test_x, batch_size=batch_size,
                                 verbose=0)
    correct.append(int(np.sum(np.argmax(scores, axis=-1) == client.test_y)))
  return Accuracies(
      correct=tuple(correct), totals=tuple(c.num_test for c in clients)
  )
