"""Tests of `training.ProcessCache`: one build per key."""

import os
from unittest import mock

from absl.testing import absltest

from tff_nlp import training
from tff_nlp.training import process_cache


class ProcessCacheTest(absltest.TestCase):

  def test_builds_once_per_key(self):
    cache = training.ProcessCache()
    calls = []

    def build(name):
      def build_fn():
        calls.append(name)
        return object()
      return build_fn

    first = cache.get(('fedavg', 0.1), build('a'))
    self.assertIs(cache.get(('fedavg', 0.1), build('b')), first)
    self.assertEqual(calls, ['a'])
    # Another key builds its own, and the first is still kept.
    other = cache.get(('fedavg', 0.2), build('c'))
    self.assertIsNot(other, first)
    self.assertEqual(calls, ['a', 'c'])
    self.assertIs(cache.get(('fedavg', 0.1), build('d')), first)
    self.assertIs(cache.get(('fedavg', 0.2), build('e')), other)
    self.assertEqual(calls, ['a', 'c'])

  def test_caches_are_separate(self):
    built = [training.ProcessCache().get('key', object) for _ in range(2)]
    self.assertIsNot(built[0], built[1])

  def test_a_failed_build_is_not_cached(self):
    cache = training.ProcessCache()

    def fail():
      raise ValueError('no')

    with self.assertRaises(ValueError):
      cache.get('key', fail)
    self.assertEqual(cache.get('key', lambda: 3), 3)

  def test_counts_hits_and_misses(self):
    cache = training.ProcessCache()
    cache.get('a', object)
    cache.get('a', object)
    cache.get('b', object)
    self.assertEqual(cache.stats(),
                     training.CacheStats(hits=1, misses=2, size=2))
    self.assertIn('a', cache)
    cache.clear()
    self.assertEqual(cache.stats(),
                     training.CacheStats(hits=0, misses=0, size=0))
    self.assertNotIn('a', cache)

  def test_an_unhashable_key_is_refused_before_building(self):
    cache = training.ProcessCache()
    calls = []
    with self.assertRaises(TypeError):
      cache.get(['a', 'list'], lambda: calls.append(1))
    self.assertEmpty(calls)

  def test_max_size_drops_the_least_recently_used(self):
    cache = training.ProcessCache(max_size=2)
    a, b = cache.get('a', object), cache.get('b', object)
    self.assertIs(cache.get('a', object), a)  # 'a' used after 'b'.
    cache.get('c', object)  # Drops 'b'.
    self.assertIs(cache.get('a', object), a)
    self.assertIsNot(cache.get('b', object), b)
    with self.assertRaises(ValueError):
      training.ProcessCache(max_size=0)

  def test_shared_cache_is_one_and_can_be_turned_off(self):
    shared = training.shared_processes()
    self.assertIs(training.shared_processes(), shared)
    key = ('process_cache_test', object())  # No other test's key.
    first = shared.get(key, object)
    self.assertIs(shared.get(key, object), first)
    with mock.patch.dict(os.environ, {process_cache.ENV_VAR: '0'}):
      self.assertIsNot(shared.get(key, object), first)
      self.assertNotIn(key, shared)
    self.assertIs(shared.get(key, object), first)


if __name__ == '__main__':
  absltest.main()
