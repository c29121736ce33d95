"""Pre-trained word vectors: reading them and the embedding table they give.

FedSeIT and FedWeIT embed words with frozen GloVe vectors
(`shared/docs/fedseit_spec.md` §2: `glove.840B.300d`, not trainable), so
that every client and every task reads the same, public word space and SIT's
task representations are comparable across clients. `shared/data` holds
GloVe 6B 50d for the 50,000 most frequent words
(`word_vectors/glove.6B.50d.top50k.txt`, described in `SOURCES.md`), in
GloVe's text format: `word v1 … vD`, space-separated, one word per line, no
header.

`read_word_vectors` is strict, as the other readers of `tff_nlp.data`: a
line with another number of values, a value that is not a finite number, or
a repeated word raises an `InputError` naming the file and the 1-based line.
`embedding_table` builds a vocabulary's [V, D] table from them as the
authors' code does (spec §2): a word's vector where GloVe has the word, and
for the others, the out-of-vocabulary row and the padding row, a seeded
draw from U(-0.5 / V, 0.5 / V).
"""

import dataclasses
import os
from typing import Optional

import numpy as np

from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.data import files
from tff_nlp.data import vocabulary as vocabulary_lib

WORD_VECTORS_SUBDIR = 'word_vectors'
GLOVE_50D = 'glove.6B.50d.top50k.txt'


@dataclasses.dataclass(frozen=True)
class WordVectors:
  """Words and their vectors, in file order.

  Attributes:
    words: The words.
    vectors: float32 [len(words), D].
    path: The file they were read from.
  """

  words: tuple[str, ...]
  vectors: np.ndarray
  path: str

  @property
  def dim(self) -> int:
    return self.vectors.shape[1]


def find_word_vectors(name: str, data_dir: Optional[str] = None) -> str:
  """The path of word vectors `name`: a file of
  `<data_dir>/word_vectors/`, or a path to a file of the user's."""
  if os.path.sep in name or os.path.isfile(name):
    return name
  return os.path.join(data_root.find_data_dir(data_dir), WORD_VECTORS_SUBDIR,
                      name)


def read_word_vectors(path: str) -> WordVectors:
  """Reads a GloVe-format text file (`word v1 … vD` per line).

  Args:
    path: The file.

  Returns:
    The `WordVectors`; D is the first line's number of values.

  Raises:
    InputError: If the file is missing or empty, or a line is not UTF-8,
      has another number of values than the first, holds a value that is
      not a finite number, or repeats a word; the message names the file
      and the 1-based line.
  """
  content = files.read_file_bytes(
      path, 'a UTF-8 text file of lines "word v1 ... vD" (GloVe format)')
  if not content:
    raise errors.InputError(
        f'{path}: empty file; expected lines "word v1 ... vD".')
  lines = content.split(b'\n')
  if content.endswith(b'\n'):
    lines.pop()
  words, rows, seen = [], [], set()
  dim = None
  for line_number, raw in enumerate(lines, start=1):
    where = f'{path}:{line_number}'
    try:
      fields = raw.decode('utf-8').rstrip('\r').split(' ')
    except UnicodeDecodeError:
      raise errors.InputError(f'{where}: not valid UTF-8.') from None
    word, values = fields[0], fields[1:]
    if dim is None:
      dim = len(values)
      if not word or dim < 1:
        raise errors.InputError(
            f'{where}: expected "word v1 ... vD" with at least one value.')
    if len(values) != dim:
      raise errors.InputError(
          f'{where}: {len(values)} values for {word!r}; the file\'s first '
          f'line has {dim}.')
    try:
      row = np.array([float(v) for v in values], np.float32)
    except ValueError:
      raise errors.InputError(
          f'{where}: a value of {word!r} is not a number.') from None
    if not np.all(np.isfinite(row)):
      raise errors.InputError(f'{where}: a value of {word!r} is not finite.')
    if word in seen:
      raise errors.InputError(f'{where}: {word!r} is repeated.')
    seen.add(word)
    words.append(word)
    rows.append(row)
  return WordVectors(tuple(words), np.stack(rows), path)


def embedding_table(vocabulary: vocabulary_lib.Vocabulary,
                    word_vectors: WordVectors, *, seed: int
                    ) -> tuple[np.ndarray, float]:
  """The [V, D] embedding table of `vocabulary` from `word_vectors`.

  Args:
    vocabulary: Ids 0 (padding), 1 (OOV) and the words.
    word_vectors: The pre-trained vectors.
    seed: Seed of the rows the vectors do not have.

  Returns:
    `(table, coverage)`: float32 [vocabulary.size, D], and the share of the
    vocabulary's words the vectors have.
  """
  size = vocabulary.size
  rng = np.random.default_rng(seed)
  table = rng.uniform(-0.5 / size, 0.5 / size,
                      [size, word_vectors.dim]).astype(np.float32)
  row_of = {w: i for i, w in enumerate(word_vectors.words)}
  found = 0
  for word in vocabulary.words:
    row = row_of.get(word)
    if row is not None:
      table[vocabulary.token_id(word)] = word_vectors.vectors[row]
      found += 1
  return table, found / max(len(vocabulary.words), 1)
