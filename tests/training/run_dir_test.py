import json
import os

import pytest

from tff_nlp import errors
from tff_nlp.training import run_dir


def _config(seed=3, rounds=10):
  return {'experiment': {'seed': seed, 'data': {'clients': 8}},
          'rounds': rounds}


def test_new_directory_is_created_with_config(tmp_path):
  output_dir = str(tmp_path / 'a' / 'b')
  assert not run_dir.prepare_run_dir(output_dir, _config())
  with open(os.path.join(output_dir, 'config.json')) as f:
    assert json.load(f) == _config()
  assert os.listdir(output_dir) == ['config.json']  # The write probe is gone.


def test_same_experiment_resumes_and_may_change_the_rest(tmp_path):
  output_dir = str(tmp_path)
  run_dir.prepare_run_dir(output_dir, _config(rounds=10))
  assert run_dir.prepare_run_dir(output_dir, _config(rounds=20))
  with open(os.path.join(output_dir, 'config.json')) as f:
    assert json.load(f)['rounds'] == 20


def test_different_experiment_is_refused_naming_the_differences(tmp_path):
  output_dir = str(tmp_path)
  run_dir.prepare_run_dir(output_dir, _config(seed=3))
  other = _config(seed=4)
  other['experiment']['data']['clients'] = 5
  with pytest.raises(errors.CheckpointError) as e:
    run_dir.prepare_run_dir(output_dir, other)
  assert 'data.clients: 8 -> 5; seed: 3 -> 4' in str(e.value)
  with open(os.path.join(output_dir, 'config.json')) as f:
    assert json.load(f) == _config(seed=3)  # Left as it was.


def test_unreadable_config_is_reported_with_its_path(tmp_path):
  path = tmp_path / 'config.json'
  path.write_text('{"experiment": ')
  with pytest.raises(errors.CheckpointError, match=f'{path}: cannot be read'):
    run_dir.prepare_run_dir(str(tmp_path), _config())
  assert path.read_text() == '{"experiment": '


@pytest.mark.parametrize('recorded', [
    '{"data": {"clients": 8}, "rounds": 10}',  # An older layout.
    '[1, 2]',
])
def test_config_without_an_experiment_is_refused(tmp_path, recorded):
  path = tmp_path / 'config.json'
  path.write_text(recorded)
  with pytest.raises(errors.CheckpointError) as e:
    run_dir.prepare_run_dir(str(tmp_path), _config())
  assert str(e.value) == (
      f"{path}: has no 'experiment' entry, so whether '{tmp_path}' holds a "
      'run of this experiment cannot be checked. Use another output '
      'directory, or remove this one to start over.')
  assert path.read_text() == recorded


def test_directory_that_cannot_be_created_is_reported(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('')
  with pytest.raises(errors.InputError, match='cannot be created'):
    run_dir.prepare_run_dir(str(blocker / 'run'), _config())


def test_config_needs_an_experiment_entry(tmp_path):
  with pytest.raises(ValueError, match="'experiment'"):
    run_dir.prepare_run_dir(str(tmp_path), {'rounds': 1})


def test_unwritable_directory_is_reported(tmp_path, monkeypatch):
  # Tests run as root, whom permission bits do not stop: the write fails the
  # way a read-only mount makes it fail.
  def read_only_open(path, *args, **kwargs):
    raise PermissionError(13, 'Permission denied', path)

  monkeypatch.setattr(run_dir, 'open', read_only_open, raising=False)
  with pytest.raises(errors.InputError,
                     match=f"'{tmp_path}' is not writable: Permission denied"):
    run_dir.prepare_run_dir(str(tmp_path), _config())


@pytest.mark.parametrize('free_mib, fails', [(10, True), (255, True),
                                             (256, False), (10_000, False)])
def test_nearly_full_file_system_is_reported(tmp_path, monkeypatch, free_mib,
                                             fails):
  # The default threshold is 256 MiB (run_dir.MIN_FREE_BYTES).
  usage = run_dir.shutil.disk_usage(tmp_path)
  monkeypatch.setattr(
      run_dir.shutil, 'disk_usage',
      lambda path: usage._replace(free=free_mib * 2**20))
  if fails:
    with pytest.raises(errors.InputError,
                       match=f'has {free_mib:.1f} MiB free, less than the '
                       '256 MiB'):
      run_dir.prepare_run_dir(str(tmp_path), _config())
    assert not os.path.exists(tmp_path / 'config.json')
  else:
    run_dir.prepare_run_dir(str(tmp_path), _config())
    assert os.path.exists(tmp_path / 'config.json')
