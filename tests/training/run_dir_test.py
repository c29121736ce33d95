"""Tests of `training.prepare_run_dir`."""

import json
import os
from unittest import mock

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.training import run_dir


def _config(seed=3, rounds=10):
  return {'experiment': {'seed': seed, 'data': {'clients': 8}},
          'rounds': rounds}


def _read(path):
  with open(path) as f:
    return f.read()


def _write(path, text):
  with open(path, 'w') as f:
    f.write(text)


class PrepareRunDirExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _tmp(self):
    return self.create_tempdir().full_path

  def test_new_directory_is_created_with_config(self):
    output_dir = os.path.join(self._tmp(), 'a', 'b')
    self.assertFalse(run_dir.prepare_run_dir(output_dir, _config()))
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f), _config())
    # The write probe is gone.
    self.assertEqual(os.listdir(output_dir), ['config.json'])

  def test_same_experiment_resumes_and_may_change_the_rest(self):
    output_dir = self._tmp()
    run_dir.prepare_run_dir(output_dir, _config(rounds=10))
    self.assertTrue(run_dir.prepare_run_dir(output_dir, _config(rounds=20)))
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f)['rounds'], 20)

  def test_different_experiment_is_refused_naming_the_differences(self):
    output_dir = self._tmp()
    run_dir.prepare_run_dir(output_dir, _config(seed=3))
    other = _config(seed=4)
    other['experiment']['data']['clients'] = 5
    with self.assertRaises(errors.CheckpointError) as e:
      run_dir.prepare_run_dir(output_dir, other)
    self.assertIn('data.clients: 8 -> 5; seed: 3 -> 4', str(e.exception))
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f), _config(seed=3))  # Left as it was.

  def test_unreadable_config_is_reported_with_its_path(self):
    tmp_path = self._tmp()
    path = os.path.join(tmp_path, 'config.json')
    _write(path, '{"experiment": ')
    with self.assertRaisesRegex(errors.CheckpointError,
                                f'{path}: cannot be read'):
      run_dir.prepare_run_dir(tmp_path, _config())
    self.assertEqual(_read(path), '{"experiment": ')

  @parameterized.parameters(
      '{"data": {"clients": 8}, "rounds": 10}',  # An older layout.
      '[1, 2]',
  )
  def test_config_without_an_experiment_is_refused(self, recorded):
    tmp_path = self._tmp()
    path = os.path.join(tmp_path, 'config.json')
    _write(path, recorded)
    with self.assertRaises(errors.CheckpointError) as e:
      run_dir.prepare_run_dir(tmp_path, _config())
    self.assertEqual(str(e.exception), (
        f"{path}: has no 'experiment' entry, so whether '{tmp_path}' holds a "
        'run of this experiment cannot be checked. Use another output '
        'directory, or remove this one to start over.'))
    self.assertEqual(_read(path), recorded)

  def test_directory_that_cannot_be_created_is_reported(self):
    blocker = os.path.join(self._tmp(), 'a_file')
    _write(blocker, '')
    with self.assertRaisesRegex(errors.InputError, 'cannot be created'):
      run_dir.prepare_run_dir(os.path.join(blocker, 'run'), _config())

  def test_config_needs_an_experiment_entry(self):
    with self.assertRaisesRegex(ValueError, "'experiment'"):
      run_dir.prepare_run_dir(self._tmp(), {'rounds': 1})

  def test_unwritable_directory_is_reported(self):
    tmp_path = self._tmp()

    # Tests run as root, whom permission bits do not stop: the write fails
    # the way a read-only mount makes it fail.
    def read_only_open(path, *args, **kwargs):
      raise PermissionError(13, 'Permission denied', path)

    with mock.patch.object(run_dir, 'open', read_only_open, create=True):
      with self.assertRaisesRegex(
          errors.InputError,
          f"'{tmp_path}' is not writable: Permission denied"):
        run_dir.prepare_run_dir(tmp_path, _config())

  @parameterized.parameters((10, True), (255, True), (256, False),
                            (10_000, False))
  def test_nearly_full_file_system_is_reported(self, free_mib, fails):
    tmp_path = self._tmp()
    # The default threshold is 256 MiB (run_dir.MIN_FREE_BYTES).
    usage = run_dir.shutil.disk_usage(tmp_path)
    with mock.patch.object(
        run_dir.shutil, 'disk_usage',
        lambda path: usage._replace(free=free_mib * 2**20)):
      if fails:
        with self.assertRaisesRegex(
            errors.InputError,
            f'has {free_mib:.1f} MiB free, less than the 256 MiB'):
          run_dir.prepare_run_dir(tmp_path, _config())
        self.assertFalse(
            os.path.exists(os.path.join(tmp_path, 'config.json')))
      else:
        run_dir.prepare_run_dir(tmp_path, _config())
        self.assertTrue(
            os.path.exists(os.path.join(tmp_path, 'config.json')))


if __name__ == '__main__':
  tf.test.main()
