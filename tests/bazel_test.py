"""Checks the Bazel build (see DEVELOPERS.md, "Bazel") so BUILD files cannot rot.

- every module under tff_nlp/ is a source of //tff_nlp, every module under
  apps/ one of //apps, and every binary apps/<application>/bin/<name>.py
  the py_binary //apps:<name>;
- every tests/**/*_test.py has its py_test //tests:<path>_test, and every
  other module of tests/ is in //tests:test_support;
- every target builds (`bazel build //...`), and a few small test targets,
  one per layer (data, aggregators, the package's public API), pass under
  `bazel test`: they import the library and the test helper modules through
  Bazel's runfiles, which is where a missing dependency shows
  (`make bazel-test` runs every target).

Skipped when `bazel` is not on PATH (an error instead when
TFF_NLP_REQUIRE_BAZEL=1, as `.ci/run` sets after installing it), and inside
Bazel itself (this file drives Bazel, so it is not a Bazel target). Bazel runs with this Python's folder (the
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

from absl.testing import absltest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BAZEL = shutil.which('bazel')
# Small, fast targets (seconds each when the machine is idle), one per layer:
# data, aggregators, the public API.
_SMALL_TEST_TARGETS = (
    '//tests:tff_nlp/data/partition_test',
    '//tests:tff_nlp/aggregators/weighting_test',
    '//tests:package_test',
)
# Test files that are not Bazel targets (see _NOT_BAZEL_TESTS in tests/BUILD).
_NOT_BAZEL_TESTS = ('tests/bazel_test.py',)
# Bazel's own flags for quiet, non-interactive output.
_QUIET = ('--color=no', '--curses=no', '--noshow_progress')

_REQUIRED = os.environ.get('TFF_NLP_REQUIRE_BAZEL') == '1'
_INSIDE_BAZEL = bool(os.environ.get('TEST_SRCDIR'))


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


@absltest.skipIf(_INSIDE_BAZEL, 'running inside Bazel (TEST_SRCDIR is set): '
                 'this test drives Bazel itself.')
class BazelBuildExecutionTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    if _BAZEL is None:
      if _REQUIRED:
        raise AssertionError(
            'bazel is not on PATH but TFF_NLP_REQUIRE_BAZEL=1 (.ci/run '
            'installs Debian\'s bazel-bootstrap; see DEVELOPERS.md, "Bazel").')
      raise absltest.SkipTest(
          'bazel is not on PATH: the Bazel build is not checked.')

  @classmethod
  def tearDownClass(cls):
    # No Bazel server (a JVM) may outlive the test session.
    if _BAZEL is not None:
      _bazel('shutdown', timeout=120)
    super().tearDownClass()

  def test_every_module_is_in_a_target(self):
    modules = _files('tff_nlp/**/*.py') | _files('apps/**/*.py')
    declared = _query_files('labels(srcs, //tff_nlp + //apps)')
    self.assertEmpty(
        sorted(modules - declared),
        'modules in no Bazel target. A folder under tff_nlp/ or apps/ with '
        'its own BUILD file leaves the glob; see tff_nlp/BUILD, apps/BUILD.')

  def test_every_binary_is_a_py_binary(self):
    binaries = {
        '//apps:' + os.path.basename(path)[:-len('.py')]
        for path in _files('apps/*/bin/*.py')
        if not os.path.basename(path).startswith('_')}
    targets = set(_bazel('query', *_QUIET, 'kind(py_binary, //apps:all)')
                  .split())
    self.assertEmpty(sorted(binaries - targets), 'see apps/BUILD')

  def test_every_test_file_has_a_target(self):
    test_files = _files('tests/**/*_test.py') - set(_NOT_BAZEL_TESTS)
    expected = {'//tests:' + path[len('tests/'):-len('.py')] for path in
                test_files}
    targets = set(
        _bazel('query', *_QUIET, 'kind(py_test, //tests/...)').split())
    self.assertEmpty(sorted(expected - targets),
                     'test files without a py_test; see tests/BUILD.')
    test_srcs = _query_files('labels(srcs, kind(py_test, //tests/...))')
    self.assertEmpty(sorted(test_files - test_srcs))
    helpers = _files('tests/**/*.py') - _files('tests/**/*_test.py') - {
        'tests/bazel_pytest_main.py'}
    support = _query_files('labels(srcs, //tests:test_support)')
    self.assertEmpty(sorted(helpers - support),
                     'not in //tests:test_support')

  def test_everything_builds_and_small_tests_pass(self):
    _bazel('build', *_QUIET, '//...')
    _bazel('test', *_QUIET, '--test_output=errors', *_SMALL_TEST_TARGETS,
           timeout=900)


if __name__ == '__main__':
  absltest.main()
