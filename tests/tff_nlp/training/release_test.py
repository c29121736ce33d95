"""Tests of `training.release`: JSON values and the JSON-lines releases."""

import asyncio
import collections
import dataclasses
import enum
import json
import os

import attrs
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.training import release


def _release(manager, value, key):
  asyncio.run(manager.release(value, key=key))


def _rounds(path):
  return [r['round'] for r in release.read_json_lines(path)]


class _Color(enum.Enum):
  RED = 'red'


@dataclasses.dataclass(frozen=True)
class _Span:
  start: int
  names: tuple[str, ...]


@attrs.define
class _Point:
  x: int
  y: float


class ToJsonValueExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      (np.float32(0.5), 0.5),
      (np.int64(7), 7),
      (np.array([[1, 2], [3, 4]], np.int32), [[1, 2], [3, 4]]),
      (tf.constant([1.5, 2.5]), [1.5, 2.5]),
      ((1, [np.int32(2)]), [1, [2]]),
      (collections.OrderedDict(a=np.float64(1.0), b={3: 'c'}),
       {'a': 1.0, 'b': {'3': 'c'}}),
      (_Color.RED, 'red'),
      (_Point(x=np.int32(1), y=2.0), {'x': 1, 'y': 2.0}),
      (_Span(start=np.int64(3), names=('a',)), {'start': 3, 'names': ['a']}),
      (float('nan'), 'nan'),
      (np.float32('inf'), 'inf'),
  )
  def test_to_json_value(self, value, expected):
    converted = release.to_json_value(value)
    self.assertEqual(json.loads(json.dumps(converted)), expected)


class JsonLinesReleaseManagerExecutionTest(tf.test.TestCase,
                                           parameterized.TestCase):

  def _path(self, name='metrics.jsonl'):
    return os.path.join(self.create_tempdir().full_path, name)

  def test_appends_rounds_in_order(self):
    path = self._path()
    manager = release.JsonLinesReleaseManager(path)
    for key in range(3):
      _release(manager, {'loss': np.float32(1.0 / (key + 1))}, key)
    records = release.read_json_lines(path)
    self.assertEqual([r['round'] for r in records], [0, 1, 2])
    self.assertEqual([r['loss'] for r in records][:2], [1.0, 0.5])
    self.assertAllClose(records[2]['loss'], 1 / 3)

  def test_replayed_round_replaces_it_and_later_rounds(self):
    path = self._path()
    manager = release.JsonLinesReleaseManager(path)
    for key in range(4):
      _release(manager, {'v': key}, key)
    _release(manager, {'v': 'replayed'}, 2)
    self.assertEqual(release.read_json_lines(path)[1:], [
        {'round': 1, 'v': 1}, {'round': 2, 'v': 'replayed'}])
    # Appending continues after the replay.
    _release(manager, {'v': 3}, 3)
    self.assertEqual(_rounds(path), [0, 1, 2, 3])

  def test_reopened_file_continues_and_replaces(self):
    path = self._path()
    manager = release.JsonLinesReleaseManager(path)
    for key in range(3):
      _release(manager, {'v': key}, key)
    reopened = release.JsonLinesReleaseManager(path)
    _release(reopened, {'v': 'again'}, 1)
    self.assertEqual(_rounds(path), [0, 1])

  def test_line_cut_short_by_a_kill_is_dropped(self):
    path = self._path()
    manager = release.JsonLinesReleaseManager(path)
    for key in range(2):
      _release(manager, {'v': key}, key)
    with open(path, 'ab') as f:
      f.write(b'{"round": 2, "v": ')  # A kill in the middle of a write.
    manager = release.JsonLinesReleaseManager(path)
    self.assertEqual(_rounds(path), [0, 1])
    _release(manager, {'v': 2}, 2)
    self.assertEqual(_rounds(path), [0, 1, 2])

  @parameterized.parameters(
      (b'{"round": 0}\nnot json\n', 2, 'not a valid JSON line'),
      (b'{"round": 0}\n[1, 2]\n', 2, 'expected a JSON object'),
      (b'{"loss": 1.0}\n', 1, 'expected a JSON object with a "round" key'),
  )
  def test_malformed_line_names_file_and_line(self, content, line, what):
    path = self._path()
    with open(path, 'wb') as f:
      f.write(content)
    with self.assertRaisesRegex(errors.InputError,
                                rf'metrics.jsonl:{line}: {what}'):
      release.read_json_lines(path)

  def test_missing_file_reads_as_empty(self):
    self.assertEqual(release.read_json_lines(self._path('nothing.jsonl')), [])

  def test_rejects_non_mapping_value(self):
    manager = release.JsonLinesReleaseManager(self._path('m.jsonl'))
    with self.assertRaisesRegex(TypeError, 'mapping'):
      _release(manager, [1, 2], 0)
    self.assertFalse(os.path.exists(manager.path))


if __name__ == '__main__':
  tf.test.main()
