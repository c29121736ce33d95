"""Text-to-SQL queries and questions, and the filling of their variables.

An upstream query (`Query`) has equivalent SQL strings with variable names,
its variables with an example value, and the sentences (`Sentence`) asking
it, each with its own values (module `text2sql` reads them). This module
puts values in: `fill_question` and `fill_sql` (a sentence's values, else the
query's example values), `fill_variables` (any text), and for a predicted
template `fill_template` with the values the question states (`STATED`) or
every annotated one (`ANNOTATED`); `stated_names` and `unstated_values` say
which values a question states. Variables are whole identifiers
(`VARIABLE_PATTERN`); `clean_sql` normalises whitespace.
"""

import dataclasses
import functools
import re
from typing import Mapping

# A variable name as a whole identifier of a text (not the `name0` of
# `city_name0`, but the `department0` of `non-department0`).
VARIABLE_PATTERN = re.compile(
    r'(?<![A-Za-z0-9_])[a-z][a-z_]*[0-9]+(?![A-Za-z0-9_])')
_QUOTED = re.compile(r'"([^"]*)"')
_PADDED_VARIABLE = re.compile(r'\s+(%?[a-z][a-z_]*[0-9]+%?)\s+')


@dataclasses.dataclass(frozen=True)
class Sentence:
  """One upstream question, as written.

  Attributes:
    text: The question with variable names in place of values.
    split: Its `question-split` value (`train`, ..., or a fold `0`..`9`).
    variables: Variable name -> value in this question ('' if not given).
  """

  text: str
  split: str
  variables: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Query:
  """One upstream query: equivalent SQL strings and the questions asking it.

  Attributes:
    sql: The SQL strings as written, with variable names.
    variables: Variable name -> example value (may be '').
    sentences: The questions.
    canonical_index: Index into `sql` of the canonical SQL: the first one
      whose every variable has a value for every sentence.
  """

  sql: tuple[str, ...]
  variables: Mapping[str, str]
  sentences: tuple[Sentence, ...]
  canonical_index: int

  @functools.cached_property
  def canonical_sql(self) -> str:
    """The canonical SQL with variable names, whitespace normalised."""
    return clean_sql(self.sql[self.canonical_index])

  def values(self, sentence: Sentence) -> dict[str, str]:
    """Variable name -> value for `sentence`: its own, else the example."""
    names = list(self.variables) + list(sentence.variables)
    return {name: sentence.variables.get(name) or self.variables.get(name)
            for name in names
            if sentence.variables.get(name) or self.variables.get(name)}


def clean_sql(sql: str) -> str:
  """Collapses whitespace and unpads quoted variables (`" x0 "` -> `"x0"`)."""
  sql = ' '.join(sql.split())

  def unpad(match):
    return '"' + _PADDED_VARIABLE.sub(r'\1', match.group(1)) + '"'

  return _QUOTED.sub(unpad, sql)


def _fill(text: str, pattern: re.Pattern, values: Mapping[str, str]) -> str:
  return pattern.sub(lambda m: values.get(m.group(0), m.group(0)), text)


@functools.lru_cache(maxsize=None)
def _question_pattern(names: frozenset[str]) -> re.Pattern:
  # Longest first, so that a name is never cut short by a shorter one.
  alternatives = '|'.join(
      re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)))
  return re.compile(rf'(?<![A-Za-z0-9_])(?:{alternatives})(?![A-Za-z0-9_])')


def fill_question(query: Query, sentence: Sentence) -> str:
  """The question with its variables' values, whitespace normalised."""
  text = ' '.join(sentence.text.split())
  names = frozenset(query.variables) | frozenset(sentence.variables)
  if not names:
    return text
  return _fill(text, _question_pattern(names), query.values(sentence))


def fill_variables(text: str, values: Mapping[str, str]) -> str:
  """`text` with every whole variable name of `values` replaced by its value.

  What turns an anonymised SQL (a parser's output on the anonymised
  protocol) into SQL with values; names without a value stay.
  """
  return _fill(text, VARIABLE_PATTERN, values)


def fill_sql(query: Query, sentence: Sentence) -> str:
  """The canonical SQL with the variables' values for `sentence`."""
  return _fill(query.canonical_sql, VARIABLE_PATTERN, query.values(sentence))


# Where a predicted template's values come from (`fill_template`).
# STATED, the headline protocol: only the values the question states (its
# text holds the variable's name, i.e. the value, on the paper's protocol of
# questions with values); any other variable keeps the value of the training
# example the template was learned from, as a parser that memorised that
# training SQL would write it. ANNOTATED ("oracle entities"): every value
# annotated on the question, including values it never states (e.g. ATIS
# "on monday" annotated day_number0 = 21): only under its own name.
STATED = 'stated'
ANNOTATED = 'annotated'
VALUE_SOURCES = (STATED, ANNOTATED)


def stated_names(sentence: Sentence) -> frozenset[str]:
  """The variables the question states: their names occur in its text."""
  return frozenset(VARIABLE_PATTERN.findall(sentence.text))


def fill_template(template: tuple[Query, Sentence], sentence: Sentence,
                  values: str = STATED) -> str:
  """The SQL of a training example's template for another question.

  Args:
    template: The (query, sentence) of the training example whose canonical
      SQL is the template (a template parser's class representative, or the
      retrieved training question).
    sentence: The question being answered.
    values: STATED: the question's values of the variables it states, every
      other variable the training example's own value; ANNOTATED: every
      annotated value of the question, then the query's example values
      (`fill_sql` of the template's query and `sentence`).

  Returns:
    The SQL with values.

  Raises:
    ValueError: If `values` is not one of `VALUE_SOURCES`.
  """
  query, train_sentence = template
  if values == ANNOTATED:
    return fill_sql(query, sentence)
  if values != STATED:
    raise ValueError(f'values must be one of {VALUE_SOURCES}, got '
                     f'{values!r}.')
  filled = query.values(train_sentence)
  stated = stated_names(sentence)
  filled.update((name, value) for name, value in sentence.variables.items()
                if value and name in stated)
  return _fill(query.canonical_sql, VARIABLE_PATTERN, filled)


def unstated_values(query: Query, sentence: Sentence) -> list[str]:
  """The variables whose gold value the question does not state.

  Variables of `query`'s canonical SQL that have a value annotated on this
  question but whose names are not in its text. E.g. ATIS "flights from
  city_name1 to city_name0 on monday", annotated day_number0 = 21,
  month_number0 = 2, year0 = 1991; scholar "papers on keyphrasename0 this
  year", year0 = 2016. Under the STATED protocol a parser gets such a
  question right only if it learned the value in training (ATIS maps each
  weekday to one date throughout). Variables with no annotated value (a
  constant of the query, such as advising's semester) are not counted: the
  query's SQL holds them.
  """
  stated = stated_names(sentence)
  return sorted(
      name for name in set(VARIABLE_PATTERN.findall(query.canonical_sql))
      if name not in stated and sentence.variables.get(name))
