"""Reader of the text-classification datasets in `shared/data`.

Each dataset is a folder (e.g. `r8/`) holding `train.tsv`, `test.tsv` and
optionally `dev.tsv`: UTF-8 text, one example per line, `label<TAB>text`
(see `shared/data/SOURCES.md`). The reader is strict on purpose: federated
experiments split the data into clients, and a silently skipped or mangled
line would change every client's data without any trace. Any line that does
not have exactly the expected shape raises an `InputError` (a `ValueError`)
naming the file, the 1-based line number and what was expected.
"""

import dataclasses
import os
from typing import Optional

import numpy as np

from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.data import files

TEXT_CLASSIFICATION_SUBDIR = 'text_classification'
TRAIN_SPLIT = 'train'
DEV_SPLIT = 'dev'
TEST_SPLIT = 'test'
SPLIT_SUFFIX = '.tsv'
# The datasets `shared/data/SOURCES.md` describes; a folder beside them is a
# user's own.
BUILT_IN_DATASETS = ('r8', 'reuters8_fedseit', 'subj', 'tmn', 'trec50',
                     'trec6')


@dataclasses.dataclass(frozen=True)
class Split:
  """The examples of one split, in file order.

  Attributes:
    texts: The example texts.
    labels: int32 array of label ids, indices into the dataset's
      `label_names`.
  """

  texts: tuple[str, ...]
  labels: np.ndarray

  def __len__(self) -> int:
    return len(self.texts)


@dataclasses.dataclass(frozen=True)
class TextClassificationData:
  """A text-classification dataset with its label vocabulary.

  Attributes:
    name: The dataset's folder name, e.g. 'r8'.
    label_names: The sorted labels of the training split; label id i is
      `label_names[i]`.
    train: The training split.
    test: The test split.
    dev: The development split, or None if the dataset has none.
  """

  name: str
  label_names: tuple[str, ...]
  train: Split
  test: Split
  dev: Optional[Split]

  @property
  def num_classes(self) -> int:
    return len(self.label_names)


def read_tsv(path: str) -> tuple[list[str], list[str]]:
  """Reads a `label<TAB>text` file.

  A trailing CR of a line (Windows line endings) and a UTF-8 byte-order mark
  at the start of the file are ignored; labels and texts are otherwise kept
  exactly as written.

  Args:
    path: The file to read.

  Returns:
    `(labels, texts)`, two lists of equal length in file order.

  Raises:
    InputError: If the file is missing, a directory or empty, or a line is
      not valid UTF-8, does not hold exactly one TAB, or has an empty (or
      whitespace only) label or text. The message names the file and the
      1-based line.
  """
  content = files.read_file_bytes(
      path, 'a UTF-8 file of lines "label<TAB>text"')
  if not content:
    raise errors.InputError(
        f'{path}: empty file; expected lines "label<TAB>text".'
    )
  lines = content.split(b'\n')
  if content.endswith(b'\n'):
    lines.pop()  # The empty string after the final newline is not a line.
  labels, texts = [], []
  for line_number, raw_line in enumerate(lines, start=1):
    where = f'{path}:{line_number}'
    if raw_line.endswith(b'\r'):
      raw_line = raw_line[:-1]
    if line_number == 1 and raw_line.startswith(b'\xef\xbb\xbf'):
      raw_line = raw_line[3:]  # A BOM would otherwise join the first label.
    try:
      line = raw_line.decode('utf-8')
    except UnicodeDecodeError as e:
      raise errors.InputError(
          f'{where}: not valid UTF-8 (byte {e.start + 1} of the line is '
          f'{raw_line[e.start:e.start + 1]!r}); expected UTF-8 text.'
      ) from None
    num_tabs = line.count('\t')
    if num_tabs != 1:
      raise errors.InputError(
          f'{where}: expected "label<TAB>text" with exactly one TAB, found '
          f'{num_tabs}: {line[:80]!r}.'
      )
    label, text = line.split('\t')
    if not label.strip():
      raise errors.InputError(
          f'{where}: empty label; expected "label<TAB>text".'
      )
    if not text.strip():
      raise errors.InputError(
          f'{where}: empty text; expected "label<TAB>text".'
      )
    labels.append(label)
    texts.append(text)
  return labels, texts


def _to_split(
    path: str, labels: list[str], texts: list[str], label_ids: dict[str, int]
) -> Split:
  ids = np.empty(len(labels), np.int32)
  for i, label in enumerate(labels):
    if label not in label_ids:
      raise errors.InputError(
          f'{path}:{i + 1}: label {label!r} does not occur in the training '
          f'split; expected one of {sorted(label_ids)}.'
      )
    ids[i] = label_ids[label]
  return Split(texts=tuple(texts), labels=ids)


def _is_dataset(folder: str) -> bool:
  return all(os.path.isfile(os.path.join(folder, split + SPLIT_SUFFIX))
             for split in (TRAIN_SPLIT, TEST_SPLIT))


def _holds_datasets(folder: str) -> bool:
  """Whether `folder` holds dataset folders (is a `text_classification/`)."""
  try:
    names = os.listdir(folder)
  except OSError:
    return False
  return any(_is_dataset(os.path.join(folder, name)) for name in names)


def list_datasets(data_dir: Optional[str] = None) -> tuple[str, ...]:
  """The dataset folders of `<data_dir>/text_classification/`, sorted.

  A dataset folder holds `train.tsv` and `test.tsv`; other entries (files
  such as `SHA256SUMS`, hidden or incomplete folders) are not datasets.

  Args:
    data_dir: The `shared/data` folder; see `data_root.find_data_dir`.

  Returns:
    The names; empty if the folder does not exist.
  """
  parent = os.path.join(data_root.find_data_dir(data_dir),
                        TEXT_CLASSIFICATION_SUBDIR)
  if not os.path.isdir(parent):
    return ()
  return tuple(
      name for name in sorted(os.listdir(parent))
      if not name.startswith('.') and _is_dataset(os.path.join(parent, name)))


def load_dataset(
    name: str, data_dir: Optional[str] = None
) -> TextClassificationData:
  """Loads `<data_dir>/text_classification/<name>/{train,dev,test}.tsv`.

  Args:
    name: The dataset folder, e.g. 'r8', 'tmn', 'trec6'.
    data_dir: The `shared/data` folder; see `data_root.find_data_dir`.

  Returns:
    A `TextClassificationData` whose label ids follow the sorted training
    labels.

  Raises:
    ValueError: If the dataset folder, `train.tsv` or `test.tsv` is missing, a
      file is malformed (see `read_tsv`), or a dev/test label does not occur
      in training.
  """
  root = data_root.find_data_dir(data_dir)
  parent = os.path.join(root, TEXT_CLASSIFICATION_SUBDIR)
  dataset_dir = os.path.join(parent, name)
  if not os.path.isdir(parent):
    raise errors.InputError(
        f'Dataset {name!r}: the data folder {root!r} has no '
        f'`{TEXT_CLASSIFICATION_SUBDIR}/` folder. '
        + data_root.describe_missing_subdir(
            root, TEXT_CLASSIFICATION_SUBDIR, looks_like=_holds_datasets)
        + f' The data folder is the one holding `{TEXT_CLASSIFICATION_SUBDIR}'
        f'/`, `text2sql/`, ... (data_dir, --data_dir, or '
        f'{data_root.DATA_DIR_ENV_VAR}).'
    )
  if not os.path.isdir(dataset_dir):
    found = list(list_datasets(data_dir))
    raise errors.InputError(
        f'Dataset folder {dataset_dir!r} not found; '
        + (f'datasets in {parent!r}: {found}.' if found else
           f'{parent!r} holds no dataset (a folder with {TRAIN_SPLIT}'
           f'{SPLIT_SUFFIX} and {TEST_SPLIT}{SPLIT_SUFFIX}).')
    )

  def path_of(split):
    return os.path.join(dataset_dir, split + SPLIT_SUFFIX)

  train_labels, train_texts = read_tsv(path_of(TRAIN_SPLIT))
  label_names = tuple(sorted(set(train_labels)))
  label_ids = {label: i for i, label in enumerate(label_names)}
  train = _to_split(path_of(TRAIN_SPLIT), train_labels, train_texts, label_ids)
  test = _to_split(path_of(TEST_SPLIT), *read_tsv(path_of(TEST_SPLIT)),
                   label_ids)
  dev = None
  if os.path.exists(path_of(DEV_SPLIT)):
    dev = _to_split(path_of(DEV_SPLIT), *read_tsv(path_of(DEV_SPLIT)),
                    label_ids)
  return TextClassificationData(
      name=name, label_names=label_names, train=train, test=test, dev=dev
  )
