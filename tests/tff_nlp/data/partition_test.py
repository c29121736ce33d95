"""Tests of the Dirichlet label-skew client split."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import data
from tff_nlp import errors


def _labels(counts) -> np.ndarray:
  """Label ids with `counts[k]` examples of label k, interleaved."""
  labels = np.concatenate([np.full(n, k) for k, n in enumerate(counts)])
  return np.random.default_rng(123).permutation(labels)


# Shaped like r8 (8 labels, one dominant, one tiny), scaled down.
_TRAIN = _labels([400, 60, 700, 10, 50, 50, 30, 60])
_TEST = _labels([160, 25, 280, 4, 20, 20, 12, 25])


def _split(**kwargs) -> data.Partition:
  args = dict(num_clients=5, alpha=0.5, seed=0, min_train_examples=20)
  args.update(kwargs)
  return data.dirichlet_label_skew(_TRAIN, _TEST, **args)


def _label_counts(labels, indices, num_labels=8):
  return np.stack([np.bincount(labels[i], minlength=num_labels)
                   for i in indices], axis=1)  # [num_labels, num_clients]


class DirichletLabelSkewExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_same_seed_same_split(self):
    a, b = _split(seed=7), _split(seed=7)
    for x, y in zip(a.train_indices + a.test_indices,
                    b.train_indices + b.test_indices):
      np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.label_proportions, b.label_proportions)
    self.assertNotEqual(a.train_sizes(), _split(seed=8).train_sizes())

  @parameterized.product(alpha=[0.1, 0.5, 10.0], num_clients=[1, 3, 8],
                         seed=[0, 1])
  def test_every_example_once_and_minimum_sizes(self, alpha, num_clients,
                                                seed):
    split = _split(alpha=alpha, num_clients=num_clients, seed=seed,
                   min_train_examples=30, min_test_examples=5)
    self.assertEqual(split.num_clients, num_clients)
    for indices, n in ((split.train_indices, len(_TRAIN)),
                       (split.test_indices, len(_TEST))):
      np.testing.assert_array_equal(np.sort(np.concatenate(indices)),
                                    np.arange(n))
      for client_indices in indices:
        np.testing.assert_array_equal(client_indices, np.sort(client_indices))
    self.assertGreaterEqual(min(split.train_sizes()), 30)
    self.assertGreaterEqual(min(split.test_sizes()), 5)

  @parameterized.parameters(0.1, 1.0)
  def test_train_and_test_follow_the_same_label_proportions(self, alpha):
    split = _split(alpha=alpha)
    q = split.label_proportions
    self.assertEqual(q.shape, (8, 5))
    np.testing.assert_allclose(q.sum(axis=1), 1.0)
    for labels, indices in ((_TRAIN, split.train_indices),
                            (_TEST, split.test_indices)):
      counts = _label_counts(labels, indices)
      n_k = np.bincount(labels)[:, None]
      # Cutting at rounded cumulative shares puts each client within one
      # example of its exact share q·n_k.
      self.assertLessEqual(np.max(np.abs(counts - q * n_k)), 1.0 + 1e-9)

  def test_small_alpha_skews_labels_and_sizes(self):
    global_distribution = np.bincount(_TRAIN) / len(_TRAIN)

    def mean_distance_to_global(split):
      """Mean total-variation distance of the clients' label mixes."""
      counts = _label_counts(_TRAIN, split.train_indices)
      distributions = counts / counts.sum(axis=0)
      return np.mean(0.5 * np.abs(
          distributions - global_distribution[:, None]).sum(axis=0))

    skewed = _split(alpha=0.1, min_train_examples=1)
    near_iid = _split(alpha=1000.0, min_train_examples=1)
    self.assertLess(mean_distance_to_global(near_iid), 0.03)
    self.assertGreater(mean_distance_to_global(skewed), 0.25)
    # Near-i.i.d. clients have about 1360 / 5 = 272 examples each.
    self.assertLess(np.ptp(near_iid.train_sizes()), 15)
    self.assertGreater(np.ptp(skewed.train_sizes()), 200)

  def test_one_client_gets_everything(self):
    split = data.dirichlet_label_skew(
        np.array([1, 0, 1]), np.array([0]), num_clients=1, alpha=0.5, seed=0)
    np.testing.assert_array_equal(split.train_indices[0], [0, 1, 2])
    np.testing.assert_array_equal(split.test_indices[0], [0])
    np.testing.assert_array_equal(split.label_proportions, [[1.0], [1.0]])
    self.assertEqual(split.num_draws, 1)

  def test_redraws_until_minimum_is_met(self):
    # With alpha = 0.05 one client takes nearly all of each label, so a
    # minimum of 200 per client (1000 of 1360 in all) needs many draws.
    split = _split(alpha=0.05, min_train_examples=200, min_test_examples=0,
                   max_draws=100000)
    self.assertGreater(split.num_draws, 1)
    self.assertGreaterEqual(min(split.train_sizes()), 200)

  # Too many clients for the data: an InputError (the binaries' one-line
  # error) naming num_clients, its value and the limit: 1360 // 273 = 4,
  # 546 // 110 = 4; with 250 each, 1360 // 250 = 5 clients fit by size.
  @parameterized.named_parameters(
      ('impossible_train_minimum', dict(min_train_examples=273),
       r'^num_clients=5: 5 clients with at least 273 training examples each '
       r'need 1365, but there are 1360, so at most 4 clients\.$'),
      ('impossible_test_minimum', dict(min_test_examples=110),
       r'^num_clients=5: .* at least 110 test examples each need 550, but '
       r'there are 546, so at most 4 clients\.$'),
      ('draws_exhausted', dict(alpha=0.05, min_train_examples=250,
                               max_draws=3),
       r'^num_clients=5: no split into 5 clients .* in 3 '
       r'Dirichlet\(alpha=0.05\) draws \(the sizes alone allow at most 5 '
       r'clients\)'),
  )
  def test_too_many_clients(self, kwargs, message):
    with self.assertRaisesRegex(errors.InputError, message):
      _split(**kwargs)

  @parameterized.named_parameters(
      ('zero_clients', dict(num_clients=0), 'num_clients must be positive'),
      ('zero_alpha', dict(alpha=0.0), 'alpha must be a positive number'),
      ('nan_alpha', dict(alpha=float('nan')), 'alpha must be a positive'),
      ('negative_minimum', dict(min_test_examples=-1), 'must be >= 0'),
      ('zero_draws', dict(max_draws=0), 'max_draws must be positive'),
  )
  def test_bad_arguments(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      _split(**kwargs)

  @parameterized.named_parameters(
      ('float_labels', np.array([0.0, 1.0]), '1-D integer array'),
      ('matrix_labels', np.zeros((2, 2), np.int64), '1-D integer array'),
      ('negative_label', np.array([0, -1]), 'negative label id'),
  )
  def test_bad_labels(self, labels, message):
    with self.assertRaisesRegex(ValueError, 'train_labels .*' + message):
      data.dirichlet_label_skew(labels, np.array([0]), num_clients=1,
                                alpha=1.0, seed=0)


if __name__ == '__main__':
  tf.test.main()
