"""Bazel's `main` of every py_test: runs one test file under pytest.

  bazel_pytest_main.py tests/<path>/<name>_test.py

The tests are pytest tests (`tests/conftest.py` installs the session's TFF
context and checks that no worker outlives it), so each `py_test` target runs
its file through `pytest.main` rather than as a script; see tests/BUILD.

Bazel integration:
- the exit status is pytest's (0 only if every test passed);
- `--test_filter=<expr>` (TESTBRIDGE_TEST_ONLY) becomes `pytest -k <expr>`;
- the JUnit report goes to XML_OUTPUT_FILE, where Bazel looks for it;
- TFF_NLP_DATA_DIR, when not set (`--test_env`), defaults to the `shared/data`
  folder next to the source checkout, as it does outside Bazel: the test runs
  in a runfiles tree, whose files are symlinks into the checkout.
"""

import os
import sys

_DATA_DIR_ENV_VAR = 'TFF_NLP_DATA_DIR'  # tff_nlp.data.DATA_DIR_ENV_VAR
_HERE = os.path.dirname(os.path.realpath(__file__))

# Python put the folder of this script, resolved to the source checkout, first
# on sys.path; tests must import what Bazel declared (the runfiles), not the
# checkout, and `tests/` holds folders (tff_nlp, apps) that would shadow the
# top-level packages of the same name.
if sys.path and os.path.realpath(sys.path[0] or os.curdir) == _HERE:
  del sys.path[0]

try:
  import pytest  # pylint: disable=g-import-not-at-top
except ImportError:
  sys.exit(
      f'{sys.executable} has no pytest: Bazel runs tests with the first '
      'python3 on PATH, which must be the project virtualenv. Use '
      '`make bazel-test`, or put .venv/bin first on PATH '
      '(`source .venv/bin/activate`); see DEVELOPERS.md, "Bazel".'
  )


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    sys.exit(f'usage: {argv[0]} <test file>; got {argv[1:]}')
  test_file = argv[1]
  if not os.environ.get(_DATA_DIR_ENV_VAR):
    checkout = os.path.dirname(_HERE)
    os.environ[_DATA_DIR_ENV_VAR] = os.path.normpath(
        os.path.join(checkout, os.pardir, 'shared', 'data')
    )
  args = [test_file, '-p', 'no:cacheprovider']
  test_filter = os.environ.get('TESTBRIDGE_TEST_ONLY')
  if test_filter:
    args += ['-k', test_filter]
  xml_output_file = os.environ.get('XML_OUTPUT_FILE')
  if xml_output_file:
    args.append(f'--junitxml={xml_output_file}')
  return int(pytest.main(args))


if __name__ == '__main__':
  sys.exit(main(sys.argv))
