"""Text-to-SQL metrics: exact match and execution accuracy, per client.

The Lorar paper (Zhang et al., ACL 2023; see `shared/docs/lorar.md`) scores a
parser by exact match (EM) of the predicted SQL string with the gold SQL
string, values included, on every client's test set, and summarises the
clients by MacroAvg (mean of the per-client EMs) and MicroAvg (correct over
all test examples). `exact_match` and `ClientAccuracies` implement that.

Execution accuracy is an extra for the clients whose SQLite database exists
(geography and restaurants in `shared/data/text2sql`): gold and predicted SQL
are run on a read-only connection (`sql_execution`, which also shows the
restaurants table under the gold SQL's column names, so all 378 of its gold
queries run) and their results compared (see `execution_match`). On
geography 872 of 877 gold queries run (5 are not valid SQLite; see
`tests/tff_nlp/metrics`). `gold_execution_counts` reports these counts per client and
split, and `Text2SqlEvaluation.gold_errors` counts gold failures so that they
stay visible next to the accuracy.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import re
import sqlite3
from typing import Any, Optional

from tff_nlp.metrics import sql_execution

# A SQL string literal: '...' or "...", a doubled quote escaping it.
_STRING_LITERAL = r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\""
# String literals, parentheses and the words ORDER BY: enough to find the
# top-level ORDER BY clause.
_ORDER_BY_TOKENS = re.compile(
    _STRING_LITERAL + r"|[()]|\bORDER\s+BY\b", re.IGNORECASE)
# A string literal, or the text up to the next quote (an unclosed quote and
# what follows it count as text).
_LITERAL_OR_TEXT = re.compile(_STRING_LITERAL + r"""|[^'"]+|['"]""")


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


def lowercase_sql(sql: str) -> str:
  """`sql` with everything outside its string literals lower-cased.

  Keywords, table and column names and aliases become lower case; the
  values in quotes ('...' or "...", a doubled quote escaping it) keep their
  case. SQLite ignores the case of keywords and names (and `LIKE` the case
  of ASCII letters), so a query runs the same either way. What
  `text2sql_task.DataConfig.lowercase_sql` trains on and scores: a
  tokenizer trained on natural language splits `COURSEalias0.NAME` into
  many more pieces than `coursealias0.name`.

  Examples: `SELECT T.NAME FROM CITY AS T WHERE T.X = "New York"` becomes
  `select t.name from city as t where t.x = "New York"`; an unclosed quote
  leaves the rest as it is: `A = "Bb` becomes `a = "Bb`.

  Args:
    sql: A SQL string.

  Returns:
    The lower-cased string, as long as `sql`.
  """
  parts = []
  quoted = False
  for match in _LITERAL_OR_TEXT.finditer(sql):
    part = match.group()
    # From an unclosed quote on, nothing is lower-cased: it may be a value.
    quoted = quoted or part in ('"', "'")
    parts.append(part if quoted or part[0] in '\'"' else part.lower())
  return ''.join(parts)


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


def results_equal(predicted: Sequence[sql_execution.Row],
                  gold: Sequence[sql_execution.Row], *,
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
    timeout_seconds: float = sql_execution.DEFAULT_TIMEOUT_SECONDS,
    max_rows: int = sql_execution.DEFAULT_MAX_ROWS,
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
  `tests/tff_nlp/metrics/text2sql_test.py` would show it).

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
    gold_rows = sql_execution.execute_select(connection, gold,
                                             timeout_seconds=timeout_seconds,
                                             max_rows=max_rows)
  except sql_execution.QueryError:
    return False
  return _prediction_matches(connection, prediction, gold, gold_rows,
                             timeout_seconds=timeout_seconds,
                             max_rows=max_rows)


def _prediction_matches(
    connection: sqlite3.Connection, prediction: str, gold: str,
    gold_rows: Sequence[sql_execution.Row], *, timeout_seconds: float,
    max_rows: int) -> bool:
  """`execution_match` given the rows of the gold query."""
  try:
    predicted_rows = sql_execution.execute_select(
        connection, prediction, timeout_seconds=timeout_seconds,
        max_rows=max_rows)
  except sql_execution.QueryError:
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
  connection = sql_execution.connect_read_only(db_path)
  try:
    gold_results = {}  # Gold SQL -> rows, or None if it failed.
    outcomes = []
    for prediction, gold in pairs:
      if gold not in gold_results:
        try:
          gold_results[gold] = sql_execution.execute_select(
              connection, gold, timeout_seconds=timeout_seconds,
              max_rows=max_rows)
        except sql_execution.QueryError:
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
    timeout_seconds: float = sql_execution.DEFAULT_TIMEOUT_SECONDS,
    max_rows: int = sql_execution.DEFAULT_MAX_ROWS,
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
    timeout_seconds: float = sql_execution.DEFAULT_TIMEOUT_SECONDS,
    max_rows: int = sql_execution.DEFAULT_MAX_ROWS,
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
    connection = sql_execution.connect_read_only(
        db_paths[client], gold_column_names=gold_column_names)
    try:
      failures = {}  # Gold SQL -> error message, or None if it ran.
      counts[client] = {}
      for split in splits:
        golds = [example.sql for example in getattr(client_data, split)]
        for gold in golds:
          if gold not in failures:
            try:
              sql_execution.execute_select(connection, gold,
                                           timeout_seconds=timeout_seconds,
                                           max_rows=max_rows)
              failures[gold] = None
            except sql_execution.QueryError as e:
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
