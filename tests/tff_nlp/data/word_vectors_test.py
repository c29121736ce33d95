"""Reading pre-trained word vectors and the embedding table they give."""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.data import vocabulary as vocabulary_lib
from tff_nlp.data import word_vectors


class WordVectorsTest(tf.test.TestCase, parameterized.TestCase):

  def _write(self, content: bytes) -> str:
    path = os.path.join(self.create_tempdir().full_path, 'vectors.txt')
    with open(path, 'wb') as f:
      f.write(content)
    return path

  def test_reads_words_and_vectors_in_order(self):
    vectors = word_vectors.read_word_vectors(
        self._write(b'the 0.5 -1\nof 2 3e-1\r\nzebra 0 0'))
    self.assertEqual(vectors.words, ('the', 'of', 'zebra'))
    self.assertEqual(vectors.dim, 2)
    self.assertAllClose(vectors.vectors, [[0.5, -1], [2, 0.3], [0, 0]])

  @parameterized.parameters(
      (b'a 1 2\nb 1\n', 2, r'1 values for \'b\'; the file\'s first line has 2'),
      (b'a 1 2\nb 1 x\n', 2, r'a value of \'b\' is not a number'),
      (b'a 1 2\nb 1 nan\n', 2, r'a value of \'b\' is not finite'),
      (b'a 1 2\na 3 4\n', 2, r'\'a\' is repeated'),
      (b'a\n', 1, r'expected "word v1 \.\.\. vD" with at least one value'),
      (b'a 1\n\xff 2\n', 2, r'not valid UTF-8'),
  )
  def test_bad_line_names_file_and_line(self, content, line, message):
    path = self._write(content)
    with self.assertRaisesRegex(errors.InputError,
                                f'{path}:{line}: {message}'):
      word_vectors.read_word_vectors(path)

  def test_empty_and_missing_files(self):
    with self.assertRaisesRegex(errors.InputError, 'empty file'):
      word_vectors.read_word_vectors(self._write(b''))
    with self.assertRaisesRegex(errors.InputError, 'file not found'):
      word_vectors.read_word_vectors('/no/such/vectors.txt')

  def test_embedding_table_by_hand(self):
    vectors = word_vectors.WordVectors(
        ('cat', 'dog'), np.array([[1, 2], [3, 4]], np.float32), 'v')
    # Ids: 0 padding, 1 OOV, 2 'dog', 3 'emu', 4 'cat'.
    vocabulary = vocabulary_lib.Vocabulary(['dog', 'emu', 'cat'])
    table, coverage = word_vectors.embedding_table(vocabulary, vectors, seed=0)
    self.assertEqual(table.shape, (5, 2))
    self.assertAllEqual(table[2], [3, 4])
    self.assertAllEqual(table[4], [1, 2])
    self.assertAlmostEqual(coverage, 2 / 3)
    # The others: U(-0.5 / 5, 0.5 / 5), seeded.
    for row in (0, 1, 3):
      self.assertAllInRange(table[row], -0.1, 0.1)
    again, _ = word_vectors.embedding_table(vocabulary, vectors, seed=0)
    self.assertAllEqual(table, again)

  def test_shared_glove_file(self):
    path = word_vectors.find_word_vectors(word_vectors.GLOVE_50D)
    self.assertEqual(path, os.path.join(data_root.find_data_dir(None),
                                        'word_vectors', word_vectors.GLOVE_50D))
    vectors = word_vectors.read_word_vectors(path)
    # SOURCES.md: 50,000 words, 50 dimensions, "the" first with the
    # published values 0.418 0.24968 -0.41242 ... -0.11514 -0.78581.
    self.assertEqual(vectors.vectors.shape, (50000, 50))
    self.assertEqual(vectors.words[0], 'the')
    self.assertAllClose(vectors.vectors[0, :3], [0.418, 0.24968, -0.41242])
    self.assertAllClose(vectors.vectors[0, -2:], [-0.11514, -0.78581])


if __name__ == '__main__':
  tf.test.main()
