"""Word tokens with copy ids: the text-to-SQL parser's vocabulary.

SQL written as in Finegan-Dollak et al. (ACL 2018) is already a sequence of
space-separated words (`CITYalias0.CITY_NAME`, `=`, `"new`, `mexico"`), and
its values are copied verbatim from the question. A subword vocabulary
splits both, so a parser must spell every value piece by piece and may
never have seen the pieces of a test value. Here:

*   **Words are tokens.** A text is split on spaces; a word's leading and
    trailing quote and percent characters (`"`, `'`, `%`) become tokens of
    their own, written with a glue mark on the side that touches the word:
    `"%area%"` -> `"%▸`, `area`, `◂%"`; `"new mexico"` -> `"▸`, `new`,
    `mexico`, `◂"`. So the value words of the SQL are the question's words,
    SQL keywords and aliased columns (`CITYalias0.CITY_NAME`) are single
    tokens, and so are anonymised variables (`city_name0`). `decode` joins
    tokens with spaces except across a glue mark: the round trip is exact
    for every text whose words have no glue mark in them (`check_text`).
*   **Two vocabularies, one id space.** After the special ids 0-3 of
    `subword_tokenizer` come the *output words* (ids `4 .. K-1`): target
    words that training targets contain without their source containing
    them, i.e. what a parser must generate (SQL keywords, columns, values
    the question does not state); then the *input words* (`K .. V-1`), the
    other frequent source words. Everything else in a target is copied, so
    the output layer scores K words instead of V (K is about 1,000 of 4,500
    for the text-to-SQL clients: a 4x smaller softmax).
*   **Copy ids.** A source word outside the vocabulary gets the id `V + s`,
    s the position of its first occurrence in the source, so equal source
    words share one id. A target word that is not an output word gets
    `K + s`, s the first position of that word in the source, or UNK if the
    source does not have it. A model whose output layer scores the
    `K + max_source_length` ids (`seq2seq.Seq2SeqConfig.copy_from_source`)
    can thus emit any source word, and its pointer over the source positions
    adds probability to output words it copies (a pointer-generator, See et
    al., ACL 2017).

*   **SQL phrases.** Most of a SQL query is boilerplate that no question
    states (`SELECT DISTINCT FLIGHTalias0.FLIGHT_ID FROM`, join conditions).
    Byte-pair encoding over target words (Sennrich et al., ACL 2016, with
    words for bytes) learns `merges`: adjacent target words that never occur
    in a training source and are seen together often become one token (the
    two joined by a space, so `join_words` is unchanged). Words a question
    may hold (values) are never merged, so copying is unaffected. With 1,000
    merges a test SQL of the eight text-to-SQL clients has 1.6x fewer
    tokens (advising 52 -> 26, atis 78 -> 52, geography 22 -> 14), which
    cuts both training and decoding time.

*   **A SQL hint in the source.** A source may end with `SQL_HINT_MARK`
    and a SQL query (a retrieved example's SQL: retrieve-and-edit parsing,
    `tasks.text2sql.DataConfig.retrieved_sql`). `source_tokens`
    splits the words after the mark as targets are split (merges applied),
    so the hint holds the very tokens the target is made of: an output
    word in the hint is copied by the pointer into its own id, and a value
    or an unmerged word by its copy id, so the parser can copy the hint
    whole and edit it. Merges and the vocabulary are learned from sources
    without hints (`build`'s `reserved_input_words` adds the mark).

Ids are a pure function of the text (and of the source for targets): no TF
op, no state; `save`/`load` keep the vocabulary and merges as JSON.
"""

import collections
from collections.abc import Iterable, Sequence
import heapq
import json
import os
import re

from tff_nlp import errors

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
SPECIAL_TOKENS = ('<pad>', '<unk>', '<s>', '</s>')
NUM_SPECIAL_IDS = len(SPECIAL_TOKENS)
GLUE_RIGHT = '\u25b8'  # ▸: no space after this token.
GLUE_LEFT = '\u25c2'  # ◂: no space before this token.
VOCABULARY_FILE = 'copy_vocabulary.json'
# Leading and trailing quote/percent characters of a word.
# Separates a source from the SQL hint appended to it (module docstring).
SQL_HINT_MARK = '<sql>'
_AFFIXES = re.compile(r'^(["\'%]*)(.*?)(["\'%]*)$', re.DOTALL)


def split_words(text: str) -> list[str]:
  """The tokens of `text` (see the module docstring); `decode` inverts it."""
  tokens = []
  for word in text.split():
    prefix, core, suffix = _AFFIXES.match(word).groups()
    if not core:
      tokens.append(word)
      continue
    if prefix:
      tokens.append(prefix + GLUE_RIGHT)
    tokens.append(core)
    if suffix:
      tokens.append(GLUE_LEFT + suffix)
  return tokens


def join_words(tokens: Sequence[str]) -> str:
  """Joins `split_words` tokens back into text."""
  parts = []
  glue = True  # No space before the first token.
  for token in tokens:
    if token.startswith(GLUE_LEFT):
      glue, token = True, token[len(GLUE_LEFT):]
    if not glue:
      parts.append(' ')
    glue = token.endswith(GLUE_RIGHT)
    parts.append(token[:-len(GLUE_RIGHT)] if glue else token)
  return ''.join(parts)


def _mergeable(left: str, right: str) -> bool:
  # A glue mark must stay at the edge of a token to act.
  return not left.endswith(GLUE_RIGHT) and not right.startswith(GLUE_LEFT)


def _merge_pair(tokens: list[str], pair: tuple[str, str]) -> list[str]:
  merged, i = [], 0
  while i < len(tokens):
    if i + 1 < len(tokens) and (tokens[i], tokens[i + 1]) == pair:
      merged.append(f'{pair[0]} {pair[1]}')
      i += 2
    else:
      merged.append(tokens[i])
      i += 1
  return merged


def learn_merges(pairs: Iterable[tuple[str, str]], *, num_merges: int,
                 min_count: int = 5) -> list[tuple[str, str]]:
  """Byte-pair-encoding merges of target words that no source holds.

  Each step merges the most frequent adjacent pair of target tokens (ties:
  the smallest pair in string order) whose tokens occur in no training
  source, until `num_merges` merges or a count below `min_count`.

  Args:
    pairs: Training (source, target) texts.
    num_merges: The most merges to learn.
    min_count: The fewest occurrences of a merged pair.

  Returns:
    The merges in the order learned (the order `apply_merges` ranks them).
  """
  pairs = list(pairs)
  in_sources = {w for source, _ in pairs for w in split_words(source)}
  weights = collections.Counter(tuple(split_words(t)) for _, t in pairs)
  sequences = [list(k) for k in weights]
  counts = [weights[k] for k in weights]

  def candidates(tokens):
    return [(a, b) for a, b in zip(tokens, tokens[1:])
            if _mergeable(a, b) and a not in in_sources
            and b not in in_sources]

  pair_counts = collections.Counter()
  where = collections.defaultdict(set)
  for index, tokens in enumerate(sequences):
    for pair in candidates(tokens):
      pair_counts[pair] += counts[index]
      where[pair].add(index)
  # A heap of (-count, pair); entries whose count changed are skipped.
  heap = [(-c, p) for p, c in pair_counts.items()]
  heapq.heapify(heap)
  merges = []
  while heap and len(merges) < num_merges:
    count, pair = heapq.heappop(heap)
    if pair_counts.get(pair, 0) != -count:
      continue
    if -count < min_count:
      break
    merges.append(pair)
    merged_token = f'{pair[0]} {pair[1]}'
    in_sources.discard(merged_token)
    changed = set()
    for index in where.pop(pair):
      tokens = sequences[index]
      for old in candidates(tokens):
        pair_counts[old] -= counts[index]
        changed.add(old)
      tokens = sequences[index] = _merge_pair(tokens, pair)
      for new in candidates(tokens):
        pair_counts[new] += counts[index]
        where[new].add(index)
        changed.add(new)
    for other in changed:
      if pair_counts[other] > 0:
        heapq.heappush(heap, (-pair_counts[other], other))
      else:
        pair_counts.pop(other, None)
  return merges


def apply_merges(tokens: Sequence[str],
                 ranks: dict[tuple[str, str], int]) -> list[str]:
  """`tokens` with the merges applied, lowest rank first (as BPE does)."""
  tokens = list(tokens)
  while len(tokens) > 1:
    ranked = [(ranks[p], p) for p in zip(tokens, tokens[1:]) if p in ranks]
    if not ranked:
      break
    tokens = _merge_pair(tokens, min(ranked)[1])
  return tokens


def check_text(text: str, where: str) -> None:
  """Raises `InputError` naming `where` if `text` would not round-trip."""
  if GLUE_LEFT in text or GLUE_RIGHT in text:
    raise errors.InputError(
        f'{where}: the text contains a glue mark ({GLUE_LEFT!r} or '
        f'{GLUE_RIGHT!r}), which the copy tokenizer reserves: {text[:200]!r}')
  if SQL_HINT_MARK in text.split():
    raise errors.InputError(
        f'{where}: the text contains the word {SQL_HINT_MARK!r}, which the '
        f'copy tokenizer reserves for SQL hints: {text[:200]!r}')


def with_sql_hint(source: str, sql: str) -> str:
  """`source` followed by the SQL hint `sql` (the module docstring)."""
  return f'{source} {SQL_HINT_MARK} {sql}'


class CopyTokenizer:
  """Word ids with copy ids for OOV source words (the module docstring).

  Args:
    output_words: Words the model generates (ids 4 .. K-1), most frequent
      first.
    input_words: Further words the encoder knows (ids K .. V-1).
    merges: Target word pairs merged into one token (`learn_merges`), in
      rank order.
  """

  copies_from_source = True

  def __init__(self, output_words: Sequence[str],
               input_words: Sequence[str] = (),
               merges: Sequence[tuple[str, str]] = ()):
    self._merges = tuple((str(a), str(b)) for a, b in merges)
    self._ranks = {pair: rank for rank, pair in enumerate(self._merges)}
    self._words = (tuple(SPECIAL_TOKENS) + tuple(output_words)
                   + tuple(input_words))
    self._output_size = NUM_SPECIAL_IDS + len(output_words)
    self._ids = {w: i for i, w in enumerate(self._words)}
    if len(self._ids) != len(self._words):
      raise ValueError('Vocabulary words must be distinct and not special '
                       f'tokens {SPECIAL_TOKENS}.')

  @classmethod
  def build(cls, pairs: Iterable[tuple[str, str]], *, max_size: int,
            min_count: int = 2, num_merges: int = 0,
            reserved_input_words: Sequence[str] = ()) -> 'CopyTokenizer':
    """Merges, output and input words of training (source, target) pairs.

    Merges: `learn_merges(pairs, num_merges=num_merges)`, applied to the
    targets before counting. Output words: target tokens seen at least
    `min_count` times in targets whose source lacks them. Input words: source words seen at least
    `min_count` times. Rarer words (names, numbers: values) are left to
    copying, so the model learns to copy values rather than to memorise
    them. Ranked by count, ties alphabetically (deterministic ids); output
    words first, then input words, until `max_size` ids.

    Args:
      pairs: The training (source, target) texts.
      max_size: V, the number of ids including the 4 special ids.
      min_count: The fewest occurrences of a vocabulary word.
      num_merges: The most SQL-phrase merges (0: none).
      reserved_input_words: Input words that come first, whatever their
        count (e.g. `SQL_HINT_MARK` for sources with hints).
    """
    if max_size <= NUM_SPECIAL_IDS + len(reserved_input_words):
      raise ValueError(f'max_size must exceed {NUM_SPECIAL_IDS}, got '
                       f'{max_size}.')
    pairs = list(pairs)
    merges = learn_merges(pairs, num_merges=num_merges) if num_merges else []
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    generated, source_counts = collections.Counter(), collections.Counter()
    for source, target in pairs:
      source_words = split_words(source)
      source_counts.update(source_words)
      present = set(source_words)
      generated.update(w for w in apply_merges(split_words(target), ranks)
                       if w not in present)

    def ranked(counts):
      return [w for w, c in sorted(counts.items(),
                                   key=lambda item: (-item[1], item[0]))
              if c >= min_count]

    reserved = list(reserved_input_words)
    room = max_size - NUM_SPECIAL_IDS - len(reserved)
    output_words = [w for w in ranked(generated)
                    if w not in reserved][:room]
    chosen = set(output_words) | set(reserved)
    input_words = reserved + [w for w in ranked(source_counts)
                              if w not in chosen][:room - len(output_words)]
    return cls(output_words, input_words, merges)

  @property
  def merges(self) -> tuple[tuple[str, str], ...]:
    return self._merges

  def target_tokens(self, text: str) -> list[str]:
    """The tokens of a target text: its words with the merges applied."""
    return apply_merges(split_words(text), self._ranks)

  def vocabulary_size(self) -> int:
    """V: the special ids and all words; source copy ids start here."""
    return len(self._words)

  def output_vocabulary_size(self) -> int:
    """K: the special ids and the output words; target copy ids start here."""
    return self._output_size

  @property
  def output_words(self) -> tuple[str, ...]:
    return self._words[NUM_SPECIAL_IDS:self._output_size]

  @property
  def input_words(self) -> tuple[str, ...]:
    return self._words[self._output_size:]

  def source_tokens(self, text: str) -> list[str]:
    """The tokens of a source: its words, and a SQL hint's target tokens.

    Copy ids number these positions (module docstring).
    """
    words = text.split()
    if SQL_HINT_MARK not in words:
      return split_words(text)
    mark = words.index(SQL_HINT_MARK)
    return (split_words(' '.join(words[:mark])) + [SQL_HINT_MARK]
            + self.target_tokens(' '.join(words[mark + 1:])))

  def encode_source(self, text: str) -> list[int]:
    """Source ids: vocabulary ids, `V + first position` for the others."""
    first = {}
    ids = []
    for position, token in enumerate(self.source_tokens(text)):
      token_id = self._ids.get(token)
      if token_id is None:
        token_id = first.setdefault(token, self.vocabulary_size() + position)
      ids.append(token_id)
    return ids

  def encode_target(self, text: str, source: str) -> list[int]:
    """Target ids: output-word ids, else `K + s`, else UNK."""
    first = {}
    for position, token in enumerate(self.source_tokens(source)):
      first.setdefault(token, self._output_size + position)
    ids = []
    for token in self.target_tokens(text):
      token_id = self._ids.get(token, UNK_ID)
      if token_id >= self._output_size or token_id == UNK_ID:
        token_id = first.get(token, UNK_ID)
      ids.append(token_id)
    return ids

  def decode(self, ids: Iterable[int], source: str) -> str:
    """The text of generated ids: stops at END, skips PAD and START.

    A copy id names a source position; one past the source (a model that
    points at padding) decodes as `<unk>`.
    """
    source_tokens = self.source_tokens(source)
    tokens = []
    for token_id in ids:
      token_id = int(token_id)
      if token_id == END_ID:
        break
      if token_id in (PAD_ID, START_ID):
        continue
      if token_id < self._output_size:
        tokens.append(self._words[token_id])
      else:
        position = token_id - self._output_size
        tokens.append(source_tokens[position] if position < len(source_tokens)
                      else SPECIAL_TOKENS[UNK_ID])
    return join_words(tokens)

  def save(self, directory: str) -> str:
    """Writes the word list to `directory`/VOCABULARY_FILE; returns the path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, VOCABULARY_FILE)
    temp = path + '.tmp'
    with open(temp, 'w', encoding='utf-8') as f:
      json.dump({'output_words': list(self.output_words),
                 'input_words': list(self.input_words),
                 'merges': [list(p) for p in self.merges]}, f,
                ensure_ascii=False, indent=0)
    os.replace(temp, path)
    return path

  @classmethod
  def load(cls, path: str) -> 'CopyTokenizer':
    """Reads `save`'s file (or the directory holding it)."""
    if os.path.isdir(path):
      path = os.path.join(path, VOCABULARY_FILE)
    try:
      with open(path, encoding='utf-8') as f:
        content = json.load(f)
      words = content['output_words'], content['input_words']
      merges = [tuple(p) for p in content.get('merges', [])]
      if any(len(p) != 2 for p in merges):
        raise ValueError('every merge must be a pair of words')
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise errors.InputError(
          f'{path}: not a copy-tokenizer vocabulary ({e}).') from e
    for part in words:
      if not isinstance(part, list) or not all(isinstance(w, str)
                                               for w in part):
        raise errors.InputError(f'{path}: "output_words" and "input_words" '
                                'must be lists of strings.')
    return cls(*words, merges)


def load_or_build(directory: str, pairs_fn, *, max_size: int,
                  min_count: int = 2, num_merges: int = 0,
                  reserved_input_words: Sequence[str] = ()) -> CopyTokenizer:
  """The tokenizer saved in `directory`, or one built and saved there.

  `pairs_fn` returns the training (source, target) pairs; called only when
  building.
  """
  path = os.path.join(directory, VOCABULARY_FILE)
  if os.path.exists(path):
    return CopyTokenizer.load(path)
  tokenizer = CopyTokenizer.build(
      pairs_fn(), max_size=max_size, min_count=min_count,
      num_merges=num_merges, reserved_input_words=reserved_input_words)
  tokenizer.save(directory)
  return tokenizer
