"""Tests of vocabulary-sliced FedAvg for seq2seq models."""

import collections
import dataclasses

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import templates
from tff_nlp import analysis
from tff_nlp.templates import client_data as client_data_lib
from apps.text2sql import vocab_sliced
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_inputs
from tff_nlp.models import seq2seq_loss

_V = process_fixtures.VS_VOCABULARY
_M = process_fixtures.VS_MAX_KEYS
_D = process_fixtures.VS_HIDDEN
_CONFIG = process_fixtures.vs_config()
_LR = process_fixtures.VS_LEARNING_RATE


def _client(rng, low, high, n=6):
  source = rng.integers(low, high, size=[n, 5])
  target = rng.integers(low, high, size=[n, 4])
  x, y = seq2seq_inputs.pack_inputs(tf.ragged.constant(source),
                                    tf.ragged.constant(target), source_length=8,
                                    target_length=8)
  vocabulary, local_x, local_y, unknown = vocab_sliced.local_examples(
      {k: v.numpy() for k, v in x.items()}, y.numpy(), max_keys=_M)
  batches = tf.data.Dataset.from_tensor_slices((local_x, local_y)).batch(3)
  return vocabulary, unknown, batches


def _build(**kwargs):
  return vocab_sliced.build_vocab_sliced_process(
      _CONFIG, max_keys=_M,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=_LR), **kwargs)


def _train_locally(start, vocabulary, batches):
  """SGD on the client's local model with Keras: its trained weights."""
  local = seq2seq.build_keras_model(
      dataclasses.replace(_CONFIG, vocabulary_size=_M))
  trainable = [np.asarray(w) for w in start.trainable]
  trainable[0] = trainable[0][vocabulary.keys]
  for variable, value in zip(local.trainable_weights, trainable):
    variable.assign(value)
  loss_fn = seq2seq_loss.masked_loss()
  for x, y in batches:
    with tf.GradientTape() as tape:
      loss = loss_fn(y, local(x, training=True))
    grads = tape.gradient(loss, local.trainable_weights)
    for variable, grad in zip(local.trainable_weights, grads):
      variable.assign_sub(_LR * tf.convert_to_tensor(grad))
  return [w.numpy() for w in local.trainable_weights]


# Non-finite clients. The seq2seq inputs are token ids (int32), which cannot
# carry a NaN or Inf; the fault enters through the per-client learning rate
# of `with_client_config` instead.


def _config_data(vocabulary, batches, learning_rate=_LR):
  return vocab_sliced.client_data(
      vocabulary, templates.with_client_config(batches,
                                                learning_rate=learning_rate))


def _faulty_data(vocabulary, batches, fault):
  """The test hook: client data whose training loss becomes non-finite, or
  a client without examples.

  'nan' / 'inf': its learning rate is NaN or +Inf (built by hand:
  `with_client_config` rejects both), so after its first batch every weight
  is NaN or ±Inf (Inf·0 = NaN where a gradient is 0), and the second batch's
  loss is NaN: the client work flags the client (non-finite loss and
  update). 'empty': a client with no example, as `local_examples` makes it
  from zero rows (so its keys are the 4 special ids) with no batch;
  `vocabulary` and `batches` are ignored.
  """
  if fault == 'empty':
    no_ids = np.zeros([0, _CONFIG.max_source_length], np.int32)
    vocabulary, local_x, local_y, _ = vocab_sliced.local_examples(
        {seq2seq.ENCODER_TOKEN_IDS: no_ids,
         seq2seq.DECODER_TOKEN_IDS: no_ids}, no_ids, max_keys=_M)
    assert vocabulary.num_keys == len(vocab_sliced.SPECIAL_IDS)
    return _config_data(vocabulary, tf.data.Dataset.from_tensor_slices(
        (local_x, local_y)).batch(3))
  learning_rate = {'nan': np.nan, 'inf': np.inf}[fault]
  config = tf.data.Dataset.from_tensors(collections.OrderedDict([
      (client_data_lib.LEARNING_RATE_KEY,
       tf.constant(learning_rate, tf.float32)),
      (client_data_lib.NUM_EPOCHS_KEY, tf.constant(1, tf.int32))]))
  return vocab_sliced.client_data(vocabulary, collections.OrderedDict([
      (client_data_lib.EXAMPLES_KEY, batches),
      (client_data_lib.CONFIG_KEY, config)]))


def _three_clients():
  rng = np.random.default_rng(0)
  return [_client(rng, 4, 12), _client(rng, 10, 30), _client(rng, 4, 20)]


def _assert_weights_equal(got, want, atol):
  for g, w in zip(got.trainable, want.trainable):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=atol,
                               rtol=0)


def _robust_aggregation_factory():
  """TFF's adaptive zeroing and clipping (stateful) for the dense part."""
  return tff.learning.robust_aggregator(zeroing=True, clipping=True,
                                        weighted=True)


def _flat(structure):
  return [np.asarray(x) for x in tf.nest.flatten(structure)]


class SubVocabularyExecutionTest(tf.test.TestCase):

  def test_sub_vocabulary_ranks_by_examples_and_keeps_special_ids(self):
    # Three examples (two arrays each, 0 = padding). Example counts: 9 in 3,
    # 7 in 2, 5 and 12 in 1 each.
    a = np.array([[9, 7, 0], [9, 5, 0], [9, 0, 0]])
    b = np.array([[7, 7, 0], [0, 0, 0], [12, 0, 0]])
    vocabulary = vocab_sliced.sub_vocabulary([a, b], max_keys=7)
    # The 4 special ids, then 9, 7 and (tie 5/12) 5; ascending.
    np.testing.assert_array_equal(vocabulary.keys, [0, 1, 2, 3, 5, 7, 9])
    self.assertEqual((vocabulary.num_keys, vocabulary.distinct_ids), (7, 8))
    padded = vocab_sliced.sub_vocabulary([a, b], max_keys=10)
    np.testing.assert_array_equal(padded.keys,
                                  [0, 1, 2, 3, 5, 7, 9, 12, 0, 0])
    self.assertEqual(padded.num_keys, 8)

  def test_to_local_ids_keeps_specials_and_maps_unselected_to_unk(self):
    vocabulary = vocab_sliced.SubVocabulary(
        keys=np.array([0, 1, 2, 3, 5, 7, 9, 0], np.int32), num_keys=7,
        distinct_ids=8)
    local, unknown = vocab_sliced.to_local_ids(
        np.array([[2, 9, 12, 3, 0], [7, 5, 4, 0, 0]]), vocabulary)
    np.testing.assert_array_equal(local, [[2, 6, 1, 3, 0], [5, 4, 1, 0, 0]])
    self.assertEqual(unknown, 2)  # 12 and 4; padding is not counted.

  def test_max_keys_must_hold_the_special_ids(self):
    with self.assertRaisesRegex(ValueError, 'max_keys must be >= 4'):
      vocab_sliced.sub_vocabulary([np.zeros([1, 2], np.int64)], max_keys=3)
    with self.assertRaisesRegex(ValueError, r'max_keys must be in \[4, 40\]'):
      vocab_sliced.build_vocab_sliced_process(
          _CONFIG, max_keys=41,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))


class VocabSlicedProcessComputationTest(tf.test.TestCase):

  def test_state_carries_both_aggregators_states(self):
    process = _build(dense_aggregation_factory=_robust_aggregation_factory())
    state_type = process.initialize.type_signature.result.member
    dense_rest = [t for t in state_type.global_model_weights.trainable[1:]]
    dense = _robust_aggregation_factory().create(
        tff.types.to_type(dense_rest), tff.TensorType(np.float32))
    self.assertEqual([name for name, _ in tff.structure.iter_elements(
        state_type.aggregator)], ['dense', 'embedding'])
    tff.test.assert_types_equivalent(
        state_type.aggregator.dense,
        dense.initialize.type_signature.result.member)
    tff.test.assert_types_equivalent(
        process.next.type_signature.result.state.member, state_type)
    tff.test.assert_types_equivalent(
        process.next.type_signature.result.metrics.member.aggregator.dense,
        dense.next.type_signature.result.measurements.member)

  def test_round_traffic_has_no_dense_embedding(self):
    traffic = analysis.round_communication(_build().next)
    dense_rest = 4 * (sum(
        np.prod(w.shape) for w in seq2seq.build_keras_model(_CONFIG)
        .trainable_weights) - _V * _D)
    # Down: M selected rows of d float32, the rest of the model, the client
    # learning rate.
    self.assertEqual(traffic.bytes_down(), _M * _D * 4 + dense_rest + 4)
    selects = [t for t in traffic.transfers
               if t.intrinsic == 'federated_select']
    self.assertEqual([str(t.value_type) for t in selects],
                     ['int32[12]', '<float32[8]>'])


class VocabSlicedProcessExecutionTest(tf.test.TestCase,
                                      parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.process = _build()
    cls.config_process = _build(with_client_config=True)

  def test_one_client_round_equals_training_its_local_model(self):
    # One client whose 8 distinct ids (plus the 4 specials) fit in M = 12:
    # FedAvg of one client with server learning rate 1 is its local model,
    # which we train here directly with SGD on the same batches.
    process = self.process
    vocabulary, unknown, batches = _client(np.random.default_rng(0), 4, 12)
    self.assertEqual(unknown, 0)
    state = process.initialize()
    start = process.get_model_weights(state)
    output = process.next(state, [vocab_sliced.client_data(vocabulary,
                                                           batches)])
    new = process.get_model_weights(output.state)
    expected = _train_locally(start, vocabulary, batches)

    embedding = np.asarray(new.trainable[0])
    np.testing.assert_allclose(embedding[vocabulary.keys], expected[0],
                               atol=1e-5)
    others = np.setdiff1d(np.arange(_V), vocabulary.keys)
    np.testing.assert_array_equal(embedding[others],
                                  np.asarray(start.trainable[0])[others])
    for got, want in zip(new.trainable[1:], expected[1:]):
      np.testing.assert_allclose(got, want, atol=1e-5)

  def test_two_clients_touch_the_union_of_their_keys(self):
    process = self.process
    rng = np.random.default_rng(0)
    clients = [_client(rng, 4, 12), _client(rng, 10, 30)]
    # The second client has more distinct ids than M: the rest became UNK.
    self.assertGreater(clients[1][0].distinct_ids, _M)
    self.assertGreater(clients[1][1], 0)
    state = process.initialize()
    output = process.next(state, [vocab_sliced.client_data(v, b)
                                  for v, _, b in clients])
    before = np.asarray(process.get_model_weights(state).trainable[0])
    after = np.asarray(process.get_model_weights(output.state).trainable[0])
    changed = np.flatnonzero(np.any(before != after, axis=1))
    union = np.union1d(clients[0][0].keys, clients[1][0].keys)
    np.testing.assert_array_equal(changed, union)
    embedding = output.metrics['aggregator']['embedding']
    self.assertEqual(embedding, collections.OrderedDict(
        clients=2, rows_received=2 * _M, rows_touched=len(union)))

  @parameterized.named_parameters(
      # Client 1 trains on its 6 examples (counted in the weighting's
      # num_examples, 6 + 6 + 6) but its update is non-finite.
      ('nan', 'nan', 1, 0, 18.0),
      ('inf', 'inf', 1, 0, 18.0),
      # Client 1 has no example: weight 0 as well, counted as empty, not as
      # faulty; 6 + 0 + 6 examples.
      ('empty', 'empty', 0, 1, 12.0),
  )
  def test_faulty_client_gets_zero_weight(self, fault, non_finite, empty,
                                          weighted_examples):
    config_process = self.config_process
    (v0, _, b0), (v1, _, b1), (v2, _, b2) = _three_clients()
    state = config_process.initialize()
    output = config_process.next(state, [
        _config_data(v0, b0), _faulty_data(v1, b1, fault),
        _config_data(v2, b2)])
    weighting = output.metrics['client_work']['weighting']
    self.assertEqual(weighting['num_clients'], 3)
    self.assertEqual(weighting['num_non_finite_clients'], non_finite)
    self.assertEqual(weighting['num_empty_clients'], empty)
    self.assertEqual(weighting['num_examples'], weighted_examples)
    # Uniform weights: 1 for each healthy client, 0 for client 1.
    self.assertEqual((weighting['weight_sum'], weighting['weight_min'],
                      weighting['weight_max']), (2.0, 0.0, 1.0))
    self.assertEqual(output.metrics['finalizer']['update_non_finite'], 0)
    # The model's metrics are those of the clients that trained: 6 + 6
    # examples in batches of 3.
    train = output.metrics['client_work']['train']
    self.assertEqual((train['num_examples'], train['num_batches']), (12, 4))
    # Client 1 sends no rows: only the M rows of clients 0 and 2 arrive.
    embedding = output.metrics['aggregator']['embedding']
    union = np.union1d(v0.keys, v2.keys)
    self.assertEqual(embedding, collections.OrderedDict(
        clients=2, rows_received=2 * _M, rows_touched=len(union)))
    new = config_process.get_model_weights(output.state)
    for w in new.trainable:
      self.assertTrue(np.isfinite(np.asarray(w)).all())
    # The round is the round of clients 0 and 2 alone.
    alone = config_process.next(state, [_config_data(v0, b0),
                                        _config_data(v2, b2)])
    self.assertEqual(alone.metrics['client_work']['weighting']['weight_sum'],
                     2.0)
    _assert_weights_equal(new, config_process.get_model_weights(alone.state),
                          atol=1e-6)
    alone_train = alone.metrics['client_work']['train']
    self.assertEqual(
        (alone_train['num_examples'], alone_train['num_batches']), (12, 4))
    np.testing.assert_allclose(train['loss'], alone_train['loss'], rtol=1e-6)
    # And it did train: the embedding rows of the healthy clients moved.
    before = np.asarray(config_process.get_model_weights(state).trainable[0])
    after = np.asarray(new.trainable[0])
    np.testing.assert_array_equal(
        np.flatnonzero(np.any(before != after, axis=1)), union)

  @parameterized.named_parameters(
      ('non_finite', ('nan', 'inf', 'nan'), 3, 0),
      ('empty', ('empty',) * 3, 0, 3),
  )
  def test_round_with_every_client_faulty_keeps_the_model(self, faults,
                                                          non_finite, empty):
    config_process = self.config_process
    clients = _three_clients()
    # A healthy first round, so the kept model is not the initial one.
    state = config_process.initialize()
    first = config_process.next(state, [
        _config_data(v, b) for v, _, b in clients])
    self.assertTrue(np.any(
        np.asarray(config_process.get_model_weights(first.state).trainable[0])
        != np.asarray(config_process.get_model_weights(state).trainable[0])))
    output = config_process.next(first.state, [
        _faulty_data(v, b, fault)
        for (v, _, b), fault in zip(clients, faults)])
    weighting = output.metrics['client_work']['weighting']
    self.assertEqual(weighting['num_non_finite_clients'], non_finite)
    self.assertEqual(weighting['num_empty_clients'], empty)
    self.assertEqual(weighting['weight_sum'], 0.0)
    self.assertEqual(output.metrics['aggregator']['embedding'],
                     collections.OrderedDict(clients=0, rows_received=0,
                                             rows_touched=0))
    # The dense mean over a weight sum of 0 is 0/0; TFF's finalizer rejects
    # that non-finite update and keeps the model (and its own state).
    self.assertEqual(output.metrics['finalizer']['update_non_finite'], 1)
    _assert_weights_equal(config_process.get_model_weights(output.state),
                          config_process.get_model_weights(first.state),
                          atol=0)  # exactly
    tf.nest.map_structure(np.testing.assert_array_equal,
                          output.state.finalizer, first.state.finalizer)

  def test_stateful_dense_aggregator_state_is_carried_between_rounds(self):
    process = _build(dense_aggregation_factory=_robust_aggregation_factory())
    clients = _three_clients()[::2]  # Clients 0 and 2: all ids fit in M.
    # The independent reference: the dense aggregator alone, fed the dense
    # part of the updates of the clients' local models trained with Keras.
    state = process.initialize()
    rest_type = process.initialize.type_signature.result.member \
        .global_model_weights.trainable[1:]
    aggregator = _robust_aggregation_factory().create(
        tff.types.to_type(list(rest_type)), tff.TensorType(np.float32))
    reference_state = aggregator.initialize()
    states = []
    for _ in range(2):
      start = process.get_model_weights(state)
      updates = []
      for vocabulary, _, batches in clients:
        trained = _train_locally(start, vocabulary, batches)
        updates.append([np.asarray(s) - t for s, t in
                        zip(start.trainable[1:], trained[1:])])
      reference = aggregator.next(reference_state, updates, [1.0, 1.0])
      reference_state = reference.state
      output = process.next(state, [vocab_sliced.client_data(v, b)
                                    for v, _, b in clients])
      state = output.state
      states.append(state.aggregator['dense'])
      for got, want in zip(_flat(state.aggregator['dense']),
                           _flat(reference.state)):
        np.testing.assert_allclose(got, want, rtol=1e-5)
      # The dense tensors moved by the reference's robust mean.
      new = process.get_model_weights(state)
      for got, was, mean in zip(new.trainable[1:], start.trainable[1:],
                                reference.result):
        np.testing.assert_allclose(got, np.asarray(was) - mean, atol=1e-5)
    first, second = _flat(states[0]), _flat(states[1])
    self.assertTrue(any(not np.array_equal(a, b)
                        for a, b in zip(first, second)))


if __name__ == '__main__':
  tf.test.main()
