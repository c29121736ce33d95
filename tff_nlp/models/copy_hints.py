"""Decoder inputs that keep a copying parser's place in a SQL hint.

A retrieve-and-edit parser reads a question followed by a SQL hint (the SQL
of a similar training question, after `copy_tokenizer.SQL_HINT_MARK`) and
mostly copies the hint token by token. To copy the next token it must know
where in the hint it is, but most SQL tokens are *output words* (keywords,
merged SQL phrases), which the pointer copies into their vocabulary id: fed
back as that id, the decoder sees "FROM" with no hint position attached, and
must rediscover its place by matching content (slow to learn for a small
model; measured in `docs/results/text2sql.md`).

So each emitted token that continues the hint is fed back as the *copy id*
of its hint position (`K + s`), whose decoder embedding adds the encoder
output at s (`seq2seq.Seq2SeqTransformer._embed`): the decoder knows it has
just copied position s. The rule is a left-to-right cursor, the same in
training (applied to the gold SQL when the data is encoded) and in decoding
(applied to the model's own tokens), so teacher forcing sees exactly the
inputs decoding will produce:

*   The cursor starts at the mark (no hint: past the end, so nothing is
    ever aligned).
*   A token (an output-word id, or a copy id `K + f`, whose token is the
    source id at f) is aligned to the first source position after the
    cursor holding the same source id; the decoder input is then `K + s`
    and the cursor moves to s. Otherwise the token is fed unchanged and the
    cursor stays. Special ids (padding, unknown, start, end) are never
    aligned.

Labels are unchanged: the pointer still adds a hint position's probability
to the token's own id (`seq2seq.copy_log_probs`).
"""

import tensorflow as tf

from tff_nlp.models import seq2seq


def start_cursor(encoder_token_ids: tf.Tensor, mark_id: int) -> tf.Tensor:
  """int32 [N]: each row's position of `mark_id`, or S if it has none."""
  encoder_token_ids = tf.convert_to_tensor(encoder_token_ids, tf.int32)
  is_mark = tf.equal(encoder_token_ids, mark_id)
  first = tf.argmax(tf.cast(is_mark, tf.int32), axis=1, output_type=tf.int32)
  return tf.where(tf.reduce_any(is_mark, axis=1), first,
                  tf.shape(encoder_token_ids)[1])


def align_step(tokens: tf.Tensor, cursor: tf.Tensor,
               encoder_token_ids: tf.Tensor, *, generated_size: int
               ) -> tuple[tf.Tensor, tf.Tensor]:
  """The decoder inputs of emitted `tokens` and the moved cursor.

  Args:
    tokens: int32 [N], the tokens just emitted (or, in training, the gold
      tokens).
    cursor: int32 [N], from `start_cursor` or the previous step.
    encoder_token_ids: int32 [N, S].
    generated_size: K, where copy ids start.

  Returns:
    (decoder input ids [N], cursor [N]); see the module docstring.
  """
  tokens = tf.convert_to_tensor(tokens, tf.int32)
  encoder_token_ids = tf.convert_to_tensor(encoder_token_ids, tf.int32)
  length = tf.shape(encoder_token_ids)[1]
  is_copy = tokens >= generated_size
  copied_from = tf.clip_by_value(tokens - generated_size, 0, length - 1)
  identity = tf.where(
      is_copy, tf.gather(encoder_token_ids, copied_from, batch_dims=1),
      tokens)
  after = tf.range(length)[tf.newaxis, :] > cursor[:, tf.newaxis]
  match = tf.logical_and(
      tf.equal(encoder_token_ids, identity[:, tf.newaxis]), after)
  aligned = tf.logical_and(tf.reduce_any(match, axis=1),
                           tokens > seq2seq.END_ID)
  position = tf.argmax(tf.cast(match, tf.int32), axis=1,
                       output_type=tf.int32)
  return (tf.where(aligned, generated_size + position, tokens),
          tf.where(aligned, position, cursor))


def decoder_inputs(token_ids: tf.Tensor, encoder_token_ids: tf.Tensor, *,
                   generated_size: int, mark_id: int) -> tf.Tensor:
  """`align_step` along whole sequences: int32 [N, L] inputs for [N, L] ids.

  Row n, column t is what decoding feeds back after emitting
  `token_ids[n, t]`; shift right by one (after the start token) for the
  decoder inputs of teacher forcing.
  """
  token_ids = tf.convert_to_tensor(token_ids, tf.int32)
  encoder_token_ids = tf.convert_to_tensor(encoder_token_ids, tf.int32)

  def step(carry, tokens):
    _, cursor = carry
    return align_step(tokens, cursor, encoder_token_ids,
                      generated_size=generated_size)

  cursor = start_cursor(encoder_token_ids, mark_id)
  inputs, _ = tf.scan(step, tf.transpose(token_ids),
                      initializer=(tf.zeros_like(cursor), cursor))
  return tf.transpose(inputs)
