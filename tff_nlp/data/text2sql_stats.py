"""Statistics of the text-to-SQL clients: the Lorar paper's Table 1.

Zhang et al. (ACL 2023) describe each client by its split sizes and, after
Finegan-Dollak et al. (ACL 2018, Table 1), by redundancy and complexity
measures computed "with table names, column names and variables
anonymised". Here, exactly:

- Counted over the whole upstream file: every query and every sentence,
  advising's `exclude` sentences included (the split sizes are the only
  split-dependent numbers). One query counts once, through its canonical SQL
  (`text2sql.Query.canonical_sql`, variable names in place).
- `questions_per_unique_query`: sentences / queries.
- `sql_pattern_count`: distinct patterns of the canonical SQL. A pattern is
  the SQL with
  * every variable replaced by `VALUE`, with the string constant holding
    it, so that string and number values look alike (`"city_name0"`,
    `"%area0%"` and `number0` all become `VALUE`);
  * every table name replaced by `TABLE`, also inside its aliases, whose
    number is kept (`COURSE AS COURSEalias1` -> `TABLE AS TABLEalias1`: it
    distinguishes a second use of a table from the first);
  * every column after an alias replaced by `COLUMN`
    (`COURSEalias0.NUMBER` -> `TABLEalias0.COLUMN`, `DERIVED_TABLEalias0.DAY`
    -> `DERIVED_TABLEalias0.COLUMN`).
  Aliases of derived tables and fields (`DERIVED_TABLEalias0`,
  `DERIVED_FIELDalias1`) are structure, not names, and are kept, as are
  constants that are not variables (`LIMIT 1`, `SEMESTER = "WN"`) and the
  single column written without an alias (geography's `RIVER_NAME`).
- `unique_tables_per_query_*`: per query, the number of distinct tables its
  aliases name (a table used twice counts once); mean and max over queries.
- `selects_per_query_*`: per query, the number of `SELECT` keywords outside
  string constants (1 + nested queries); mean and max over queries.
"""

import dataclasses
import re
from typing import Any, Mapping, Optional, Sequence

from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source

_DERIVED = ('DERIVED_TABLE', 'DERIVED_FIELD')
_ALIAS = re.compile(r'\b([A-Z][A-Z0-9_]*)alias([0-9]+)')
_COLUMN = re.compile(r'\b((?:TABLE|DERIVED_TABLE)alias[0-9]+)\.'
                     r'(?!DERIVED_FIELDalias[0-9])[A-Z_][A-Z0-9_]*')
_TABLE_BEFORE_ALIAS = re.compile(r'\b[A-Z][A-Z0-9_]* AS TABLEalias')
_QUOTED = re.compile(r'"[^"]*"')
_SELECT = re.compile(r'\bSELECT\b')

# The fields of `ClientStats` in table order, with the markdown headers.
_COLUMNS = (
    ('train', 'Train'),
    ('dev', 'Dev'),
    ('test', 'Test'),
    ('questions', 'Questions'),
    ('unique_queries', 'Unique queries'),
    ('sql_pattern_count', 'SQL patterns'),
    ('questions_per_unique_query', 'Questions / unique query'),
    ('unique_tables_per_query_mean', 'Unique tables / query (mean)'),
    ('unique_tables_per_query_max', 'Unique tables / query (max)'),
    ('selects_per_query_mean', 'SELECTs / query (mean)'),
    ('selects_per_query_max', 'SELECTs / query (max)'),
)


@dataclasses.dataclass(frozen=True)
class ClientStats:
  """One client's row of Table 1; see the module docstring for definitions.

  Attributes:
    train: Training examples (the paper's split).
    dev: Development examples.
    test: Test examples.
    questions: Sentences in the file (every split, `exclude` included).
    unique_queries: Queries in the file.
    sql_pattern_count: Distinct anonymised canonical SQL patterns.
    questions_per_unique_query: `questions / unique_queries`.
    unique_tables_per_query_mean: Mean distinct tables per query.
    unique_tables_per_query_max: Max distinct tables per query.
    selects_per_query_mean: Mean `SELECT`s per query.
    selects_per_query_max: Max `SELECT`s per query.
  """

  train: int
  dev: int
  test: int
  questions: int
  unique_queries: int
  sql_pattern_count: int
  questions_per_unique_query: float
  unique_tables_per_query_mean: float
  unique_tables_per_query_max: int
  selects_per_query_mean: float
  selects_per_query_max: int


def sql_pattern(sql: str) -> str:
  """The anonymised pattern of an SQL string (with variable names)."""
  def value(match):
    if text2sql.VARIABLE_PATTERN.search(match.group(0)):
      return 'VALUE'
    return match.group(0)

  pattern = _QUOTED.sub(value, text2sql.clean_sql(sql))
  pattern = text2sql.VARIABLE_PATTERN.sub('VALUE', pattern)

  def alias(match):
    if match.group(1) in _DERIVED:
      return match.group(0)
    return f'TABLEalias{match.group(2)}'

  pattern = _ALIAS.sub(alias, pattern)
  pattern = _COLUMN.sub(r'\1.COLUMN', pattern)
  return _TABLE_BEFORE_ALIAS.sub('TABLE AS TABLEalias', pattern)


def tables_of(sql: str) -> frozenset[str]:
  """The distinct tables an SQL string's aliases name."""
  return frozenset(match.group(1) for match in _ALIAS.finditer(sql)
                   if match.group(1) not in _DERIVED)


def count_selects(sql: str) -> int:
  """`SELECT` keywords of an SQL string outside string constants."""
  return len(_SELECT.findall(_QUOTED.sub('""', sql)))


def compute_stats(queries: Sequence[text2sql.Query],
                  split_sizes: Mapping[str, int]) -> ClientStats:
  """The statistics of a client's queries.

  Args:
    queries: All queries of the client's file.
    split_sizes: The number of examples of 'train', 'dev' and 'test'.

  Returns:
    The client's `ClientStats`.

  Raises:
    ValueError: If `queries` is empty.
  """
  if not queries:
    raise ValueError('No queries.')
  canonical = [query.canonical_sql for query in queries]
  tables = [len(tables_of(sql)) for sql in canonical]
  selects = [count_selects(sql) for sql in canonical]
  questions = sum(len(query.sentences) for query in queries)
  return ClientStats(
      train=split_sizes['train'],
      dev=split_sizes['dev'],
      test=split_sizes['test'],
      questions=questions,
      unique_queries=len(queries),
      sql_pattern_count=len({sql_pattern(sql) for sql in canonical}),
      questions_per_unique_query=questions / len(queries),
      unique_tables_per_query_mean=sum(tables) / len(tables),
      unique_tables_per_query_max=max(tables),
      selects_per_query_mean=sum(selects) / len(selects),
      selects_per_query_max=max(selects),
  )


def _client_stats(folder: str, name: str,
                  folds: text2sql.FoldSplit) -> ClientStats:
  queries = text2sql.read_client_queries(folder, name)
  sizes = dict.fromkeys(text2sql.SPLITS, 0)
  for query in queries:
    for sentence in query.sentences:
      split = text2sql.split_of(name, sentence, folds)
      if split is not None:
        sizes[split] += 1
  return compute_stats(queries, sizes)


def load_stats(
    names: Sequence[str] = text2sql.CLIENTS,
    *,
    data_dir: Optional[str] = None,
    folds: text2sql.FoldSplit = text2sql.PAPER_FOLDS,
) -> dict[str, ClientStats]:
  """Reads the clients' files and computes their statistics.

  Args:
    names: Clients of `text2sql.CLIENTS`, in the order wanted.
    data_dir: The `shared/data` folder; see
      `text2sql_source.find_text2sql_dir` (which may download the data).
    folds: The fold choice of the small clients (for the split sizes).

  Returns:
    Client name -> its `ClientStats`, in `names` order.

  Raises:
    InputError: If a name is not a client, or the data is missing or
      malformed (see `text2sql.read_queries`).
  """
  for name in names:
    text2sql.check_client(name)
  folder = text2sql_source.find_text2sql_dir(data_dir)
  return {name: _client_stats(folder, name, folds) for name in names}


def to_json_dict(stats: Mapping[str, ClientStats],
                 digits: int = 4) -> dict[str, dict[str, Any]]:
  """Client -> field -> value, means rounded to `digits` decimals."""
  return {
      name: {field: round(value, digits) if isinstance(value, float)
             else value
             for field, value in dataclasses.asdict(row).items()}
      for name, row in stats.items()
  }


def to_markdown(stats: Mapping[str, ClientStats]) -> str:
  """Table 1 of the paper as markdown: one row per client."""
  lines = [
      'Text-to-SQL clients (Zhang et al., ACL 2023, Table 1). Train/Dev/Test:',
      "the paper's question split. Other columns over the whole upstream",
      'file, per unique query (its canonical SQL), with table names, column',
      'names and variables anonymised for the patterns (see',
      '`tff_nlp.data.text2sql_stats`).',
      '',
      '| Client | ' + ' | '.join(header for _, header in _COLUMNS) + ' |',
      '|---|' + '---:|' * len(_COLUMNS),
  ]
  for name, row in stats.items():
    cells = []
    for field, _ in _COLUMNS:
      value = getattr(row, field)
      cells.append(f'{value:.2f}' if isinstance(value, float) else str(value))
    lines.append(f'| {name} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines) + '\n'
