"""Property-based fuzz tests of the data loaders (hypothesis).

Two families, parameterized over the loaders:

*   Arbitrary bytes (and arbitrary JSON) in each kind of input file: the
    loader returns data that matches an independent reading of the bytes, or
    raises the documented `errors.InputError` naming the file; no other
    exception (UnicodeDecodeError, IndexError, KeyError, JSONDecodeError,
    TypeError, TensorFlow errors, ...) may escape.
*   Well-formed records of arbitrary Unicode text: the loader reads back
    exactly what was written (texts, labels, counts), or raises an
    `InputError` for what its docstring calls invalid (e.g. an empty label).
"""

import csv
import io
import json
import os
import re
import tempfile

from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import nmt
from tff_nlp.data import tags
from tff_nlp.data import text2sql
from tff_nlp.data import text_classification

_SETTINGS = hypothesis.settings(
    max_examples=50, deadline=None, derandomize=True,
    # differing_executors: each parameterized case is its own TestCase.
    suppress_health_check=[hypothesis.HealthCheck.differing_executors,
                           hypothesis.HealthCheck.too_slow,
                           hypothesis.HealthCheck.filter_too_much])

_BOM = '\ufeff'
_SCHEMA_CSV = ('Table Name, Field Name, Is Primary Key\n'
               'city, city_name, y\n')


def _write(directory, name, content):
  path = os.path.join(directory, name)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(content if isinstance(content, bytes) else content.encode('utf-8'))
  return path


def _chars(excluded):
  return st.characters(exclude_categories=('Cs',), exclude_characters=excluded)


# --- Independent readings of a file's bytes (the documented formats). ------


def _raw_lines(data: bytes) -> list[bytes]:
  lines = data.split(b'\n')
  if data.endswith(b'\n'):
    lines.pop()
  return lines


def _expected_sentences(data: bytes) -> list[str]:
  """nmt: UTF-8, optional BOM, lines lose '\\n' / '\\r\\n' only."""
  text = data.decode('utf-8').removeprefix(_BOM)
  lines = text.split('\n')
  if text.endswith('\n'):
    lines.pop()
  return [line.removesuffix('\r') for line in lines]


def _expected_tsv(data: bytes) -> tuple[list[str], list[str]]:
  """text_classification: `label<TAB>text` lines; CR and first BOM dropped."""
  labels, texts = [], []
  for i, raw in enumerate(_raw_lines(data)):
    raw = raw.removesuffix(b'\r')
    if i == 0:
      raw = raw.removeprefix(_BOM.encode('utf-8'))
    label, text = raw.decode('utf-8').split('\t')
    labels.append(label)
    texts.append(text)
  return labels, texts


def _expected_json(data: bytes):
  """text2sql: UTF-8 JSON, optional BOM."""
  return json.loads(data.decode('utf-8').removeprefix(_BOM))


def _assert_names_file(error: errors.InputError, *paths: str) -> None:
  message = str(error)
  assert any(re.search(re.escape(p) + r'(:\d+(:\d+)?)?:? ', message)
             or p in message for p in paths), message
  assert '\n' not in message.split(': ')[0], message


# --- 1. Arbitrary bytes in each kind of input file. ------------------------


def _bytes_nmt_read_parallel(d, data):
  source = _write(d, 'train.de', data)
  target = _write(d, 'train.en', data)
  corpus = nmt.read_parallel(source, target)
  expected = tuple(_expected_sentences(data))
  assert corpus.sources == corpus.targets == expected
  assert len(corpus) == len(_raw_lines(data)) >= 1
  assert all(s.strip() for s in expected)


def _bytes_nmt_load_domains(d, data):
  for file_name in nmt.domain_files():
    _write(d, os.path.join('custom', file_name), data)
  loaded = nmt.load_domains(d, max_train=2, seed=0)
  assert list(loaded) == ['custom']
  expected = tuple(_expected_sentences(data))
  assert loaded['custom']['dev'].sources == expected
  assert loaded['custom']['test'].targets == expected
  assert len(loaded['custom']['train']) == min(2, len(expected))


def _bytes_read_tsv(d, data):
  labels, texts = text_classification.read_tsv(_write(d, 'train.tsv', data))
  assert (labels, texts) == _expected_tsv(data)
  assert len(labels) == len(_raw_lines(data)) >= 1
  assert all(l.strip() for l in labels) and all(t.strip() for t in texts)


def _bytes_load_dataset(d, data):
  for split in ('train', 'test', 'dev'):
    _write(d, f'text_classification/toy/{split}.tsv', data)
  dataset = text_classification.load_dataset('toy', data_dir=d)
  labels, texts = _expected_tsv(data)
  assert dataset.label_names == tuple(sorted(set(labels)))
  for split in (dataset.train, dataset.test, dataset.dev):
    assert split.texts == tuple(texts)
    assert [dataset.label_names[i] for i in split.labels] == labels


def _bytes_read_queries(d, data):
  queries = text2sql.read_queries(_write(d, 'geography.json', data),
                                  text2sql._split_values('geography'))
  records = _expected_json(data)
  assert len(queries) == len(records)
  assert [len(q.sentences) for q in queries] == [
      len(r['sentences']) for r in records]


def _bytes_read_schema(d, data):
  schema = text2sql.read_schema(_write(d, 'geography-schema.csv', data))
  rows = list(csv.reader(
      io.StringIO(data.decode('utf-8').removeprefix(_BOM), newline=''),
      skipinitialspace=True))[1:]
  tables = {}
  for row in rows:
    fields = [f.strip() for f in row]
    if any(fields) and fields[0] != '-':
      tables.setdefault(fields[0].upper(), []).append(fields[1].upper())
  assert [(t.name, list(t.columns)) for t in schema.tables] == list(
      tables.items())


def _bytes_load_client(d, data):
  _write(d, 'text2sql/geography-schema.csv', _SCHEMA_CSV)
  _write(d, 'text2sql/geography.json', data)
  client = text2sql.load_client('geography', data_dir=d)
  records = _expected_json(data)
  kept = sum(s['question-split'] != 'exclude'
             for r in records for s in r['sentences'])
  assert len(client.train) + len(client.dev) + len(client.test) == kept


_BYTES_CASES = {
    'nmt.read_parallel': _bytes_nmt_read_parallel,
    'nmt.load_domains': _bytes_nmt_load_domains,
    'text_classification.read_tsv': _bytes_read_tsv,
    'text_classification.load_dataset': _bytes_load_dataset,
    'text2sql.read_queries': _bytes_read_queries,
    'text2sql.read_schema': _bytes_read_schema,
    'text2sql.load_client': _bytes_load_client,
}

# Random bytes, plus bytes near the formats (so that parsing gets further):
# lines of random text with TABs, CRs and BOMs, and random JSON documents.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(
        ['sql', 'variables', 'sentences', 'name', 'example', 'text',
         'question-split', 'train', 'x0']) | st.text(max_size=3), children,
                      max_size=5),
    max_leaves=20)
_NEAR_TEXT = st.lists(
    st.text(alphabet=st.sampled_from('ab :\t\r\ufeff\u2028\x85é')
            | _chars(''), max_size=12),
    min_size=0, max_size=6).map(lambda ls: '\n'.join(ls).encode('utf-8'))
_BYTES = st.one_of(
    st.binary(max_size=200),
    _NEAR_TEXT,
    _JSON.map(lambda v: json.dumps(v).encode('utf-8')),
    # Deep nesting and huge numbers: valid JSON syntax that Python's json
    # module refuses with RecursionError / ValueError.
    st.tuples(st.sampled_from([b'[', b'{"a":', b'[1e']),
              st.integers(1, 30000)).map(lambda t: t[0] * t[1]),
    st.integers(4000, 6000).map(lambda n: b'[' + b'9' * n + b']'),
)


# --- 2. Well-formed records of arbitrary Unicode text. ---------------------

def _long(chars):
  """Strings of 2,000 to 20,000 characters (a short one repeated)."""
  return st.tuples(st.text(chars, min_size=1, max_size=10),
                   st.integers(2000, 2000)).map(lambda t: t[0] * t[1])


_LINE_TEXT = st.one_of(
    st.text(_chars('\n'), max_size=20),
    st.sampled_from(['', ' ', '\t', '\r', '\u2028', _BOM + 'x', 'x\r', 'ß']),
    _long(_chars('\n')),
)
_ENDINGS = st.sampled_from(['\n', '\r\n'])


def _documented_line(text: str) -> str:
  """A written line as the readers document it: one trailing CR is eaten."""
  return text.removesuffix('\r')


_FIELD_TEXT = st.one_of(
    st.text(_chars('\t\n'), max_size=20),
    st.sampled_from(['', ' ', '\r', 'a|b', 'DESC:manner', ':x', 'x:',
                     _BOM + 'y', '\x85']),
    _long(_chars('\t\n')),
)


# Tag columns are padded to this width by the OOV buckets.
_TAG_BATCH_WIDTH = 8


# text2sql: queries whose texts are arbitrary Unicode chunks (holding no
# variable-like identifier) around declared variable names.
_NAME = st.from_regex(r'[a-z][a-z_]{0,6}[0-9]{1,2}', fullmatch=True)
_CHUNK = st.one_of(
    st.text(max_size=15),
    st.sampled_from(['', ' ', '\n', ' \t\n ', '"', 'x"y', 'COUNT( * )',
                     'é ß']),
).filter(lambda t: not text2sql.VARIABLE_PATTERN.search(t))


@st.composite
def _query(draw):
  names = draw(st.lists(_NAME, max_size=3, unique=True))
  examples = {n: draw(st.sampled_from(['', 'texas']) | st.text(max_size=8))
              for n in names}

  def template(no_quotes=False):
    chunk = _CHUNK.filter(lambda t: '"' not in t) if no_quotes else _CHUNK
    parts = draw(st.lists(chunk, min_size=1, max_size=3))
    used = draw(st.lists(st.sampled_from(names), max_size=3)) if names else []
    out = []
    for i, part in enumerate(parts):
      out.append(part)
      if i < len(used):
        out.append(used[i])
    return ' '.join(out + used[len(parts):])

  sql = [template(no_quotes=True)
         for _ in range(draw(st.integers(1, 2)))]
  sentences = [
      {'text': template(),
       'question-split': draw(st.sampled_from(
           ['train', 'dev', 'test', 'exclude'])),
       'variables': draw(st.dictionaries(
           st.sampled_from(names),
           st.sampled_from(['', 'new york']) | st.text(max_size=8),
           max_size=3)) if names else {}}
      for _ in range(draw(st.integers(0, 3)))]
  return {'sql': sql,
          'variables': [{'name': n, 'example': v}
                        for n, v in examples.items()],
          'sentences': sentences}


def _fill_tokens(text, values):
  return ' '.join(values.get(tok, tok) for tok in ' '.join(text.split())
                  .split(' '))


_SCHEMA_NAME = st.one_of(
    st.text(max_size=12),
    st.sampled_from(['', ' ', '-', ' - ', 'a,b', '"q"', 'line\nbreak', 'ß',
                     'City', 'city', '\r', ' x ']),
)


class LoadersFuzzExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(*sorted(_BYTES_CASES))
  @_SETTINGS
  @hypothesis.example(data=b'')
  @hypothesis.example(data=b'\xff\n')
  @hypothesis.example(data=b'\xef\xbb\xbf')
  @hypothesis.example(data=b'a\tb\r\n \n')
  @hypothesis.example(
      data=b'[{"sql": ["x"], "variables": [], "sentences": []}]')
  @hypothesis.example(  # A BOM is ignored, as by every loader.
      data=b'\xef\xbb\xbf[{"sql": ["x"], "variables": [], "sentences": []}]')
  @hypothesis.example(data=b'[' * 100000)  # Was a RecursionError (text2sql).
  @hypothesis.example(data=b'[' + b'9' * 5000 + b']')  # Was a plain ValueError.
  @hypothesis.given(data=_BYTES)
  def test_arbitrary_bytes_read_back_or_raise_input_error(self, case, data):
    with tempfile.TemporaryDirectory() as d:
      try:
        _BYTES_CASES[case](d, data)
      except errors.InputError as e:
        _assert_names_file(e, d)

  @_SETTINGS
  @hypothesis.given(
      base=st.sampled_from([
          {'sql': ['SELECT 1 ;'], 'variables': [], 'sentences': []},
          {'sql': ['SELECT a0 ;'], 'variables': [{'name': 'a0',
                                                   'example': '1'}],
           'sentences': [{'text': 'q a0', 'question-split': 'train',
                          'variables': {'a0': '2'}}]}]),
      path=st.lists(st.sampled_from(['sql', 'variables', 'sentences', 0, 1,
                                     'name', 'example', 'text',
                                     'question-split']), min_size=1,
                    max_size=3),
      value=_JSON)
  def test_mutated_text2sql_record_reads_or_raises_input_error(
      self, base, path, value):
    """A valid record with one field replaced by arbitrary JSON."""
    record = json.loads(json.dumps(base))
    node = record
    for key in path[:-1]:
      try:
        node = node[key]
      except (KeyError, IndexError, TypeError):
        break
    if isinstance(node, dict) and isinstance(path[-1], str):
      node[path[-1]] = value
    elif isinstance(node, list) and isinstance(path[-1], int):
      node.append(value)
    else:
      record = value
    data = json.dumps([record]).encode('utf-8')
    with tempfile.TemporaryDirectory() as d:
      try:
        _bytes_read_queries(d, data)
      except errors.InputError as e:
        _assert_names_file(e, d)

  @_SETTINGS
  @hypothesis.example(pairs=[('x', 'y')], ending='\n', final=False, bom=True)
  @hypothesis.example(pairs=[('x\r', ' ')], ending='\r\n', final=True,
                      bom=False)
  @hypothesis.given(
      pairs=st.lists(st.tuples(_LINE_TEXT, _LINE_TEXT), min_size=1, max_size=6),
      ending=_ENDINGS, final=st.booleans(), bom=st.booleans())
  def test_nmt_round_trips_sentences(self, pairs, ending, final, bom):
    # An empty last line without a newline is no line at all: keep it visible.
    final = final or '' in pairs[-1]
    with tempfile.TemporaryDirectory() as d:
      paths = []
      for side in (0, 1):
        lines = [pair[side] for pair in pairs]
        content = (_BOM if bom else '') + ending.join(lines) + (
            ending if final else '')
        paths.append(_write(d, f'train.{"de" if side == 0 else "en"}',
                            content))
      # A line loses '\n' or '\r\n': a sentence's own final CR survives only
      # before a '\r\n'. One BOM is eaten: the written one, else the first
      # sentence's own.
      expected = [[p[side] if ending == '\r\n' and (i < len(pairs) - 1 or final)
                   else _documented_line(p[side])
                   for i, p in enumerate(pairs)] for side in (0, 1)]
      if not bom:
        expected = [[e[0].removeprefix(_BOM)] + e[1:] for e in expected]
      bad = [(side, i) for side in (0, 1) for i, s in enumerate(expected[side])
             if not s.strip()]
      if bad:
        side, i = bad[0]
        with self.assertRaisesRegex(
            errors.InputError, rf'{re.escape(paths[side])}(:{i + 1})?: empty'):
          nmt.read_parallel(*paths)
        return
      corpus = nmt.read_parallel(*paths)
      self.assertEqual(len(corpus), len(pairs))
      self.assertEqual(list(corpus.sources), expected[0])
      self.assertEqual(list(corpus.targets), expected[1])

  @_SETTINGS
  @hypothesis.example(rows=[('DESC:manner', 'how ?')], ending='\r\n', bom=True)
  @hypothesis.example(rows=[(' ', 'x')], ending='\n', bom=False)
  @hypothesis.given(
      rows=st.lists(st.tuples(_FIELD_TEXT, _FIELD_TEXT), min_size=1,
                    max_size=6),
      ending=_ENDINGS, bom=st.booleans())
  def test_text_classification_and_tags_round_trip(self, rows, ending, bom):
    content = (_BOM if bom else '') + ''.join(
        f'{label}\t{text}{ending}' for label, text in rows)
    labels = [label for label, _ in rows]
    texts = [text if ending == '\r\n' else _documented_line(text)
             for _, text in rows]
    if not bom:
      labels[0] = labels[0].removeprefix(_BOM)
    with tempfile.TemporaryDirectory() as d:
      for split in ('train', 'test'):
        _write(d, f'text_classification/toy/{split}.tsv', content)
      path = os.path.join(d, 'text_classification', 'toy', 'train.tsv')
      for i, (label, text) in enumerate(zip(labels, texts), start=1):
        if not label.strip() or not text.strip():
          what = 'label' if not label.strip() else 'text'
          with self.assertRaisesRegex(errors.InputError,
                                      rf'{re.escape(path)}:{i}: empty {what}'):
            text_classification.load_dataset('toy', data_dir=d)
          return
      dataset = text_classification.load_dataset('toy', data_dir=d)
    self.assertEqual(dataset.label_names, tuple(sorted(set(labels))))
    self.assertTrue(
        list(dataset.train.texts) == texts == list(dataset.test.texts))
    self.assertEqual([dataset.label_names[i] for i in dataset.train.labels],
                     labels)
    self.assertEqual(dataset.train.labels.dtype, np.int32)
    # tags: a label 'A:b' becomes the tags 'A' and 'A:b'.
    examples = tags.examples_from_labels(dataset.train.texts, labels)
    for example, label in zip(examples, labels):
      if tags.TAG_SEPARATOR in label:
        continue  # Not representable in the StackOverflow format; see report.
      got = tags.tags_of(example)
      self.assertEqual(got[-1], label)
      self.assertEqual(len(got), label.count(':') + 1 - label.startswith(':'))

  @hypothesis.settings(_SETTINGS, max_examples=15)
  @hypothesis.given(
      rows=st.lists(st.tuples(_FIELD_TEXT.filter(str.strip),
                              _FIELD_TEXT.filter(str.strip)),
                    min_size=1, max_size=6),
      batch_size=st.integers(1, 4))
  def test_tags_encode_and_batch_count_every_word(self, rows, batch_size):
    texts = [text for _, text in rows]
    labels = [label.replace(tags.TAG_SEPARATOR, '/') for label, _ in rows]
    examples = tags.examples_from_labels(texts, labels)
    vocab = tags.TagVocabularies.build(examples, max_words=5, max_tags=4)
    vocab = tags.TagVocabularies(
        words=vocab.words, tags=vocab.tags, num_oov_word_buckets=2,
        num_oov_tag_buckets=_TAG_BATCH_WIDTH - len(vocab.tags))
    encoded = tags.encode(examples, vocab)
    dataset = tags.to_dataset(encoded, num_words=vocab.num_word_rows,
                              batch_size=batch_size)
    batches = list(dataset.as_numpy_iterator())
    self.assertEqual(len(batches), -(-len(rows) // batch_size))
    counts = np.concatenate([b['tokens']['values'] for b in batches])
    self.assertEqual(counts.sum(), sum(len(t.lower().split()) for t in texts))
    tag_rows = np.concatenate([b['tags'] for b in batches])
    self.assertEqual(tag_rows.shape, (len(rows), _TAG_BATCH_WIDTH))
    in_vocab = [sum(t in vocab.tags for t in tags.tags_of(e)) for e in examples]
    self.assertTrue(
        np.all(tag_rows[:, :len(vocab.tags)].sum(axis=1) == in_vocab))
    num_tags = [len(tags.tags_of(e)) for e in examples]
    # OOV tags may share a column.
    self.assertTrue(np.all(tag_rows.sum(axis=1) >= 1))
    self.assertTrue(np.all(tag_rows.sum(axis=1) <= num_tags))

  @_SETTINGS
  @hypothesis.given(queries=st.lists(_query(), min_size=1, max_size=4),
                    indent=st.sampled_from([None, 1]),
                    ascii_only=st.booleans(), with_values=st.booleans())
  def test_text2sql_round_trips_questions_and_sql(self, queries, indent,
                                                  ascii_only, with_values):
    expected = {'train': [], 'dev': [], 'test': []}
    error = None
    for qi, query in enumerate(queries):
      examples = {v['name']: v['example'] for v in query['variables']}
      sentences = query['sentences']

      def value_map(s):
        return {n: s['variables'].get(n) or examples.get(n)
                for n in set(examples) | set(s['variables'])
                if s['variables'].get(n) or examples.get(n)}

      if not all(s.strip() for s in query['sql']):
        error = error or rf'query {qi}: field "sql"'
        continue
      blank = [i for i, s in enumerate(sentences) if not s['text'].strip()]
      if blank:
        error = error or rf'query {qi}, sentence {blank[0]}: empty "text"'
        continue
      canonical = next(
          (sql for sql in query['sql']
           if all(n in value_map(s)
                  for s in sentences
                  for n in text2sql.VARIABLE_PATTERN.findall(sql))), None)
      if canonical is None:
        error = error or rf'query {qi}: no SQL has a value'
        continue
      missing = [i for i, s in enumerate(sentences)
                 if any(n in examples and n not in value_map(s)
                        for n in s['text'].split())]
      if missing:
        error = error or rf'query {qi}, sentence {missing[0]}: variable'
        continue
      for si, s in enumerate(sentences):
        if s['question-split'] == 'exclude':
          continue
        values = value_map(s) if with_values else {}
        expected[s['question-split']].append(
            (_fill_tokens(s['text'], values), _fill_tokens(canonical, values),
             qi, si))
    with tempfile.TemporaryDirectory() as d:
      path = _write(d, 'text2sql/geography.json', json.dumps(
          queries, indent=indent, ensure_ascii=ascii_only))
      _write(d, 'text2sql/geography-schema.csv', _SCHEMA_CSV)
      if error:
        with self.assertRaisesRegex(errors.InputError,
                                    re.escape(path) + ': ' + error):
          text2sql.load_client('geography', data_dir=d, with_values=with_values)
        return
      client = text2sql.load_client('geography', data_dir=d,
                                    with_values=with_values)
    for split, want in expected.items():
      got = [(e.question, e.sql, e.query_index, e.sentence_index)
             for e in getattr(client, split)]
      self.assertEqual(got, want)
      self.assertTrue(all(e.split == split and e.client == 'geography'
                        for e in getattr(client, split)))

  @_SETTINGS
  @hypothesis.example(rows=[('city', 'name'), ('CITY', 'Name')])
  @hypothesis.example(rows=[('ß', 'x'), ('SS', 'y')])
  # A lone CR in a name: a line break unless quoted.
  @hypothesis.example(rows=[('0', '0'), ('-', '\r')])
  @hypothesis.given(rows=st.lists(st.tuples(_SCHEMA_NAME, _SCHEMA_NAME),
                                  min_size=1, max_size=8))
  def test_text2sql_schema_round_trips_names(self, rows):
    out = io.StringIO(newline='')
    # CRLF line ends (RFC 4180) make the writer quote every field holding a
    # CR or LF; with '\n' it would leave a lone CR bare, which any CSV
    # reader takes for a line break, so the file would not hold the rows.
    writer = csv.writer(out, lineterminator='\r\n')
    writer.writerow(['Table Name', 'Field Name', 'Type'])
    tables, error = {}, None
    for line, (table, column) in enumerate(rows, start=2):
      writer.writerow([table, column, 'int(11)'])
      table, column = table.strip(), column.strip()
      if error or table == '-':
        continue
      if not table or not column:
        error = error or (line, 'expected "table, column')
        continue
      columns = tables.setdefault(table.upper(), [])
      if column.upper() in columns:
        error = (line, f'column {column.upper()} of table')
      columns.append(column.upper())
    if not tables and not error:
      error = (None, 'no tables')
    with tempfile.TemporaryDirectory() as d:
      path = _write(d, 'x-schema.csv', out.getvalue())
      if error:
        line, message = error
        # Line numbers count physical lines: a quoted newline adds one.
        with self.assertRaises(errors.InputError) as raised:
          text2sql.read_schema(path)
        self.assertTrue(str(raised.exception).startswith(path))
        # Whitespace-only fields can merge under csv's skipinitialspace, so a
        # row may be reported as malformed where the model saw a separator.
        self.assertTrue(message in str(raised.exception)
                          or 'expected "table, column' in str(raised.exception))
        return
      schema = text2sql.read_schema(path)
    self.assertEqual([(t.name, list(t.columns)) for t in schema.tables], list(
                       tables.items()))
    self.assertEqual(sum(len(t.columns) for t in schema.tables), sum(
                       len(c) for c in tables.values()))


if __name__ == '__main__':
  tf.test.main()
