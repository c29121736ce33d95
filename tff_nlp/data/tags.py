"""Multi-label tag prediction data in the StackOverflow tag format.

An example is three strings (TFF's StackOverflow dataset): `tokens` (the
body), `title`, and `tags` joined with '|'. A model sees the bag of words of
title and tokens and predicts the set of tags.

Real data here comes from the text-classification datasets of `shared/data`
(`examples_from_labels`): a document's label becomes its tags, and a
hierarchical label 'A:b' (TREC-50's 'DESC:manner') becomes two tags, the coarse
'A' and the fine 'A:b', so TREC-50 is a true multi-label task.

Vocabularies (`TagVocabularies`) are built from training examples only: the
most frequent words and tags, plus hashed out-of-vocabulary (OOV) buckets, so
an unseen word or tag still has a row or column (as in TFF's tutorial).
Encoded examples become client datasets of batches
`<tokens=<indices=int64[?,2],values=int32[?],dense_shape=int64[2]>,
tags=float32[?,T]>`: the bag of words as the parts of a `tf.SparseTensor`
(word counts per example) and multi-hot tags.
"""

import collections
from collections.abc import Callable, Sequence
import dataclasses
import functools
from typing import Any, Optional
import zlib

import numpy as np
import tensorflow as tf

from tff_nlp.data import vocabulary as vocabulary_lib

TAG_SEPARATOR = '|'
LABEL_LEVEL_SEPARATOR = ':'


@dataclasses.dataclass(frozen=True)
class TagExample:
  """One example in the StackOverflow tag format."""

  tokens: str
  title: str
  tags: str


def label_to_tags(label: str) -> list[str]:
  """'A:b:c' -> ['A', 'A:b', 'A:b:c']; a flat label is one tag."""
  parts = label.split(LABEL_LEVEL_SEPARATOR)
  return [LABEL_LEVEL_SEPARATOR.join(parts[:i + 1]) for i in range(len(parts))]


def examples_from_labels(texts: Sequence[str],
                         labels: Sequence[str]) -> list[TagExample]:
  """Labeled texts as tag examples (empty title, tags from the label)."""
  if len(texts) != len(labels):
    raise ValueError(f'{len(texts)} texts but {len(labels)} labels.')
  return [TagExample(tokens=text, title='',
                     tags=TAG_SEPARATOR.join(label_to_tags(label)))
          for text, label in zip(texts, labels)]


def words_of(example: TagExample) -> list[str]:
  """The words of title and tokens (lowercased, whitespace-split)."""
  return (vocabulary_lib.tokenize(example.title)
          + vocabulary_lib.tokenize(example.tokens))


def tags_of(example: TagExample) -> list[str]:
  """The distinct non-empty tags of an example, in order."""
  return list(dict.fromkeys(
      t for t in example.tags.split(TAG_SEPARATOR) if t))


def _bucket(text: str, num_buckets: int) -> int:
  # crc32 rather than hash(): Python's string hash changes per process.
  return zlib.crc32(text.encode('utf-8')) % num_buckets


def _most_frequent(counts: collections.Counter, size: int) -> tuple[str, ...]:
  ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
  return tuple(w for w, _ in ranked[:size])


@dataclasses.dataclass(frozen=True)
class TagVocabularies:
  """Word rows and tag columns of the tag model, with OOV buckets.

  Word id i < len(words) is `words[i]`; an unknown word gets
  `len(words) + crc32(word) % num_oov_word_buckets`. Tags likewise.

  Attributes:
    words: In-vocabulary words, most frequent first.
    tags: In-vocabulary tags, most frequent first.
    num_oov_word_buckets: Extra rows shared by unknown words (>= 1).
    num_oov_tag_buckets: Extra columns shared by unknown tags (>= 1).
  """

  words: tuple[str, ...]
  tags: tuple[str, ...]
  num_oov_word_buckets: int = 1
  num_oov_tag_buckets: int = 1

  _word_ids: dict[str, int] = dataclasses.field(
      init=False, repr=False, compare=False)
  _tag_ids: dict[str, int] = dataclasses.field(
      init=False, repr=False, compare=False)

  def __post_init__(self):
    for name in ('num_oov_word_buckets', 'num_oov_tag_buckets'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be >= 1, got {getattr(self, name)}.')
    for name, items in (('_word_ids', self.words), ('_tag_ids', self.tags)):
      if len(set(items)) != len(items):
        raise ValueError(f'{name[1:-4]}s must be distinct.')
      # A frozen dataclass sets derived fields with object.__setattr__.
      object.__setattr__(self, name, {w: i for i, w in enumerate(items)})

  @classmethod
  def build(cls, examples: Sequence[TagExample], *, max_words: int,
            max_tags: int, num_oov_word_buckets: int = 1,
            num_oov_tag_buckets: int = 1) -> 'TagVocabularies':
    """The most frequent words and tags of (training) `examples`.

    Words are ranked by occurrences, tags by examples; ties alphabetically.

    Args:
      examples: The training examples.
      max_words: At most this many in-vocabulary words (>= 1).
      max_tags: At most this many in-vocabulary tags (>= 1).
      num_oov_word_buckets: OOV word rows.
      num_oov_tag_buckets: OOV tag columns.

    Returns:
      A `TagVocabularies`.
    """
    for name, value in (('max_words', max_words), ('max_tags', max_tags)):
      if value < 1:
        raise ValueError(f'{name} must be >= 1, got {value}.')
    words, tags = collections.Counter(), collections.Counter()
    for example in examples:
      words.update(words_of(example))
      tags.update(tags_of(example))
    return cls(words=_most_frequent(words, max_words),
               tags=_most_frequent(tags, max_tags),
               num_oov_word_buckets=num_oov_word_buckets,
               num_oov_tag_buckets=num_oov_tag_buckets)

  @property
  def num_word_rows(self) -> int:
    """V: rows of the model (words plus OOV buckets)."""
    return len(self.words) + self.num_oov_word_buckets

  @property
  def num_tag_columns(self) -> int:
    """T: columns of the model (tags plus OOV buckets)."""
    return len(self.tags) + self.num_oov_tag_buckets

  def word_id(self, word: str) -> int:
    return self._word_ids.get(word, len(self.words) + _bucket(
        word, self.num_oov_word_buckets))

  def tag_id(self, tag: str) -> int:
    return self._tag_ids.get(tag, len(self.tags) + _bucket(
        tag, self.num_oov_tag_buckets))


@dataclasses.dataclass(frozen=True)
class EncodedTags:
  """Examples as distinct word ids with counts and multi-hot tags.

  Attributes:
    word_ids: Per example, int64 distinct word ids, ascending.
    word_counts: Per example, int32 occurrences of each of `word_ids`.
    tags: float32 [n, T] multi-hot tags.
    oov_words: Word occurrences that fell into OOV buckets.
    oov_tags: Tags that fell into OOV buckets.
  """

  word_ids: tuple[np.ndarray, ...]
  word_counts: tuple[np.ndarray, ...]
  tags: np.ndarray
  oov_words: int
  oov_tags: int

  def __len__(self) -> int:
    return len(self.word_ids)

  def subset(self, indices: Sequence[int]) -> 'EncodedTags':
    """The examples at `indices` (OOV counts are not recomputed: -1)."""
    return EncodedTags(
        word_ids=tuple(self.word_ids[i] for i in indices),
        word_counts=tuple(self.word_counts[i] for i in indices),
        tags=self.tags[np.asarray(indices, dtype=np.int64)],
        oov_words=-1, oov_tags=-1)


def encode(examples: Sequence[TagExample],
           vocabularies: TagVocabularies) -> EncodedTags:
  """Encodes examples with `vocabularies`."""
  word_ids, word_counts = [], []
  tags = np.zeros([len(examples), vocabularies.num_tag_columns], np.float32)
  oov_words = oov_tags = 0
  for row, example in enumerate(examples):
    counts = collections.Counter(
        vocabularies.word_id(w) for w in words_of(example))
    oov_words += sum(c for i, c in counts.items()
                     if i >= len(vocabularies.words))
    ids = np.array(sorted(counts), np.int64)
    word_ids.append(ids)
    word_counts.append(np.array([counts[i] for i in ids], np.int32))
    for tag in tags_of(example):
      column = vocabularies.tag_id(tag)
      oov_tags += column >= len(vocabularies.tags)
      tags[row, column] = 1.0
  return EncodedTags(word_ids=tuple(word_ids), word_counts=tuple(word_counts),
                     tags=tags, oov_words=oov_words, oov_tags=int(oov_tags))


def element_type_spec(num_tags: int) -> collections.OrderedDict:
  """The `tf.TypeSpec`s of one batch (the client dataset's element spec)."""
  return collections.OrderedDict(
      tokens=collections.OrderedDict(
          indices=tf.TensorSpec([None, 2], tf.int64),
          values=tf.TensorSpec([None], tf.int32),
          dense_shape=tf.TensorSpec([2], tf.int64)),
      tags=tf.TensorSpec([None, num_tags], tf.float32))


def batches_from_flat(word_ids: tf.Tensor, word_counts: tf.Tensor,
                      row_splits: tf.Tensor, tags: tf.Tensor, *,
                      num_words: int, batch_size: int) -> tf.data.Dataset:
  """Batches of examples given as flat arrays (traceable; no Python loop).

  Args:
    word_ids: int64 [total words], every example's distinct word ids in turn.
    word_counts: int32 [total words], their counts.
    row_splits: int64 [n + 1], example i's words are
      `word_ids[row_splits[i]:row_splits[i + 1]]`.
    tags: float32 [n, T] multi-hot tags.
    num_words: V, the bag's dense width.
    batch_size: Examples per batch (the last batch may be smaller).

  Returns:
    A dataset whose element spec is `element_type_spec(T)`.
  """
  # Batches sliced from the flat arrays; not ragged tensors, whose
  # `from_tensor_slices` TF's graph type inference rejects with a long
  # "Type inference failed" warning.
  num_examples = tf.shape(tags, out_type=tf.int64)[0]
  # Every entry's row within its batch, computed once for the dataset: a
  # `tf.repeat` per batch was most of the cost of a pass over a client's
  # data (TREC-6, 10 clients, batches of 16: 0.49-0.73 s a pass against
  # 0.29-0.45 s, measured in-process; the elements are the same).
  rows = tf.repeat(tf.range(num_examples) % batch_size,
                   row_splits[1:] - row_splits[:-1])

  def to_bag(start):
    end = tf.minimum(start + batch_size, num_examples)
    first, last = row_splits[start], row_splits[end]
    return collections.OrderedDict(
        tokens=collections.OrderedDict(
            indices=tf.stack([rows[first:last], word_ids[first:last]],
                             axis=1),
            values=word_counts[first:last],
            dense_shape=tf.stack([end - start,
                                  tf.constant(num_words, tf.int64)])),
        tags=tags[start:end])

  return tf.data.Dataset.range(0, num_examples, batch_size).map(to_bag)


class BatchBuilder:
  """Builds client datasets of batches through one traced `tf.function`.

  Why traced: built eagerly, every `tf.data.Dataset.map` (also the one inside
  `ragged_batch`) leaves about 0.4 MB in the Python process that garbage
  collection never returns (TensorFlow issue 43969). Building each sampled
  client's dataset anew every round then grew a run by ~9 MB a round at 20
  clients per round (docs/results/scaling.md). Traced once, a call only
  instantiates the traced pipeline: nothing is left behind, and a small
  client's dataset takes ~0.5 ms instead of ~30 ms.

  Built from tensors only (no Python generator), so TFF can serialize the
  datasets to its worker.
  """

  def __init__(self, *, num_words: int, num_tags: int, batch_size: int,
               transform: Optional[
                   Callable[[tf.data.Dataset], tf.data.Dataset]] = None):
    """Traces the pipeline.

    Args:
      num_words: V, the bag's dense width (the model's rows).
      num_tags: T, the multi-hot width.
      batch_size: Examples per batch (the last batch may be smaller).
      transform: Applied to the dataset inside the traced function (e.g.
        `tag_regression.as_keras_batches`), so it adds no eager `map`.
    """
    self.num_words = num_words
    self.num_tags = num_tags
    self.batch_size = batch_size
    self.transform = transform

    @tf.function(input_signature=(
        tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([None, num_tags], tf.float32)))
    def build(word_ids, word_counts, row_splits, tags):
      dataset = batches_from_flat(word_ids, word_counts, row_splits, tags,
                                  num_words=num_words, batch_size=batch_size)
      return dataset if transform is None else transform(dataset)

    self._build = build

  def __call__(self, encoded: 'EncodedTags',
               shuffle_seed: Any = None) -> tf.data.Dataset:
    """The batches of `encoded`, in a seeded order if `shuffle_seed` is set.

    Args:
      encoded: The examples; their tag width must be `num_tags`.
      shuffle_seed: If set (an int or a sequence of ints, e.g. `(seed, round,
        client)`, as `np.random.default_rng` takes), the examples are
        shuffled with this seed; TFF rebuilds a dataset from its graph every
        round, so a per-round seed, not a `tf.data` shuffle, gives a new order
        per round.

    Returns:
      A `tf.data.Dataset` whose element spec is
      `element_type_spec(num_tags)` (before `transform`).
    """
    if encoded.tags.shape[1] != self.num_tags:
      raise ValueError(
          f'The examples have {encoded.tags.shape[1]} tag columns; this '
          f'builder was made for {self.num_tags}.')
    order = np.arange(len(encoded))
    if shuffle_seed is not None:
      order = np.random.default_rng(shuffle_seed).permutation(len(encoded))
    ids = [encoded.word_ids[i] for i in order]
    return self._build(
        np.concatenate(ids or [np.zeros([0], np.int64)]).astype(np.int64),
        np.concatenate([encoded.word_counts[i] for i in order]
                       or [np.zeros([0], np.int32)]).astype(np.int32),
        np.cumsum([0] + [len(i) for i in ids], dtype=np.int64),
        encoded.tags[order].reshape(-1, self.num_tags).astype(np.float32))


@functools.lru_cache(maxsize=16)
def _batch_builder(num_words: int, num_tags: int,
                   batch_size: int) -> BatchBuilder:
  return BatchBuilder(num_words=num_words, num_tags=num_tags,
                      batch_size=batch_size)


def to_dataset(encoded: EncodedTags, *, num_words: int, batch_size: int,
               shuffle_seed: Any = None) -> tf.data.Dataset:
  """A dataset of batches of `encoded` (see the module docstring).

  Args:
    encoded: The examples.
    num_words: V, the bag's dense width (the model's rows).
    batch_size: Examples per batch (the last batch may be smaller).
    shuffle_seed: See `BatchBuilder.__call__`.

  Returns:
    A `tf.data.Dataset` whose element spec is `element_type_spec(T)`.
  """
  builder = _batch_builder(num_words, encoded.tags.shape[1], batch_size)
  return builder(encoded, shuffle_seed)


def to_padded_dataset(encoded: EncodedTags, *, num_words: int,
                      batch_size: int,
                      keras_pairs: bool = False) -> tf.data.Dataset:
  """The batches of `to_dataset`, stored as tensors: no function per batch.

  A dataset built with a `map` (as `to_dataset`'s) makes TFF's worker
  instantiate the map's function every time it iterates the dataset, once
  per client and round: at V = 10^4, ten TREC-6 clients cost 0.18-0.20 s a
  pass that way, stored slices 0.04-0.05 s (`bin/select_scaling.py`'s data,
  measured in the worker). Here every batch is computed in numpy and sliced
  from stacked arrays (`from_tensor_slices`), the last, shorter batch from
  a second slice.

  Each batch's entries are padded to the largest batch's count with entries
  of count 0 at (example 0, word 0); `dense_shape` and `tags` are exact.
  A count of 0 adds nothing to `bag @ W` or to its gradient, so the dense
  model (`tag_regression`) and `keys_in_data` sparse rounds (whose rows
  trained ignore zero counts) train exactly as on `to_dataset`'s batches.
  Steps that count entries (`sparse.client_keys`, `sparse.to_local_bag`)
  must run on `to_dataset`'s batches.

  Args:
    encoded: The examples, in the order to batch them.
    num_words: V, the bag's dense width.
    batch_size: Examples per batch (the last batch may be smaller).
    keras_pairs: Whether the elements are `(tokens, tags)` pairs, as
      `tag_regression.as_keras_batches` makes them.

  Returns:
    A `tf.data.Dataset` of `element_type_spec(T)`'s structure (or its
    pairs), with padded entries.
  """
  num_tags = encoded.tags.shape[1]
  num_examples = len(encoded)
  # Examples [0, num_full) fill whole batches; the rest is the short one.
  num_full = num_examples - num_examples % batch_size
  lengths = np.array([len(i) for i in encoded.word_ids], np.int64)
  splits = np.concatenate([[0], np.cumsum(lengths)])
  word_ids = np.concatenate(
      [np.zeros([0], np.int64)] + list(encoded.word_ids)).astype(np.int64)
  word_counts = np.concatenate(
      [np.zeros([0], np.int32)] + list(encoded.word_counts)).astype(np.int32)
  rows = np.repeat(np.arange(num_examples) % batch_size, lengths)
  # Every batch's entries are padded to the most of any batch.
  bounds = np.minimum(np.arange(0, num_examples + batch_size, batch_size),
                      num_examples)
  width = int(max(np.diff(splits[bounds]), default=0))

  def sliced(first, last):
    """Examples [first, last) in batches of one size, as one dataset."""
    size = min(batch_size, last - first) or batch_size
    batch_starts = np.arange(first, last, size)
    indices = np.zeros([len(batch_starts), width, 2], np.int64)
    values = np.zeros([len(batch_starts), width], np.int32)
    for b, start in enumerate(batch_starts):
      lo, hi = splits[start], splits[start + size]
      indices[b, :hi - lo, 0] = rows[lo:hi]
      indices[b, :hi - lo, 1] = word_ids[lo:hi]
      values[b, :hi - lo] = word_counts[lo:hi]
    tokens = collections.OrderedDict(
        indices=indices, values=values,
        dense_shape=np.tile(np.array([size, num_words], np.int64),
                            [len(batch_starts), 1]))
    tags = encoded.tags[first:last].astype(np.float32).reshape(
        len(batch_starts), size, num_tags)
    return tf.data.Dataset.from_tensor_slices(
        (tokens, tags) if keras_pairs
        else collections.OrderedDict(tokens=tokens, tags=tags))

  parts = [sliced(first, last)
           for first, last in ((0, num_full), (num_full, num_examples))
           if last > first]
  if not parts:  # No example: no batch, of the same structure.
    return sliced(0, 0)
  return parts[0] if len(parts) == 1 else parts[0].concatenate(parts[1])
