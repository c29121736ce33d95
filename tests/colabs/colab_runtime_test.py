"""Colab's route to the notebooks: `make colab-runtime` and their set-up cell.

Colab's hosted runtime has been Python 3.12 since 2025, and TFF 0.87 (with
TensorFlow 2.14) installs on CPython 3.9-3.11 only, so a notebook's old
install cell could only fail inside pip there. Colab users now connect Colab
to a Jupyter server on their own machine ("Connect to a local runtime"), one
that `make colab-runtime` starts from `.venv-notebook` with `.venv` as the
kernel, and each notebook's first code cell says so on any other Python
instead of running pip.

`ColabRuntimeServerTest` starts the server the way a user does, with
`make colab-runtime` itself (on a free port), and talks to it the way Colab
does: over its HTTP API with the printed token and Colab's `Origin`, and
over the kernel's websocket, where `import tff_nlp` must run in `.venv`. It
makes `.venv-notebook` when it is missing (about 30 s from the package
index), as `make colab-runtime` does on first use, so a clean clone (CI)
runs it rather than skipping it. `SetupCellTest` runs the notebooks' first
cell as Python 3.12 (and 3.8) would, with a faked `sys.version_info` and
with every real such interpreter on the machine, and in a Jupyter kernel.
"""

import asyncio
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

from absl.testing import absltest
from absl.testing import parameterized
import nbclient
import nbformat
from tornado import httpclient
from tornado import websocket

from tests import other_pythons
from tff_nlp.data import data_root

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_COLABS_DIR = os.path.join(_REPO, 'colabs')
_NOTEBOOKS = sorted(glob.glob(os.path.join(_COLABS_DIR, '*.ipynb')))
_COLAB_ORIGIN = 'https://colab.research.google.com'
_INSIDE_BAZEL = bool(os.environ.get('TEST_SRCDIR'))


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _listening_addresses(port: int) -> set[str]:
  """The local addresses of the TCP sockets listening on `port` (hex, /proc)."""
  addresses = set()
  for table in ('/proc/net/tcp', '/proc/net/tcp6'):
    try:
      with open(table, encoding='ascii') as f:
        rows = f.read().splitlines()[1:]
    except OSError:
      continue
    for row in rows:
      fields = row.split()
      address, port_hex = fields[1].rsplit(':', 1)
      if int(port_hex, 16) == port and fields[3] == '0A':  # 0A: LISTEN.
        addresses.add(address)
  return addresses


def _request(url, *, method='GET', headers=None, body=None):
  """(status, headers, parsed JSON body or None) of one HTTP request."""
  data = None if body is None else json.dumps(body).encode()
  request = urllib.request.Request(url, data=data, method=method,
                                   headers=headers or {})
  try:
    with urllib.request.urlopen(request, timeout=60) as response:
      raw = response.read()
      return (response.status, response.headers,
              json.loads(raw) if raw else None)
  except urllib.error.HTTPError as e:
    return e.code, e.headers, None


@absltest.skipIf(
    _INSIDE_BAZEL,
    'inside Bazel (TEST_SRCDIR is set): this test runs `make colab-runtime` '
    'in the checkout, which makes .venv-notebook there; pytest runs it '
    '(make test).')
class ColabRuntimeServerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._port = _free_port()
    cls._logs = tempfile.mkdtemp(prefix='colab_runtime_test_')
    env = {k: v for k, v in os.environ.items()
           if k not in ('JUPYTER_TOKEN', 'MAKEFLAGS', 'MFLAGS', 'MAKELEVEL')}
    # The kernel is the virtualenv running this test (.venv under
    # `make test`); -o: never reinstall it from here.
    venv = sys.prefix
    cls._venv_python = os.path.join(venv, 'bin', 'python')
    with open(os.path.join(cls._logs, 'stdout'), 'wb') as out, open(
        os.path.join(cls._logs, 'stderr'), 'wb') as err:
      cls._make = subprocess.Popen(
          ['make', '-s', '-o', os.path.join(venv, '.tff_nlp-installed'),
           'colab-runtime', f'VENV={venv}', f'COLAB_PORT={cls._port}'],
          cwd=_REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
          stderr=err, start_new_session=True)
    try:
      cls._url, cls._token = cls._wait_for_url(timeout=600)
      cls._wait_until_serving(timeout=120)
    except BaseException:
      cls._stop()
      raise

  @classmethod
  def tearDownClass(cls):
    cls._stop()
    shutil.rmtree(cls._logs, ignore_errors=True)
    super().tearDownClass()

  @classmethod
  def _output(cls) -> str:
    with open(os.path.join(cls._logs, 'stdout'), encoding='utf-8') as f:
      stdout = f.read()
    with open(os.path.join(cls._logs, 'stderr'), encoding='utf-8') as f:
      stderr = f.read()
    return f'stdout:\n{stdout}\nstderr (end):\n{stderr[-5000:]}'

  @classmethod
  def _wait_for_url(cls, timeout):
    """The backend URL `make colab-runtime` prints, and its token."""
    pattern = re.compile(r'^\s*(http://\S+/\?token=(\w+))\s*$', re.M)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      with open(os.path.join(cls._logs, 'stdout'), encoding='utf-8') as f:
        match = pattern.search(f.read())
      if match:
        return match.group(1), match.group(2)
      if cls._make.poll() is not None:
        raise AssertionError(
            f'make colab-runtime exited ({cls._make.returncode}) without a '
            f'URL:\n{cls._output()}')
      time.sleep(0.5)
    raise AssertionError(f'no URL after {timeout} s:\n{cls._output()}')

  @classmethod
  def _wait_until_serving(cls, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      if cls._make.poll() is not None:
        raise AssertionError(
            f'the server exited ({cls._make.returncode}):\n{cls._output()}')
      try:
        status, _, _ = _request(cls._api('status'), headers=cls._auth())
        if status == 200:
          return
      except OSError:
        pass
      time.sleep(0.5)
    raise AssertionError(f'not serving after {timeout} s:\n{cls._output()}')

  @classmethod
  def _stop(cls):
    """Stops the server (its own shutdown, else its process group)."""
    make = getattr(cls, '_make', None)
    if make is None or make.poll() is not None:
      return
    if getattr(cls, '_token', None):
      try:
        _request(cls._api('shutdown'), method='POST', headers=cls._auth())
        make.wait(timeout=30)
      except (OSError, subprocess.TimeoutExpired):
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
      if make.poll() is not None:
        break
      try:
        os.killpg(make.pid, sig)
        make.wait(timeout=30)
      except (ProcessLookupError, subprocess.TimeoutExpired):
        pass

  @classmethod
  def _api(cls, path):
    return f'http://127.0.0.1:{cls._port}/api/{path}'

  @classmethod
  def _auth(cls, origin=_COLAB_ORIGIN):
    headers = {'Authorization': f'token {cls._token}'}
    if origin:
      headers['Origin'] = origin
    return headers

  def test_prints_the_url_to_paste_and_listens_on_loopback_only(self):
    self.assertEqual(self._url,
                     f'http://127.0.0.1:{self._port}/?token={self._token}')
    self.assertGreaterEqual(len(self._token), 32)
    self.assertIn('Connect to a local runtime', self._output())
    # 127.0.0.1 (0100007F in /proc) and nothing else: no 0.0.0.0, no [::].
    self.assertEqual(_listening_addresses(self._port), {'0100007F'})
    # The token reaches Jupyter in its environment, not its command line
    # (which every user can read).
    pids = subprocess.run(['pgrep', '-g', str(self._make.pid)],
                          capture_output=True, text=True,
                          check=False).stdout.split()
    self.assertTrue(pids)
    for pid in pids:
      try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
          self.assertNotIn(self._token.encode(), f.read())
      except FileNotFoundError:
        continue

  def test_requires_the_token(self):
    status, _, _ = _request(self._api('kernels'),
                            headers={'Origin': _COLAB_ORIGIN})
    self.assertEqual(status, 403)
    status, _, _ = _request(self._api('kernels'), headers={
        'Authorization': 'token wrong', 'Origin': _COLAB_ORIGIN})
    self.assertEqual(status, 403)

  def test_allows_colabs_origin_with_credentials_and_no_other(self):
    status, headers, _ = _request(self._api('kernelspecs'),
                                  headers=self._auth())
    self.assertEqual(status, 200)
    self.assertEqual(headers['Access-Control-Allow-Origin'], _COLAB_ORIGIN)
    self.assertEqual(headers['Access-Control-Allow-Credentials'], 'true')
    # The browser's pre-flight before Colab's token-authenticated requests.
    status, headers, _ = _request(
        f'{self._api("kernelspecs")}?token={self._token}', method='OPTIONS',
        headers={'Origin': _COLAB_ORIGIN,
                 'Access-Control-Request-Method': 'POST',
                 'Access-Control-Request-Headers': 'authorization'})
    self.assertLess(status, 300)
    self.assertEqual(headers['Access-Control-Allow-Origin'], _COLAB_ORIGIN)
    self.assertIn('authorization',
                  headers['Access-Control-Allow-Headers'].lower())
    _, headers, _ = _request(self._api('kernelspecs'),
                             headers=self._auth('https://example.org'))
    self.assertNotEqual(headers.get('Access-Control-Allow-Origin'),
                        'https://example.org')

  def test_a_kernel_runs_tff_nlp_from_the_venv(self):
    status, _, specs = _request(self._api('kernelspecs'),
                                headers=self._auth())
    self.assertEqual(status, 200)
    self.assertEqual(specs['default'], 'python3')
    argv = specs['kernelspecs']['python3']['spec']['argv']
    self.assertEqual(os.path.abspath(argv[0]), self._venv_python)

    status, _, kernel = _request(self._api('kernels'), method='POST',
                                 headers=self._auth(), body={'name': 'python3'})
    self.assertEqual(status, 201)
    try:
      reply, stdout = self._execute(
          kernel['id'], 'import sys, tff_nlp\n'
          'print(sys.prefix)\nprint(tff_nlp.__file__)')
      self.assertEqual(reply['status'], 'ok', reply)
      prefix, module = stdout.split()
      self.assertEqual(prefix, sys.prefix)
      self.assertEqual(os.path.realpath(module), os.path.realpath(
          os.path.join(_REPO, 'tff_nlp', '__init__.py')))
      # Without the token, not even Colab's page may open the kernel's
      # websocket. (With it, Jupyter Server skips the origin check; the
      # origin decides only whether the browser lets a page read responses,
      # test_allows_colabs_origin_with_credentials_and_no_other.)
      loop = asyncio.new_event_loop()
      try:
        with self.assertRaises(httpclient.HTTPClientError) as refused:
          loop.run_until_complete(self._connect(kernel['id'], token=''))
      finally:
        loop.close()
      self.assertEqual(refused.exception.code, 403)
    finally:
      status, _, _ = _request(self._api(f'kernels/{kernel["id"]}'),
                              method='DELETE', headers=self._auth())
    self.assertEqual(status, 204)
    status, _, kernels = _request(self._api('kernels'), headers=self._auth())
    self.assertEqual((status, kernels), (200, []))

  async def _connect(self, kernel_id, token=None):
    token = self._token if token is None else token
    return await websocket.websocket_connect(httpclient.HTTPRequest(
        f'ws://127.0.0.1:{self._port}/api/kernels/{kernel_id}/channels'
        f'?token={token}&session_id={uuid.uuid4().hex}',
        headers={'Origin': _COLAB_ORIGIN}, request_timeout=60))

  def _execute(self, kernel_id, code, timeout=300):
    """Runs `code` in the kernel over its websocket, as Colab's page does."""

    async def run():
      connection = await self._connect(kernel_id)
      msg_id = uuid.uuid4().hex
      await connection.write_message(json.dumps({
          'header': {'msg_id': msg_id, 'msg_type': 'execute_request',
                     'username': 'colab_runtime_test',
                     'session': uuid.uuid4().hex, 'version': '5.3',
                     'date': ''},
          'parent_header': {}, 'metadata': {}, 'channel': 'shell',
          'buffers': [],
          'content': {'code': code, 'silent': False, 'store_history': False,
                      'user_expressions': {}, 'allow_stdin': False,
                      'stop_on_error': True},
      }))
      reply, idle, stdout = None, False, []
      while reply is None or not idle:
        message = await asyncio.wait_for(connection.read_message(), timeout)
        self.assertIsNotNone(message, 'the kernel websocket closed')
        message = json.loads(message)
        if message.get('parent_header', {}).get('msg_id') != msg_id:
          continue
        kind = message['msg_type']
        if kind == 'execute_reply':
          reply = message['content']
        elif kind == 'stream' and message['content']['name'] == 'stdout':
          stdout.append(message['content']['text'])
        elif kind == 'status':
          idle = message['content']['execution_state'] == 'idle'
      connection.close()
      return reply, ''.join(stdout)

    loop = asyncio.new_event_loop()  # Never the thread's loop (TFF's).
    try:
      return loop.run_until_complete(run())
    finally:
      loop.close()


# Runs a set-up cell's source as a script: `subprocess.run` only records its
# commands (nothing is installed), `sys.version_info` may be faked, and
# `tff_nlp` may be made not importable, as in a fresh Colab runtime.
_HARNESS = r'''
import importlib.util
import json
import subprocess
import sys

source_file, version, tff_nlp = sys.argv[1:]
calls = []


def run(cmd, *args, **kwargs):
  calls.append(list(cmd))
  return subprocess.CompletedProcess(cmd, 0)


subprocess.run = run
if version != 'real':
  sys.version_info = tuple(json.loads(version))
if tff_nlp == 'missing':
  find_spec = importlib.util.find_spec
  importlib.util.find_spec = (
      lambda name, *a: None if name == 'tff_nlp' else find_spec(name, *a))
with open(source_file) as f:
  source = f.read()
error = None
try:
  exec(compile(source, 'set-up cell', 'exec'), {'__name__': '__main__'})
except Exception as e:  # The cell's own SetupError, or a bug.
  error = [type(e).__name__, str(e)]
print('\n@@RESULT ' + json.dumps({'error': error, 'calls': calls}))
'''


def _setup_cell(path: str) -> str:
  cells = [c for c in nbformat.read(path, as_version=4).cells
           if c.cell_type == 'code']
  return cells[0].source


class SetupCellTest(parameterized.TestCase):

  def _run_cell(self, notebook, *, python=sys.executable, version='real',
                tff_nlp='installed', cwd=None, env=None):
    """(stdout, error [type, message] or None, commands it ran)."""
    tmp = self.create_tempdir()
    source = tmp.create_file('cell.py', _setup_cell(notebook)).full_path
    harness = tmp.create_file('harness.py', _HARNESS).full_path
    result = subprocess.run(
        [python, harness, source, version, tff_nlp],
        cwd=cwd or tmp.full_path, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=120, check=False)
    self.assertEqual(result.returncode, 0, result.stderr)
    stdout, _, payload = result.stdout.rpartition('\n@@RESULT ')
    payload = json.loads(payload)
    return stdout, payload['error'], payload['calls']

  def _assert_routes(self, stdout, error, calls, notebook, version):
    name = os.path.basename(notebook)
    self.assertEqual(calls, [], 'the cell must not run pip or git')
    self.assertIsNotNone(error)
    self.assertEqual(error[0], 'SetupError')
    self.assertIn(f'Python {version}', error[1])
    self.assertIn(f'This kernel runs Python {version}', stdout)
    for route in ('make colab-runtime', 'Connect to a local runtime',
                  'http://127.0.0.1:8888/?token=', 'make notebook',
                  f'.venv/bin/jupyter execute colabs/{name}',
                  'uv python install 3.11',
                  'make PYTHON="$(uv python find 3.11)" colab-runtime'):
      self.assertIn(route, stdout)

  def test_every_notebook_has_the_same_set_up_cell(self):
    # One cell, five copies: only the last line, its own file name and the
    # data folders it reads, differs.
    bodies = set()
    for path in _NOTEBOOKS:
      source = _setup_cell(path)
      body, _, last = source.rpartition('\n')
      bodies.add(body)
      match = re.fullmatch(r"set_up\('([^']+)', \((.*)\)\)", last)
      self.assertIsNotNone(match, f'{path}: {last!r}')
      self.assertEqual(match.group(1), os.path.basename(path))
      datasets = [d.strip().strip("'") for d in match.group(2).split(',')
                  if d.strip()]
      self.assertNotEmpty(datasets)
      data_dir = data_root.find_data_dir()
      for dataset in datasets:
        self.assertTrue(os.path.isdir(os.path.join(data_dir, dataset)),
                        f'{path} checks for {dataset}, which is no folder '
                        f'of {data_dir}')
    self.assertLen(bodies, 1)

  @parameterized.named_parameters(
      ('python_3_12', [3, 12, 1, 'final', 0], '3.12.1'),
      ('python_3_13', [3, 13, 0, 'final', 0], '3.13.0'),
      ('python_3_8', [3, 8, 18, 'final', 0], '3.8.18'),
  )
  def test_prints_the_ways_to_run_it_on_another_python(self, version, shown):
    for notebook in _NOTEBOOKS:
      with self.subTest(os.path.basename(notebook)):
        # tff_nlp missing too, as in Colab: still no pip.
        stdout, error, calls = self._run_cell(
            notebook, version=json.dumps(version), tff_nlp='missing')
        self._assert_routes(stdout, error, calls, notebook, shown)

  def test_prints_the_ways_to_run_it_on_real_other_pythons(self):
    pythons = other_pythons.unsupported_pythons()
    if not pythons:
      self.skipTest('no Python outside 3.9-3.11 on this machine; '
                    'test_prints_the_ways_to_run_it_on_another_python fakes '
                    'one.')
    notebook = os.path.join(_COLABS_DIR, 'quickstart.ipynb')
    for version, python in sorted(pythons.items()):
      with self.subTest(python):
        stdout, error, calls = self._run_cell(notebook, python=python)
        self._assert_routes(stdout, error, calls, notebook,
                            '.'.join(map(str, version)))

  def test_jupyter_shows_one_line_and_stops_run_all(self):
    # In a kernel (as in Colab): the routes, a one-line error instead of a
    # traceback, and no further cell runs.
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(
            'import sys\nsys.version_info = (3, 12, 1, "final", 0)'),
        nbformat.v4.new_code_cell(
            _setup_cell(os.path.join(_COLABS_DIR, 'quickstart.ipynb'))),
        nbformat.v4.new_code_cell('print("the next cell ran")'),
    ])
    client = nbclient.NotebookClient(
        notebook, timeout=120, kernel_name='python3',
        resources={'metadata': {'path': self.create_tempdir().full_path}})
    with self.assertRaises(nbclient.exceptions.CellExecutionError):
      client.execute()
    outputs = notebook.cells[1].outputs
    stdout = ''.join(o.get('text', '') for o in outputs
                     if o.output_type == 'stream')
    self.assertIn('make colab-runtime', stdout)
    errors = [o for o in outputs if o.output_type == 'error']
    self.assertLen(errors, 1)
    self.assertEqual(errors[0].ename, 'SetupError')
    self.assertEqual(errors[0].traceback, [
        'SetupError: Python 3.12.1 cannot run tff_nlp: run this notebook in '
        'one of the ways printed above.'])
    self.assertEmpty(notebook.cells[2].outputs)

  def test_in_the_venv_kernel_it_only_checks(self):
    for notebook in _NOTEBOOKS:
      with self.subTest(os.path.basename(notebook)):
        stdout, error, calls = self._run_cell(notebook, cwd=_COLABS_DIR)
        self.assertIsNone(error, stdout)
        self.assertEqual(calls, [])
        self.assertIn('tff_nlp is already installed: nothing to do.', stdout)
        self.assertIn(f'Data: {data_root.find_data_dir()}', stdout)

  def test_missing_data_says_how_to_get_it(self):
    empty = self.create_tempdir().full_path
    notebook = os.path.join(_COLABS_DIR, 'quickstart.ipynb')
    stdout, error, calls = self._run_cell(
        notebook, cwd=_COLABS_DIR, env={'TFF_NLP_DATA_DIR': empty})
    self.assertEqual(calls, [])
    self.assertEqual(error, [
        'SetupError',
        f'{empty} has no text_classification/r8: see above how to get the '
        'data.'])
    for instruction in ('SOURCES.md',
                        "os.environ['TFF_NLP_DATA_DIR'] = '/path/to/shared/data'",
                        'TFF_NLP_DATA_DIR=/path/to/shared/data make colab-runtime',
                        "drive.mount('/content/drive')",
                        'only the text-to-SQL data'):
      self.assertIn(instruction, stdout)

  def test_outside_a_checkout_without_a_url_it_says_what_to_do(self):
    stdout, error, calls = self._run_cell(
        os.path.join(_COLABS_DIR, 'quickstart.ipynb'), tff_nlp='missing',
        env={'TFF_NLP_REPO_URL': ''})
    self.assertEqual(calls, [])
    self.assertEqual(error[0], 'SetupError')
    self.assertIn('make colab-runtime', error[1])
    self.assertIn("os.environ['TFF_NLP_REPO_URL']", error[1])
    self.assertNotIn('Traceback', stdout)

  def test_outside_a_checkout_it_clones_and_installs_the_pinned_stack(self):
    tmp = self.create_tempdir().full_path
    stdout, error, calls = self._run_cell(
        os.path.join(_COLABS_DIR, 'quickstart.ipynb'), tff_nlp='missing',
        cwd=tmp, env={'TFF_NLP_REPO_URL': 'https://example.org/tff_nlp.git',
                      'TFF_NLP_DATA_DIR': data_root.find_data_dir()})
    self.assertIsNone(error, stdout)
    checkout = os.path.join(os.path.realpath(tmp), 'tff_nlp')
    pip = [sys.executable, '-m', 'pip', 'install', '--quiet']
    self.assertEqual(calls, [
        ['git', 'clone', '--depth=1', 'https://example.org/tff_nlp.git',
         checkout],
        pip + ['-r', os.path.join(checkout, 'requirements.txt')],
        pip + ['--no-deps', '-r',
               os.path.join(checkout, 'requirements-tff.txt')],
        pip + ['--no-deps', '-e', checkout],
    ])


class DocumentationTest(absltest.TestCase):

  def test_no_more_colab_on_python_3_11(self):
    # Colab's hosted runtime is Python 3.12; no text may promise 3.11 there.
    paths = _NOTEBOOKS + [os.path.join(_REPO, 'README.md')]
    for path in paths:
      with open(path, encoding='utf-8') as f:
        text = f.read()
      self.assertNotRegex(text, r'Colab\W+\(CPython 3\.11\)', path)

  def test_readme_and_notebooks_give_the_local_runtime_steps(self):
    with open(os.path.join(_REPO, 'README.md'), encoding='utf-8') as f:
      readme = f.read()
    for step in ('make colab-runtime', 'Connect to a local runtime',
                 'http://127.0.0.1:8888/?token='):
      self.assertTrue(step in readme, f'README.md does not say {step!r}')
    for path in _NOTEBOOKS:
      markdown = ''.join(c.source for c in nbformat.read(
          path, as_version=4).cells if c.cell_type == 'markdown')
      for step in ('make colab-runtime', 'Connect to a local runtime'):
        self.assertTrue(step in markdown, f'{path} does not say {step!r}')


if __name__ == '__main__':
  absltest.main()
