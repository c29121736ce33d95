"""Runs one binary's command lines in one process, as a user's shell would.

`experiment_binaries_test` checks dozens of bad command lines per binary;
starting Python, TensorFlow and TFF for each took about 14 s of the 15 each
one costs. This driver imports the binary once and runs every command line
through `common.run` (absl's flag parsing, the binary's `main`, exit status
2 on bad input), with the flags reset in between and file descriptor 2
captured, so that what the test reads is what the shell would show:

  python -m tests.bin.bad_input_driver <binary> < cases.json

stdin: a JSON list of argument lists (without the program); stdout: a JSON
list of {"returncode": int, "stderr": str}, one per command line.
"""

import importlib
import json
import os
import sys
import tempfile
import traceback

from absl import flags


def _exit_status(error: SystemExit) -> int:
  if error.code is None:
    return 0
  return error.code if isinstance(error.code, int) else 1


def run_cases(binary: str, cases: list[list[str]]) -> list[dict]:
  module = importlib.import_module(f'tff_nlp.bin.{binary}')
  from tff_nlp.bin import common  # pylint: disable=g-import-not-at-top
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
  json.dump(run_cases(sys.argv[1], json.load(sys.stdin)), sys.stdout)
