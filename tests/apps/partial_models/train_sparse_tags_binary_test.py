"""`python -m apps.partial_models.bin.train_sparse_tags` as a user runs it."""

import json
import os
import subprocess
import sys

from absl.testing import parameterized
import tensorflow as tf

from tests.apps import bad_input_driver

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
_SMOKE_FLAGS = os.path.join(_REPO, 'apps', 'partial_models', 'flags',
                            'train_sparse_tags.smoke.flags')

_BAD_INPUT = (
    (['--methods=dense,median'], '--methods must name distinct methods'),
    (['--k_values=1,0'], '--k_values must be positive integers'),
    (['--dataset=nowhere'], 'Dataset folder .*nowhere.* not found'),
    (['--seeds=0,x'], '--seeds: expected integers, got 0,x'),
    (['--seeds=1,1'], r'--seeds: \[1, 1\] repeats a seed'),
    (['--report_only'], '--report_only and --compare_with need --seeds'),
    (['--seeds=0', '--report_only'], 'no seed of \\[0\\] has finished'),
)


def _run(output_dir, *args):
  return subprocess.run(
      [sys.executable, '-m', 'apps.partial_models.bin.train_sparse_tags',
       f'--flagfile={_SMOKE_FLAGS}', f'--output_dir={output_dir}', *args],
      cwd=_REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
      capture_output=True, text=True, timeout=900, check=False)


class TrainSparseTagsBinaryExecutionTest(parameterized.TestCase,
                                         tf.test.TestCase):

  # Every bad command line's outcome, from one driver process
  # (tests/apps/bad_input_driver.py: the binary imported once, each command
  # line run by `common.run` as `python -m` runs it, with its own output
  # folder): starting Python, TensorFlow and TFF once instead of per case.
  _outcomes = None

  def _bad_input_outcome(self, case):
    if TrainSparseTagsBinaryExecutionTest._outcomes is None:
      TrainSparseTagsBinaryExecutionTest._outcomes = (
          bad_input_driver.run_in_one_process(
              'train_sparse_tags', _SMOKE_FLAGS,
              [args for args, _ in _BAD_INPUT]))
    return TrainSparseTagsBinaryExecutionTest._outcomes[case]

  @parameterized.parameters(range(len(_BAD_INPUT)))
  def test_bad_input_exits_2_with_one_line(self, case):
    message = _BAD_INPUT[case][1]
    result = self._bad_input_outcome(case)
    self.assertEqual(result.returncode, 2, result.stderr[-2000:])
    error_lines = [l for l in result.stderr.splitlines() if 'error:' in l]
    self.assertLen(error_lines, 1, result.stderr[-2000:])
    self.assertTrue(
        error_lines[0].startswith('train_sparse_tags.py: error: '),
        error_lines[0])
    self.assertRegex(error_lines[0], message)
    self.assertNotIn('Traceback', result.stderr)

  def test_smoke_preset_writes_the_comparison(self):
    # A real `python -m` run: the binary's own process, start to exit.
    run_dir = os.path.join(self.create_tempdir().full_path, 'run')
    result = _run(run_dir, '--rounds=1')
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(run_dir, 'results.json')) as f:
      summary = json.load(f)
    self.assertEqual(list(summary['methods']),
                     ['dense', 'sparse', 'sparse_per_row'])
    for method in summary['methods'].values():
      self.assertBetween(method['final']['precision_at_1'], 0.0, 1.0)
    # M = 50 rows of T float32 down, whatever the 501-row vocabulary.
    num_tags = summary['task']['num_tags']
    self.assertEqual(summary['methods']['sparse']['bytes_down_per_client'],
                     50 * num_tags * 4)


if __name__ == '__main__':
  tf.test.main()
