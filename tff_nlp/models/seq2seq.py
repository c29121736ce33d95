"""A T5-style encoder-decoder Transformer for `tff.learning`, from keras-nlp.

Architecture (T5 v1.0-like; keras-nlp layers in Keras 2 / `tf.keras`):

    encoder_token_ids [B, S] ─ token embedding ─ + learned positions ─ dropout
      ─ N × keras_nlp TransformerEncoder (pre-LayerNorm) ─ LayerNorm ─┐
    decoder_token_ids [B, T] ─ token embedding ─ + learned positions ─ dropout
      ─ M × keras_nlp TransformerDecoder (pre-LayerNorm, causal,
            cross-attention to the encoder output) ─ LayerNorm
      ─ token embedding transposed (tied) ─ logits [B, T, V]

With `copy_from_source` (a pointer-generator, See et al., ACL 2017, with one
softmax over generating and copying as in CopyNet, Gu et al., ACL 2016), a
pointer scores every source position s from the decoder state and the
encoder output (q·k/√d), one softmax runs over the V vocabulary logits and
the S pointer scores together, and the probability of each source position
is added to the id of its token: the output is log p over the ids
`0 .. K + max_source_length - 1`: K output words (`output_vocabulary_size`,
the first K rows of the tied embedding), then `copy_tokenizer`'s copy ids
(`K + s`: the word at source position s). A copy id enters the decoder as
the embedding of the copied source token plus a projection of the encoder
output at its position, so the decoder knows which word it copied. Log-probabilities
are valid logits (log_softmax leaves them unchanged), so the loss, token
accuracy and searches below need no change.

One `keras_nlp.layers.ReversibleEmbedding` is shared by encoder, decoder and
output projection, as in T5. Unlike T5, positions are learned absolute
embeddings (keras-nlp has no relative attention bias layer for this stack),
so inputs are limited to `max_source_length` / `max_target_length` tokens,
and the layers have biases and LayerNorm (not RMSNorm).

Padding: id 0 (`subword_tokenizer.PAD_ID`). The padding masks are passed to
the layers explicitly (`ids != 0`), not through Keras mask propagation, so
padded source positions are never attended to and padded target positions
neither (their outputs are meaningless and ignored by the loss).

The other parts of the seq2seq model: `seq2seq_inputs` packs teacher-forcing
batches, `seq2seq_loss` holds the padding-masked loss and token accuracy,
`seq2seq_model_fn` wraps the model for `tff.learning`, `seq2seq_layout`
groups its tensors for dynamic pulling and `seq2seq_decoding` generates
(greedy and beam search, with key/value caches).
"""

import dataclasses
from typing import Optional

import tensorflow as tf

from tff_nlp import errors
from tff_nlp.models import dropout_seeds
from tff_nlp.models import subword_tokenizer
from tff_nlp.models import _keras_nlp
from tff_nlp.models._keras_nlp import keras_nlp

PAD_ID = subword_tokenizer.PAD_ID
UNK_ID = subword_tokenizer.UNK_ID
START_ID = subword_tokenizer.START_ID
END_ID = subword_tokenizer.END_ID

ENCODER_TOKEN_IDS = 'encoder_token_ids'
DECODER_TOKEN_IDS = 'decoder_token_ids'


@dataclasses.dataclass(frozen=True)
class Seq2SeqConfig:
  """Shape, regularisation and initialisation of the encoder-decoder.

  Attributes:
    vocabulary_size: V, the number of token ids (the tokenizer's
      `vocabulary_size()`).
    num_encoder_layers: Number of `TransformerEncoder` layers.
    num_decoder_layers: Number of `TransformerDecoder` layers.
    num_heads: Attention heads per layer; divides `hidden_dim`.
    hidden_dim: d_model, the width of embeddings and layer outputs.
    intermediate_dim: Width of the feed-forward blocks (d_ff).
    dropout: Dropout rate of embeddings, attention and feed-forward outputs.
    max_source_length: S_max, the longest encoder input (learned positions).
    max_target_length: T_max, the longest decoder input, hence the longest
      generated sequence.
    activation: Feed-forward activation ('relu' as in T5 v1.0, 'gelu', ...).
    layer_norm_epsilon: LayerNorm epsilon.
    seed: Seed of the initial weights (same seed, same weights).
    copy_from_source: Adds the pointer of the module docstring: the model
      then scores `generated_size + max_source_length` ids (`output_size`)
      and emits log-probabilities; decoder ids from `generated_size` on,
      and encoder ids from `vocabulary_size` on, are copy ids
      (`copy_tokenizer`).
    output_vocabulary_size: K, with `copy_from_source`: only ids below K
      are generated from the vocabulary (`copy_tokenizer`'s output words);
      0 means all `vocabulary_size` ids.
  """

  vocabulary_size: int
  num_encoder_layers: int
  num_decoder_layers: int
  num_heads: int
  hidden_dim: int
  intermediate_dim: int
  dropout: float = 0.1
  max_source_length: int = 512
  max_target_length: int = 256
  activation: str = 'relu'
  layer_norm_epsilon: float = 1e-6
  seed: int = 0
  copy_from_source: bool = False
  output_vocabulary_size: int = 0

  @property
  def generated_size(self) -> int:
    """K: the ids the output layer generates (copy ids start here)."""
    return self.output_vocabulary_size or self.vocabulary_size

  @property
  def output_size(self) -> int:
    """The number of ids the model scores: V, or K + S_max when copying."""
    if self.copy_from_source:
      return self.generated_size + self.max_source_length
    return self.vocabulary_size

  def __post_init__(self):
    if self.hidden_dim % self.num_heads:
      raise ValueError(
          f'hidden_dim={self.hidden_dim} is not divisible by '
          f'num_heads={self.num_heads}.'
      )
    for name in ('vocabulary_size', 'num_encoder_layers', 'num_decoder_layers',
                 'num_heads', 'hidden_dim', 'intermediate_dim',
                 'max_source_length', 'max_target_length'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got {getattr(self, name)}.')
    if not 0 <= self.output_vocabulary_size <= self.vocabulary_size:
      raise ValueError(
          f'output_vocabulary_size must be in [0, vocabulary_size='
          f'{self.vocabulary_size}], got {self.output_vocabulary_size}.')
    if self.vocabulary_size <= END_ID + 1:
      raise ValueError(
          f'vocabulary_size must exceed the special ids 0-{END_ID}, got '
          f'{self.vocabulary_size}.'
      )

  @classmethod
  def from_preset(cls, name: str, **overrides) -> 'Seq2SeqConfig':
    """A config from `PRESETS` (by name), with fields overridden.

    Args:
      name: 'small' (a 2+2-layer, d=128 model for CPUs) or 't5_base' (T5-base
        sizes: 12+12 layers, d=768, 12 heads, d_ff 3072, vocabulary 32k,
        input 1024 and output 512 tokens as in the Lorar paper; about 224M
        parameters).
      **overrides: Fields to change, e.g. `vocabulary_size`.

    Returns:
      A `Seq2SeqConfig`.
    """
    if name not in PRESETS:
      raise ValueError(f'Unknown preset {name!r}; presets: {sorted(PRESETS)}.')
    return dataclasses.replace(PRESETS[name], **overrides)


PRESETS = {
    'small': Seq2SeqConfig(
        vocabulary_size=8000,
        num_encoder_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        hidden_dim=128,
        intermediate_dim=512,
        dropout=0.1,
        max_source_length=512,
        max_target_length=256,
    ),
    # The Transformer base of Vaswani et al. (2017), as in the dynamic
    # pulling paper's NMT engines: 6+6 layers, 8 heads, d 512, FFN 2048.
    'transformer_base': Seq2SeqConfig(
        vocabulary_size=30000,
        num_encoder_layers=6,
        num_decoder_layers=6,
        num_heads=8,
        hidden_dim=512,
        intermediate_dim=2048,
        dropout=0.1,
        max_source_length=256,
        max_target_length=256,
    ),
    't5_base': Seq2SeqConfig(
        vocabulary_size=32000,
        num_encoder_layers=12,
        num_decoder_layers=12,
        num_heads=12,
        hidden_dim=768,
        intermediate_dim=3072,
        dropout=0.1,
        max_source_length=1024,
        max_target_length=512,
    ),
}


def copy_log_probs(logits: tf.Tensor, pointer: tf.Tensor,
                   source_ids: tf.Tensor, *, output_size: int) -> tf.Tensor:
  """log p of a pointer-generator with one softmax (the module docstring).

  p = softmax([logits, pointer]) over the K output words and the S source
  positions; each source position's probability is added to its output id:
  its token id if below K (an output word copied), else `K + f`, f the first
  source position holding the same id (an input or unknown word; equal
  words share one copy id, as `copy_tokenizer` numbers them).

  Args:
    logits: [B, T, K] scores of the output words.
    pointer: [B, T, S] scores of the source positions (-1e9 where a
      position must not be copied).
    source_ids: int32 [B, S], the encoder's token ids.
    output_size: K + S_max >= K + S, the width of the result.

  Returns:
    float32 [B, T, output_size]: log p, floored at log(1e-30) for ids no
    path reaches.
  """
  generated_size = logits.shape[-1] or tf.shape(logits)[-1]
  log_probs = tf.nn.log_softmax(tf.concat([logits, pointer], axis=-1))
  copy_probs = tf.exp(log_probs[..., generated_size:])  # [B, T, S]
  same = tf.equal(source_ids[:, :, tf.newaxis], source_ids[:, tf.newaxis, :])
  first = tf.argmax(tf.cast(same, tf.int32), axis=2, output_type=tf.int32)
  output_ids = tf.where(source_ids < generated_size, source_ids,
                        generated_size + first)
  shape = tf.shape(copy_probs)
  batch, length, source = shape[0], shape[1], shape[2]
  # One segment per (row, output id): unsorted_segment_sum adds the
  # probabilities of the positions that share an output id.
  rows = tf.range(batch * length)[:, tf.newaxis] * output_size
  ids = tf.reshape(tf.repeat(output_ids[:, tf.newaxis, :], length, axis=1),
                   [batch * length, source])
  copied = tf.math.unsorted_segment_sum(
      tf.reshape(copy_probs, [-1]), tf.reshape(rows + ids, [-1]),
      batch * length * output_size)
  generated = tf.exp(log_probs[..., :generated_size])
  generated = tf.pad(generated, [[0, 0], [0, 0],
                                 [0, output_size - generated_size]])
  probs = generated + tf.reshape(copied, [batch, length, output_size])
  # The floor keeps log finite for ids no path reaches (below float32's
  # resolution of the other ids' probabilities).
  return tf.math.log(tf.maximum(probs, 1e-30))


@tf.keras.utils.register_keras_serializable(package='tff_nlp')
def zero_caches(batch_size: tf.Tensor, max_length: int,
                source_length: tf.Tensor, *, num_heads: int, head_dim: int,
                num_layers: int) -> dict[str, tuple[tf.Tensor, ...]]:
  """Zero key/value caches of a decoder's `decode_step`, per layer.

  The layout of keras-nlp's `TransformerDecoder` caches, shared by every
  decodable model (`Seq2SeqTransformer`, `keras_nlp_preset.BartSeq2Seq`):
  {'self_attention': ([B, 2, max_length, H, head_dim],) * layers,
   'cross_attention': ([B, 2, S, H, head_dim],) * layers}, where B is
  `batch_size` and S `source_length` (the encoder output's length).
  """

  def zeros(length):
    return tuple(tf.zeros([batch_size, 2, length, num_heads, head_dim])
                 for _ in range(num_layers))

  return {'self_attention': zeros(max_length),
          'cross_attention': zeros(source_length)}


class Seq2SeqTransformer(tf.keras.Model):
  """The encoder-decoder of the module docstring, as a `tf.keras.Model`.

  Build it with `build_keras_model` (which creates its variables, seeded);
  the constructor creates the layers only.

  Args:
    config: A `Seq2SeqConfig`.
    **kwargs: Forwarded to `tf.keras.Model` (e.g. `name`).

  Call arguments:
    inputs: A mapping with 'encoder_token_ids' [B, S] and
      'decoder_token_ids' [B, T], int32, 0 = padding, S <= max_source_length,
      T <= max_target_length.
    training: Whether dropout is on.

  Returns:
    float32 logits [B, T, vocabulary_size]: position t scores the token
    that follows decoder tokens 0..t.
  """

  def __init__(self, config: Seq2SeqConfig, **kwargs):
    kwargs.setdefault('name', 'seq2seq_transformer')
    super().__init__(**kwargs)
    self.config = config
    c = config

    def small_normal():
      return tf.keras.initializers.TruncatedNormal(stddev=0.02)

    # std 0.02 as in GPT-2 and BART: with the tied output projection, the
    # initial logits are small and the initial distribution nearly uniform.
    self.token_embedding = keras_nlp.layers.ReversibleEmbedding(
        c.vocabulary_size, c.hidden_dim, tie_weights=True,
        embeddings_initializer=small_normal(), name='token_embedding',
    )
    self.encoder_position_embedding = keras_nlp.layers.PositionEmbedding(
        c.max_source_length, initializer=small_normal(),
        name='encoder_position_embedding',
    )
    self.decoder_position_embedding = keras_nlp.layers.PositionEmbedding(
        c.max_target_length, initializer=small_normal(),
        name='decoder_position_embedding',
    )
    self.encoder_embedding_dropout = tf.keras.layers.Dropout(
        c.dropout, name='encoder_embedding_dropout'
    )
    self.decoder_embedding_dropout = tf.keras.layers.Dropout(
        c.dropout, name='decoder_embedding_dropout'
    )
    layer_args = dict(
        intermediate_dim=c.intermediate_dim,
        num_heads=c.num_heads,
        dropout=c.dropout,
        activation=c.activation,
        layer_norm_epsilon=c.layer_norm_epsilon,
        normalize_first=True,
    )
    self.encoder_layers = [
        keras_nlp.layers.TransformerEncoder(
            **layer_args, name=f'encoder_layer_{i}'
        )
        for i in range(c.num_encoder_layers)
    ]
    self.encoder_output_layer_norm = tf.keras.layers.LayerNormalization(
        epsilon=c.layer_norm_epsilon, name='encoder_output_layer_norm'
    )
    self.decoder_layers = [
        keras_nlp.layers.TransformerDecoder(
            **layer_args, name=f'decoder_layer_{i}'
        )
        for i in range(c.num_decoder_layers)
    ]
    self.decoder_output_layer_norm = tf.keras.layers.LayerNormalization(
        epsilon=c.layer_norm_epsilon, name='decoder_output_layer_norm'
    )
    if c.copy_from_source:
      def dense(**kwargs):
        return tf.keras.layers.Dense(
            c.hidden_dim, kernel_initializer=small_normal(), **kwargs)
      self.copy_query = dense(use_bias=False, name='copy_query')
      self.copy_key = dense(use_bias=False, name='copy_key')
      # What the decoder reads for a copied word: the encoder output at
      # the copied position, projected (added to UNK's embedding).
      self.copy_input = dense(name='copy_input')

  def call(self, inputs, training=None):
    encoder_output, encoder_padding_mask = self.encode(
        inputs[ENCODER_TOKEN_IDS], training=training
    )
    return self.decode(
        inputs[DECODER_TOKEN_IDS], encoder_output, encoder_padding_mask,
        training=training, encoder_token_ids=inputs[ENCODER_TOKEN_IDS],
    )

  def _embed(self, token_ids, encoder_token_ids=None, encoder_output=None):
    """Token embeddings [B, L, d] of encoder (no `encoder_output`) or
    decoder ids.

    Ids past the embedding table are UNK: a copying model's source copy ids.
    In the decoder of a copying model, a copy id `K + s` is the embedding of
    the source token at s plus a projection of the encoder output there.
    """
    if not self.config.copy_from_source:
      return self.token_embedding(token_ids)
    known = tf.where(token_ids < self.config.vocabulary_size, token_ids,
                     UNK_ID)
    if encoder_output is None:
      return self.token_embedding(known)
    is_copy = token_ids >= self.config.generated_size
    positions = tf.where(is_copy, token_ids - self.config.generated_size, 0)
    positions = tf.minimum(positions, tf.shape(encoder_output)[1] - 1)
    source_ids = tf.gather(tf.cast(encoder_token_ids, tf.int32), positions,
                           batch_dims=1)
    source_ids = tf.where(source_ids < self.config.vocabulary_size,
                          source_ids, UNK_ID)
    x = self.token_embedding(tf.where(is_copy, source_ids, known))
    copied = self.copy_input(
        tf.gather(encoder_output, positions, batch_dims=1))
    return x + tf.where(is_copy[..., tf.newaxis], copied, 0.0)

  def _output(self, hidden, encoder_output, encoder_token_ids):
    """Logits [B, T, V], or log p [B, T, K + S_max] when copying."""
    if not self.config.copy_from_source:
      return self.token_embedding(hidden, reverse=True)
    if encoder_token_ids is None:
      raise ValueError('A copying model needs the encoder token ids.')
    c = self.config
    generated_size = c.generated_size
    # The tied embedding's first K rows: only output words are generated.
    logits = tf.matmul(
        hidden, self.token_embedding.embeddings[:generated_size],
        transpose_b=True)
    scale = tf.math.rsqrt(tf.cast(c.hidden_dim, hidden.dtype))
    pointer = tf.einsum('btd,bsd->bts', self.copy_query(hidden) * scale,
                        self.copy_key(encoder_output))
    source_ids = tf.cast(encoder_token_ids, tf.int32)
    # Special ids (padding, the END the packer adds) are never copied.
    pointer = tf.where((source_ids > END_ID)[:, tf.newaxis, :], pointer,
                       -1e9)
    return copy_log_probs(logits, pointer, source_ids,
                          output_size=c.output_size)

  def encode(
      self, encoder_token_ids: tf.Tensor, training=None
  ) -> tuple[tf.Tensor, tf.Tensor]:
    """Encoder outputs [B, S, d] and the padding mask [B, S] (True = token)."""
    encoder_token_ids = tf.convert_to_tensor(encoder_token_ids, tf.int32)
    padding_mask = tf.not_equal(encoder_token_ids, PAD_ID)
    x = self._embed(encoder_token_ids)
    x = x + self.encoder_position_embedding(x)
    x = self.encoder_embedding_dropout(x, training=training)
    with _keras_nlp.explicit_masks_without_warnings():
      for layer in self.encoder_layers:
        x = layer(x, padding_mask=padding_mask, training=training)
    return self.encoder_output_layer_norm(x), padding_mask

  def decode(
      self,
      decoder_token_ids: tf.Tensor,
      encoder_output: tf.Tensor,
      encoder_padding_mask: tf.Tensor,
      training=None,
      encoder_token_ids: Optional[tf.Tensor] = None,
  ) -> tf.Tensor:
    """Teacher-forced logits [B, T, V] given `encode`'s outputs.

    A copying model (`copy_from_source`) needs `encoder_token_ids` and
    returns log p [B, T, V + S_max].
    """
    decoder_token_ids = tf.convert_to_tensor(decoder_token_ids, tf.int32)
    x = self._embed(decoder_token_ids, encoder_token_ids, encoder_output)
    x = x + self.decoder_position_embedding(x)
    x = self.decoder_embedding_dropout(x, training=training)
    with _keras_nlp.explicit_masks_without_warnings():
      for layer in self.decoder_layers:
        x = layer(
            x,
            encoder_sequence=encoder_output,
            decoder_padding_mask=tf.not_equal(decoder_token_ids, PAD_ID),
            encoder_padding_mask=encoder_padding_mask,
            training=training,
        )
    return self._output(self.decoder_output_layer_norm(x), encoder_output,
                        encoder_token_ids)

  def initial_cache(
      self, batch_size: tf.Tensor, max_length: int, source_length: tf.Tensor
  ) -> dict[str, tuple[tf.Tensor, ...]]:
    """Zero key/value caches for `decode_step`, per decoder layer.

    Args:
      batch_size: B.
      max_length: The number of positions to cache (generated tokens).
      source_length: S, the encoder output length.

    Returns:
      {'self_attention': ([B, 2, max_length, H, d/H],) * M,
       'cross_attention': ([B, 2, S, H, d/H],) * M}.
    """
    return zero_caches(batch_size, max_length, source_length,
                       num_heads=self.config.num_heads,
                       head_dim=self.config.hidden_dim // self.config.num_heads,
                       num_layers=len(self.decoder_layers))

  def decode_step(
      self,
      token_ids: tf.Tensor,
      index: tf.Tensor,
      encoder_output: tf.Tensor,
      encoder_padding_mask: tf.Tensor,
      cache: dict[str, tuple[tf.Tensor, ...]],
      fill_cross_attention_cache: bool = False,
      encoder_token_ids: Optional[tf.Tensor] = None,
  ) -> tuple[tf.Tensor, dict[str, tuple[tf.Tensor, ...]]]:
    """Logits of the next token given the decoder token at `index` [B].

    Runs the decoder on one position, reading the keys and values of earlier
    positions from `cache` and writing this position's (keras-nlp's
    `TransformerDecoder` caches); no dropout.

    Args:
      token_ids: int32 [B], the decoder input at position `index`.
      index: The position, < the cache's max_length.
      encoder_output: [B, S, d] from `encode`.
      encoder_padding_mask: [B, S] from `encode`.
      cache: From `initial_cache` or the previous step.
      fill_cross_attention_cache: True on the first step: computes the
        cross-attention keys and values of `encoder_output`, which later
        steps read from the cache.
      encoder_token_ids: [B, S], needed by a copying model.

    Returns:
      (logits [B, V], the updated cache); a copying model gives log p
      [B, V + S_max].
    """
    x = self._embed(tf.cast(token_ids, tf.int32)[:, tf.newaxis],
                    encoder_token_ids, encoder_output)
    x = x + self.decoder_position_embedding(x, start_index=index)
    self_caches, cross_caches = [], []
    with _keras_nlp.explicit_masks_without_warnings():
      for layer, self_cache, cross_cache in zip(
          self.decoder_layers, cache['self_attention'],
          cache['cross_attention'],
      ):
        x, self_cache, cross_cache = layer(
            x,
            encoder_sequence=encoder_output,
            encoder_padding_mask=encoder_padding_mask,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=index,
            cross_attention_cache=cross_cache,
            cross_attention_cache_update_index=(
                0 if fill_cross_attention_cache else None
            ),
            training=False,
        )
        self_caches.append(self_cache)
        cross_caches.append(cross_cache)
    logits = self._output(self.decoder_output_layer_norm(x), encoder_output,
                          encoder_token_ids)
    return logits[:, 0, :], {'self_attention': tuple(self_caches),
                             'cross_attention': tuple(cross_caches)}

  def get_config(self):
    return {'name': self.name, 'config': dataclasses.asdict(self.config)}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    return cls(Seq2SeqConfig(**config.pop('config')), **config)


def build_keras_model(
    config: Seq2SeqConfig, checkpoint: Optional[str] = None
) -> Seq2SeqTransformer:
  """Builds a new, uncompiled `Seq2SeqTransformer` with seeded weights.

  Args:
    config: The model's shape and seed.
    checkpoint: If set, the weights are restored from this checkpoint (a
      path written by `save_checkpoint`) instead. Eager mode only; for a
      `tff.learning` process use `seq2seq_model_fn.load_model_weights` and
      `process.set_model_weights`.

  Returns:
    The model, its variables created (same seed, same values, in eager and
    graph mode) and its dropout layers seeded (`dropout_seeds`: inside a
    `step_seed` scope their masks are a function of the seed and the step).

  Raises:
    errors.CheckpointError: If `checkpoint` cannot be read or does not match
      the model.
  """
  with _keras_nlp.seeded_keras_initializers(config.seed):
    model = Seq2SeqTransformer(config)
    ids = tf.zeros([1, 1], tf.int32)
    model({ENCODER_TOKEN_IDS: ids, DECODER_TOKEN_IDS: ids})  # Creates weights.
  dropout_seeds.seed_dropout_layers(model, config.seed)
  if checkpoint is not None:
    load_checkpoint(model, checkpoint)
  return model


def save_checkpoint(model: tf.keras.Model, path: str) -> str:
  """Writes `model`'s weights as a `tf.train.Checkpoint`; returns its path."""
  return tf.train.Checkpoint(model=model).write(path)


def load_checkpoint(model: tf.keras.Model, path: str) -> None:
  """Restores weights written by `save_checkpoint` into `model`.

  Raises:
    errors.CheckpointError: If `path` cannot be read, or the checkpoint and
      the model do not have the same variables and shapes (e.g. another
      config).
  """
  try:
    tf.train.Checkpoint(model=model).read(path).assert_consumed()
  except (tf.errors.OpError, AssertionError, ValueError) as e:
    raise errors.CheckpointError(
        f'Cannot restore the seq2seq model from checkpoint {path!r}: the '
        'file is missing or unreadable, or it was written for another '
        f'configuration. {type(e).__name__}: {str(e)[:500]}'
    ) from e

