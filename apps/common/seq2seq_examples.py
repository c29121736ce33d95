"""Batches, decoding and token metrics of encoded seq2seq examples.

Shared by the seq2seq experiments (`text2sql`, `nmt`): tokenized pairs are
packed once into fixed-length numpy arrays (`encode_pairs`); training
batches group examples of similar length and are cut to their longest
example (`train_dataset`); decoding and teacher-forced token metrics run
over them in length order (`decode`, `make_token_metrics_fn`). Any object
with the `Examples` attributes works (e.g. `text2sql.EncodedSplit`).
"""

import collections
from collections.abc import Sequence
import dataclasses
from typing import Callable, Optional, Protocol

import numpy as np
import tensorflow as tf

from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_inputs


class Examples(Protocol):
  """Encoded examples: model inputs `x` ({encoder,decoder}_token_ids [N, L])
  and targets `y` [N, T], all numpy; `len()` is N."""

  x: collections.OrderedDict
  y: np.ndarray

  def __len__(self) -> int:
    ...


@dataclasses.dataclass
class EncodedPairs:
  """`encode_pairs`' result.

  Attributes:
    x: `seq2seq_inputs.input_spec` inputs (numpy, all examples).
    y: Target ids [N, T].
    truncated_sources: Sources longer than the source length (with END).
    truncated_targets: Targets longer than the target length (with END).
  """

  x: collections.OrderedDict
  y: np.ndarray
  truncated_sources: int
  truncated_targets: int

  def __len__(self) -> int:
    return len(self.y)


def encode_pairs(tokenizer, sources: Sequence[str], targets: Sequence[str], *,
                 source_length: int, target_length: int) -> EncodedPairs:
  """Tokenizes and packs (source, target) pairs for teacher forcing.

  Args:
    tokenizer: A `subword_tokenizer.SubwordTokenizer`.
    sources: Encoder texts.
    targets: Decoder texts, as many.
    source_length: Encoder tokens; longer sources are truncated (counted).
    target_length: Decoder tokens; longer targets are truncated (counted).

  Returns:
    The packed `EncodedPairs`.
  """
  source_ids = tokenizer.tokenize(tf.constant(list(sources)))
  target_ids = tokenizer.tokenize(tf.constant(list(targets)))
  # Lengths with the END (and START) the packer adds.
  source_lengths = source_ids.row_lengths().numpy() + 1
  target_lengths = target_ids.row_lengths().numpy() + 1
  x, y = seq2seq_inputs.pack_inputs(
      source_ids, target_ids, source_length=source_length,
      target_length=target_length)
  return EncodedPairs(
      x=collections.OrderedDict((k, v.numpy()) for k, v in x.items()),
      y=y.numpy(),
      truncated_sources=int(np.sum(source_lengths > source_length)),
      truncated_targets=int(np.sum(target_lengths > target_length)),
  )


# Examples are grouped by length within windows of this many batches.
LENGTH_GROUPING_WINDOW = 32


def length_grouped_order(source_lengths: np.ndarray,
                         target_lengths: np.ndarray, *, batch_size: int,
                         rng: np.random.Generator) -> np.ndarray:
  """A random order whose consecutive `batch_size` blocks have similar lengths.

  The examples are shuffled, cut into windows of `LENGTH_GROUPING_WINDOW`
  batches, sorted by (target, source) length within each window and cut
  into batches; the batches are then shuffled, except that the one partial
  batch stays last. Batches of similar lengths lose little compute to
  padding once `seq2seq_inputs.trim_padding` cuts it (as `group_by_length` in
  Hugging Face's Trainer and the length buckets of fairseq do), while the
  windows keep each batch's examples random.

  Args:
    source_lengths: [N] non-padding source tokens per example.
    target_lengths: [N] non-padding target tokens per example.
    batch_size: Examples per batch.
    rng: The source of randomness.

  Returns:
    A permutation of range(N).
  """
  shuffled = rng.permutation(len(source_lengths))
  window = batch_size * LENGTH_GROUPING_WINDOW
  batches = []
  for start in range(0, len(shuffled), window):
    rows = shuffled[start:start + window]
    rows = rows[np.lexsort((source_lengths[rows], target_lengths[rows]))]
    batches += [rows[i:i + batch_size] for i in range(0, len(rows),
                                                      batch_size)]
  full = [b for b in batches if len(b) == batch_size]
  partial = [b for b in batches if len(b) < batch_size]
  ordered = [full[i] for i in rng.permutation(len(full))] + partial
  return np.concatenate(ordered) if ordered else shuffled


def train_dataset(data: Examples, *, batch_size: int,
                  shuffle_seed: Sequence[int], first_batch: int = 0,
                  num_batches: Optional[int] = None) -> tf.data.Dataset:
  """Batches of one epoch of `data` in a seeded, length-grouped order.

  See `length_grouped_order`; each batch is cut to its longest example.
  By default the whole epoch; with `first_batch` and `num_batches`, the
  batches `first_batch` .. `first_batch + num_batches - 1` of it, going
  round the epoch again past its end (as `.repeat()` would). The dataset
  holds only the rows it serves, so that a round's data stays small when the
  TFF runtime serializes it (it refuses datasets over 100 MB, and a large
  corpus is over that).
  """
  order = length_grouped_order(
      np.sum(data.x[seq2seq.ENCODER_TOKEN_IDS] != seq2seq.PAD_ID, axis=1),
      np.sum(data.y != seq2seq.PAD_ID, axis=1), batch_size=batch_size,
      rng=np.random.default_rng(list(shuffle_seed)))
  per_epoch = -(-len(order) // batch_size)
  if num_batches is None:
    num_batches = per_epoch - first_batch
  if first_batch < 0 or num_batches < 1:
    raise ValueError(f'Batches {first_batch} .. {first_batch + num_batches - 1}'
                     f' of an epoch of {per_epoch}: expected first_batch >= 0 '
                     'and at least one batch.')
  # Runs of consecutive batches, each ending at the epoch's end (where a
  # partial batch may be) or at the last batch wanted.
  pieces = []
  batch, end = first_batch, first_batch + num_batches
  while batch < end:
    start = batch % per_epoch
    stop = min(per_epoch, start + end - batch)
    pieces.append(order[start * batch_size:stop * batch_size])
    batch += stop - start
  dataset = None
  for rows in pieces:
    x = collections.OrderedDict((k, v[rows]) for k, v in data.x.items())
    piece = tf.data.Dataset.from_tensor_slices((x, data.y[rows])).batch(
        batch_size)
    dataset = piece if dataset is None else dataset.concatenate(piece)
  return dataset.map(seq2seq_inputs.trim_padding)


def decode(decode_fn, tokenizer, data: Examples, *,
           batch_size: int, max_length: Optional[int] = None) -> list[str]:
  """The decoded output text for every example of `data`.

  Args:
    decode_fn: Encoder ids [B, S] to generated ids [B, L]
      (`seq2seq_decoding.make_decode_fn`).
    tokenizer: The tokenizer of the ids: a `subword_tokenizer` (TF
      detokenize), or a `copy_tokenizer.CopyTokenizer`, whose copy ids name
      words of the source text (`data.sources`).
    data: The examples.
    batch_size: Examples decoded at once.
    max_length: If set, the most tokens generated (passed to `decode_fn`,
      which must then take it, as `make_decode_fn`'s does).

  Returns:
    The detokenized predictions, in example order.
  """
  encoder_ids = data.x[seq2seq.ENCODER_TOKEN_IDS]
  lengths = np.sum(encoder_ids != seq2seq.PAD_ID, axis=1)
  # Batches of similar source length waste less compute on padding (the
  # columns that are padding in every row are cut off).
  order = np.argsort(lengths, kind='stable')
  predictions = [''] * len(data)
  for start in range(0, len(data), batch_size):
    rows = order[start:start + batch_size]
    batch = tf.constant(encoder_ids[rows, :max(1, int(lengths[rows].max()))])
    ids = (decode_fn(batch) if max_length is None
           else decode_fn(batch, max_length=max_length))
    if getattr(tokenizer, 'copies_from_source', False):
      for row, row_ids in zip(rows, ids.numpy()):
        predictions[row] = tokenizer.decode(row_ids, data.sources[row])
      continue
    for row, text in zip(rows, tokenizer.detokenize(ids).numpy()):
      predictions[row] = text.decode('utf-8')
  return predictions


def make_token_metrics_fn(
    keras_model: tf.keras.Model, *, batch_size: int
) -> Callable[[Examples], collections.OrderedDict[str, float]]:
  """A function giving teacher-forced loss and accuracy over all target tokens.

  The model reads the gold prefix (as in training) and is scored on every
  non-padding target token, END included: `token_loss` is the mean
  cross-entropy (nats) and `token_accuracy` the fraction of tokens whose
  argmax is right, both micro-averaged over the tokens. Unlike exact match,
  these move long before a whole output comes out right, so they compare
  models that are all at EM 0.

  Build it once per Keras model (as `seq2seq_decoding.make_decode_fn`): the
  forward pass is one `tf.function` with a shape-relaxed signature, traced on
  the first call and reused for every later split and weight assignment.

  Args:
    keras_model: A `seq2seq.Seq2SeqTransformer` whose current weights are
      scored at each call.
    batch_size: Examples per forward pass.

  Returns:
    A function from `Examples` to OrderedDict(token_loss, token_accuracy,
    correct_tokens, tokens, example_correct_tokens, example_tokens): the
    last two are each example's counts (lists of ints, in `data`'s order),
    what a paired bootstrap over test examples resamples
    (`tff_nlp.metrics.bootstrap.bootstrap_difference`'s `units`).
  """
  @tf.function(input_signature=[seq2seq_inputs.input_spec()[0]])
  def forward(x):
    return keras_model(x, training=False)

  def token_metrics(data: Examples) -> collections.OrderedDict[str, float]:
    order = np.argsort(np.sum(data.y != seq2seq.PAD_ID, axis=1),
                       kind='stable')
    loss_sum = 0.0
    example_correct = np.zeros(len(data), np.int64)
    example_tokens = np.zeros(len(data), np.int64)
    for start in range(0, len(data), batch_size):
      rows = order[start:start + batch_size]
      x, y = seq2seq_inputs.trim_padding(
          collections.OrderedDict((k, tf.constant(v[rows]))
                                  for k, v in data.x.items()),
          tf.constant(data.y[rows]))
      logits = forward(x)
      mask = tf.cast(y != seq2seq.PAD_ID, tf.float32)
      nll = tf.keras.losses.sparse_categorical_crossentropy(
          y, logits, from_logits=True)
      loss_sum += float(tf.reduce_sum(nll * mask))
      example_correct[rows] = tf.reduce_sum(mask * tf.cast(
          tf.argmax(logits, axis=-1, output_type=tf.int32) == y, tf.float32),
                                            axis=1).numpy()
      example_tokens[rows] = tf.reduce_sum(mask, axis=1).numpy()
    correct, tokens = int(example_correct.sum()), int(example_tokens.sum())
    return collections.OrderedDict(
        token_loss=loss_sum / max(tokens, 1),
        token_accuracy=correct / max(tokens, 1),
        correct_tokens=correct,
        tokens=tokens,
        example_correct_tokens=example_correct.tolist(),
        example_tokens=example_tokens.tolist())

  token_metrics.forward = forward  # Exposed so tests can count its traces.
  return token_metrics
