"""Tests of the word vocabulary and fixed-length encoding."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.data import vocabulary as vocabulary_lib

# Counts (lowercased): b 3, c 3, a 1, d 1. Ranked by count, then
# alphabetically: b, c, a, d -> ids 2, 3, 4, 5.
_TEXTS = ['a b b', 'C c\tc b', 'd']


class VocabularyExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_tokenize_lowercases_and_splits_on_whitespace(self):
    self.assertEqual(vocabulary_lib.tokenize(' The  cat\tSAT\n'),
                     ['the', 'cat', 'sat'])

  @parameterized.named_parameters(
      ('all_words', 100, ('b', 'c', 'a', 'd')),
      ('exact_fit', 6, ('b', 'c', 'a', 'd')),
      ('top_two', 4, ('b', 'c')),
      ('reserved_only', 2, ()),
  )
  def test_build_keeps_most_frequent(self, max_size, words):
    vocabulary = vocabulary_lib.Vocabulary.build(_TEXTS, max_size)
    self.assertEqual(vocabulary.words, words)
    self.assertEqual(vocabulary.size, len(words) + 2)

  def test_ids(self):
    vocabulary = vocabulary_lib.Vocabulary.build(_TEXTS, 4)
    self.assertEqual(vocabulary_lib.PAD_ID, 0)
    self.assertEqual(vocabulary_lib.OOV_ID, 1)
    self.assertEqual(
        [vocabulary.token_id(w) for w in ('b', 'c', 'a', 'zzz', 'B')],
        [2, 3, 1, 1, 1],  # 'a' fell out of the top 2; lookups are exact.
    )

  def test_encode_pads_truncates_and_maps_oov(self):
    vocabulary = vocabulary_lib.Vocabulary.build(_TEXTS, 100)
    ids = vocabulary.encode(['B a', 'x c C b a d b', 'unknown'],
                            max_length=4)
    self.assertEqual(ids.dtype, np.int32)
    np.testing.assert_array_equal(ids, [
        [2, 4, 0, 0],  # b a <pad> <pad>
        [1, 3, 3, 2],  # x->OOV c c b, cut after 4 tokens
        [1, 0, 0, 0],
    ])

  @parameterized.named_parameters(
      # Token counts 2, 7, 1, 4, 0 (OOV and known words alike).
      ('length_4', 4, [False, True, False, False, False]),  # Only 7 > 4.
      ('length_3', 3, [False, True, False, True, False]),  # 7 and 4 > 3.
      ('length_1', 1, [True, True, False, True, False]),  # All but 1 and 0.
  )
  def test_encode_with_truncation_marks_texts_longer_than_the_length(
      self, max_length, truncated):
    vocabulary = vocabulary_lib.Vocabulary.build(_TEXTS, 100)
    texts = ['B a', 'x c C b a d b', 'unknown', 'a  b\tc d', ' ']
    ids, cut = vocabulary.encode_with_truncation(texts, max_length)
    self.assertEqual(cut.dtype, bool)
    np.testing.assert_array_equal(cut, truncated)
    np.testing.assert_array_equal(ids, vocabulary.encode(texts, max_length))

  def test_encode_empty_list(self):
    ids = vocabulary_lib.Vocabulary.build(_TEXTS, 10).encode([], max_length=3)
    self.assertEqual(ids.shape, (0, 3))

  @parameterized.named_parameters(
      ('build_too_small',
       lambda: vocabulary_lib.Vocabulary.build(_TEXTS, 1),
       'max_size must be at least 2'),
      ('duplicate_words', lambda: vocabulary_lib.Vocabulary(['a', 'a']),
       'distinct'),
      ('zero_length',
       lambda: vocabulary_lib.Vocabulary(['a']).encode(['a'], max_length=0),
       'max_length must be positive'),
  )
  def test_errors(self, fn, message):
    with self.assertRaisesRegex(ValueError, message):
      fn()


if __name__ == '__main__':
  tf.test.main()
