"""Tests of `span_corruption` against hand-derived examples and properties.

References: examples worked out by hand from the T5 rules of the module
docstring (noise round(n·0.15) clipped to [1, n-1], spans round(noise / 3),
spans alternating from a non-noise one), the reconstruction of the text
from encoder input and target, the uniform distribution of cuttings, and a
SentencePiece model whose pieces are read back.
"""

import collections
import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.models import seq2seq
from tff_nlp.models import span_corruption as sc
from tff_nlp.models import subword_tokenizer

_SENTINELS = sc.sentinel_ids(100, 5)  # [99, 98, 97, 96, 95]


def _reconstruct(encoder, target, sentinels):
  """The text: each sentinel of `encoder` replaced by its target span."""
  spans, current = {}, None
  for token in target:
    if token in sentinels:
      current = int(token)
      spans[current] = []
    else:
      spans[current].append(int(token))
  text = []
  for token in encoder:
    text += spans[int(token)] if token in sentinels else [int(token)]
  return text


class SpanCorruptionTest(tf.test.TestCase, parameterized.TestCase):

  def test_sentinel_ids_count_down_from_the_top(self):
    self.assertAllEqual(_SENTINELS, [99, 98, 97, 96, 95])

  def test_apply_mask_hand_derived(self):
    # t1..t10 = 10..19; noise t3 t4 and t9 t10 (the docstring's example).
    mask = np.array([0, 0, 1, 1, 0, 0, 0, 0, 1, 1], bool)
    encoder, target = sc.apply_mask(np.arange(10, 20), mask, _SENTINELS)
    self.assertAllEqual(encoder, [10, 11, 99, 14, 15, 16, 17, 98])
    self.assertAllEqual(target, [99, 12, 13, 98, 18, 19])

  def test_apply_mask_one_token_spans(self):
    mask = np.array([0, 1, 0, 1, 0, 1], bool)
    encoder, target = sc.apply_mask([4, 5, 6, 7, 8, 9], mask, _SENTINELS)
    self.assertAllEqual(encoder, [4, 99, 6, 98, 8, 97])
    self.assertAllEqual(target, [99, 5, 98, 7, 97, 9])

  def test_apply_mask_refuses_more_spans_than_sentinels(self):
    with self.assertRaisesRegex(ValueError, '3 noise spans, but only 2'):
      sc.apply_mask([4, 5, 6, 7, 8, 9], np.array([0, 1, 0, 1, 0, 1], bool),
                    _SENTINELS[:2])

  def test_pack_hand_derived(self):
    x, y = sc.pack([(np.array([10, 99]), np.array([99, 11, 12])),
                    (np.array([20, 21, 22, 99]), np.array([99, 23]))])
    end, start = seq2seq.END_ID, seq2seq.START_ID
    self.assertAllEqual(x[seq2seq.ENCODER_TOKEN_IDS],
                        [[10, 99, end, 0, 0], [20, 21, 22, 99, end]])
    self.assertAllEqual(x[seq2seq.DECODER_TOKEN_IDS],
                        [[start, 99, 11, 12], [start, 99, 23, 0]])
    self.assertAllEqual(y, [[99, 11, 12, end], [99, 23, end, 0]])

  @parameterized.parameters(
      # (length, noise tokens, spans), by hand.
      (2, 1, 1),     # round(0.3) = 0, clipped to 1
      (10, 2, 1),    # round(1.5) = 2, round(2/3) = 1
      (20, 3, 1),    # round(3.0) = 3, round(1.0) = 1
      (40, 6, 2),    # round(6.0) = 6, round(2.0) = 2
      (100, 15, 5),  # round(15.0) = 15, round(5.0) = 5
      (127, 19, 6),  # round(19.05) = 19, round(6.33) = 6
  )
  def test_noise_mask_counts(self, length, noise, spans):
    for seed in range(5):
      mask = sc.noise_mask(length, np.random.default_rng(seed))
      self.assertLen(mask, length)
      self.assertEqual(mask.sum(), noise)
      starts = mask & ~np.concatenate([[False], mask[:-1]])
      self.assertEqual(starts.sum(), spans)
      self.assertFalse(mask[0])  # Starts with a non-noise span ...
      self.assertTrue(mask[-1])  # ... and ends with a noise span.

  def test_noise_mask_spans_capped_by_sentinels(self):
    mask = sc.noise_mask(100, np.random.default_rng(0), noise_density=0.5,
                         mean_noise_span_length=1.0, max_spans=7)
    self.assertEqual(mask.sum(), 50)
    self.assertEqual((mask & ~np.concatenate([[False], mask[:-1]])).sum(), 7)

  def test_noise_mask_refuses_one_token(self):
    with self.assertRaisesRegex(ValueError, '2 or more tokens, got 1'):
      sc.noise_mask(1, np.random.default_rng(0))

  def test_every_text_token_once_in_order(self):
    rng = np.random.default_rng(7)
    sentinels = sc.sentinel_ids(1000, 100)
    for _ in range(300):
      length = int(rng.integers(2, 130))
      text = rng.integers(4, 900, size=length)
      encoder, target = sc.corrupt(text, rng, sentinels)
      self.assertEqual(_reconstruct(encoder, target, sentinels), list(text))
      # Non-sentinel tokens: each text token in exactly one of the two.
      kept = [t for t in encoder if t not in sentinels]
      dropped = [t for t in target if t not in sentinels]
      self.assertLen(kept + dropped, length)
      # Sentinels in order <X0>, <X1>, ... in both.
      used = [t for t in encoder if t in sentinels]
      self.assertAllEqual(used, sentinels[:len(used)])
      self.assertAllEqual([t for t in target if t in sentinels], used)

  def test_noise_fraction_and_span_length_over_many_draws(self):
    rng = np.random.default_rng(3)
    noise = total = spans = 0
    for _ in range(2000):
      length = int(rng.integers(20, 128))
      mask = sc.noise_mask(length, rng)
      noise += mask.sum()
      total += length
      spans += (mask & ~np.concatenate([[False], mask[:-1]])).sum()
    self.assertAllClose(noise / total, 0.15, atol=0.005)
    self.assertAllClose(noise / spans, 3.0, atol=0.25)

  def test_cuttings_are_uniform(self):
    # 5 items in 3 non-empty segments: C(4, 2) = 6 cuttings, each 1/6.
    rng = np.random.default_rng(0)
    counts = collections.Counter(
        tuple(sc._segment(5, 3, rng)) for _ in range(6000))
    self.assertLen(counts, 6)
    for cutting, count in counts.items():
      self.assertEqual(sum(cutting), 5)
      self.assertBetween(count, 850, 1150)

  def test_same_seed_same_output(self):
    text = np.arange(4, 104)
    first = sc.corrupt(text, np.random.default_rng([1, 2]), _SENTINELS)
    again = sc.corrupt(text, np.random.default_rng([1, 2]), _SENTINELS)
    other = sc.corrupt(text, np.random.default_rng([1, 3]), _SENTINELS)
    self.assertAllEqual(first[0], again[0])
    self.assertAllEqual(first[1], again[1])
    self.assertNotEqual(list(first[0]), list(other[0]))


class AddSentinelsTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    path = os.path.join(data_root.find_data_dir(), 'nmt_de_en', 'wmt_news',
                        'train.en')
    with open(path, encoding='utf-8') as f:
      cls.texts = [line.rstrip('\n') for _, line in zip(range(2000), f)]
    cls.plain = subword_tokenizer.SubwordTokenizer.train(cls.texts, 1000)
    cls.tokenizer = sc.add_sentinels(cls.plain, 20)

  def test_top_ids_are_sentinel_pieces(self):
    self.assertEqual(self.tokenizer.vocabulary_size(), 1000)
    self.assertEqual(self.tokenizer.id_to_token(999), '<extra_id_0>')
    self.assertEqual(self.tokenizer.id_to_token(980), '<extra_id_19>')
    self.assertNotEqual(self.tokenizer.id_to_token(979), '<extra_id_20>')

  def test_text_never_gives_a_sentinel_and_round_trips(self):
    ids = self.tokenizer.tokenize(self.texts)
    self.assertLess(int(tf.reduce_max(ids.flat_values)), 980)
    self.assertEqual([t.decode('utf-8') for t in
                      self.tokenizer.detokenize(ids).numpy()], self.texts)
    # The sentinel names in text are text, not sentinels.
    ids = self.tokenizer.tokenize(['a <extra_id_0> b'])
    self.assertLess(int(tf.reduce_max(ids.flat_values)), 980)

  def test_detokenize_drops_sentinels(self):
    ids = self.tokenizer.tokenize(['Hello world'])[0].numpy().tolist()
    self.assertEqual(self.tokenizer.detokenize([ids[:1] + [999] + ids[1:]])
                     .numpy()[0].decode('utf-8'), 'Hello world')

  def test_idempotent_and_saved(self):
    self.assertIs(sc.add_sentinels(self.tokenizer, 20), self.tokenizer)
    directory = self.create_tempdir().full_path
    self.tokenizer.save(directory)
    loaded = subword_tokenizer.SubwordTokenizer.load(directory)
    self.assertEqual(loaded.id_to_token(999), '<extra_id_0>')
    self.assertIs(sc.add_sentinels(loaded, 20), loaded)

  def test_too_small_vocabulary_names_the_flag(self):
    # 1000 ids: 4 special, 256 bytes, 740 learned pieces.
    with self.assertRaisesRegex(
        errors.InputError, r'1000 ids of which 740 are learned pieces: too '
        r'few for 900 sentinels.*--vocabulary_size'):
      sc.add_sentinels(self.plain, 900)


if __name__ == '__main__':
  tf.test.main()
