"""Reader of the eight text-to-SQL clients of the Lorar paper.

Zhang et al., "Federated Learning for Semantic Parsing: Task Formulation,
Evaluation Setup, New Algorithms" (ACL 2023) make every single-domain
text-to-SQL dataset of Finegan-Dollak et al. (ACL 2018; upstream
`jkkummerfeld/text2sql-data`, located by `text2sql_source`) one client:
`CLIENTS`, in the paper's table order.

Splits (the paper's "question split"):

- advising, atis, geography, scholar: upstream's `question-split` of every
  sentence, `train`/`dev`/`test`; `exclude` (advising only) is dropped.
- restaurants, academic, imdb, yelp: upstream gives ten folds `0`..`9`
  instead (the data decides: restaurants, listed as "medium" by the paper, is
  one of them). The paper takes 6 folds as train, 2 as dev and 2 as test,
  "chosen at random once", without saying which. `PAPER_FOLDS` (the same for
  the four datasets) is train = folds 0-5, dev = 6, 7, test = 8, 9: it gives
  exactly the paper's counts for restaurants (228/76/74), academic
  (120/38/38) and yelp (78/26/24); academic's 120 even leaves no other
  choice of training folds (folds 0-5 hold 20 questions, 6-9 hold 19). imdb
  gives 79/26/26 against the paper's 78/26/26, which sum to 130 where the
  file has 131 (fold 0 holds 14 questions, the others 13): no choice of folds
  gives the paper's imdb counts, whose copy must have had one question fewer.
  `seeded_folds(seed)` draws another choice
  (`np.random.default_rng(seed).permutation(10)`: first 6 train, next 2 dev,
  last 2 test) for experiments on the split's variance.

Each upstream query has one or more equivalent SQL strings (`sql`), its
variables with an example value, and the sentences (questions) asking it,
each with its own variable values. One `Example` is one sentence:

- Canonical SQL: the first `sql` entry all of whose variables have a value
  for every sentence of the query. That is the first entry everywhere except
  imdb query 27, whose first SQL uses `company_name0`, which that query does
  not declare (its second SQL uses the declared `producer_name0`).
- With values (`with_values=True`, what the paper trains and evaluates on):
  every variable name in the question and the SQL is replaced by its value,
  the sentence's value (`sentences[i].variables`) if non-empty, else the
  variable's `example` (SQL-only variables have no value in the sentence).
  Variables are whole identifiers: `number0` in `= number0 ;`, inside quotes
  (`"city_name0"`, `"%area0%"`), or glued to punctuation (`non-department0`)
  is replaced; the `name0` inside `city_name0` is not.
- Anonymised (`with_values=False`): variable names are kept.
- Whitespace: runs of whitespace are collapsed to one space and the ends
  stripped, in the question and the SQL; tokens are otherwise kept as
  upstream writes them (`COUNT( * )`, ` ;` at the end). A quoted variable
  padded with spaces (`" actor_name0 "`, once in imdb) is unpadded, as every
  other quoted variable is written.

Known upstream slip left as is: atis query 599's first question says
`departure_time2`, which that query does not declare, so it stays a name.

The model input is the question followed by the client's schema (table and
column names from `<name>-schema.csv`), as in the paper: `model_input`,
`serialize_schema` (tables and columns, or tables only for short inputs).

The reader is strict, like `text_classification`: malformed JSON, a missing
or mistyped field, an unknown split value, or a variable that has no value
raises an `InputError` naming the file, the query (and sentence) index and
what was expected. Indices are 0-based positions in the file.
"""

import csv
import dataclasses
import io
import json
import os
import re
from typing import Any, Collection, Mapping, Optional, Sequence

import numpy as np

from tff_nlp import errors
from tff_nlp.data import files
from tff_nlp.data import text2sql_source
# The queries, questions and the filling of their variables, now in
# `tff_nlp.data.text2sql_queries`, kept importable from here.
from tff_nlp.data.text2sql_queries import ANNOTATED
from tff_nlp.data.text2sql_queries import clean_sql
from tff_nlp.data.text2sql_queries import fill_question
from tff_nlp.data.text2sql_queries import fill_sql
from tff_nlp.data.text2sql_queries import fill_template
from tff_nlp.data.text2sql_queries import fill_variables
from tff_nlp.data.text2sql_queries import Query
from tff_nlp.data.text2sql_queries import Sentence
from tff_nlp.data.text2sql_queries import STATED
from tff_nlp.data.text2sql_queries import stated_names
from tff_nlp.data.text2sql_queries import unstated_values
from tff_nlp.data.text2sql_queries import VALUE_SOURCES
from tff_nlp.data.text2sql_queries import VARIABLE_PATTERN
from tff_nlp.data.text2sql_queries import _question_pattern

CLIENTS = ('advising', 'atis', 'geography', 'restaurants', 'scholar',
           'academic', 'imdb', 'yelp')
# Clients whose sentences carry upstream's train/dev/test question split.
QUESTION_SPLIT_CLIENTS = ('advising', 'atis', 'geography', 'scholar')
# Clients whose sentences carry a cross-validation fold, 0..9.
FOLD_CLIENTS = ('restaurants', 'academic', 'imdb', 'yelp')
SPLITS = ('train', 'dev', 'test')
EXCLUDE_SPLIT = 'exclude'
NUM_FOLDS = 10
# Between the question and the schema, and between tables of the schema.
SCHEMA_SEPARATOR = ' | '

# An upstream variable name: lower-case type, then a number (`city_name0`).
_VARIABLE_NAME = re.compile(r'[a-z][a-z_]*[0-9]+')
# A UTF-8 byte-order mark at the start of a file is ignored, as by the
# other readers of `tff_nlp.data`.
_UTF8_BOM = '\ufeff'


@dataclasses.dataclass(frozen=True)
class FoldSplit:
  """Which of the ten upstream folds make train, dev and test.

  Attributes:
    train: Fold numbers of the training split.
    dev: Fold numbers of the development split.
    test: Fold numbers of the test split.
  """

  train: tuple[int, ...]
  dev: tuple[int, ...]
  test: tuple[int, ...]

  def __post_init__(self):
    folds = sorted(self.train + self.dev + self.test)
    if folds != list(range(NUM_FOLDS)):
      raise errors.InputError(
          f'Folds train={self.train} dev={self.dev} test={self.test} must '
          f'use each of the folds 0..{NUM_FOLDS - 1} exactly once.'
      )

  def split_of(self, fold: int) -> str:
    """'train', 'dev' or 'test': the split holding `fold`."""
    for split in SPLITS:
      if fold in getattr(self, split):
        return split
    raise ValueError(f'No fold {fold}.')


# See the module docstring: reproduces the paper's split sizes.
PAPER_FOLDS = FoldSplit(train=(0, 1, 2, 3, 4, 5), dev=(6, 7), test=(8, 9))


def seeded_folds(seed: int) -> FoldSplit:
  """A random 6/2/2 choice of folds: `default_rng(seed).permutation(10)`."""
  order = [int(f) for f in np.random.default_rng(seed).permutation(NUM_FOLDS)]
  return FoldSplit(train=tuple(sorted(order[:6])),
                   dev=tuple(sorted(order[6:8])),
                   test=tuple(sorted(order[8:])))


@dataclasses.dataclass(frozen=True)
class Example:
  """One question and its SQL.

  Attributes:
    question: The question (values filled in or not; see `load_client`).
    sql: The canonical SQL (likewise).
    client: The client (dataset) name.
    split: 'train', 'dev' or 'test'.
    query_index: 0-based position of the query in `<client>.json`.
    sentence_index: 0-based position of the sentence in the query.
    variables: The sentence's variable values (`Query.values`): what
      `fill_variables` puts into an anonymised question or SQL ("oracle
      entities", as Finegan-Dollak et al. evaluate their anonymised models).
  """

  question: str
  sql: str
  client: str
  split: str
  query_index: int
  sentence_index: int
  variables: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Table:
  """A table and its column names, in `*-schema.csv` order."""

  name: str
  columns: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Schema:
  """A client's database schema: its tables in `*-schema.csv` order."""

  tables: tuple[Table, ...]


@dataclasses.dataclass(frozen=True)
class Text2SqlClientData:
  """One text-to-SQL client: its three splits (in file order), its schema.

  Not a `tff.simulation.datasets.ClientData`: one client's parsed examples.
  """

  name: str
  train: tuple[Example, ...]
  dev: tuple[Example, ...]
  test: tuple[Example, ...]
  schema: Schema


def _error(where: str, message: str) -> errors.InputError:
  return errors.InputError(f'{where}: {message}')


def _field(record: Mapping[str, Any], key: str, kind: type, where: str,
           what: str) -> Any:
  if key not in record:
    raise _error(where, f'missing field "{key}"; expected {what}.')
  value = record[key]
  if not isinstance(value, kind):
    raise _error(where, f'field "{key}" is a {type(value).__name__}; '
                 f'expected {what}.')
  return value


def _check_name(name: Any, where: str) -> str:
  if not isinstance(name, str) or not _VARIABLE_NAME.fullmatch(name):
    raise _error(where, f'variable name {name!r} is not lower-case letters '
                 'and underscores followed by digits (e.g. "city_name0").')
  return name


def _parse_query(record: Any, where: str,
                 split_values: Collection[str]) -> tuple[Any, ...]:
  if not isinstance(record, dict):
    raise _error(where, f'a {type(record).__name__}; expected an object '
                 'with "sql", "variables" and "sentences".')
  sql = _field(record, 'sql', list, where, 'a non-empty list of SQL strings')
  if not sql or not all(isinstance(s, str) and s.strip() for s in sql):
    raise _error(where, 'field "sql" must be a non-empty list of non-empty '
                 'SQL strings.')
  examples = {}
  variables = _field(record, 'variables', list, where,
                     'a list of {"name", "example", ...} objects')
  for j, variable in enumerate(variables):
    at = f'{where}, variable {j}'
    if not isinstance(variable, dict):
      raise _error(at, 'expected an object with "name" and "example".')
    name = _check_name(
        _field(variable, 'name', str, at, 'the variable name'), at)
    examples[name] = _field(variable, 'example', str, at,
                            'an example value (a string)')
  sentences = []
  for i, sentence in enumerate(_field(
      record, 'sentences', list, where,
      'a list of {"text", "question-split", "variables"} objects')):
    at = f'{where}, sentence {i}'
    if not isinstance(sentence, dict):
      raise _error(at, 'expected an object with "text", "question-split" '
                   'and "variables".')
    text = _field(sentence, 'text', str, at, 'the question (a string)')
    if not text.strip():
      raise _error(at, 'empty "text"; expected a question.')
    split = _field(sentence, 'question-split', str, at,
                   f'one of {sorted(split_values)}')
    if split not in split_values:
      raise _error(at, f'unknown question-split {split!r}; expected one of '
                   f'{sorted(split_values)}.')
    values = _field(sentence, 'variables', dict, at,
                    'an object mapping variable names to values')
    for name, value in values.items():
      _check_name(name, at)
      if not isinstance(value, str):
        raise _error(at, f'value of variable {name!r} is a '
                     f'{type(value).__name__}; expected a string.')
    sentences.append(Sentence(text=text, split=split, variables=values))
  return tuple(sql), examples, tuple(sentences)


def _canonical_index(sql: Sequence[str], examples: Mapping[str, str],
                     sentences: Sequence[Sentence], where: str) -> int:
  first_missing = None
  for index, candidate in enumerate(sql):
    missing = None
    for i, sentence in enumerate(sentences):
      for name in VARIABLE_PATTERN.findall(candidate):
        if not (sentence.variables.get(name) or examples.get(name)):
          missing = (name, i)
          break
      if missing:
        break
    if missing is None:
      return index
    if first_missing is None:
      first_missing = missing
  name, i = first_missing
  raise _error(where, f'no SQL has a value for each of its variables (sql '
               f'0 uses {name!r}, without a value in sentence {i}); expected '
               'each variable of one SQL string to have a non-empty value in '
               'the sentence\'s "variables" or an "example" in the query\'s.')


def read_queries(path: str, split_values: Collection[str]) -> tuple[Query, ...]:
  """Reads an upstream `<name>.json` file, strictly.

  A UTF-8 byte-order mark at the start of the file is ignored.

  Args:
    path: The file.
    split_values: The allowed `question-split` values.

  Returns:
    The queries in file order.

  Raises:
    InputError: If the file is missing, a directory or not valid UTF-8 JSON
      (the message has the line and column), a query or sentence misses a
      field or has one of the wrong type, a split value is not in
      `split_values`, or a variable in a question or in every SQL string has
      no value. Messages name the file and the 0-based query (and sentence)
      index.
  """
  content = files.read_file_bytes(
      path, 'a UTF-8 JSON list of queries')
  try:
    # Decoded before the BOM is removed, so that the byte of an error is
    # counted from the start of the file.
    records = json.loads(content.decode('utf-8').removeprefix(_UTF8_BOM))
  except UnicodeDecodeError as e:
    raise errors.InputError(
        f'{path}: not valid UTF-8 at byte {e.start}; expected UTF-8 JSON.'
    ) from None
  except json.JSONDecodeError as e:
    raise errors.InputError(
        f'{path}:{e.lineno}:{e.colno}: invalid JSON ({e.msg}); expected a '
        'JSON list of queries.'
    ) from None
  except (RecursionError, ValueError) as e:  # Too deep, or a huge integer.
    raise errors.InputError(
        f'{path}: unreadable JSON ({e}); expected a JSON list of queries.'
    ) from None
  if not isinstance(records, list):
    raise errors.InputError(
        f'{path}: the top level is a {type(records).__name__}; expected a '
        'JSON list of queries.'
    )
  queries = []
  for index, record in enumerate(records):
    where = f'{path}: query {index}'
    sql, examples, sentences = _parse_query(record, where, split_values)
    query = Query(sql=sql, variables=examples, sentences=sentences,
                  canonical_index=_canonical_index(sql, examples, sentences,
                                                   where))
    for i, sentence in enumerate(sentences):
      names = frozenset(examples) | frozenset(sentence.variables)
      values = query.values(sentence)
      for name in set(_question_pattern(names).findall(sentence.text)
                      if names else ()):
        if name not in values:
          raise _error(
              f'{where}, sentence {i}',
              f'variable {name!r} in the question has no value; expected a '
              'non-empty value in the sentence\'s "variables" or an '
              '"example" in the query\'s.')
    queries.append(query)
  return tuple(queries)


def read_schema(path: str) -> Schema:
  """Reads an upstream `<name>-schema.csv`: table and column names.

  The first line is a header starting `Table Name, Field Name`; lines whose
  first field is `-` separate tables. Only the first two fields are read.
  Names are upper-cased, as the SQL writes every identifier (the files of
  academic, imdb and yelp, and advising's columns, are in lower case). A
  UTF-8 byte-order mark at the start of the file is ignored.

  Args:
    path: The file.

  Returns:
    The tables in order of first appearance, each with its columns in file
    order.

  Raises:
    InputError: If the file is missing, a directory, not UTF-8 or empty, the
      header is not as above, a line has an empty table or column name, or a
      column appears twice in a table. Messages name the file and the
      1-based line.
  """
  content = files.read_file_bytes(
      path, 'a UTF-8 CSV file "Table Name, Field Name, ..."')
  rows = []  # (1-based line of the row's end, fields)
  try:
    text = content.decode('utf-8').removeprefix(_UTF8_BOM)
    reader = csv.reader(io.StringIO(text, newline=''), skipinitialspace=True)
    for row in reader:
      rows.append((reader.line_num, row))
  except (UnicodeDecodeError, csv.Error) as e:
    raise errors.InputError(f'{path}: unreadable CSV ({e}).') from None
  if not rows:
    raise errors.InputError(
        f'{path}: empty file; expected a header "Table Name, Field Name, '
        '...".')
  header = [field.strip().lower() for field in rows[0][1][:2]]
  if header != ['table name', 'field name']:
    raise errors.InputError(
        f'{path}:1: header {rows[0][1][:2]}; expected it to start with '
        '"Table Name, Field Name".')
  tables: dict[str, list[str]] = {}
  for line, row in rows[1:]:
    fields = [field.strip() for field in row]
    if not any(fields) or fields[0] == '-':
      continue
    if len(fields) < 2 or not fields[0] or not fields[1]:
      raise errors.InputError(
          f'{path}:{line}: expected "table, column, ..." with non-empty '
          f'names, found {row!r}.')
    table, column = fields[0].upper(), fields[1].upper()
    columns = tables.setdefault(table, [])
    if column in columns:
      raise errors.InputError(
          f'{path}:{line}: column {column} of table {table} appears twice.')
    columns.append(column)
  if not tables:
    raise errors.InputError(f'{path}: no tables; expected lines "table, '
                            'column, ...".')
  return Schema(tables=tuple(Table(name=t, columns=tuple(c))
                             for t, c in tables.items()))


def serialize_schema(schema: Schema, *, columns: bool = True) -> str:
  """The schema as text: `T1 : C1 , C2 | T2 : C3` or, tables only, `T1 | T2`.

  The layout of the T5 text-to-SQL inputs the paper builds on (UnifiedSKG,
  PICARD), without the database name; deterministic (file order).

  Args:
    schema: The schema.
    columns: Whether to list each table's columns; False gives a much
      shorter text (atis: 325 instead of 2,240 characters).
  """
  if not columns:
    return SCHEMA_SEPARATOR.join(t.name for t in schema.tables)
  return SCHEMA_SEPARATOR.join(f'{t.name} : {" , ".join(t.columns)}'
                               for t in schema.tables)


def model_input(question: str, schema: Schema, *, columns: bool = True,
                lowercase_schema: bool = False) -> str:
  """The parser's input: `question | <serialize_schema(schema)>`, the
  schema lower-cased with `lowercase_schema` (for lower-cased SQL)."""
  names = serialize_schema(schema, columns=columns)
  return question + SCHEMA_SEPARATOR + (names.lower() if lowercase_schema
                                        else names)


def check_client(name: str) -> None:
  """Raises an `InputError` unless `name` is one of `CLIENTS`."""
  if name not in CLIENTS:
    raise errors.InputError(
        f'Unknown text-to-SQL client {name!r}; expected one of {CLIENTS}.')


def _split_values(name: str) -> frozenset[str]:
  if name in FOLD_CLIENTS:
    return frozenset(str(f) for f in range(NUM_FOLDS))
  return frozenset(SPLITS + (EXCLUDE_SPLIT,))


def split_of(name: str, sentence: Sentence,
             folds: FoldSplit = PAPER_FOLDS) -> Optional[str]:
  """The paper's split of a sentence of client `name`; None if excluded."""
  if name in FOLD_CLIENTS:
    return folds.split_of(int(sentence.split))
  if sentence.split == EXCLUDE_SPLIT:
    return None
  return sentence.split


def read_client_queries(folder: str, name: str) -> tuple[Query, ...]:
  """Reads `<folder>/<name>.json` with the split values of client `name`.

  Args:
    folder: The text-to-SQL folder (`text2sql_source.find_text2sql_dir`).
    name: A client of `CLIENTS`.

  Raises:
    InputError: See `read_queries`; also if `name` is not a client.
  """
  check_client(name)
  return read_queries(os.path.join(folder, f'{name}.json'),
                      _split_values(name))


def _load_client(folder: str, name: str, with_values: bool,
                 folds: FoldSplit) -> Text2SqlClientData:
  queries = read_client_queries(folder, name)
  schema = read_schema(os.path.join(folder, f'{name}-schema.csv'))
  splits = {split: [] for split in SPLITS}
  for query_index, query in enumerate(queries):
    for sentence_index, sentence in enumerate(query.sentences):
      split = split_of(name, sentence, folds)
      if split is None:
        continue
      if with_values:
        question = fill_question(query, sentence)
        sql = fill_sql(query, sentence)
      else:
        question = ' '.join(sentence.text.split())
        sql = query.canonical_sql
      splits[split].append(Example(
          question=question, sql=sql, client=name, split=split,
          query_index=query_index, sentence_index=sentence_index,
          variables=query.values(sentence)))
  return Text2SqlClientData(name=name, schema=schema,
                            **{split: tuple(e) for split, e in splits.items()})


def load_client(
    name: str,
    *,
    data_dir: Optional[str] = None,
    with_values: bool = True,
    folds: FoldSplit = PAPER_FOLDS,
) -> Text2SqlClientData:
  """Loads one client's train/dev/test examples and schema.

  Args:
    name: A client of `CLIENTS`.
    data_dir: The `shared/data` folder; see
      `text2sql_source.find_text2sql_dir` (which may download the data).
    with_values: Whether questions and SQL get the variables' values (the
      paper's setting) or keep the variable names.
    folds: Which folds are train/dev/test for the clients of
      `FOLD_CLIENTS`.

  Returns:
    The client's data; each split in file order.

  Raises:
    InputError: If `name` is not a client, the data folder or a file is
      missing, or a file is malformed (see `read_queries`, `read_schema`).
  """
  check_client(name)
  return _load_client(text2sql_source.find_text2sql_dir(data_dir), name,
                      with_values, folds)


def load_clients(
    names: Sequence[str] = CLIENTS,
    *,
    data_dir: Optional[str] = None,
    with_values: bool = True,
    folds: FoldSplit = PAPER_FOLDS,
) -> dict[str, Text2SqlClientData]:
  """`load_client` for each name, in order; the folder is looked up once."""
  for name in names:
    check_client(name)
  folder = text2sql_source.find_text2sql_dir(data_dir)
  return {name: _load_client(folder, name, with_values, folds)
          for name in names}
