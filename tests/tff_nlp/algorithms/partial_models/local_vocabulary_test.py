"""Tests of the client-side keys and id remapping."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.algorithms import partial_models as sparse


def _bag(rows, vocab_size):
  """A bag struct from per-example {token: count} dicts."""
  indices, values = [], []
  for row, counts in enumerate(rows):
    for token, count in sorted(counts.items()):
      indices.append([row, token])
      values.append(count)
  return collections.OrderedDict(
      indices=tf.constant(np.reshape(indices, [-1, 2]), tf.int64),
      values=tf.constant(values, tf.int32),
      dense_shape=tf.constant([len(rows), vocab_size], tf.int64))


def _dataset(batches, vocab_size=20):
  bags = [_bag(b, vocab_size) for b in batches]
  return tf.data.Dataset.from_tensor_slices(tf.range(len(bags))).map(
      lambda i: collections.OrderedDict(tokens=tf.switch_case(
          i, [lambda b=b: b for b in bags])))


# Three examples in two batches. Example counts (not occurrence counts):
# token 7 in 3 examples, 2 in 2, 5 in 2, 9 in 1, 11 in 1.
_BATCHES = [
    [{7: 5, 2: 1}, {7: 1, 5: 2, 9: 1}],
    [{7: 1, 2: 1, 5: 1, 11: 4}],
]


class LocalVocabularyExecutionTest(tf.test.TestCase,
                                   parameterized.TestCase):

  def test_example_counts_count_each_example_once(self):
    ids, counts = sparse.example_counts(_dataset(_BATCHES))
    np.testing.assert_array_equal(ids, [2, 5, 7, 9, 11])
    np.testing.assert_array_equal(counts, [2, 2, 3, 1, 1])


  def test_repeated_entry_in_one_example_counts_once(self):
    bag = collections.OrderedDict(
        indices=tf.constant([[0, 4], [0, 4], [1, 4]], tf.int64),
        values=tf.constant([1, 1, 1], tf.int32),
        dense_shape=tf.constant([2, 10], tf.int64))
    ids, counts = sparse.example_counts(
        tf.data.Dataset.from_tensors(collections.OrderedDict(tokens=bag)))
    np.testing.assert_array_equal(ids, [4])
    np.testing.assert_array_equal(counts, [2])


  @parameterized.named_parameters(
      # More distinct tokens (5) than M: 7 (3), then the tie 2/5 (2 each) by id.
      ('m2', 2, [2, 7], 2),
      ('m3', 3, [2, 5, 7], 3),
      # The tie 9/11 (1 each) keeps the smaller id.
      ('m4', 4, [2, 5, 7, 9], 4),
      # Fewer distinct tokens than M: padded with PAD_KEY (0).
      ('m7', 7, [2, 5, 7, 9, 11, 0, 0], 5),
  )
  def test_client_keys(self, max_keys, keys, num_keys):
    result = sparse.client_keys(_dataset(_BATCHES), max_keys=max_keys)
    np.testing.assert_array_equal(result.keys, keys)
    self.assertEqual(result.keys.dtype, tf.int32)
    self.assertEqual(int(result.num_keys), num_keys)


  def test_client_keys_of_empty_dataset_are_all_padding(self):
    empty = _dataset(_BATCHES).take(0)
    result = sparse.client_keys(empty, max_keys=3)
    np.testing.assert_array_equal(result.keys, [0, 0, 0])
    self.assertEqual(int(result.num_keys), 0)


  def test_max_keys_must_be_positive(self):
    with self.assertRaisesRegex(ValueError, 'max_keys must be >= 1'):
      sparse.top_keys(tf.constant([1], tf.int64), tf.constant([1], tf.int64),
                      max_keys=0)


  @parameterized.named_parameters(
      # B = 4: tokens 2 -> block 0; 5, 7 -> block 1; 9, 11 -> block 2.
      # Block scores (summed example counts): 0: 2, 1: 2 + 3 = 5, 2: 1 + 1.
      ('one_block', 1, [1], 1),
      # Block 1, then the tie of blocks 0 and 2 (2 each) by the smaller id.
      ('two_blocks', 2, [0, 1], 2),
      # Fewer blocks with a token than keys: padded with PAD_KEY (0).
      ('padded', 4, [0, 1, 2, 0], 3),
  )
  def test_top_blocks(self, max_blocks, keys, num_keys):
    ids, counts = sparse.example_counts(_dataset(_BATCHES))
    result = sparse.top_blocks(ids, counts, max_blocks=max_blocks,
                               block_size=4)
    np.testing.assert_array_equal(result.keys, keys)
    self.assertEqual(result.keys.dtype, tf.int32)
    self.assertEqual(int(result.num_keys), num_keys)


  @parameterized.named_parameters(
      # Blocks 0, 1, 2 of 4 rows in V = 10 rows: rows 10 and 11 of block 2
      # are past the table, so 10 real rows, then the padding block's rows.
      ('last_block_short', [0, 1, 2, 0], 3, list(range(10)) + [0] * 6, 10),
      # One real block (1: rows 4..7), one padding block.
      ('padding_block', [1, 0], 1, [4, 5, 6, 7, 0, 0, 0, 0], 4),
  )
  def test_block_rows(self, blocks, num_blocks, rows, num_rows):
    result = sparse.block_rows(
        sparse.ClientKeys(keys=tf.constant(blocks, tf.int32),
                          num_keys=tf.constant(num_blocks)),
        block_size=4, num_rows=10)
    np.testing.assert_array_equal(result.keys, rows)
    self.assertEqual(int(result.num_keys), num_rows)


  def test_block_size_must_be_positive(self):
    with self.assertRaisesRegex(ValueError, 'block_size must be >= 1'):
      sparse.top_blocks(tf.constant([1], tf.int64),
                        tf.constant([1], tf.int64), max_blocks=1,
                        block_size=0)


  def test_to_local_ids_finds_real_keys_only(self):
    keys = sparse.ClientKeys(keys=tf.constant([2, 5, 7, 0], tf.int32),
                             num_keys=tf.constant(3))
    local, found = sparse.to_local_ids(
        tf.constant([[7, 0], [2, 6]], tf.int64), keys)
    # 0 is only padding, 6 is not selected.
    np.testing.assert_array_equal(found, [[True, False], [True, False]])
    np.testing.assert_array_equal(local, [[2, 0], [0, 0]])


  def test_to_local_ids_with_no_keys(self):
    keys = sparse.ClientKeys(keys=tf.constant([0, 0], tf.int32),
                             num_keys=tf.constant(0))
    _, found = sparse.to_local_ids(tf.constant([0, 3], tf.int64), keys)
    np.testing.assert_array_equal(found, [False, False])


  def test_to_local_bag_drops_and_counts_unselected_tokens(self):
    bag = _bag([{7: 5, 2: 1}, {7: 1, 5: 2, 9: 1}], vocab_size=20)
    keys = sparse.ClientKeys(keys=tf.constant([2, 7, 0], tf.int32),
                             num_keys=tf.constant(2))
    local, dropped = sparse.to_local_bag(bag, keys)
    # Dense [2 examples, M=3]: token 2 -> column 0, token 7 -> column 1;
    # 5 and 9 of example 1 are dropped.
    np.testing.assert_array_equal(tf.sparse.to_dense(local),
                                  [[1, 5, 0], [0, 1, 0]])
    self.assertEqual(int(dropped), 2)


if __name__ == '__main__':
  tf.test.main()
