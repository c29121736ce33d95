"""Tests of the text-to-SQL data location and the verified download.

The download is tested against a local HTTP server on 127.0.0.1 serving a
copy of shared/data/text2sql laid out like upstream's `data/` folder; no test
uses the network.
"""

import functools
import hashlib
import http.server
import os
import shutil
import threading
from unittest import mock

import tensorflow as tf

from tff_nlp import data
from tff_nlp import errors
from tff_nlp.data import data_root
from tff_nlp.data import text2sql_source

_SMALL_FILES = ('restaurants.json', 'restaurants-schema.csv',
                'restaurants-db.sqlite')


def _shared_text2sql_dir() -> str:
  # shared/data (TFF_NLP_DATA_DIR or next to the repository)/text2sql.
  return os.path.join(data.find_data_dir(), 'text2sql')


class _Server:
  """Serves a folder over HTTP on 127.0.0.1 and records the paths asked."""

  def __init__(self, root: str):
    requests = self.requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):

      def do_GET(self):
        requests.append(self.path)
        super().do_GET()

      def log_message(self, *args):
        del args  # Keeps the test output clean.

    self._server = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), functools.partial(Handler, directory=root))
    self._thread = threading.Thread(target=self._server.serve_forever,
                                    daemon=True)
    self._thread.start()
    self.base_url = f'http://127.0.0.1:{self._server.server_port}/data/'

  def close(self):
    self._server.shutdown()
    self._server.server_close()
    self._thread.join()


class DownloadExecutionTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    # An upstream-like tree: <root>/data/<upstream name>.
    self.root = self.create_tempdir().full_path
    self.upstream = os.path.join(self.root, 'data')
    os.makedirs(self.upstream)
    shared = _shared_text2sql_dir()
    for name, (upstream_name, _) in text2sql_source.FILES.items():
      shutil.copyfile(os.path.join(shared, name),
                      os.path.join(self.upstream, upstream_name))
    self.server = _Server(self.root)
    self.addCleanup(self.server.close)
    self.cache = os.path.join(self.create_tempdir().full_path, 'cache')

  def test_pins_are_the_shared_files(self):
    shared = _shared_text2sql_dir()
    for name, (_, expected) in text2sql_source.FILES.items():
      with open(os.path.join(shared, name), 'rb') as f:
        self.assertEqual(hashlib.sha256(f.read()).hexdigest(), expected,
                         name)
    # The reader's files are all pinned: every client's JSON and schema.
    for client in data.text2sql.CLIENTS:
      self.assertIn(f'{client}.json', text2sql_source.FILES)
      self.assertIn(f'{client}-schema.csv', text2sql_source.FILES)

  def test_download_verifies_and_reuses_the_cache(self):
    folder = text2sql_source.download(base_url=self.server.base_url,
                                      download_dir=self.cache)
    self.assertEqual(folder, self.cache)
    self.assertLen(self.server.requests, len(text2sql_source.FILES))
    # The sqlite files are fetched under their upstream names.
    self.assertIn('/data/geography-db.added-in-2020.sqlite',
                  self.server.requests)
    self.assertEqual(sorted(os.listdir(self.cache)),
                     sorted(text2sql_source.FILES))
    shared = _shared_text2sql_dir()
    for name in text2sql_source.FILES:
      with open(os.path.join(self.cache, name), 'rb') as ours, open(
          os.path.join(shared, name), 'rb') as theirs:
        self.assertEqual(ours.read(), theirs.read(), name)
    # The reader reads the download like the shared copy.
    client = data.text2sql.read_client_queries(folder, 'restaurants')
    self.assertLen(client, 23)

    text2sql_source.download(base_url=self.server.base_url,
                             download_dir=self.cache)
    self.assertLen(self.server.requests, len(text2sql_source.FILES))

  def test_damaged_cached_file_is_fetched_again(self):
    text2sql_source.download(base_url=self.server.base_url,
                             download_dir=self.cache, files=_SMALL_FILES)
    with open(os.path.join(self.cache, 'restaurants.json'), 'ab') as f:
      f.write(b' ')
    text2sql_source.download(base_url=self.server.base_url,
                             download_dir=self.cache, files=_SMALL_FILES)
    self.assertEqual(self.server.requests[3:], ['/data/restaurants.json'])
    self.assertEqual(
        text2sql_source.sha256_of(
            os.path.join(self.cache, 'restaurants.json')),
        text2sql_source.FILES['restaurants.json'][1])

  def test_checksum_mismatch_is_an_error_and_keeps_nothing(self):
    served = os.path.join(self.upstream, 'restaurants-schema.csv')
    with open(served, 'ab') as f:
      f.write(b'EXTRA, COLUMN\n')
    actual = text2sql_source.sha256_of(served)
    expected = text2sql_source.FILES['restaurants-schema.csv'][1]
    with self.assertRaises(text2sql_source.DownloadError) as cm:
      text2sql_source.download(base_url=self.server.base_url,
                               download_dir=self.cache, files=_SMALL_FILES)
    message = str(cm.exception)
    self.assertIsInstance(cm.exception, errors.InputError)
    self.assertIn(f'{self.server.base_url}restaurants-schema.csv', message)
    self.assertIn(f'expected SHA-256 {expected}, got {actual}', message)
    # The first file was verified and kept; the bad one and its temporary
    # file are gone.
    self.assertEqual(os.listdir(self.cache), ['restaurants.json'])

  def test_http_404(self):
    os.remove(os.path.join(self.upstream, 'restaurants.json'))
    with self.assertRaisesRegex(
        text2sql_source.DownloadError,
        rf'Download of {self.server.base_url}restaurants\.json failed: '
        'HTTP 404'):
      text2sql_source.download(base_url=self.server.base_url,
                               download_dir=self.cache, files=_SMALL_FILES)
    self.assertEqual(os.listdir(self.cache), [])

  def test_unknown_file(self):
    with self.assertRaisesRegex(errors.InputError, r"\['spider\.json'\]"):
      text2sql_source.download(base_url=self.server.base_url,
                               download_dir=self.cache,
                               files=['spider.json'])

  def test_default_cache_and_base_url_from_the_environment(self):
    xdg = self.create_tempdir().full_path
    with mock.patch.dict(os.environ, {
        'XDG_CACHE_HOME': xdg,
        text2sql_source.BASE_URL_ENV_VAR: self.server.base_url,
    }):
      folder = text2sql_source.download(files=_SMALL_FILES)
    self.assertEqual(folder, os.path.join(
        xdg, 'tff_nlp', 'text2sql', text2sql_source.UPSTREAM_COMMIT))
    self.assertEqual(sorted(os.listdir(folder)), sorted(_SMALL_FILES))

  def test_default_base_url_is_the_pinned_commit(self):
    self.assertEqual(
        text2sql_source.DEFAULT_BASE_URL,
        'https://raw.githubusercontent.com/jkkummerfeld/text2sql-data/'
        '5050bad2309a93636ea4788d3660c9202bf11e0e/data/')

  def test_find_downloads_when_no_folder_is_found(self):
    missing = os.path.join(self.root, 'no')
    with mock.patch.object(data_root, '_DEFAULT_DATA_DIR', missing):
      with mock.patch.dict(os.environ, {
          data_root.DATA_DIR_ENV_VAR: '',
          'BUILD_WORKSPACE_DIRECTORY': '',
          text2sql_source.BASE_URL_ENV_VAR: self.server.base_url,
      }):
        folder = data.find_text2sql_dir(download_dir=self.cache)
    self.assertEqual(folder, self.cache)
    self.assertLen(self.server.requests, len(text2sql_source.FILES))


class FindText2sqlDirExecutionTest(tf.test.TestCase):

  def _shared_data(self) -> str:
    root = self.create_tempdir().full_path
    os.makedirs(os.path.join(root, 'text2sql'))
    return root

  def test_argument_then_environment_then_default(self):
    explicit, from_env = self._shared_data(), self._shared_data()
    default_root = self._shared_data()
    default = os.path.join(default_root, 'text2sql')
    with mock.patch.object(data_root, '_DEFAULT_DATA_DIR', default_root):
      with mock.patch.dict(os.environ, {
          data_root.DATA_DIR_ENV_VAR: from_env,
          'BUILD_WORKSPACE_DIRECTORY': ''}):
        self.assertEqual(data.find_text2sql_dir(explicit + '/'),
                         os.path.join(explicit, 'text2sql'))
        self.assertEqual(data.find_text2sql_dir(),
                         os.path.join(from_env, 'text2sql'))
      with mock.patch.dict(os.environ, {
          data_root.DATA_DIR_ENV_VAR: '',
          'BUILD_WORKSPACE_DIRECTORY': ''}):
        self.assertEqual(data.find_text2sql_dir(), default)

  def test_default_is_next_to_the_repository(self):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    self.assertEqual(
        os.path.normpath(os.path.join(data_root._DEFAULT_DATA_DIR,
                                      text2sql_source.TEXT2SQL_SUBDIR)),
        os.path.join(os.path.dirname(repo), 'shared', 'data', 'text2sql'))

  def test_explicit_folder_without_text2sql_is_an_error(self):
    empty = self.create_tempdir().full_path
    expected = os.path.join(empty, 'text2sql')
    with self.assertRaisesRegex(
        errors.InputError,
        f"'{expected}' \\(from the data_dir argument\\) does not exist"):
      data.find_text2sql_dir(empty)
    with mock.patch.dict(os.environ,
                         {data_root.DATA_DIR_ENV_VAR: empty}):
      with self.assertRaisesRegex(errors.InputError,
                                  'from the environment variable '
                                  'TFF_NLP_DATA_DIR'):
        data.find_text2sql_dir()

  def test_the_text2sql_folder_itself_is_noticed(self):
    # The data folder is the one holding text2sql/, not text2sql/ itself.
    folder = os.path.join(self._shared_data(), 'text2sql')
    with open(os.path.join(folder, 'atis-schema.csv'), 'w') as f:
      f.write('x\n')
    for given in (folder, self._renamed(folder)):
      with self.assertRaisesRegex(
          errors.InputError,
          f"'{given}' looks like the `text2sql/` folder itself; pass its "
          f"parent, '{os.path.dirname(given)}', as data_dir"):
        data.find_text2sql_dir(given)

  def test_an_empty_data_folder_is_said_to_be_empty(self):
    empty = self.create_tempdir().full_path
    with self.assertRaisesRegex(errors.InputError, f"'{empty}' is empty\\."):
      data.find_text2sql_dir(empty)

  def _renamed(self, folder: str) -> str:
    renamed = os.path.join(self.create_tempdir().full_path, 'my_sql_data')
    shutil.copytree(folder, renamed)
    return renamed


if __name__ == '__main__':
  tf.test.main()
