"""Tests of the text-to-SQL metrics: exact match, averages, execution."""

import hashlib
import json
import os
import re
import sqlite3

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import data
from tff_nlp import errors
from tff_nlp.metrics import sql_execution
from tff_nlp.metrics import text2sql

# Cities with distinct populations (so ORDER BY population has no ties) and
# two rows per state (so DISTINCT changes the multiset).
_CITIES = (('a', 'x', 3), ('b', 'x', 1), ('c', 'y', 2), ('d', 'y', 4))
_GOLD_ORDERED = 'SELECT name FROM city ORDER BY population DESC ;'
_FAILING = 'SELECT nme FROM city ;'


def _make_db(directory: str, num_numbers: int = 0) -> str:
  """A small writable database: `city` (`_CITIES`), `number` (0, 1, ...)."""
  path = os.path.join(directory, 'toy-db.sqlite')
  connection = sqlite3.connect(path)
  with connection:
    connection.execute(
        'CREATE TABLE city (name TEXT, state TEXT, population INT)')
    connection.executemany('INSERT INTO city VALUES (?, ?, ?)', _CITIES)
    connection.execute('CREATE TABLE number (n INT)')
    connection.executemany('INSERT INTO number VALUES (?)',
                           [(i,) for i in range(num_numbers)])
  connection.close()
  return path


def _sha256(path: str) -> str:
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


def _text2sql_dir() -> str:
  return os.path.join(data.find_data_dir(), 'text2sql')


def _fill_values(query: dict, sentence: dict) -> str:
  """The canonical gold SQL of one question, with its values filled in.

  A variable's value is the sentence's (`sentence['variables']`), else the
  query-level variable's `example` (for variables only in the SQL, or with
  an empty value). Names are replaced as whole identifiers: `name0` must
  not match inside `city_name0` (restaurants has both in one query).

  Args:
    query: One entry of `<dataset>.json`.
    sentence: One of its `sentences`.

  Returns:
    `query['sql'][0]` with every variable name replaced by its value.
  """
  values = {v['name']: v['example'] for v in query['variables']}
  values.update((k, v) for k, v in sentence['variables'].items() if v)
  sql = query['sql'][0]
  for name, value in values.items():
    sql = re.sub(rf'(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])',
                 lambda _, v=value: v, sql)
  return sql


def _gold_pairs(client: str) -> list[tuple[str, str]]:
  """(gold, gold) for every question of `client`, all splits."""
  with open(os.path.join(_text2sql_dir(), f'{client}.json')) as f:
    queries = json.load(f)
  golds = [_fill_values(q, s) for q in queries for s in q['sentences']]
  return [(g, g) for g in golds]


class NormalizeSqlExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('unchanged', 'SELECT a FROM t ;', 'SELECT a FROM t ;'),
      ('space_runs', 'SELECT  a   FROM t ;', 'SELECT a FROM t ;'),
      ('ends', ' \tSELECT a FROM t ;\n', 'SELECT a FROM t ;'),
      ('tabs_newlines', 'SELECT a\n\tFROM t ;', 'SELECT a FROM t ;'),
      # The string-level rule also applies inside a quoted value.
      ('inside_value', 'WHERE a = "new  york"', 'WHERE a = "new york"'),
      ('case_kept', 'select A from T', 'select A from T'),
      ('punctuation_kept', 'COUNT(*)', 'COUNT(*)'),
      ('empty', '  ', ''),
  )
  def test_normalize_sql(self, sql, expected):
    self.assertEqual(text2sql.normalize_sql(sql), expected)


class LowercaseSqlExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('names_and_keywords', 'SELECT CITYalias0.NAME FROM CITY AS CITYalias0',
       'select cityalias0.name from city as cityalias0'),
      ('double_quoted_value', 'WHERE T.X = "New York" AND T.Y = 5',
       'where t.x = "New York" and t.y = 5'),
      ('single_quoted_value', "WHERE T.X = 'Ann Arbor'",
       "where t.x = 'Ann Arbor'"),
      # A doubled quote escapes a quote inside the value.
      ('escaped_quotes', 'A = \'It\'\'s B\' OR C = "Q""R" OR D',
       'a = \'It\'\'s B\' or c = "Q""R" or d'),
      ('other_quote_inside', 'A = "It\'s B" AND C', 'a = "It\'s B" and c'),
      # An unclosed quote: the rest may be a value, so it keeps its case.
      ('unclosed', 'SELECT A WHERE B = "Cc DD', 'select a where b = "Cc DD'),
      ('empty', '', ''),
      ('only_a_value', '"ABC"', '"ABC"'),
  )
  def test_lowercase_sql(self, sql, expected):
    self.assertEqual(text2sql.lowercase_sql(sql), expected)
    self.assertLen(text2sql.lowercase_sql(sql), len(sql))

  @parameterized.parameters('geography', 'restaurants')
  def test_gold_queries_run_the_same_lower_cased(self, client):
    # SQLite ignores the case of keywords and names: every gold query of
    # the client gives the same rows (or the same error) lower-cased.
    db_path = sql_execution.find_databases(_text2sql_dir())[client]
    connection = sql_execution.connect_read_only(db_path,
                                                 gold_column_names=True)
    self.addCleanup(connection.close)

    def outcome(sql):
      try:
        return sql_execution.execute_select(connection, sql)
      except sql_execution.QueryError as e:
        return type(e)

    golds = sorted({gold for gold, _ in _gold_pairs(client)})
    lowered = [text2sql.lowercase_sql(gold) for gold in golds]
    self.assertNotEqual(lowered, golds)
    self.assertEqual([outcome(sql) for sql in lowered],
                     [outcome(sql) for sql in golds])


class ExactMatchExecutionTest(tf.test.TestCase, parameterized.TestCase):

  _GOLD = 'SELECT COUNT( * ) FROM city AS c WHERE c.name = "austin" ;'

  @parameterized.named_parameters(
      ('identical', _GOLD, True),
      ('whitespace', '  SELECT COUNT( * )  FROM city AS c\nWHERE c.name = '
       '"austin" ;  ', True),
      ('keyword_case', _GOLD.replace('SELECT', 'select'), False),
      ('value_case', _GOLD.replace('austin', 'Austin'), False),
      ('punctuation_spacing', _GOLD.replace('COUNT( * )', 'COUNT(*)'), False),
      ('no_semicolon', _GOLD[:-2], False),
      ('quote_style', _GOLD.replace('"austin"', "'austin'"), False),
      ('other_value', _GOLD.replace('austin', 'dallas'), False),
  )
  def test_exact_match(self, prediction, expected):
    self.assertEqual(text2sql.exact_match(prediction, self._GOLD), expected)


class ClientAccuraciesExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_macro_and_micro(self):
    accuracies = text2sql.ClientAccuracies(
        clients=('a', 'b'), correct=(1, 3), totals=(2, 4))
    # EMs 1/2 and 3/4: MacroAvg (0.5 + 0.75) / 2 = 0.625; MicroAvg 4/6.
    self.assertEqual(accuracies.per_client, {'a': 0.5, 'b': 0.75})
    self.assertAlmostEqual(accuracies.macro, 0.625)
    self.assertAlmostEqual(accuracies.micro, 4 / 6)
    self.assertEqual(
        json.loads(json.dumps(accuracies.to_json())),
        {'per_client': {'a': {'correct': 1, 'total': 2, 'accuracy': 0.5},
                        'b': {'correct': 3, 'total': 4, 'accuracy': 0.75}},
         'macro_avg': 0.625, 'micro_avg': 4 / 6})

  def test_from_outcomes(self):
    accuracies = text2sql.ClientAccuracies.from_outcomes(
        {'b': [True, False, False], 'a': [True]})
    # Clients keep their order; 1 of 3 and 1 of 1 correct.
    self.assertEqual(accuracies, text2sql.ClientAccuracies(
        clients=('b', 'a'), correct=(1, 1), totals=(3, 1)))

  @parameterized.named_parameters(
      ('lengths', ('a', 'b'), (1,), (1, 1), 'same length'),
      ('no_clients', (), (), (), 'at least one client'),
      ('repeated', ('a', 'a'), (1, 1), (1, 1), 'repeat'),
      ('no_examples', ('a',), (0,), (0,), r"Client 'a'.*0 correct of 0"),
      ('too_many', ('a',), (3,), (2,), r"Client 'a'.*3 correct of 2"),
      ('negative', ('a',), (-1,), (2,), r"Client 'a'"),
  )
  def test_invalid(self, clients, correct, totals, message):
    with self.assertRaisesRegex(ValueError, message):
      text2sql.ClientAccuracies(clients=clients, correct=correct,
                                totals=totals)


class OrderByExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('none', 'SELECT a FROM t ;', False),
      ('top_level', 'SELECT a FROM t ORDER BY a DESC LIMIT 1 ;', True),
      ('lower_case', 'select a from t order  by a', True),
      ('subquery_only', 'SELECT a FROM t WHERE a IN ( SELECT a FROM t '
       'ORDER BY a LIMIT 1 ) ;', False),
      ('after_subquery', 'SELECT a FROM t WHERE a IN ( SELECT a FROM t ) '
       'ORDER BY a ;', True),
      ('in_string', 'SELECT a FROM t WHERE b = "x ) ORDER BY a" ;', False),
      ('in_single_quotes', "SELECT a FROM t WHERE b = 'ORDER BY' ;", False),
      ('column_name', 'SELECT border_by FROM t ;', False),
  )
  def test_has_top_level_order_by(self, sql, expected):
    self.assertEqual(text2sql.has_top_level_order_by(sql), expected)


class ExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.db_path = _make_db(self.create_tempdir().full_path, num_numbers=300)
    self.connection = sql_execution.connect_read_only(self.db_path)
    self.addCleanup(self.connection.close)

  @parameterized.named_parameters(
      ('same_query', _GOLD_ORDERED, _GOLD_ORDERED, True),
      # Gold without ORDER BY: rows compared as multisets.
      ('reordered_multiset', 'SELECT name FROM city ORDER BY name ;',
       'SELECT name FROM city ;', True),
      # Gold orders by population (d, a, c, b); by name is a, b, c, d.
      ('reordered_ordered', 'SELECT name FROM city ORDER BY name ;',
       _GOLD_ORDERED, False),
      # The gold's only ORDER BY is in a subquery: {a, d} in any order.
      ('order_in_subquery', 'SELECT name FROM city WHERE population >= 3 '
       'ORDER BY name DESC ;', 'SELECT name FROM city WHERE population IN ( '
       'SELECT population FROM city ORDER BY population DESC LIMIT 2 ) ;',
       True),
      # x, x, y, y against x, y: duplicates count.
      ('duplicates', 'SELECT DISTINCT state FROM city ;',
       'SELECT state FROM city ;', False),
      ('column_order', 'SELECT state , name FROM city ;',
       'SELECT name , state FROM city ;', False),
      ('column_names', 'SELECT name AS n FROM city ;',
       'SELECT name FROM city ;', True),
      # Values compare as in Python: 4 == 4.0.
      ('int_float', 'SELECT MAX( population ) * 1.0 FROM city ;',
       'SELECT MAX( population ) FROM city ;', True),
      # SQLite reads an unknown "identifier" as a string (as the gold does).
      ('double_quoted_value', "SELECT name FROM city WHERE state = 'y' ;",
       'SELECT name FROM city WHERE state = "y" ;', True),
      ('both_empty', 'SELECT name FROM city WHERE population > 9 ;',
       'SELECT name FROM city WHERE name = "z" ;', True),
      ('wrong_rows', 'SELECT name FROM city WHERE state = "x" ;',
       'SELECT name FROM city WHERE state = "y" ;', False),
      ('syntax_error', 'SELECT name FROM city WHERE ;',
       'SELECT name FROM city ;', False),
      ('unknown_column', _FAILING, 'SELECT name FROM city ;', False),
      ('gold_fails', _FAILING, _FAILING, False),
      ('not_select', 'DELETE FROM city ;', 'SELECT name FROM city ;', False),
  )
  def test_execution_match(self, prediction, gold, expected):
    self.assertEqual(
        text2sql.execution_match(self.connection, prediction, gold), expected)

  def test_rows(self):
    self.assertEqual(
        sql_execution.execute_select(self.connection, _GOLD_ORDERED),
        [('d',), ('a',), ('c',), ('b',)])

  @parameterized.named_parameters(
      ('syntax', 'SELECT FROM ;', 'syntax error'),
      ('unknown_table', 'SELECT * FROM town ;', 'no such table'),
      ('two_statements', 'SELECT 1 ; SELECT 2 ;', 'one statement'),
      ('max_rows', 'SELECT * FROM number ;', 'More than 100 rows'),
      ('huge_value', 'SELECT zeroblob( 2000000 ) ;', 'too big'),
  )
  def test_query_errors(self, sql, message):
    with self.assertRaisesRegex(sql_execution.QueryError, message):
      sql_execution.execute_select(self.connection, sql, max_rows=100)

  def test_timeout(self):
    # 300^3 = 2.7e7 joined rows: seconds of work, stopped after 50 ms.
    with self.assertRaisesRegex(sql_execution.QueryError, 'timed out'):
      sql_execution.execute_select(
          self.connection,
          'SELECT COUNT( * ) FROM number AS a , number AS b , number AS c ;',
          timeout_seconds=0.05)
    # The progress handler is gone: a later query runs normally.
    self.assertEqual(
        sql_execution.execute_select(self.connection,
                                     'SELECT COUNT( * ) FROM city ;'), [(4,)])

  @parameterized.named_parameters(
      ('delete', 'DELETE FROM city ;'),
      ('drop', 'DROP TABLE city ;'),
      ('update', 'UPDATE city SET population = 0 ;'),
      ('insert', 'INSERT INTO city VALUES ( "e" , "z" , 5 ) ;'),
      ('create', 'CREATE TABLE t ( a INT ) ;'),
      ('attach', "ATTACH DATABASE 'other.sqlite' AS other ;"),
      ('pragma', 'PRAGMA journal_mode = WAL ;'),
      ('vacuum', "VACUUM INTO 'copy.sqlite' ;"),
      ('after_select', 'SELECT 1 ; DROP TABLE city ;'),
      ('with_cte', 'WITH c AS ( SELECT 1 ) DELETE FROM city ;'),
  )
  def test_never_modifies_the_database(self, prediction):
    directory = os.path.dirname(self.db_path)
    files = sorted(os.listdir(directory))
    digest = _sha256(self.db_path)
    with self.assertRaises(sql_execution.QueryError):
      sql_execution.execute_select(self.connection, prediction)
    self.assertFalse(text2sql.execution_match(
        self.connection, prediction, 'SELECT name FROM city ;'))
    # Past the SELECT check, the authorizer and mode=ro still refuse it.
    with self.assertRaises(sqlite3.DatabaseError):
      self.connection.execute(prediction.split(' ; ')[-1])
    self.assertEqual(_sha256(self.db_path), digest)
    self.assertEqual(sorted(os.listdir(directory)), files)

  def test_missing_database(self):
    missing = os.path.join(self.create_tempdir().full_path, 'none.sqlite')
    with self.assertRaisesRegex(errors.InputError, 'none.sqlite'):
      sql_execution.connect_read_only(missing)
    self.assertFalse(os.path.exists(missing))


class EvaluateExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_exact_match_and_execution(self):
    db_path = _make_db(self.create_tempdir().full_path)
    examples = {
        'toy': [
            # EM and EX.
            (' ' + _GOLD_ORDERED, _GOLD_ORDERED),
            # Not EM; EX (same rows, gold unordered).
            ('SELECT name FROM city ORDER BY name ;',
             'SELECT name FROM city ;'),
            # Neither.
            ('SELECT name FROM city ;', _GOLD_ORDERED),
            # EM, but the gold fails: not EX, one gold error.
            (_FAILING, _FAILING),
        ],
        'no_db': [('SELECT 1 ;', 'SELECT 1 ;'), ('SELECT 2 ;', 'SELECT 1 ;')],
    }
    evaluation = text2sql.evaluate(examples, db_paths={'toy': db_path})
    # EM: toy 2/4, no_db 1/2; execution only for toy: 2/4.
    self.assertEqual(evaluation.exact_match, text2sql.ClientAccuracies(
        clients=('toy', 'no_db'), correct=(2, 1), totals=(4, 2)))
    self.assertEqual(evaluation.execution, text2sql.ClientAccuracies(
        clients=('toy',), correct=(2,), totals=(4,)))
    self.assertEqual(evaluation.gold_errors, {'toy': 1})
    self.assertEqual(
        json.loads(json.dumps(evaluation.to_json()))['gold_errors'],
        {'toy': 1})

  def test_without_databases(self):
    evaluation = text2sql.evaluate({'a': [('x', 'x')]},
                                   db_paths={'other': '/nonexistent'})
    self.assertIsNone(evaluation.execution)
    self.assertEqual(evaluation.gold_errors, {})

  def test_client_without_examples(self):
    with self.assertRaisesRegex(ValueError, r"Client 'a'"):
      text2sql.evaluate({'a': []})

  def test_missing_database(self):
    with self.assertRaises(errors.InputError):
      text2sql.evaluate({'a': [('x', 'x')]},
                        db_paths={'a': '/nonexistent/a-db.sqlite'})


class UpstreamDatabasesExecutionTest(tf.test.TestCase, parameterized.TestCase):
  """The gold queries on the two databases upstream marks "untested"."""

  def test_find_databases(self):
    text2sql_dir = _text2sql_dir()
    self.assertEqual(sql_execution.find_databases(text2sql_dir), {
        'geography': os.path.join(text2sql_dir, 'geography-db.sqlite'),
        'restaurants': os.path.join(text2sql_dir, 'restaurants-db.sqlite'),
    })

  def test_fill_values(self):
    query = {'sql': ['SELECT 1 FROM r WHERE r.c = "city_name0" AND r.n = '
                     '"name0" AND r.t = "food_type0" ;'],
             'variables': [{'name': 'city_name0', 'example': 'sf'},
                           {'name': 'name0', 'example': 'x'},
                           {'name': 'food_type0', 'example': 'thai'}]}
    sentence = {'variables': {'name0': 'buttercup kitchen',
                              'city_name0': 'san francisco'}}
    # food_type0 is only in the SQL: its example fills it.
    self.assertEqual(
        _fill_values(query, sentence),
        'SELECT 1 FROM r WHERE r.c = "san francisco" AND r.n = '
        '"buttercup kitchen" AND r.t = "thai" ;')

  @parameterized.named_parameters(
      # geography: 877 questions (all splits); 5 gold queries fail: 4 select
      # DERIVED_TABLEalias1.STATE_NAME outside the subquery that defines it
      # ("no such column"), 1 uses MySQL's `> ALL ( ... )` (syntax error in
      # SQLite). 872 run, 844 of them return rows (test split: 277 of 279
      # run, 270 return rows). Computed once with this helper. The gold
      # column names change nothing there.
      ('geography', 'geography', True, 877, 872, 844),
      ('geography_file', 'geography', False, 877, 872, 844),
      # restaurants: 378 questions. With the gold column names all run, 183
      # with rows. The file as it is runs only 24 (all with rows): the other
      # 354 join on RESTAURANT.ID, which the file calls
      # RESTAURANT.RESTAURANT_ID ("no such column: RESTAURANTalias0.ID").
      ('restaurants', 'restaurants', True, 378, 378, 183),
      ('restaurants_file', 'restaurants', False, 378, 24, 24),
  )
  def test_gold_queries(self, client, gold_column_names, questions, run,
                        nonempty):
    pairs = _gold_pairs(client)
    db_path = sql_execution.find_databases(_text2sql_dir())[client]
    connection = sql_execution.connect_read_only(
        db_path, gold_column_names=gold_column_names)
    self.addCleanup(connection.close)
    results = []
    for gold, _ in pairs:
      try:
        results.append(sql_execution.execute_select(connection, gold))
      except sql_execution.QueryError:
        pass
    self.assertEqual(
        (len(pairs), len(results), sum(bool(rows) for rows in results)),
        (questions, run, nonempty))
    if gold_column_names:
      # Gold as prediction: every EM, EX exactly where the gold runs
      # (`evaluate` connects with the gold column names).
      evaluation = text2sql.evaluate({client: pairs},
                                     db_paths={client: db_path})
      self.assertEqual(evaluation.exact_match.correct, (questions,))
      self.assertEqual(evaluation.execution.correct, (run,))
      self.assertEqual(evaluation.gold_errors, {client: questions - run})


_NO_ID = 'no such column: RESTAURANTalias0.ID'



# Geography's gold queries: the same with or without the restaurants view
# (5 fail for reasons other than names: a derived table used outside its
# subquery, MySQL's `> ALL`).
_GEOGRAPHY_GOLD = {
    'train': (549, 547, {
        'no such column: DERIVED_TABLEalias1.STATE_NAME': 1,
        'near "ALL": syntax error': 1}),
    'dev': (49, 48, {
        'no such column: DERIVED_TABLEalias1.STATE_NAME': 1}),
    'test': (279, 277, {
        'no such column: DERIVED_TABLEalias1.STATE_NAME': 2}),
}


class GoldExecutionCountsExecutionTest(tf.test.TestCase,
                                       parameterized.TestCase):
  """`gold_execution_counts` on the paper's splits, and the renamed column."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.clients = data.load_clients(('geography', 'restaurants'),
                                    data_dir=data.find_data_dir())
    cls.db_paths = sql_execution.find_databases(_text2sql_dir())

  @parameterized.named_parameters(
      # (questions, executed, errors) per split; the same split sizes as
      # `test_gold_queries`' totals (geography 549 + 49 + 279 = 877,
      # restaurants 228 + 76 + 74 = 378).
      ('gold_names', True, {
          'geography': _GEOGRAPHY_GOLD,
          'restaurants': {'train': (228, 228, {}), 'dev': (76, 76, {}),
                          'test': (74, 74, {})},
      }),
      ('file_names', False, {
          'geography': _GEOGRAPHY_GOLD,
          'restaurants': {'train': (228, 13, {_NO_ID: 215}),
                          'dev': (76, 5, {_NO_ID: 71}),
                          'test': (74, 6, {_NO_ID: 68})},
      }),
  )
  def test_counts(self, gold_column_names, expected):
    counts = text2sql.gold_execution_counts(
        self.clients, self.db_paths, gold_column_names=gold_column_names)
    self.assertEqual(
        {client: {split: (c.questions, c.executed, dict(c.errors))
                  for split, c in splits.items()}
         for client, splits in counts.items()}, expected)
    self.assertEqual(list(counts), ['geography', 'restaurants'])
    json.dumps({client: {split: c.to_json() for split, c in splits.items()}
                for client, splits in counts.items()})

  def test_clients_without_database_skipped(self):
    counts = text2sql.gold_execution_counts(
        self.clients, {'restaurants': self.db_paths['restaurants']},
        splits=('test',))
    self.assertEqual(counts, {'restaurants': {'test': text2sql.GoldExecution(
        questions=74, executed=74, errors={})}})

  @parameterized.named_parameters(
      # Query 4, "Give me the best place in san francisco for french food
      # ?": the french restaurants of san francisco by rating are masa's
      # restaurant (648 bush) and the dining room at the ritz carlton (600
      # california), both 4.5, then la folie (4.3); checked by hand in the
      # file with RESTAURANT.RESTAURANT_ID = LOCATION.RESTAURANT_ID.
      ('best_french_sf',
       'SELECT LOCATIONalias0.HOUSE_NUMBER , RESTAURANTalias0.NAME FROM '
       'LOCATION AS LOCATIONalias0 , RESTAURANT AS RESTAURANTalias0 WHERE '
       'LOCATIONalias0.CITY_NAME = "san francisco" AND '
       'RESTAURANTalias0.FOOD_TYPE = "french" AND RESTAURANTalias0.ID = '
       'LOCATIONalias0.RESTAURANT_ID AND RESTAURANTalias0.RATING = ( SELECT '
       'MAX( RESTAURANTalias1.RATING ) FROM LOCATION AS LOCATIONalias1 , '
       'RESTAURANT AS RESTAURANTalias1 WHERE LOCATIONalias1.CITY_NAME = '
       '"san francisco" AND RESTAURANTalias1.FOOD_TYPE = "french" AND '
       'RESTAURANTalias1.ID = LOCATIONalias1.RESTAURANT_ID ) ;',
       [(600, 'the dining room at the ritz carlton'),
        (648, "masa's restaurant")]),
      # Query 9, "how many french restaurants are there in palo alto ?":
      # nouveau trattoria, l'amie donia and douce france.
      ('french_palo_alto',
       'SELECT COUNT( * ) FROM LOCATION AS LOCATIONalias0 , RESTAURANT AS '
       'RESTAURANTalias0 WHERE LOCATIONalias0.CITY_NAME = "palo alto" AND '
       'RESTAURANTalias0.FOOD_TYPE = "french" AND RESTAURANTalias0.ID = '
       'LOCATIONalias0.RESTAURANT_ID ;', [(3,)]),
  )
  def test_restaurants_gold_result(self, gold, expected):
    self.assertIn(gold, [e.sql for e in self.clients['restaurants'].test])
    connection = sql_execution.connect_read_only(self.db_paths['restaurants'])
    self.addCleanup(connection.close)
    self.assertCountEqual(sql_execution.execute_select(connection, gold),
                          expected)

  def test_restaurants_columns(self):
    connection = sql_execution.connect_read_only(self.db_paths['restaurants'])
    self.addCleanup(connection.close)
    # The schema's names, in the file's column order, and only those.
    self.assertEqual(
        [d[0] for d in connection.execute(
            'SELECT * FROM RESTAURANT LIMIT 1').description],
        ['ID', 'NAME', 'FOOD_TYPE', 'CITY_NAME', 'RATING'])
    with self.assertRaisesRegex(sql_execution.QueryError,
                                'no such column: RESTAURANT_ID'):
      sql_execution.execute_select(connection,
                                   'SELECT RESTAURANT_ID FROM RESTAURANT ;')
    self.assertEqual(
        sql_execution.execute_select(connection,
                                     'SELECT COUNT( * ) FROM RESTAURANT ;'),
        [(9589,)])

  @parameterized.named_parameters(
      ('drop_view', 'DROP VIEW RESTAURANT ;'),
      ('delete', 'DELETE FROM RESTAURANT ;'),
      ('delete_main', 'DELETE FROM main.RESTAURANT ;'),
      ('create_view', 'CREATE TEMP VIEW v AS SELECT 1 ;'),
      ('attach', "ATTACH DATABASE ':memory:' AS other ;"),
      ('pragma', 'PRAGMA temp_store = FILE ;'),
  )
  def test_restaurants_stays_read_only(self, statement):
    db_path = self.db_paths['restaurants']
    digest = _sha256(db_path)
    connection = sql_execution.connect_read_only(db_path)
    self.addCleanup(connection.close)
    with self.assertRaises(sqlite3.DatabaseError):
      connection.execute(statement)
    self.assertEqual(
        sql_execution.execute_select(connection,
                                     'SELECT COUNT( * ) FROM RESTAURANT ;'),
        [(9589,)])
    self.assertEqual(_sha256(db_path), digest)


class GoldColumnNamesExecutionTest(tf.test.TestCase, parameterized.TestCase):
  """The renaming on toy databases: only where the file needs it."""

  @parameterized.named_parameters(
      # A file named like restaurants' with the file's name: renamed.
      ('renamed', 'restaurants-db.sqlite', 'RESTAURANT_ID', True, ['ID']),
      ('file_names', 'restaurants-db.sqlite', 'RESTAURANT_ID', False,
       ['RESTAURANT_ID']),
      # Already the gold name (a corrected file): left as it is.
      ('already_gold', 'restaurants-db.sqlite', 'ID', True, ['ID']),
      # Another client's database: never renamed.
      ('other_client', 'geography-db.sqlite', 'RESTAURANT_ID', True,
       ['RESTAURANT_ID']),
  )
  def test_columns(self, file_name, column, gold_column_names, expected):
    path = os.path.join(self.create_tempdir().full_path, file_name)
    connection = sqlite3.connect(path)
    with connection:
      connection.execute(f'CREATE TABLE RESTAURANT ({column} INT)')
      connection.execute('INSERT INTO RESTAURANT VALUES (7)')
    connection.close()
    connection = sql_execution.connect_read_only(
        path, gold_column_names=gold_column_names)
    self.addCleanup(connection.close)
    cursor = connection.execute('SELECT * FROM RESTAURANT')
    self.assertEqual(cursor.fetchall(), [(7,)])
    self.assertEqual([d[0] for d in cursor.description], expected)


if __name__ == '__main__':
  tf.test.main()
