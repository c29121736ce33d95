"""T5 span corruption: the denoising objective of pre-training, in numpy.

Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer" (JMLR 2020, section 3.1.4): a random 15 % of a
text's tokens (`noise_density`), in spans of mean length 3
(`mean_noise_span_length`), are dropped from the encoder input, each span
replaced by one sentinel; the decoder reproduces the dropped spans, each
after its sentinel:

    text      t1 t2 t3 t4 t5 t6 t7 t8 t9 t10     (noise: t3 t4, t9 t10)
    encoder   t1 t2 <X0> t5 t6 t7 t8 <X1> END
    target    <X0> t3 t4 <X1> t9 t10 END

As in T5 (`random_spans_noise_mask`, without seqio's later `random_roll`):
the number of noise tokens is round(n·density), clipped to [1, n-1]; the
number of spans is round(noise / mean span length), at least 1; the noise
and the non-noise tokens are each cut into that many non-empty spans at
random (uniformly among the ways to cut), and the spans alternate starting
with a non-noise one (so a text always ends with a noise span). Here the
spans are also at most `num_sentinels` and at most the non-noise tokens.

Sentinels: `<extra_id_0>` is the top id of the vocabulary, `<extra_id_i>`
the id `vocabulary_size - 1 - i`, as in T5. `add_sentinels` makes them part
of a `SubwordTokenizer`: it renames its top `num_sentinels` pieces (the last,
rarest BPE merges) to `<extra_id_i>` control pieces, which tokenization
never produces, so a sentinel id never stands for text, and a model
pre-trained with them has the tokenizer's vocabulary size: a text-to-SQL run
starting from it (`init_from`) builds the same embedding.

`corrupt` draws from a `numpy.random.Generator`: same generator state, same
output. `pack` lays examples out as `seq2seq_inputs.pack_inputs` does
(encoder `[...input, END, 0...]`, decoder `[START, ...target, 0...]`,
labels `[...target, END, 0...]`).
"""

import collections
from collections.abc import Sequence

import numpy as np

from tff_nlp import errors
from tff_nlp.models import seq2seq
from tff_nlp.models import subword_tokenizer

NOISE_DENSITY = 0.15
MEAN_NOISE_SPAN_LENGTH = 3.0
NUM_SENTINELS = 100
SENTINEL_PIECE = '<extra_id_{}>'


def sentinel_ids(vocabulary_size: int, num_sentinels: int) -> np.ndarray:
  """int32 [num_sentinels]: the id of `<extra_id_i>` at i, from the top."""
  return np.arange(vocabulary_size - 1, vocabulary_size - 1 - num_sentinels,
                   -1, dtype=np.int32)


def add_sentinels(tokenizer: subword_tokenizer.SubwordTokenizer,
                  num_sentinels: int, *, flag: str = 'vocabulary_size'
                  ) -> subword_tokenizer.SubwordTokenizer:
  """`tokenizer` with its top `num_sentinels` pieces made sentinels.

  Args:
    tokenizer: A tokenizer from `SubwordTokenizer.train`.
    num_sentinels: K; ids V-1 .. V-K become `<extra_id_0>` ..
      `<extra_id_{K-1}>`.
    flag: The setting named when the vocabulary is too small.

  Returns:
    A new `SubwordTokenizer` of the same vocabulary size whose ids V-K ..
    V-1 are control pieces (never produced by `tokenize`, dropped by
    `detokenize`). Unchanged if those pieces are already the sentinels.

  Raises:
    errors.InputError: If the top K pieces are not all learned pieces
      (the vocabulary is too small for K sentinels), naming `flag`.
  """
  # pylint: disable-next=g-import-not-at-top
  from sentencepiece import sentencepiece_model_pb2
  model = sentencepiece_model_pb2.ModelProto()
  model.ParseFromString(tokenizer.proto)
  size = len(model.pieces)
  normal = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
  control = sentencepiece_model_pb2.ModelProto.SentencePiece.CONTROL
  learned = sum(p.type == normal for p in model.pieces)
  ids = sentinel_ids(size, num_sentinels)
  if num_sentinels < 1:
    raise errors.InputError(
        f'num_sentinels must be positive, got {num_sentinels}.')
  wanted = [SENTINEL_PIECE.format(i) for i in range(num_sentinels)]
  if [model.pieces[i].piece for i in ids] == wanted:
    return tokenizer
  if num_sentinels >= size or any(model.pieces[i].type != normal
                                  for i in ids):
    raise errors.InputError(
        f'The tokenizer has {size} ids of which {learned} are learned '
        f'pieces: too few for {num_sentinels} sentinels taken from its top '
        f'ids (and some text pieces). Raise --{flag} (or lower '
        '--num_sentinels).')
  for i, piece_id in enumerate(ids):
    piece = model.pieces[int(piece_id)]
    piece.piece = SENTINEL_PIECE.format(i)
    piece.type = control
    piece.score = 0.0
  return subword_tokenizer.SubwordTokenizer(
      proto=model.SerializeToString())


def _segment(num_items: int, num_segments: int,
             rng: np.random.Generator) -> np.ndarray:
  """Lengths of `num_segments` non-empty parts of `num_items`, at random.

  Every one of the C(num_items - 1, num_segments - 1) cuttings is equally
  likely (T5's `_random_segmentation`).
  """
  cuts = np.sort(rng.choice(num_items - 1, num_segments - 1, replace=False))
  bounds = np.concatenate([[0], cuts + 1, [num_items]])
  return np.diff(bounds)


def noise_mask(length: int, rng: np.random.Generator, *,
               noise_density: float = NOISE_DENSITY,
               mean_noise_span_length: float = MEAN_NOISE_SPAN_LENGTH,
               max_spans: int = NUM_SENTINELS) -> np.ndarray:
  """bool [length]: the noise tokens of a text of `length` >= 2 tokens."""
  if length < 2:
    raise ValueError(f'Span corruption needs 2 or more tokens, got {length}.')
  num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
  num_nonnoise = length - num_noise
  num_spans = max(int(round(num_noise / mean_noise_span_length)), 1)
  num_spans = min(num_spans, num_noise, num_nonnoise, max_spans)
  noise_lengths = _segment(num_noise, num_spans, rng)
  nonnoise_lengths = _segment(num_nonnoise, num_spans, rng)
  interleaved = np.stack([nonnoise_lengths, noise_lengths], axis=1).ravel()
  is_noise = np.tile([False, True], num_spans)
  return np.repeat(is_noise, interleaved)


def apply_mask(token_ids: Sequence[int], mask: np.ndarray,
               sentinels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(encoder input, target) of `token_ids` with noise `mask`, no END.

  Each noise span is one sentinel in the input, and its sentinel followed by
  its tokens in the target; the k-th span has `sentinels[k]`.
  """
  ids = np.asarray(token_ids, np.int32)
  mask = np.asarray(mask, bool)
  starts = mask & ~np.concatenate([[False], mask[:-1]])
  if starts.sum() > len(sentinels):
    raise ValueError(f'{int(starts.sum())} noise spans, but only '
                     f'{len(sentinels)} sentinels.')
  span = np.cumsum(starts) - 1  # The span index of each noise token.
  span_sentinel = np.where(starts, sentinels[np.maximum(span, 0)], 0)
  encoder = np.where(starts, span_sentinel, ids)[~mask | starts]
  target_ids = np.where(mask, ids, 0)
  # Target: for each noise token, its span's sentinel before the first one.
  target = np.stack([span_sentinel, target_ids], axis=1)
  keep = np.stack([starts, mask], axis=1)
  return encoder, target[keep]


def corrupt(token_ids: Sequence[int], rng: np.random.Generator,
            sentinels: np.ndarray, *,
            noise_density: float = NOISE_DENSITY,
            mean_noise_span_length: float = MEAN_NOISE_SPAN_LENGTH
            ) -> tuple[np.ndarray, np.ndarray]:
  """(encoder input, target) of one text (>= 2 tokens): see the docstring."""
  mask = noise_mask(len(token_ids), rng, noise_density=noise_density,
                    mean_noise_span_length=mean_noise_span_length,
                    max_spans=len(sentinels))
  return apply_mask(token_ids, mask, sentinels)


def pack(pairs: Sequence[tuple[np.ndarray, np.ndarray]]
         ) -> tuple[collections.OrderedDict, np.ndarray]:
  """A batch `(x, y)` of (encoder input, target) pairs, as the model takes.

  Encoder `[...input, END]`, decoder `[START, ...target]`, labels
  `[...target, END]`, padded with 0 to the longest of the batch
  (`seq2seq_inputs.input_spec`'s layout).
  """
  source_length = max(len(s) for s, _ in pairs) + 1
  target_length = max(len(t) for _, t in pairs) + 1
  encoder = np.zeros([len(pairs), source_length], np.int32)
  decoder = np.zeros([len(pairs), target_length], np.int32)
  labels = np.zeros([len(pairs), target_length], np.int32)
  for row, (source, target) in enumerate(pairs):
    encoder[row, :len(source)] = source
    encoder[row, len(source)] = seq2seq.END_ID
    decoder[row, 0] = seq2seq.START_ID
    decoder[row, 1:len(target) + 1] = target
    labels[row, :len(target)] = target
    labels[row, len(target)] = seq2seq.END_ID
  x = collections.OrderedDict([(seq2seq.ENCODER_TOKEN_IDS, encoder),
                               (seq2seq.DECODER_TOKEN_IDS, decoder)])
  return x, labels
