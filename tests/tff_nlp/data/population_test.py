"""Tests of `data.population`: simulated users drawn lazily from a pool."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.data import population as population_lib
from tff_nlp.data import tags as tags_lib

_V, _T = 20, 4


def _pool(num_examples=60, num_labels=3, seed=0):
  """A pool whose label frequencies are 1/2, 1/3, 1/6 (30/20/10 examples)."""
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(num_labels), [30, 20, 10][:num_labels])
  rng.shuffle(labels)
  word_ids, word_counts = [], []
  for _ in range(num_examples):
    ids = np.sort(rng.choice(_V, rng.integers(1, 5), replace=False))
    word_ids.append(ids.astype(np.int64))
    word_counts.append(rng.integers(1, 3, len(ids)).astype(np.int32))
  tags = np.zeros([num_examples, _T], np.float32)
  tags[np.arange(num_examples), labels] = 1.0
  pool = tags_lib.EncodedTags(word_ids=tuple(word_ids),
                              word_counts=tuple(word_counts), tags=tags,
                              oov_words=0, oov_tags=0)
  return pool, labels


def _population(alpha=0.5, examples_per_user=4, num_users=100_000, seed=0,
                batch_size=3):
  pool, labels = _pool()
  config = population_lib.PopulationConfig(
      num_users=num_users, examples_per_user=examples_per_user,
      dirichlet_alpha=alpha, seed=seed)
  return population_lib.SimulatedPopulation(
      pool, labels, config, num_words=_V, batch_size=batch_size), pool, labels


def _indices(population, user):
  return population.example_indices(tf.constant(str(user))).numpy()


class PopulationExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_a_user_is_a_function_of_its_id_and_the_seed(self):
    population, pool, _ = _population()
    first = _indices(population, 99_999)
    self.assertAllEqual(_indices(population, 99_999), first)
    self.assertEqual(first.shape, (4,))
    self.assertTrue(np.all((first >= 0) & (first < len(pool))))
    other_seed, _, _ = _population(seed=1)
    users = range(0, 100_000, 5_000)
    self.assertNotEqual(
        [_indices(population, u).tolist() for u in users],
        [_indices(other_seed, u).tolist() for u in users])

  def test_dataset_is_the_batches_of_its_examples(self):
    # The same examples batched by the eager builder from a Python subset.
    population, pool, _ = _population(examples_per_user=7, batch_size=3)
    builder = tags_lib.BatchBuilder(num_words=_V, num_tags=_T, batch_size=3)
    for user in (0, 12_345, 99_999):
      expected = list(builder(pool.subset(_indices(population, user))))
      dataset = population.user_dataset(tf.constant(str(user)))
      self.assertEqual(dataset.element_spec['tags'],
                       tf.TensorSpec([None, _T], tf.float32))
      got = list(dataset)
      self.assertLen(got, 3)  # 7 examples in batches of 3: 3, 3, 1.
      self.assertLen(expected, 3)
      for a, b in zip(got, expected):
        tf.nest.map_structure(self.assertAllEqual, a, b)

  @parameterized.named_parameters(('skewed', 0.5), ('near_iid', 50.0))
  def test_label_mixtures_follow_the_dirichlet(self, alpha):
    # q_u ~ Dir(alpha p) with p = (1/2, 1/3, 1/6). Two of a user's examples
    # share a label with probability E[sum_l q_l^2]
    #   = sum_l p_l (alpha p_l + 1) / (alpha + 1)
    #   = (alpha * sum_l p_l^2 + 1) / (alpha + 1),   sum_l p_l^2 = 14/36:
    # 0.5 -> (0.5 * 14/36 + 1) / 1.5 = 0.7963; 50 -> (50 * 14/36 + 1) / 51
    # = 0.3813. Pooled over users, a label's frequency is p_l.
    population, _, labels = _population(alpha=alpha, examples_per_user=2)
    draws = np.stack([labels[_indices(population, u)]
                      for u in range(0, 100_000, 50)])  # 2,000 users.
    expected_same = (alpha * 14 / 36 + 1) / (alpha + 1)
    # Standard error sqrt(0.25 / 2000) = 0.011: four of them.
    self.assertAllClose(np.mean(draws[:, 0] == draws[:, 1]), expected_same,
                        atol=0.045)
    frequencies = np.bincount(draws.ravel(), minlength=3) / draws.size
    self.assertAllClose(frequencies, [1 / 2, 1 / 3, 1 / 6], atol=0.04)

  def test_ids_outside_the_population_are_refused(self):
    population, _, _ = _population(num_users=10)
    self.assertEqual(population.client_ids([0, 9]), ['0', '9'])
    with self.assertRaisesRegex(ValueError, 'User 10 is outside 0..9'):
      population.client_ids([10])
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                'not below the population size 10'):
      _indices(population, 10)
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                'negative user id'):
      _indices(population, -1)

  @parameterized.named_parameters(
      ('no_users', dict(num_users=0), 'num_users must be >= 1'),
      ('no_examples', dict(examples_per_user=0),
       'examples_per_user must be >= 1'),
      ('zero_alpha', dict(dirichlet_alpha=0.0), 'dirichlet_alpha must be > 0'),
  )
  def test_bad_config_is_refused(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      population_lib.PopulationConfig(**kwargs)

  def test_labels_must_match_the_pool(self):
    pool, labels = _pool()
    with self.assertRaisesRegex(ValueError, 'one entry per pool example'):
      population_lib.SimulatedPopulation(
          pool, labels[:-1], population_lib.PopulationConfig(),
          num_words=_V, batch_size=2)

  def test_label_frequencies(self):
    population, _, _ = _population()
    self.assertAllClose(population.label_frequencies, [1 / 2, 1 / 3, 1 / 6])
    self.assertEqual(collections.Counter(_pool()[1].tolist()),
                     {0: 30, 1: 20, 2: 10})


if __name__ == '__main__':
  tf.test.main()
