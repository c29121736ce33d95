"""Teacher-forcing batches of the seq2seq model (`seq2seq`).

Teacher forcing: the decoder reads `[START, t1, ..., tn, 0...]` and is trained
to predict `[t1, ..., tn, END, 0...]`; `pack_inputs` builds both.

For `tff.learning`, `seq2seq_model_fn.build_model_fn` returns the `model_fn`
whose batches are `(x, y)` with x = OrderedDict(encoder_token_ids=[B, S],
decoder_token_ids=[B, T]) and y = target ids [B, T], all int32 (see
`input_spec`).
"""

import collections

import tensorflow as tf

from tff_nlp.models import seq2seq
from tff_nlp.models._keras_nlp import keras_nlp


def input_spec() -> tuple[
    collections.OrderedDict[str, tf.TensorSpec], tf.TensorSpec
]:
  """The `(x, y)` batch spec of `seq2seq_model_fn.build_model_fn`'s model.

  x = OrderedDict(encoder_token_ids=[B, S], decoder_token_ids=[B, T]), y =
  target ids [B, T]; int32, 0 = padding. S and T may differ between batches
  (e.g. per client), up to the config's maximum lengths.
  """
  ids = tf.TensorSpec([None, None], tf.int32)
  return (
      collections.OrderedDict(
          [(seq2seq.ENCODER_TOKEN_IDS, ids),
           (seq2seq.DECODER_TOKEN_IDS, ids)]
      ),
      ids,
  )


def pack_inputs(
    source_token_ids: tf.RaggedTensor,
    target_token_ids: tf.RaggedTensor,
    *,
    source_length: int,
    target_length: int,
) -> tuple[collections.OrderedDict[str, tf.Tensor], tf.Tensor]:
  """Packs tokenized sources and targets into a teacher-forcing batch.

  Source → `[s1, ..., sm, END, 0...]` (END as T5 does); target →
  decoder input `[START, t1, ..., tn, 0...]` and labels
  `[t1, ..., tn, END, 0...]`. Longer texts are truncated (keeping the END
  of the source and labels); filter them out beforehand if that must not
  happen. Works eagerly and in `tf.data.Dataset.map`.

  Args:
    source_token_ids: Ragged ids [B, None] (a tokenizer's output).
    target_token_ids: Ragged ids [B, None].
    source_length: S, the encoder input length.
    target_length: T, the decoder input and label length.

  Returns:
    `(x, y)` as described by `input_spec`, with fixed lengths S and T.
  """
  source = keras_nlp.layers.StartEndPacker(
      source_length, end_value=seq2seq.END_ID, pad_value=seq2seq.PAD_ID
  )(source_token_ids)
  decoder_inputs = keras_nlp.layers.StartEndPacker(
      target_length, start_value=seq2seq.START_ID, pad_value=seq2seq.PAD_ID
  )(target_token_ids)
  labels = keras_nlp.layers.StartEndPacker(
      target_length, end_value=seq2seq.END_ID, pad_value=seq2seq.PAD_ID
  )(target_token_ids)
  x = collections.OrderedDict(
      [(seq2seq.ENCODER_TOKEN_IDS, tf.cast(source, tf.int32)),
       (seq2seq.DECODER_TOKEN_IDS, tf.cast(decoder_inputs, tf.int32))]
  )
  return x, tf.cast(labels, tf.int32)


def trim_padding(
    x: collections.abc.Mapping[str, tf.Tensor], y: tf.Tensor
) -> tuple[collections.OrderedDict[str, tf.Tensor], tf.Tensor]:
  """Drops the trailing columns that are padding in every row of a batch.

  `pack_inputs` pads to fixed lengths S and T; a batch of short examples
  then spends most of its compute on padding (a 2+2-layer model costs
  ~4x more per step at S=128, T=160 than at S=32, T=40). The model and loss
  ignore padding, so trimming changes no loss or gradient, only the cost.
  Works eagerly and in `tf.data.Dataset.map` (after `batch`).

  Args:
    x: OrderedDict(encoder_token_ids=[B, S], decoder_token_ids=[B, T]), as
      `pack_inputs` returns, batched.
    y: Labels [B, T].

  Returns:
    `(x, y)` with S and T cut to the longest row of the batch.
  """
  source = x[seq2seq.ENCODER_TOKEN_IDS]
  source_length = tf.reduce_max(
      tf.reduce_sum(tf.cast(source != seq2seq.PAD_ID, tf.int32), axis=1))
  # Decoder inputs [START, t1..tn] and labels [t1..tn, END] have the same
  # number of non-padding positions.
  target_length = tf.reduce_max(
      tf.reduce_sum(tf.cast(y != seq2seq.PAD_ID, tf.int32), axis=1))
  trimmed = collections.OrderedDict(
      [(seq2seq.ENCODER_TOKEN_IDS, source[:, :source_length]),
       (seq2seq.DECODER_TOKEN_IDS,
        x[seq2seq.DECODER_TOKEN_IDS][:, :target_length])])
  return trimmed, y[:, :target_length]
