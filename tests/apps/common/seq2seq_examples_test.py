"""Tests of `seq2seq_examples.encode_pairs`: packing and truncation counts."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from apps.common import seq2seq_examples
from tff_nlp.models import seq2seq


class _DigitTokenizer:
  """Splits on whitespace; a token is its own id ('7' -> 7)."""

  def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    return tf.ragged.map_flat_values(tf.strings.to_number,
                                     tf.strings.split(texts),
                                     out_type=tf.int32)


# Tokens per source 2, 3, 4, 0 and per target 1, 4, 2, 3; the packer adds
# END to each (and START to the decoder input), so the lengths that must fit
# are 3, 4, 5, 1 and 2, 5, 3, 4.
_SOURCES = ['5 6', '5 6 7', '5 6 7 8', '']
_TARGETS = ['9', '9 10 11 12', '9 10', '9 10 11']


class EncodePairsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # A text whose length with END is exactly the length fits.
      ('source_4_target_3', 4, 3, 1, 2),  # 5 > 4; 5, 4 > 3.
      ('source_3_target_5', 3, 5, 2, 0),  # 4, 5 > 3; none > 5.
      ('source_5_target_2', 5, 2, 0, 3),  # None > 5; 5, 3, 4 > 2.
      ('source_1_target_1', 1, 1, 3, 4),  # All but the empty source.
  )
  def test_counts_truncated_sources_and_targets(
      self, source_length, target_length, sources, targets):
    encoded = seq2seq_examples.encode_pairs(
        _DigitTokenizer(), _SOURCES, _TARGETS, source_length=source_length,
        target_length=target_length)
    self.assertLen(encoded, 4)
    self.assertEqual((encoded.truncated_sources, encoded.truncated_targets),
                     (sources, targets))

  def test_truncated_rows_keep_their_end(self):
    encoded = seq2seq_examples.encode_pairs(
        _DigitTokenizer(), _SOURCES, _TARGETS, source_length=4,
        target_length=3)
    end, start = seq2seq.END_ID, seq2seq.START_ID
    np.testing.assert_array_equal(
        encoded.x[seq2seq.ENCODER_TOKEN_IDS],
        [[5, 6, end, 0], [5, 6, 7, end], [5, 6, 7, end], [end, 0, 0, 0]])
    np.testing.assert_array_equal(
        encoded.x[seq2seq.DECODER_TOKEN_IDS],
        [[start, 9, 0], [start, 9, 10], [start, 9, 10], [start, 9, 10]])
    np.testing.assert_array_equal(
        encoded.y, [[9, end, 0], [9, 10, end], [9, 10, end], [9, 10, end]])


if __name__ == '__main__':
  tf.test.main()
