"""Word vocabulary and fixed-length encoding of texts into token ids.

The vocabulary is built from training texts only, so that test texts cannot
leak into the model's inputs: a word seen only in test data maps to the
out-of-vocabulary id, as it would for a deployed model. In a federated setting
this stands for a vocabulary agreed on before training (e.g. a pretrained
tokenizer's); it is built centrally here for simplicity.

Ids: 0 is padding, 1 is out-of-vocabulary, 2.. are the words by decreasing
training frequency (ties broken alphabetically, so the ids are deterministic).
"""

import collections
from collections.abc import Iterable, Sequence

import numpy as np

PAD_ID = 0
OOV_ID = 1
NUM_RESERVED_IDS = 2


def tokenize(text: str) -> list[str]:
  """Lowercases `text` and splits it on whitespace."""
  return text.lower().split()


class Vocabulary:
  """A frequency-ranked word vocabulary with padding and OOV ids."""

  def __init__(self, words: Sequence[str]):
    """Initializes the vocabulary with `words`, which get ids 2, 3, ....

    Args:
      words: Distinct words, most frequent first.

    Raises:
      ValueError: If `words` holds a duplicate.
    """
    self._words = tuple(words)
    self._ids = {w: i + NUM_RESERVED_IDS for i, w in enumerate(self._words)}
    if len(self._ids) != len(self._words):
      raise ValueError('Vocabulary words must be distinct.')

  @classmethod
  def build(cls, texts: Iterable[str], max_size: int) -> 'Vocabulary':
    """Keeps the `max_size - 2` most frequent words of `texts`.

    Args:
      texts: The training texts.
      max_size: The number of ids including padding and OOV (>= 2), i.e. the
        embedding table's size; fewer if the texts have fewer distinct words.

    Returns:
      A `Vocabulary`.
    """
    if max_size < NUM_RESERVED_IDS:
      raise ValueError(
          f'max_size must be at least {NUM_RESERVED_IDS} (padding and OOV), '
          f'got {max_size}.'
      )
    counts = collections.Counter()
    for text in texts:
      counts.update(tokenize(text))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return cls([w for w, _ in ranked[:max_size - NUM_RESERVED_IDS]])

  @property
  def words(self) -> tuple[str, ...]:
    return self._words

  @property
  def size(self) -> int:
    """The number of ids, padding and OOV included."""
    return len(self._words) + NUM_RESERVED_IDS

  def token_id(self, word: str) -> int:
    return self._ids.get(word, OOV_ID)

  def encode(self, texts: Sequence[str], max_length: int) -> np.ndarray:
    """Encodes texts as token ids, cut or padded to `max_length`.

    Args:
      texts: The texts to encode.
      max_length: The length L of every row; texts longer than L keep their
        first L tokens (`encode_with_truncation` also says which).

    Returns:
      An int32 array [len(texts), L], padded with `PAD_ID` at the end.
    """
    return self.encode_with_truncation(texts, max_length)[0]

  def encode_with_truncation(
      self, texts: Sequence[str], max_length: int
  ) -> tuple[np.ndarray, np.ndarray]:
    """`encode`, and which texts were cut.

    Args:
      texts: The texts to encode.
      max_length: The length L of every row; texts longer than L keep their
        first L tokens.

    Returns:
      `(ids, truncated)`: the int32 array [len(texts), L] of `encode`, and a
      bool array [len(texts)], True for a text of more than L tokens (one
      of exactly L is not cut). `truncated.sum()` is the number of texts cut.
    """
    if max_length < 1:
      raise ValueError(f'max_length must be positive, got {max_length}.')
    ids = np.full((len(texts), max_length), PAD_ID, np.int32)
    truncated = np.zeros(len(texts), bool)
    for row, text in enumerate(texts):
      tokens = tokenize(text)
      truncated[row] = len(tokens) > max_length
      tokens = tokens[:max_length]
      ids[row, :len(tokens)] = [self.token_id(t) for t in tokens]
    return ids, truncated
