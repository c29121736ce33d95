"""Running SQL read-only on the text-to-SQL clients' SQLite databases.

`connect_read_only` opens a client's database so that no statement can
modify it, and `execute_select` runs one SELECT with a time and row limit;
`tff_nlp.metrics.text2sql` compares predicted and gold results with them
(execution accuracy). Upstream marks those databases "untested". The
restaurants database names the primary key `RESTAURANT.RESTAURANT_ID` where
the gold SQL and `restaurants-schema.csv` say `RESTAURANT.ID`, so as a file
only 24 of its 378 gold queries run; `connect_read_only` therefore shows that
table under the schema's column names (`_GOLD_COLUMN_NAMES`), and all 378
run.
"""

from collections.abc import Mapping
import glob
import os
import re
import sqlite3
import time
from typing import Any
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
