"""Checks the Bazel build (see DEVELOPERS.md, "Bazel") so BUILD files cannot rot.

- every module under tff_nlp/ is a source of //tff_nlp or //tff_nlp/bin:bin;
- every tests/**/*_test.py has its py_test //tests:<path>_test, and every
  other module of tests/ is in //tests:test_support;
- everything analyses (`bazel build --nobuild //...`), and one small, fast
  test target passes under `bazel test`.

Skipped when `bazel` is not on PATH, and inside Bazel itself (this file drives
Bazel, so it is not a Bazel target). Bazel runs with this Python's folder (the
virtualenv's bin/) first on PATH and without any startup option, so it reuses
the workspace's Bazel server and cache (`make bazel-test` warms them); the
server is stopped (`bazel shutdown`) at the end so none lingers. Bazel's
output goes to a file, never a pipe a daemon could hold open, and is shown on
failure.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BAZEL = shutil.which('bazel')
# A small, fast target (about 20 s): the data package's partition tests.
_SMALL_TEST_TARGET = '//tests:data/partition_test'
# Test files that are not Bazel targets (see _NOT_BAZEL_TESTS in tests/BUILD).
_NOT_BAZEL_TESTS = ('tests/bazel_test.py',)
# Bazel's own flags for quiet, non-interactive output.
_QUIET = ('--color=no', '--curses=no', '--noshow_progress')

pytestmark = [
    pytest.mark.skipif(
        _BAZEL is None,
        reason='bazel is not on PATH: the Bazel build is not checked.',
    ),
    pytest.mark.skipif(
        bool(os.environ.get('TEST_SRCDIR')),
        reason='running inside Bazel (TEST_SRCDIR is set): this test drives '
        'Bazel itself.',
    ),
]


def _bazel(*args: str, timeout: float = 300) -> str:
  """Runs `bazel <args>` in the repository; returns stdout, fails on error."""
  env = dict(os.environ)
  env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env.get(
      'PATH', ''
  )
  with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile(
      'w+'
  ) as err:
    try:
      code = subprocess.run(
          [_BAZEL, *args],
          cwd=_REPO,
          env=env,
          stdin=subprocess.DEVNULL,
          stdout=out,
          stderr=err,
          timeout=timeout,
          check=False,
      ).returncode
    except subprocess.TimeoutExpired:
      code = f'timeout after {timeout} s'
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
  assert code == 0, (
      f'`bazel {" ".join(args)}` failed ({code}):\n{stdout}\n{stderr[-5000:]}'
  )
  return stdout


def _query_files(expression: str) -> set[str]:
  """Source files (workspace-relative paths) of a `bazel query` expression."""
  paths = set()
  for label in _bazel('query', *_QUIET, expression).split():
    if label.startswith('//'):
      package, name = label[2:].split(':', 1)
      paths.add(f'{package}/{name}' if package else name)
  return paths


def _files(pattern: str) -> set[str]:
  return {
      os.path.relpath(path, _REPO)
      for path in glob.glob(os.path.join(_REPO, pattern), recursive=True)
  }


@pytest.fixture(scope='module', autouse=True)
def _stop_bazel_server():
  yield
  # No Bazel server (a JVM) may outlive the test session.
  _bazel('shutdown', timeout=120)


def test_every_library_module_is_in_a_target():
  modules = _files('tff_nlp/**/*.py')
  declared = _query_files('labels(srcs, //tff_nlp + //tff_nlp/bin:bin)')
  missing = sorted(modules - declared)
  assert not missing, (
      f'modules in no Bazel target: {missing}. A folder under tff_nlp/ with '
      'its own BUILD file leaves the //tff_nlp glob; see tff_nlp/BUILD.'
  )


def test_every_test_file_has_a_target():
  test_files = _files('tests/**/*_test.py') - set(_NOT_BAZEL_TESTS)
  expected = {'//tests:' + path[len('tests/'):-len('.py')] for path in
              test_files}
  targets = set(
      _bazel('query', *_QUIET, 'kind(py_test, //tests/...)').split()
  )
  assert expected <= targets, (
      f'test files without a py_test: {sorted(expected - targets)}; see '
      'tests/BUILD.'
  )
  test_srcs = _query_files('labels(srcs, kind(py_test, //tests/...))')
  assert test_files <= test_srcs, sorted(test_files - test_srcs)
  helpers = _files('tests/**/*.py') - _files('tests/**/*_test.py') - {
      'tests/bazel_pytest_main.py'
  }
  support = _query_files('labels(srcs, //tests:test_support)')
  missing = sorted(helpers - support)
  assert not missing, f'not in //tests:test_support: {missing}'


def test_everything_analyses_and_a_small_test_passes():
  _bazel('build', *_QUIET, '--nobuild', '//...')
  _bazel(
      'test', *_QUIET, '--test_output=errors', _SMALL_TEST_TARGET,
      timeout=600,
  )
