"""`make` on a Python that TFF 0.87 cannot use says how to get one it can.

Current Ubuntu ships Python 3.12 only, so on a fresh machine `make test`
used to stop with "run 'make PYTHON=/path/to/python3.11 test'", a path the
user does not have. The message now names the ways to get a 3.11 (uv, pyenv,
the deadsnakes PPA) and how to hand it to `make` with `PYTHON=`.

Each case runs the real Makefile, copied into a temporary folder with empty
requirement files and `VENV` pointing there, so nothing of the checkout's
`.venv` is read or touched; the version check fails before anything is made.
"""

import os
import shutil
import stat
import subprocess

from absl.testing import absltest

from tests import other_pythons

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A stand-in for Ubuntu 24.04's python3: it reports 3.12 and fails the
# Makefile's version check (any other invocation).
_FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Python 3.12.3"; exit 0; fi
exit 1
"""


class PythonVersionMessageTest(absltest.TestCase):

  def _make(self, python, goal='venv'):
    """`make -s PYTHON=<python> <goal>` on a copy of the Makefile."""
    work = self.create_tempdir().full_path
    shutil.copy(os.path.join(_REPO, 'Makefile'), work)
    for name in ('requirements.txt', 'requirements-tff.txt', 'pyproject.toml'):
      open(os.path.join(work, name), 'w').close()
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHON', 'MAKEFLAGS', 'MFLAGS', 'MAKELEVEL')}
    result = subprocess.run(
        ['make', '-s', f'PYTHON={python}', f'VENV={work}/venv', goal],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=120, check=False)
    self.assertNotEqual(result.returncode, 0, result.stdout)
    self.assertFalse(os.path.exists(os.path.join(work, 'venv')),
                     'make created the virtualenv with an unusable Python')
    return result.stdout + result.stderr

  def _fake_python(self):
    path = self.create_tempdir().create_file('python3', _FAKE_PYTHON).full_path
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path

  def _assert_says_how_to_get_3_11(self, output, goal):
    self.assertIn('tff_nlp needs CPython 3.9, 3.10 or 3.11', output)
    for way in (f'uv python install 3.11 && make PYTHON="$(uv python find '
                f'3.11)" {goal}',
                f'pyenv install 3.11 && make PYTHON="$(pyenv prefix '
                f'3.11)/bin/python" {goal}',
                'sudo add-apt-repository ppa:deadsnakes/ppa',
                f'make PYTHON=python3.11 {goal}'):
      self.assertIn(way, output)

  def test_a_python_3_12_gets_the_ways_to_a_3_11(self):
    python = self._fake_python()
    output = self._make(python)
    self.assertIn(f"'{python}' is Python 3.12.3.", output)
    self._assert_says_how_to_get_3_11(output, 'venv')

  def test_the_message_repeats_the_goal(self):
    output = self._make(self._fake_python(), goal='test')
    self._assert_says_how_to_get_3_11(output, 'test')

  def test_a_missing_python(self):
    output = self._make('/nonexistent/python3.11')
    self.assertIn("'/nonexistent/python3.11' is missing.", output)
    self._assert_says_how_to_get_3_11(output, 'venv')

  def test_a_real_python_3_12(self):
    python = other_pythons.python_3_12_or_newer()
    if python is None:
      self.skipTest('no CPython >= 3.12 on this machine (the fake one of '
                    'test_a_python_3_12_gets_the_ways_to_a_3_11 stands in)')
    self._assert_says_how_to_get_3_11(self._make(python), 'venv')

  def test_readme_says_how_to_get_a_3_11(self):
    with open(os.path.join(_REPO, 'README.md'), encoding='utf-8') as f:
      readme = f.read()
    for way in ('uv python install 3.11', 'make PYTHON="$(uv python find 3.11)"',
                'pyenv install 3.11', 'ppa:deadsnakes/ppa'):
      self.assertTrue(way in readme, f'README.md does not say {way!r}')


if __name__ == '__main__':
  absltest.main()
