"""Tests of `copy_hints` against hand-derived alignments."""

import numpy as np
import tensorflow as tf

from tff_nlp.models import copy_hints

# K = 10 output ids; the mark is id 11. Row 0: a question (12, and a value
# word outside the vocabulary, copy id V + 1 = 21), the mark at 2, a hint
# (5, 6, the value again: 21, 5), END, padding. Row 1 has no hint.
_K, _MARK = 10, 11
_SOURCE = np.array([[12, 21, 11, 5, 6, 21, 5, 3, 0],
                    [5, 6, 3, 0, 0, 0, 0, 0, 0]], np.int32)
# Row 0: 5, 6, a copy of position 1 (K + 1: the value), 5, 7 (not in the
# hint), END, PAD. Row 1: the same ids without a hint.
_TOKENS = np.array([[5, 6, _K + 1, 5, 7, 3, 0],
                    [5, 6, _K + 1, 5, 7, 3, 0]], np.int32)
# Row 0, cursor from the mark (2): 5 -> position 3 (K + 3), 6 -> 4, the
# value (source id 21) -> 5, 5 -> 6; 7 is nowhere after 6: unchanged; END
# and PAD are never aligned. Row 1: the cursor starts past the end (9).
_EXPECTED = np.array([[13, 14, 15, 16, 7, 3, 0],
                      [5, 6, _K + 1, 5, 7, 3, 0]], np.int32)


class CopyHintsTest(tf.test.TestCase):

  def test_start_cursor(self):
    self.assertAllEqual(copy_hints.start_cursor(_SOURCE, _MARK), [2, 9])

  def test_decoder_inputs_by_hand(self):
    self.assertAllEqual(
        copy_hints.decoder_inputs(_TOKENS, _SOURCE, generated_size=_K,
                                  mark_id=_MARK), _EXPECTED)

  def test_steps_are_the_sequence(self):
    cursor = copy_hints.start_cursor(_SOURCE, _MARK)
    columns = []
    for t in range(_TOKENS.shape[1]):
      inputs, cursor = copy_hints.align_step(_TOKENS[:, t], cursor, _SOURCE,
                                             generated_size=_K)
      columns.append(inputs)
    self.assertAllEqual(tf.stack(columns, axis=1), _EXPECTED)
    # Row 0's cursor rests at the last aligned position.
    self.assertAllEqual(cursor, [6, 9])

  def test_a_repeated_word_is_matched_forward(self):
    # The hint repeats 5; the second 5 of the target goes to the second 5
    # of the hint, even after a token that is not in the hint.
    source = np.array([[11, 5, 6, 5, 3]], np.int32)
    tokens = np.array([[5, 8, 5, 5]], np.int32)
    self.assertAllEqual(
        copy_hints.decoder_inputs(tokens, source, generated_size=_K,
                                  mark_id=_MARK),
        [[_K + 1, 8, _K + 3, 5]])


if __name__ == '__main__':
  tf.test.main()
