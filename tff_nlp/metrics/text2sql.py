"""Text-to-SQL metrics: exact match and execution accuracy, per client.

The Lorar paper (Zhang et al., ACL 2023; see `shared/docs/lorar.md`) scores a
parser by exact match (EM) of the predicted SQL string with the gold SQL
string, values included, on every client's test set, and summarises the
clients by MacroAvg (mean of the per-client EMs) and MicroAvg (correct over
all test examples). `exact_match` and `ClientAccuracies` implement that.

Execution accuracy is an extra for the clients whose SQLite database exists
(geography and restaurants in `shared/data/text2sql`): gold and predicted SQL
are run on a read-only connection and their results compared (see
`execution_match`). Upstream marks those databases "untested". The
restaurants database names the primary key `RESTAURANT.RESTAURANT_ID` where
the gold SQL and `restaurants-schema.csv` say `RESTAURANT.ID`, so as a file
only 24 of its 378 gold queries run; `connect_read_only` therefore shows that
table under the schema's column names (`_GOLD_COLUMN_NAMES`), and all 378
run. On geography 872 of 877 gold queries run (5 are not valid SQLite; see
`tests/metrics`). `gold_execution_counts` reports these counts per client and
split, and `Text2SqlEvaluation.gold_errors` counts gold failures so that they
stay visible next to the accuracy.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import glob
import os
import re
import sqlite3
import time
from typing import Any, Optional
import urllib.parse

from tff_nlp import errors

# A predicted query may be arbitrarily expensive (e.g. a cross join of two
# 10^4-row tables); the gold queries of geography and restaurants all run in
# a few milliseconds.
DEFAULT_TIMEOUT_SECONDS = 5.0
# Bounds the memory of one result; the largest table of the two databases
# has under 10^4 rows and the largest gold result about 600.
DEFAULT_MAX_ROWS = 100_000
# Longest string or blob a query may build (SQLite's default is 10^9 bytes,
# e.g. `SELECT zeroblob(1e9)`); the databases' values are short names.
_MAX_VALUE_BYTES = 1_000_000
# SQLite VM instructions between two checks of the deadline.
_PROGRESS_INSTRUCTIONS = 1000

# What the authorizer lets a statement do: read tables and call functions.
# Anything else (writes, ATTACH, PRAGMA, transactions, ...) is refused when
# the statement is compiled, before it runs.
_ALLOWED_ACTIONS = frozenset({
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    sqlite3.SQLITE_RECURSIVE,
})
_SELECT_START = re.compile(r'\s*\(*\s*SELECT\b', re.IGNORECASE)
# String literals ('...' or "...", a doubled quote escapes it), parentheses
# and the words ORDER BY: enough to find the top-level ORDER BY clause.
_ORDER_BY_TOKENS = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|[()]|\bORDER\s+BY\b", re.IGNORECASE)
_DB_SUFFIX = '-db.sqlite'

# Columns that a client's database file names differently from its gold SQL
# and `<client>-schema.csv`: client -> table -> {name in the file: name in
# the gold SQL}. `connect_read_only` shows each such table under the gold
# names (see `_show_gold_column_names`). Upstream's restaurants database
# (`restaurants-db.added-in-2020.sqlite`) calls the primary key of RESTAURANT
# `RESTAURANT_ID`, while 354 of the 378 gold queries join on
# `RESTAURANTalias0.ID = LOCATIONalias0.RESTAURANT_ID` ("no such column:
# RESTAURANTalias0.ID"). Every other table and column of the two schema
# files is in the databases under the same name, except geography's table
# ROAD, which its file lacks and no gold query uses.
_GOLD_COLUMN_NAMES = {
    'restaurants': {'RESTAURANT': {'RESTAURANT_ID': 'ID'}},
}

Row = tuple[Any, ...]


def normalize_sql(sql: str) -> str:
  """The SQL string exact match compares: whitespace runs made one space.

  Normalised: every run of whitespace (as `str.split` sees it: spaces, tabs,
  newlines, ...) becomes one space, and leading and trailing whitespace is
  removed. The gold SQL of the benchmark separates tokens by single spaces
  (one advising query has a double space), so this only forgives layout.

  Not normalised, on purpose, to keep the paper's strict string match: case
  (keywords, identifiers and values alike), spaces next to punctuation
  (`COUNT( * )` differs from `COUNT(*)`), quote characters, aliases, the
  trailing ` ;`, and anything else that needs SQL parsing. Whitespace inside
  quoted values is collapsed too: telling values apart would need a SQL
  tokenizer, and no gold value holds a whitespace run.

  Args:
    sql: A SQL string.

  Returns:
    The normalised string.
  """
  return ' '.join(sql.split())


def exact_match(prediction: str, gold: str) -> bool:
  """Whether `prediction` equals `gold` after `normalize_sql`.

  Args:
    prediction: The predicted SQL, with values.
    gold: The gold SQL, with values.

  Returns:
    True if the normalised strings are equal.
  """
  return normalize_sql(prediction) == normalize_sql(gold)


@dataclasses.dataclass(frozen=True)
class ClientAccuracies:
  """Correct and total examples of every client, e.g. for EM.

  Attributes:
    clients: The client names, in order; distinct, at least one.
    correct: Per client, the number of correct examples.
    totals: Per client, the number of examples (positive).
  """

  clients: tuple[str, ...]
  correct: tuple[int, ...]
  totals: tuple[int, ...]

  def __post_init__(self):
    if not len(self.clients) == len(self.correct) == len(self.totals):
      raise ValueError(
          f'clients, correct and totals must have the same length, got '
          f'{len(self.clients)}, {len(self.correct)}, {len(self.totals)}.')
    if not self.clients:
      raise ValueError('Need at least one client.')
    if len(set(self.clients)) != len(self.clients):
      raise ValueError(f'Client names repeat: {list(self.clients)}.')
    for client, correct, total in zip(self.clients, self.correct,
                                      self.totals):
      # An accuracy on no examples is undefined, and MacroAvg would have to
      # either skip the client or count it as 0.
      if total < 1 or not 0 <= correct <= total:
        raise ValueError(
            f'Client {client!r}: need 0 <= correct <= total and total >= 1, '
            f'got {correct} correct of {total}.')

  @classmethod
  def from_outcomes(
      cls, outcomes: Mapping[str, Sequence[bool]]) -> 'ClientAccuracies':
    """From each client's per-example outcomes (True: correct), in order."""
    return cls(
        clients=tuple(outcomes),
        correct=tuple(sum(bool(x) for x in o) for o in outcomes.values()),
        totals=tuple(len(o) for o in outcomes.values()),
    )

  @property
  def per_client(self) -> dict[str, float]:
    """Accuracy of every client, in order."""
    return {name: c / n
            for name, c, n in zip(self.clients, self.correct, self.totals)}

  @property
  def macro(self) -> float:
    """MacroAvg: the unweighted mean of the per-client accuracies."""
    return sum(self.per_client.values()) / len(self.clients)

  @property
  def micro(self) -> float:
    """MicroAvg: correct over all clients' examples."""
    return sum(self.correct) / sum(self.totals)

  def to_json(self) -> dict[str, Any]:
    """A JSON-ready dict: counts and accuracy per client, the averages."""
    return collections.OrderedDict(
        per_client=collections.OrderedDict(
            (name, collections.OrderedDict(
                correct=c, total=n, accuracy=c / n))
            for name, c, n in zip(self.clients, self.correct, self.totals)),
        macro_avg=self.macro,
        micro_avg=self.micro,
    )


class QueryError(Exception):
  """A query without a result: not a single SELECT, or it failed in SQLite.

  Failing includes a syntax error, an unknown table or column, running
  longer than the timeout and returning more rows than allowed.
  """


def find_databases(text2sql_dir: str) -> dict[str, str]:
  """The SQLite databases in a `text2sql` data folder, by client name.

  Args:
    text2sql_dir: The `shared/data/text2sql` folder.

  Returns:
    Client name (e.g. 'geography') to the path of `<client>-db.sqlite`, for
    the clients that have one, sorted by name.
  """
  paths = sorted(glob.glob(os.path.join(text2sql_dir, '*' + _DB_SUFFIX)))
  return {os.path.basename(p)[:-len(_DB_SUFFIX)]: p for p in paths}


def _authorize(action, arg1, arg2, database, trigger):
  del arg1, arg2, database, trigger
  return sqlite3.SQLITE_OK if action in _ALLOWED_ACTIONS else (
      sqlite3.SQLITE_DENY)


def _quote(identifier: str) -> str:
  return '"' + identifier.replace('"', '""') + '"'


def _show_gold_column_names(connection: sqlite3.Connection,
                            tables: Mapping[str, Mapping[str, str]]) -> None:
  """Shows tables under their gold column names, as TEMP views.

  A view `temp.<table>` selects every column of `main.<table>` in file
  order, renamed where `tables[<table>]` says. Unqualified names look in
  `temp` before `main` (SQLite's name resolution), so the gold SQL's
  `RESTAURANT AS RESTAURANTalias0` reads the view; SQLite flattens such a
  view into the query, which still uses the file's primary-key index.

  Why views and not a renamed copy: the file stays opened `mode=ro` and
  nothing is copied (an in-memory copy with `ALTER TABLE ... RENAME
  COLUMN` would be a writable database, guarded by the authorizer alone);
  only the connection's private `temp` schema gets the views. The view
  shows only the gold names (`ID`, not also `RESTAURANT_ID`), as the schema
  a parser sees (`<client>-schema.csv`) does. A table that does not have
  the file's name of a column, or already has the gold name (a corrected
  database), is left as it is.

  Must run before the authorizer is set, which refuses CREATE.

  Args:
    connection: A connection to the database file, as `main`.
    tables: Table -> {column name in the file: name in the gold SQL}.
  """
  for table, renames in tables.items():
    columns = [row[1] for row in connection.execute(
        f'PRAGMA main.table_info({_quote(table)})')]
    if (not set(renames) <= set(columns)
        or set(renames.values()) & set(columns)):
      continue
    select = ' , '.join(
        f'{_quote(c)} AS {_quote(renames[c])}' if c in renames else _quote(c)
        for c in columns)
    connection.execute(f'CREATE TEMP VIEW {_quote(table)} AS SELECT '
                       f'{select} FROM main.{_quote(table)}')


def connect_read_only(db_path: str, *,
                      gold_column_names: bool = True) -> sqlite3.Connection:
  """Opens a SQLite database so that no statement can modify it.

  Two guards: the file is opened with `mode=ro` (SQLite refuses every
  write), and an authorizer refuses to compile anything but reads and
  function calls (so no ATTACH of another file, no PRAGMA, no CREATE or
  DROP of a view). Strings and blobs are limited to 10^6 bytes, so that a
  query cannot build a huge one. The caller closes the connection.

  A client's database whose column names differ from its gold SQL (the
  file `<client>-db.sqlite` of a client in `_GOLD_COLUMN_NAMES`:
  restaurants) gets read-only views under the gold names, in the
  connection's in-memory `temp` schema; the file is not changed.

  Args:
    db_path: Path of an existing SQLite database file.
    gold_column_names: Whether to show the tables of `_GOLD_COLUMN_NAMES`
      under the gold SQL's column names; False gives the file as it is.

  Returns:
    The connection.

  Raises:
    InputError: If the file does not exist (`mode=ro` never creates one).
  """
  if not os.path.isfile(db_path):
    raise errors.InputError(f'SQLite database {db_path!r} does not exist.')
  uri = 'file:{}?mode=ro'.format(
      urllib.parse.quote(os.path.realpath(db_path)))
  connection = sqlite3.connect(uri, uri=True)
  name = os.path.basename(db_path)
  client = name[:-len(_DB_SUFFIX)] if name.endswith(_DB_SUFFIX) else None
  if gold_column_names and client in _GOLD_COLUMN_NAMES:
    # The views' definitions stay in memory, never in a temporary file.
    connection.execute('PRAGMA temp_store = MEMORY')
    _show_gold_column_names(connection, _GOLD_COLUMN_NAMES[client])
  connection.set_authorizer(_authorize)
  connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
  return connection


def execute_select(
    connection: sqlite3.Connection,
    sql: str,
    *,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> list[Row]:
  """Runs one SELECT statement and returns its rows.

  Args:
    connection: From `connect_read_only`.
    sql: One statement starting with SELECT (optionally after opening
      parentheses); a trailing `;` is allowed.
    timeout_seconds: Wall-clock limit for running and fetching.
    max_rows: More rows than this is an error.

  Returns:
    The rows, in the order SQLite returned them.

  Raises:
    QueryError: If `sql` is not a single SELECT, or it fails, times out or
      returns more than `max_rows` rows.
  """
  # The authorizer would refuse writes anyway; this says why more clearly
  # and also refuses EXPLAIN SELECT, which reads, but returns a query plan.
  if not _SELECT_START.match(sql):
    raise QueryError(f'Not a SELECT statement: {sql[:80]!r}.')
  deadline = time.monotonic() + timeout_seconds
  # A true return value makes SQLite abort the statement ("interrupted").
  connection.set_progress_handler(lambda: time.monotonic() > deadline,
                                  _PROGRESS_INSTRUCTIONS)
  try:
    cursor = connection.execute(sql)
    rows = []
    while chunk := cursor.fetchmany(1000):
      rows.extend(chunk)
      if len(rows) > max_rows:
        raise QueryError(f'More than {max_rows} rows.')
    return rows
  except (sqlite3.Error, sqlite3.Warning) as e:
    # sqlite3.Error covers syntax errors, unknown names, "not authorized",
    # "interrupted" and "You can only execute one statement at a time".
    message = 'timed out' if time.monotonic() > deadline else str(e)
    raise QueryError(message) from e
  finally:
    connection.set_progress_handler(None, _PROGRESS_INSTRUCTIONS)


def has_top_level_order_by(sql: str) -> bool:
  """Whether the outermost query has an ORDER BY clause.

  An ORDER BY inside a subquery (e.g. `IN ( SELECT ... ORDER BY ... LIMIT 1
  )`) or inside a string literal does not order the result.

  Args:
    sql: A SQL statement.

  Returns:
    True if ORDER BY occurs outside all parentheses and string literals.
  """
  depth = 0
  for match in _ORDER_BY_TOKENS.finditer(sql):
    token = match.group()
    if token == '(':
      depth += 1
    elif token == ')':
      depth = max(depth - 1, 0)
    elif token[0] not in '\'"' and depth == 0:
      return True
  return False


def results_equal(predicted: Sequence[Row], gold: Sequence[Row], *,
                  ordered: bool) -> bool:
  """Compares two query results row by row.

  Rows are compared as tuples, so the column order matters but column names
  do not; values compare as in Python (1 == 1.0).

  Args:
    predicted: Rows of the predicted query.
    gold: Rows of the gold query.
    ordered: Compare as lists (the gold query fixes the order) rather than
      as multisets (duplicates count, order does not).

  Returns:
    Whether the results are equal.
  """
  if ordered:
    return list(predicted) == list(gold)
  return collections.Counter(predicted) == collections.Counter(gold)


def execution_match(
    connection: sqlite3.Connection,
    prediction: str,
    gold: str,
    *,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> bool:
  """Whether the predicted SQL returns what the gold SQL returns.

  The results are compared as ordered lists if the gold query has a
  top-level ORDER BY (`has_top_level_order_by`), else as multisets of rows
  (see `results_equal`). A prediction that raises `QueryError` in
  `execute_select` is wrong; so is every prediction when the gold query
  itself fails.

  The benchmark's gold SQL quotes values with double quotes (`= "texas"`),
  which standard SQL reads as identifiers; SQLite falls back to a string
  when no column has that name. SQLite builds compiled with SQLITE_DQS=0
  lack that fallback and fail every such query (the gold-query counts in
  `tests/metrics/text2sql_test.py` would show it).

  Args:
    connection: From `connect_read_only`.
    prediction: The predicted SQL, with values.
    gold: The gold SQL, with values.
    timeout_seconds: Limit for each of the two queries.
    max_rows: Row limit for each of the two queries.

  Returns:
    True if both queries run and their results are equal.
  """
  try:
    gold_rows = execute_select(connection, gold,
                               timeout_seconds=timeout_seconds,
                               max_rows=max_rows)
  except QueryError:
    return False
  return _prediction_matches(connection, prediction, gold, gold_rows,
                             timeout_seconds=timeout_seconds,
                             max_rows=max_rows)


def _prediction_matches(
    connection: sqlite3.Connection, prediction: str, gold: str,
    gold_rows: Sequence[Row], *, timeout_seconds: float,
    max_rows: int) -> bool:
  """`execution_match` given the rows of the gold query."""
  try:
    predicted_rows = execute_select(connection, prediction,
                                    timeout_seconds=timeout_seconds,
                                    max_rows=max_rows)
  except QueryError:
    return False
  return results_equal(predicted_rows, gold_rows,
                       ordered=has_top_level_order_by(gold))


@dataclasses.dataclass(frozen=True)
class Text2SqlEvaluation:
  """EM of every client and execution accuracy where a database exists.

  Attributes:
    exact_match: EM of every client, in the order given.
    execution: Execution accuracy of the clients with a database, in the
      same order; None if no client has one.
    gold_errors: For each client with a database, how many of its examples
      have a gold query that failed (`QueryError`); they count as wrong in
      `execution`.
  """

  exact_match: ClientAccuracies
  execution: Optional[ClientAccuracies]
  gold_errors: Mapping[str, int]

  def to_json(self) -> dict[str, Any]:
    """A JSON-ready dict of the three attributes."""
    return collections.OrderedDict(
        exact_match=self.exact_match.to_json(),
        execution=self.execution.to_json() if self.execution else None,
        gold_errors=dict(self.gold_errors),
    )


def _execution_outcomes(
    db_path: str, pairs: Sequence[tuple[str, str]], *,
    timeout_seconds: float, max_rows: int) -> tuple[list[bool], int]:
  """Execution outcomes of (prediction, gold) pairs and gold failures."""
  connection = connect_read_only(db_path)
  try:
    gold_results = {}  # Gold SQL -> rows, or None if it failed.
    outcomes = []
    for prediction, gold in pairs:
      if gold not in gold_results:
        try:
          gold_results[gold] = execute_select(
              connection, gold, timeout_seconds=timeout_seconds,
              max_rows=max_rows)
        except QueryError:
          gold_results[gold] = None
      gold_rows = gold_results[gold]
      outcomes.append(gold_rows is not None and _prediction_matches(
          connection, prediction, gold, gold_rows,
          timeout_seconds=timeout_seconds, max_rows=max_rows))
  finally:
    connection.close()
  gold_failures = sum(gold_results[gold] is None for _, gold in pairs)
  return outcomes, gold_failures


def evaluate(
    examples: Mapping[str, Sequence[tuple[str, str]]],
    *,
    db_paths: Optional[Mapping[str, str]] = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> Text2SqlEvaluation:
  """EM of every client, and execution accuracy of those with a database.

  Execution accuracy is `execution_match` of every pair, except that each
  distinct gold query runs once.

  Args:
    examples: Client name to its (prediction, gold) SQL pairs, with values;
      every client needs at least one pair.
    db_paths: Client name to its SQLite database (e.g. from
      `find_databases`), for the clients to evaluate by execution. Clients
      not in `examples` are ignored, so that `find_databases` can be passed
      for a subset of the clients.
    timeout_seconds: Limit for each query.
    max_rows: Row limit for each query.

  Returns:
    The `Text2SqlEvaluation`, clients in the order of `examples`.

  Raises:
    ValueError: If a client has no examples.
    InputError: If a database file does not exist.
  """
  db_paths = db_paths or {}
  exact = ClientAccuracies.from_outcomes({
      client: [exact_match(p, g) for p, g in pairs]
      for client, pairs in examples.items()})
  execution_outcomes = {}
  gold_errors = {}
  for client, pairs in examples.items():
    if client in db_paths:
      execution_outcomes[client], gold_errors[client] = _execution_outcomes(
          db_paths[client], pairs, timeout_seconds=timeout_seconds,
          max_rows=max_rows)
  return Text2SqlEvaluation(
      exact_match=exact,
      execution=(ClientAccuracies.from_outcomes(execution_outcomes)
                 if execution_outcomes else None),
      gold_errors=gold_errors,
  )


@dataclasses.dataclass(frozen=True)
class GoldExecution:
  """How many gold queries of one split of one client execute.

  Attributes:
    questions: Examples (questions) of the split.
    executed: Of them, those whose gold query runs without `QueryError`.
    errors: Error message -> number of examples whose gold query fails
      with it, most frequent first.
  """

  questions: int
  executed: int
  errors: Mapping[str, int]

  def to_json(self) -> dict[str, Any]:
    """A JSON-ready dict of the three attributes."""
    return collections.OrderedDict(questions=self.questions,
                                   executed=self.executed,
                                   errors=dict(self.errors))


def gold_execution_counts(
    clients: Mapping[str, Any],
    db_paths: Mapping[str, str],
    *,
    splits: Sequence[str] = ('train', 'dev', 'test'),
    gold_column_names: bool = True,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> dict[str, dict[str, GoldExecution]]:
  """Per client with a database and split: how many gold queries execute.

  Each distinct gold SQL runs once, on a `connect_read_only` connection.

  Args:
    clients: Client name -> its data, e.g. from
      `tff_nlp.data.text2sql.load_clients` (with values, its default): an
      object whose attribute `<split>` is a sequence of examples with the
      gold SQL as `.sql`.
    db_paths: Client name -> its SQLite database (`find_databases`).
      Clients not in both mappings are skipped.
    splits: The splits to run, in order.
    gold_column_names: Passed to `connect_read_only`; False counts what
      runs on the database files as they are.
    timeout_seconds: Limit for each query.
    max_rows: Row limit for each query.

  Returns:
    Client (in the order of `clients`) -> split -> `GoldExecution`.

  Raises:
    InputError: If a database file does not exist.
  """
  counts = {}
  for client, client_data in clients.items():
    if client not in db_paths:
      continue
    connection = connect_read_only(db_paths[client],
                                   gold_column_names=gold_column_names)
    try:
      failures = {}  # Gold SQL -> error message, or None if it ran.
      counts[client] = {}
      for split in splits:
        golds = [example.sql for example in getattr(client_data, split)]
        for gold in golds:
          if gold not in failures:
            try:
              execute_select(connection, gold,
                             timeout_seconds=timeout_seconds,
                             max_rows=max_rows)
              failures[gold] = None
            except QueryError as e:
              failures[gold] = str(e)
        errors_ = collections.Counter(
            failures[g] for g in golds if failures[g] is not None)
        counts[client][split] = GoldExecution(
            questions=len(golds),
            executed=sum(failures[g] is None for g in golds),
            errors=dict(errors_.most_common()))
    finally:
      connection.close()
  return counts
