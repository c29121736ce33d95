"""Every file loader of `tff_nlp.data`: a directory and a BOM-prefixed file.

For each loader, one of its input files is (a) replaced by a directory, which
must give an `InputError` naming that path (not an `IsADirectoryError`
traceback), and (b) prefixed with a UTF-8 byte-order mark, which must read
the same records as the file without it.

`tags` reads no file (its examples come from `text_classification`), and
`continual_tasks` reads through `text_classification.load_dataset`, tested
here through its own entry point. `text2sql_source` checks files by their
SHA-256, so a BOM is another file there: it has only case (a).
"""

from collections.abc import Callable, Mapping
import dataclasses
import json
import os
import re
from typing import Any

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import continual_tasks
from tff_nlp.data import nmt
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source
from tff_nlp.data import text_classification

_BOM = b'\xef\xbb\xbf'

# Labels a, b: 4 training and 2 test documents each, enough for one task of
# two labels (one validation document per label).
_TRAIN_TSV = ''.join(f'{label}\t{label} text {i}\n'
                     for i in range(4) for label in 'ab')
_TEST_TSV = 'a\ttest one\nb\ttest two\na\ttest three\nb\ttest four\n'
_QUERIES = json.dumps([{
    'sql': ['SELECT CITY.NAME FROM CITY WHERE CITY.STATE = "state0" ;'],
    'variables': [{'name': 'state0', 'example': 'texas'}],
    'sentences': [
        {'text': 'cities in state0', 'question-split': 'train',
         'variables': {'state0': 'ohio'}},
        {'text': 'every city', 'question-split': 'test', 'variables': {}},
    ],
}])
_SCHEMA = 'Table Name, Field Name\ncity, name\ncity, state\n'
_DOMAIN = {f'custom/{name}': f'{name} one\n{name} two\n'
           for name in nmt.domain_files()}


def _tsv_data(data: text_classification.TextClassificationData):
  return (data.label_names,
          [(split.texts, split.labels.tolist())
           for split in (data.train, data.test)])


def _tasks(sequences: continual_tasks.TaskSequences):
  return [(task.name, task.label_names,
           [(split.texts, split.labels.tolist())
            for split in (task.train, task.valid, task.test)])
          for tasks in sequences.clients for task in tasks]


@dataclasses.dataclass(frozen=True)
class _Case:
  """A loader and its input files.

  Attributes:
    files: Path (relative to a temporary folder) -> valid content.
    target: The file of `files` made a directory or given a BOM.
    load: The temporary folder -> what the loader read (comparable).
  """

  files: Mapping[str, str]
  target: str
  load: Callable[[str], Any]


_CASES = {
    'text_classification.read_tsv': _Case(
        {'train.tsv': _TRAIN_TSV}, 'train.tsv',
        lambda d: text_classification.read_tsv(os.path.join(d, 'train.tsv'))),
    'text_classification.load_dataset': _Case(
        {'text_classification/toy/train.tsv': _TRAIN_TSV,
         'text_classification/toy/test.tsv': _TEST_TSV,
         'text_classification/toy/dev.tsv': _TEST_TSV},
        'text_classification/toy/dev.tsv',
        lambda d: _tsv_data(text_classification.load_dataset('toy', d))),
    'continual_tasks.load_task_sequences': _Case(
        {'text_classification/toy/train.tsv': _TRAIN_TSV,
         'text_classification/toy/test.tsv': _TEST_TSV},
        'text_classification/toy/train.tsv',
        lambda d: _tasks(continual_tasks.load_task_sequences(
            'toy', d, num_clients=1, tasks_per_client=1, labels_per_task=2,
            seed=0))),
    'nmt.read_parallel': _Case(
        {'train.de': 'eins\nzwei\n', 'train.en': 'one\ntwo\n'}, 'train.de',
        lambda d: nmt.read_parallel(os.path.join(d, 'train.de'),
                                    os.path.join(d, 'train.en'))),
    'nmt.load_domains': _Case(
        _DOMAIN, 'custom/test.en', lambda d: nmt.load_domains(d)),
    'text2sql.read_queries': _Case(
        {'geography.json': _QUERIES}, 'geography.json',
        lambda d: text2sql.read_queries(os.path.join(d, 'geography.json'),
                                        {'train', 'dev', 'test'})),
    'text2sql.read_schema': _Case(
        {'s.csv': _SCHEMA}, 's.csv',
        lambda d: text2sql.read_schema(os.path.join(d, 's.csv'))),
    'text2sql.load_client_queries': _Case(
        {'text2sql/geography.json': _QUERIES,
         'text2sql/geography-schema.csv': _SCHEMA},
        'text2sql/geography.json',
        lambda d: text2sql.load_client('geography', data_dir=d)),
    'text2sql.load_client_schema': _Case(
        {'text2sql/geography.json': _QUERIES,
         'text2sql/geography-schema.csv': _SCHEMA},
        'text2sql/geography-schema.csv',
        lambda d: text2sql.load_clients(['geography'], data_dir=d)),
}
# Checksummed files: a directory only.
_DIRECTORY_ONLY_CASES = {
    'text2sql_source.sha256_of': _Case(
        {'atis.json': '[]'}, 'atis.json',
        lambda d: text2sql_source.sha256_of(os.path.join(d, 'atis.json'))),
    'text2sql_source.download': _Case(
        {'cache/restaurants.json': ''}, 'cache/restaurants.json',
        # Refused before any request: nothing listens on the discard port.
        lambda d: text2sql_source.download(
            base_url='http://127.0.0.1:9/', download_dir=os.path.join(
                d, 'cache'), files=['restaurants.json'], timeout=1.0)),
}


class LoaderPathsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _write(self, case: _Case, bom_target: bool = False) -> str:
    root = self.create_tempdir().full_path
    for name, content in case.files.items():
      path = os.path.join(root, name)
      os.makedirs(os.path.dirname(path), exist_ok=True)
      with open(path, 'wb') as f:
        f.write((_BOM if bom_target and name == case.target else b'')
                + content.encode('utf-8'))
    return root

  @parameterized.named_parameters(
      (name, name) for name in sorted({**_CASES, **_DIRECTORY_ONLY_CASES}))
  def test_directory_for_a_file_names_the_path(self, name):
    case = {**_CASES, **_DIRECTORY_ONLY_CASES}[name]
    root = self._write(case)
    if name in _CASES:
      case.load(root)  # The files as written read.
    path = os.path.join(root, case.target)
    os.remove(path)
    os.makedirs(os.path.join(path, 'inner'))
    with self.assertRaisesRegex(errors.InputError,
                                f'^{re.escape(path)}: is a directory; '
                                'expected '):
      case.load(root)

  @parameterized.named_parameters((name, name) for name in sorted(_CASES))
  def test_bom_prefixed_file_reads_the_same_records(self, name):
    case = _CASES[name]
    plain = case.load(self._write(case))
    with_bom = case.load(self._write(case, bom_target=True))
    self.assertEqual(with_bom, plain)

  def test_bom_is_dropped_from_the_first_record(self):
    # The comparisons above hold only if the BOM is not kept: spelled out
    # for the first header, label, query and sentence of each format.
    root = self._write(_CASES['text2sql.read_schema'], bom_target=True)
    self.assertEqual(text2sql.read_schema(os.path.join(root, 's.csv')),
                     text2sql.Schema((text2sql.Table('CITY',
                                                     ('NAME', 'STATE')),)))
    root = self._write(_CASES['text2sql.read_queries'], bom_target=True)
    (query,) = text2sql.read_queries(os.path.join(root, 'geography.json'),
                                     {'train', 'test'})
    self.assertEqual(query.sentences[0].text, 'cities in state0')
    root = self._write(_CASES['text_classification.read_tsv'],
                       bom_target=True)
    labels, _ = text_classification.read_tsv(os.path.join(root, 'train.tsv'))
    self.assertEqual(labels[:2], ['a', 'b'])
    root = self._write(_CASES['nmt.read_parallel'], bom_target=True)
    corpus = nmt.read_parallel(os.path.join(root, 'train.de'),
                               os.path.join(root, 'train.en'))
    self.assertEqual(corpus.sources, ('eins', 'zwei'))

  def test_download_folder_that_is_a_file_names_it(self):
    root = self.create_tempdir().full_path
    folder = os.path.join(root, 'cache')
    with open(folder, 'w') as f:
      f.write('not a folder')
    with self.assertRaisesRegex(
        errors.InputError, f'^{re.escape(folder)}: cannot be made the '
        'download folder'):
      text2sql_source.download(base_url='http://127.0.0.1:9/',
                               download_dir=folder, files=['atis.json'])


if __name__ == '__main__':
  tf.test.main()
