"""Tests of the StackOverflow-format tag data."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.data import tags


def _examples():
  return [
      tags.TagExample(tokens='b a a', title='C', tags='x|y'),
      tags.TagExample(tokens='b d', title='', tags='y||z'),
      tags.TagExample(tokens='a e', title='', tags='y'),
  ]


def _reference_batches(encoded, num_words, batch_size, shuffle_seed):
  """numpy: the dense bags and tags of each batch, in the seeded order."""
  order = np.arange(len(encoded))
  if shuffle_seed is not None:
    order = np.random.default_rng(shuffle_seed).permutation(len(encoded))
  batches = []
  for start in range(0, len(order), batch_size):
    rows = order[start:start + batch_size]
    bags = np.zeros([len(rows), num_words], np.int32)
    for r, i in enumerate(rows):
      bags[r, encoded.word_ids[i]] += encoded.word_counts[i]
    batches.append((bags, encoded.tags[rows]))
  return batches


class TagsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters([
      ('earn', ['earn']),
      ('DESC:manner', ['DESC', 'DESC:manner']),
      ('a:b:c', ['a', 'a:b', 'a:b:c']),
  ])
  def test_label_to_tags(self, label, expected):
    self.assertEqual(tags.label_to_tags(label), expected)

  def test_examples_from_labels(self):
    examples = tags.examples_from_labels(['how far is it'], ['NUM:dist'])
    self.assertEqual(examples, [tags.TagExample(
        tokens='how far is it', title='', tags='NUM|NUM:dist')])
    with self.assertRaisesRegex(ValueError, '2 texts but 1 labels'):
      tags.examples_from_labels(['a', 'b'], ['x'])

  def test_build_vocabularies_ranks_and_breaks_ties_alphabetically(self):
    vocab = tags.TagVocabularies.build(_examples(), max_words=3, max_tags=2)
    # Words: a 3, b 2, then c/d/e 1 each -> c (title words count, lowercased).
    self.assertEqual(vocab.words, ('a', 'b', 'c'))
    # Tags by examples: y 3, then x/z 1 each -> x; the empty tag is ignored.
    self.assertEqual(vocab.tags, ('y', 'x'))
    self.assertEqual((vocab.num_word_rows, vocab.num_tag_columns), (4, 3))

  def test_oov_buckets_are_deterministic_and_in_range(self):
    vocab = tags.TagVocabularies(words=('a',), tags=('y',),
                                 num_oov_word_buckets=4, num_oov_tag_buckets=2)
    ids = [vocab.word_id(w) for w in ('zebra', 'yak', 'a', 'zebra')]
    self.assertEqual(ids[2], 0)
    self.assertEqual(ids[0], ids[3])
    self.assertTrue(all(1 <= i < 5 for i in ids[:2]))
    self.assertTrue(1 <= vocab.tag_id('other') < 3)

  @parameterized.parameters([
      (dict(num_oov_word_buckets=0), 'num_oov_word_buckets must be >= 1'),
      (dict(words=('a', 'a')), 'words must be distinct'),
  ])
  def test_vocabulary_rejects(self, kwargs, match):
    with self.assertRaisesRegex(ValueError, match):
      tags.TagVocabularies(**dict(dict(words=('a',), tags=('y',)), **kwargs))

  def test_encode_counts_words_and_oov(self):
    vocab = tags.TagVocabularies(words=('a', 'b'), tags=('y', 'x'))
    encoded = tags.encode(_examples(), vocab)
    # Example 0: 'c b a a' -> a (0) x2, b (1) x1, c -> OOV row 2.
    np.testing.assert_array_equal(encoded.word_ids[0], [0, 1, 2])
    np.testing.assert_array_equal(encoded.word_counts[0], [2, 1, 1])
    # OOV occurrences: c, d, e.
    self.assertEqual(encoded.oov_words, 3)
    # Tags: [y, x, OOV]; example 1 has y and the OOV z.
    np.testing.assert_array_equal(encoded.tags,
                                  [[1, 1, 0], [1, 0, 1], [1, 0, 0]])
    self.assertEqual(encoded.oov_tags, 1)

  def test_to_dataset_batches_bags_of_counts(self):
    vocab = tags.TagVocabularies(words=('a', 'b'), tags=('y', 'x'))
    encoded = tags.encode(_examples(), vocab)
    dataset = tags.to_dataset(encoded, num_words=vocab.num_word_rows,
                              batch_size=2)
    self.assertEqual(dataset.element_spec, tags.element_type_spec(3))
    batches = list(dataset)
    self.assertEqual([len(b['tags']) for b in batches], [2, 1])
    dense = tf.sparse.to_dense(tf.SparseTensor(**batches[0]['tokens']))
    np.testing.assert_array_equal(dense, [[2, 1, 1], [0, 1, 1]])

  def test_to_dataset_shuffles_reproducibly(self):
    vocab = tags.TagVocabularies(words=('a', 'b'), tags=('y', 'x'))
    encoded = tags.encode(_examples() * 3, vocab)

    def order(seed):
      rows = []
      for batch in tags.to_dataset(encoded, num_words=3, batch_size=4,
                                   shuffle_seed=seed):
        bag = tf.sparse.to_dense(tf.SparseTensor(**batch['tokens'])).numpy()
        rows += [tuple(r) for r in bag]
      return rows

    self.assertEqual(order(1), order(1))
    # A permutation of the examples, not the file order.
    self.assertEqual(sorted(order(1)), sorted(order(None)))
    self.assertNotEqual(order(1), order(None))

  @parameterized.product(batch_size=[1, 2, 5], shuffle_seed=[None, (4, 3, 1)])
  def test_to_dataset_matches_numpy_reference(self, batch_size, shuffle_seed):
    vocab = tags.TagVocabularies(words=('a', 'b', 'c'), tags=('y', 'x'))
    encoded = tags.encode(_examples() * 3, vocab)
    got = list(tags.to_dataset(encoded, num_words=vocab.num_word_rows,
                               batch_size=batch_size,
                               shuffle_seed=shuffle_seed))
    want = _reference_batches(encoded, vocab.num_word_rows, batch_size,
                              shuffle_seed)
    self.assertEqual(len(got), len(want))
    for batch, (bags, tag_rows) in zip(got, want):
      np.testing.assert_array_equal(
          tf.sparse.to_dense(tf.SparseTensor(**batch['tokens'])), bags)
      np.testing.assert_array_equal(batch['tags'], tag_rows)

  def test_to_dataset_of_no_examples_is_empty(self):
    vocab = tags.TagVocabularies(words=('a',), tags=('y',))
    encoded = tags.encode([], vocab)
    dataset = tags.to_dataset(encoded, num_words=vocab.num_word_rows,
                              batch_size=2)
    self.assertEqual(dataset.element_spec,
                     tags.element_type_spec(vocab.num_tag_columns))
    self.assertFalse(list(dataset))

  @parameterized.product(batch_size=[1, 2, 5, 9], keras_pairs=[False, True])
  def test_to_padded_dataset_matches_numpy_reference(self, batch_size,
                                                     keras_pairs):
    vocab = tags.TagVocabularies(words=('a', 'b', 'c'), tags=('y', 'x'))
    encoded = tags.encode(_examples() * 3, vocab)  # 9 examples.
    got = list(tags.to_padded_dataset(
        encoded, num_words=vocab.num_word_rows, batch_size=batch_size,
        keras_pairs=keras_pairs))
    want = _reference_batches(encoded, vocab.num_word_rows, batch_size, None)
    self.assertEqual(len(got), len(want))
    widths = set()
    for batch, (bags, tag_rows) in zip(got, want):
      tokens, batch_tags = batch if keras_pairs else (batch['tokens'],
                                                      batch['tags'])
      indices, values = tokens['indices'].numpy(), tokens['values'].numpy()
      np.testing.assert_array_equal(tokens['dense_shape'], bags.shape)
      np.testing.assert_array_equal(batch_tags, tag_rows)
      dense = np.zeros(bags.shape, np.int32)
      np.add.at(dense, (indices[:, 0], indices[:, 1]), values)
      np.testing.assert_array_equal(dense, bags)
      # The padding: count 0 at (example 0, word 0), after the real entries.
      real = np.count_nonzero(bags)
      np.testing.assert_array_equal(indices[real:], 0)
      np.testing.assert_array_equal(values[real:], 0)
      self.assertTrue(np.all(values[:real] > 0))
      widths.add(len(values))
    self.assertLen(widths, 1)  # Every batch padded to the same count.

  def test_to_padded_dataset_of_no_examples_is_empty(self):
    vocab = tags.TagVocabularies(words=('a',), tags=('y',))
    dataset = tags.to_padded_dataset(tags.encode([], vocab), num_words=2,
                                     batch_size=2)
    self.assertTrue(dataset.element_spec['tokens']['indices'].shape
                    .is_compatible_with([None, 2]))
    self.assertFalse(list(dataset))

  def test_batch_builder_rejects_other_tag_widths(self):
    vocab = tags.TagVocabularies(words=('a', 'b'), tags=('y', 'x'))
    builder = tags.BatchBuilder(num_words=3, num_tags=5, batch_size=2)
    with self.assertRaisesRegex(ValueError, '3 tag columns; this builder was '
                                'made for 5'):
      builder(tags.encode(_examples(), vocab))


if __name__ == '__main__':
  tf.test.main()
