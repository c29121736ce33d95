"""Tests of `training.ProcessStore`: built processes kept on disk.

A stored process must be the built one: the same computations (protos), the
same type signatures down to their Python containers, and the same numbers
when it runs. The processes below are the library's own, on the tiny linear
model of tests/linear_model.py (FedAvg with Lorar weighting, dynamic pulling
composed from parts with its client state).
"""

import os
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import training
from tff_nlp.training import process_store


def _fl_process():
  return process_fixtures.build_fl('fedavg', 'lorar')


def _dynamic_pulling_process():
  return process_fixtures.build_dynamic_pulling('dp_l')


_PROCESSES = (('fl_lorar', _fl_process),
              ('dynamic_pulling', _dynamic_pulling_process))


def _computations(process):
  return {name: value for name, value in vars(process).items()
          if isinstance(value, tff.Computation)}


class ProcessStoreComputationTest(parameterized.TestCase, tf.test.TestCase):

  @parameterized.named_parameters(*_PROCESSES)
  def test_a_loaded_process_has_the_built_computations_and_types(self, build):
    built = build()
    loaded = process_store.loads(process_store.dumps(built))
    self.assertIs(type(loaded), type(built))
    computations = _computations(built)
    self.assertContainsSubset(['_initialize_fn', '_next_fn'], computations)
    self.assertCountEqual(_computations(loaded), computations)
    for name, computation in computations.items():
      other = getattr(loaded, name)
      self.assertEqual(
          tff.framework.serialize_computation(other),
          tff.framework.serialize_computation(computation), name)
      # Identical, not only equivalent: the Python containers too (the
      # serialized proto alone would return plain structures).
      self.assertTrue(other.type_signature.is_identical_to(
          computation.type_signature), name)
      self.assertEqual(str(other.type_signature),
                       str(computation.type_signature), name)
    self.assertTrue(loaded.state_type.is_identical_to(built.state_type))

  def test_the_key_digest_depends_on_the_key_and_the_code(self):
    digest = process_store.key_digest(('fedavg', 0.1))
    self.assertEqual(process_store.key_digest(('fedavg', 0.1)), digest)
    self.assertNotEqual(process_store.key_digest(('fedavg', 0.2)), digest)
    self.assertLen(digest, 32)
    with mock.patch.object(process_store, 'code_fingerprint',
                           return_value='other code'):
      self.assertNotEqual(process_store.key_digest(('fedavg', 0.1)), digest)

  def test_a_key_naming_an_object_by_address_is_not_stored(self):
    with self.assertRaisesRegex(process_store.NotStorableError, 'address'):
      process_store.key_digest(('model', object()))
    store = training.ProcessStore(self.create_tempdir().full_path)
    key = ('model', object())
    self.assertFalse(store.put(key, 3))
    self.assertIsNone(store.get(key))

  @parameterized.named_parameters(
      ('keras_model', lambda: tf.keras.Sequential([tf.keras.layers.Dense(1)])),
      ('variable', lambda: tf.Variable(1.0)),
      ('tf_function', lambda: tf.function(lambda x: x)),
      ('closure', lambda: [lambda: 1]),
  )
  def test_what_is_bound_to_the_program_is_not_stored(self, make):
    directory = self.create_tempdir().full_path
    store = training.ProcessStore(directory)
    self.assertFalse(store.put('key', make()))
    self.assertIsNone(store.get('key'))
    self.assertEmpty(os.listdir(directory))


class ProcessStoreExecutionTest(parameterized.TestCase, tf.test.TestCase):

  def test_a_loaded_fl_process_trains_as_the_built_one(self):
    built = _fl_process()
    store = training.ProcessStore(self.create_tempdir().full_path)
    self.assertTrue(store.put(('fl', 'lorar'), built))
    loaded = store.get(('fl', 'lorar'))
    self.assertIsNot(loaded, built)
    clients = [linear_model.to_dataset(c)
               for c in linear_model.three_clients()]
    outputs = []
    for process in (built, loaded):
      state = process.initialize()
      for _ in range(2):
        output = process.next(state, clients)
        state = output.state
      outputs.append((process.get_model_weights(state), output.metrics))
    (built_weights, built_metrics), (weights, metrics) = outputs
    # The state comes back in the built process's containers.
    self.assertIsInstance(weights, tff.learning.models.ModelWeights)
    for got, want in zip(weights.trainable, built_weights.trainable,
                         strict=True):
      self.assertAllEqual(got, want)
    tf.nest.map_structure(self.assertAllEqual, metrics, built_metrics)

  def test_a_loaded_dynamic_pulling_process_trains_as_the_built_one(self):
    built = _dynamic_pulling_process()
    loaded = process_store.loads(process_store.dumps(built))
    clients = linear_model.three_clients()
    results = []
    for process in (built, loaded):
      state = process.initialize()
      client_states = process.initial_client_states(state, len(clients))
      for round_num in range(2):
        output = process.next(
            state, process_fixtures.dp_client_data(clients, round_num),
            client_states)
        state, client_states = output.state, output.client_states
      results.append(process_fixtures.trainable_arrays(
          process.get_model_weights(state)))
    for a, b in zip(*results):
      np.testing.assert_array_equal(a, b)

  def test_another_programs_cache_loads_instead_of_building(self):
    directory = self.create_tempdir().full_path
    store = training.ProcessStore(directory)
    calls = []

    def build():
      calls.append(1)
      return _fl_process()

    first = training.ProcessCache(store=lambda: store)
    built = first.get(('fl', 'lorar'), build)
    self.assertEqual(first.stats(), training.CacheStats(
        hits=0, misses=1, size=1, loaded=0))
    # Another program: a cache of its own on the same folder.
    second = training.ProcessCache(store=lambda: store)
    loaded = second.get(('fl', 'lorar'), build)
    self.assertEqual(calls, [1])
    self.assertEqual(second.stats(), training.CacheStats(
        hits=0, misses=0, size=1, loaded=1))
    self.assertIs(second.get(('fl', 'lorar'), build), loaded)
    self.assertEqual(tff.framework.serialize_computation(loaded.next),
                     tff.framework.serialize_computation(built.next))

  def test_an_unreadable_entry_is_built_again(self):
    directory = self.create_tempdir().full_path
    store = training.ProcessStore(directory)
    self.assertTrue(store.put('key', (1, 'two')))
    (name,) = os.listdir(directory)
    with open(os.path.join(directory, name), 'wb') as f:
      f.write(b'not a pickle')
    with self.assertLogs(level='WARNING') as logs:
      self.assertIsNone(store.get('key'))
    self.assertIn(name, '\n'.join(logs.output))
    cache = training.ProcessCache(store=lambda: store)
    self.assertEqual(cache.get('key', lambda: 'rebuilt'), 'rebuilt')
    self.assertEqual(store.get('key'), 'rebuilt')

  def test_the_shared_cache_uses_the_folder_named_in_the_environment(self):
    directory = self.create_tempdir().full_path
    shared = training.shared_processes()
    with mock.patch.dict(os.environ,
                         {process_store.DIR_ENV_VAR: directory}):
      value = shared.get(('process_store_test', 'stored'), lambda: ('a', 1))
    self.assertEqual(
        training.ProcessStore(directory).get(('process_store_test', 'stored')),
        value)
    with mock.patch.dict(os.environ, {process_store.DIR_ENV_VAR: ''}):
      shared.get(('process_store_test', 'not stored'), lambda: ('b', 2))
    self.assertLen(os.listdir(directory), 1)


if __name__ == '__main__':
  tf.test.main()
