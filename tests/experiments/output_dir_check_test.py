"""Experiments report an unusable output directory before reading any data."""

import pytest

from tff_nlp import errors
from tff_nlp import training
from tff_nlp.experiments import fcl
from tff_nlp.experiments import sparse_tags


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


@pytest.mark.parametrize('run', [_run_sparse_tags, _run_fcl],
                         ids=['sparse_tags', 'fcl'])
def test_output_dir_is_checked_before_the_data(tmp_path, run):
  blocker = tmp_path / 'a_file'
  blocker.write_text('')
  # The data folder does not exist either: the output directory's error
  # comes first, so nothing was read or trained.
  with pytest.raises(errors.InputError,
                     match=f"'{blocker / 'run'}' cannot be created"):
    run(str(blocker / 'run'), str(tmp_path / 'no_data'))
