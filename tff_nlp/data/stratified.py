"""Seeded stratified samples of labelled documents, class by class.

What `continual_tasks` cuts a task's documents with (its module docstring,
steps 5 to 7, states the rules): `stratified_sample` caps a set of
documents at a size, every present class keeping at least one document and
the rest shared out in proportion (`stratified_counts`); `split_valid` sets a
fraction of every class aside for validation (`valid_counts`). The documents
of each class are a random subset from the caller's `np.random.Generator`,
kept in file order.
"""

import numpy as np


def stratified_counts(counts: np.ndarray, size: int) -> np.ndarray:
  """How many documents of each class a stratified sample of `size` takes.

  Args:
    counts: Documents per class (>= 0).
    size: The sample size, at least the number of present classes and less
      than `counts.sum()`.

  Returns:
    int64 array like `counts`: 1 per present class plus the other
    `size - present` shared in proportion to `counts - 1` (largest
    remainder, ties to the lower index).
  """
  counts = np.asarray(counts, np.int64)
  present = counts > 0
  spare = np.where(present, counts - 1, 0)
  extra = size - int(present.sum())
  exact = spare * extra / spare.sum() if extra else np.zeros(len(counts))
  quota = np.floor(exact).astype(np.int64)
  remainder = exact - quota
  # Stable sort on -remainder: ties go to the lower class index.
  order = np.argsort(-remainder, kind='stable')
  quota[order[:extra - int(quota.sum())]] += 1
  return present.astype(np.int64) + quota


def take_per_class(
    indices: np.ndarray,
    labels: np.ndarray,
    classes: np.ndarray,
    quotas: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
  """Draws `quotas[j]` random members of class `classes[j]`.

  Returns:
    `(taken, rest)`, both sorted (file order).
  """
  taken = []
  for k, quota in zip(classes, quotas):
    members = indices[labels == k]
    taken.append(members[rng.permutation(len(members))[:quota]])
  taken = np.sort(np.concatenate(taken)) if taken else indices[:0]
  rest = np.setdiff1d(indices, taken)
  return taken, rest


def stratified_sample(
    indices: np.ndarray, labels: np.ndarray, size: int,
    rng: np.random.Generator,
) -> np.ndarray:
  """A seeded stratified sample of `size` of `indices` (all if fewer)."""
  if len(indices) <= size:
    return indices
  classes, counts = np.unique(labels[indices], return_counts=True)
  taken, _ = take_per_class(indices, labels[indices], classes,
                            stratified_counts(counts, size), rng)
  return taken


def valid_counts(counts: np.ndarray, fraction: float) -> np.ndarray:
  """Validation documents per class; rule 6 of `continual_tasks`."""
  counts = np.asarray(counts, np.int64)
  wanted = np.maximum(1, np.floor(counts * fraction + 0.5).astype(np.int64))
  return np.where(counts >= 2, np.minimum(counts - 1, wanted), 0)


def split_valid(
    indices: np.ndarray, labels: np.ndarray, fraction: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
  """Splits `indices` into `(train, valid)`, stratified by `labels`."""
  classes, counts = np.unique(labels[indices], return_counts=True)
  valid, train = take_per_class(indices, labels[indices], classes,
                                valid_counts(counts, fraction), rng)
  return train, valid
