"""Test-session set-up: one owned TFF worker for the session, always stopped.

Every test that executes a TFF computation runs in the local C++ context
installed here as TFF's default. At the end of the session the worker is
stopped by its pid and the session fails if any `worker_binary` we started is
still running, since a leftover worker keeps CI's pipes open.
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import flags  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top

from tff_nlp import runtime  # pylint: disable=g-import-not-at-top


# Under pytest no absl app parses flags; tests read their defaults or set
# them with flagsaver.
flags.FLAGS.mark_as_parsed()


@pytest.fixture(scope='session', autouse=True)
def tff_context():
  context = runtime.set_local_cpp_context()
  yield context
  context.close()
  leftover = runtime.owned_worker_pids()
  assert not leftover, f'TFF worker_binary processes left running: {leftover}'


def pytest_collection_modifyitems(config, items):
  """Drops `tf.test.TestCase.test_session`, a context manager, not a test."""
  del config
  items[:] = [item for item in items if item.name != 'test_session']
