"""Tests of `build_row_selection` (tff.federated_select of model rows)."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import partial_models as sparse


class RowSelectionComputationTest(tf.test.TestCase,
                                  parameterized.TestCase):

  def test_type_signature_of_one_table(self):
    select = sparse.build_row_selection(
        tff.TensorType(np.float32, [13, 4]), max_keys=3)
    tff.test.assert_types_equivalent(
        select.type_signature,
        tff.FunctionType(
            collections.OrderedDict(
                tables=tff.FederatedType(tff.TensorType(np.float32, [13, 4]),
                                         tff.SERVER),
                keys=tff.FederatedType(tff.TensorType(np.int32, [3]),
                                       tff.CLIENTS)),
            tff.FederatedType(tff.TensorType(np.float32, [3, 4]),
                              tff.CLIENTS)))

  def test_unstacked_rows_stack_in_the_clients_code(self):
    table_type = collections.OrderedDict(
        emb=tff.TensorType(np.float32, [6, 2]),
        bias=tff.TensorType(np.float32, [6]))
    select = sparse.build_row_selection(table_type, max_keys=3,
                                        stacked=False)
    rows_type = select.type_signature.result.member
    self.assertIsInstance(rows_type, tff.SequenceType)

    @tff.tensorflow.computation(rows_type)
    def stack(rows):
      return sparse.stack_selected_rows(rows, table_type, max_keys=3)

    @tff.federated_computation(select.type_signature.parameter[0],
                               select.type_signature.parameter[1])
    def select_and_stack(tables, keys):
      return tff.federated_map(stack, select(tables, keys))

    tables = collections.OrderedDict(
        emb=np.arange(12, dtype=np.float32).reshape(6, 2),
        bias=np.arange(6, dtype=np.float32) * 10)
    # Client 0's rows 5, 0, 2; client 1's rows 1, 1, 4.
    got = select_and_stack(tables, [np.array([5, 0, 2], np.int32),
                                    np.array([1, 1, 4], np.int32)])
    np.testing.assert_array_equal(got[0]['emb'],
                                  [[10, 11], [0, 1], [4, 5]])
    np.testing.assert_array_equal(got[0]['bias'], [50, 0, 20])
    np.testing.assert_array_equal(got[1]['emb'], [[2, 3], [2, 3], [8, 9]])

  @parameterized.named_parameters(
      ('scalar', tff.TensorType(np.float32, []), 'leading row axis'),
      ('unknown_rows', tff.TensorType(np.float32, [None, 2]),
       'same, known number of rows'),
      ('different_rows', [tff.TensorType(np.float32, [4, 2]),
                          tff.TensorType(np.float32, [5])],
       'same, known number of rows'),
  )
  def test_rejects_tables_without_common_rows(self, table_type, match):
    with self.assertRaisesRegex(ValueError, match):
      sparse.build_row_selection(table_type, max_keys=2)

  def test_type_signature_of_blocks(self):
    select = sparse.build_row_selection(
        tff.TensorType(np.float32, [13, 4]), max_keys=3, block_size=4)
    self.assertEqual(str(select.type_signature),
                     '(<tables=float32[13,4]@SERVER,keys={int32[3]}@CLIENTS>'
                     ' -> {float32[12,4]}@CLIENTS)')
    with self.assertRaisesRegex(ValueError, 'block_size must be >= 1'):
      sparse.build_row_selection(tff.TensorType(np.float32, [13, 4]),
                                 max_keys=3, block_size=0)


class RowSelectionExecutionTest(tf.test.TestCase):

  def test_selects_rows_in_key_order_for_each_client(self):
    # Row r is [2r, 2r + 1].
    table = np.arange(6 * 2, dtype=np.float32).reshape(6, 2)
    select = sparse.build_row_selection(tff.TensorType(np.float32, [6, 2]),
                                        max_keys=3)
    first, second = select(table, [np.array([5, 0, 2], np.int32),
                                   np.array([1, 1, 0], np.int32)])
    np.testing.assert_array_equal(first, [[10, 11], [0, 1], [4, 5]])
    np.testing.assert_array_equal(second, [[2, 3], [2, 3], [0, 1]])


  def test_selects_blocks_of_rows(self):
    # V = 5 rows in blocks of B = 2: block 2 is row 4, then row 4 again (the
    # rows past V repeat row V - 1; the client's `block_rows` ignores them).
    table_type = collections.OrderedDict(
        emb=tff.TensorType(np.float32, [5, 2]),
        bias=tff.TensorType(np.float32, [5]))
    tables = collections.OrderedDict(
        emb=np.arange(10, dtype=np.float32).reshape(5, 2),
        bias=np.arange(5, dtype=np.float32) * 10)
    for stacked in (True, False):
      select = sparse.build_row_selection(table_type, max_keys=2,
                                          block_size=2, stacked=stacked)
      if stacked:
        got = select(tables, [np.array([2, 0], np.int32),
                              np.array([1, 1], np.int32)])
      else:
        @tff.tensorflow.computation(select.type_signature.result.member)
        def stack(rows):
          return sparse.stack_selected_rows(rows, table_type, max_keys=2,
                                            block_size=2)

        @tff.federated_computation(select.type_signature.parameter[0],
                                   select.type_signature.parameter[1])
        def select_and_stack(tables, keys):
          return tff.federated_map(stack, select(tables, keys))

        got = select_and_stack(tables, [np.array([2, 0], np.int32),
                                        np.array([1, 1], np.int32)])
      # Client 0: block 2 (rows 4, 4), block 0 (rows 0, 1).
      np.testing.assert_array_equal(got[0]['emb'],
                                    [[8, 9], [8, 9], [0, 1], [2, 3]])
      np.testing.assert_array_equal(got[0]['bias'], [40, 40, 0, 10])
      # Client 1: block 1 twice (rows 2, 3).
      np.testing.assert_array_equal(got[1]['bias'], [20, 30, 20, 30])

  def test_block_keys_are_bounded_by_the_block_count(self):
    select = sparse.build_row_selection(tff.TensorType(np.float32, [5, 2]),
                                        max_keys=1, block_size=2)
    # Blocks 0..2 exist; block 3 would start past the table.
    with self.assertRaisesRegex(Exception, 'past the last block'):
      select(np.zeros([5, 2], np.float32), [np.array([3], np.int32)])

  def test_selects_rows_of_a_structure_of_tables(self):
    table_type = collections.OrderedDict(
        embedding=tff.TensorType(np.float32, [4, 2]),
        bias=tff.TensorType(np.float32, [4]))
    select = sparse.build_row_selection(table_type, max_keys=2)
    tables = collections.OrderedDict(
        embedding=np.arange(8, dtype=np.float32).reshape(4, 2),
        bias=np.array([10, 11, 12, 13], np.float32))
    (rows,) = select(tables, [np.array([3, 1], np.int32)])
    np.testing.assert_array_equal(rows['embedding'], [[6, 7], [2, 3]])
    np.testing.assert_array_equal(rows['bias'], [13, 11])


if __name__ == '__main__':
  tf.test.main()
