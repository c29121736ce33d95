"""Seeded label-skewed split of a labelled dataset into federated clients.

Cross-silo federated NLP (e.g. the 8 institutions of the Lorar paper, Zhang et
al., ACL 2023) has clients that differ both in size and in what they hold. We
simulate that from one centralised dataset with the common Dirichlet label
skew (Yurochkin et al., ICML 2019; Hsu et al., 2019):

  for every label k, draw q_k ~ Dirichlet(alpha, ..., alpha) over the N
  clients and give client j the fraction q_k[j] of the examples of label k.

A small `alpha` (e.g. 0.5) gives clients with few labels and very different
sizes; a large one approaches an i.i.d. split. The test split is cut with the
same q_k, so every client's test set follows its own label distribution and
per-client accuracy measures how well the global model serves that client.

Draws whose smallest client has fewer than `min_train_examples` training (or
`min_test_examples` test) examples are rejected and redrawn from the same
random stream, so a seed always gives the same split.
"""

import dataclasses

import numpy as np

from tff_nlp import errors


@dataclasses.dataclass(frozen=True)
class Partition:
  """Which examples each client holds.

  Attributes:
    train_indices: Per client, the sorted indices of its training examples.
    test_indices: Per client, the sorted indices of its test examples.
    label_proportions: float64 array [num_labels, num_clients]; row k is q_k,
      the share of label k's examples given to each client.
    num_draws: How many Dirichlet draws were needed to meet the minimum
      sizes (1 if the first one did).
  """

  train_indices: tuple[np.ndarray, ...]
  test_indices: tuple[np.ndarray, ...]
  label_proportions: np.ndarray
  num_draws: int

  @property
  def num_clients(self) -> int:
    return len(self.train_indices)

  def train_sizes(self) -> list[int]:
    return [len(i) for i in self.train_indices]

  def test_sizes(self) -> list[int]:
    return [len(i) for i in self.test_indices]


def _split_by_proportions(
    labels: np.ndarray,
    proportions: np.ndarray,
    order: list[np.ndarray],
) -> list[np.ndarray]:
  """Gives each client its share of every label's examples.

  Args:
    labels: int array [n] of label ids.
    proportions: [num_labels, num_clients], rows summing to 1.
    order: Per label, a permutation of that label's examples, so that which
      examples (not just how many) a client gets is random.

  Returns:
    Per client, the sorted indices of its examples.
  """
  num_labels, num_clients = proportions.shape
  shares = [[] for _ in range(num_clients)]
  for k in range(num_labels):
    members = np.flatnonzero(labels == k)[order[k]]
    # Rounding the cumulative shares (not each share) makes the counts sum to
    # exactly len(members), so every example lands in one client.
    bounds = np.round(np.cumsum(proportions[k]) * len(members)).astype(int)
    for j, part in enumerate(np.split(members, bounds[:-1])):
      shares[j].append(part)
  return [np.sort(np.concatenate(s)).astype(np.int64) for s in shares]


def dirichlet_label_skew(
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    *,
    num_clients: int,
    alpha: float,
    seed: int,
    min_train_examples: int = 1,
    min_test_examples: int = 1,
    max_draws: int = 1000,
) -> Partition:
  """Splits train and test examples into clients with Dirichlet label skew.

  Args:
    train_labels: int array [n_train] of label ids in [0, num_labels).
    test_labels: int array [n_test] of label ids in the same range.
    num_clients: N, the number of clients (positive).
    alpha: The Dirichlet concentration (positive); smaller is more skewed.
    seed: Seed of the numpy generator; the same seed gives the same split.
    min_train_examples: Minimum training examples of every client.
    min_test_examples: Minimum test examples of every client (so that
      per-client accuracy is defined).
    max_draws: How many Dirichlet draws to try before giving up.

  Returns:
    A `Partition`.

  Raises:
    ValueError: If an argument is out of range.
    InputError: (a ValueError) naming `num_clients` if the minimum sizes
      cannot be met by any split (with the largest number of clients they
      allow), or `max_draws` draws did not meet them.
  """
  train_labels = np.asarray(train_labels)
  test_labels = np.asarray(test_labels)
  if num_clients < 1:
    raise ValueError(f'num_clients must be positive, got {num_clients}.')
  if not (np.isfinite(alpha) and alpha > 0):
    raise ValueError(f'alpha must be a positive number, got {alpha!r}.')
  if min_train_examples < 0 or min_test_examples < 0:
    raise ValueError('min_train_examples and min_test_examples must be >= 0.')
  if max_draws < 1:
    raise ValueError(f'max_draws must be positive, got {max_draws}.')
  for name, labels in (('train_labels', train_labels),
                       ('test_labels', test_labels)):
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
      raise ValueError(f'{name} must be a 1-D integer array.')
    if labels.size and labels.min() < 0:
      raise ValueError(f'{name} holds a negative label id.')
  for name, labels, minimum in (
      ('training', train_labels, min_train_examples),
      ('test', test_labels, min_test_examples),
  ):
    if num_clients * minimum > len(labels):
      raise errors.InputError(
          f'num_clients={num_clients}: {num_clients} clients with at least '
          f'{minimum} {name} examples each need {num_clients * minimum}, but '
          f'there are {len(labels)}, so at most '
          f'{len(labels) // minimum} clients.'
      )
  size_limit = min(len(labels) // minimum if minimum else len(labels)
                    for labels, minimum in ((train_labels, min_train_examples),
                                            (test_labels, min_test_examples)))
  num_labels = int(max(train_labels.max(initial=-1),
                       test_labels.max(initial=-1))) + 1

  rng = np.random.default_rng(seed)
  for draw in range(1, max_draws + 1):
    proportions = rng.dirichlet(np.full(num_clients, alpha), size=num_labels)
    train_order = [rng.permutation(np.sum(train_labels == k))
                   for k in range(num_labels)]
    test_order = [rng.permutation(np.sum(test_labels == k))
                  for k in range(num_labels)]
    train = _split_by_proportions(train_labels, proportions, train_order)
    test = _split_by_proportions(test_labels, proportions, test_order)
    if (min(map(len, train)) >= min_train_examples
        and min(map(len, test)) >= min_test_examples):
      return Partition(
          train_indices=tuple(train),
          test_indices=tuple(test),
          label_proportions=proportions,
          num_draws=draw,
      )
  raise errors.InputError(
      f'num_clients={num_clients}: no split into {num_clients} clients with '
      f'at least {min_train_examples} training and {min_test_examples} test '
      f'examples each in {max_draws} Dirichlet(alpha={alpha}) draws (the '
      f'sizes alone allow at most {size_limit} clients); use fewer clients, '
      'a larger alpha or smaller minimums.'
  )
