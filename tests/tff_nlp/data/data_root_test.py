"""Tests of the one `shared/data` search order (`tff_nlp.data.data_root`)."""

import os
from unittest import mock

import tensorflow as tf

from tff_nlp import data
from tff_nlp.data import data_root


class FindDataDirExecutionTest(tf.test.TestCase):

  def test_argument_wins(self):
    explicit = self.create_tempdir().full_path
    with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: '/nonexistent'}):
      self.assertEqual(data.find_data_dir(explicit + '/'), explicit)

  def test_environment_variable_then_default(self):
    from_env = self.create_tempdir().full_path
    default = self.create_tempdir().full_path
    with mock.patch.object(data_root, '_DEFAULT_DATA_DIR', default):
      with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: from_env}):
        self.assertEqual(data.find_data_dir(), from_env)
      with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: ''}):
        self.assertEqual(data.find_data_dir(), default)

  def test_default_is_next_to_the_repository(self):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    self.assertEqual(
        os.path.normpath(data_root._DEFAULT_DATA_DIR),
        os.path.join(os.path.dirname(repo), 'shared', 'data'),
    )

  def test_missing_directory_says_where_it_came_from(self):
    missing = os.path.join(self.create_tempdir().full_path, 'none')
    with self.assertRaisesRegex(ValueError, 'from the data_dir argument'):
      data.find_data_dir(missing)
    with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: missing}):
      with self.assertRaisesRegex(ValueError, 'TFF_NLP_DATA_DIR'):
        data.find_data_dir()
    with mock.patch.object(data_root, '_DEFAULT_DATA_DIR', missing):
      with mock.patch.dict(os.environ, {data.DATA_DIR_ENV_VAR: ''}):
        with self.assertRaisesRegex(ValueError, 'default location'):
          data.find_data_dir()


if __name__ == '__main__':
  tf.test.main()
