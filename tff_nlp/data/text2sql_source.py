"""Where the text-to-SQL data is: a local folder, or a verified download.

The eight clients of the Lorar paper (Zhang et al., ACL 2023) are the
single-domain text-to-SQL datasets of Finegan-Dollak et al. (ACL 2018), as
published in `jkkummerfeld/text2sql-data`. `find_text2sql_dir` returns the
folder holding their files (`<name>.json`, `<name>-schema.csv`, ...), looked
up in this order:

1. the `data_dir` argument (`--data_dir`): the `shared/data` folder, whose
   `text2sql/` subfolder is used, as for every dataset of `tff_nlp.data`;
2. the environment variable `TFF_NLP_DATA_DIR` (also the `shared/data`
   folder);
3. `../shared/data/text2sql` next to the repository (or next to the Bazel
   workspace under `bazel run`), when it exists (the search order of
   `data_root`, shared by every dataset);
4. otherwise a download of the pinned upstream files into a user cache,
   `$XDG_CACHE_HOME/tff_nlp/text2sql/<commit>` (`~/.cache/...` when
   `XDG_CACHE_HOME` is unset).

An explicit folder (1 or 2) without `text2sql/` is an error, never a reason
to download: a typo should not silently fetch data from the network.

The download is pinned twice: to an upstream commit (`UPSTREAM_COMMIT`), and
to each file's SHA-256 (`FILES`, computed from the copy in `shared/data`,
which SOURCES.md documents as untransformed). A file is written to the cache
only once its checksum matched (through a temporary file and an atomic
rename), so the cache never holds a partial or wrong file; a mismatch is an
error naming the URL and both hashes. The base URL can be changed with the
`base_url` argument or `TFF_NLP_TEXT2SQL_BASE_URL` (a mirror; the tests use a
local HTTP server).
"""

import hashlib
import os
import tempfile
from typing import Iterable, Optional
import urllib.error
import urllib.request

from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.data import files

BASE_URL_ENV_VAR = 'TFF_NLP_TEXT2SQL_BASE_URL'
TEXT2SQL_SUBDIR = 'text2sql'

UPSTREAM_REPO = 'jkkummerfeld/text2sql-data'
UPSTREAM_COMMIT = '5050bad2309a93636ea4788d3660c9202bf11e0e'
# The upstream `data/` folder at the pinned commit; a file's URL is this
# followed by its upstream name.
DEFAULT_BASE_URL = (
    f'https://raw.githubusercontent.com/{UPSTREAM_REPO}/{UPSTREAM_COMMIT}/'
    'data/'
)

# Local file name -> (upstream name in `data/`, SHA-256). Upstream calls the
# two databases `*-db.added-in-2020.sqlite` (marked "untested" there); the
# other databases are not in the upstream repository.
FILES = {
    'academic.json': (
        'academic.json',
        '0b23af718374e2c0a5176ea4a9f2c4f13c4e18efd6ed1b5fb8bed1db2a7cdb97'),
    'academic-schema.csv': (
        'academic-schema.csv',
        'fc9530a6bff5c2abc9e01f9631404a19a6e3ab4f9e01f6fb089711144bbcb587'),
    'academic-fields.txt': (
        'academic-fields.txt',
        '00841917cd04d7f1c677d00e2ad1da4343d4f6a7744d7ebe8f38f2a311a977f7'),
    'advising.json': (
        'advising.json',
        'ec8d6a2d570b1768b25ef51d2445bb599b537d9b3d802bf498513a70337599bd'),
    'advising-schema.csv': (
        'advising-schema.csv',
        'a425eb3ac7e68c252a0ad61de8b66221693f5e39c95843c1ece9e62277abce6e'),
    'advising-fields.txt': (
        'advising-fields.txt',
        'b796bcc09bf3e25bfeb02a1b05daf33c1605cdbee5957b7e0a88ddc9612cce4f'),
    # CC-BY-4.0: kept next to the data it licenses.
    'advising-LICENSE.txt': (
        'advising-LICENSE.txt',
        '7e7170e3cebf88a9f60c7b8421418323c09304da1af4d5e90f4da1dc1c8a2661'),
    'atis.json': (
        'atis.json',
        'ce2d0bf341718061dc0e2ecc50d200b191121c762bb29c24b28749a2ebc9f4c7'),
    'atis-schema.csv': (
        'atis-schema.csv',
        '49bb428569a282fa29a5c662d40fcd2fe58873cf04d32806e797f76741a35ad7'),
    'atis-fields.txt': (
        'atis-fields.txt',
        'd76d913ed340c1618a0f19142ad5d4fe6f9d59ad459d6c185a49782e01282d9d'),
    'geography.json': (
        'geography.json',
        'b20ad8ed357029c9efa49aa64434729f624591850f66b1137cabcc0e45273c1b'),
    'geography-schema.csv': (
        'geography-schema.csv',
        '09c8fc40f163f5209341d68ae820a23a57bfb5f31ecd7e9a915730bc11b59515'),
    'geography-fields.txt': (
        'geography-fields.txt',
        'd0546560bb87a609412730b7aa960a19c980c8dfc4181aaf41fd5a39dcb26ec3'),
    'geography-db.sqlite': (
        'geography-db.added-in-2020.sqlite',
        '98955372123cd9a8e761b00c2c67fbf221f1b8699927add538b53154c702dd3c'),
    'imdb.json': (
        'imdb.json',
        'e1cca6cd1074408e156769fbdcf72e93446bd31d5ae71cd67e5dbfa30816115f'),
    'imdb-schema.csv': (
        'imdb-schema.csv',
        'e8ad79113b193a5cb9dd0f96a954d7bab3b0fe96b2d79caccf44642f4dc57007'),
    'imdb-fields.txt': (
        'imdb-fields.txt',
        '56e339ff333a6c34bf30e96f3799be14ee171dd1653d026dbd34e8e58568de3d'),
    'restaurants.json': (
        'restaurants.json',
        'f1fd300ac621761eb6f2b3f709668753990f13263bbf0c9caac8c78b0fb695d4'),
    'restaurants-schema.csv': (
        'restaurants-schema.csv',
        '19269c42625eb352c2ac5feab6f6fd17f12eea3373478e83a60b2e053da3241c'),
    'restaurants-fields.txt': (
        'restaurants-fields.txt',
        '649cff393e1041a4f29ee43640a12121c8caf678fae38701bc123a939ef3f95b'),
    'restaurants-db.sqlite': (
        'restaurants-db.added-in-2020.sqlite',
        'd4aba515a51c3d00cd20e1a076ac5f060c18f73b16a571e057831a6846683387'),
    'scholar.json': (
        'scholar.json',
        '390dc4f1851d78e323adc0ffcbeeb7ac98a6d4ee74fedbdf544a4ba540d98e93'),
    'scholar-schema.csv': (
        'scholar-schema.csv',
        'e44efecc1ffae3a74b506da349781133f008962879a429184f875868863542b8'),
    'scholar-fields.txt': (
        'scholar-fields.txt',
        '5535b06da4e6cc7fb5b5c968698c4cf134ec00b8b25125ef5238fa0cd100c210'),
    'yelp.json': (
        'yelp.json',
        '4a43983e8fd04d169c7f1661eac22ee016e7b382af90a0bab394017fc71dea0b'),
    'yelp-schema.csv': (
        'yelp-schema.csv',
        'b8eba5e65117e69cad78d1136be79490bcf38ba41468e6eff98b1e2ba9c33882'),
    'yelp-fields.txt': (
        'yelp-fields.txt',
        'cfd36c1130ab8b298455f19485a0c8a9c46d9da3d0e3f0ac26ae166c0ad8635a'),
}

_CHUNK_BYTES = 1 << 20


class DownloadError(errors.InputError):
  """A pinned file could not be fetched, or its SHA-256 did not match."""


def cache_dir() -> str:
  """The download folder: `$XDG_CACHE_HOME/tff_nlp/text2sql/<commit>`."""
  root = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache'
  )
  return os.path.join(root, 'tff_nlp', TEXT2SQL_SUBDIR, UPSTREAM_COMMIT)


def find_text2sql_dir(
    data_dir: Optional[str] = None,
    *,
    base_url: Optional[str] = None,
    download_dir: Optional[str] = None,
) -> str:
  """Returns the folder holding the text-to-SQL files; see the module doc.

  Args:
    data_dir: The `shared/data` folder (the one holding `text2sql/`). If None,
      `TFF_NLP_DATA_DIR`, then `../shared/data/text2sql` next to the
      repository, then a download.
    base_url: Where to download from when needed; see `download`.
    download_dir: The download folder; default `cache_dir()`.

  Returns:
    The normalised path of an existing directory.

  Raises:
    InputError: If `data_dir` or `TFF_NLP_DATA_DIR` is given but has no
      `text2sql/` folder (the message says where the path came from), or the
      download fails (`DownloadError`).
  """
  choice = data_root.locate_data_dir(data_dir)
  folder = os.path.normpath(os.path.join(choice.path, TEXT2SQL_SUBDIR))
  if not choice.explicit:
    if os.path.isdir(folder):
      return folder
    return download(base_url=base_url, download_dir=download_dir)
  if not os.path.isdir(folder):
    hint = ''
    if os.path.isdir(choice.path):
      hint = ' ' + data_root.describe_missing_subdir(
          choice.path, TEXT2SQL_SUBDIR, looks_like=_holds_text2sql_files)
    raise errors.InputError(
        f'Text-to-SQL folder {folder!r} (from {choice.source}) does not '
        f'exist.{hint} Pass the `shared/data` folder, the one holding '
        f'`{TEXT2SQL_SUBDIR}/`, as data_dir (--data_dir) or '
        f'{data_root.DATA_DIR_ENV_VAR}; leave both unset to download the '
        f'data.'
    )
  return folder


def _holds_text2sql_files(folder: str) -> bool:
  """Whether `folder` holds the text-to-SQL files (is a `text2sql/`)."""
  try:
    return any(name.endswith('-schema.csv') for name in os.listdir(folder))
  except OSError:
    return False


def sha256_of(path: str) -> str:
  """The hex SHA-256 of a file's bytes (the pinned files are a few MB).

  Raises:
    InputError: If `path` is missing, a directory or cannot be read; the
      message names it (`files.read_file_bytes`).
  """
  return hashlib.sha256(files.read_file_bytes(path, 'a file')).hexdigest()


def _fetch_verified(url: str, expected_sha256: str, path: str,
                    timeout: float) -> None:
  """Downloads `url` to `path` if its SHA-256 matches; else raises."""
  folder = os.path.dirname(path)
  handle, temp_path = tempfile.mkstemp(
      dir=folder, prefix=f'.{os.path.basename(path)}.', suffix='.partial')
  try:
    digest = hashlib.sha256()
    with os.fdopen(handle, 'wb') as out:
      try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
          for chunk in iter(lambda: response.read(_CHUNK_BYTES), b''):
            digest.update(chunk)
            out.write(chunk)
      except urllib.error.HTTPError as e:
        raise DownloadError(
            f'Download of {url} failed: HTTP {e.code} {e.reason}.'
        ) from None
      except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, 'reason', e)
        raise DownloadError(
            f'Download of {url} failed: {reason}.'
        ) from None
    actual = digest.hexdigest()
    if actual != expected_sha256:
      raise DownloadError(
          f'Checksum mismatch for {url} ({os.path.basename(path)}): expected '
          f'SHA-256 {expected_sha256}, got {actual}; the file was not kept.'
      )
    os.replace(temp_path, path)
  finally:
    if os.path.exists(temp_path):
      os.remove(temp_path)


def download(
    *,
    base_url: Optional[str] = None,
    download_dir: Optional[str] = None,
    files: Optional[Iterable[str]] = None,
    timeout: float = 60.0,
) -> str:
  """Downloads the pinned upstream files, verifying each one's SHA-256.

  A file already in the folder with the pinned checksum is not downloaded
  again (so a second call makes no request); one with another checksum
  (damaged, or edited by hand) is downloaded again.

  Args:
    base_url: The URL of upstream's `data/` folder; a file's URL is this plus
      its upstream name. Default: `TFF_NLP_TEXT2SQL_BASE_URL`, else
      `DEFAULT_BASE_URL` (raw.githubusercontent.com at `UPSTREAM_COMMIT`).
    download_dir: Where to put the files; default `cache_dir()`.
    files: Local names (keys of `FILES`) to fetch; default all of them.
    timeout: Seconds before a stalled connection is given up.

  Returns:
    The download folder.

  Raises:
    DownloadError: If a file cannot be fetched (the message has the URL and
      the HTTP status or network error) or its SHA-256 differs from the pin
      (the message has the URL and both hashes; nothing is written).
    InputError: If `files` names a file that is not pinned, the download
      folder is not a directory, or a file's place in it is taken by a
      directory (checked before anything is fetched).
  """
  if base_url is None:
    base_url = os.environ.get(BASE_URL_ENV_VAR) or DEFAULT_BASE_URL
  if not base_url.endswith('/'):
    base_url += '/'
  folder = download_dir or cache_dir()
  names = list(FILES) if files is None else list(files)
  unknown = sorted(set(names) - set(FILES))
  if unknown:
    raise errors.InputError(
        f'Unknown text-to-SQL files {unknown}; expected names from '
        f'{sorted(FILES)}.'
    )
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError as e:  # A file in the way, no permission, ...
    raise errors.InputError(
        f'{folder}: cannot be made the download folder ({e.strerror or e}); '
        f'expected a directory.') from None
  for name in names:
    path = os.path.join(folder, name)
    if os.path.isdir(path):
      raise errors.InputError(
          f'{path}: is a directory; expected the downloaded file {name} (or '
          'nothing).')
  for name in names:
    upstream_name, expected = FILES[name]
    path = os.path.join(folder, name)
    if os.path.isfile(path) and sha256_of(path) == expected:
      continue
    _fetch_verified(base_url + upstream_name, expected, path, timeout)
  return folder
