"""Test-session set-up: one owned TFF worker for the session, always stopped.

Every test that executes a TFF computation runs in the local C++ context
installed here as TFF's default. At the end of the session the worker is
stopped by its pid and the session fails if any `worker_binary` we started is
still running, since a leftover worker keeps CI's pipes open.
"""

import os
import shutil
import tempfile

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import flags  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top

from tff_nlp import runtime  # pylint: disable=g-import-not-at-top
from tff_nlp.training import process_store  # pylint: disable=g-import-not-at-top

# One process store for the session (tff_nlp/training/process_store.py):
# what one test builds through `training.shared_processes()`, the other
# pytest worker and every program a test starts (binaries, notebooks'
# kernels, a killed run's rerun) load instead of tracing it again. Made
# here, before xdist starts its workers, which inherit the environment;
# removed by the process that made it. An own folder given in the
# environment is used as it is.
_OWN_STORE = None
if not os.environ.get(process_store.DIR_ENV_VAR):
  _OWN_STORE = tempfile.mkdtemp(prefix='tff_nlp_test_processes_')
  os.environ[process_store.DIR_ENV_VAR] = _OWN_STORE


def pytest_unconfigure(config):
  del config
  if _OWN_STORE is not None:
    shutil.rmtree(_OWN_STORE, ignore_errors=True)


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


# --- Scheduling on pytest-xdist workers (`make test`: -n 2 --dist=loadfile).
#
# loadfile keeps each file on one worker (module state such as the
# functools.cache of a trained run, setUpClass, one worker's TFF context per
# file), but xdist queues the files by how many tests they hold, so the few
# files of a few minutes-long tests came last and one worker ran them alone
# while the other idled. `_Scheduling` is loadfile with two changes:
#
# * the files below go first, slowest first (longest processing time first:
#   the many small files then fill the gaps of both workers at the end);
# * the tests of the files in _PER_TEST are units of their own, so the two
#   workers share them. Only files whose tests share nothing (their own
#   temporary directories, subprocesses and TFF workers told apart by a mark
#   in their environment) may be listed there.
#
# The order is that of `make test`'s --durations on 2 cores (whole files;
# the split files by their slowest test). It only decides when a file
# starts: a file missing here runs as before, just later.
_SLOW_FIRST = (
    'tests/apps/sigkill_resume_test.py',  # 5 tests, 0.5-3 minutes each
    'tests/apps/text2sql/text2sql_test.py',  # about 7 minutes
    'tests/apps/experiment_binaries_test.py',  # about 5.5 minutes
    'tests/colabs/notebooks_test.py',  # 4 notebooks, 0.5-2 minutes each
    'tests/apps/weighting_demo/weighting_demo_binary_test.py',  # about 5
    'tests/apps/fcl/fcl_test.py',  # about 5 minutes
    'tests/apps/nmt/nmt_test.py',  # about 3 minutes
    'tests/apps/common/presets_test.py',
    'tests/apps/text2sql/text2sql_lora_test.py',
    'tests/apps/partial_models/train_sparse_tags_binary_test.py',
    'tests/bazel_test.py',
)
_PER_TEST = ('tests/apps/sigkill_resume_test.py',
             'tests/colabs/notebooks_test.py')


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  if config.getvalue('dist') != 'loadfile':
    return None
  from xdist.scheduler import loadfile  # pylint: disable=g-import-not-at-top

  class _Scheduling(loadfile.LoadFileScheduling):
    """loadfile, slow files first, the _PER_TEST files split by test."""

    def _split_scope(self, nodeid):
      path = nodeid.split('::', 1)[0]
      return nodeid if path in _PER_TEST else path

    def schedule(self):
      if self.collection is None and self.collection_is_completed:
        # Without its loadscopereorder (most tests first), xdist queues the
        # units in collection order: order the collections, the slow files
        # by _SLOW_FIRST, the others by xdist's own rule.
        config.option.loadscopereorder = False
        counts = {}
        for nodeid in next(iter(self.registered_collections.values())):
          path = nodeid.split('::', 1)[0]
          counts[path] = counts.get(path, 0) + 1

        def rank(nodeid):
          path = nodeid.split('::', 1)[0]
          if path in _SLOW_FIRST:
            return (0, _SLOW_FIRST.index(path))
          return (1, -counts[path])

        for node, ids in self.registered_collections.items():
          self.registered_collections[node] = sorted(ids, key=rank)
      super().schedule()

  return _Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
  """Drops `tf.test.TestCase.test_session`, a context manager, not a test."""
  del config
  items[:] = [item for item in items if item.name != 'test_session']
