"""Reader of the German→English translation domains in `shared/data/nmt_de_en`.

The federated machine-translation experiment makes each domain one client:
`DOMAINS`, in the paper's order (news first: it is the generic domain). A
domain is a folder holding line-aligned `{train,dev,test}.{de,en}` files,
UTF-8 with one sentence per line (see `shared/data/SOURCES.md`, section
nmt_de_en, for the sources and the line counts).

*   `find_nmt_dir(data_dir)` locates the folder of domains: the `shared/data`
    folder's `nmt_de_en/`, a folder of domains given directly (so an
    experiment can be pointed at a user's own domains), or the name of one
    inside the `shared/data` folder, e.g. `nmt_de_en_large` (`LARGE_SUBDIR`:
    the same five domains with more training text, and a `generic/` corpus
    for the generic engine, `GENERIC_CORPUS`).
*   `list_domains(folder)`: every sub-folder holding all six files is a
    domain; the known `DOMAINS` come first in their order, others sorted
    after them.
*   `load_domains(folder, ...)`: `{domain: {split: ParallelCorpus}}`,
    optionally capped to CPU-scale sizes by a seeded `ParallelCorpus.subset`.

The reader is strict, like `text_classification`: a skipped or shifted line
would silently misalign every later pair of a client. A missing or empty
file, bytes that are not UTF-8, an empty line or files of different line
counts raise an `InputError` (a `ValueError`) naming the file(s), the
1-based line and what was expected.
"""

from collections.abc import Sequence
import dataclasses
import os
from typing import Optional

import numpy as np

from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.data import files

# The sub-folder of `shared/data` holding the domains.
NMT_SUBDIR = 'nmt_de_en'
# The larger version of NMT_SUBDIR (`shared/data/SOURCES.md`).
LARGE_SUBDIR = 'nmt_de_en_large'
# The folder of LARGE_SUBDIR that is the generic engine's corpus, no client.
GENERIC_CORPUS = 'generic'
DOMAINS = ('wmt_news', 'ted_iwslt14', 'php_docs', 'ubuntu_l10n',
           'multi30k_captions')
SPLITS = ('train', 'dev', 'test')
SOURCE_LANG = 'de'
TARGET_LANG = 'en'

_UTF8_BOM = '\ufeff'


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
  """Sentence pairs in file order: `sources[i]` translates to `targets[i]`.

  Attributes:
    sources: The source-language sentences.
    targets: The target-language sentences, as many as `sources`.
  """

  sources: tuple[str, ...]
  targets: tuple[str, ...]

  def __post_init__(self):
    if len(self.sources) != len(self.targets):
      raise ValueError(
          f'ParallelCorpus needs as many targets as sources; got '
          f'{len(self.sources)} sources and {len(self.targets)} targets.')

  def __len__(self) -> int:
    return len(self.sources)

  def subset(self, n: int, seed: int) -> 'ParallelCorpus':
    """A seeded random choice of `n` pairs, kept in file order.

    The pairs are the positions `sorted(np.random.default_rng(seed).choice(
    len(self), n, replace=False))`, so the same `(n, seed)` always gives
    the same subset of a corpus (and the same positions in any corpus of the
    same length).

    Args:
      n: How many pairs to keep, at least 1.
      seed: The seed of the choice.

    Returns:
      The subset; `self` if `n >= len(self)`.

    Raises:
      InputError: If `n` is not a positive integer.
    """
    _check_cap(n, 'n')
    if n >= len(self):
      return self
    rng = np.random.default_rng(seed)
    positions = np.sort(rng.choice(len(self), size=n, replace=False))
    return ParallelCorpus(
        sources=tuple(self.sources[i] for i in positions),
        targets=tuple(self.targets[i] for i in positions))


def _check_cap(value: Optional[int], name: str) -> None:
  """Raises unless `value` is a positive int (bools are refused)."""
  if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
      or value < 1):
    raise errors.InputError(
        f'{name}={value!r}: expected a positive integer (the number of '
        f'sentence pairs to keep).')


def _read_lines(path: str) -> list[str]:
  """The lines of a one-sentence-per-line UTF-8 file, newlines stripped."""
  content = files.read_file_bytes(
      path, 'a UTF-8 text file, one sentence per line')
  if not content:
    raise errors.InputError(
        f'{path}: empty file; expected one sentence per line.')
  try:
    text = content.decode('utf-8')
  except UnicodeDecodeError as e:
    line_start = content.rfind(b'\n', 0, e.start) + 1
    line_number = content.count(b'\n', 0, e.start) + 1
    raise errors.InputError(
        f'{path}:{line_number}: not valid UTF-8 (byte '
        f'{e.start - line_start + 1} of the line is '
        f'{content[e.start:e.start + 1]!r}); expected UTF-8 text.'
    ) from None
  if text.startswith(_UTF8_BOM):
    text = text[len(_UTF8_BOM):]  # A BOM would otherwise start sentence 1.
  # Only '\n' ends a line: `str.splitlines` would also split at U+2028 etc.
  lines = text.split('\n')
  if text.endswith('\n'):
    lines.pop()  # The empty string after the final newline is not a line.
  for line_number, line in enumerate(lines, start=1):
    if line.endswith('\r'):
      line = lines[line_number - 1] = line[:-1]
    if not line.strip():
      raise errors.InputError(
          f'{path}:{line_number}: empty line; expected one sentence per '
          f'line.')
  return lines


def read_parallel(source_path: str, target_path: str) -> ParallelCorpus:
  """Reads two line-aligned files, one sentence per line.

  Each line loses its line ending ('\\n' or '\\r\\n') and nothing else:
  sentences are kept exactly as written. A UTF-8 byte-order mark at the
  start of a file is ignored, and the last line may lack its newline.

  Args:
    source_path: The source-language file, e.g. `.../train.de`.
    target_path: The target-language file, e.g. `.../train.en`.

  Returns:
    The pairs in file order.

  Raises:
    InputError: If a file is missing, a directory or empty, holds bytes
      that are not UTF-8 or an empty (or whitespace-only) line (the message
      names the file and the 1-based line), or the two files have different
      numbers of lines (the message names both files and both counts).
  """
  sources = _read_lines(source_path)
  targets = _read_lines(target_path)
  if len(sources) != len(targets):
    raise errors.InputError(
        f'{source_path} has {len(sources)} lines but {target_path} has '
        f'{len(targets)}; expected line-aligned files with one sentence per '
        f'line and the same number of lines.')
  return ParallelCorpus(sources=tuple(sources), targets=tuple(targets))


def _check_langs(source_lang: str, target_lang: str) -> None:
  for name, lang in (('source_lang', source_lang),
                     ('target_lang', target_lang)):
    if not isinstance(lang, str) or not lang or os.sep in lang:
      raise errors.InputError(
          f'{name}={lang!r}: expected a file suffix such as {SOURCE_LANG!r}.')
  if source_lang == target_lang:
    raise errors.InputError(
        f'source_lang and target_lang are both {source_lang!r}; expected two '
        f'different languages.')


def domain_files(source_lang: str = SOURCE_LANG,
                 target_lang: str = TARGET_LANG) -> tuple[str, ...]:
  """The six file names of a domain: `train.de`, `train.en`, ..., `test.en`."""
  return tuple(f'{split}.{lang}' for split in SPLITS
               for lang in (source_lang, target_lang))


def list_domains(
    folder: str,
    *,
    source_lang: str = SOURCE_LANG,
    target_lang: str = TARGET_LANG,
) -> tuple[str, ...]:
  """The domains of a folder: sub-folders holding all six split files.

  A sub-folder holding none of `domain_files(source_lang, target_lang)` is
  not a domain and is ignored (so are hidden ones, named `.*`, and plain
  files such as `SHA256SUMS`).

  Args:
    folder: A folder of domains, e.g. `find_nmt_dir(...)`.
    source_lang: The source files' suffix.
    target_lang: The target files' suffix.

  Returns:
    The domain names: those of `DOMAINS` first, in that order, then any
    others sorted. Empty if the folder has no domain.

  Raises:
    InputError: If `folder` is not a directory, or a sub-folder holds some
      but not all of the six files (the message names the missing ones, or
      the path of one that is a directory).
  """
  _check_langs(source_lang, target_lang)
  if not os.path.isdir(folder):
    raise errors.InputError(
        f'Folder of domains {folder!r} does not exist or is not a '
        f'directory.')
  expected = domain_files(source_lang, target_lang)
  found = []
  for name in sorted(os.listdir(folder)):
    subfolder = os.path.join(folder, name)
    if name.startswith('.') or not os.path.isdir(subfolder):
      continue
    present = [f for f in expected
               if os.path.isfile(os.path.join(subfolder, f))]
    if not present:
      continue
    for f in expected:
      path = os.path.join(subfolder, f)
      if os.path.isdir(path):
        raise errors.InputError(
            f'{path}: is a directory; expected a UTF-8 text file, one '
            'sentence per line.')
    if len(present) < len(expected):
      missing = [f for f in expected if f not in present]
      raise errors.InputError(
          f'{subfolder}: incomplete domain folder, missing {missing}; a '
          f'domain holds all of {list(expected)}.')
    found.append(name)
  known = [d for d in DOMAINS if d in found]
  return tuple(known + [d for d in found if d not in DOMAINS])


def find_nmt_dir(
    data_dir: Optional[str] = None,
    *,
    source_lang: str = SOURCE_LANG,
    target_lang: str = TARGET_LANG,
) -> str:
  """Returns the folder of domains (by default `shared/data/nmt_de_en`).

  Args:
    data_dir: The `shared/data` folder (the one holding `nmt_de_en/`), a
      folder of domains itself (`nmt_de_en/` or a user's own), or, if no
      folder of that name exists, the name of a folder of domains inside
      the `shared/data` folder (e.g. `nmt_de_en_large`). If None, the
      `shared/data` folder is looked up as `data_root.find_data_dir` does:
      `TFF_NLP_DATA_DIR`, else `../shared/data` next to the repository;
      that folder may also be a folder of domains.
    source_lang: The source files' suffix, for recognising domains.
    target_lang: The target files' suffix.

  Returns:
    The normalised path of `<data_dir>/nmt_de_en` if that is a directory,
    else of `data_dir` if it holds at least one domain (see
    `list_domains`).

  Raises:
    InputError: If the folder does not exist, or has neither `nmt_de_en/`
      nor any domain; also for an incomplete domain folder (see
      `list_domains`).
  """
  if (data_dir and not os.path.exists(data_dir) and os.sep not in data_dir
      and data_dir not in (os.curdir, os.pardir)):
    root = data_root.find_data_dir(None)
    if not os.path.isdir(os.path.join(root, data_dir)):
      raise errors.InputError(
          f'data_dir {data_dir!r}: no such folder here, nor in the '
          f'`shared/data` folder {root!r}; pass a folder of domains, the '
          f'`shared/data` folder, or the name of a folder of domains in it '
          f'(e.g. {LARGE_SUBDIR!r}).')
    data_dir = os.path.join(root, data_dir)
  folder = data_root.find_data_dir(data_dir)
  nmt_dir = os.path.join(folder, NMT_SUBDIR)
  if os.path.isdir(nmt_dir):
    return nmt_dir
  if list_domains(folder, source_lang=source_lang, target_lang=target_lang):
    return folder
  raise errors.InputError(
      f'{folder!r} holds neither `{NMT_SUBDIR}/` nor any domain folder (a '
      f'sub-folder with all of '
      f'{list(domain_files(source_lang, target_lang))}). Pass the '
      f'`shared/data` folder or a folder of domains as data_dir (--data_dir) '
      f'or set {data_root.DATA_DIR_ENV_VAR}.')


def _holds_domains(folder: str) -> list[str]:
  """The sub-folders of `folder` holding any domain file (leniently)."""
  try:
    names = sorted(os.listdir(folder))
  except OSError:
    return []
  expected = domain_files()
  return [name for name in names if not name.startswith('.') and any(
      os.path.isfile(os.path.join(folder, name, f)) for f in expected)]


def _is_path(corpus: str) -> bool:
  return (os.sep in corpus or bool(os.altsep and os.altsep in corpus)
          or corpus in (os.curdir, os.pardir))


def find_corpus_dir(
    data_dir: Optional[str] = None,
    corpus: str = NMT_SUBDIR,
    *,
    source_lang: str = SOURCE_LANG,
    target_lang: str = TARGET_LANG,
) -> str:
  """The folder of domains `corpus` in the data folder (`train_nmt`'s flags).

  `data_dir` is the data folder of every binary (`--data_dir`: the one
  holding `text_classification/`, `text2sql/`, `nmt_de_en/`, ...); the
  corpus is chosen in it by name. A data folder that is itself a folder of
  domains, and the old `--data_dir=<corpus name>`, are errors that say
  which flags to pass instead.

  Args:
    data_dir: The data folder; None looks it up (`data_root.find_data_dir`).
    corpus: The name of a folder of domains in it (`NMT_SUBDIR`, the
      default, or `LARGE_SUBDIR`), or a path to a folder of domains (one
      with a path separator, e.g. `./mine`), which `data_dir` does not
      affect.
    source_lang: The source files' suffix, for recognising domains.
    target_lang: The target files' suffix.

  Returns:
    The normalised path of a folder holding at least one domain.

  Raises:
    InputError: Naming what is missing and what to pass instead.
  """
  if _is_path(corpus):
    folder = os.path.normpath(corpus)
    if not os.path.isdir(folder):
      raise errors.InputError(
          f'corpus {corpus!r}: no such folder (a path to a folder of '
          'domains, or the name of one in the data folder, --data_dir).')
  else:
    choice = data_root.locate_data_dir(data_dir)
    if not os.path.isdir(choice.path) and data_dir and not _is_path(data_dir):
      default = data_root.locate_data_dir(None).path
      if _holds_domains(os.path.join(default, data_dir)):
        raise errors.InputError(
            f'data_dir {data_dir!r}: no such folder; it is the name of a '
            f'corpus in the data folder {default!r}: pass '
            f'--corpus={data_dir} (--data_dir is the data folder holding '
            'it, as for every binary).')
    root = data_root.find_data_dir(data_dir)
    folder = os.path.join(root, corpus)
    if not os.path.isdir(folder):
      domains = _holds_domains(root)
      if domains:
        parent, name = os.path.split(os.path.abspath(root))
        raise errors.InputError(
            f'The data folder {root!r} (from {choice.source}) looks like a '
            f'corpus folder itself: it holds the domains {domains}. Pass its '
            f'parent as the data folder and its name as the corpus: '
            f'--data_dir={parent} --corpus={name}.')
      corpora = [name for name in sorted(os.listdir(root))
                 if _holds_domains(os.path.join(root, name))]
      raise errors.InputError(
          f'No corpus {corpus!r} in the data folder {root!r} (from '
          f'{choice.source}): '
          + (f'its folders of domains are {corpora}.' if corpora else
             data_root.describe_missing_subdir(root, corpus))
          + ' Pass the data folder as --data_dir and the name of a folder '
          'of domains in it (or a path to one) as --corpus.')
  if not list_domains(folder, source_lang=source_lang,
                      target_lang=target_lang):
    raise errors.InputError(
        f'Corpus folder {folder!r} holds no domain (a sub-folder with all '
        f'of {list(domain_files(source_lang, target_lang))}): '
        + data_root.describe_contents(folder))
  return os.path.normpath(folder)


def load_domains(
    folder: str,
    domains: Optional[Sequence[str]] = None,
    *,
    source_lang: str = SOURCE_LANG,
    target_lang: str = TARGET_LANG,
    max_train: Optional[int] = None,
    max_eval: Optional[int] = None,
    seed: int = 0,
) -> dict[str, dict[str, ParallelCorpus]]:
  """Loads every split of the given domains of a folder of domains.

  Args:
    folder: A folder of domains, e.g. `find_nmt_dir(FLAGS.data_dir)`.
    domains: The domains to load, in the order wanted; None for all of
      `list_domains(folder)`, in that order.
    source_lang: The source files' suffix.
    target_lang: The target files' suffix.
    max_train: If set, each train split is cut to at most this many pairs
      with `ParallelCorpus.subset(max_train, seed)`.
    max_eval: The same for each dev and test split.
    seed: The seed of those subsets (the same for every domain and split).

  Returns:
    `{domain: {split: corpus}}`, splits in `SPLITS` order, each corpus in
    file order.

  Raises:
    InputError: If a requested domain is not in the folder (the message
      lists the available ones), is requested twice, the folder has no
      domain, a cap is not a positive integer, or a file is missing or
      malformed (see `read_parallel`, `list_domains`).
  """
  for name, cap in (('max_train', max_train), ('max_eval', max_eval)):
    if cap is not None:
      _check_cap(cap, name)
  available = list_domains(folder, source_lang=source_lang,
                           target_lang=target_lang)
  if not available:
    raise errors.InputError(
        f'{folder!r} holds no domain folder (a sub-folder with all of '
        f'{list(domain_files(source_lang, target_lang))}).')
  if domains is None:
    domains = available
  elif isinstance(domains, str) or not isinstance(domains, Sequence):
    raise errors.InputError(
        f'domains={domains!r}: expected a sequence of domain names, e.g. '
        f'{list(available[:1])}.')
  unknown = [d for d in domains if d not in available]
  if unknown:
    raise errors.InputError(
        f'Unknown domains {unknown} in {folder!r}; available: '
        f'{list(available)}.')
  repeated = sorted({d for d in domains if list(domains).count(d) > 1})
  if repeated:
    raise errors.InputError(
        f'Domains requested more than once: {repeated}.')
  caps = {'train': max_train, 'dev': max_eval, 'test': max_eval}
  loaded = {}
  for domain in domains:
    splits = {}
    for split in SPLITS:
      corpus = read_parallel(
          os.path.join(folder, domain, f'{split}.{source_lang}'),
          os.path.join(folder, domain, f'{split}.{target_lang}'))
      if caps[split] is not None:
        corpus = corpus.subset(caps[split], seed)
      splits[split] = corpus
    loaded[domain] = splits
  return loaded
