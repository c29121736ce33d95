"""Tests of the federated text set-up: clients, batches, accuracy."""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import models
from apps.common import text_classification_task as text_classification

# Labels a, b; 'rare' occurs only in test, so it must encode as OOV.
_TRAIN = ''.join(
    f'{"a" if i % 3 else "b"}\tword{i % 4} common text {i}\n'
    for i in range(30)
)
_TEST = ''.join(
    f'{"a" if i % 2 else "b"}\tword{i % 4} rare\n' for i in range(12)
)


def _client(n_train, n_test=2, length=3):
  return text_classification.ClientExamples(
      train_x=np.arange(n_train * length, dtype=np.int32).reshape(
          n_train, length),
      train_y=np.arange(n_train, dtype=np.int32),
      test_x=np.zeros((n_test, length), np.int32),
      test_y=np.zeros(n_test, np.int32),
  )


class AccuraciesExecutionTest(tf.test.TestCase):

  def test_macro_and_micro_averages(self):
    accuracies = text_classification.Accuracies(correct=(1, 9, 0),
                                                totals=(2, 10, 3))
    self.assertAllClose(accuracies.per_client, [0.5, 0.9, 0.0])
    # MacroAvg = (0.5 + 0.9 + 0) / 3; MicroAvg = (1 + 9 + 0) / 15.
    self.assertAlmostEqual(accuracies.macro, 1.4 / 3)
    self.assertAlmostEqual(accuracies.micro, 10 / 15)

  def test_evaluate_counts_correct_argmax_per_client(self):
    # Predicts the class given by the first token id.
    keras_model = tf.keras.Sequential(
        [tf.keras.layers.Lambda(lambda x: tf.one_hot(x[:, 0], 3))])
    clients = (
        text_classification.ClientExamples(
            train_x=np.zeros((1, 2), np.int32),
            train_y=np.zeros(1, np.int32),
            test_x=np.array([[0, 5], [2, 5], [1, 0], [2, 2]], np.int32),
            test_y=np.array([0, 1, 1, 2], np.int32),  # right: 1st, 3rd, 4th
        ),
        text_classification.ClientExamples(
            train_x=np.zeros((1, 2), np.int32),
            train_y=np.zeros(1, np.int32),
            test_x=np.array([[1, 1]], np.int32),
            test_y=np.array([0], np.int32),  # wrong
        ),
    )
    accuracies = text_classification.evaluate_classifier(keras_model, clients,
                                                         batch_size=3)
    self.assertEqual(accuracies.correct, (3, 0))
    self.assertEqual(accuracies.totals, (4, 1))


class TrainDatasetExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _batches(self, client, **kwargs):
    dataset = text_classification.train_dataset(client, **kwargs)
    return [(x.numpy(), y.numpy()) for x, y in dataset]

  def test_element_spec_matches_the_model_input_spec(self):
    dataset = text_classification.train_dataset(_client(5), batch_size=2,
                                                shuffle_seed=None)
    self.assertEqual(dataset.element_spec, models.input_spec(3))

  @parameterized.named_parameters(
      ('even', 6, 3, [3, 3]),
      ('remainder', 7, 3, [3, 3, 1]),
      ('one_batch', 2, 16, [2]),
  )
  def test_batch_sizes(self, n, batch_size, sizes):
    batches = self._batches(_client(n), batch_size=batch_size,
                            shuffle_seed=None)
    self.assertEqual([len(y) for _, y in batches], sizes)

  def test_unshuffled_keeps_order(self):
    client = _client(5)
    x = np.concatenate([b[0] for b in self._batches(
        client, batch_size=2, shuffle_seed=None)])
    self.assertAllEqual(x, client.train_x)

  def test_shuffle_is_a_seeded_permutation_of_rows(self):
    client = _client(20)

    def order(seed):
      batches = self._batches(client, batch_size=8, shuffle_seed=seed)
      x = np.concatenate([b[0] for b in batches])
      y = np.concatenate([b[1] for b in batches])
      # Rows stay whole: row y of train_x is [3y, 3y + 1, 3y + 2].
      self.assertAllEqual(x, client.train_x[y])
      return y

    first = order((0, 1, 2))
    self.assertAllEqual(np.sort(first), np.arange(20))
    self.assertAllEqual(first, order((0, 1, 2)))
    self.assertNotAllEqual(first, order((0, 2, 2)))
    self.assertAllEqual(first, np.random.default_rng((0, 1, 2)).permutation(20))


def _write_toy_dataset(root, train, test):
  """Writes `<root>/text_classification/toy/{train,test}.tsv`; returns root."""
  folder = os.path.join(root, 'text_classification', 'toy')
  os.makedirs(folder)
  for name, content in (('train', train), ('test', test)):
    with open(os.path.join(folder, name + '.tsv'), 'w') as f:
      f.write(content)
  return root


class PrepareClientsExecutionTest(tf.test.TestCase):

  def test_clients_hold_their_partition_encoded(self):
    root = _write_toy_dataset(self.create_tempdir().full_path, _TRAIN, _TEST)
    config = text_classification.ClientDataConfig(
        dataset='toy', num_clients=3, dirichlet_alpha=1.0,
        min_train_examples=3, vocab_size=6, max_length=4)
    prepared = text_classification.prepare_clients(config, data_dir=root,
                                                   seed=5)
    again = text_classification.prepare_clients(config, data_dir=root, seed=5)

    self.assertEqual(prepared.label_names, ('a', 'b'))
    # Train counts: common 30, text 30, word0..3 8/8/7/7 -> top 4 words
    # ranked (count, then alphabetically): common, text, word0, word1.
    self.assertEqual(prepared.vocabulary.words,
                     ('common', 'text', 'word0', 'word1'))
    self.assertLen(prepared.clients, 3)
    spec = prepared.model_spec(embedding_dim=8, seed=1)
    self.assertEqual(spec, models.TextClassifierSpec(
        vocab_size=6, num_classes=2, max_length=4, embedding_dim=8, seed=1))

    train_lines = [l.split('\t') for l in _TRAIN.splitlines()]
    test_lines = [l.split('\t') for l in _TEST.splitlines()]
    label_id = {'a': 0, 'b': 1}
    for client, client_again, train_indices, test_indices in zip(
        prepared.clients, again.clients, prepared.partition.train_indices,
        prepared.partition.test_indices):
      self.assertGreaterEqual(client.num_train, 3)
      self.assertAllEqual(client.train_x, client_again.train_x)
      for row, i in enumerate(train_indices):
        label, text = train_lines[i]
        self.assertEqual(client.train_y[row], label_id[label])
        # "word<k> common text <i>": word0/word1 known, <i> never is.
        word_id = {'word0': 4, 'word1': 5}.get(text.split()[0], 1)
        self.assertAllEqual(client.train_x[row], [word_id, 2, 3, 1])
      for row, i in enumerate(test_indices):
        label, text = test_lines[i]
        self.assertEqual(client.test_y[row], label_id[label])
        word_id = {'word0': 4, 'word1': 5}.get(text.split()[0], 1)
        self.assertAllEqual(client.test_x[row], [word_id, 1, 0, 0])


# Train text i has 1 + i % 6 tokens (1..6, each length 5 times in 30 texts);
# test text i has 1 + i % 3 (1..3, each 4 times in 12). Labels as above.
_TRAIN_LENGTHS = ''.join(
    f'{"a" if i % 3 else "b"}\t{" ".join(["w"] * (1 + i % 6))}\n'
    for i in range(30)
)
_TEST_LENGTHS = ''.join(
    f'{"a" if i % 2 else "b"}\t{" ".join(["w"] * (1 + i % 3))}\n'
    for i in range(12)
)


class TruncationExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # Texts of more than max_length tokens: train 5 per length above it,
      # test 4 per length above it.
      ('length_2', 2, 20, 4),  # Train lengths 3-6: 4 * 5; test 3: 1 * 4.
      ('length_4', 4, 10, 0),  # Train lengths 5, 6: 2 * 5; test none.
      ('length_6', 6, 0, 0),  # A text of exactly max_length is not cut.
  )
  def test_prepare_clients_counts_cut_texts(self, max_length, train, test):
    root = _write_toy_dataset(self.create_tempdir().full_path,
                              _TRAIN_LENGTHS, _TEST_LENGTHS)
    config = text_classification.ClientDataConfig(
        dataset='toy', num_clients=3, dirichlet_alpha=1.0,
        min_train_examples=3, vocab_size=6, max_length=max_length)
    with self.assertLogs('absl', level='INFO') as logs:
      prepared = text_classification.prepare_clients(config, data_dir=root,
                                                     seed=5)
    self.assertIn(f'toy: {train} of 30 training and {test} of 12 test texts '
                  f'cut at {max_length} tokens', '\n'.join(logs.output))
    truncated = prepared.truncated()
    self.assertEqual(truncated['max_length'], max_length)
    self.assertEqual((truncated['train'], truncated['test']), (train, test))
    # Each client's count: its texts with 1 + i % 6 (train) or 1 + i % 3
    # (test) > max_length tokens.
    self.assertEqual(truncated['clients'], [
        {'train': sum(1 + i % 6 > max_length for i in train_indices),
         'test': sum(1 + i % 3 > max_length for i in test_indices)}
        for train_indices, test_indices in zip(
            prepared.partition.train_indices,
            prepared.partition.test_indices)])
    self.assertEqual([(c.train_truncated, c.test_truncated)
                      for c in prepared.clients],
                     [(c['train'], c['test']) for c in truncated['clients']])


if __name__ == '__main__':
  tf.test.main()
