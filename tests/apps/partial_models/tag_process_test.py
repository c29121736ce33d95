"""Tests of the partial-model tag process against a numpy reference."""

import collections
import functools

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import tag_fixtures as fx
from tff_nlp.algorithms import partial_models as sparse
from tff_nlp import training
from apps.partial_models import tag_process as sparse_tags
from tff_nlp.data import tags as tags_data
from apps.partial_models import tag_model as tag_regression


# Built processes, one per configuration (the arguments as given, so a test
# of a default still builds with that default), shared by this file's
# tests: a process holds no training state
# (tff_nlp/training/process_cache.py), and tracing one costs more than the
# round a test runs with it. Objects among the arguments (an aggregation
# factory) key by identity.
_BUILT = {}


def _built(builder, **kwargs):
  key = (builder.__name__, tuple(sorted(kwargs.items())))
  if key not in _BUILT:
    _BUILT[key] = builder(**kwargs)
  return _BUILT[key]


def _sparse_process(**kwargs):
  return _built(sparse_tags.build_sparse_tag_process, **kwargs)


def _dense_process(**kwargs):
  return _built(sparse_tags.build_dense_tag_process, **kwargs)


@functools.cache
def _adaptive_clipping_factory():
  """Adaptive clipping (TFF's quantile estimate) around the mean of rows.

  The clients' update norms are above 0.01 (see the execution test), so
  every client is clipped in round 1 and the estimate grows each round.
  """
  return sparse.IndexedSlicesClippingFactory(
      tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
          initial_estimate=0.01, target_quantile=0.5, learning_rate=0.5),
      sparse.IndexedSlicesMeanFactory(fx.V))


def _flat(structure):
  return [np.asarray(x) for x in tf.nest.flatten(structure)]


class SparseTagProcessComputationTest(tf.test.TestCase,
                                      parameterized.TestCase):

  def test_round_type_signature_is_the_tutorials(self):
    round_fn = sparse_tags.build_sparse_tag_round(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    # From shared/docs/federated_select.md, "Expected shapes".
    self.assertEqual(
        str(round_fn.type_signature),
        '(<server_model=float32[13,4]@SERVER,client_data={<tokens=<indices='
        'int64[?,2],values=int32[?],dense_shape=int64[2]>,tags=float32[?,4]>*'
        '}@CLIENTS> -> float32[13,4]@SERVER)')

  def test_process_next_type_signature(self):
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    self.assertIsInstance(process, tff.learning.templates.LearningProcess)
    state_type = process.initialize.type_signature.result
    tff.test.assert_types_equivalent(
        process.next.type_signature.result.metrics,
        tff.FederatedType(collections.OrderedDict(
            distributor=(),
            client_work=collections.OrderedDict(train=collections.OrderedDict(
                loss=np.float32, num_examples=np.int32,
                selected_keys=np.int32, rows_uploaded=np.int32,
                truncated_clients=np.int32, dropped_tokens=np.int32,
                non_finite_clients=np.int32)),
            aggregator=collections.OrderedDict(
                clients=np.int32, rows_received=np.int32,
                rows_touched=np.int32),
            finalizer=collections.OrderedDict(update_non_finite=np.int32)),
            tff.SERVER))
    self.assertEqual(str(state_type.member.global_model_weights),
                     '<trainable=<float32[13,4]>,non_trainable=<>>')

  def test_keyed_client_data_type(self):
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR,
        keys_in_data=True)
    plain = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    batches = plain.next.type_signature.parameter[1].member
    tff.test.assert_types_equivalent(
        process.next.type_signature.parameter[1],
        tff.FederatedType(collections.OrderedDict(
            keys=tff.TensorType(np.int32, [3]), num_keys=np.int32,
            distinct_tokens=np.int32, dropped_tokens=np.int32,
            batches=batches), tff.CLIENTS))
    # The rest of the process is the plain one's.
    tff.test.assert_types_equivalent(process.next.type_signature.result,
                                     plain.next.type_signature.result)

  def test_state_carries_a_stateful_aggregators_state(self):
    factory = _adaptive_clipping_factory()
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR,
        aggregation_factory=factory)
    aggregator = factory.create(sparse.indexed_slices_type([fx.T]))
    state_type = process.initialize.type_signature.result.member
    tff.test.assert_types_equivalent(
        state_type.aggregator, aggregator.initialize.type_signature.result
        .member)
    tff.test.assert_types_equivalent(
        process.next.type_signature.result.state.member, state_type)
    tff.test.assert_types_equivalent(
        process.next.type_signature.result.metrics.member.aggregator,
        aggregator.next.type_signature.result.measurements.member)

  @parameterized.named_parameters(
      ('max_keys', dict(max_keys=0), 'max_keys must be > 0'),
      ('block_size', dict(block_size=0), 'block_size must be > 0'),
      ('client_learning_rate', dict(client_learning_rate=0.0),
       'client_learning_rate must be > 0'),
      ('divisor', dict(divisor='rows'), "Unknown divisor 'rows'"),
      ('divisor_and_factory',
       dict(divisor='touching_clients',
            aggregation_factory=sparse.IndexedSlicesMeanFactory(fx.V)),
       'with an aggregation_factory'),
  )
  def test_rejects_bad_arguments(self, kwargs, match):
    args = dict(num_words=fx.V, num_tags=fx.T, max_keys=3,
                client_learning_rate=fx.LR)
    with self.assertRaisesRegex(ValueError, match):
      sparse_tags.build_sparse_tag_process(**dict(args, **kwargs))


class SparseTagProcessExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(
      max_keys=[
          2,  # Every client truncated (4, 6 and 2 distinct words: 2 kept).
          3,  # Clients 0 and 1 truncated, client 2 padded.
          8,  # Nobody truncated, every client padded.
      ],
      divisor=['clients', 'touching_clients'],
      # Keys found in the round, or computed once and carried by the data.
      keys_in_data=[False, True],
      # Keys of one row, or of blocks of 4 rows (blocks 0..3 of V = 13; with
      # M = 2 client 0 selects blocks 0 and 3, whose row 12 is its OOV word
      # and rows 13..15 are past the table).
      block_size=[1, 4])
  def test_matches_numpy_reference(self, max_keys, divisor, keys_in_data,
                                   block_size):
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=max_keys,
        client_learning_rate=fx.LR, divisor=divisor,
        keys_in_data=keys_in_data, block_size=block_size)
    table = fx.start_table()
    datasets = fx.datasets()
    if keys_in_data:
      datasets = [sparse_tags.keyed_client_data(d, max_keys, block_size)
                  for d in datasets]
    new_table, metrics = fx.run_round(process, table, datasets)
    expected = fx.reference_round(table, fx.CLIENTS, max_keys=max_keys,
                                  divisor=divisor, block_size=block_size)
    np.testing.assert_allclose(new_table, expected, rtol=1e-5, atol=1e-6)
    # Rows 7..11 occur in no client's data: unchanged.
    np.testing.assert_array_equal(new_table[7:12], table[7:12])
    train = metrics['client_work']['train']
    keys = [fx.reference_keys(c, max_keys=max_keys, block_size=block_size)
            for c in fx.CLIENTS]
    self.assertEqual(train['num_examples'], 8)
    self.assertEqual(train['selected_keys'], sum(k[1] for k in keys))
    self.assertEqual(train['rows_uploaded'], sum(len(k[0]) for k in keys))
    # The clients have 4, 6 and 2 distinct words.
    self.assertEqual(train['truncated_clients'],
                     sum(n > len(k[0]) for n, k in zip((4, 6, 2), keys)))
    if block_size == 1:  # Hand-derived, without blocks.
      self.assertEqual(train['selected_keys'],
                       sum(min(n, max_keys) for n in (4, 6, 2)))
    elif max_keys == 2:  # Hand-derived: blocks of rows 0-3, 4-7, 8-11, 12.
      # Client 0: blocks 0 and 3 (5 rows); client 1: blocks 0 and 1 (8);
      # client 2: block 1 (4). Each uploads all its words' rows.
      self.assertEqual(train['selected_keys'], 5 + 8 + 4)
      self.assertEqual(train['rows_uploaded'], 4 + 6 + 2)
    self.assertEqual(train['non_finite_clients'], 0)

  @parameterized.parameters(False, True)
  def test_dropped_tokens_are_counted(self, keys_in_data):
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=1, client_learning_rate=fx.LR,
        keys_in_data=keys_in_data)
    datasets = fx.datasets()[:1]
    if keys_in_data:
      datasets = [sparse_tags.keyed_client_data(datasets[0], 1)]
    _, metrics = fx.run_round(process, fx.start_table(), datasets)
    # Client 0 keeps w1 (in all 3 examples): entries per example are
    # {w0, w1, zz}, {w1, w2}, {w0, w1}: 7 entries, 3 kept, 4 dropped.
    self.assertEqual(metrics['client_work']['train']['dropped_tokens'], 4)

  def test_keyed_client_data_holds_the_local_batches(self):
    data = sparse_tags.keyed_client_data(fx.datasets()[0], max_keys=1)
    # Client 0 keeps w1 (id 1, in all 3 examples), local row 0. Its
    # examples {w0, w1 x2, zz}, {w1, w2} | {w0, w1} in batches of 2 become
    # {0: 2}, {0: 1} | {0: 1}; w0 x2, zz and w2 (4 entries) are dropped.
    # The second batch is padded to the first's 2 entries with a count of 0.
    self.assertEqual(list(data['keys']), [1])
    self.assertEqual(data['dropped_tokens'], 4)
    batches = list(data['batches'])
    self.assertLen(batches, 2)
    expected = [([[0, 0], [1, 0]], [2, 1], [2, 1]),
                ([[0, 0], [0, 0]], [1, 0], [1, 1])]
    for batch, (indices, values, dense_shape) in zip(batches, expected):
      np.testing.assert_array_equal(batch['tokens']['indices'], indices)
      np.testing.assert_array_equal(batch['tokens']['values'], values)
      np.testing.assert_array_equal(batch['tokens']['dense_shape'],
                                    dense_shape)
    np.testing.assert_array_equal(
        np.concatenate([b['tags'] for b in batches]),
        [[1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])

  def test_keyed_client_data_refuses_batches_of_several_sizes(self):
    encoded = tags_data.encode(fx.CLIENTS[0], fx.VOCAB)
    one, two = (tags_data.to_dataset(encoded.subset(i), num_words=fx.V,
                                     batch_size=2) for i in ([0], [1, 2]))
    with self.assertRaisesRegex(ValueError, r'batches of \[1, 2\]'):
      sparse_tags.keyed_client_data(one.concatenate(two), max_keys=1)

  def test_equals_dense_fedavg_when_nothing_is_dropped(self):
    # Two rounds; M = V keeps every word, so sparse == FedAvg with uniform
    # weights on the dense model (an independent tff.learning code path).
    sparse_process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=fx.V,
        client_learning_rate=fx.LR)
    dense_process = _dense_process(
        num_words=fx.V, num_tags=fx.T, client_learning_rate=fx.LR)
    datasets = fx.datasets()
    sparse_state = sparse_process.initialize()
    dense_state = dense_process.initialize()
    for _ in range(2):
      sparse_state = sparse_process.next(sparse_state, datasets).state
      dense_state = dense_process.next(
          dense_state, [tag_regression.as_keras_batches(d)
                        for d in datasets]).state
    sparse_table = sparse_process.get_model_weights(sparse_state).trainable[0]
    dense_table = dense_process.get_model_weights(dense_state).trainable[0]
    self.assertGreater(np.abs(dense_table).max(), 0.01)
    np.testing.assert_allclose(sparse_table, dense_table, atol=1e-5)

  def test_dense_rounds_on_padded_batches_equal_mapped_ones(self):
    # Entries of count 0 add nothing: the same floats, not just close ones.
    process = _dense_process(
        num_words=fx.V, num_tags=fx.T, client_learning_rate=fx.LR)
    encoded = [tags_data.encode(c, fx.VOCAB) for c in fx.CLIENTS]
    mapped = [tag_regression.as_keras_batches(d) for d in fx.datasets()]
    padded = [tags_data.to_padded_dataset(e, num_words=fx.V, batch_size=2,
                                          keras_pairs=True) for e in encoded]
    tables = []
    for datasets in (mapped, padded):
      state = process.initialize()
      for _ in range(2):
        state = process.next(state, datasets).state
      tables.append(process.get_model_weights(state).trainable[0])
    self.assertGreater(np.abs(tables[0]).max(), 0.01)
    np.testing.assert_array_equal(tables[1], tables[0])

  def test_tutorial_round_equals_process_round(self):
    kwargs = dict(num_words=fx.V, num_tags=fx.T, max_keys=3,
                  client_learning_rate=fx.LR)
    round_fn = sparse_tags.build_sparse_tag_round(**kwargs)
    process = _sparse_process(**kwargs)
    table = fx.start_table()
    np.testing.assert_allclose(
        round_fn(table, fx.datasets()),
        fx.run_round(process, table, fx.datasets())[0], rtol=1e-6)

  @parameterized.named_parameters(
      # Client 2's one example is trained on, but its update is NaN: it is
      # counted as non-finite and uploads nothing. Its 2 distinct words
      # (w5, w6) are still selected: 3 + 3 + 2 keys, 3 + 4 + 1 examples.
      ('nan', 'nan',
       dict(non_finite_clients=1, num_examples=8, selected_keys=8)),
      # Client 2 has no examples: no keys, nothing to train, nothing sent;
      # it is not faulty. 3 + 3 + 0 keys, 3 + 4 + 0 examples.
      ('empty', 'empty',
       dict(non_finite_clients=0, num_examples=7, selected_keys=6)),
  )
  def test_faulty_client_is_dropped_and_counted(self, fault, expected):
    datasets = fx.datasets()[:2] + [fx.faulty_dataset(fx.CLIENTS[2], fault)]
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    table = fx.start_table()
    new_table, metrics = fx.run_round(process, table, datasets)
    # The same round with keys and local batches carried by the data.
    keyed_table, keyed = fx.run_round(
        _sparse_process(
            num_words=fx.V, num_tags=fx.T, max_keys=3,
            client_learning_rate=fx.LR, keys_in_data=True),
        table, [sparse_tags.keyed_client_data(d, 3) for d in datasets])
    np.testing.assert_array_equal(keyed_table, new_table)
    self.assertEqual(keyed, metrics)
    self.assertTrue(np.isfinite(new_table).all())
    train = metrics['client_work']['train']
    for key, value in expected.items():
      self.assertEqual(train[key], value, key)
    # Clients 0 and 1 are truncated to 3 of their 4 and 6 words; only their
    # 3 + 3 rows reach the server, and the mean divides by 2, not 3.
    self.assertEqual(train['rows_uploaded'], 6)
    self.assertEqual(train['truncated_clients'], 2)
    self.assertEqual(metrics['aggregator']['clients'], 2)
    self.assertEqual(metrics['aggregator']['rows_received'], 6)
    self.assertEqual(metrics['finalizer']['update_non_finite'], 0)
    # The round is the round of the two healthy clients: the numpy
    # reference, and the process run on them alone.
    np.testing.assert_allclose(
        new_table, fx.reference_round(table, fx.CLIENTS[:2], max_keys=3,
                                      divisor='clients'),
        rtol=1e-5, atol=1e-6)
    alone_table, alone = fx.run_round(process, table, fx.datasets()[:2])
    np.testing.assert_allclose(new_table, alone_table, rtol=0, atol=1e-6)
    np.testing.assert_allclose(train['loss'],
                               alone['client_work']['train']['loss'],
                               rtol=1e-6)
    self.assertEqual(alone['client_work']['train']['num_examples'], 7)
    # And it did train: the rows of clients 0 and 1 moved.
    self.assertFalse(np.allclose(new_table, table))

  @parameterized.named_parameters(
      # Every client trains on all its 3 + 4 + 1 examples; every update is
      # non-finite.
      ('inf', 'inf',
       dict(non_finite_clients=3, num_examples=8, selected_keys=8)),
      # Nobody has an example, a key or an update.
      ('empty', 'empty',
       dict(non_finite_clients=0, num_examples=0, selected_keys=0)),
  )
  def test_round_without_a_usable_client_keeps_the_model(self, fault,
                                                         expected):
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    table = fx.start_table()
    new_table, metrics = fx.run_round(
        process, table, [fx.faulty_dataset(c, fault) for c in fx.CLIENTS])
    np.testing.assert_array_equal(new_table, table)  # exactly
    train = metrics['client_work']['train']
    for key, value in expected.items():
      self.assertEqual(train[key], value, key)
    self.assertEqual(train['rows_uploaded'], 0)
    self.assertEqual(train['loss'], 0.0)  # no finite example: 0/0 is 0
    # No row arrives: the mean over 0 clients is the zero update (not 0/0),
    # which the finalizer applies without change.
    self.assertEqual(metrics['aggregator'], collections.OrderedDict(
        clients=0, rows_received=0, rows_touched=0))
    self.assertEqual(metrics['finalizer']['update_non_finite'], 0)

  def test_stateful_aggregator_state_is_carried_between_rounds(self):
    factory = _adaptive_clipping_factory()
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR,
        aggregation_factory=factory)
    # The independent reference: the aggregator alone, fed the numpy
    # reference's client updates, round after round.
    aggregator = factory.create(sparse.indexed_slices_type([fx.T]))
    reference_state = aggregator.initialize()
    table = fx.start_table()
    state = process.set_model_weights(
        process.initialize(),
        tff.learning.models.ModelWeights(trainable=[table], non_trainable=[]))
    states = []
    for _ in range(2):
      table = process.get_model_weights(state).trainable[0]
      updates = [fx.as_indexed_slices(keys, rows)
                 for keys, rows in fx.reference_client_updates(
                     table, fx.CLIENTS, max_keys=3)]
      reference = aggregator.next(reference_state, updates)
      reference_state = reference.state
      output = process.next(state, fx.datasets())
      state = output.state
      states.append(state.aggregator)
      for got, want in zip(_flat(state.aggregator), _flat(reference.state)):
        np.testing.assert_allclose(got, want, rtol=1e-5)
      self.assertEqual(output.metrics['aggregator']['clipped_count'],
                       reference.measurements['clipped_count'])
      # The model moved by the clipped mean update of the reference.
      mean = np.zeros_like(table)
      mean[reference.result['indices']] = reference.result['values']
      np.testing.assert_allclose(
          process.get_model_weights(state).trainable[0],
          table - mean, rtol=1e-5, atol=1e-6)
    self.assertEqual(output.metrics['aggregator']['clipped_count'], 3)
    # Adaptive clipping: the norm estimate changed from round 1 to round 2.
    first, second = _flat(states[0]), _flat(states[1])
    self.assertTrue(any(not np.array_equal(a, b)
                        for a, b in zip(first, second)))


class SparseTagTrainingLoopExecutionTest(tf.test.TestCase):

  def test_training_loop_records_bytes_per_client(self):
    process = _sparse_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    datasets = fx.datasets()
    run = training.run_training(
        process, client_data_fn=lambda r, ids: [datasets[i] for i in ids],
        num_clients=3, config=training.LoopConfig(rounds=1, progress=False),
        output_dir=self.create_tempdir().full_path)
    (record,) = [r for r in run.records if 'train' in r]
    # Rows uploaded: min(4, 3) + min(6, 3) + min(2, 3) = 8 over 3 clients.
    self.assertEqual(record['train']['aggregator']['rows_received'], 8)
    # Down: 3 rows x 4 float32. Up: 3 int32 keys, 8/3 rows of (int64 id +
    # 4 float32), 8 metric sums of 4 bytes.
    self.assertEqual(record['communication']['bytes_down_per_client'], 48)
    np.testing.assert_allclose(
        record['communication']['bytes_up_per_client'], 12 + 8 / 3 * 24 + 32,
        rtol=1e-6)


if __name__ == '__main__':
  tf.test.main()
