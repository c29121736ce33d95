"""Tests of the strict parallel-text reader and the NMT domain loader."""

import os
import re
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import data
from tff_nlp import errors
from tff_nlp.data import nmt

# shared/data/SOURCES.md, section nmt_de_en: "Splits: train / dev / test
# pairs" of each domain.
_DOCUMENTED_SIZES = {
    'wmt_news': (13573, 3000, 3003),
    'ted_iwslt14': (11999, 1000, 1000),
    'php_docs': (10392, 945, 944),
    'ubuntu_l10n': (11100, 1009, 1009),
    'multi30k_captions': (29000, 1014, 1000),
}


def _write(directory: str, name: str, content: bytes) -> str:
  path = os.path.join(directory, name)
  with open(path, 'wb') as f:
    f.write(content)
  return path


def _write_pair(directory: str, source: bytes, target: bytes,
                split: str = 'train') -> tuple[str, str]:
  return (_write(directory, f'{split}.de', source),
          _write(directory, f'{split}.en', target))


def _make_domain(root: str, name: str, num_pairs: int = 2,
                 files=None) -> str:
  """Writes `<root>/<name>/{train,dev,test}.{de,en}`; returns the folder.

  Line i of `<split>.de` is `<name> <split> de i`, of `.en` the same with
  `en`, so every pair shows where it came from.
  """
  folder = os.path.join(root, name)
  os.makedirs(folder)
  for file_name in files or nmt.domain_files():
    split, lang = file_name.split('.')
    lines = [f'{name} {split} {lang} {i}' for i in range(num_pairs)]
    _write(folder, file_name, ('\n'.join(lines) + '\n').encode('utf-8'))
  return folder


def _corpus(name: str, split: str, indices) -> nmt.ParallelCorpus:
  """The pairs `_make_domain` writes at the given line indices."""
  return nmt.ParallelCorpus(
      sources=tuple(f'{name} {split} de {i}' for i in indices),
      targets=tuple(f'{name} {split} en {i}' for i in indices))


class ReadParallelExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_reads_pairs_in_order_and_strips_only_the_newline(self):
    directory = self.create_tempdir().full_path
    source, target = _write_pair(
        directory,
        '\ufeffGuten Tag .\r\n  Straße  mit\u2028Café\n€ 5\n'.encode('utf-8'),
        'Good day .\nStreet  with\tcafé  \r\n€ 5'.encode('utf-8'))
    corpus = data.read_parallel(source, target)
    # The BOM and each '\n' / '\r\n' are dropped, nothing else: inner and
    # outer spaces, a TAB, U+2028 (not a line end here) are kept. The last
    # target line has no newline.
    self.assertEqual(corpus.sources,
                     ('Guten Tag .', '  Straße  mit\u2028Café', '€ 5'))
    self.assertEqual(corpus.targets,
                     ('Good day .', 'Street  with\tcafé  ', '€ 5'))
    self.assertLen(corpus, 3)

  @parameterized.named_parameters(
      ('source_non_utf8', 'source', b'ok\ncaf\xe9 au lait\n', 2,
       'not valid UTF-8 (byte 4 of the line is'),
      ('target_non_utf8', 'target', b'ok\nok\n\xff\n', 3,
       'not valid UTF-8 (byte 1 of the line is'),
      ('truncated_utf8', 'target', b'ok\n\xc3\n', 2, 'not valid UTF-8'),
      ('source_empty_line', 'source', b'ok\n\nok\n', 2, 'empty line'),
      ('target_empty_line', 'target', b'ok\nok\n\n', 3, 'empty line'),
      ('crlf_empty_line', 'source', b'ok\r\n\r\nok\r\n', 2, 'empty line'),
      ('whitespace_line', 'target', b' \t \nok\nok\n', 1, 'empty line'),
  )
  def test_bad_line_names_file_and_line(self, side, content, line, expected):
    directory = self.create_tempdir().full_path
    good = b'ein\nzwei\ndrei\n'
    source, target = _write_pair(
        directory, content if side == 'source' else good,
        content if side == 'target' else good)
    bad_path = source if side == 'source' else target
    with self.assertRaises(errors.InputError) as cm:
      data.read_parallel(source, target)
    message = str(cm.exception)
    self.assertIn(f'{bad_path}:{line}:', message)
    self.assertIn(expected, message)

  @parameterized.named_parameters(('source', 'source'), ('target', 'target'))
  def test_empty_file(self, side):
    directory = self.create_tempdir().full_path
    source, target = _write_pair(directory,
                                 b'' if side == 'source' else b'a\n',
                                 b'' if side == 'target' else b'a\n')
    bad_path = source if side == 'source' else target
    with self.assertRaisesWithLiteralMatch(
        errors.InputError,
        f'{bad_path}: empty file; expected one sentence per line.'):
      data.read_parallel(source, target)

  @parameterized.named_parameters(('source', 'source'), ('target', 'target'))
  def test_missing_file(self, side):
    directory = self.create_tempdir().full_path
    source, target = _write_pair(directory, b'a\n', b'a\n')
    missing = source if side == 'source' else target
    os.remove(missing)
    with self.assertRaisesWithLiteralMatch(
        errors.InputError, f'{missing}: file not found.'):
      data.read_parallel(source, target)

  @parameterized.named_parameters(
      ('more_targets', b'a\nb\n', b'a\nb\nc', 2, 3),
      ('more_sources', b'a\nb\nc\nd\n', b'a\n', 4, 1),
  )
  def test_different_line_counts_name_both_files(self, source_content,
                                                 target_content, num_sources,
                                                 num_targets):
    directory = self.create_tempdir().full_path
    source, target = _write_pair(directory, source_content, target_content)
    with self.assertRaises(errors.InputError) as cm:
      data.read_parallel(source, target)
    self.assertStartsWith(
        str(cm.exception),
        f'{source} has {num_sources} lines but {target} has {num_targets};')


class ParallelCorpusExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.corpus = _corpus('d', 'train', range(20))

  def test_unequal_sides_raise(self):
    with self.assertRaisesRegex(ValueError, '2 sources and 1 targets'):
      nmt.ParallelCorpus(sources=('a', 'b'), targets=('a',))

  def test_subset_is_seeded_aligned_and_in_file_order(self):
    subset = self.corpus.subset(5, seed=7)
    # The documented rule, as a numpy reference.
    positions = sorted(
        np.random.default_rng(7).choice(20, size=5, replace=False))
    self.assertEqual(subset, _corpus('d', 'train', positions))
    self.assertLen(subset, 5)
    # Strictly increasing positions: file order, no repeats.
    indices = [int(s.split()[-1]) for s in subset.sources]
    self.assertEqual(indices, sorted(set(indices)))
    # Same seed, same subset; another seed, another one.
    self.assertEqual(self.corpus.subset(5, seed=7), subset)
    self.assertNotEqual(self.corpus.subset(5, seed=8), subset)

  @parameterized.named_parameters(('equal', 20), ('more', 21))
  def test_subset_of_at_least_the_size_is_the_corpus(self, n):
    self.assertIs(self.corpus.subset(n, seed=0), self.corpus)

  @parameterized.named_parameters(
      ('zero', 0), ('negative', -3), ('float', 2.5), ('bool', True))
  def test_subset_size_must_be_positive_int(self, n):
    with self.assertRaisesRegex(errors.InputError, f'n={n!r}: expected a'):
      self.corpus.subset(n, seed=0)


class ListDomainsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_known_domains_in_paper_order_then_custom_sorted(self):
    root = self.create_tempdir().full_path
    for name in ('zz_legal', 'php_docs', 'medical', 'wmt_news'):
      _make_domain(root, name)
    # Not domains: a plain file, a folder without any of the six files, a
    # hidden folder.
    _write(root, 'SHA256SUMS', b'x\n')
    os.makedirs(os.path.join(root, 'notes'))
    _write(os.path.join(root, 'notes'), 'README', b'x\n')
    _make_domain(root, '.cache')
    self.assertEqual(data.list_domains(root),
                     ('wmt_news', 'php_docs', 'medical', 'zz_legal'))

  def test_other_language_pair(self):
    root = self.create_tempdir().full_path
    _make_domain(root, 'medical',
                 files=['train.fr', 'train.en', 'dev.fr', 'dev.en',
                        'test.fr', 'test.en'])
    self.assertEqual(
        data.list_domains(root, source_lang='fr', target_lang='en'),
        ('medical',))
    # For German→English the folder holds only the English half.
    with self.assertRaisesRegex(
        errors.InputError,
        re.escape("missing ['train.de', 'dev.de', 'test.de']")):
      data.list_domains(root)

  @parameterized.named_parameters(
      ('one_missing', ['test.en']),
      ('source_side_missing', ['train.de', 'dev.de', 'test.de']),
  )
  def test_incomplete_domain_names_the_missing_files(self, missing):
    root = self.create_tempdir().full_path
    _make_domain(root, 'wmt_news')
    _make_domain(root, 'medical',
                 files=[f for f in nmt.domain_files() if f not in missing])
    with self.assertRaises(errors.InputError) as cm:
      data.list_domains(root)
    self.assertStartsWith(
        str(cm.exception),
        f'{os.path.join(root, "medical")}: incomplete domain folder, missing '
        f'{missing};')

  def test_missing_folder(self):
    missing = os.path.join(self.create_tempdir().full_path, 'none')
    with self.assertRaisesRegex(errors.InputError, 'none.*does not exist'):
      data.list_domains(missing)

  @parameterized.named_parameters(
      ('same', 'en', 'en', 'both'), ('empty', '', 'en', "source_lang=''"))
  def test_invalid_languages(self, source_lang, target_lang, expected):
    with self.assertRaisesRegex(errors.InputError, expected):
      data.list_domains(self.create_tempdir().full_path,
                        source_lang=source_lang, target_lang=target_lang)


class FindNmtDirExecutionTest(tf.test.TestCase):

  def test_shared_data_folder_gives_its_nmt_de_en(self):
    root = self.create_tempdir().full_path
    os.makedirs(os.path.join(root, 'nmt_de_en'))
    self.assertEqual(data.find_nmt_dir(root + '/'),
                     os.path.join(root, 'nmt_de_en'))

  def test_folder_of_domains_is_itself(self):
    root = self.create_tempdir().full_path
    _make_domain(root, 'medical')
    self.assertEqual(data.find_nmt_dir(root), root)

  def test_none_uses_the_environment_variable(self):
    root = self.create_tempdir().full_path
    _make_domain(root, 'medical')
    with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: root}):
      self.assertEqual(data.find_nmt_dir(), root)

  def test_folder_without_domains(self):
    root = self.create_tempdir().full_path
    os.makedirs(os.path.join(root, 'text2sql'))
    with self.assertRaisesRegex(
        errors.InputError,
        re.escape(f"'{root}' holds neither `nmt_de_en/` nor any domain")):
      data.find_nmt_dir(root)

  def test_missing_folder_says_where_it_came_from(self):
    missing = os.path.join(self.create_tempdir().full_path, 'none')
    with self.assertRaisesRegex(errors.InputError,
                                'from the data_dir argument'):
      data.find_nmt_dir(missing)

  def test_a_name_is_a_folder_of_domains_in_the_shared_data_folder(self):
    root = self.create_tempdir().full_path
    os.makedirs(os.path.join(root, 'nmt_de_en'))
    _make_domain(os.path.join(root, 'bigger'), 'medical')
    with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: root}):
      self.assertEqual(data.find_nmt_dir('bigger'),
                       os.path.join(root, 'bigger'))
      with self.assertRaisesRegex(
          errors.InputError,
          re.escape("data_dir 'smaller': no such folder here, nor in the "
                    f"`shared/data` folder '{root}'")):
        data.find_nmt_dir('smaller')

  def test_the_large_corpus_has_the_five_domains_and_a_generic_one(self):
    folder = nmt.find_nmt_dir(nmt.LARGE_SUBDIR)
    self.assertEqual(nmt.list_domains(folder),
                     nmt.DOMAINS + (nmt.GENERIC_CORPUS,))

  def test_none_gives_the_shared_nmt_de_en(self):
    self.assertEqual(data.find_nmt_dir(),
                     os.path.join(data.find_data_dir(), 'nmt_de_en'))


class FindCorpusDirExecutionTest(tf.test.TestCase):
  """train_nmt's --data_dir (the data folder) and --corpus (a name in it)."""

  def _data_folder(self) -> str:
    root = self.create_tempdir().full_path
    _make_domain(os.path.join(root, 'nmt_de_en'), 'medical')
    _make_domain(os.path.join(root, 'bigger'), 'medical')
    os.makedirs(os.path.join(root, 'text2sql'))
    return root

  def test_a_corpus_by_name_in_the_data_folder(self):
    root = self._data_folder()
    self.assertEqual(nmt.find_corpus_dir(root),
                     os.path.join(root, 'nmt_de_en'))
    self.assertEqual(nmt.find_corpus_dir(root, 'bigger'),
                     os.path.join(root, 'bigger'))
    with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: root}):
      self.assertEqual(nmt.find_corpus_dir(None, 'bigger'),
                       os.path.join(root, 'bigger'))

  def test_a_corpus_by_path(self):
    mine = self.create_tempdir().full_path
    _make_domain(mine, 'legal')
    self.assertEqual(nmt.find_corpus_dir('/no/such/dir', mine + '/'), mine)

  def test_the_shared_large_corpus(self):
    self.assertEqual(nmt.find_corpus_dir(None, nmt.LARGE_SUBDIR),
                     os.path.join(data.find_data_dir(), nmt.LARGE_SUBDIR))

  def test_a_corpus_folder_as_the_data_folder_names_the_flags_to_pass(self):
    root = self._data_folder()
    with self.assertRaisesRegex(
        errors.InputError,
        re.escape(f"The data folder '{root}/bigger' (from the data_dir "
                  "argument) looks like a corpus folder itself: it holds the "
                  "domains ['medical']. Pass its parent as the data folder "
                  f"and its name as the corpus: --data_dir={root} "
                  '--corpus=bigger.')):
      nmt.find_corpus_dir(os.path.join(root, 'bigger'))

  def test_a_corpus_name_as_the_data_folder_names_the_flag_to_pass(self):
    root = self._data_folder()
    with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: root}):
      with self.assertRaisesRegex(
          errors.InputError,
          re.escape("data_dir 'bigger': no such folder; it is the name of a "
                    f"corpus in the data folder '{root}': pass "
                    '--corpus=bigger')):
        nmt.find_corpus_dir('bigger')

  def test_an_unknown_corpus_lists_the_corpora(self):
    root = self._data_folder()
    with self.assertRaisesRegex(
        errors.InputError,
        re.escape(f"No corpus 'smaller' in the data folder '{root}' (from "
                  "the data_dir argument): its folders of domains are "
                  "['bigger', 'nmt_de_en'].")):
      nmt.find_corpus_dir(root, 'smaller')

  def test_a_data_folder_without_corpora_never_lists_nothing(self):
    empty = self.create_tempdir().full_path
    with self.assertRaisesRegex(errors.InputError,
                                re.escape(f"'{empty}' is empty.")):
      nmt.find_corpus_dir(empty)
    os.makedirs(os.path.join(empty, 'nmt_de_en', 'notes'))
    with self.assertRaisesRegex(
        errors.InputError,
        re.escape(f"Corpus folder '{empty}/nmt_de_en' holds no domain") +
        ".*" + re.escape(f"'{empty}/nmt_de_en' holds notes.")):
      nmt.find_corpus_dir(empty)


class LoadDomainsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.create_tempdir().full_path
    _make_domain(self.root, 'medical', num_pairs=6)
    _make_domain(self.root, 'wmt_news', num_pairs=3)

  def test_user_folder_with_custom_domain(self):
    loaded = data.load_domains(self.root)
    self.assertEqual(list(loaded), ['wmt_news', 'medical'])
    for name, size in (('wmt_news', 3), ('medical', 6)):
      self.assertEqual(list(loaded[name]), list(nmt.SPLITS))
      for split in nmt.SPLITS:
        self.assertEqual(loaded[name][split], _corpus(name, split,
                                                      range(size)))

  def test_requested_domains_in_requested_order(self):
    loaded = data.load_domains(self.root, ['medical', 'wmt_news'])
    self.assertEqual(list(loaded), ['medical', 'wmt_news'])
    self.assertEqual(list(data.load_domains(self.root, ('medical',))),
                     ['medical'])

  def test_caps_are_seeded_subsets(self):
    loaded = data.load_domains(self.root, max_train=4, max_eval=2, seed=3)
    # medical (6 pairs) is cut to 4 train and 2 dev/test pairs; wmt_news (3
    # pairs) keeps its 3 train pairs and is cut to 2 dev/test pairs.
    self.assertEqual(
        {d: [len(loaded[d][s]) for s in nmt.SPLITS] for d in loaded},
        {'wmt_news': [3, 2, 2], 'medical': [4, 2, 2]})
    for domain, size in (('wmt_news', 3), ('medical', 6)):
      for split, cap in (('train', 4), ('dev', 2), ('test', 2)):
        self.assertEqual(loaded[domain][split],
                         _corpus(domain, split, range(size)).subset(cap, 3))
    self.assertEqual(
        data.load_domains(self.root, max_train=4, max_eval=2, seed=3),
        loaded)

  def test_unknown_domain_lists_available(self):
    with self.assertRaisesWithLiteralMatch(
        errors.InputError,
        f"Unknown domains ['ted_iwslt14'] in {self.root!r}; available: "
        "['wmt_news', 'medical']."):
      data.load_domains(self.root, ['medical', 'ted_iwslt14'])

  @parameterized.named_parameters(
      ('string', 'medical', 'expected a sequence of domain names'),
      ('repeated', ['medical', 'medical'], 'more than once'),
  )
  def test_bad_domains_argument(self, domains, expected):
    with self.assertRaisesRegex(errors.InputError, expected):
      data.load_domains(self.root, domains)

  @parameterized.named_parameters(
      ('zero_train', {'max_train': 0}, 'max_train=0'),
      ('negative_eval', {'max_eval': -1}, 'max_eval=-1'),
  )
  def test_bad_cap(self, kwargs, expected):
    with self.assertRaisesRegex(errors.InputError, expected):
      data.load_domains(self.root, **kwargs)

  def test_folder_without_domains(self):
    with self.assertRaisesRegex(errors.InputError, 'holds no domain folder'):
      data.load_domains(self.create_tempdir().full_path)

  def test_error_in_a_split_names_both_files(self):
    folder = os.path.join(self.root, 'medical')
    _write(folder, 'dev.en', b'one\ntwo\n')
    with self.assertRaisesWithLiteralMatch(
        errors.InputError,
        f'{folder}/dev.de has 6 lines but {folder}/dev.en has 2; expected '
        'line-aligned files with one sentence per line and the same number '
        'of lines.'):
      data.load_domains(self.root)


class RealDataExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.folder = data.find_nmt_dir()

  def test_all_five_domains_in_paper_order(self):
    self.assertEqual(data.list_domains(self.folder), nmt.DOMAINS)
    self.assertEqual(nmt.DOMAINS[0], 'wmt_news')

  @parameterized.named_parameters(
      (name, name, sizes) for name, sizes in _DOCUMENTED_SIZES.items())
  def test_domain_matches_its_documentation(self, domain, sizes):
    loaded = data.load_domains(self.folder, [domain])[domain]
    self.assertEqual(tuple(len(loaded[split]) for split in nmt.SPLITS),
                     sizes)

  def test_first_and_last_pairs_of_wmt_news_test(self):
    test = data.load_domains(self.folder, ['wmt_news'])['wmt_news']['test']
    # `head -1` and `tail -1` of wmt_news/test.de and test.en (newstest2014).
    self.assertEqual(
        (test.sources[0], test.targets[0]),
        ('Gutach: Noch mehr Sicherheit für Fußgänger',
         'Gutach: Increased safety for pedestrians'))
    self.assertStartsWith(test.sources[-1], 'Allerdings ist es auch möglich')
    self.assertEqual(
        test.targets[-1],
        'However, following the recent murder of Australian travel agent '
        'Michelle Smith in Phuket, Thailand may also be looking to repair its '
        'battered tourist image, leading to an acquittal.')

  def test_caps_at_cpu_scale(self):
    loaded = data.load_domains(self.folder, max_train=1000, max_eval=1000)
    # min(cap, documented size): only php_docs' 945 dev and 944 test pairs
    # are below the eval cap.
    self.assertEqual(
        {d: tuple(len(loaded[d][s]) for s in nmt.SPLITS) for d in loaded},
        {'wmt_news': (1000, 1000, 1000), 'ted_iwslt14': (1000, 1000, 1000),
         'php_docs': (1000, 945, 944), 'ubuntu_l10n': (1000, 1000, 1000),
         'multi30k_captions': (1000, 1000, 1000)})


if __name__ == '__main__':
  tf.test.main()
