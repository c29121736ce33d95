"""Tests of the text-to-SQL reader: values, splits, schema, errors, data."""

import collections
import json
import os
import re

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import data
from tff_nlp import errors
from tff_nlp.data import text2sql

_SCHEMA_CSV = (
    'Table Name, Field Name, Is Primary Key, Is Foreign Key, Type\n'
    'city, city_name, y, n, varchar(255)\n'
    'city, population, n, n, int(11)\n'
    '-, -, -, -, -\n'
    'river, river_name, y, n, "varchar(255)"\n'
    '-, -, -, -, -\n'
    'city, state_name, n, y, varchar(255)\n'
)

# A question-split client (its file is named geography.json) covering the
# value rules; the expected texts below are derived by hand from it.
_QUERIES = [
    {  # Query 0: a quoted variable and an SQL-only one.
        'sql': ['SELECT CITYalias0.CITY_NAME FROM CITY AS CITYalias0 WHERE '
                'CITYalias0.STATE_NAME = "state_name0"  AND\n'
                'CITYalias0.POPULATION > population0 ;'],
        'variables': [
            {'name': 'state_name0', 'example': 'texas', 'type': 'x'},
            {'name': 'population0', 'example': '150000'},
        ],
        'sentences': [
            {'text': ' cities  in state_name0 ', 'question-split': 'train',
             'variables': {'state_name0': 'new york'}},
            {'text': 'big cities of state_name0', 'question-split': 'exclude',
             'variables': {'state_name0': 'ohio'}},
            # An empty value falls back to the example, 'texas'.
            {'text': 'cities of state_name0', 'question-split': 'test',
             'variables': {'state_name0': ''}},
        ],
    },
    {  # Query 1: the first SQL uses an undeclared variable; the second pads
       # a quoted variable and uses it in a LIKE pattern.
        'sql': ['SELECT RIVERalias0.LENGTH FROM RIVER AS RIVERalias0 WHERE '
                'RIVERalias0.RIVER_NAME = "company_name0" ;',
                'SELECT RIVERalias0.LENGTH FROM RIVER AS RIVERalias0 WHERE '
                'RIVERalias0.RIVER_NAME = " river_name0 " OR '
                'RIVERalias0.RIVER_NAME LIKE "%river_name0%" ;'],
        'variables': [{'name': 'river_name0', 'example': 'ohio'}],
        'sentences': [
            {'text': 'how long is the river_name0 , not the non-river_name0 ?',
             'question-split': 'dev',
             'variables': {'river_name0': 'mississippi'}},
        ],
    },
    {  # Query 2: `name0` is inside `city_name0`; a value that looks like a
       # variable name is not replaced again.
        'sql': ['SELECT CITYalias0.STATE_NAME FROM CITY AS CITYalias0 WHERE '
                'CITYalias0.CITY_NAME = "city_name0" AND CITYalias0.NAME = '
                '"name0" ;'],
        'variables': [{'name': 'name0', 'example': 'joe'},
                      {'name': 'city_name0', 'example': 'austin'}],
        'sentences': [
            {'text': 'name0 in city_name0', 'question-split': 'train',
             'variables': {'name0': 'city_name0 cafe',
                           'city_name0': 'boston'}},
        ],
    },
]

_Q0_SQL = ('SELECT CITYalias0.CITY_NAME FROM CITY AS CITYalias0 WHERE '
           'CITYalias0.STATE_NAME = "{}" AND CITYalias0.POPULATION > {} ;')
_Q1_SQL = ('SELECT RIVERalias0.LENGTH FROM RIVER AS RIVERalias0 WHERE '
           'RIVERalias0.RIVER_NAME = "{0}" OR RIVERalias0.RIVER_NAME LIKE '
           '"%{0}%" ;')
_Q2_SQL = ('SELECT CITYalias0.STATE_NAME FROM CITY AS CITYalias0 WHERE '
           'CITYalias0.CITY_NAME = "{}" AND CITYalias0.NAME = "{}" ;')


def _write(folder: str, name: str, content) -> str:
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, name)
  if not isinstance(content, (str, bytes)):
    content = json.dumps(content, indent=1)
  with open(path, 'wb') as f:
    f.write(content.encode('utf-8') if isinstance(content, str) else content)
  return path


def _make_client(root: str, name: str, queries, schema=_SCHEMA_CSV) -> str:
  """Writes `<root>/text2sql/<name>.json` and its schema; returns root."""
  folder = os.path.join(root, 'text2sql')
  _write(folder, f'{name}.json', queries)
  if schema is not None:
    _write(folder, f'{name}-schema.csv', schema)
  return root


def _fold_queries(num_sentences_per_fold=1):
  """restaurants-like queries: sentence k of query k // 5 is in fold k."""
  return [{
      'sql': [f'SELECT CITYalias0.POPULATION FROM CITY AS CITYalias0 WHERE '
              f'CITYalias0.CITY_NAME = "city_name0" ;'],
      'variables': [{'name': 'city_name0', 'example': 'paris'}],
      'sentences': [
          {'text': f'population of city_name0 {k}',
           'question-split': str(k),
           'variables': {'city_name0': f'c{k}'}}
          for k in range(5 * q, 5 * q + 5)
          for _ in range(num_sentences_per_fold)
      ],
  } for q in range(2)]


class ValuesExecutionTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.root = _make_client(self.create_tempdir().full_path, 'geography',
                             _QUERIES)

  def test_values_filled_in_question_and_sql(self):
    client = data.load_client('geography', data_dir=self.root)
    self.assertEqual(client.name, 'geography')
    self.assertEqual(
        [(e.question, e.sql, e.split, e.query_index, e.sentence_index)
         for e in client.train],
        [('cities in new york', _Q0_SQL.format('new york', '150000'),
          'train', 0, 0),
         ('city_name0 cafe in boston',
          _Q2_SQL.format('boston', 'city_name0 cafe'), 'train', 2, 0)])
    # The second SQL of query 1 is canonical; quotes unpadded.
    self.assertEqual(
        [(e.question, e.sql) for e in client.dev],
        [('how long is the mississippi , not the non-mississippi ?',
          _Q1_SQL.format('mississippi'))])
    self.assertEqual([(e.question, e.sql) for e in client.test],
                     [('cities of texas', _Q0_SQL.format('texas', '150000'))])
    self.assertTrue(all(e.client == 'geography'
                        for e in client.train + client.dev + client.test))

  def test_anonymised_keeps_variable_names(self):
    client = data.load_client('geography', data_dir=self.root,
                              with_values=False)
    self.assertEqual(
        [(e.question, e.sql) for e in client.train],
        [('cities in state_name0',
          _Q0_SQL.format('state_name0', 'population0')),
         ('name0 in city_name0', _Q2_SQL.format('city_name0', 'name0'))])
    self.assertEqual([e.sql for e in client.dev],
                     [_Q1_SQL.format('river_name0')])

  def test_query_records(self):
    queries = data.read_queries(
        os.path.join(self.root, 'text2sql', 'geography.json'),
        ('train', 'dev', 'test', 'exclude'))
    self.assertEqual([q.canonical_index for q in queries], [0, 1, 0])
    self.assertEqual(queries[0].variables,
                     {'state_name0': 'texas', 'population0': '150000'})
    self.assertEqual([s.split for s in queries[0].sentences],
                     ['train', 'exclude', 'test'])


class SplitsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_paper_folds_and_their_counts(self):
    root = _make_client(self.create_tempdir().full_path, 'restaurants',
                        _fold_queries(num_sentences_per_fold=2))
    client = data.load_client('restaurants', data_dir=root)
    # 2 sentences per fold: folds 0-5 -> 12, 6-7 -> 4, 8-9 -> 4.
    self.assertEqual((len(client.train), len(client.dev), len(client.test)),
                     (12, 4, 4))
    self.assertEqual(sorted({e.question[-1] for e in client.dev}), ['6', '7'])
    self.assertEqual(client.test[0].question, 'population of c8 8')

  def test_other_folds(self):
    root = _make_client(self.create_tempdir().full_path, 'yelp',
                        _fold_queries())
    folds = data.FoldSplit(train=(4, 5, 6, 7, 8, 9), dev=(0, 1), test=(2, 3))
    client = data.load_client('yelp', data_dir=root, folds=folds)
    # Fold k is sentence k % 5 of query k // 5.
    self.assertEqual([(e.query_index, e.sentence_index) for e in client.dev],
                     [(0, 0), (0, 1)])
    self.assertEqual([(e.query_index, e.sentence_index) for e in client.test],
                     [(0, 2), (0, 3)])
    self.assertLen(client.train, 6)

  def test_paper_folds_constant(self):
    self.assertEqual(data.PAPER_FOLDS,
                     data.FoldSplit(train=(0, 1, 2, 3, 4, 5), dev=(6, 7),
                                    test=(8, 9)))

  def test_seeded_folds_are_a_deterministic_partition(self):
    for seed in range(5):
      folds = data.seeded_folds(seed)
      self.assertEqual(folds, data.seeded_folds(seed))
      self.assertEqual((len(folds.train), len(folds.dev), len(folds.test)),
                       (6, 2, 2))
      self.assertEqual(sorted(folds.train + folds.dev + folds.test),
                       list(range(10)))
    self.assertLen({data.seeded_folds(seed) for seed in range(5)}, 5)

  @parameterized.named_parameters(
      ('missing_fold', (0, 1, 2, 3, 4, 5), (6, 7), (8,)),
      ('repeated_fold', (0, 1, 2, 3, 4, 5), (6, 7), (7, 8, 9)),
  )
  def test_bad_fold_split(self, train, dev, test):
    with self.assertRaisesRegex(errors.InputError, 'exactly once'):
      data.FoldSplit(train=train, dev=dev, test=test)


class SchemaExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_read_and_serialize(self):
    path = _write(self.create_tempdir().full_path, 's.csv', _SCHEMA_CSV)
    schema = data.read_schema(path)
    # Upper-cased; `city` seen again after `river` joins its first block.
    self.assertEqual(schema, data.Schema(tables=(
        data.Table('CITY', ('CITY_NAME', 'POPULATION', 'STATE_NAME')),
        data.Table('RIVER', ('RIVER_NAME',)))))
    self.assertEqual(data.serialize_schema(schema),
                     'CITY : CITY_NAME , POPULATION , STATE_NAME | '
                     'RIVER : RIVER_NAME')
    self.assertEqual(data.serialize_schema(schema, columns=False),
                     'CITY | RIVER')
    self.assertEqual(data.model_input('rivers ?', schema, columns=False),
                     'rivers ? | CITY | RIVER')
    self.assertEqual(data.model_input('rivers ?', schema),
                     'rivers ? | CITY : CITY_NAME , POPULATION , STATE_NAME'
                     ' | RIVER : RIVER_NAME')

  @parameterized.named_parameters(
      ('bad_header', 'Table, Column\na, b\n', r's\.csv:1: header'),
      ('empty_column', 'Table Name, Field Name\na, b\nc, \n',
       r's\.csv:3: expected "table, column'),
      ('one_field', 'Table Name, Field Name\na\n', r's\.csv:2: expected'),
      ('duplicate', 'Table Name, Field Name\na, b\nA, B\n',
       r's\.csv:3: column B of table A appears twice'),
      ('empty', '', r's\.csv: empty file'),
      ('no_tables', 'Table Name, Field Name\n-, -\n', r's\.csv: no tables'),
  )
  def test_bad_schema(self, content, expected):
    path = _write(self.create_tempdir().full_path, 's.csv', content)
    with self.assertRaisesRegex(errors.InputError, expected):
      data.read_schema(path)

  def test_missing_schema_file(self):
    root = _make_client(self.create_tempdir().full_path, 'geography',
                        _QUERIES, schema=None)
    with self.assertRaisesRegex(errors.InputError,
                                r'geography-schema\.csv: file not found'):
      data.load_client('geography', data_dir=root)


def _query(**changes):
  query = {'sql': ['SELECT A.X FROM A ;'], 'variables': [],
           'sentences': [{'text': 'x ?', 'question-split': 'train',
                          'variables': {}}]}
  query.update(changes)
  return query


def _sentence(**changes):
  sentence = {'text': 'x ?', 'question-split': 'train', 'variables': {}}
  sentence.update(changes)
  return sentence


def _without(record, key):
  return {k: v for k, v in record.items() if k != key}


class ErrorsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _load_error(self, content, name='geography'):
    root = _make_client(self.create_tempdir().full_path, name, content)
    path = os.path.join(root, 'text2sql', f'{name}.json')
    with self.assertRaises(errors.InputError) as cm:
      data.load_client(name, data_dir=root)
    return path, str(cm.exception)

  def test_malformed_json_names_file_and_position(self):
    path, message = self._load_error('[\n {"sql": ["S"],\n  oops}\n]')
    # The third line's third character starts the bad key.
    self.assertIn(f'{path}:3:3: invalid JSON', message)

  def test_top_level_not_a_list(self):
    path, message = self._load_error('{"sql": []}')
    self.assertIn(f'{path}: the top level is a dict; expected a JSON list',
                  message)

  @parameterized.named_parameters(
      ('sql', 1, 'sql', 'query 1: missing field "sql"'),
      ('variables', 1, 'variables', 'query 1: missing field "variables"'),
      ('sentences', 1, 'sentences', 'query 1: missing field "sentences"'),
  )
  def test_missing_query_field(self, index, field, expected):
    queries = [_query(), _query()]
    queries[index] = _without(queries[index], field)
    path, message = self._load_error(queries)
    self.assertIn(f'{path}: {expected}', message)

  @parameterized.named_parameters(
      ('text', 'text'), ('question_split', 'question-split'),
      ('variables', 'variables'))
  def test_missing_sentence_field(self, field):
    sentences = [_sentence(), _without(_sentence(), field)]
    path, message = self._load_error([_query(), _query(sentences=sentences)])
    self.assertIn(f'{path}: query 1, sentence 1: missing field "{field}"',
                  message)

  @parameterized.named_parameters(
      ('variable_name', _query(variables=[{'example': 'a'}]),
       'query 0, variable 0: missing field "name"'),
      ('sql_not_a_list', _query(sql='SELECT 1'),
       'query 0: field "sql" is a str; expected'),
      ('empty_sql', _query(sql=[]), 'query 0: field "sql" must be'),
      ('bad_variable_name', _query(variables=[{'name': 'City', 'example': ''}]),
       "query 0, variable 0: variable name 'City' is not lower-case"),
      ('empty_text', _query(sentences=[_sentence(text=' ')]),
       'query 0, sentence 0: empty "text"'),
      ('value_not_a_string',
       _query(sentences=[_sentence(variables={'year0': 1990})]),
       "query 0, sentence 0: value of variable 'year0' is a int"),
  )
  def test_malformed_field(self, query, expected):
    path, message = self._load_error([query])
    self.assertIn(f'{path}: {expected}', message)

  @parameterized.named_parameters(
      ('question_split_client', 'geography', '3',
       "['dev', 'exclude', 'test', 'train']"),
      ('fold_client', 'imdb', 'train', str([str(k) for k in range(10)])),
      ('fold_out_of_range', 'academic', '10',
       str([str(k) for k in range(10)])),
  )
  def test_unknown_split_value(self, name, value, expected):
    sentences = [_sentence(), _sentence(**{'question-split': value})]
    if name != 'geography':
      sentences[0]['question-split'] = '0'
    path, message = self._load_error(
        [_query(sentences=sentences[:1]), _query(sentences=sentences)], name)
    self.assertIn(f'{path}: query 1, sentence 1: unknown question-split '
                  f'{value!r}; expected one of {expected}', message)

  def test_question_variable_without_value(self):
    query = _query(variables=[{'name': 'city0', 'example': ''}],
                   sentences=[_sentence(text='in city0 ?',
                                        variables={'city0': ''})])
    path, message = self._load_error([query])
    self.assertIn(f"{path}: query 0, sentence 0: variable 'city0' in the "
                  'question has no value', message)

  def test_no_sql_with_values(self):
    query = _query(sql=['SELECT 1 WHERE A.B = "city0" ;',
                        'SELECT 2 WHERE A.B = city0 ;'])
    path, message = self._load_error([query])
    self.assertIn(f"{path}: query 0: no SQL has a value for each of its "
                  "variables (sql 0 uses 'city0', without a value in "
                  'sentence 0)', message)

  def test_missing_file_names_path(self):
    root = self.create_tempdir().full_path
    os.makedirs(os.path.join(root, 'text2sql'))
    path = os.path.join(root, 'text2sql', 'atis.json')
    with self.assertRaisesRegex(errors.InputError,
                                f'{re.escape(path)}: file not found'):
      data.load_client('atis', data_dir=root)

  def test_unknown_client(self):
    with self.assertRaisesRegex(errors.InputError,
                                "Unknown text-to-SQL client 'spider'"):
      data.load_clients(['atis', 'spider'],
                        data_dir=self.create_tempdir().full_path)


# The paper's (lorar.md) train/dev/test per client. Ours are equal except
# imdb: 79/26/26, as upstream's fold 0 holds 14 questions and folds 1-9 13
# (see the module docstring of tff_nlp.data.text2sql).
_PAPER_COUNTS = {
    'advising': (2629, 229, 573),
    'atis': (4347, 486, 447),
    'geography': (549, 49, 279),
    'restaurants': (228, 76, 74),
    'scholar': (499, 100, 218),
    'academic': (120, 38, 38),
    'imdb': (78, 26, 26),
    'yelp': (78, 26, 24),
}


class RealDataExecutionTest(tf.test.TestCase):
  """All eight clients of shared/data (TFF_NLP_DATA_DIR or the default)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.clients = data.load_clients()
    cls.anonymised = data.load_clients(with_values=False)
    cls.folder = data.find_text2sql_dir()

  def test_split_counts(self):
    counts = {name: (len(c.train), len(c.dev), len(c.test))
              for name, c in self.clients.items()}
    self.assertEqual(list(counts), list(data.text2sql.CLIENTS))
    expected = dict(_PAPER_COUNTS, imdb=(79, 26, 26))
    self.assertEqual(counts, expected)

  def test_every_example_is_complete_and_values_are_filled(self):
    leftovers = []
    for name, client in self.clients.items():
      with open(os.path.join(self.folder, f'{name}.json')) as f:
        raw = json.load(f)
      # Every variable name declared anywhere in the file.
      names = {v['name'] for q in raw for v in q['variables']}
      names |= {n for q in raw for s in q['sentences'] for n in s['variables']}
      declared = re.compile(r'(?<![A-Za-z0-9_])(?:' + '|'.join(names) +
                            r')(?![A-Za-z0-9_])')
      for split in text2sql.SPLITS:
        for e in getattr(client, split):
          self.assertEqual((e.client, e.split), (name, split))
          self.assertTrue(e.question.strip() and e.sql.strip(), e)
          self.assertEqual(e.sql, ' '.join(e.sql.split()))
          for text in (e.question, e.sql):
            for match in declared.findall(text):
              leftovers.append((name, e.query_index, e.sentence_index, match))
    # The one upstream slip: atis query 599, sentence 0, says
    # "after departure_time2 o'clock" but declares no departure_time2.
    self.assertEqual(leftovers, [('atis', 599, 0, 'departure_time2')])

  def test_anonymised_has_the_same_examples(self):
    for name, client in self.anonymised.items():
      for split in text2sql.SPLITS:
        ours = [(e.query_index, e.sentence_index)
                for e in getattr(client, split)]
        theirs = [(e.query_index, e.sentence_index)
                  for e in getattr(self.clients[name], split)]
        self.assertEqual(ours, theirs)

  def test_hand_checked_examples(self):
    # geography.json, query 0: sentences 0-2 are dev, 9 the first train one
    # ("what is the biggest city in state_name0", state_name0 = nebraska).
    example = self.clients['geography'].train[0]
    self.assertEqual((example.query_index, example.sentence_index), (0, 9))
    self.assertEqual(example.question, 'what is the biggest city in nebraska')
    self.assertEqual(
        example.sql,
        'SELECT CITYalias0.CITY_NAME FROM CITY AS CITYalias0 WHERE '
        'CITYalias0.POPULATION = ( SELECT MAX( CITYalias1.POPULATION ) FROM '
        'CITY AS CITYalias1 WHERE CITYalias1.STATE_NAME = "nebraska" ) AND '
        'CITYalias0.STATE_NAME = "nebraska" ;')
    anonymised = self.anonymised['geography'].train[0]
    self.assertEqual(anonymised.question,
                     'what is the biggest city in state_name0')
    self.assertIn('STATE_NAME = "state_name0" ;', anonymised.sql)
    # imdb query 27 (the only sentence, fold 6 -> dev): its first SQL uses
    # the undeclared company_name0, so the second one (PRODUCER) is used.
    by_query = {e.query_index: e for e in self.clients['imdb'].dev}
    self.assertEqual(by_query[27].question,
                     'Find all movies produced by " Walt Disney " after 2010')
    self.assertIn('PRODUCERalias0.NAME = "Walt Disney"', by_query[27].sql)
    self.assertIn('RELEASE_YEAR > 2010', by_query[27].sql)

  def test_real_schema(self):
    # restaurants-schema.csv lists RESTAURANT (5 columns), LOCATION (4) and
    # GEOGRAPHIC (3).
    self.assertEqual(
        data.serialize_schema(self.clients['restaurants'].schema),
        'RESTAURANT : ID , NAME , FOOD_TYPE , CITY_NAME , RATING | LOCATION '
        ': RESTAURANT_ID , HOUSE_NUMBER , STREET_NAME , CITY_NAME | '
        'GEOGRAPHIC : CITY_NAME , COUNTY , REGION')
    # Tables per schema: `cut -d, -f1 <name>-schema.csv | sort -u`, minus
    # the header and "-".
    self.assertEqual(
        {n: len(c.schema.tables) for n, c in self.clients.items()},
        {'advising': 18, 'atis': 25, 'geography': 8, 'restaurants': 3,
         'scholar': 12, 'academic': 15, 'imdb': 16, 'yelp': 7})
    # Every table an SQL query names is in its client's schema.
    for name, client in self.clients.items():
      tables = {t.name for t in client.schema.tables}
      used = collections.Counter(
          t for e in client.train + client.dev + client.test
          for t in re.findall(r'\b([A-Z][A-Z_]*)alias[0-9]', e.sql)
          if not t.startswith('DERIVED_'))
      self.assertLessEqual(set(used), tables, name)


if __name__ == '__main__':
  tf.test.main()
