"""Skip-gram word vectors pre-trained on the public text of `shared/data`.

Word2vec's skip-gram with negative sampling (Mikolov et al., "Distributed
Representations of Words and Phrases and their Compositionality", NeurIPS
2013), so that a model that wants frozen pre-trained word vectors (FedSeIT's
text CNN, `apps.fcl.experiment`) can have them without a download:

*   Corpus (`public_english_text`): the English side of every training split
    of `nmt_de_en_large/` (the five domains and `generic/`) and the texts of
    every `text_classification/*/train.tsv`; no test or dev split.
*   Words: `vocabulary.tokenize` (lowercased, split on whitespace), the
    `vocabulary_size` most frequent; the others are dropped from the text.
*   Pairs: frequent words are subsampled (kept with probability
    min(1, sqrt(t / f) + t / f) for a word of frequency f), then each kept
    word is a center whose context is the words up to b positions away in
    its sentence, b drawn uniformly from 1..window per center (word2vec's
    dynamic window).
*   Loss: -log σ(u_c · v_o) - Σ_k log σ(-u_c · v_k) over `negatives` words k
    drawn from the unigram distribution to the power 3/4; SGD whose rate
    decays linearly to 0 over the run (word2vec's schedule). The vectors are
    the center (input) embeddings u.

`write_vectors` writes them in GloVe's text format, so that
`tff_nlp.data.word_vectors.read_word_vectors` reads them like any other
(`apps.fcl.experiment` caches them per configuration). Everything is
seeded: the same configuration gives the same vectors.
"""

import collections
import dataclasses
import os
import time
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_nlp.data import data_root
from tff_nlp.data import nmt
from tff_nlp.data import text_classification
from tff_nlp.data import vocabulary as vocabulary_lib

NOISE_TABLE_SIZE = 10**7


@dataclasses.dataclass(frozen=True)
class SkipGramConfig:
  """Skip-gram with negative sampling.

  Attributes:
    dim: Vector size D.
    vocabulary_size: The most frequent words kept.
    window: Largest distance of a context word.
    negatives: Negative words per pair.
    subsample: t of the subsampling of frequent words.
    epochs: Passes over the pairs.
    batch_size: Pairs per step.
    learning_rate: SGD's initial rate (word2vec: 0.025), decaying linearly
      to 0.
    seed: Seed of the subsampling, windows, pair order, negatives and
      initial vectors.
  """

  dim: int = 50
  vocabulary_size: int = 50000
  window: int = 5
  negatives: int = 5
  subsample: float = 1e-4
  epochs: int = 1
  batch_size: int = 1024
  learning_rate: float = 0.025
  seed: int = 0

  def __post_init__(self):
    for name in ('dim', 'vocabulary_size', 'window', 'negatives', 'epochs',
                 'batch_size'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)}.')
    if not self.subsample > 0 or not self.learning_rate > 0:
      raise ValueError('subsample and learning_rate must be positive, got '
                       f'{self.subsample} and {self.learning_rate}.')


def public_english_text(data_dir: Optional[str] = None) -> list[str]:
  """The corpus (module docstring): sentences and documents, in a fixed
  order (NMT domains as `nmt.list_domains` orders them, then datasets by
  name)."""
  texts = []
  large = os.path.join(data_root.find_data_dir(data_dir), nmt.LARGE_SUBDIR)
  for domain in nmt.list_domains(large):
    corpus = nmt.read_parallel(
        *(os.path.join(large, domain, f'train.{lang}')
          for lang in (nmt.SOURCE_LANG, nmt.TARGET_LANG)))
    texts += corpus.targets
  for name in text_classification.list_datasets(data_dir):
    texts += text_classification.load_dataset(name, data_dir).train.texts
  return texts


def skipgram_pairs(sentences: list[np.ndarray], counts: np.ndarray,
                   config: SkipGramConfig, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
  """(centers, contexts) of the subsampled sentences (module docstring).

  Args:
    sentences: Word ids per sentence (dropped words removed).
    counts: Corpus count of every word id.
    config: The window and subsampling.
    rng: The random draws, in this order: the subsampling of all words,
      then the window of every kept word.

  Returns:
    Two int32 arrays of equal length, in sentence order.
  """
  if not sentences:
    return np.zeros([0], np.int32), np.zeros([0], np.int32)
  frequency = counts / max(counts.sum(), 1)
  ratio = config.subsample / np.maximum(frequency, 1e-12)
  keep_probability = np.minimum(1.0, np.sqrt(ratio) + ratio)
  words = np.concatenate(sentences)
  sentence_of = np.repeat(np.arange(len(sentences)),
                          [len(s) for s in sentences])
  kept = rng.uniform(size=len(words)) < keep_probability[words]
  words, sentence_of = words[kept], sentence_of[kept]
  reach = rng.integers(1, config.window + 1, size=len(words))
  centers, contexts = [], []
  for distance in range(1, config.window + 1):
    i = np.arange(len(words) - distance)
    j = i + distance
    same = sentence_of[i] == sentence_of[j]
    # i sees j, and j sees i, each within its own window.
    forward = same & (reach[i] >= distance)
    backward = same & (reach[j] >= distance)
    centers += [words[i[forward]], words[j[backward]]]
    contexts += [words[j[forward]], words[i[backward]]]
  return (np.concatenate(centers).astype(np.int32),
          np.concatenate(contexts).astype(np.int32))


def train_skipgram(texts: list[str], config: SkipGramConfig
                   ) -> tuple[vocabulary_lib.Vocabulary, np.ndarray,
                              dict]:
  """Trains skip-gram vectors on `texts`.

  Returns:
    `(vocabulary, vectors, stats)`: the words (ids 2.. of `vocabulary`),
    float32 [len(vocabulary.words), D] in their order, and the corpus and
    training statistics (tokens, pairs, steps, the mean loss of the first
    and last tenth of the steps, seconds).
  """
  start = time.perf_counter()
  vocabulary = vocabulary_lib.Vocabulary.build(
      texts, config.vocabulary_size + vocabulary_lib.NUM_RESERVED_IDS)
  offset = vocabulary_lib.NUM_RESERVED_IDS
  num_words = len(vocabulary.words)
  sentences, tokens = [], 0
  for text in texts:
    ids = np.array([vocabulary.token_id(w)
                    for w in vocabulary_lib.tokenize(text)], np.int64)
    tokens += len(ids)
    ids = ids[ids >= offset] - offset
    if len(ids) > 1:
      sentences.append(ids)
  counts = np.bincount(np.concatenate(sentences), minlength=num_words)
  rng = np.random.default_rng(config.seed)
  centers, contexts = skipgram_pairs(sentences, counts, config, rng)
  order = rng.permutation(len(centers))
  centers, contexts = centers[order], contexts[order]
  # Negatives are uniform draws from a table in which each word fills a
  # share of the rows proportional to count^0.75 (word2vec's unigram table).
  noise = counts.astype(np.float64) ** 0.75
  noise_table = tf.constant(np.repeat(
      np.arange(num_words), np.round(
          noise / noise.sum() * NOISE_TABLE_SIZE).astype(np.int64)), tf.int32)

  tf.random.set_seed(config.seed)
  center_vectors = tf.Variable(
      rng.uniform(-0.5 / config.dim, 0.5 / config.dim,
                  [num_words, config.dim]).astype(np.float32))
  context_vectors = tf.Variable(tf.zeros([num_words, config.dim]))
  steps_per_epoch = -(-len(centers) // config.batch_size)
  total_steps = steps_per_epoch * config.epochs
  step_counter = tf.Variable(0.0)
  optimizer = tf.keras.optimizers.SGD(
      learning_rate=lambda: config.learning_rate * tf.maximum(
          1e-4, 1.0 - step_counter / total_steps))

  @tf.function
  def train_step(center, context):
    negative = tf.gather(noise_table, tf.random.stateless_uniform(
        [tf.shape(center)[0], config.negatives],
        seed=tf.cast(tf.stack([float(config.seed), step_counter]), tf.int64),
        maxval=tf.shape(noise_table)[0], dtype=tf.int32))
    with tf.GradientTape() as tape:
      u = tf.gather(center_vectors, center)
      positive = tf.reduce_sum(u * tf.gather(context_vectors, context), -1)
      negatives = tf.einsum('bd,bkd->bk', u,
                            tf.gather(context_vectors, negative))
      # Summed, not averaged, over the batch: each pair moves its words as
      # in word2vec's per-pair SGD.
      losses = tf.nn.softplus(-positive) + tf.reduce_sum(
          tf.nn.softplus(negatives), -1)
      loss = tf.reduce_sum(losses)
    optimizer.apply_gradients(zip(
        tape.gradient(loss, [center_vectors, context_vectors]),
        [center_vectors, context_vectors]))
    step_counter.assign_add(1.0)
    return tf.reduce_mean(losses)

  losses = []
  for _ in range(config.epochs):
    for begin in range(0, len(centers), config.batch_size):
      losses.append(float(train_step(
          centers[begin:begin + config.batch_size],
          contexts[begin:begin + config.batch_size])))
  tenth = max(1, len(losses) // 10)
  stats = collections.OrderedDict(
      texts=len(texts), tokens=tokens, words=num_words, pairs=len(centers),
      steps=len(losses), loss_first_tenth=float(np.mean(losses[:tenth])),
      loss_last_tenth=float(np.mean(losses[-tenth:])),
      seconds=time.perf_counter() - start)
  return vocabulary, center_vectors.numpy(), stats


def write_vectors(path: str, words, vectors: np.ndarray) -> None:
  """Writes `words` and their `vectors` in GloVe's text format, atomically
  (a partial file never has the final name)."""
  partial = path + '.partial'
  with open(partial, 'w', encoding='utf-8') as f:
    for word, row in zip(words, vectors):
      f.write(word + ' ' + ' '.join(f'{v:.6g}' for v in row) + '\n')
  os.replace(partial, path)
