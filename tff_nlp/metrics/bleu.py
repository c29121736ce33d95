"""Corpus BLEU (SacreBLEU) of translations, and a per-domain BLEU table.

`corpus_bleu` scores detokenized hypotheses against one reference each with
SacreBLEU's default settings (mixed case, its `13a` tokenizer, `exp`
smoothing, no effective order), so our numbers are comparable with any
paper that reports SacreBLEU with the same signature; the signature is kept
with the score (`BleuResult.signature`).

`bleu_table_markdown` lays out BLEU per model (rows: e.g. the federated
server model, or one engine per domain) and domain (columns) with their
average, and the paper's numbers under ours, in the layout of
`text2sql_report.table2_markdown`.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import math
import numbers
from typing import Any, Optional

import numpy as np
from sacrebleu.metrics import bleu as sacrebleu_bleu

# A cell without a number.
MISSING = '–'
# Marks an average over fewer than all columns.
PARTIAL_MARK = '*'
AVERAGE_COLUMN = 'avg'


@dataclasses.dataclass(frozen=True)
class BleuResult:
  """Corpus BLEU of a set of translations.

  Attributes:
    score: BLEU in percent, 0 to 100.
    signature: SacreBLEU's signature of the settings, e.g.
      'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0'.
    num_sentences: How many hypotheses were scored.
    precisions: The modified n-gram precisions in percent, n = 1..4 (after
      smoothing), or None if unknown.
    brevity_penalty: The brevity penalty, at most 1, or None if unknown.
    hypothesis_length: Tokens of all hypotheses, or None if unknown.
    reference_length: Tokens of all references, or None if unknown.
  """

  score: float
  signature: str
  num_sentences: int
  precisions: Optional[tuple[float, ...]] = None
  brevity_penalty: Optional[float] = None
  hypothesis_length: Optional[int] = None
  reference_length: Optional[int] = None

  def to_json(self) -> dict[str, Any]:
    """The fields as a JSON-ready dict (`precisions` as a list)."""
    return collections.OrderedDict(
        score=self.score,
        signature=self.signature,
        num_sentences=self.num_sentences,
        precisions=(None if self.precisions is None
                    else list(self.precisions)),
        brevity_penalty=self.brevity_penalty,
        hypothesis_length=self.hypothesis_length,
        reference_length=self.reference_length,
    )


def _check_texts(texts: Sequence[str], name: str) -> None:
  if isinstance(texts, (str, bytes)):
    raise TypeError(
        f'{name} must be a sequence of sentences, not a single {type(texts)}.')
  for i, text in enumerate(texts):
    if not isinstance(text, str):
      raise TypeError(f'{name}[{i}] is a {type(text)}; expected a str.')


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str],
                 caller: str) -> None:
  _check_texts(hypotheses, 'hypotheses')
  _check_texts(references, 'references')
  if len(hypotheses) != len(references) or not hypotheses:
    raise ValueError(
        f'{caller} needs one reference per hypothesis and at least one of '
        f'each; got {len(hypotheses)} hypotheses and {len(references)} '
        f'references.')


def corpus_bleu(hypotheses: Sequence[str],
                references: Sequence[str]) -> BleuResult:
  """SacreBLEU corpus BLEU with its default settings and one reference.

  Both sides are detokenized text (what the model's detokenizer produces
  and the data files hold); SacreBLEU tokenizes them with `13a`. BLEU is
  computed from n-gram counts summed over the corpus, not averaged over
  sentences. A corpus without any 4-gram (e.g. one two-word sentence)
  scores 0 even when the translation is perfect.

  Args:
    hypotheses: The translations, one per source sentence.
    references: The reference translations, in the same order.

  Returns:
    The score with SacreBLEU's signature and statistics.

  Raises:
    ValueError: If the two sequences have different lengths or are empty
      (the message gives both lengths).
    TypeError: If either is a single string or holds a non-string.
  """
  _check_pairs(hypotheses, references, 'corpus_bleu')
  metric = sacrebleu_bleu.BLEU()
  result = metric.corpus_score(list(hypotheses), [list(references)])
  return BleuResult(
      score=float(result.score),
      signature=str(metric.get_signature()),
      num_sentences=len(hypotheses),
      precisions=tuple(float(p) for p in result.precisions),
      brevity_penalty=float(result.bp),
      hypothesis_length=int(result.sys_len),
      reference_length=int(result.ref_len),
  )


# Columns of `sentence_statistics`: hypothesis and reference length, then
# matched and total n-grams for n = 1..4 (SacreBLEU's order).
NUM_STATISTICS = 10


def sentence_statistics(hypotheses: Sequence[str],
                        references: Sequence[str]) -> np.ndarray:
  """int64[n, 10]: SacreBLEU's sufficient statistics of each sentence.

  Summed over any multiset of sentences, they give that corpus's BLEU
  (`score_from_statistics`): what SacreBLEU's own paired bootstrap resamples.
  Same settings as `corpus_bleu`.
  """
  _check_pairs(hypotheses, references, 'sentence_statistics')
  stats = sacrebleu_bleu.BLEU()._extract_corpus_statistics(  # pylint: disable=protected-access
      list(hypotheses), [list(references)])
  return np.asarray(stats, dtype=np.int64).reshape(-1, NUM_STATISTICS)


def score_from_statistics(statistics: np.ndarray) -> float:
  """Corpus BLEU (percent) of summed `sentence_statistics` (int[10])."""
  statistics = np.asarray(statistics)
  if statistics.shape != (NUM_STATISTICS,):
    raise ValueError(f'Expected {NUM_STATISTICS} summed statistics, got '
                     f'shape {statistics.shape}.')
  return float(sacrebleu_bleu.BLEU()._compute_score_from_stats(  # pylint: disable=protected-access
      [int(v) for v in statistics]).score)


def _cell(value: float) -> str:
  return f'{value:.2f}'


def _escape(label: str) -> str:
  return str(label).replace('|', r'\|')


def _check_row(row: str, values: Mapping[str, float], columns: Sequence[str],
               source: str, allowed_extra: Sequence[str] = ()) -> None:
  unknown = [c for c in values if c not in columns and c not in allowed_extra]
  if unknown:
    raise ValueError(
        f'{source} row {row!r}: unknown columns {unknown}; expected some of '
        f'{list(columns)}.')
  for column, value in values.items():
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
        or math.isnan(value)):
      raise ValueError(
          f'{source} row {row!r}, column {column!r}: {value!r} is not a '
          f'number.')


def _row_cells(values: Mapping[str, float], columns: Sequence[str],
               average: bool, reported_average: Optional[float]) -> list[str]:
  cells = [_cell(values[c]) if c in values else MISSING for c in columns]
  if not average:
    return cells
  if reported_average is not None:
    return cells + [_cell(reported_average)]
  present = [float(values[c]) for c in columns if c in values]
  if not present:
    return cells + [MISSING]
  mark = '' if len(present) == len(columns) else PARTIAL_MARK
  return cells + [_cell(sum(present) / len(present)) + mark]


def bleu_table_markdown(
    scores: Mapping[str, Mapping[str, float]],
    *,
    columns: Sequence[str],
    paper: Optional[Mapping[str, Mapping[str, float]]] = None,
    average: bool = True,
) -> str:
  """A Markdown table of BLEU per row (model or method) and column (domain).

  One row of ours per key of `scores`, in order, then one per key of
  `paper` missing from `scores` (all our cells `MISSING`); under our row, a
  row of the paper's numbers if `paper` has that key. The Source column
  says which ('ours' or 'paper'). Numbers are printed with two decimals;
  a column missing from a row shows `MISSING`.

  The 'avg' column (if `average`) is the mean of the row's columns present;
  over fewer than all `columns` it is marked with `PARTIAL_MARK` ('*'), and
  it is `MISSING` for a row without numbers. A paper row may give the
  paper's own average under the key 'avg', which is then printed as
  reported instead.

  Args:
    scores: Our BLEU (0-100) by row label, then by column.
    columns: The columns, in order (e.g. `tff_nlp.data.nmt.DOMAINS`).
    paper: The paper's BLEU by row label, then by column (and optionally
      'avg').
    average: Whether to add the 'avg' column.

  Returns:
    The table, one line per row, without a trailing newline.

  Raises:
    ValueError: If `columns` is empty or repeats a name, a row has a column
      not in `columns` (which the table would silently leave out), or a
      value is not a number.
  """
  columns = list(columns)
  if not columns or len(set(columns)) != len(columns):
    raise ValueError(
        f'columns={columns!r}: expected one or more distinct names.')
  paper = paper or {}
  for row, values in scores.items():
    _check_row(row, values, columns, 'Our')
  for row, values in paper.items():
    _check_row(row, values, columns, 'Paper', (AVERAGE_COLUMN,))
  header = ['Model', 'Source', *columns]
  if average:
    header.append(AVERAGE_COLUMN)
  lines = [
      '| ' + ' | '.join(_escape(h) for h in header) + ' |',
      '|---|---|' + '---:|' * (len(header) - 2),
  ]
  rows = list(scores) + [row for row in paper if row not in scores]
  for row in rows:
    label = _escape(row)
    ours = _row_cells(scores.get(row, {}), columns, average, None)
    table_rows = [[label, 'ours', *ours]]
    if row in paper:
      theirs = _row_cells(paper[row], columns, average,
                          paper[row].get(AVERAGE_COLUMN))
      table_rows.append([label, 'paper', *theirs])
    lines.extend('| ' + ' | '.join(cells) + ' |' for cells in table_rows)
  return '\n'.join(lines)
