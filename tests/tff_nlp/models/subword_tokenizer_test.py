"""Tests of `SubwordTokenizer`: exact round trip on all text2sql data.

The reference is the input string itself: `detokenize(tokenize(s)) == s`.
The text2sql JSON files are read here directly (not through the data module).
"""

import glob
import json
import os
import random
import re
import time

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.models import subword_tokenizer

# shared/data/text2sql (found as every reader finds it), its files read
# directly rather than through tff_nlp.data's readers.
DATA_DIR = os.path.join(data_root.find_data_dir(), 'text2sql')
NUM_SPECIAL_AND_BYTE_IDS = 4 + 256
# A stand-in for the training split: the large datasets' 'train' questions
# and folds 0-5 of the small ones.
_TRAIN_SPLITS = frozenset(['train', '0', '1', '2', '3', '4', '5'])


def fill_values(text, values):
  """Replaces each variable name (a whole token) in `text` by its value."""
  if not values:
    return text
  names = '|'.join(re.escape(n) for n in sorted(values, key=len, reverse=True))
  return re.sub(rf'(?<![A-Za-z0-9_])(?:{names})(?![A-Za-z0-9_])',
                lambda m: values[m.group(0)], text)


def load_queries(name):
  with open(os.path.join(DATA_DIR, f'{name}.json'), encoding='utf-8') as f:
    return json.load(f)


def dataset_names():
  return sorted(os.path.basename(p)[:-len('.json')]
                for p in glob.glob(os.path.join(DATA_DIR, '*.json')))


def examples(name):
  """(split, question, canonical sql, all sql variants), values filled."""
  for query in load_queries(name):
    defaults = {v['name']: v['example'] for v in query['variables']}
    for sentence in query['sentences']:
      values = {**defaults, **sentence['variables']}
      sqls = [fill_values(sql, values) for sql in query['sql']]
      yield (sentence['question-split'],
             fill_values(sentence['text'], values), sqls[0], sqls)


def all_strings(names):
  """Every sql and text, as in the file and with values filled."""
  strings = []
  for name in names:
    for query in load_queries(name):
      strings += query['sql']
      strings += [s['text'] for s in query['sentences']]
    for _, question, _, sqls in examples(name):
      strings += [question] + sqls
  return strings


def training_texts(names):
  texts = []
  for name in names:
    for split, question, sql, _ in examples(name):
      if split in _TRAIN_SPLITS:
        texts += [question, sql]
  return texts


def round_trip(tokenizer, strings):
  return [s.decode('utf-8')
          for s in tokenizer.detokenize(tokenizer.tokenize(strings)).numpy()]


CRAFTED = (
    ('empty', ''),
    ('one_space', ' '),
    ('spaces_everywhere', '  SELECT   a ,  b  FROM t  '),
    ('tabs_newlines_cr', 'SELECT\ta\nFROM t\r\n;\n'),
    ('quotes', 'WHERE name = "O\'Brien" AND x = \'y\' ;'),
    ('backticks_escapes', 'a = `col` AND b = "\\"" ;'),
    ('comparisons', 'x <> 1 AND y >= 2 AND z <= 3 AND w != 4 AND v < 5 > 6'),
    ('digits', '0 12 345.678 -9e10 2015 00042 1,000,000'),
    ('composed_accents', 'Pokémon Ñandú Zürich café naïve Ångström'),
    ('decomposed_accents', 'Poke\u0301mon cafe\u0301 n\u0303'),
    ('non_latin', '日本語のテキスト Привет мир שלום مرحبا'),
    ('emoji_and_symbols', 'a 😀 b 👍🏽 € ™ © ∑ √'),
    ('compatibility_characters', 'ﬁ ½ ² Ⅳ ｆｕｌｌ　width'),
    ('invisible', 'zero\u200bwidth\u00a0nbsp\ufeffbom'),
    ('control_and_nul', 'a\x00b\x01c\x7fd'),
    ('sentencepiece_space_symbol', 'a\u2581b \u2581\u2581 \u2581'),
    ('escape_character', '\ue000 \ue0000 \ue0001 \ue000\u2581 \u2581\ue000'),
    ('sql_with_percent', 'WHERE t.NAME LIKE "%Los Angeles%" ;'),
)


class SubwordTokenizerDataExecutionTest(tf.test.TestCase):
  """Round trip of every string of the eight text2sql files."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    names = dataset_names()
    assert len(names) == 8, names
    texts = training_texts(names)
    start = time.perf_counter()
    cls.tokenizer = subword_tokenizer.SubwordTokenizer.train(texts, 8000)
    cls.training_seconds = time.perf_counter() - start
    cls.num_training_texts = len(texts)
    cls.strings = sorted(set(all_strings(names)))
    cls.ids = cls.tokenizer.tokenize(cls.strings)

  def test_training_text(self):
    # Questions and canonical SQL with values, e.g. 2 * 8,994 train questions.
    self.assertGreater(self.num_training_texts, 15000)
    self.assertEqual(self.tokenizer.vocabulary_size(), 8000)
    print(f'Trained on {self.num_training_texts} texts in '
          f'{self.training_seconds:.2f} s.')

  def test_round_trips_every_sql_and_question(self):
    self.assertGreater(len(self.strings), 30000)
    detokenized = [s.decode('utf-8') for s in
                   self.tokenizer.detokenize(self.ids).numpy()]
    mismatches = [(s, d) for s, d in zip(self.strings, detokenized) if s != d]
    self.assertEmpty(mismatches[:5], f'{len(mismatches)} strings changed')

  def test_data_uses_no_special_ids(self):
    ids = self.ids.flat_values.numpy()
    self.assertGreaterEqual(ids.min(), 4)
    self.assertLess(ids.max(), self.tokenizer.vocabulary_size())

  def test_sql_keywords_and_schema_names_are_single_pieces(self):
    sql = ('SELECT MOVIEalias0.TITLE FROM MOVIE AS MOVIEalias0 WHERE '
           'MOVIEalias0.RELEASE_YEAR = 2015 ;')
    pieces = subword_tokenizer.SubwordTokenizer(
        proto=self.tokenizer.proto, dtype='string'
    ).tokenize(sql).numpy().tolist()
    for piece in ('SELECT', '\u2581FROM', '\u2581WHERE', '\u2581AS', '.'):
      self.assertIn(piece.encode(), pieces)
    # split_digits: numbers are spelled digit by digit.
    self.assertContainsSubsequence(pieces, [b'2', b'0', b'1', b'5'])


class SubwordTokenizerExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.imdb_texts = training_texts(['imdb'])
    cls.tokenizer = subword_tokenizer.SubwordTokenizer.train(
        cls.imdb_texts, 1000
    )

  @parameterized.named_parameters(*CRAFTED)
  def test_crafted_string_round_trips(self, text):
    self.assertEqual(round_trip(self.tokenizer, [text]), [text])
    self.assertEqual(
        self.tokenizer.detokenize(self.tokenizer.tokenize(text)).numpy(),
        text.encode('utf-8'),
    )

  def test_crafted_strings_round_trip_in_one_batch(self):
    texts = [text for _, text in CRAFTED]
    self.assertEqual(round_trip(self.tokenizer, texts), texts)

  @parameterized.parameters('bpe', 'unigram')
  def test_trained_on_a_subset_round_trips_unseen_text(self, model_type):
    tokenizer = subword_tokenizer.SubwordTokenizer.train(
        self.imdb_texts[:60], 600, model_type=model_type
    )
    unseen = all_strings(['academic', 'yelp']) + [t for _, t in CRAFTED]
    self.assertEqual(round_trip(tokenizer, unseen), unseen)
    # Characters outside the 60 training texts are spelled in bytes.
    ids = tokenizer.tokenize(unseen).flat_values.numpy()
    self.assertTrue(np.any((ids >= 4) & (ids < NUM_SPECIAL_AND_BYTE_IDS)))
    self.assertGreaterEqual(ids.min(), 4)

  def test_special_ids_and_pieces(self):
    self.assertEqual(
        (subword_tokenizer.PAD_ID, subword_tokenizer.UNK_ID,
         subword_tokenizer.START_ID, subword_tokenizer.END_ID),
        (0, 1, 2, 3),
    )
    self.assertEqual(
        [self.tokenizer.id_to_token(i) for i in range(4)],
        ['<pad>', '<unk>', '<s>', '</s>'],
    )
    self.assertEqual(
        (self.tokenizer.pad_token_id, self.tokenizer.start_token_id,
         self.tokenizer.end_token_id), (0, 2, 3),
    )
    self.assertEqual(self.tokenizer.id_to_token(4), '<0x00>')
    self.assertEqual(self.tokenizer.id_to_token(259), '<0xFF>')

  def test_detokenize_drops_padding_start_and_end(self):
    rows = [[2] + ids + [3]
            for ids in self.tokenizer.tokenize(['SELECT a', 'b']).to_list()]
    length = max(len(row) for row in rows) + 2
    packed = np.array([row + [0] * (length - len(row)) for row in rows])
    self.assertAllEqual(self.tokenizer.detokenize(packed),
                        [b'SELECT a', b'b'])

  def test_dense_output_is_padded_and_truncated(self):
    tokenizer = subword_tokenizer.SubwordTokenizer(
        proto=self.tokenizer.proto, sequence_length=4
    )
    ragged = self.tokenizer.tokenize(['a', 'SELECT a , b , c FROM t ;'])
    dense = tokenizer.tokenize(['a', 'SELECT a , b , c FROM t ;'])
    self.assertEqual(dense.shape, (2, 4))
    expected = ragged.to_tensor(shape=[2, 4]).numpy()
    self.assertAllEqual(dense, expected)
    self.assertEqual(dense[0, -1], subword_tokenizer.PAD_ID)

  def test_training_is_deterministic_and_order_independent(self):
    shuffled = list(self.imdb_texts)
    random.Random(0).shuffle(shuffled)
    again = subword_tokenizer.SubwordTokenizer.train(shuffled, 1000)
    self.assertEqual(again.proto, self.tokenizer.proto)
    other = subword_tokenizer.SubwordTokenizer.train(self.imdb_texts, 700)
    self.assertNotEqual(other.proto, self.tokenizer.proto)
    self.assertEqual(other.vocabulary_size(), 700)

  def test_vocabulary_size_is_an_upper_bound(self):
    tokenizer = subword_tokenizer.SubwordTokenizer.train(['ab ab ab'], 5000)
    self.assertLess(tokenizer.vocabulary_size(), 300)
    self.assertEqual(round_trip(tokenizer, ['abba ba']), ['abba ba'])

  def test_save_and_load(self):
    directory = os.path.join(self.get_temp_dir(), 'run', 'tokenizer')
    path = self.tokenizer.save(directory)
    self.assertEqual(path, os.path.join(directory, 'vocabulary.spm'))
    texts = ['SELECT  x FROM "é" ;', '']
    for source in (directory, path):
      loaded = subword_tokenizer.SubwordTokenizer.load(source)
      self.assertEqual(loaded.proto, self.tokenizer.proto)
      self.assertAllEqual(loaded.tokenize(texts),
                          self.tokenizer.tokenize(texts))
    loaded = subword_tokenizer.SubwordTokenizer.load(directory,
                                                     sequence_length=3)
    self.assertEqual(loaded.tokenize(texts).shape, (2, 3))

  def test_keras_config_round_trip(self):
    config = self.tokenizer.get_config()
    restored = subword_tokenizer.SubwordTokenizer.from_config(config)
    restored.set_proto(self.tokenizer.proto)
    self.assertEqual(round_trip(restored, ['a\u2581 b']), ['a\u2581 b'])

  def test_load_errors(self):
    missing = os.path.join(self.get_temp_dir(), 'missing')
    with self.assertRaisesRegex(errors.InputError, 'does not exist'):
      subword_tokenizer.SubwordTokenizer.load(missing)
    garbage = os.path.join(self.get_temp_dir(), 'garbage.spm')
    with open(garbage, 'wb') as f:
      f.write(b'not a model')
    with self.assertRaisesRegex(errors.InputError, 'SentencePiece model'):
      subword_tokenizer.SubwordTokenizer.load(garbage)

  def test_rejects_a_model_with_other_special_ids(self):
    # SentencePiece's defaults: <unk> 0, <s> 1, </s> 2, no padding.
    path = os.path.join(self.get_temp_dir(), 'default_ids.model')
    with open(path, 'wb') as f:
      f.write(subword_tokenizer.train_sentencepiece_model(
          list(self.imdb_texts), dict(vocab_size=300, minloglevel=2)))
    with self.assertRaisesRegex(errors.InputError, r"'<unk>', '<s>'"):
      subword_tokenizer.SubwordTokenizer.load(path)

  def test_train_errors(self):
    with self.assertRaisesRegex(ValueError, 'Vocabulary size is smaller'):
      subword_tokenizer.SubwordTokenizer.train(self.imdb_texts, 200)
    with self.assertRaisesRegex(ValueError, 'model_type'):
      subword_tokenizer.SubwordTokenizer.train(['a'], 300, model_type='word')
    with self.assertRaisesRegex(ValueError, 'non-empty'):
      subword_tokenizer.SubwordTokenizer.train(['', ''], 300)

  def test_survives_setting_the_global_seed(self):
    # tensorflow-text's own resource is destroyed by this in eager mode.
    tokenizer = subword_tokenizer.SubwordTokenizer(proto=self.tokenizer.proto)
    expected = tokenizer.tokenize(['SELECT a']).to_list()
    tf.keras.utils.set_random_seed(1)
    self.assertEqual(tokenizer.tokenize(['SELECT a']).to_list(), expected)
    self.assertEqual(round_trip(tokenizer, ['SELECT a']), ['SELECT a'])

  def test_tokenizes_in_tf_data_and_tf_function(self):
    texts = ['SELECT  "Ω" ;', ' \u2581 ', '']
    dataset = tf.data.Dataset.from_tensor_slices(texts).map(
        self.tokenizer.tokenize
    )
    rows = [ids.numpy().tolist() for ids in dataset]
    self.assertEqual(rows, self.tokenizer.tokenize(texts).to_list())

    @tf.function
    def graph_round_trip(strings):
      return self.tokenizer.detokenize(self.tokenizer.tokenize(strings))

    self.assertAllEqual(graph_round_trip(tf.constant(texts)),
                        [t.encode() for t in texts])

  def test_load_or_train_trains_once_then_loads(self):
    directory = self.create_tempdir().full_path
    calls = []

    def texts():
      calls.append(1)
      return ['SELECT a FROM b', 'select count ( * ) from t'] * 20

    first = subword_tokenizer.load_or_train(directory, texts, 300)
    second = subword_tokenizer.load_or_train(directory, texts, 300)
    self.assertLen(calls, 1)  # The second call read the saved model.
    self.assertEqual(first.tokenize(['SELECT a']).to_list(),
                     second.tokenize(['SELECT a']).to_list())


if __name__ == '__main__':
  tf.test.main()
