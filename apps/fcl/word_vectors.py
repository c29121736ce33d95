"""Pre-trained word vectors of the FCL experiment: read, or trained once.

`TrainingConfig.word_vectors` (`experiments.fcl`) names a file of GloVe-format
vectors, or `SKIPGRAM` for vectors the library trains on the public text of
`shared/data` the first time they are asked for and caches under
`<output_dir>/word_vectors`; `load_word_vectors` gives either, checked
against the embedding size. Kept apart from `experiments.fcl`, which runs and
reports the benchmark.
"""

import os
from typing import Any, Optional

from absl import logging

from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.data import word_vectors as word_vectors_lib
from tff_nlp.models import skipgram
from tff_nlp.training import run_cache

# `TrainingConfig.word_vectors` for the library's own skip-gram vectors.
SKIPGRAM = 'skipgram'
WORD_VECTORS_DIR = 'word_vectors'


def skipgram_config(training: Any) -> skipgram.SkipGramConfig:
  """The skip-gram vectors of `--word_vectors=skipgram`: `embedding_dim`
  values, 2 epochs of the public text, seed 0 (one set of vectors for every
  seed and method)."""
  return skipgram.SkipGramConfig(dim=training.embedding_dim, epochs=2,
                                 seed=0)


def _skipgram_vectors(config: skipgram.SkipGramConfig, cache_dir: str,
                      data_dir: Optional[str]) -> str:
  """`<cache_dir>/skipgram-<digest>/vectors.txt`, trained on
  `skipgram.public_english_text` the first time; `config.json` beside it
  (written last, so its presence marks finished vectors) holds the
  configuration and the training statistics."""
  directory = run_cache.run_dir(cache_dir, SKIPGRAM, config)
  path = os.path.join(directory, 'vectors.txt')
  if os.path.exists(os.path.join(directory, 'config.json')):
    return path
  logging.info('Training skip-gram vectors (%s) in %s', config, directory)
  vocabulary, vectors, stats = skipgram.train_skipgram(
      skipgram.public_english_text(data_dir), config)
  os.makedirs(directory, exist_ok=True)
  skipgram.write_vectors(path, vocabulary.words, vectors)
  training_lib.write_json(os.path.join(directory, 'config.json'),
                          {'config': config, 'stats': stats})
  logging.info('Skip-gram vectors: %s', stats)
  return path


def load_word_vectors(training: Any,
                      data_dir: Optional[str] = None,
                      output_dir: Optional[str] = None
                      ) -> Optional[word_vectors_lib.WordVectors]:
  """`training.word_vectors`, read (`SKIPGRAM`: trained first if not
  cached under `<output_dir>/word_vectors`) and checked against
  `embedding_dim`; None when the embedding is learned."""
  if not training.word_vectors:
    return None
  if training.word_vectors == SKIPGRAM:
    if output_dir is None:
      raise ValueError('--word_vectors=skipgram: pass output_dir, where the '
                       'vectors are cached.')
    path = _skipgram_vectors(skipgram_config(training),
                             os.path.join(output_dir, WORD_VECTORS_DIR),
                             data_dir)
  else:
    path = word_vectors_lib.find_word_vectors(training.word_vectors, data_dir)
  vectors = word_vectors_lib.read_word_vectors(path)
  if vectors.dim != training.embedding_dim:
    raise errors.InputError(
        f'--word_vectors={training.word_vectors}: {vectors.path} has '
        f'{vectors.dim} values per word, but --embedding_dim is '
        f'{training.embedding_dim}; set --embedding_dim={vectors.dim}.')
  return vectors
