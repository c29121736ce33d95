"""A client's local vocabulary: which model rows it selects, and local ids.

Client-side TensorFlow of the federated_select technique (see
`tff_nlp.algorithms.partial_models`): each client keeps the M tokens that occur in the most of
its examples (its *keys*; M = `max_keys`, fixed so that the keys' type is
static), selects those rows of the server's vocabulary-indexed tensors, and
trains a local model whose row i is the global row `keys[i]`.

Bags of words travel as the struct of a `tf.SparseTensor` (TFF 0.87 has no
sparse tensor type): `<indices=int64[?,2],values=V[?],dense_shape=int64[2]>`
with one entry per (example, token) pair, `indices[:, 0]` the example's row in
the batch and `indices[:, 1]` the global token id.
"""

import collections
from typing import Any, NamedTuple

import tensorflow as tf

# The key that pads a client's key list to `max_keys`; it selects row 0,
# which the client ignores (only the first `num_keys` rows are real).
PAD_KEY = 0


class ClientKeys(NamedTuple):
  """A client's selected rows.

  Attributes:
    keys: int32[M], the selected global token ids in ascending order, then
      `PAD_KEY` up to M entries. int32 because `tff.federated_select` takes
      int32 keys.
    num_keys: int32, how many leading entries of `keys` are real.
  """

  keys: tf.Tensor
  num_keys: tf.Tensor


def bag_to_sparse(bag: Any) -> tf.SparseTensor:
  """The `<indices, values, dense_shape>` struct of a bag as a SparseTensor."""
  if isinstance(bag, tf.SparseTensor):
    return bag
  return tf.SparseTensor(indices=bag['indices'], values=bag['values'],
                         dense_shape=bag['dense_shape'])


def sparse_to_bag(sparse: tf.SparseTensor) -> collections.OrderedDict:
  """A SparseTensor as the `<indices, values, dense_shape>` struct."""
  return collections.OrderedDict(indices=sparse.indices, values=sparse.values,
                                 dense_shape=sparse.dense_shape)


def _tokens_once_per_example(bag: Any) -> tf.Tensor:
  """Global token ids of a batch, each at most once per example (int64[?])."""
  sparse = bag_to_sparse(bag)
  num_tokens = tf.maximum(sparse.dense_shape[1], 1)
  # A repeated (example, token) entry (a bag not built by summing duplicates)
  # must still count once: dedupe on the pair, encoded as one int64.
  pairs, _ = tf.unique(sparse.indices[:, 0] * num_tokens + sparse.indices[:, 1])
  return pairs % num_tokens


def example_counts(dataset: tf.data.Dataset, *,
                   tokens_key: str = 'tokens') -> tuple[tf.Tensor, tf.Tensor]:
  """In how many examples of `dataset` each token occurs.

  Args:
    dataset: Batches, each a mapping whose `tokens_key` entry is a bag of
      words (struct or `tf.SparseTensor` with dense shape [batch, vocab]).
    tokens_key: The key of the bag in each batch.

  Returns:
    `(token_ids, counts)`: int64[K] distinct global token ids in ascending
    order and int64[K] the number of examples each occurs in.
  """
  all_tokens = dataset.reduce(
      tf.zeros([0], tf.int64),
      lambda seen, batch: tf.concat(
          [seen, _tokens_once_per_example(batch[tokens_key])], axis=0))
  token_ids, _, counts = tf.unique_with_counts(all_tokens, out_idx=tf.int64)
  order = tf.argsort(token_ids)
  return tf.gather(token_ids, order), tf.gather(counts, order)


def top_keys(token_ids: tf.Tensor, counts: tf.Tensor, *,
             max_keys: int) -> ClientKeys:
  """The `max_keys` most frequent tokens, padded to `max_keys`.

  Ties are broken by the smaller token id, so the choice is deterministic.

  Args:
    token_ids: int64[K], distinct global token ids in ascending order.
    counts: int64[K], how often each occurs (e.g. from `example_counts`).
    max_keys: M, the number of rows a client selects.

  Returns:
    `ClientKeys` with `min(K, M)` real keys in ascending id order.
  """
  if max_keys < 1:
    raise ValueError(f'max_keys must be >= 1, got {max_keys}.')
  # argsort is stable and `token_ids` ascend, so equal counts keep id order.
  by_count = tf.argsort(-counts, stable=True)
  chosen = tf.sort(tf.gather(token_ids, by_count[:max_keys]))
  num_keys = tf.shape(chosen)[0]
  keys = tf.concat(
      [tf.cast(chosen, tf.int32),
       tf.fill([max_keys - num_keys], tf.constant(PAD_KEY, tf.int32))], 0)
  return ClientKeys(keys=tf.ensure_shape(keys, [max_keys]),
                    num_keys=num_keys)


def top_blocks(token_ids: tf.Tensor, counts: tf.Tensor, *, max_blocks: int,
               block_size: int) -> ClientKeys:
  """The `max_blocks` row blocks whose tokens occur the most, padded.

  Block b holds rows `[b * block_size, (b + 1) * block_size)`. A block's
  score is the sum of `counts` of the client's tokens in it, so a block of
  several frequent tokens beats a block of one; ties go to the smaller block
  id (as in `top_keys`, which this is applied to blocks).

  Args:
    token_ids: int64[K], distinct global token ids in ascending order.
    counts: int64[K], how often each occurs (e.g. from `example_counts`).
    max_blocks: The number of keys (blocks) a client selects.
    block_size: B, rows per block.

  Returns:
    `ClientKeys` of block ids: `min(blocks with a token, max_blocks)` real
    block ids in ascending order, then `PAD_KEY`.
  """
  if block_size < 1:
    raise ValueError(f'block_size must be >= 1, got {block_size}.')
  # `token_ids` ascend, so their blocks ascend too: `tf.unique` keeps them
  # in ascending order.
  blocks, segment = tf.unique(token_ids // block_size, out_idx=tf.int64)
  scores = tf.math.unsorted_segment_sum(counts, segment, tf.size(blocks))
  return top_keys(blocks, scores, max_keys=max_blocks)


def block_rows(blocks: ClientKeys, *, block_size: int,
               num_rows: int) -> ClientKeys:
  """The rows of a client's blocks, as the keys of its local table.

  Local row `k * block_size + j` is global row `blocks.keys[k] * block_size +
  j`, which is how `build_row_selection(..., block_size=B)` stacks a block
  key's rows. The real rows are those of the real blocks below `num_rows`:
  they ascend and come first (only the highest block can reach past the last
  row), so the result is a `ClientKeys` over rows like `top_keys`'s, and
  `to_local_ids` / `to_local_bag` apply unchanged.

  Args:
    blocks: The client's block keys (`top_blocks`).
    block_size: B.
    num_rows: V, the server table's row count.

  Returns:
    `ClientKeys` of `len(blocks.keys) * block_size` row ids, the first
    `num_keys` real, then `PAD_KEY`.
  """
  rows = tf.reshape(
      blocks.keys[:, tf.newaxis] * block_size
      + tf.range(block_size, dtype=blocks.keys.dtype)[tf.newaxis, :], [-1])
  real = tf.logical_and(
      tf.range(tf.size(rows)) < blocks.num_keys * block_size,
      rows < num_rows)
  num_keys = tf.reduce_sum(tf.cast(real, tf.int32))
  return ClientKeys(
      keys=tf.where(tf.range(tf.size(rows)) < num_keys, rows,
                    tf.constant(PAD_KEY, rows.dtype)),
      num_keys=num_keys)


def client_keys(dataset: tf.data.Dataset, *, max_keys: int,
                tokens_key: str = 'tokens') -> ClientKeys:
  """`top_keys` of a client's `example_counts` (step 1 of a round)."""
  token_ids, counts = example_counts(dataset, tokens_key=tokens_key)
  return top_keys(token_ids, counts, max_keys=max_keys)


def to_local_ids(global_ids: tf.Tensor, client: ClientKeys
                 ) -> tuple[tf.Tensor, tf.Tensor]:
  """Positions of global token ids in the client's keys.

  Args:
    global_ids: int64 (or int32) token ids, any shape.
    client: The client's keys (real keys ascending).

  Returns:
    `(local_ids, found)`: int64 positions in `client.keys` (0 where not
    found) and a bool mask of the ids that are among the real keys.
  """
  real = tf.cast(client.keys[:client.num_keys], tf.int64)
  ids = tf.cast(global_ids, tf.int64)
  position = tf.searchsorted(real, tf.reshape(ids, [-1]), side='left',
                             out_type=tf.int64)
  position = tf.reshape(position, tf.shape(ids))
  safe = tf.minimum(position, tf.maximum(tf.cast(client.num_keys, tf.int64)
                                         - 1, 0))
  found = tf.logical_and(
      position < tf.cast(client.num_keys, tf.int64),
      tf.equal(tf.gather(tf.concat([real, [-1]], 0), safe), ids))
  return tf.where(found, safe, tf.zeros_like(safe)), found


def to_local_bag(bag: Any, client: ClientKeys) -> tuple[tf.SparseTensor,
                                                        tf.Tensor]:
  """A bag of words over the client's local vocabulary (step 3 of a round).

  Tokens that are not among the client's keys are dropped.

  Args:
    bag: A bag over the global vocabulary, dense shape [batch, V].
    client: The client's keys.

  Returns:
    `(local_bag, dropped)`: a `tf.SparseTensor` of dense shape [batch, M] and
    the int32 number of (example, token) entries dropped.
  """
  sparse = bag_to_sparse(bag)
  local, found = to_local_ids(sparse.indices[:, 1], client)
  kept = tf.boolean_mask(
      tf.stack([sparse.indices[:, 0], local], axis=1), found)
  local_bag = tf.SparseTensor(
      indices=kept, values=tf.boolean_mask(sparse.values, found),
      dense_shape=tf.stack([sparse.dense_shape[0],
                            tf.cast(tf.shape(client.keys)[0], tf.int64)]))
  dropped = tf.shape(found)[0] - tf.reduce_sum(tf.cast(found, tf.int32))
  return local_bag, dropped
