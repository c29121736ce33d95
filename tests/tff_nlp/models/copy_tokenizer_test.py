"""Tests of `copy_tokenizer` against hand-derived ids and the real data."""

import json
import os

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source
from tff_nlp.models import copy_tokenizer

R, L = copy_tokenizer.GLUE_RIGHT, copy_tokenizer.GLUE_LEFT

# Two training pairs. Words the targets need without their source having
# them ("generated"): SELECT x2, = x2, ; x2, "▸ x1 (pair 2), ◂" x1 (pair 2);
# "boston" is in its source both times, so it is copied, not generated.
_PAIRS = [
    ('flights to boston', 'SELECT = boston ;'),
    ('flights from boston today', 'SELECT = "boston" ;'),
]


class SplitExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      ('a b', ['a', 'b']),
      ('= "new mexico" ;', ['=', f'"{R}', 'new', f'mexico', f'{L}"', ';']),
      ('LIKE "%area%"', ['LIKE', f'"%{R}', 'area', f'{L}%"']),
      ("= 'x'", ['=', f"'{R}", 'x', f"{L}'"]),
      ('COUNT( * ) ""', ['COUNT(', '*', ')', '""']),
      ('', []),
  )
  def test_split_and_join(self, text, tokens):
    self.assertEqual(copy_tokenizer.split_words(text), tokens)
    self.assertEqual(copy_tokenizer.join_words(tokens), text)

  def test_glue_marks_are_refused(self):
    with self.assertRaisesRegex(errors.InputError, 'file.json: .*glue mark'):
      copy_tokenizer.check_text(f'a {R} b', 'file.json')


class CopyTokenizerExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.tokenizer = copy_tokenizer.CopyTokenizer.build(
        _PAIRS, max_size=100, min_count=1)

  def test_vocabularies(self):
    # Generated counts: SELECT 2, = 2, ; 2, "▸ 1, ◂" 1 (ties alphabetical).
    self.assertEqual(self.tokenizer.output_words,
                     (';', '=', 'SELECT', f'"{R}', f'{L}"'))
    self.assertEqual(self.tokenizer.output_vocabulary_size(), 9)
    # Source words: boston 2, flights 2, from 1, to 1, today 1.
    self.assertEqual(self.tokenizer.input_words,
                     ('boston', 'flights', 'from', 'to', 'today'))
    self.assertEqual(self.tokenizer.vocabulary_size(), 14)

  def test_min_count_and_max_size(self):
    tokenizer = copy_tokenizer.CopyTokenizer.build(_PAIRS, max_size=9)
    # min_count 2 keeps ; = SELECT, then boston, flights; 9 ids cut nothing.
    self.assertEqual(tokenizer.output_words, (';', '=', 'SELECT'))
    self.assertEqual(tokenizer.input_words, ('boston', 'flights'))
    small = copy_tokenizer.CopyTokenizer.build(_PAIRS, max_size=6)
    self.assertEqual(small.output_words, (';', '='))
    self.assertEqual(small.input_words, ())

  def test_encode_source(self):
    # boston = 9, flights = 10 (input words); "denver" and "later" are
    # unknown: V + position = 14 + 2 and 14 + 3; "denver" again shares 16.
    self.assertEqual(
        self.tokenizer.encode_source('flights boston denver later denver'),
        [10, 9, 14 + 2, 14 + 3, 14 + 2])

  def test_encode_target_and_decode(self):
    source = 'flights to denver or boston'
    target = 'SELECT = "denver" , "boston" ;'
    # Output words keep their ids (SELECT 6, = 5, "▸ 7, ◂" 8, ; 4);
    # denver (unknown) and boston (an input word) are copied: K + first
    # position = 9 + 2 and 9 + 4; "," is nowhere: UNK.
    ids = self.tokenizer.encode_target(target, source)
    self.assertEqual(ids, [6, 5, 7, 9 + 2, 8, 1, 7, 9 + 4, 8, 4])
    self.assertEqual(
        self.tokenizer.decode(ids + [copy_tokenizer.END_ID, 6], source),
        'SELECT = "denver" <unk> "boston" ;')
    # PAD and START are skipped; a copy id past the source is <unk>.
    self.assertEqual(self.tokenizer.decode([2, 6, 9 + 40, 0], source),
                     'SELECT <unk>')

  def test_sql_hint(self):
    # After the mark the words are target tokens (no merges here); the mark
    # is reserved: the first input word, id 9, whatever its count.
    tokenizer = copy_tokenizer.CopyTokenizer.build(
        _PAIRS, max_size=100, min_count=1,
        reserved_input_words=(copy_tokenizer.SQL_HINT_MARK,))
    self.assertEqual(tokenizer.input_words[0], copy_tokenizer.SQL_HINT_MARK)
    self.assertEqual(tokenizer.output_words,
                     (';', '=', 'SELECT', f'"{R}', f'{L}"'))
    source = copy_tokenizer.with_sql_hint('flights to denver',
                                          'SELECT = "boston" ;')
    self.assertEqual(source, 'flights to denver <sql> SELECT = "boston" ;')
    self.assertEqual(tokenizer.source_tokens(source), [
        'flights', 'to', 'denver', '<sql>', 'SELECT', '=', f'"{R}',
        'boston', f'{L}"', ';'])
    # V = 15; output words keep their ids in the source (SELECT 6, = 5,
    # "▸ 7, ◂" 8, ; 4) so the pointer copies them into those ids; flights
    # 11, to 13, boston 10 (input words); denver unknown: V + 2.
    self.assertEqual(tokenizer.encode_source(source),
                     [11, 13, 15 + 2, 9, 6, 5, 7, 10, 8, 4])
    # boston is copied from the hint (K + 7), denver from the question.
    ids = tokenizer.encode_target('SELECT = "boston" , "denver" ;', source)
    self.assertEqual(ids, [6, 5, 7, 9 + 7, 8, 1, 7, 9 + 2, 8, 4])
    self.assertEqual(tokenizer.decode(ids, source),
                     'SELECT = "boston" <unk> "denver" ;')
    with self.assertRaisesRegex(errors.InputError, 'q.json: .*<sql>'):
      copy_tokenizer.check_text('a <sql> b', 'q.json')

  def test_sql_hint_is_merged_as_targets_are(self):
    pairs = [('flights', 'SELECT DISTINCT x ;')] * 5
    tokenizer = copy_tokenizer.CopyTokenizer.build(
        pairs, max_size=100, num_merges=1)
    # The most frequent pair of source-free words: ("DISTINCT", "x")
    # ties ("SELECT", "DISTINCT") and ("x", ";") at 5; the smallest wins.
    self.assertEqual(tokenizer.merges, (('DISTINCT', 'x'),))
    source = copy_tokenizer.with_sql_hint('flights', 'SELECT DISTINCT x ;')
    self.assertEqual(tokenizer.source_tokens(source),
                     ['flights', '<sql>', 'SELECT', 'DISTINCT x', ';'])
    # A copy of position 3 decodes as the merged phrase.
    self.assertEqual(
        tokenizer.decode([tokenizer.output_vocabulary_size() + 3], source),
        'DISTINCT x')

  def test_save_and_load(self):
    directory = self.create_tempdir().full_path
    path = self.tokenizer.save(directory)
    loaded = copy_tokenizer.CopyTokenizer.load(directory)
    self.assertEqual(loaded.output_words, self.tokenizer.output_words)
    self.assertEqual(loaded.input_words, self.tokenizer.input_words)
    built = copy_tokenizer.load_or_build(
        directory, lambda: self.fail('must not rebuild'), max_size=10)
    self.assertEqual(built.vocabulary_size(), 14)
    with open(path, 'w') as f:
      json.dump({'words': ['a']}, f)
    with self.assertRaisesRegex(errors.InputError, 'copy_vocabulary.json'):
      copy_tokenizer.CopyTokenizer.load(path)

  def test_special_tokens_are_not_words(self):
    with self.assertRaisesRegex(ValueError, 'distinct'):
      copy_tokenizer.CopyTokenizer(['<s>'])


class RealDataExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_every_question_and_sql_round_trips(self, with_values):
    try:
      folder = text2sql_source.find_text2sql_dir(None)
    except errors.InputError:
      self.skipTest('no text2sql data')
    clients = text2sql.load_clients(data_dir=os.path.dirname(folder),
                                    with_values=with_values)
    texts = [t for c in clients.values() for split in text2sql.SPLITS
             for e in getattr(c, split) for t in (e.question, e.sql)]
    self.assertGreater(len(texts), 20000)
    for text in texts:
      self.assertEqual(
          copy_tokenizer.join_words(copy_tokenizer.split_words(text)), text)


if __name__ == '__main__':
  tf.test.main()
