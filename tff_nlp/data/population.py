"""A cross-device population: many simulated users drawn lazily from a pool.

Cross-device federated learning samples a few hundred to thousands of
clients per round from populations of 10^5 to 10^6 users. No public text
classification set has that many users, so `SimulatedPopulation` simulates
them from a pool of labelled examples (e.g. TREC-50's 5,452 training
questions), the way Hsu et al. (2019, "Measuring the effects of non-identical
data distribution for federated visual classification") build non-IID
clients: user u has a label mixture q_u ~ Dirichlet(alpha * p), p the pool's
label frequencies (so E[q_u] = p and a smaller alpha is more skewed), and
`examples_per_user` examples, each a label drawn from q_u and then a pool
example of that label drawn uniformly. Users share pool examples (10^5 users
of 8 examples are 146 draws per pool question): the population is a
simulation of many users' *distributions*, not of new text.

Nothing is stored per user. `user_dataset(user_id)` draws user u's examples
from stateless random numbers seeded by `(seed, u)` inside TensorFlow, so it
traces into a graph from a `tf.string` id: TFF can build each sampled client's
dataset inside its worker from the id alone
(`tff.simulation.compose_dataset_computation_with_learning_process`), and a
round sends N short strings instead of N datasets. The same id always gives
the same examples; the pool is a constant of the graph.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from tff_nlp.data import tags as tags_lib


@dataclasses.dataclass(frozen=True)
class PopulationConfig:
  """The simulated users.

  Attributes:
    num_users: Users in the population (ids '0' .. str(num_users - 1)).
    examples_per_user: Examples each user holds.
    dirichlet_alpha: Concentration of the users' label mixtures around the
      pool's label frequencies; smaller is more skewed.
    seed: Seed of every user's draws.
  """

  num_users: int = 100_000
  examples_per_user: int = 8
  dirichlet_alpha: float = 0.5
  seed: int = 0

  def __post_init__(self):
    for name in ('num_users', 'examples_per_user'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be >= 1, got {getattr(self, name)}.')
    if not self.dirichlet_alpha > 0:
      raise ValueError(
          f'dirichlet_alpha must be > 0, got {self.dirichlet_alpha}.')


class SimulatedPopulation:
  """Users whose examples are drawn from a pool from their ids alone.

  Attributes:
    config: The `PopulationConfig`.
    label_frequencies: p, float64 [L], the pool's label frequencies (labels
      without examples have none and are never drawn).
  """

  def __init__(self, pool: tags_lib.EncodedTags, labels: np.ndarray,
               config: PopulationConfig, *, num_words: int, batch_size: int):
    """Holds the pool as tensors.

    Args:
      pool: The examples users draw from.
      labels: int [len(pool)], each pool example's label in [0, L).
      config: The users.
      num_words: V, the bag's dense width (the model's rows).
      batch_size: Examples per batch of a user's dataset.

    Raises:
      ValueError: If `labels` does not match the pool.
    """
    labels = np.asarray(labels)
    if labels.shape != (len(pool),) or len(pool) == 0:
      raise ValueError(f'labels must have one entry per pool example '
                       f'({len(pool)}), got shape {labels.shape}.')
    if labels.min() < 0:
      raise ValueError(f'labels must be >= 0, got {labels.min()}.')
    self.config = config
    self.num_words = num_words
    self.batch_size = batch_size
    counts = np.bincount(labels)
    self.label_frequencies = counts / counts.sum()
    # Numpy, not tensors: the draws trace into graphs (TFF's among them)
    # that must own their constants, not capture eager tensors.
    self._by_label = np.argsort(labels, kind='stable').astype(np.int64)
    self._label_starts = np.concatenate(
        [[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    self._label_counts = counts.astype(np.int64)
    # Mixture concentrations alpha * p; a label without examples gets a
    # negligible one rather than 0, which the gamma sampler refuses.
    self._concentration = np.maximum(
        config.dirichlet_alpha * self.label_frequencies, 1e-30
    ).astype(np.float32)
    self._word_ids = np.concatenate(pool.word_ids).astype(np.int64)
    self._word_counts = np.concatenate(pool.word_counts).astype(np.int32)
    self._row_lengths = np.array([len(w) for w in pool.word_ids], np.int64)
    # The multi-hot tags as their column ids: a TREC-50 question has 2, so
    # the graph holds 11K ids instead of a 1.2 MB dense [5452, 57] table.
    tag_rows, tag_columns = np.nonzero(pool.tags)
    self._tag_columns = tag_columns.astype(np.int64)
    self._tag_row_lengths = np.bincount(
        tag_rows, minlength=len(pool)).astype(np.int64)
    self._num_tags = pool.tags.shape[1]

  @property
  def num_users(self) -> int:
    return self.config.num_users

  def client_ids(self, users) -> list[str]:
    """The string ids of user numbers (as TFF's `ClientData` names them)."""
    ids = []
    for u in users:
      if not 0 <= int(u) < self.num_users:
        raise ValueError(f'User {u} is outside 0..{self.num_users - 1}.')
      ids.append(str(int(u)))
    return ids

  def example_indices(self, user_id: tf.Tensor) -> tf.Tensor:
    """int64 [examples_per_user], the pool examples of user `user_id`.

    Args:
      user_id: A scalar `tf.string`, the user's number in decimal.

    Returns:
      The indices, a function of `(config.seed, user)` only.
    """
    user = tf.strings.to_number(user_id, tf.int64)
    checks = [
        tf.debugging.assert_less(
            user, tf.constant(self.num_users, tf.int64),
            message=f'user id is not below the population size '
                    f'{self.num_users}'),
        tf.debugging.assert_non_negative(user, message='negative user id'),
    ]
    with tf.control_dependencies(checks):
      user = tf.identity(user)
    seeds = tf.random.experimental.stateless_split(
        tf.stack([tf.constant(self.config.seed, tf.int64), user]), num=3)
    gamma = tf.random.stateless_gamma(
        self._concentration.shape, seed=seeds[0],
        alpha=tf.constant(self._concentration))
    # Draw labels from log q_u; floor at the smallest normal float so a label
    # whose gamma draw underflowed to 0 stays possible only in name.
    log_q = tf.math.log(tf.maximum(gamma / tf.reduce_sum(gamma), 1e-37))
    user_labels = tf.random.stateless_categorical(
        log_q[tf.newaxis], self.config.examples_per_user, seed=seeds[1],
        dtype=tf.int64)[0]
    uniform = tf.random.stateless_uniform(
        [self.config.examples_per_user], seed=seeds[2], dtype=tf.float64)
    counts = tf.gather(tf.constant(self._label_counts), user_labels)
    within = tf.minimum(
        tf.cast(tf.floor(uniform * tf.cast(counts, tf.float64)), tf.int64),
        counts - 1)
    return tf.gather(
        tf.constant(self._by_label),
        tf.gather(tf.constant(self._label_starts), user_labels) + within)

  def _multi_hot(self, indices: tf.Tensor) -> tf.Tensor:
    """float32 [len(indices), T], the tags of pool examples `indices`."""
    columns = tf.gather(
        tf.RaggedTensor.from_row_lengths(self._tag_columns,
                                         self._tag_row_lengths), indices)
    multi_hot = tf.math.bincount(
        tf.cast(columns, tf.int32), minlength=self._num_tags,
        maxlength=self._num_tags, dtype=tf.float32, axis=-1,
        binary_output=True)
    # bincount leaves the width unknown; the dataset's type must state it.
    return tf.reshape(multi_hot, [-1, self._num_tags])

  def user_dataset(self, user_id: tf.Tensor) -> tf.data.Dataset:
    """User `user_id`'s batches (traceable from a `tf.string` id).

    Args:
      user_id: A scalar `tf.string`, the user's number in decimal.

    Returns:
      A dataset whose element spec is `tags.element_type_spec(T)`.
    """
    indices = self.example_indices(user_id)
    row_lengths = tf.constant(self._row_lengths)
    word_ids = tf.gather(
        tf.RaggedTensor.from_row_lengths(self._word_ids, row_lengths), indices)
    word_counts = tf.gather(
        tf.RaggedTensor.from_row_lengths(self._word_counts, row_lengths),
        indices)
    return tags_lib.batches_from_flat(
        word_ids.flat_values, word_counts.flat_values, word_ids.row_splits,
        self._multi_hot(indices),
        num_words=self.num_words, batch_size=self.batch_size)
