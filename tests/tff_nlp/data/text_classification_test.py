"""Tests of the strict `label<TAB>text` reader of text-classification data."""

import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import data
from tff_nlp.data import text_classification


def _write(directory: str, name: str, content: bytes) -> str:
  path = os.path.join(directory, name)
  with open(path, 'wb') as f:
    f.write(content)
  return path


def _make_dataset(root: str, name: str, splits: dict[str, bytes]) -> str:
  """Writes `<root>/text_classification/<name>/<split>.tsv`; returns root."""
  folder = os.path.join(root, 'text_classification', name)
  os.makedirs(folder)
  for split, content in splits.items():
    _write(folder, split + '.tsv', content)
  return root


class ReadTsvExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_reads_labels_and_texts_in_order(self):
    path = _write(
        self.create_tempdir().full_path,
        'train.tsv',
        'earn\tprofit up\r\nacq\tbuys  Café\nearn\tx\n'.encode('utf-8'),
    )
    labels, texts = data.read_tsv(path)
    self.assertEqual(labels, ['earn', 'acq', 'earn'])
    # CRLF's CR is dropped; inner spaces and case are kept as written.
    self.assertEqual(texts, ['profit up', 'buys  Café', 'x'])

  def test_last_line_without_newline_and_bom(self):
    path = _write(self.create_tempdir().full_path, 'a.tsv',
                  b'\xef\xbb\xbfa\tone\nb\ttwo')
    self.assertEqual(data.read_tsv(path), (['a', 'b'], ['one', 'two']))

  @parameterized.named_parameters(
      ('missing_tab', b'a\tok\nno tab here\n', 2, 'exactly one TAB, found 0'),
      ('two_tabs', b'a\tok\nb\tx\ty\n', 2, 'exactly one TAB, found 2'),
      ('blank_line', b'a\tok\n\nb\tok\n', 2, 'exactly one TAB, found 0'),
      ('trailing_blank_line', b'a\tok\n\n', 2, 'exactly one TAB, found 0'),
      ('empty_label', b'a\tok\n\ttext\n', 2, 'empty label'),
      ('blank_label', b'  \ttext\n', 1, 'empty label'),
      ('empty_text', b'a\tok\nb\tok\nc\t\n', 3, 'empty text'),
      ('whitespace_text', b'a\t   \n', 1, 'empty text'),
      ('non_utf8', b'a\tok\nb\tcaf\xe9\n', 2, 'not valid UTF-8 (byte 6'),
      ('truncated_utf8', b'a\t\xc3\n', 1, 'not valid UTF-8'),
  )
  def test_bad_line_names_file_and_line(self, content, line, expected):
    path = _write(self.create_tempdir().full_path, 'bad.tsv', content)
    with self.assertRaisesRegex(ValueError, 'bad.tsv') as cm:
      data.read_tsv(path)
    message = str(cm.exception)
    self.assertIn(f'{path}:{line}:', message)
    self.assertIn(expected, message)

  def test_empty_file(self):
    path = _write(self.create_tempdir().full_path, 'empty.tsv', b'')
    with self.assertRaisesRegex(ValueError, r'empty\.tsv: empty file'):
      data.read_tsv(path)

  def test_missing_file(self):
    path = os.path.join(self.create_tempdir().full_path, 'nope.tsv')
    with self.assertRaisesRegex(ValueError, r'nope\.tsv: file not found'):
      data.read_tsv(path)


class LoadDatasetExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_label_ids_follow_sorted_training_labels(self):
    root = _make_dataset(
        self.create_tempdir().full_path, 'toy', {
            'train': b'zeta\ta\nalpha\tb\nmid\tc\nalpha\td\n',
            'test': b'mid\te\nzeta\tf\n',
            'dev': b'alpha\tg\n',
        })
    dataset = data.load_dataset('toy', root)
    self.assertEqual(dataset.name, 'toy')
    self.assertEqual(dataset.label_names, ('alpha', 'mid', 'zeta'))
    self.assertEqual(dataset.num_classes, 3)
    self.assertEqual(dataset.train.texts, ('a', 'b', 'c', 'd'))
    np.testing.assert_array_equal(dataset.train.labels, [2, 0, 1, 0])
    self.assertEqual(dataset.train.labels.dtype, np.int32)
    np.testing.assert_array_equal(dataset.test.labels, [1, 2])
    self.assertEqual(dataset.test.texts, ('e', 'f'))
    np.testing.assert_array_equal(dataset.dev.labels, [0])
    self.assertLen(dataset.dev, 1)

  def test_dev_is_optional(self):
    root = _make_dataset(self.create_tempdir().full_path, 'toy', {
        'train': b'a\tx\n', 'test': b'a\ty\n'})
    self.assertIsNone(data.load_dataset('toy', root).dev)

  @parameterized.named_parameters(
      ('train', 'train', {'test': b'a\ty\n'}),
      ('test', 'test', {'train': b'a\tx\n'}),
  )
  def test_missing_split_file(self, missing, splits):
    root = _make_dataset(self.create_tempdir().full_path, 'toy', splits)
    with self.assertRaisesRegex(
        ValueError, rf'toy/{missing}\.tsv: file not found'):
      data.load_dataset('toy', root)

  @parameterized.named_parameters(('test', 'test'), ('dev', 'dev'))
  def test_label_unseen_in_training(self, split):
    splits = {'train': b'a\tx\nb\tx\n', 'test': b'a\ty\n'}
    splits[split] = b'a\ty\nb\ty\nc\ty\n'
    root = _make_dataset(self.create_tempdir().full_path, 'toy', splits)
    with self.assertRaisesRegex(
        ValueError,
        rf"toy/{split}\.tsv:3: label 'c' does not occur in the training"):
      data.load_dataset('toy', root)

  def test_error_in_test_split_names_it(self):
    root = _make_dataset(self.create_tempdir().full_path, 'toy', {
        'train': b'a\tx\n', 'test': b'a\ty\na y\n'})
    with self.assertRaisesRegex(ValueError, r'toy/test\.tsv:2: expected'):
      data.load_dataset('toy', root)

  def test_missing_dataset_lists_available(self):
    root = _make_dataset(self.create_tempdir().full_path, 'toy', {
        'train': b'a\tx\n', 'test': b'a\ty\n'})
    # Neither a checksum file nor a folder without both splits is a dataset.
    _write(os.path.join(root, 'text_classification'), 'SHA256SUMS', b'x\n')
    _make_dataset(root, 'half', {'train': b'a\tx\n'})
    with self.assertRaisesRegex(ValueError, r"not found.*: \['toy'\]\.$"):
      data.load_dataset('r9', root)

  def test_missing_dataset_in_an_empty_folder_says_so(self):
    root = self.create_tempdir().full_path
    os.makedirs(os.path.join(root, 'text_classification'))
    with self.assertRaisesRegex(
        ValueError, r"not found; '.*text_classification' holds no dataset "
        r'\(a folder with train\.tsv and test\.tsv\)\.$'):
      data.load_dataset('r8', root)

  def test_the_text_classification_folder_itself_is_noticed(self):
    # --data_dir is the folder holding text_classification/ (as for every
    # binary), not text_classification/ itself, nor a dataset in it.
    root = _make_dataset(self.create_tempdir().full_path, 'toy', {
        'train': b'a\tx\n', 'test': b'a\ty\n'})
    folder = os.path.join(root, 'text_classification')
    with self.assertRaisesRegex(
        ValueError,
        f"Dataset 'toy': the data folder '{folder}' has no "
        f"`text_classification/` folder. '{folder}' looks like the "
        f"`text_classification/` folder itself; pass its parent, "
        f"'{root}', as data_dir"):
      data.load_dataset('toy', folder)
    with self.assertRaisesRegex(
        ValueError,
        f"'{os.path.join(folder, 'toy')}' is inside a `text_classification/` "
        f"folder; pass the folder holding it, '{root}', as data_dir"):
      data.load_dataset('toy', os.path.join(folder, 'toy'))

  def test_a_folder_of_datasets_under_another_name_is_noticed(self):
    root = _make_dataset(self.create_tempdir().full_path, 'toy', {
        'train': b'a\tx\n', 'test': b'a\ty\n'})
    mine = os.path.join(root, 'mine')
    os.rename(os.path.join(root, 'text_classification'), mine)
    with self.assertRaisesRegex(
        ValueError, f"'{mine}' looks like the `text_classification/` folder "
        f"itself; pass its parent, '{root}'"):
      data.load_dataset('toy', mine)

  def test_a_data_folder_without_text_classification_lists_it(self):
    root = self.create_tempdir().full_path
    os.makedirs(os.path.join(root, 'text2sql'))
    with self.assertRaisesRegex(
        ValueError, f"'{root}' holds text2sql, but no `text_classification/`"):
      data.load_dataset('toy', root)
    with self.assertRaisesRegex(ValueError, "is empty"):
      data.load_dataset('toy', self.create_tempdir().full_path)

  def test_list_datasets(self):
    root = self.create_tempdir().full_path
    for name in ('zz', 'aa'):
      _make_dataset(root, name, {'train': b'a\tx\n', 'test': b'a\ty\n'})
    _make_dataset(root, 'no_test', {'train': b'a\tx\n'})
    _write(os.path.join(root, 'text_classification'), 'SHA256SUMS', b'x\n')
    self.assertEqual(text_classification.list_datasets(root), ('aa', 'zz'))
    self.assertEqual(text_classification.list_datasets(
        self.create_tempdir().full_path), ())
    # The shared data holds exactly the built-in datasets.
    self.assertEqual(text_classification.list_datasets(),
                     text_classification.BUILT_IN_DATASETS)

  def test_real_r8_matches_its_documentation(self):
    # shared/data/SOURCES.md: "train 5,485 / test 2,189. 8 labels: acq, crude,
    # earn, grain, interest, money-fx, ship, trade."
    r8 = data.load_dataset('r8')
    self.assertLen(r8.train, 5485)
    self.assertLen(r8.test, 2189)
    self.assertIsNone(r8.dev)
    self.assertEqual(r8.label_names, ('acq', 'crude', 'earn', 'grain',
                                      'interest', 'money-fx', 'ship',
                                      'trade'))
    # `cut -f1 train.tsv | sort | uniq -c`: acq 1596, earn 2840, grain 41.
    counts = np.bincount(r8.train.labels)
    self.assertEqual((counts[0], counts[2], counts[3]), (1596, 2840, 41))


if __name__ == '__main__':
  tf.test.main()
