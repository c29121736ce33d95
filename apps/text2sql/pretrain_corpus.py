"""The text of span-corruption pre-training (`experiments.pretrain`).

`prepare_corpus` reads the corpora (`DataConfig.corpora`: one text per line,
or `label<TAB>text` lines), holds out a seeded set of texts, trains the
tokenizer on (a seeded subset of) the others and makes its top ids the
sentinels (`span_corruption.add_sentinels`), and cuts the tokenized texts
into examples of at most `DataConfig.text_length()` tokens. The tokenizer
(`tokenizer/`) and the token ids (`corpus.npz`) are kept in the run
directory, so a restart reads them back.

`Batches` gives the corrupted batch of a training step as a function of
(seed, step); `heldout_batches` the held-out examples, corrupted once.
"""

import collections
import dataclasses
import json
import os
import shutil
import time
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.data import files
from tff_nlp.data import text_classification
from tff_nlp.models import seq2seq
from tff_nlp.models import span_corruption
from tff_nlp.models import subword_tokenizer

# As `experiments.text2sql_start.TOKENIZER_DIR`: init_from copies it.
TOKENIZER_DIR = 'tokenizer'
CORPUS_FILE = 'corpus.npz'

# The public text of shared/data that no text-to-SQL client owns: both
# sides of every nmt_de_en_large training split, and the classification
# training texts (trec6 and not trec50, r8 and not reuters8_fedseit: the
# same texts).
_NMT_DOMAINS = ('generic', 'multi30k_captions', 'php_docs', 'ted_iwslt14',
                'ubuntu_l10n', 'wmt_news')
DEFAULT_CORPORA = tuple(
    f'nmt_de_en_large/{domain}/train.{lang}' for domain in _NMT_DOMAINS
    for lang in ('en', 'de')) + tuple(
        f'text_classification/{name}/train.tsv'
        for name in ('r8', 'subj', 'tmn', 'trec6'))


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """The pre-training text and how it becomes examples.

  Attributes:
    corpora: Text files, relative to the data folder (or absolute): one
      text per line, or `label<TAB>text` lines for `.tsv` files (the text
      is taken). Empty lines are skipped.
    max_texts_per_corpus: A seeded subset of each file; 0: every line.
    heldout_texts: Texts held out (seeded, from all files) for the held-out
      denoising loss.
    vocabulary_size: Upper bound of the tokenizer's vocabulary (sentinels
      included).
    tokenizer_texts: Training texts the tokenizer is trained on (a seeded
      subset); 0: all.
    num_sentinels: Sentinel ids, the top of the vocabulary.
    max_source_length: Encoder tokens (the text2sql run's); longer texts
      are cut into pieces that fit.
    max_target_length: Decoder tokens (the text2sql run's).
    noise_density: Fraction of a text's tokens corrupted.
    mean_noise_span_length: Mean length of a corrupted span.
  """

  corpora: tuple[str, ...] = DEFAULT_CORPORA
  max_texts_per_corpus: int = 0
  heldout_texts: int = 1000
  vocabulary_size: int = 8000
  tokenizer_texts: int = 200000
  num_sentinels: int = span_corruption.NUM_SENTINELS
  max_source_length: int = 128
  max_target_length: int = 160
  noise_density: float = span_corruption.NOISE_DENSITY
  mean_noise_span_length: float = span_corruption.MEAN_NOISE_SPAN_LENGTH

  def __post_init__(self):
    if not self.corpora:
      raise errors.InputError('--corpora: name at least one text file.')
    for name in ('heldout_texts', 'vocabulary_size', 'num_sentinels',
                 'max_source_length', 'max_target_length'):
      if getattr(self, name) < 1:
        raise errors.InputError(
            f'--{name} must be positive, got {getattr(self, name)}.')
    if not 0 < self.noise_density < 1:
      raise errors.InputError(
          f'--noise_density must be in (0, 1), got {self.noise_density}.')
    if self.mean_noise_span_length < 1:
      raise errors.InputError('--mean_noise_span_length must be >= 1, got '
                              f'{self.mean_noise_span_length}.')
    if self.text_length() < 2:
      raise errors.InputError(
          f'--max_source_length={self.max_source_length} and '
          f'--max_target_length={self.max_target_length} leave no room for '
          'a corrupted text of 2 tokens.')

  def text_length(self) -> int:
    """L: the most tokens of a text whose corruption fits both lengths.

    Input: L - noise + spans + END <= L + 1 <= max_source_length. Target:
    noise + spans + END, spans <= noise.
    """
    length = self.max_source_length - 1
    while length > 1:
      noise = min(max(round(length * self.noise_density), 1), length - 1)
      if 2 * noise + 1 <= self.max_target_length:
        break
      length -= 1
    return length


def read_corpus(path: str) -> list[str]:
  """The non-empty texts of one corpus file (InputError naming it)."""
  if path.endswith(text_classification.SPLIT_SUFFIX):
    texts = text_classification.read_tsv(path)[1]
  else:
    content = files.read_file_bytes(path, 'a UTF-8 text file, one text per '
                                    'line')
    try:
      texts = content.decode('utf-8').split('\n')
    except UnicodeDecodeError as e:
      raise errors.InputError(
          f'{path}: not valid UTF-8 (byte {e.start}).') from None
  texts = [t.strip() for t in texts if t.strip()]
  if not texts:
    raise errors.InputError(f'{path}: empty corpus; expected one text per '
                            'line.')
  return texts


def _load_texts(data: DataConfig, data_dir: Optional[str], seed: int
                ) -> tuple[list[str], list[dict[str, Any]]]:
  """Every corpus's texts (seeded subsets) and their counts."""
  root = None
  texts, counts = [], []
  for index, name in enumerate(data.corpora):
    if os.path.isabs(name):
      path = name
    else:
      root = root or data_root.find_data_dir(data_dir)
      path = os.path.join(root, name)
    lines = read_corpus(path)
    total = len(lines)
    if 0 < data.max_texts_per_corpus < total:
      keep = np.random.default_rng([seed, 3, index]).choice(
          total, data.max_texts_per_corpus, replace=False)
      lines = [lines[i] for i in np.sort(keep)]
    texts += lines
    counts.append(collections.OrderedDict(
        corpus=name, lines=total, texts=len(lines),
        characters=sum(len(t) for t in lines)))
  return texts, counts


def save_atomically(directory: str, write) -> None:
  """Calls `write(temp_dir)`, then renames temp_dir to `directory`."""
  temp = directory + '.tmp'
  shutil.rmtree(temp, ignore_errors=True)
  os.makedirs(temp)
  write(temp)
  shutil.rmtree(directory, ignore_errors=True)
  os.replace(temp, directory)


def prepare_corpus(output_dir: str, data: DataConfig, data_dir: Optional[str],
                   seed: int):
  """(tokenizer, texts as id arrays, held-out ids, corpus info), cached.

  The tokenizer (trained on a seeded subset of the non-held-out texts, then
  `span_corruption.add_sentinels`) is kept in `tokenizer/`, the token ids
  in `corpus.npz`; a restart reads both back. Texts of fewer than 2
  tokens are dropped, longer ones than `data.text_length()` cut into pieces.
  """
  tokenizer_dir = os.path.join(output_dir, TOKENIZER_DIR)
  corpus_path = os.path.join(output_dir, CORPUS_FILE)
  if os.path.exists(corpus_path) and os.path.isdir(tokenizer_dir):
    tokenizer = subword_tokenizer.SubwordTokenizer.load(tokenizer_dir)
    with np.load(corpus_path) as cached:
      arrays = {k: cached[k] for k in cached.files}
    info = json.loads(str(arrays['info']))
  else:
    start = time.perf_counter()
    texts, counts = _load_texts(data, data_dir, seed)
    if len(texts) <= data.heldout_texts:
      raise errors.InputError(
          f'--corpora hold {len(texts)} texts, not more than '
          f'--heldout_texts={data.heldout_texts}.')
    order = np.random.default_rng([seed, 4]).permutation(len(texts))
    heldout = np.sort(order[:data.heldout_texts])
    train = np.sort(order[data.heldout_texts:])
    if not os.path.isdir(tokenizer_dir):
      sample = train
      if 0 < data.tokenizer_texts < len(train):
        sample = np.sort(np.random.default_rng([seed, 5]).choice(
            train, data.tokenizer_texts, replace=False))
      logging.info('pretrain: training the tokenizer on %d texts',
                   len(sample))
      try:
        tokenizer = subword_tokenizer.SubwordTokenizer.train(
            [texts[i] for i in sample], data.vocabulary_size)
      except ValueError as e:  # SentencePiece refuses the vocabulary size.
        raise errors.InputError(
            f'--vocabulary_size={data.vocabulary_size}: no tokenizer of this '
            f'size can be trained on --corpora ({e}).') from e
      tokenizer = span_corruption.add_sentinels(
          tokenizer, data.num_sentinels)
      save_atomically(tokenizer_dir, tokenizer.save)
    tokenizer = span_corruption.add_sentinels(
        subword_tokenizer.SubwordTokenizer.load(tokenizer_dir),
        data.num_sentinels)
    arrays = {}
    for name, part in (('train', train), ('heldout', heldout)):
      ids, offsets = _tokenize([texts[i] for i in part], tokenizer,
                               data.text_length())
      arrays[f'{name}_ids'], arrays[f'{name}_offsets'] = ids, offsets
    info = collections.OrderedDict(
        corpora=counts, texts=len(texts), heldout_texts=len(heldout),
        train_examples=len(arrays['train_offsets']) - 1,
        heldout_examples=len(arrays['heldout_offsets']) - 1,
        train_tokens=len(arrays['train_ids']),
        heldout_tokens=len(arrays['heldout_ids']),
        vocabulary_size=tokenizer.vocabulary_size(),
        text_length=data.text_length(),
        preparation_seconds=time.perf_counter() - start)
    arrays['info'] = np.array(json.dumps(info))
    temp = corpus_path + '.tmp.npz'
    np.savez(temp, **arrays)
    os.replace(temp, corpus_path)

  def split(name):
    ids, offsets = arrays[f'{name}_ids'], arrays[f'{name}_offsets']
    return [ids[a:b] for a, b in zip(offsets[:-1], offsets[1:])]

  if not split('train'):
    raise errors.InputError('--corpora: no training text of 2 or more tokens.')
  return tokenizer, split('train'), split('heldout'), info


def _tokenize(texts, tokenizer, length: int, chunk: int = 4096):
  """Flat int32 ids and offsets of the pieces (2..length tokens) of texts."""
  pieces = []
  for start in range(0, len(texts), chunk):
    ragged = tokenizer.tokenize(tf.constant(texts[start:start + chunk]))
    for row in ragged.to_list():
      for begin in range(0, len(row), length):
        piece = row[begin:begin + length]
        if len(piece) >= 2:
          pieces.append(piece)
  offsets = np.cumsum([0] + [len(p) for p in pieces]).astype(np.int64)
  ids = (np.concatenate([np.asarray(p, np.int32) for p in pieces])
         if pieces else np.zeros([0], np.int32))
  return ids, offsets


class Batches:
  """The batch of step s: a function of (seed, s) only.

  Each epoch is a seeded permutation of the examples (the last
  `len % batch_size` left out), cut into windows of `_WINDOW` batches whose
  examples are sorted by length before they are cut into batches, and the
  epoch's batches are then shuffled: a batch holds texts of similar
  lengths, so little of it is padding (random batches of the cpu preset's
  texts are 5x their tokens once padded), and every example is seen once
  an epoch.
  """

  _WINDOW = 50

  def __init__(self, examples, data: DataConfig, batch_size: int, seed: int,
               vocabulary_size: int):
    self._examples = examples
    self._lengths = np.array([len(e) for e in examples])
    self._data, self._batch_size, self._seed = data, batch_size, seed
    self.sentinels = span_corruption.sentinel_ids(vocabulary_size,
                                                  data.num_sentinels)
    self.batches_per_epoch = max(len(examples) // batch_size, 1)
    self._epoch, self._batches = None, None

  def _epoch_batches(self, epoch: int) -> np.ndarray:
    """int [batches_per_epoch, batch_size]: the epoch's batches, in order."""
    size = self.batches_per_epoch * self._batch_size
    order = np.resize(np.random.default_rng([self._seed, 1, epoch])
                      .permutation(len(self._examples)), size)
    window = self._WINDOW * self._batch_size
    for start in range(0, size, window):
      part = order[start:start + window]
      order[start:start + window] = part[np.argsort(self._lengths[part],
                                                    kind='stable')]
    batches = order.reshape(self.batches_per_epoch, self._batch_size)
    return batches[np.random.default_rng([self._seed, 7, epoch]).permutation(
        self.batches_per_epoch)]

  def corrupt(self, examples, rng):
    return span_corruption.pack([span_corruption.corrupt(
        e, rng, self.sentinels, noise_density=self._data.noise_density,
        mean_noise_span_length=self._data.mean_noise_span_length)
                                 for e in examples])

  def __call__(self, step: int):
    epoch, index = divmod(step, self.batches_per_epoch)
    if epoch != self._epoch:
      self._epoch, self._batches = epoch, self._epoch_batches(epoch)
    examples = [self._examples[i] for i in self._batches[index]]
    return self.corrupt(examples, np.random.default_rng([self._seed, 2, step]))


def heldout_batches(examples, batches: Batches, seed: int, size: int = 128):
  """The held-out examples, corrupted once (seeded), by length in batches."""
  rng = np.random.default_rng([seed, 6])
  pairs = [batches.corrupt([e], rng) for e in examples]
  pairs = sorted(pairs, key=lambda p: p[0][seq2seq.ENCODER_TOKEN_IDS].shape)
  return [_concatenate(pairs[i:i + size]) for i in range(0, len(pairs), size)]


def _concatenate(batches):
  """One batch of `span_corruption.pack` batches, padded to the longest."""
  def stack(arrays):
    width = max(a.shape[1] for a in arrays)
    return np.concatenate([np.pad(a, [[0, 0], [0, width - a.shape[1]]])
                           for a in arrays])
  x = collections.OrderedDict(
      (key, stack([b[0][key] for b in batches])) for key in batches[0][0])
  return x, stack([b[1] for b in batches])
