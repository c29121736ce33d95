"""A SentencePiece subword tokenizer whose detokenization is exact.

`detokenize(tokenize(s)) == s` for every Unicode string s: whitespace
(leading, trailing, repeated, tabs, newlines), case, punctuation, quotes,
digits and characters never seen in training all come back unchanged. That is
what exact-match evaluation of generated SQL (values included) needs.

How (SentencePiece options set by `SubwordTokenizer.train`):

*   `normalization_rule_name='identity'` and `remove_extra_whitespaces=False`:
    the text is not normalised (no NFKC, no whitespace folding);
*   `add_dummy_prefix=False`: no space is invented at the start, so a leading
    space is a real one (the decoder would otherwise strip it);
*   `byte_fallback=True`: a character without a piece becomes its UTF-8
    bytes, `<0x..>` pieces, so nothing maps to the unknown id;
*   SentencePiece writes spaces as U+2581 (▁) and turns every ▁ back into a
    space when decoding, so a literal ▁ in the text is escaped before
    tokenization and unescaped after detokenization: U+E000 (private use)
    → U+E000 '0', ▁ → U+E000 '1'.

The parsed model is a TF resource under a shared name, unlike in
tensorflow-text, whose private resource `tf.random.set_seed` destroys.

Training is deterministic: the texts are sorted and SentencePiece runs on one
thread (its result depends on the number of threads). It runs in a separate
Python process, because SentencePiece's trainer can crash one that has loaded
TensorFlow (google/sentencepiece#813). The `sentencepiece` package is needed
only to train; tokenizing and detokenizing run as
TensorFlow ops (tensorflow-text) in eager code, `tf.function` and `tf.data`.

Ids: 0 padding, 1 unknown (never produced by `tokenize`), 2 start, 3 end,
then 256 byte pieces and the learned pieces.
"""

from collections.abc import Callable, Iterable
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from typing import Optional, Union

import tensorflow as tf
# pylint: disable-next=g-direct-tensorflow-import
from tensorflow_text.python.ops import sentencepiece_tokenizer as tf_text_sp

from tff_nlp import errors
from tff_nlp.models._keras_nlp import keras_nlp

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
# The pieces SentencePiece gives the special ids, in id order.
_SPECIAL_PIECES = ('<pad>', '<unk>', '<s>', '</s>')
# The file `SubwordTokenizer.save` writes (keras-nlp's asset name).
PROTO_FILENAME = 'vocabulary.spm'
MODEL_TYPES = ('bpe', 'unigram')

_META = '\u2581'  # SentencePiece's whitespace symbol.
_ESCAPE = '\ue000'
_ESCAPED_ESCAPE = _ESCAPE + '0'
_ESCAPED_META = _ESCAPE + '1'
# Longer training texts (in bytes) would be skipped by SentencePiece.
_MAX_SENTENCE_BYTES = 1 << 20


def _escape_text(text: str) -> str:
  return text.replace(_ESCAPE, _ESCAPED_ESCAPE).replace(_META, _ESCAPED_META)


def _map_strings(fn, strings):
  if isinstance(strings, tf.RaggedTensor):
    return tf.ragged.map_flat_values(fn, strings)
  return fn(strings)


def _escape(strings):
  def fn(x):
    x = tf.strings.regex_replace(x, _ESCAPE, _ESCAPED_ESCAPE)
    return tf.strings.regex_replace(x, _META, _ESCAPED_META)

  return _map_strings(fn, strings)


def _unescape(strings):
  # Every U+E000 of an escaped text starts a 2-character escape whose second
  # character is '0' or '1', so the '1' escapes are found unambiguously
  # first, then the '0' escapes.
  def fn(x):
    x = tf.strings.regex_replace(x, _ESCAPED_META, _META)
    return tf.strings.regex_replace(x, _ESCAPED_ESCAPE, _ESCAPE)

  return _map_strings(fn, strings)


# pylint: disable-next=protected-access
class _SharedModelResource(tf_text_sp._SentencepieceModelResource):
  """tensorflow-text's model resource, under a name shared by its kernels.

  tensorflow-text creates the parsed model as a resource private to the op
  kernel that made it, so clearing TF's kernel cache destroys it, and
  `tf.random.set_seed` (e.g. via `tf.keras.utils.set_random_seed`) clears
  the cache in eager mode: every later use of the tokenizer then fails with
  "Resource ... SentencepieceResource does not exist". A shared name keeps
  the resource (one per distinct model) for the life of the process.
  """

  def __init__(self, model: bytes):
    self._shared_name = (
        'tff_nlp_sentencepiece_' + hashlib.sha256(model).hexdigest()
    )
    super().__init__(model, name=None)

  def _create_resource(self):
    return tf_text_sp.gen_sentencepiece_tokenizer.sentencepiece_op(
        model=self._model, shared_name=self._shared_name
    )


@tf.keras.utils.register_keras_serializable(package='tff_nlp')
class SubwordTokenizer(keras_nlp.tokenizers.SentencePieceTokenizer):
  """A SentencePiece tokenizer with exact round trip and fixed special ids.

  A `keras_nlp.tokenizers.SentencePieceTokenizer` that escapes the one
  character SentencePiece cannot return (U+2581) and checks that its model
  has the special ids of this module: `PAD_ID` 0 (`<pad>`), `UNK_ID` 1
  (`<unk>`), `START_ID` 2 (`<s>`), `END_ID` 3 (`</s>`). `tokenize` adds no
  special token; pack ids for a model with `keras_nlp.layers.StartEndPacker`
  (or `seq2seq_inputs.pack_inputs`). `detokenize` drops the special ids.

  Train one with `SubwordTokenizer.train`, write it with `save` and read it
  back with `SubwordTokenizer.load`. Its exact round trip holds for models
  trained by `train`; another SentencePiece model with the same special ids
  loads, but may normalise text.

  Args:
    proto: The SentencePiece model: its serialized bytes or a file path.
    sequence_length: If set, `tokenize` returns dense ids of this length,
      truncated or padded with `PAD_ID`; else a `tf.RaggedTensor`.
    dtype: The dtype of the ids ('int32' by default) or a string dtype for
      the pieces.
    **kwargs: Forwarded to `keras_nlp.tokenizers.SentencePieceTokenizer`
      (e.g. `name`).

  Raises:
    errors.InputError: If `proto` is not a SentencePiece model with the
      special pieces above at ids 0-3, or its file cannot be read.

  Example:

  >>> tokenizer = SubwordTokenizer.train(['SELECT a FROM t ;'], 300)
  >>> ids = tokenizer.tokenize(['SELECT  b  FROM t ;'])
  >>> tokenizer.detokenize(ids).numpy()
  array([b'SELECT  b  FROM t ;'], dtype=object)
  """

  def __init__(
      self,
      proto: Optional[Union[bytes, str]] = None,
      sequence_length: Optional[int] = None,
      dtype: str = 'int32',
      **kwargs,
  ):
    super().__init__(
        proto=proto, sequence_length=sequence_length, dtype=dtype, **kwargs
    )
    self.pad_token_id = PAD_ID
    self.unk_token_id = UNK_ID
    self.start_token_id = START_ID
    self.end_token_id = END_ID

  def set_proto(self, proto):
    path = proto if isinstance(proto, str) and len(proto) <= 2048 else None
    if path is not None and not os.path.isfile(path):
      raise errors.InputError(
          f'SentencePiece model file {path!r} does not exist.'
      )
    try:
      super().set_proto(proto)
      if proto is not None:
        # pylint: disable-next=protected-access
        self._sentence_piece._model_resource = _SharedModelResource(
            self.proto
        )
      pieces = _SPECIAL_PIECES
      if proto is not None and tf.executing_eagerly():
        pieces = tuple(
            p.decode('utf-8') for p in self._sentence_piece.id_to_string(
                tf.range(len(_SPECIAL_PIECES))
            ).numpy()
        )
    except (tf.errors.OpError, OSError, UnicodeDecodeError) as e:
      raise errors.InputError(
          f'Not a readable SentencePiece model: {path or "<bytes>"} ({e}).'
      ) from e
    if pieces != _SPECIAL_PIECES:
      raise errors.InputError(
          f'SentencePiece model {path or "<bytes>"} has pieces {pieces} at '
          f'ids 0-3; this tokenizer needs {_SPECIAL_PIECES} (pad, unk, '
          'start, end). Train it with SubwordTokenizer.train.'
      )

  def tokenize(self, inputs):
    """Maps strings [...] to ids [..., None] (ragged) or [..., L] (dense)."""
    if not isinstance(inputs, (tf.Tensor, tf.RaggedTensor)):
      inputs = tf.convert_to_tensor(inputs, tf.string)
    return super().tokenize(_escape(inputs))

  def detokenize(self, inputs):
    """Maps ids [..., L] (dense or ragged) to strings [...]; drops 0-3."""
    return _unescape(super().detokenize(inputs))

  @classmethod
  def train(
      cls,
      texts: Iterable[str],
      vocabulary_size: int,
      *,
      model_type: str = 'bpe',
      split_digits: bool = True,
      character_coverage: float = 1.0,
      **kwargs,
  ) -> 'SubwordTokenizer':
    """Trains a SentencePiece model on `texts`; deterministic.

    Args:
      texts: The training texts (e.g. the training questions and SQL of
        every client). Their order does not matter.
      vocabulary_size: The number of ids, special and byte pieces included:
        at least 260 plus the number of distinct characters kept (see
        `character_coverage`). It is an upper bound: if the texts have fewer
        pieces, the vocabulary is smaller (see `vocabulary_size()`).
      model_type: 'bpe' (default: whole SQL keywords and schema names become
        pieces) or 'unigram' (T5's choice).
      split_digits: Whether every digit is its own piece, so numbers are
        spelled digit by digit rather than memorised.
      character_coverage: The fraction of characters (by count) that get
        their own piece; the rarest others are spelled in bytes.
      **kwargs: Forwarded to the `SubwordTokenizer` constructor.

    Returns:
      A `SubwordTokenizer`.

    Raises:
      ValueError: If `model_type` is unknown, `vocabulary_size` is too small
        or there are no texts.
      ImportError: If the `sentencepiece` package is not installed.
    """
    if model_type not in MODEL_TYPES:
      raise ValueError(
          f'model_type must be one of {MODEL_TYPES}, got {model_type!r}.'
      )
    sentences = sorted(_escape_text(text) for text in texts)
    if not any(sentences):
      raise ValueError('SubwordTokenizer.train needs non-empty texts.')
    options = dict(
        vocab_size=vocabulary_size,
        model_type=model_type,
        character_coverage=character_coverage,
        split_digits=split_digits,
        normalization_rule_name='identity',
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        byte_fallback=True,
        hard_vocab_limit=False,
        max_sentence_length=_MAX_SENTENCE_BYTES,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=START_ID,
        eos_id=END_ID,
        num_threads=1,
        minloglevel=2,
    )
    return cls(proto=train_sentencepiece_model(sentences, options), **kwargs)

  def save(self, directory: str) -> str:
    """Writes the SentencePiece model to `directory`/vocabulary.spm.

    Args:
      directory: Created if missing (e.g. a run directory).

    Returns:
      The path of the written file.
    """
    self._check_vocabulary()
    os.makedirs(directory, exist_ok=True)
    self.save_assets(directory)
    return os.path.join(directory, PROTO_FILENAME)

  @classmethod
  def load(cls, path: str, **kwargs) -> 'SubwordTokenizer':
    """Reads a tokenizer written by `save`.

    Args:
      path: The directory given to `save`, or the model file itself.
      **kwargs: Forwarded to the constructor (e.g. `sequence_length`).

    Returns:
      A `SubwordTokenizer`.

    Raises:
      errors.InputError: If there is no readable model at `path`.
    """
    if os.path.isdir(path):
      path = os.path.join(path, PROTO_FILENAME)
    return cls(proto=path, **kwargs)


def load_or_train(directory: str, texts_fn: Callable[[], Iterable[str]],
                  vocabulary_size: int, **kwargs) -> SubwordTokenizer:
  """The tokenizer kept in `directory`, or one trained and saved there.

  A run keeps its tokenizer with its checkpoints, so a resumed run (and every
  engine of one experiment) maps text to the same ids.

  Args:
    directory: Holds `PROTO_FILENAME` if a tokenizer was saved before.
    texts_fn: Returns the training texts; called only when training.
    vocabulary_size: As in `SubwordTokenizer.train`.
    **kwargs: Forwarded to `SubwordTokenizer.train`.

  Returns:
    The `SubwordTokenizer`.
  """
  path = os.path.join(directory, PROTO_FILENAME)
  if os.path.exists(path):
    return SubwordTokenizer.load(path)
  tokenizer = SubwordTokenizer.train(texts_fn(), vocabulary_size, **kwargs)
  tokenizer.save(directory)
  return tokenizer


# Run as a script by `train_sentencepiece_model`.
_TRAIN_SCRIPT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '_sentencepiece_train.py'
)


def train_sentencepiece_model(sentences: list[str], options: dict) -> bytes:
  """The model proto `SentencePieceTrainer.train` makes of `sentences`.

  SentencePiece's trainer can crash a process that has loaded TensorFlow
  (google/sentencepiece#813, see `_sentencepiece_train.py`), so it runs in a
  fresh Python process that imports nothing else.

  Args:
    sentences: The training texts, as SentencePiece is to see them.
    options: Keyword arguments of `SentencePieceTrainer.train` (JSON values),
      other than the input and output.

  Returns:
    The serialized model proto.

  Raises:
    ImportError: If the `sentencepiece` package is not installed.
    ValueError: If SentencePiece rejects the texts or options.
    RuntimeError: If the training process fails otherwise.
  """
  if importlib.util.find_spec('sentencepiece') is None:
    raise ImportError(
        'SubwordTokenizer.train needs the sentencepiece package '
        '(pip install -r requirements.txt).'
    )
  with tempfile.TemporaryDirectory(prefix='tff_nlp_spm_') as workdir:
    spec_path = os.path.join(workdir, 'spec.json')
    model_path = os.path.join(workdir, 'model.spm')
    with open(spec_path, 'w', encoding='utf-8') as f:
      json.dump({'sentences': sentences, 'options': options}, f)
    done = subprocess.run(
        [sys.executable, _TRAIN_SCRIPT, spec_path, model_path],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 2:
      raise ValueError(
          f'SentencePiece training failed: {done.stderr.strip()}'
      )
    if done.returncode != 0:
      raise RuntimeError(
          f'SentencePiece training process ({sys.executable} '
          f'{_TRAIN_SCRIPT}) exited with code {done.returncode}: '
          f'{done.stderr.strip()[-2000:]}'
      )
    with open(model_path, 'rb') as f:
      return f.read()
