"""Temporary directories of runs that tests of one file share.

A test file that trains a run once and lets several tests read it caches
the run with `functools.cache`, so its directory must outlive every test of
the file: no test may remove it, and `tempfile.mkdtemp` alone leaves it
behind. `temp_dir` gives such a directory inside one temporary directory
per process, removed when the interpreter exits.

The cache is per process, which is what the suite needs: under pytest-xdist
(`make test`: `-n 2 --dist=loadfile`) each file runs in one worker process,
and under Bazel each test file is a process of its own.
"""

import atexit
import functools
import shutil
import tempfile


@functools.cache
def _process_dir() -> str:
  """This process's directory of shared runs, removed at exit."""
  path = tempfile.mkdtemp(prefix='tff_nlp_shared_runs')
  atexit.register(shutil.rmtree, path, ignore_errors=True)
  return path


def temp_dir(prefix: str) -> str:
  """A new directory (named `prefix...`), removed when the process exits."""
  return tempfile.mkdtemp(prefix=prefix, dir=_process_dir())
