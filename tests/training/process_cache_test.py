"""Tests of `training.ProcessCache`: one build per key."""

from absl.testing import absltest

from tff_nlp import training


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


if __name__ == '__main__':
  absltest.main()
