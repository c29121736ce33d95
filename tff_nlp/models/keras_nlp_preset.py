"""A local keras-nlp BART preset as a seq2seq model and tokenizer of this project.

A keras-nlp preset is a directory (downloaded elsewhere; nothing here goes
online) holding

    config.json                       the backbone's serialized Keras config
                                      (`registered_name` 'keras_nlp>BartBackbone')
    model.weights.h5                  its weights (`save_weights` format)
    metadata.json                     with `keras_version`
    tokenizer.json                    the tokenizer's serialized config
                                      ('keras_nlp>BartTokenizer')
    assets/tokenizer/vocabulary.json  token -> id
    assets/tokenizer/merges.txt       the BPE merge rules

`load_preset` reads one with keras-nlp's own `BartBackbone.from_preset` and
`BartTokenizer.from_preset` (which accept a local directory, also in
Keras 2) after checking the files itself, so that a bad directory gives an
error naming the file. It returns a `BartSeq2Seq` model and a
`BartTokenizerAdapter`, which speak this project's seq2seq conventions
(`seq2seq`, `seq2seq_inputs`, `seq2seq_loss`, `seq2seq_decoding`):

*   Input: the dict {ENCODER_TOKEN_IDS: [B, S], DECODER_TOKEN_IDS: [B, T]};
    output: logits [B, T, V] (`BartSeq2Seq.call`), plus `encode`,
    `decode`, `initial_cache` and `decode_step` with the signatures of
    `seq2seq.Seq2SeqTransformer`, which `seq2seq_decoding` calls.
*   Ids: the project's special ids are PAD 0, UNK 1, START 2, END 3
    (`subword_tokenizer`); BART's are <s> 0, <pad> 1, </s> 2, <unk> 3. The
    model and tokenizer map between them with one fixed permutation of ids
    0-3 (identity from 4 on):

        project PAD 0   <-> BART <pad> 1
        project UNK 1   <-> BART <unk> 3
        project START 2 <-> BART <s>   0
        project END 3   <-> BART </s>  2

    applied by gathers on the input ids (project -> BART) and on the last
    axis of the logits (logit of project id p = BART's logit of
    `PROJECT_TO_BART[p]`). The tokenizer returns project ids too. So
    padding masks (id 0), teacher forcing (START / END packing), the masked
    loss and decoding of the project work unchanged.

`build_keras_model` builds the same model from a backbone config without
reading files (seeded weights): the `keras_model_fn` of a `model_fn` that
runs inside TFF computations, e.g. `lora_model_fn.LoraModelFn` with the
loaded model's `get_weights()` as its `base_weights`.

The output projection is the token embedding transposed (tied), as in
keras-nlp's `BartSeq2SeqLM`; BART's backbone is built from keras-nlp's
`TransformerEncoder` / `TransformerDecoder`, so `lora.add_lora` adapts its
attention and feed-forward kernels.

keras-nlp 0.10's `save_to_preset` requires Keras 3; a preset written by
Keras 3 keras-nlp (e.g. the Kaggle BART presets) has the layout above.
"""

import json
import os
from typing import Any, Optional

import tensorflow as tf

from tff_nlp import errors
from tff_nlp.models import dropout_seeds
from tff_nlp.models import seq2seq
from tff_nlp.models import subword_tokenizer
from tff_nlp.models import _keras_nlp
from tff_nlp.models._keras_nlp import keras_nlp

ENCODER_TOKEN_IDS = seq2seq.ENCODER_TOKEN_IDS
DECODER_TOKEN_IDS = seq2seq.DECODER_TOKEN_IDS

# The files `load_preset` reads (keras-nlp's preset_utils names).
CONFIG_FILE = 'config.json'
TOKENIZER_CONFIG_FILE = 'tokenizer.json'
METADATA_FILE = 'metadata.json'
WEIGHTS_FILE = 'model.weights.h5'
TOKENIZER_ASSET_DIR = os.path.join('assets', 'tokenizer')
TOKENIZER_ASSETS = ('vocabulary.json', 'merges.txt')

BACKBONE_CLASS = 'keras_nlp>BartBackbone'
TOKENIZER_CLASS = 'keras_nlp>BartTokenizer'

# BART's special tokens, at ids 0-3 of its vocabulary.
BART_SPECIAL_TOKENS = ('<s>', '<pad>', '</s>', '<unk>')
NUM_SPECIAL_IDS = 4
# PROJECT_TO_BART[p]: BART's id of the project's special id p, and back.
PROJECT_TO_BART = (1, 3, 0, 2)
BART_TO_PROJECT = (2, 0, 3, 1)

assert (subword_tokenizer.PAD_ID, subword_tokenizer.UNK_ID,
        subword_tokenizer.START_ID, subword_tokenizer.END_ID) == (0, 1, 2, 3)
assert all(BART_TO_PROJECT[PROJECT_TO_BART[p]] == p for p in range(4))


def _permute_ids(ids, permutation) -> tf.Tensor:
  ids = tf.convert_to_tensor(ids)
  special = tf.gather(tf.constant(permutation, ids.dtype),
                      tf.clip_by_value(ids, 0, NUM_SPECIAL_IDS - 1))
  return tf.where((ids >= 0) & (ids < NUM_SPECIAL_IDS), special, ids)


def to_bart_ids(ids) -> tf.Tensor:
  """Project ids (PAD 0, UNK 1, START 2, END 3) to BART ids, any shape."""
  return _permute_ids(ids, PROJECT_TO_BART)


def to_project_ids(ids) -> tf.Tensor:
  """BART ids (<s> 0, <pad> 1, </s> 2, <unk> 3) to project ids."""
  return _permute_ids(ids, BART_TO_PROJECT)


def to_project_logits(logits: tf.Tensor) -> tf.Tensor:
  """Scores [..., V] of BART ids to scores of project ids (same ids >= 4)."""
  return tf.concat(
      [tf.gather(logits[..., :NUM_SPECIAL_IDS], PROJECT_TO_BART, axis=-1),
       logits[..., NUM_SPECIAL_IDS:]], axis=-1)


@tf.keras.utils.register_keras_serializable(package='tff_nlp')
class BartSeq2Seq(tf.keras.Model):
  """A keras-nlp `BartBackbone` with a tied LM head, in project ids.

  The backbone's encoder and decoder (post-LayerNorm BART layers, learned
  positions from 0, an embedding LayerNorm), followed by the token
  embedding transposed as the output projection, as keras-nlp's
  `BartSeq2SeqLM` computes its logits. Inputs and logits use the project's
  ids (module docstring: a fixed permutation of ids 0-3), so the model is a
  drop-in for `seq2seq.Seq2SeqTransformer` in teacher forcing, the masked
  loss and `seq2seq_decoding` (it has the same `encode`, `decode`,
  `initial_cache` and `decode_step`, and a `config`).

  Args:
    backbone: A `keras_nlp.models.BartBackbone` (e.g. from `load_preset`).
    **kwargs: Forwarded to `tf.keras.Model` (e.g. `name`).

  Call arguments:
    inputs: A mapping with 'encoder_token_ids' [B, S] and
      'decoder_token_ids' [B, T], int32 project ids, 0 = padding, S and T
      at most the backbone's `max_sequence_length`.
    training: Whether dropout is on.

  Returns:
    float32 logits [B, T, vocabulary_size] over project ids: position t
    scores the token that follows decoder tokens 0..t.

  Examples:

  >>> model, tokenizer = load_preset('/data/presets/bart_base_en')
  >>> x, y = seq2seq_inputs.pack_inputs(
  ...     tokenizer.tokenize(['a question']), tokenizer.tokenize(['SELECT']),
  ...     source_length=16, target_length=8)
  >>> model(x).shape
  TensorShape([1, 8, 50265])
  """

  def __init__(self, backbone, **kwargs):
    kwargs.setdefault('name', 'bart_seq2seq')
    super().__init__(**kwargs)
    if not isinstance(backbone, keras_nlp.models.BartBackbone):
      raise ValueError(
          f'BartSeq2Seq needs a keras_nlp BartBackbone, got '
          f'{type(backbone).__name__}.')
    self.backbone = backbone
    b = backbone
    # The shapes, for code written for `Seq2SeqTransformer` (decoding reads
    # `max_target_length`, the text-to-SQL task the vocabulary size). The
    # architecture is BART's (post-LayerNorm, GELU), not this config's.
    self.config = seq2seq.Seq2SeqConfig(
        vocabulary_size=b.vocabulary_size, num_encoder_layers=b.num_layers,
        num_decoder_layers=b.num_layers, num_heads=b.num_heads,
        hidden_dim=b.hidden_dim, intermediate_dim=b.intermediate_dim,
        dropout=b.dropout, max_source_length=b.max_sequence_length,
        max_target_length=b.max_sequence_length, activation='gelu',
        layer_norm_epsilon=1e-5)

  def call(self, inputs, training=None):
    encoder_output, encoder_padding_mask = self.encode(
        inputs[ENCODER_TOKEN_IDS], training=training)
    return self.decode(inputs[DECODER_TOKEN_IDS], encoder_output,
                       encoder_padding_mask, training=training)

  def encode(self, encoder_token_ids: tf.Tensor, training=None
             ) -> tuple[tf.Tensor, tf.Tensor]:
    """Encoder outputs [B, S, d] and the padding mask [B, S] (True = token)."""
    encoder_token_ids = tf.convert_to_tensor(encoder_token_ids, tf.int32)
    padding_mask = tf.not_equal(encoder_token_ids, seq2seq.PAD_ID)
    b = self.backbone
    tokens = b.token_embedding(to_bart_ids(encoder_token_ids))
    positions = b.encoder_position_embedding(tokens)
    x = b.encoder_embeddings_add((tokens, positions))
    x = b.encoder_embeddings_layer_norm(x)
    x = b.encoder_embeddings_dropout(x, training=training)
    with _keras_nlp.explicit_masks_without_warnings():
      for layer in b.encoder_transformer_layers:
        x = layer(x, padding_mask=padding_mask, training=training)
    return x, padding_mask

  def _embed_decoder(self, decoder_token_ids, start_index=0, training=None):
    b = self.backbone
    tokens = b.token_embedding(to_bart_ids(decoder_token_ids))
    positions = b.decoder_position_embedding(tokens, start_index=start_index)
    x = b.decoder_embeddings_add((tokens, positions))
    x = b.decoder_embeddings_layer_norm(x)
    return b.decoder_embeddings_dropout(x, training=training)

  def _logits(self, hidden: tf.Tensor) -> tf.Tensor:
    return to_project_logits(
        self.backbone.token_embedding(hidden, reverse=True))

  def decode(self, decoder_token_ids: tf.Tensor, encoder_output: tf.Tensor,
             encoder_padding_mask: tf.Tensor, training=None,
             encoder_token_ids: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Teacher-forced logits [B, T, V] (project ids) given `encode`'s outputs.

    `encoder_token_ids` is accepted for `Seq2SeqTransformer`'s signature
    and unused (BART does not copy).
    """
    del encoder_token_ids
    decoder_token_ids = tf.convert_to_tensor(decoder_token_ids, tf.int32)
    x = self._embed_decoder(decoder_token_ids, training=training)
    with _keras_nlp.explicit_masks_without_warnings():
      for layer in self.backbone.decoder_transformer_layers:
        x = layer(
            x,
            encoder_sequence=encoder_output,
            decoder_padding_mask=tf.not_equal(decoder_token_ids,
                                              seq2seq.PAD_ID),
            encoder_padding_mask=encoder_padding_mask,
            training=training,
        )
    return self._logits(x)

  def initial_cache(self, batch_size: tf.Tensor, max_length: int,
                    source_length: tf.Tensor
                    ) -> dict[str, tuple[tf.Tensor, ...]]:
    """Zero key/value caches for `decode_step` (`Seq2SeqTransformer`'s)."""
    b = self.backbone
    return seq2seq.zero_caches(
        batch_size, max_length, source_length, num_heads=b.num_heads,
        head_dim=b.hidden_dim // b.num_heads,
        num_layers=len(b.decoder_transformer_layers))

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
    """Logits [B, V] of the token after `token_ids` [B] at `index`; no dropout.

    As `Seq2SeqTransformer.decode_step` (keras-nlp `TransformerDecoder`
    caches); `encoder_token_ids` is unused.
    """
    del encoder_token_ids
    x = self._embed_decoder(tf.cast(token_ids, tf.int32)[:, tf.newaxis],
                            start_index=index, training=False)
    self_caches, cross_caches = [], []
    with _keras_nlp.explicit_masks_without_warnings():
      for layer, self_cache, cross_cache in zip(
          self.backbone.decoder_transformer_layers, cache['self_attention'],
          cache['cross_attention']):
        x, self_cache, cross_cache = layer(
            x,
            encoder_sequence=encoder_output,
            encoder_padding_mask=encoder_padding_mask,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=index,
            cross_attention_cache=cross_cache,
            cross_attention_cache_update_index=(
                0 if fill_cross_attention_cache else None),
            training=False,
        )
        self_caches.append(self_cache)
        cross_caches.append(cross_cache)
    return self._logits(x)[:, 0, :], {
        'self_attention': tuple(self_caches),
        'cross_attention': tuple(cross_caches)}

  def get_config(self):
    return {'name': self.name,
            'backbone': tf.keras.saving.serialize_keras_object(self.backbone)}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    backbone = tf.keras.saving.deserialize_keras_object(
        config.pop('backbone'))
    return cls(backbone, **config)


class BartTokenizerAdapter:
  """keras-nlp's `BartTokenizer` with the project tokenizers' interface.

  Offers what the text-to-SQL task and `seq2seq_examples` call on a
  `subword_tokenizer.SubwordTokenizer`: `tokenize` (no special token
  added; ragged ids [B, None] for a batch, or dense [L] for one string),
  `detokenize` (drops the special ids 0-3 and padding), `vocabulary_size()`
  and the `pad/unk/start/end_token_id` attributes, all in the project's ids
  (module docstring). A token the BPE vocabulary lacks (keras-nlp gives
  -1) becomes UNK. Special tokens are not meant to be in the text (the
  packer adds their ids); note that keras-nlp 0.10 reads the text '</s>'
  as '<s>' (its placeholders for '<s>' and '</s>' coincide).

  Args:
    tokenizer: A `keras_nlp.models.BartTokenizer` whose vocabulary has
      '<s>', '<pad>', '</s>', '<unk>' at ids 0-3 (as BART's has).

  Raises:
    errors.InputError: If the vocabulary has other ids 0-3.

  Examples:

  >>> _, tokenizer = load_preset('/data/presets/bart_base_en')
  >>> ids = tokenizer.tokenize(['SELECT a FROM t'])
  >>> tokenizer.detokenize(ids).numpy()
  array([b'SELECT a FROM t'], dtype=object)
  """

  copies_from_source = False

  def __init__(self, tokenizer):
    found = tuple(tokenizer.vocabulary.get(t) for t in BART_SPECIAL_TOKENS)
    if found != tuple(range(NUM_SPECIAL_IDS)):
      raise errors.InputError(
          f'The BART vocabulary has {dict(zip(BART_SPECIAL_TOKENS, found))}; '
          f'BartTokenizerAdapter needs {BART_SPECIAL_TOKENS} at ids 0-3.')
    self.tokenizer = tokenizer
    self.pad_token_id = subword_tokenizer.PAD_ID
    self.unk_token_id = subword_tokenizer.UNK_ID
    self.start_token_id = subword_tokenizer.START_ID
    self.end_token_id = subword_tokenizer.END_ID

  def vocabulary_size(self) -> int:
    return self.tokenizer.vocabulary_size()

  def tokenize(self, inputs):
    """Strings [...] to project ids [..., None] (ragged; dense for a scalar)."""
    ids = self.tokenizer.tokenize(inputs)
    bart_unk = BART_SPECIAL_TOKENS.index('<unk>')

    def convert(flat):
      flat = tf.cast(flat, tf.int32)
      return to_project_ids(tf.where(flat < 0, bart_unk, flat))

    if isinstance(ids, tf.RaggedTensor):
      return tf.ragged.map_flat_values(convert, ids)
    return convert(ids)

  def __call__(self, inputs):
    return self.tokenize(inputs)

  def detokenize(self, inputs):
    """Project ids [..., L] (dense or ragged) to strings [...]; drops 0-3."""
    if not isinstance(inputs, tf.RaggedTensor):
      inputs = tf.convert_to_tensor(inputs)
    ids = tf.cast(inputs, tf.int32)
    scalar = ids.shape.rank == 1
    if scalar:
      ids = ids[tf.newaxis]
    kept = tf.ragged.boolean_mask(ids, ids >= NUM_SPECIAL_IDS)
    text = self.tokenizer.detokenize(kept)
    return text[0] if scalar else text

  def token_to_id(self, token: str) -> int:
    """The project id of `token`."""
    return int(to_project_ids(self.tokenizer.token_to_id(token)))

  def id_to_token(self, token_id: int) -> str:
    """The token of project id `token_id`."""
    return self.tokenizer.id_to_token(int(to_bart_ids(token_id)))


def _build(backbone, seed: int) -> BartSeq2Seq:
  model = BartSeq2Seq(backbone)
  ids = tf.constant([[seq2seq.END_ID]], tf.int32)
  model({ENCODER_TOKEN_IDS: ids, DECODER_TOKEN_IDS: ids})  # Builds it.
  dropout_seeds.seed_dropout_layers(model, seed)
  return model


def build_keras_model(backbone_config: dict[str, Any],
                      seed: int = 0) -> BartSeq2Seq:
  """A new `BartSeq2Seq` of a backbone config, seeded weights, no file read.

  The architecture of a preset without its weights: what a `model_fn` that
  runs inside TFF computations builds (e.g. `lora_model_fn.LoraModelFn`'s
  `keras_model_fn`, with the preset model's `get_weights()` as
  `base_weights`). Same seed, same weights; dropout layers seeded
  (`dropout_seeds`), as `seq2seq.build_keras_model` does.

  Args:
    backbone_config: `BartBackbone.get_config()` (e.g.
      `load_preset(...)[0].backbone.get_config()`, or the 'config' of a
      preset's config.json).
    seed: Seed of the initial weights and dropout masks.

  Returns:
    The built model.
  """
  with _keras_nlp.seeded_keras_initializers(seed):
    backbone = keras_nlp.models.BartBackbone.from_config(
        dict(backbone_config))
    return _build(backbone, seed)


def _read_json(path: str) -> Any:
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise errors.InputError(f'Cannot read the JSON file {path}: {e}') from e


def _check_class(path: str, expected: str) -> None:
  config = _read_json(path)
  found = (config.get('registered_name') or config.get('class_name')
           if isinstance(config, dict) else None)
  if found != expected:
    raise errors.InputError(
        f'{path} describes a {found!r}, not a {expected!r}: load_preset reads '
        'keras-nlp BART presets only.')


def check_preset_dir(preset_dir: str) -> None:
  """Raises `errors.InputError` naming the first missing or wrong file."""
  if not os.path.isdir(preset_dir):
    raise errors.InputError(
        f'The keras-nlp preset directory {preset_dir} does not exist.')
  required = (CONFIG_FILE, METADATA_FILE, WEIGHTS_FILE, TOKENIZER_CONFIG_FILE,
              *(os.path.join(TOKENIZER_ASSET_DIR, a) for a in TOKENIZER_ASSETS))
  for name in required:
    path = os.path.join(preset_dir, name)
    if not os.path.isfile(path):
      raise errors.InputError(
          f'{path} is missing: a keras-nlp BART preset directory holds '
          f'{", ".join(required)}.')
  _check_class(os.path.join(preset_dir, CONFIG_FILE), BACKBONE_CLASS)
  _check_class(os.path.join(preset_dir, TOKENIZER_CONFIG_FILE),
               TOKENIZER_CLASS)
  metadata_path = os.path.join(preset_dir, METADATA_FILE)
  metadata = _read_json(metadata_path)
  if not isinstance(metadata, dict) or 'keras_version' not in metadata:
    raise errors.InputError(
        f'{metadata_path} has no keras_version: not a Keras preset.')


def load_preset(preset_dir: str, seed: int = 0
                ) -> tuple[BartSeq2Seq, BartTokenizerAdapter]:
  """The BART model and tokenizer of a local keras-nlp preset directory.

  Offline: only `preset_dir` is read (module docstring for its files).

  Args:
    preset_dir: A keras-nlp `BartBackbone` preset directory.
    seed: Seed of the model's dropout masks (`dropout_seeds`).

  Returns:
    (a built `BartSeq2Seq` with the preset's weights, a
    `BartTokenizerAdapter` of its tokenizer), both in project ids.

  Raises:
    errors.InputError: If a file is missing or unreadable, the preset is
      not a `BartBackbone` / `BartTokenizer` one, the weights do not fit
      the config, or the vocabulary does not fit the model.
  """
  preset_dir = os.fspath(preset_dir)
  check_preset_dir(preset_dir)
  weights_path = os.path.join(preset_dir, WEIGHTS_FILE)
  try:
    backbone = keras_nlp.models.BartBackbone.from_preset(preset_dir)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise errors.InputError(
        f'Cannot build the BartBackbone of {preset_dir} from '
        f'{CONFIG_FILE} and {weights_path}: {type(e).__name__}: '
        f'{str(e)[:500]}') from e
  try:
    tokenizer = keras_nlp.models.BartTokenizer.from_preset(preset_dir)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise errors.InputError(
        f'Cannot build the BartTokenizer of {preset_dir} from '
        f'{TOKENIZER_CONFIG_FILE} and {TOKENIZER_ASSET_DIR}: '
        f'{type(e).__name__}: {str(e)[:500]}') from e
  adapter = BartTokenizerAdapter(tokenizer)
  largest_id = max(tokenizer.vocabulary.values())
  if largest_id >= backbone.vocabulary_size:
    raise errors.InputError(
        f'The vocabulary of {preset_dir} has ids up to {largest_id}, but '
        f'the model embeds {backbone.vocabulary_size} ids.')
  return _build(backbone, seed), adapter
