"""Real Python interpreters on this machine that TFF 0.87 cannot use.

Shared by the tests of what a user on such a Python sees: `make`'s message
(tests/makefile_test.py) and the notebooks' first cell
(tests/colabs/colab_runtime_test.py).
"""

import glob
import os
import shutil
import subprocess


def unsupported_pythons() -> dict[tuple[int, int], str]:
  """(major, minor) -> a real interpreter outside 3.9-3.11, one per version."""
  candidates = [shutil.which(f'python3.{minor}')
                for minor in (6, 7, 8, 12, 13, 14)]
  candidates += ['/usr/bin/python3', '/usr/local/bin/python3']
  candidates += sorted(glob.glob(os.path.expanduser(
      '~/.pyenv/versions/*/bin/python3')))
  found = {}
  for path in candidates:
    if not path or not os.path.isfile(path):
      continue
    try:
      result = subprocess.run(
          [path, '-c', 'import sys; print(*sys.version_info[:2])'],
          capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
      continue
    if result.returncode == 0:
      version = tuple(int(v) for v in result.stdout.split())
      if version[0] == 3 and not (3, 9) <= version <= (3, 11):
        found.setdefault(version, path)
  return found


def python_3_12_or_newer():
  """A real CPython 3.12 or newer on this machine, or None."""
  newer = sorted(v for v in unsupported_pythons() if v >= (3, 12))
  return unsupported_pythons()[newer[0]] if newer else None
