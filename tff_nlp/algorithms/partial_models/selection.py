"""Selecting a client's rows of server tensors with `tff.federated_select`.

`build_row_selection` returns the federated computation of step 2 of a round
(see `tff_nlp.algorithms.partial_models`): every client sends its M keys, receives the rows of
the server's vocabulary-indexed tensors at those keys, and stacks them into
dense local tensors of M rows. What a client downloads is M rows, whatever
the vocabulary size.
"""

import collections
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def _check_tables(table_type: tff.Type) -> int:
  """The shared row count of `table_type`'s tensors, or a ValueError."""
  if isinstance(table_type, tff.StructType):
    leaves = [member for _, member in tff.structure.iter_elements(table_type)]
  else:
    leaves = [table_type]
  rows = set()
  for leaf in leaves:
    if not isinstance(leaf, tff.TensorType) or not leaf.shape:
      raise ValueError(
          'Row selection needs tensors with a leading row axis, got '
          f'{leaf} in {table_type}.')
    rows.add(leaf.shape[0])
  if len(rows) != 1 or None in rows:
    raise ValueError(
        'Every selected tensor needs the same, known number of rows (the '
        f'vocabulary size); got row counts {sorted(map(str, rows))} in '
        f'{table_type}.')
  return rows.pop()


def stack_selected_rows(rows: tf.data.Dataset, table_type: Any, *,
                        max_keys: int, block_size: int = 1) -> Any:
  """A client's selected rows as its local tables; for TF code.

  Args:
    rows: The sequence `federated_select` gave the client
      (`build_row_selection(..., stacked=False)`): one tuple of rows per key.
    table_type: The server tables' type, as given to `build_row_selection`.
    max_keys: M, keys per client.
    block_size: B, rows per key, as given to `build_row_selection`.

  Returns:
    The tables with the leading dimension V replaced by M * B (`T_M` of
    `build_row_selection`).
  """
  table_type = tff.types.to_type(table_type)
  names = ([name for name, _ in tff.structure.iter_elements(table_type)]
           if isinstance(table_type, tff.StructType) else None)
  stacked = []
  for t in rows.batch(max_keys).get_single_element():
    row_shape = t.shape.as_list()[1 if block_size == 1 else 2:]
    stacked.append(tf.ensure_shape(
        tf.reshape(t, [max_keys * block_size] + row_shape),
        [max_keys * block_size] + row_shape))
  if names is None:
    return stacked[0]
  if all(name is None for name in names):
    return tuple(stacked)
  return collections.OrderedDict(zip(names, stacked))


def build_row_selection(table_type: Any, *, max_keys: int,
                        stacked: bool = True,
                        block_size: int = 1) -> tff.Computation:
  """Builds the selection of each client's rows of server tables.

  TFF's runtime calls the selection function once per key, and each call
  has a fixed cost (about 0.17 ms here, `docs/results/federated_select.md`).
  With `block_size` B > 1, a key names a block of B consecutive rows (block
  b is rows `[b * B, (b + 1) * B)`; the last block's rows past V repeat row
  V - 1), so a client needs fewer keys, and calls, for rows that are close
  together (e.g. the frequent words of a vocabulary sorted by frequency), at
  the price of downloading whole blocks. `tff_nlp.algorithms.partial_models.top_blocks` and
  `block_rows` pick a client's blocks and name their rows.

  Args:
    table_type: The server tensors to select from: a `tff.TensorType` or a
      flat struct of them (e.g. `<embedding=float32[V,d], bias=float32[V]>`),
      all with the same leading number of rows V. Tensors indexed on another
      axis (e.g. a [d, V] output kernel) are stored transposed by the caller.
    max_keys: M, the number of keys per client.
    stacked: Whether each client gets its tables (a TF call per client that
      stacks the rows), or the sequence of rows `federated_select` gives,
      for the client's own TF code to stack (`stack_selected_rows`), which
      saves that call.
    block_size: B, rows per key (1: a key is a row id).

  Returns:
    A federated computation of type
    `(<tables=T@SERVER,keys={int32[M]}@CLIENTS> -> {T_M}@CLIENTS)` where T_M
    is T with the leading dimension V replaced by M * B: row `i * B + j` of
    each client's tables is row `keys[i] * B + j` of the server's (with B =
    1, row i is row `keys[i]`). Not `stacked`: `{R*}@CLIENTS`, R the tuple of
    one key's rows (each [B, ...] when B > 1).

  Raises:
    ValueError: If the tensors of `table_type` do not share a known row count,
      or `max_keys < 1` or `block_size < 1`.
  """
  table_type = tff.types.to_type(table_type)
  num_rows = _check_tables(table_type)
  if max_keys < 1:
    raise ValueError(f'max_keys must be >= 1, got {max_keys}.')
  if block_size < 1:
    raise ValueError(f'block_size must be >= 1, got {block_size}.')
  num_keys = -(-num_rows // block_size)  # Blocks, the last one maybe short.

  names = ([name for name, _ in tff.structure.iter_elements(table_type)]
           if isinstance(table_type, tff.StructType) else None)

  # Rows travel as a tuple: a sequence of named structs produced by the
  # runtime does not match the component order tf.data gives dicts.
  @tff.tensorflow.computation(table_type, np.int32)
  def select_fn(tables, key):
    leaves = tables.values() if names and isinstance(tables, dict) else (
        tables if names else [tables])
    if block_size == 1:
      return tuple(tf.gather(t, key) for t in leaves)
    # Clipping would hide a key past the last block: refuse it, as gather
    # refuses a row id past V.
    with tf.control_dependencies([tf.debugging.assert_less(
        key, num_keys, message=f'block key past the last block '
        f'({num_keys - 1}) of {num_rows} rows in blocks of {block_size}')]):
      rows = tf.minimum(key * block_size + tf.range(block_size),
                        num_rows - 1)
    return tuple(tf.gather(t, rows) for t in leaves)

  row_type = select_fn.type_signature.result

  @tff.tensorflow.computation(tff.SequenceType(row_type))
  def stack_rows(rows):
    return stack_selected_rows(rows, table_type, max_keys=max_keys,
                               block_size=block_size)

  @tff.federated_computation(
      tff.FederatedType(table_type, tff.SERVER),
      tff.FederatedType(tff.TensorType(np.int32, [max_keys]), tff.CLIENTS))
  def select_rows(tables, keys):
    max_key = tff.federated_value(num_keys - 1, tff.SERVER)
    rows = tff.federated_select(keys, max_key, tables, select_fn)
    if not stacked:
      return rows
    return tff.federated_map(stack_rows, rows)

  return select_rows
