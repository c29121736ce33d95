"""Tests of `training.run_cache`: run folders, and archiving finished runs."""

import gzip
import json
import os
import subprocess
import sys

import tensorflow as tf

from tff_nlp import errors
from tff_nlp.training import run_cache

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.write(text)


def _read(path):
  with open(path) as f:
    return f.read()


class RunCacheArchiveExecutionTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.runs = self.create_tempdir().full_path
    # A finished run with translations and a checkpoint, an unfinished one,
    # and a finished generic engine.
    _write(os.path.join(self.runs, 'combined-1', 'results.json'), '{"b": 2}')
    _write(os.path.join(self.runs, 'combined-1', 'config.json'), '{"c": 1}')
    _write(os.path.join(self.runs, 'combined-1', 'predictions', 'server.jsonl'),
           '{"hypothesis": "a b"}\n' * 50)
    _write(os.path.join(self.runs, 'combined-1', 'checkpoints', 'ckpt'), 'x')
    _write(os.path.join(self.runs, 'default-2', 'config.json'), '{}')
    _write(os.path.join(self.runs, 'generic-3', 'results.json'), '{}')

  def test_archive_keeps_finished_runs_results_only(self):
    archive = os.path.join(self.create_tempdir().full_path, 'runs')
    names = run_cache.archive(self.runs, archive,
                              files=['results.json', 'config.json',
                                     'predictions/*.jsonl'],
                              exclude=['generic-'])
    self.assertEqual(names, ['combined-1'])
    self.assertEqual(sorted(os.listdir(os.path.join(archive, 'combined-1'))),
                     ['config.json', 'predictions', 'run.json'])
    with gzip.open(os.path.join(archive, 'combined-1', 'predictions',
                                'server.jsonl.gz'), 'rt') as f:
      self.assertEqual(f.read(), '{"hypothesis": "a b"}\n' * 50)

  def test_archive_is_byte_identical_when_repeated(self):
    # gzip's header time is fixed, so an unchanged run does not show as a
    # changed file in the repository.
    first, second = (self.create_tempdir().full_path for _ in range(2))
    for archive in (first, second):
      run_cache.archive(self.runs, archive, files=['predictions/*.jsonl'])
    path = os.path.join('combined-1', 'predictions', 'server.jsonl.gz')
    with open(os.path.join(first, path), 'rb') as a, open(
        os.path.join(second, path), 'rb') as b:
      self.assertEqual(a.read(), b.read())

  def test_restore_makes_archived_runs_finished_again(self):
    archive = self.create_tempdir().full_path
    run_cache.archive(self.runs, archive,
                      files=['results.json', 'predictions/*.jsonl'])
    machine = self.create_tempdir().full_path
    _write(os.path.join(machine, 'generic-3', 'results.json'), '{"local": 1}')
    self.assertEqual(run_cache.restore(archive, machine), ['combined-1'])
    self.assertEqual(
        run_cache.finished_results(os.path.join(machine, 'combined-1')),
        {'b': 2})
    self.assertEqual(
        _read(os.path.join(machine, 'combined-1', 'predictions',
                           'server.jsonl')), '{"hypothesis": "a b"}\n' * 50)
    # A run finished on this machine is not overwritten.
    self.assertEqual(_read(os.path.join(machine, 'generic-3',
                                        'results.json')), '{"local": 1}')
    # Restoring twice changes nothing.
    self.assertEqual(run_cache.restore(archive, machine), [])

  def test_archived_run_without_results_names_its_folder(self):
    archive = self.create_tempdir().full_path
    _write(os.path.join(archive, 'broken-4', 'config.json'), '{}')
    with self.assertRaisesRegex(errors.InputError,
                                'broken-4: an archived run without its '
                                'run.json'):
      run_cache.restore(archive, self.create_tempdir().full_path)

  def test_missing_folders_archive_and_restore_nothing(self):
    missing = os.path.join(self.create_tempdir().full_path, 'none')
    self.assertEqual(run_cache.archive(missing, self.runs), [])
    self.assertEqual(run_cache.restore(missing, self.runs), [])

  def test_binary_saves_then_restores(self):
    archive = self.create_tempdir().full_path
    machine = self.create_tempdir().full_path
    for action, flags in (('save', []), ('restore', [])):
      result = subprocess.run(
          [sys.executable, '-m', 'apps.common.bin.run_archive',
           f'--action={action}', f'--archive_dir={archive}',
           f'--runs_dir={self.runs if action == "save" else machine}',
           *flags], cwd=_REPO, check=True, capture_output=True, text=True,
          timeout=600)
      self.assertIn('2 ', result.stdout)  # combined-1 and generic-3.
    self.assertEqual(json.loads(_read(os.path.join(machine, 'combined-1',
                                                   'config.json'))),
                     {'c': 1})


if __name__ == '__main__':
  tf.test.main()
