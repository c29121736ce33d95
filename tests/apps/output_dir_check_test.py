"""Experiments report an unusable output directory before reading any data."""

import pathlib
import re

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import errors
from tff_nlp import training
from apps.fcl import experiment as fcl
from apps.partial_models import tag_experiment as sparse_tags


def _run_sparse_tags(output_dir, data_dir):
  sparse_tags.run_sparse_tags(
      data_dir=data_dir, output_dir=output_dir,
      data=sparse_tags.TagDataConfig(),
      training=sparse_tags.TagTrainingConfig(),
      loop=training.LoopConfig(rounds=1))


def _run_fcl(output_dir, data_dir):
  fcl.run_fcl(datasets=['20ng'], methods=['fedavg'], data=fcl.DataConfig(),
              training=fcl.TrainingConfig(), output_dir=output_dir,
              data_dir=data_dir)


class OutputDirCheckExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('sparse_tags', _run_sparse_tags),
                                  ('fcl', _run_fcl))
  def test_output_dir_is_checked_before_the_data(self, run):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    blocker = tmp_path / 'a_file'
    blocker.write_text('')
    # The data folder does not exist either: the output directory's error
    # comes first, so nothing was read or trained.
    with self.assertRaisesRegex(
        errors.InputError,
        re.escape(f"'{blocker / 'run'}' cannot be created")):
      run(str(blocker / 'run'), str(tmp_path / 'no_data'))


if __name__ == '__main__':
  tf.test.main()
