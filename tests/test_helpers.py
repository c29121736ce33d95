"""Small helpers shared by test files of both trees (tests/tff_nlp, tests/apps).

*   `marked_worker_pids`: the live TFF `worker_binary` processes that carry a
    test's mark in their environment. Workers started by another program (a
    binary in a subprocess, a notebook's kernel) are not children of the test
    process, so `runtime.owned_worker_pids()` does not see them; they inherit
    that program's environment, whose mark (a value of its own per test) tells
    them apart from the workers of other TFF programs running at the same
    time.
*   `assert_nested_allclose`: two nested structures (named tuples, dicts,
    lists of arrays) of the same shape and containers, equal to a relative
    tolerance.
"""

import subprocess

import numpy as np
import tensorflow as tf


def marked_worker_pids(mark_var: str, mark: str) -> set[int]:
  """Live (not zombie) `worker_binary` processes with `mark_var=mark` in their
  environment."""
  result = subprocess.run(['pgrep', '-f', 'worker_binary'],
                          capture_output=True, text=True, check=False)
  pids = set()
  for pid in result.stdout.split():
    try:
      with open(f'/proc/{pid}/environ', 'rb') as f:
        environ = f.read().split(b'\0')
      with open(f'/proc/{pid}/stat', 'rb') as f:
        state = f.read().rsplit(b')', 1)[-1].split()[0]
    except OSError:  # Ended meanwhile, or not ours to inspect.
      continue
    if f'{mark_var}={mark}'.encode() in environ and state != b'Z':
      pids.add(int(pid))
  return pids


def assert_nested_allclose(actual, expected, rtol: float = 1e-6) -> None:
  tf.nest.assert_same_structure(actual, expected)
  for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
    np.testing.assert_allclose(a, e, rtol=rtol)
