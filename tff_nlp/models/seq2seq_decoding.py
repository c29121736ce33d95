"""Greedy and beam-search generation for `seq2seq` models, batched, in TF.

The searches are written once against a step function

    step_fn(token_ids [N], index, state) -> (logits [N, V], state)

(the logits of the token at position `index + 1` given the tokens up to
`index`; `state` a nest of tensors with N rows) with `tf.while_loop`, so they
run eagerly, in `tf.function` and in TFF computations. For a `seq2seq` model
the state holds the encoder output and per-layer key/value caches, so each
step runs the decoder on one token (keras-nlp's `TransformerDecoder` cache
arguments) instead of the whole prefix.

Outputs are the generated ids without the start token, with the end token
(if generated within `max_length`), padded with 0 after it, and their scores:
the sum of log-probabilities of the generated tokens, end token included.
Padding, unknown and start ids are never generated (they are never targets).

Beam search keeps the `beam_size` best prefixes by score; a finished beam
(one that generated the end token) stays in the pool with its score and is
extended only by padding, at no cost. The search stops when all beams in the
pool are finished (no unfinished prefix can then overtake them, since
extending a prefix never raises its score) or after `max_length` tokens.
There is no length normalisation. (keras-nlp 0.10's `BeamSampler` is not used:
it keeps extending and scoring beams past their end token.)
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional, Union

import tensorflow as tf

from tff_nlp.models import seq2seq

StepFn = Callable[[tf.Tensor, tf.Tensor, Any], tuple[tf.Tensor, Any]]
# Ids that are never a target token, so never generated.
NEVER_GENERATED = (seq2seq.PAD_ID, seq2seq.UNK_ID, seq2seq.START_ID)


class DecodeOutput(NamedTuple):
  """Generated ids and their scores.

  Attributes:
    token_ids: int32 [B, L] (greedy) or [B, K, L] (beam search, best beam
      first); L <= max_length is the number of decoding steps run.
    scores: float32 [B] or [B, K]: the sum of the tokens' log-probabilities.
  """

  token_ids: tf.Tensor
  scores: tf.Tensor


def _log_probs(logits, never_generate):
  """log softmax(logits) [N, V], -inf at the `never_generate` ids."""
  log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
  if not never_generate:
    return log_probs
  forbidden = tf.reduce_any(
      tf.one_hot(list(never_generate), tf.shape(log_probs)[-1],
                 on_value=True, off_value=False, dtype=tf.bool),
      axis=0,
  )
  return tf.where(forbidden, -float('inf'), log_probs)


def _write_column(sequences, index, tokens):
  """sequences[..., index] = tokens, for a [..., L] and a [...] tensor."""
  length = tf.shape(sequences)[-1]
  column = tf.one_hot(index, length, on_value=True, off_value=False,
                      dtype=tf.bool)
  return tf.where(column, tokens[..., tf.newaxis], sequences)


def greedy_search(
    step_fn: StepFn,
    state: Any,
    *,
    batch_size: tf.Tensor,
    max_length: Union[int, tf.Tensor],
    start_id: int = seq2seq.START_ID,
    end_id: int = seq2seq.END_ID,
    pad_id: int = seq2seq.PAD_ID,
    never_generate: Sequence[int] = NEVER_GENERATED,
) -> DecodeOutput:
  """Picks the most likely token at every step, until the end token.

  Args:
    step_fn: See the module docstring (N = batch_size).
    state: The initial state of `step_fn`.
    batch_size: B.
    max_length: The maximum number of generated tokens (an int, or an
      int32 scalar tensor: one traced function for every length).
    start_id: The token fed at position 0.
    end_id: The token that ends a sequence.
    pad_id: The token written after the end.
    never_generate: Ids never picked (their probability stays in the
      normalisation: scores are the model's log-probabilities).

  Returns:
    A `DecodeOutput` with token_ids [B, L] and scores [B].
  """
  tokens = tf.fill([batch_size], tf.constant(start_id, tf.int32))
  sequences = tf.zeros([batch_size, max_length], tf.int32)
  scores = tf.zeros([batch_size], tf.float32)
  finished = tf.zeros([batch_size], tf.bool)

  def cond(index, tokens, sequences, scores, finished, state):
    del tokens, sequences, scores, state
    return tf.logical_and(index < max_length,
                          tf.logical_not(tf.reduce_all(finished)))

  def body(index, tokens, sequences, scores, finished, state):
    logits, state = step_fn(tokens, index, state)
    log_probs = _log_probs(logits, never_generate)
    next_tokens = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
    next_scores = tf.gather(log_probs, next_tokens, batch_dims=1)
    next_tokens = tf.where(finished, pad_id, next_tokens)
    scores += tf.where(finished, 0.0, next_scores)
    sequences = _write_column(sequences, index, next_tokens)
    finished = tf.logical_or(finished, tf.equal(next_tokens, end_id))
    return index + 1, next_tokens, sequences, scores, finished, state

  length, _, sequences, scores, _, _ = tf.while_loop(
      cond,
      body,
      (tf.constant(0), tokens, sequences, scores, finished, state),
      maximum_iterations=max_length,
  )
  return DecodeOutput(sequences[:, :length], scores)


def beam_search(
    step_fn: StepFn,
    state: Any,
    *,
    batch_size: tf.Tensor,
    beam_size: int,
    max_length: Union[int, tf.Tensor],
    start_id: int = seq2seq.START_ID,
    end_id: int = seq2seq.END_ID,
    pad_id: int = seq2seq.PAD_ID,
    never_generate: Sequence[int] = NEVER_GENERATED,
) -> DecodeOutput:
  """Beam search (see the module docstring).

  Args:
    step_fn: See the module docstring (N = batch_size * beam_size; row
      b * beam_size + k is beam k of example b).
    state: The initial state of `step_fn` for B rows; it is repeated for the
      beams.
    batch_size: B.
    beam_size: K >= 1; 1 gives the same result as `greedy_search`.
    max_length: The maximum number of generated tokens (an int, or an
      int32 scalar tensor: one traced function for every length).
    start_id: The token fed at position 0.
    end_id: The token that ends a sequence.
    pad_id: The token written after the end.
    never_generate: Ids never picked (see `greedy_search`).

  Returns:
    A `DecodeOutput` with token_ids [B, K, L] and scores [B, K], beams sorted
    by decreasing score.
  """
  if beam_size < 1:
    raise ValueError(f'beam_size must be positive, got {beam_size}.')
  k = beam_size
  state = tf.nest.map_structure(lambda t: tf.repeat(t, k, axis=0), state)
  tokens = tf.fill([batch_size * k], tf.constant(start_id, tf.int32))
  sequences = tf.zeros([batch_size, k, max_length], tf.int32)
  # Only beam 0 is live at the start, so the first step's K best tokens
  # come from distinct prefixes.
  scores = tf.tile(
      tf.constant([[0.0] + [-float('inf')] * (k - 1)], tf.float32),
      [batch_size, 1],
  )
  finished = tf.zeros([batch_size, k], tf.bool)

  def cond(index, tokens, sequences, scores, finished, state):
    del tokens, sequences, scores, state
    return tf.logical_and(index < max_length,
                          tf.logical_not(tf.reduce_all(finished)))

  def body(index, tokens, sequences, scores, finished, state):
    logits, state = step_fn(tokens, index, state)
    vocabulary_size = tf.shape(logits)[-1]
    log_probs = _log_probs(logits, never_generate)
    log_probs = tf.reshape(log_probs, [batch_size, k, vocabulary_size])
    # A finished beam can only be extended by padding, at no cost.
    pad_only = tf.one_hot(pad_id, vocabulary_size, on_value=0.0,
                          off_value=-float('inf'))
    log_probs = tf.where(finished[..., tf.newaxis], pad_only, log_probs)
    candidates = tf.reshape(scores[..., tf.newaxis] + log_probs,
                            [batch_size, k * vocabulary_size])
    scores, indices = tf.math.top_k(candidates, k=k)  # sorted, ties: low idx
    parents = indices // vocabulary_size  # [B, K]
    next_tokens = indices % vocabulary_size
    sequences = tf.gather(sequences, parents, batch_dims=1)
    sequences = _write_column(sequences, index, next_tokens)
    finished = tf.logical_or(
        tf.gather(finished, parents, batch_dims=1),
        tf.equal(next_tokens, end_id),
    )
    rows = tf.reshape(parents + tf.range(batch_size)[:, tf.newaxis] * k, [-1])
    state = tf.nest.map_structure(lambda t: tf.gather(t, rows), state)
    return (index + 1, tf.reshape(next_tokens, [-1]), sequences, scores,
            finished, state)

  length, _, sequences, scores, _, _ = tf.while_loop(
      cond,
      body,
      (tf.constant(0), tokens, sequences, scores, finished, state),
      maximum_iterations=max_length,
  )
  return DecodeOutput(sequences[:, :, :length], scores)


def _model_step_fn_and_state(
    model: seq2seq.Seq2SeqTransformer,
    encoder_token_ids: tf.Tensor,
    max_length: Union[int, tf.Tensor],
    start_id: int,
) -> tuple[StepFn, Any]:
  """The cached decoder step of `model` and its state after encoding."""
  if (isinstance(max_length, int)
      and max_length > model.config.max_target_length):
    raise ValueError(
        f'max_length={max_length} exceeds the model\'s max_target_length='
        f'{model.config.max_target_length}.'
    )
  encoder_token_ids = tf.convert_to_tensor(encoder_token_ids, tf.int32)
  encoder_output, encoder_padding_mask = model.encode(
      encoder_token_ids, training=False
  )
  batch_size = tf.shape(encoder_token_ids)[0]
  # A first step on the start token computes the cross-attention keys and
  # values once; the search redoes position 0 (same values).
  _, cache = model.decode_step(
      tf.fill([batch_size], tf.constant(start_id, tf.int32)),
      0,
      encoder_output,
      encoder_padding_mask,
      model.initial_cache(
          batch_size, max_length, tf.shape(encoder_token_ids)[1]
      ),
      fill_cross_attention_cache=True,
      encoder_token_ids=encoder_token_ids,
  )
  state = dict(cache=cache, encoder_output=encoder_output,
               encoder_padding_mask=encoder_padding_mask,
               encoder_token_ids=encoder_token_ids)

  def step_fn(tokens, index, state):
    logits, cache = model.decode_step(
        tokens, index, state['encoder_output'],
        state['encoder_padding_mask'], state['cache'],
        encoder_token_ids=state['encoder_token_ids'],
    )
    return logits, dict(state, cache=cache)

  return step_fn, state


def greedy_decode(
    model: seq2seq.Seq2SeqTransformer,
    encoder_token_ids: tf.Tensor,
    *,
    max_length: Union[int, tf.Tensor],
    start_id: int = seq2seq.START_ID,
    end_id: int = seq2seq.END_ID,
) -> DecodeOutput:
  """Greedy generation from a `seq2seq.Seq2SeqTransformer`.

  Args:
    model: The model (dropout off).
    encoder_token_ids: int32 [B, S], 0 = padding.
    max_length: The maximum number of generated tokens, at most the model's
      `max_target_length`.
    start_id: The decoder's first input token.
    end_id: The token that ends a sequence.

  Returns:
    A `DecodeOutput` with token_ids [B, L] and scores [B]. Wrap the call in
    `tf.function` (or use `make_decode_fn`) for speed.
  """
  step_fn, state = _model_step_fn_and_state(
      model, encoder_token_ids, max_length, start_id
  )
  return greedy_search(
      step_fn, state, batch_size=tf.shape(encoder_token_ids)[0],
      max_length=max_length, start_id=start_id, end_id=end_id,
  )


def beam_search_decode(
    model: seq2seq.Seq2SeqTransformer,
    encoder_token_ids: tf.Tensor,
    *,
    beam_size: int,
    max_length: Union[int, tf.Tensor],
    start_id: int = seq2seq.START_ID,
    end_id: int = seq2seq.END_ID,
) -> DecodeOutput:
  """Beam-search generation from a `seq2seq.Seq2SeqTransformer`.

  Args:
    model: The model (dropout off).
    encoder_token_ids: int32 [B, S], 0 = padding.
    beam_size: K, the number of beams.
    max_length: The maximum number of generated tokens, at most the model's
      `max_target_length`.
    start_id: The decoder's first input token.
    end_id: The token that ends a sequence.

  Returns:
    A `DecodeOutput` with token_ids [B, K, L] and scores [B, K], best first.
  """
  step_fn, state = _model_step_fn_and_state(
      model, encoder_token_ids, max_length, start_id
  )
  return beam_search(
      step_fn, state, batch_size=tf.shape(encoder_token_ids)[0],
      beam_size=beam_size, max_length=max_length, start_id=start_id,
      end_id=end_id,
  )


def make_decode_fn(
    model: seq2seq.Seq2SeqTransformer,
    *,
    max_length: int,
    beam_size: int = 1,
) -> Callable[..., tf.Tensor]:
  """A compiled function from encoder ids [B, S] to the best ids [B, L].

  Greedy search if `beam_size` is 1, else the best beam of beam search. The
  function takes an optional `max_length` (at most this one) for a call:
  e.g. a client whose longest SQL is short need not run a weak model's
  never-ending outputs to the longest SQL of all clients. The length is a
  tensor argument of one traced function (the search's loop bound and the
  size of its cache), so that clients of different lengths do not trace the
  model's decoder once each: tracing it took longer than decoding a small
  test set. A call runs the same kernels on the same shapes as a function
  traced for that one length would.
  """
  if max_length > model.config.max_target_length:
    raise ValueError(
        f'max_length={max_length} exceeds the model\'s max_target_length='
        f'{model.config.max_target_length}.'
    )

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                tf.TensorSpec([], tf.int32)])
  def traced(encoder_token_ids, length):
    if beam_size == 1:
      return greedy_decode(
          model, encoder_token_ids, max_length=length
      ).token_ids
    return beam_search_decode(
        model, encoder_token_ids, beam_size=beam_size, max_length=length
    ).token_ids[:, 0]

  def decode(encoder_token_ids, max_length: Optional[int] = None):
    length = limit if max_length is None else int(max_length)
    if not 0 < length <= limit:
      raise ValueError(f'max_length must be in 1..{limit}, got {max_length}.')
    return traced(encoder_token_ids, tf.constant(length, tf.int32))

  limit = max_length
  # How many times the decoder was traced (1 after any number of lengths).
  decode.experimental_get_tracing_count = traced.experimental_get_tracing_count
  return decode


def sequence_log_probability(
    model: seq2seq.Seq2SeqTransformer,
    encoder_token_ids: tf.Tensor,
    token_ids: tf.Tensor,
    *,
    start_id: int = seq2seq.START_ID,
    pad_id: int = seq2seq.PAD_ID,
) -> tf.Tensor:
  """log p(token_ids | encoder ids) by teacher forcing (one forward pass).

  Args:
    model: The model.
    encoder_token_ids: int32 [B, S].
    token_ids: int32 [B, L]: generated ids as in `DecodeOutput` (no start
      token; padding after the end token is ignored).
    start_id: The decoder's first input token.
    pad_id: The padding id.

  Returns:
    float32 [B]: the sum over non-padding positions of log p(token).
  """
  token_ids = tf.convert_to_tensor(token_ids, tf.int32)
  decoder_inputs = tf.concat(
      [tf.fill([tf.shape(token_ids)[0], 1], start_id), token_ids[:, :-1]],
      axis=1,
  )
  mask = tf.not_equal(token_ids, pad_id)
  decoder_inputs = tf.where(mask, decoder_inputs, pad_id)
  logits = model({
      seq2seq.ENCODER_TOKEN_IDS: tf.convert_to_tensor(
          encoder_token_ids, tf.int32
      ),
      seq2seq.DECODER_TOKEN_IDS: decoder_inputs,
  }, training=False)
  log_probs = tf.gather(tf.nn.log_softmax(logits), token_ids, batch_dims=2)
  return tf.reduce_sum(tf.where(mask, log_probs, 0.0), axis=1)
