"""Tests of the partial-model tag process against a numpy reference."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_nlp import training
from tff_nlp.algorithms import sparse_tags
from tff_nlp.models import tag_regression
from tests.algorithms import tag_fixtures as fx

class SparseTagProcessComputationTest:

  def test_round_type_signature_is_the_tutorials(self):
    round_fn = sparse_tags.build_sparse_tag_round(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    # From shared/docs/federated_select.md, "Expected shapes".
    assert str(round_fn.type_signature) == (
        '(<server_model=float32[13,4]@SERVER,client_data={<tokens=<indices='
        'int64[?,2],values=int32[?],dense_shape=int64[2]>,tags=float32[?,4]>*'
        '}@CLIENTS> -> float32[13,4]@SERVER)')

  def test_process_next_type_signature(self):
    process = sparse_tags.build_sparse_tag_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    assert isinstance(process, tff.learning.templates.LearningProcess)
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
    assert str(state_type.member.global_model_weights) == (
        '<trainable=<float32[13,4]>,non_trainable=<>>')

  @pytest.mark.parametrize('kwargs,match', [
      (dict(max_keys=0), 'max_keys must be > 0'),
      (dict(client_learning_rate=0.0), 'client_learning_rate must be > 0'),
      (dict(divisor='rows'), "Unknown divisor 'rows'"),
  ])
  def test_rejects_bad_arguments(self, kwargs, match):
    args = dict(num_words=fx.V, num_tags=fx.T, max_keys=3,
                client_learning_rate=fx.LR)
    with pytest.raises(ValueError, match=match):
      sparse_tags.build_sparse_tag_process(**dict(args, **kwargs))


class SparseTagProcessExecutionTest:

  @pytest.mark.parametrize('max_keys', [
      2,  # Every client truncated (4, 6 and 2 distinct words: 2 kept).
      3,  # Clients 0 and 1 truncated, client 2 padded.
      8,  # Nobody truncated, every client padded.
  ])
  @pytest.mark.parametrize('divisor', ['clients', 'touching_clients'])
  def test_matches_numpy_reference(self, max_keys, divisor):
    process = sparse_tags.build_sparse_tag_process(
        num_words=fx.V, num_tags=fx.T, max_keys=max_keys,
        client_learning_rate=fx.LR, divisor=divisor)
    table = fx.start_table()
    new_table, metrics = fx.run_round(process, table, fx.datasets())
    expected = fx.reference_round(table, fx.CLIENTS, max_keys=max_keys,
                                divisor=divisor)
    np.testing.assert_allclose(new_table, expected, rtol=1e-5, atol=1e-6)
    # Rows 7..11 occur in no client's data: unchanged.
    np.testing.assert_array_equal(new_table[7:12], table[7:12])
    train = metrics['client_work']['train']
    assert train['num_examples'] == 8
    assert train['selected_keys'] == sum(min(n, max_keys) for n in (4, 6, 2))
    assert train['truncated_clients'] == sum(n > max_keys for n in (4, 6, 2))
    assert train['non_finite_clients'] == 0

  def test_dropped_tokens_are_counted(self):
    process = sparse_tags.build_sparse_tag_process(
        num_words=fx.V, num_tags=fx.T, max_keys=1, client_learning_rate=fx.LR)
    _, metrics = fx.run_round(process, fx.start_table(), fx.datasets()[:1])
    # Client 0 keeps w1 (in all 3 examples): entries per example are
    # {w0, w1, zz}, {w1, w2}, {w0, w1}: 7 entries, 3 kept, 4 dropped.
    assert metrics['client_work']['train']['dropped_tokens'] == 4

  def test_equals_dense_fedavg_when_nothing_is_dropped(self):
    # Two rounds; M = V keeps every word, so sparse == FedAvg with uniform
    # weights on the dense model (an independent tff.learning code path).
    sparse_process = sparse_tags.build_sparse_tag_process(
        num_words=fx.V, num_tags=fx.T, max_keys=fx.V, client_learning_rate=fx.LR)
    dense_process = sparse_tags.build_dense_tag_process(
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
    assert np.abs(dense_table).max() > 0.01
    np.testing.assert_allclose(sparse_table, dense_table, atol=1e-5)

  def test_tutorial_round_equals_process_round(self):
    kwargs = dict(num_words=fx.V, num_tags=fx.T, max_keys=3,
                  client_learning_rate=fx.LR)
    round_fn = sparse_tags.build_sparse_tag_round(**kwargs)
    process = sparse_tags.build_sparse_tag_process(**kwargs)
    table = fx.start_table()
    np.testing.assert_allclose(
        round_fn(table, fx.datasets()),
        fx.run_round(process, table, fx.datasets())[0], rtol=1e-6)

  @pytest.mark.parametrize('fault,expected', [
      # Client 2's one example is trained on, but its update is NaN: it is
      # counted as non-finite and uploads nothing. Its 2 distinct words
      # (w5, w6) are still selected: 3 + 3 + 2 keys, 3 + 4 + 1 examples.
      ('nan', dict(non_finite_clients=1, num_examples=8, selected_keys=8)),
      # Client 2 has no examples: no keys, nothing to train, nothing sent;
      # it is not faulty. 3 + 3 + 0 keys, 3 + 4 + 0 examples.
      ('empty', dict(non_finite_clients=0, num_examples=7, selected_keys=6)),
  ], ids=['nan', 'empty'])
  def test_faulty_client_is_dropped_and_counted(self, fault, expected):
    datasets = fx.datasets()[:2] + [fx.faulty_dataset(fx.CLIENTS[2], fault)]
    process = sparse_tags.build_sparse_tag_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    table = fx.start_table()
    new_table, metrics = fx.run_round(process, table, datasets)
    assert np.isfinite(new_table).all()
    train = metrics['client_work']['train']
    for key, value in expected.items():
      assert train[key] == value, key
    # Clients 0 and 1 are truncated to 3 of their 4 and 6 words; only their
    # 3 + 3 rows reach the server, and the mean divides by 2, not 3.
    assert train['rows_uploaded'] == 6
    assert train['truncated_clients'] == 2
    assert metrics['aggregator']['clients'] == 2
    assert metrics['aggregator']['rows_received'] == 6
    assert metrics['finalizer']['update_non_finite'] == 0
    # The round is the round of the two healthy clients: the numpy
    # reference, and the process run on them alone.
    np.testing.assert_allclose(
        new_table, fx.reference_round(table, fx.CLIENTS[:2], max_keys=3,
                                    divisor='clients'), rtol=1e-5, atol=1e-6)
    alone_table, alone = fx.run_round(process, table, fx.datasets()[:2])
    np.testing.assert_allclose(new_table, alone_table, rtol=0, atol=1e-6)
    np.testing.assert_allclose(train['loss'],
                               alone['client_work']['train']['loss'],
                               rtol=1e-6)
    assert alone['client_work']['train']['num_examples'] == 7
    # And it did train: the rows of clients 0 and 1 moved.
    assert not np.allclose(new_table, table)

  @pytest.mark.parametrize('fault,expected', [
      # Every client trains on all its 3 + 4 + 1 examples; every update is
      # non-finite.
      ('inf', dict(non_finite_clients=3, num_examples=8, selected_keys=8)),
      # Nobody has an example, a key or an update.
      ('empty', dict(non_finite_clients=0, num_examples=0, selected_keys=0)),
  ], ids=['inf', 'empty'])
  def test_round_without_a_usable_client_keeps_the_model(self, fault,
                                                         expected):
    process = sparse_tags.build_sparse_tag_process(
        num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
    table = fx.start_table()
    new_table, metrics = fx.run_round(
        process, table, [fx.faulty_dataset(c, fault) for c in fx.CLIENTS])
    np.testing.assert_array_equal(new_table, table)  # exactly
    train = metrics['client_work']['train']
    for key, value in expected.items():
      assert train[key] == value, key
    assert train['rows_uploaded'] == 0
    assert train['loss'] == 0.0  # no finite example: 0/0 is reported as 0
    # No row arrives: the mean over 0 clients is the zero update (not 0/0),
    # which the finalizer applies without change.
    assert metrics['aggregator'] == collections.OrderedDict(
        clients=0, rows_received=0, rows_touched=0)
    assert metrics['finalizer']['update_non_finite'] == 0


def test_training_loop_records_bytes_per_client(tmp_path):
  process = sparse_tags.build_sparse_tag_process(
      num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)
  datasets = fx.datasets()
  run = training.run_training(
      process, client_data_fn=lambda r, ids: [datasets[i] for i in ids],
      num_clients=3, config=training.LoopConfig(rounds=1, progress=False),
      output_dir=str(tmp_path))
  (record,) = [r for r in run.records if 'train' in r]
  # Rows uploaded: min(4, 3) + min(6, 3) + min(2, 3) = 8 over 3 clients.
  assert record['train']['aggregator']['rows_received'] == 8
  # Down: 3 rows x 4 float32. Up: 3 int32 keys, 8/3 rows of (int64 id +
  # 4 float32), 8 metric sums of 4 bytes.
  assert record['communication']['bytes_down_per_client'] == 48
  assert record['communication']['bytes_up_per_client'] == pytest.approx(
      12 + 8 / 3 * 24 + 32)
