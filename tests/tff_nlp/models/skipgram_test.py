"""Skip-gram word vectors: pairs by hand, learning, seeding."""

import numpy as np
import tensorflow as tf

from tff_nlp.data import word_vectors
from tff_nlp.models import skipgram

# Subsampling off: every word is kept (keep probability min(1, ...) = 1).
_KEEP_ALL = dict(subsample=1e9)


class SkipGramPairsTest(tf.test.TestCase):

  def test_window_one_by_hand(self):
    # One sentence 0 1 2, window 1: each word sees its neighbours.
    centers, contexts = skipgram.skipgram_pairs(
        [np.array([0, 1, 2])], np.array([1, 1, 1]),
        skipgram.SkipGramConfig(window=1, **_KEEP_ALL),
        np.random.default_rng(0))
    self.assertCountEqual(list(zip(centers, contexts)),
                          [(0, 1), (1, 2), (1, 0), (2, 1)])

  def test_pairs_stay_in_their_sentence_and_window(self):
    sentences = [np.array([0, 1, 2, 3]), np.array([4, 5])]
    centers, contexts = skipgram.skipgram_pairs(
        sentences, np.ones(6), skipgram.SkipGramConfig(window=3, **_KEEP_ALL),
        np.random.default_rng(1))
    sentence = {w: s for s, ids in enumerate(sentences) for w in ids}
    for c, o in zip(centers, contexts):
      self.assertEqual(sentence[c], sentence[o])
      self.assertBetween(abs(int(c) - int(o)), 1, 3)
    # Distance 1 is within every window: all 8 neighbour pairs are there.
    near = {(c, o) for c, o in zip(centers, contexts) if abs(c - o) == 1}
    self.assertLen(near, 8)


class SkipGramTrainingTest(tf.test.TestCase):

  def test_learns_co_occurrence_and_is_seeded(self):
    # Two groups of words that never meet: after training, a word is closer
    # to its own group than to the other.
    texts = ['red green blue', 'blue green red', 'cat dog cow',
             'cow dog cat'] * 200
    config = skipgram.SkipGramConfig(dim=8, window=2, negatives=3,
                                     epochs=5, batch_size=64,
                                     learning_rate=0.05, **_KEEP_ALL)
    vocabulary, vectors, stats = skipgram.train_skipgram(texts, config)
    self.assertEqual(stats['tokens'], 2400)
    self.assertLess(stats['loss_last_tenth'], stats['loss_first_tenth'])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    row = {w: i for i, w in enumerate(vocabulary.words)}

    def cos(a, b):
      return float(unit[row[a]] @ unit[row[b]])

    for word, same, other in (('red', 'blue', 'cat'), ('dog', 'cow', 'green')):
      self.assertGreater(cos(word, same), cos(word, other))
    _, again, _ = skipgram.train_skipgram(texts, config)
    self.assertAllEqual(vectors, again)

  def test_written_vectors_read_back(self):
    path = self.create_tempfile().full_path
    vectors = np.array([[0.5, -1.25], [3e-7, 2.0]], np.float32)
    skipgram.write_vectors(path, ['a', 'b'], vectors)
    read = word_vectors.read_word_vectors(path)
    self.assertEqual(read.words, ('a', 'b'))
    self.assertAllClose(read.vectors, vectors)


if __name__ == '__main__':
  tf.test.main()
