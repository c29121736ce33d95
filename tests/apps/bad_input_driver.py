"""Runs one binary's command lines in one process, as a user's shell would.

`experiment_binaries_test` checks dozens of bad command lines per binary;
starting Python, TensorFlow and TFF for each took about 14 s of the 15 each
one costs. This driver imports the binary once and runs every command line
through `common.run` (absl's flag parsing, the binary's `main`, exit status
2 on bad input), with the flags reset in between and file descriptor 2
captured, so that what the test reads is what the shell would show:

  python -m tests.apps.bad_input_driver <binary> < cases.json

stdin: a JSON list of argument lists (without the program); stdout: a JSON
list of {"returncode": int, "stderr": str}, one per command line. Tests call
`run_in_one_process`.
"""

import collections
from collections.abc import Sequence
import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback

from absl import flags

from apps.common import presets

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


Outcome = collections.namedtuple('Outcome', 'returncode stderr written')


def run_in_one_process(binary: str, flagfile: str,
                       cases: Sequence[Sequence[str]],
                       timeout: float = 1200) -> list[Outcome]:
  """`python -m apps.<application>.bin.<binary> --flagfile=<flagfile> --output_dir=<a
  new folder> <case>` for every case, all run in one driver process.

  Returns:
    Per case: its exit status, its stderr, and the folders and files it
    wrote under its output folder (relative paths, sorted; all of it is
    removed before returning).
  """
  with tempfile.TemporaryDirectory() as root:
    output_dirs = [os.path.join(root, str(i), 'run') for i in range(len(cases))]
    result = subprocess.run(
        [sys.executable, '-m', 'tests.apps.bad_input_driver', binary],
        input=json.dumps([[f'--flagfile={flagfile}', f'--output_dir={d}',
                           *case] for d, case in zip(output_dirs, cases)]),
        cwd=_REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
        capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
      raise RuntimeError(f'bad_input_driver {binary} failed:\n'
                         f'{result.stderr[-2000:]}')
    return [Outcome(o['returncode'], o['stderr'], sorted(
        os.path.relpath(os.path.join(folder, name), d)
        for folder, dirs, names in os.walk(d) for name in dirs + names))
            for o, d in zip(json.loads(result.stdout), output_dirs)]


def run_command_lines(binary: str, cases: Sequence[Sequence[str]],
                      timeout: float = 1200) -> list[tuple[int, str]]:
  """`python -m apps.<application>.bin.<binary> <case>` for every case, in order, all
  in one driver process (`run_in_one_process` without a flagfile or output
  folder of its own: the cases name theirs, e.g. one folder for several).

  Returns:
    Per case: its exit status and its stderr.
  """
  result = subprocess.run(
      [sys.executable, '-m', 'tests.apps.bad_input_driver', binary],
      input=json.dumps([list(case) for case in cases]), cwd=_REPO,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'), capture_output=True,
      text=True, timeout=timeout, check=False)
  if result.returncode != 0:
    raise RuntimeError(f'bad_input_driver {binary} failed:\n'
                       f'{result.stderr[-2000:]}')
  return [(o['returncode'], o['stderr']) for o in json.loads(result.stdout)]


def _exit_status(error: SystemExit) -> int:
  if error.code is None:
    return 0
  return error.code if isinstance(error.code, int) else 1


def run_cases(binary: str, cases: list[list[str]]) -> list[dict]:
  module = importlib.import_module(presets.binary_module(binary))
  from apps.common import binary as common  # pylint: disable=g-import-not-at-top
  program = os.path.join(os.path.dirname(module.__file__), f'{binary}.py')
  saved_stderr = os.dup(2)
  outcomes = []
  for args in cases:
    flags.FLAGS.unparse_flags()
    with tempfile.TemporaryFile() as captured:
      sys.stderr.flush()
      os.dup2(captured.fileno(), 2)
      try:
        sys.argv = [program, *args]
        common.run(module.main)
        status = 0
      except SystemExit as e:
        status = _exit_status(e)
      except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
        status = 1
      finally:
        sys.stderr.flush()
        os.dup2(saved_stderr, 2)
      captured.seek(0)
      outcomes.append({'returncode': status,
                       'stderr': captured.read().decode(errors='replace')})
  return outcomes


if __name__ == '__main__':
  # What the binaries print (a run's table) goes to this process's stderr;
  # stdout carries the outcomes only.
  outcomes_file = os.fdopen(os.dup(1), 'w')
  os.dup2(2, 1)
  json.dump(run_cases(sys.argv[1], json.load(sys.stdin)), outcomes_file)
  outcomes_file.close()
