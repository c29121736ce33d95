"""Tests of `training.prepare_run_dir`: the run's checks and its record."""

import hashlib
import json
import os
from unittest import mock

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import files
from tff_nlp.training import release
from tff_nlp.training import run_cache
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


def _start(output_dir, config, **kwargs):
  """A run of `config` in `output_dir` that started and trained a round."""
  with run_dir.prepare_run_dir(output_dir, config, **kwargs) as run:
    pass
  os.makedirs(os.path.join(output_dir, 'checkpoints', 'round_1'))
  return run


_START_OVER = ('Pass --restart (restart=True) to remove this run and start '
               'over, or use another output directory.')


class PrepareRunDirExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _tmp(self):
    return self.create_tempdir().full_path

  def test_new_directory_is_created_and_recorded_when_the_run_starts(self):
    output_dir = os.path.join(self._tmp(), 'a', 'b')
    run = run_dir.prepare_run_dir(output_dir, _config())
    self.assertFalse(run.resumed)
    # Checked, not recorded: the write probe is gone, no config yet.
    self.assertEqual(os.listdir(output_dir), [])
    with run:
      self.assertEqual(os.listdir(output_dir), [])
    self.assertTrue(run.started)
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f), _config())
    self.assertEqual(sorted(os.listdir(output_dir)),
                     ['config.json', 'data_fingerprint.json'])

  def test_config_file_is_written_as_before(self):
    # Cached runs are named by digests of config.json (run_cache,
    # text2sql_benchmark's init_from): its bytes must not change, and the
    # data fingerprint is kept out of it.
    output_dir = self._tmp()
    config = _config()
    _start(output_dir, config)
    self.assertEqual(_read(os.path.join(output_dir, 'config.json')),
                     json.dumps(config, indent=2) + '\n')
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(release.config_digest(json.load(f)),
                       release.config_digest(config))
    self.assertEqual(
        run_cache.run_dir('runs', 'x', config),
        os.path.join('runs', f'x-{release.config_digest(config)}'))

  def test_same_experiment_resumes_and_may_change_the_rest(self):
    output_dir = self._tmp()
    _start(output_dir, _config(rounds=10))
    with run_dir.prepare_run_dir(output_dir, _config(rounds=20)) as run:
      self.assertTrue(run.resumed)
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f)['rounds'], 20)

  def test_different_experiment_is_refused_naming_the_differences(self):
    output_dir = self._tmp()
    _start(output_dir, _config(seed=3))
    other = _config(seed=4)
    other['experiment']['data']['clients'] = 5
    with self.assertRaises(errors.CheckpointError) as e:
      run_dir.prepare_run_dir(output_dir, other)
    self.assertIn('data.clients: 8 -> 5; seed: 3 -> 4', str(e.exception))
    self.assertIn(_START_OVER, str(e.exception))
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f), _config(seed=3))  # Left as it was.

  def test_refused_run_leaves_nothing_and_the_corrected_run_starts(self):
    root = self._tmp()
    output_dir = os.path.join(root, 'runs', 'demo')
    # A typo found once the data is read (e.g. --dataset=nope).
    with self.assertRaisesRegex(errors.InputError, 'nope'):
      with run_dir.prepare_run_dir(output_dir, _config(seed=1)):
        os.makedirs(os.path.join(output_dir, 'tokenizer'))
        raise errors.InputError('Dataset folder nope not found.')
    # The folders it made are gone with what it wrote.
    self.assertEqual(os.listdir(root), [])
    with run_dir.prepare_run_dir(output_dir, _config(seed=2)) as run:
      self.assertFalse(run.resumed)
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f)['experiment']['seed'], 2)

  def test_refused_run_keeps_what_the_directory_held_before(self):
    output_dir = self._tmp()
    _write(os.path.join(output_dir, 'notes.txt'), 'mine')
    with self.assertRaises(errors.InputError):
      with run_dir.prepare_run_dir(output_dir, _config()):
        _write(os.path.join(output_dir, 'corpus.npz'), '')
        raise errors.InputError('bad flag')
    self.assertEqual(os.listdir(output_dir), ['notes.txt'])

  def test_refused_resumed_run_keeps_its_run(self):
    output_dir = self._tmp()
    _start(output_dir, _config())
    before = sorted(os.listdir(output_dir))
    with self.assertRaises(errors.InputError):
      with run_dir.prepare_run_dir(output_dir, _config(rounds=20)):
        raise errors.InputError('bad flag')
    self.assertEqual(sorted(os.listdir(output_dir)), before)
    self.assertEqual(json.loads(_read(os.path.join(
        output_dir, 'config.json')))['rounds'], 10)

  @parameterized.parameters(
      '{"experiment": {"seed": 99}}',
      '{"experiment": ',  # Unreadable.
  )
  def test_directory_holding_only_a_config_is_no_run(self, recorded):
    # What a refused run of an earlier version left: nothing trained.
    output_dir = self._tmp()
    _write(os.path.join(output_dir, 'config.json'), recorded)
    with run_dir.prepare_run_dir(output_dir, _config()) as run:
      self.assertFalse(run.resumed)
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f), _config())

  def test_unreadable_config_is_reported_with_its_path(self):
    tmp_path = self._tmp()
    path = os.path.join(tmp_path, 'config.json')
    _write(path, '{"experiment": ')
    os.mkdir(os.path.join(tmp_path, 'checkpoints'))
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
    os.mkdir(os.path.join(tmp_path, 'checkpoints'))
    with self.assertRaises(errors.CheckpointError) as e:
      run_dir.prepare_run_dir(tmp_path, _config())
    self.assertEqual(str(e.exception), (
        f"{path}: has no 'experiment' entry, so whether '{tmp_path}' holds a "
        f'run of this experiment cannot be checked. {_START_OVER}'))
    self.assertEqual(_read(path), recorded)

  def test_restart_removes_the_run_and_starts_over(self):
    output_dir = self._tmp()
    _start(output_dir, _config(seed=3))
    _write(os.path.join(output_dir, 'metrics.jsonl'), '{"round": 1}\n')
    run = run_dir.prepare_run_dir(output_dir, _config(seed=4), restart=True)
    self.assertFalse(run.resumed)
    # Set aside until the new run starts.
    self.assertEqual(os.listdir(output_dir), ['.replaced_run'])
    with run:
      pass
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f)['experiment']['seed'], 4)
    self.assertCountEqual(os.listdir(output_dir),
                          ['config.json', 'data_fingerprint.json'])

  def test_a_refused_restart_keeps_the_old_run(self):
    # `--restart` with a typo: the new run is refused before it starts, and
    # the old run is still there, byte for byte, to resume.
    output_dir = self._tmp()
    _start(output_dir, _config(seed=3))
    _write(os.path.join(output_dir, 'metrics.jsonl'), '{"round": 1}\n')
    def contents():
      found = {}
      for folder, _, names in os.walk(output_dir):
        for name in names:
          path = os.path.join(folder, name)
          found[os.path.relpath(path, output_dir)] = _read(path)
        found[os.path.relpath(folder, output_dir) + '/'] = None
      return found
    before = contents()
    with self.assertRaisesRegex(errors.InputError, 'typo'):
      with run_dir.prepare_run_dir(output_dir, _config(seed=4), restart=True):
        _write(os.path.join(output_dir, 'tokenizer.json'), '{}')
        raise errors.InputError('a typo')
    self.assertEqual(contents(), before)
    self.assertTrue(run_dir.prepare_run_dir(output_dir, _config(seed=3))
                    .resumed)

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
        with run_dir.prepare_run_dir(tmp_path, _config()):
          pass
        self.assertTrue(
            os.path.exists(os.path.join(tmp_path, 'config.json')))


def _sha256(text):
  return hashlib.sha256(text.encode()).hexdigest()


class DataFingerprintExecutionTest(tf.test.TestCase):
  """The data files a run read, recorded when it starts, checked after."""

  def setUp(self):
    super().setUp()
    self.data_root = self.create_tempdir('data').full_path
    self.folder = os.path.join(self.data_root, 'text_classification', 'tiny')
    os.makedirs(self.folder)
    self.train = os.path.join(self.folder, 'train.tsv')
    self.test = os.path.join(self.folder, 'test.tsv')
    _write(self.train, 'a\tone\nb\ttwo\n')
    _write(self.test, 'a\tthree\n')
    self.output_dir = os.path.join(self.create_tempdir().full_path, 'run')

  def _run(self, paths=None, **kwargs):
    """A run that reads `paths` (default: train and test), then trains."""
    with run_dir.prepare_run_dir(self.output_dir, _config(),
                                 data_root=self.data_root, **kwargs) as run:
      for path in (self.train, self.test) if paths is None else paths:
        files.read_file_bytes(path, 'a test file')
    os.makedirs(os.path.join(self.output_dir, 'checkpoints'), exist_ok=True)
    return run

  def _recorded(self):
    with open(os.path.join(self.output_dir, 'data_fingerprint.json')) as f:
      return json.load(f)

  def test_files_read_are_recorded_by_name_and_sha256(self):
    run = self._run()
    expected = {
        'text_classification/tiny/test.tsv': _sha256('a\tthree\n'),
        'text_classification/tiny/train.tsv': _sha256('a\tone\nb\ttwo\n')}
    self.assertEqual(self._recorded(), {'files': expected})
    self.assertEqual(run.data_files, expected)
    # Not in config.json.
    self.assertEqual(json.loads(_read(os.path.join(
        self.output_dir, 'config.json'))), _config())

  def test_unchanged_data_resumes(self):
    self._run()
    self.assertTrue(self._run().resumed)

  def test_changed_file_is_refused_naming_it_and_both_digests(self):
    self._run()
    before = self._recorded()
    _write(self.train, 'a\tone\n')  # A line cut.
    with self.assertRaises(errors.CheckpointError) as e:
      self._run()
    path = os.path.join(self.output_dir, 'data_fingerprint.json')
    old, new = _sha256('a\tone\nb\ttwo\n'), _sha256('a\tone\n')
    self.assertEqual(str(e.exception), (
        f"{path}: the data of the run in '{self.output_dir}' changed: "
        'text_classification/tiny/train.tsv changed since this run started '
        f'(sha256 {old[:12]}… -> {new[:12]}…). Resuming would train one run '
        f'on two versions of the data. {_START_OVER}'))
    self.assertEqual(self._recorded(), before)  # Left as it was.

  def test_restart_starts_over_with_the_new_data(self):
    self._run()
    _write(os.path.join(self.output_dir, 'metrics.jsonl'), '{"round": 1}\n')
    _write(self.train, 'a\tone\n')
    run = self._run(restart=True)
    self.assertFalse(run.resumed)
    self.assertFalse(os.path.exists(
        os.path.join(self.output_dir, 'metrics.jsonl')))
    self.assertEqual(
        self._recorded()['files']['text_classification/tiny/train.tsv'],
        _sha256('a\tone\n'))

  def test_removed_and_newly_read_files_are_refused(self):
    self._run()
    os.remove(self.test)
    dev = os.path.join(self.folder, 'dev.tsv')
    _write(dev, 'a\tfour\n')
    with self.assertRaises(errors.CheckpointError) as e:
      self._run(paths=[self.train, dev])
    self.assertIn(
        'text_classification/tiny/dev.tsv is read now but was not when this '
        'run started; text_classification/tiny/test.tsv was removed since '
        'this run started', str(e.exception))

  def test_file_not_read_again_is_hashed_again(self):
    # E.g. a corpus read into a cache the first time only.
    self._run()
    self.assertTrue(self._run(paths=[self.train]).resumed)
    _write(self.test, 'a\tfive\n')
    with self.assertRaisesRegex(
        errors.CheckpointError,
        'text_classification/tiny/test.tsv changed since this run started'):
      self._run(paths=[self.train])

  def test_file_outside_the_data_folder_is_named_by_its_path(self):
    elsewhere = os.path.join(self.create_tempdir().full_path, 'vectors.txt')
    _write(elsewhere, 'x 1\n')
    self._run(paths=[elsewhere])
    self.assertEqual(list(self._recorded()['files']),
                     [os.path.realpath(elsewhere)])

  def test_run_recorded_without_a_fingerprint_resumes_and_gets_one(self):
    self._run()
    os.remove(os.path.join(self.output_dir, 'data_fingerprint.json'))
    _write(self.train, 'a\tone\n')
    self.assertTrue(self._run().resumed)
    self.assertIn('text_classification/tiny/train.tsv',
                  self._recorded()['files'])


if __name__ == '__main__':
  tf.test.main()
