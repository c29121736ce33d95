"""Where the `shared/data` folder is: the one search order of tff_nlp.data.

Every reader of `tff_nlp.data` takes a `data_dir`, the `shared/data` folder
holding one sub-folder per dataset (`text_classification/`, `text2sql/`,
`nmt_de_en/`, ...). When it is None, the folder is looked up in this order
(`locate_data_dir`):

1. the environment variable `TFF_NLP_DATA_DIR`;
2. under `bazel run`, `$BUILD_WORKSPACE_DIRECTORY/../shared/data` (the binary
   runs in Bazel's runfiles tree, not in the repository);
3. `<repository>/../shared/data`, next to the source checkout.

`find_data_dir` requires the chosen folder to exist;
`text2sql_source.find_text2sql_dir` downloads the text-to-SQL data when the
default folder (3 or 2) has none, but never for an explicit one (the
argument or 1).
"""

import os
from typing import Callable, NamedTuple, Optional

from tff_nlp import errors

DATA_DIR_ENV_VAR = 'TFF_NLP_DATA_DIR'

# The folder holding the `tff_nlp` package, i.e. the repository root in a
# source checkout; the shared data sits next to the repository.
_REPO_DIR = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
_DEFAULT_DATA_DIR = os.path.join(_REPO_DIR, os.pardir, 'shared', 'data')


class DataDirChoice(NamedTuple):
  """The `shared/data` folder chosen by `locate_data_dir`.

  Attributes:
    path: The normalised folder (not checked to exist).
    source: Where it came from, for messages ('the data_dir argument', ...).
    explicit: Whether the user named it (the argument or `TFF_NLP_DATA_DIR`)
      rather than it being a default location.
  """

  path: str
  source: str
  explicit: bool


def locate_data_dir(data_dir: Optional[str] = None) -> DataDirChoice:
  """The `shared/data` folder in the search order of the module docstring.

  Args:
    data_dir: The folder, if the caller names it; it then wins.

  Returns:
    The chosen folder, where it came from and whether it was explicit.
  """
  if data_dir is not None:
    return DataDirChoice(os.path.normpath(data_dir), 'the data_dir argument',
                         True)
  if os.environ.get(DATA_DIR_ENV_VAR):
    return DataDirChoice(os.path.normpath(os.environ[DATA_DIR_ENV_VAR]),
                         f'the environment variable {DATA_DIR_ENV_VAR}', True)
  if os.environ.get('BUILD_WORKSPACE_DIRECTORY'):
    # Set by `bazel run` to the source checkout; __file__ is in runfiles.
    return DataDirChoice(
        os.path.normpath(os.path.join(
            os.environ['BUILD_WORKSPACE_DIRECTORY'], os.pardir, 'shared',
            'data')),
        'the Bazel workspace (BUILD_WORKSPACE_DIRECTORY)', False)
  return DataDirChoice(os.path.normpath(_DEFAULT_DATA_DIR),
                       'the default location next to the repository', False)


def find_data_dir(data_dir: Optional[str] = None) -> str:
  """Returns the `shared/data` folder: the argument, env var, or default.

  Args:
    data_dir: The `shared/data` folder (holding `text_classification/`,
      ...). If None, it is looked up as the module docstring says:
      `TFF_NLP_DATA_DIR`, else, under `bazel run`,
      `$BUILD_WORKSPACE_DIRECTORY/../shared/data`, else
      `<repository>/../shared/data`.

  Returns:
    The normalised path of an existing directory.

  Raises:
    ValueError: If the chosen folder does not exist, saying where the path
      came from and how to set another one.
  """
  choice = locate_data_dir(data_dir)
  if not os.path.isdir(choice.path):
    raise errors.InputError(
        f'Data directory {choice.path!r} (from {choice.source}) does not '
        f'exist. Pass the `shared/data` folder as data_dir (--data_dir) or '
        f'set {DATA_DIR_ENV_VAR}.'
    )
  return choice.path


def describe_missing_subdir(
    root: str, subdir: str, *,
    looks_like: Callable[[str], bool] = lambda path: False,
) -> str:
  """Why the data folder `root` has no `subdir/`, for an error message.

  The data folder is the one holding `text_classification/`, `text2sql/`,
  `nmt_de_en/`, ... (`--data_dir` of every binary). A common mistake is to
  pass one of those folders, or a folder inside one, instead.

  Args:
    root: The data folder given, which exists but has no `subdir/`.
    subdir: The folder expected in it, e.g. 'text_classification'.
    looks_like: Whether a folder has the contents of a `subdir/` folder
      (e.g. dataset folders), so that one passed under another name is
      recognised too.

  Returns:
    A sentence: that `root` looks like the `subdir/` folder itself or lies
    inside one, and which folder to pass instead; else what `root` holds
    (or that it is empty).
  """
  path = os.path.abspath(root)
  if os.path.basename(path) == subdir or looks_like(path):
    return (f'{root!r} looks like the `{subdir}/` folder itself; pass its '
            f'parent, {os.path.dirname(path)!r}, as data_dir (--data_dir).')
  folder = os.path.dirname(path)
  while folder != os.path.dirname(folder):
    if os.path.basename(folder) == subdir:
      return (f'{root!r} is inside a `{subdir}/` folder; pass the folder '
              f'holding it, {os.path.dirname(folder)!r}, as data_dir '
              '(--data_dir).')
    folder = os.path.dirname(folder)
  contents = describe_contents(root)
  if contents.endswith(' is empty.') or contents.endswith(' be listed.'):
    return contents
  return f'{contents[:-1]}, but no `{subdir}/`.'


def describe_contents(folder: str, max_names: int = 12) -> str:
  """'<folder> holds a, b, ....', '<folder> is empty.', for messages."""
  try:
    names = sorted(name for name in os.listdir(folder)
                   if not name.startswith('.'))
  except OSError:
    return f'{folder!r} cannot be listed.'
  if not names:
    return f'{folder!r} is empty.'
  shown = ', '.join(names[:max_names])
  return f'{folder!r} holds {shown}{", ..." if len(names) > max_names else ""}.'
