"""Tests of the round-overhead benchmark on tiny workloads of both models.

The real check is that the hand-written pure-TF rounds, an independent
reimplementation of the local training, Lorar weighting and server step,
give the TFF round's global model. Timings are not asserted (they depend on
the machine), only how the breakdown is put together and the JSON fields.
"""

import dataclasses
import functools
import json

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import runtime
from apps.scaling import round_overhead
from apps.scaling import round_overhead_pure_tf
from apps.scaling import round_overhead_workloads as workloads
from apps.text2sql import task as text2sql
from apps.common import text_classification_task as text_classification
from tff_nlp.models import seq2seq

_SETUPS = {
    workloads.R8_CLASSIFIER: workloads.R8Setup(
        data=text_classification.ClientDataConfig(
            dataset='r8', num_clients=2, dirichlet_alpha=0.5,
            min_train_examples=50, vocab_size=500, max_length=16),
        local_epochs=1, batch_size=64, embedding_dim=8, learning_rate=1.0),
    workloads.TEXT2SQL_SEQ2SEQ: workloads.Text2SqlSetup(
        data=text2sql.DataConfig(
            clients=('geography', 'imdb'), schema_columns=False,
            vocabulary_size=400, max_source_length=48, max_target_length=96,
            max_train_examples=text2sql.PerClient(8, (('imdb', 12),)),
            max_eval_examples=1),
        model=seq2seq.Seq2SeqConfig.from_preset(
            'small', num_encoder_layers=1, num_decoder_layers=1,
            hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0),
        training=text2sql.TrainingConfig(
            paradigm='federated', algorithm='fedavg', weighting='lorar',
            client_optimizer='adam',
            local_epochs=text2sql.PerClient(2, (('imdb', 1),)),
            learning_rates=text2sql.PerClient(1e-2, (('imdb', 5e-3),)),
            batch_sizes=text2sql.PerClient(4))),
}
_MODELS = [(name, name) for name in workloads.MODELS]
# Issue 2's JSON fields, which docs/results/round_overhead_c*.json hold.
_ISSUE_2_FIELDS = {
    'num_clients': int, 'client_train_examples': list, 'local_epochs': int,
    'batch_size': int, 'model_parameters': int, 'repeats': int,
    'tff_round_seconds': list, 'pure_tf_round_seconds': list,
    'tff_median_seconds': float, 'pure_tf_median_seconds': float,
    'ratio': float, 'max_abs_weight_difference': float,
    'max_abs_update': float, 'machine': dict,
}


@functools.lru_cache(maxsize=None)
def _run(model: str):
  """One benchmark run per model, shared by the tests (through JSON)."""
  workers_before = set(runtime.owned_worker_pids())
  result = round_overhead.run_round_overhead(
      setup=_SETUPS[model], data_dir=None, repeats=1, seed=0)
  # Both contexts' workers are stopped (the session's own one remains).
  assert set(runtime.owned_worker_pids()) <= workers_before
  return json.loads(json.dumps(result))


class RunExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*_MODELS)
  def test_every_side_computes_the_same_global_model(self, model):
    result = _run(model)
    # Tight: at this size the sides differ by float rounding only (on the
    # benchmark's size training amplifies it; `check_same_model`).
    self.assertGreater(result['max_abs_update'], 1e-4)
    for side in round_overhead.SIDES[1:]:
      with self.subTest(side=side):
        difference = result['weight_differences'][side]
        self.assertLessEqual(difference['max_abs'],
                             1e-3 * result['max_abs_update'])
        self.assertLessEqual(difference['relative'], 1e-4)
    self.assertEqual(result['max_abs_weight_difference'], max(
        d['max_abs'] for d in result['weight_differences'].values()))

  @parameterized.named_parameters(*_MODELS)
  def test_breakdown_adds_up_to_the_round(self, model):
    result = _run(model)
    breakdown = result['breakdown']
    reference = f'pure_tf_{result["pure_tf_loop"]}'
    self.assertEqual(result['pure_tf_median_seconds'],
                     min(result['median_seconds'][s]
                         for s in round_overhead.PURE_TF_SIDES))
    self.assertEqual(result['pure_tf_median_seconds'],
                     result['median_seconds'][reference])
    serialization = sum(v['seconds']
                        for v in result['serialization'].values())
    self.assertAlmostEqual(result['serialization_seconds'], serialization)
    for side in round_overhead.SIDES:
      with self.subTest(side=side):
        parts = breakdown[side]
        self.assertEqual(parts['round_seconds'],
                         result['median_seconds'][side])
        self.assertEqual(parts['round_seconds'],
                         result['round_seconds'][side][0])  # One repeat.
        self.assertAlmostEqual(
            parts['serialization_seconds'] + parts['compute_seconds']
            + parts['remainder_seconds'], parts['round_seconds'], places=9)
        self.assertAlmostEqual(
            parts['tracing_seconds'],
            parts['first_round_seconds'] - parts['round_seconds'], places=9)
        for key in ('round_seconds', 'first_round_seconds',
                    'serialization_seconds', 'compute_seconds'):
          self.assertGreaterEqual(parts[key], 0.0, key)
        if side in round_overhead.PURE_TF_SIDES:
          self.assertEqual(parts['serialization_seconds'], 0.0)
          self.assertEqual(parts['compute_seconds'],
                           result['client_compute_seconds'][side][0])
          # Client times are measured inside the round: the rest (the
          # server step) cannot be negative.
          self.assertGreaterEqual(parts['remainder_seconds'], 0.0)
        else:
          self.assertEqual(parts['serialization_seconds'], serialization)
          # The TFF sides' compute is the reference loop's; their remainder
          # is signed (negative when the worker overlaps clients).
          self.assertEqual(parts['compute_seconds'],
                           breakdown[reference]['compute_seconds'])

  @parameterized.named_parameters(*_MODELS)
  def test_json_fields(self, model):
    result = _run(model)
    for key, kind in _ISSUE_2_FIELDS.items():
      self.assertIsInstance(result[key], kind, key)
    self.assertEqual(result['model'], model)
    self.assertEqual(result['num_clients'], 2)
    self.assertLen(result['client_train_examples'], 2)
    self.assertEqual(result['repeats'], 1)
    self.assertEqual(result['concurrency'], 'unlimited')
    self.assertIn(result['pure_tf_loop'], round_overhead_pure_tf.PURE_TF_LOOPS)
    self.assertEqual(result['tff_round_seconds'],
                     result['round_seconds']['tff'])
    self.assertEqual(result['tff_c1_round_seconds'],
                     result['round_seconds']['tff_c1'])
    self.assertAlmostEqual(result['ratio'], result['tff_median_seconds']
                           / result['pure_tf_median_seconds'])
    self.assertAlmostEqual(result['ratio_c1'], result['tff_c1_median_seconds']
                           / result['pure_tf_median_seconds'])
    self.assertEqual(list(result['serialization']),
                     list(round_overhead.SERIALIZED))
    for name, value in result['serialization'].items():
      self.assertGreater(value['bytes'], 0, name)
    self.assertEqual(set(result['breakdown']), set(round_overhead.SIDES))
    self.assertEqual(set(result['build_seconds']),
                     {'tff', 'tff_compile', 'pure_tf'})

  def test_text2sql_clients_keep_their_own_configuration(self):
    result = _run(workloads.TEXT2SQL_SEQ2SEQ)
    self.assertEqual(result['client_names'], ['geography', 'imdb'])
    self.assertEqual(result['client_train_examples'], [8, 12])
    self.assertEqual(result['client_local_epochs'], [2, 1])
    self.assertEqual(result['client_learning_rates'], [1e-2, 5e-3])
    self.assertEqual(result['client_batch_sizes'], [4, 4])

  @parameterized.named_parameters(*_MODELS)
  def test_markdown_tables(self, model):
    text = round_overhead.markdown(_run(model))
    rows = [line for line in text.splitlines() if line.startswith(f'| {model}')]
    self.assertLen(rows, 2)  # One per TFF concurrency.
    self.assertIn('| unlimited |', rows[0])
    self.assertIn('| 1 |', rows[1])
    self.assertIn('| remainder |', text)
    self.assertIn('| computation |', text)


class CheckSameModelExecutionTest(tf.test.TestCase):

  def test_noise_passes_and_reports_differences(self):
    initial = [np.zeros(3), np.zeros((2, 2))]
    reference = [np.full(3, 1.0), np.full((2, 2), -1.0)]
    noisy = [reference[0] + [1e-3, 0, 0], reference[1]]
    result = round_overhead_pure_tf.check_same_model(
        {'a': reference, 'b': noisy}, initial, reference='a')
    self.assertAllClose(result['max_abs_update'], 1.0)
    self.assertAllClose(result['update_norm'], np.sqrt(7.0))
    self.assertAllClose(result['b']['max_abs'], 1e-3)
    self.assertAllClose(result['b']['relative'], 1e-3 / np.sqrt(7.0))

  def test_different_work_fails(self):
    initial = [np.zeros(4)]
    reference = [np.full(4, 0.1)]
    half_step = [np.full(4, 0.05)]  # E.g. a client's learning rate halved.
    with self.assertRaisesRegex(AssertionError, 'disagree'):
      round_overhead_pure_tf.check_same_model(
          {'tff': reference, 'pure_tf_steps': half_step}, initial,
          reference='tff')


class SetupExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('dropout', dict(model=dict(dropout=0.1)), 'dropout 0'),
      ('fedopt', dict(training=dict(algorithm='fedopt')), 'FedAvg \\+ Lorar'),
      ('weighting', dict(training=dict(weighting='uniform')),
       'FedAvg \\+ Lorar'),
      ('adafactor', dict(training=dict(client_optimizer='adafactor')),
       "'sgd' or 'adam'"),
  )
  def test_refuses_what_the_reference_does_not_implement(self, changes,
                                                         message):
    setup = _SETUPS[workloads.TEXT2SQL_SEQ2SEQ]
    ((name, overrides),) = changes.items()
    with self.assertRaisesRegex(ValueError, message):
      dataclasses.replace(setup, **{
          name: dataclasses.replace(getattr(setup, name), **overrides)})

  def test_text2sql_setup_is_the_cpu_preset_resized(self):
    setup = workloads.text2sql_setup(num_clients=3,
                                     max_train_examples=20)
    self.assertEqual(setup.data.clients, ('advising', 'atis', 'geography'))
    self.assertEqual(setup.data.max_train_examples, text2sql.PerClient(20))
    self.assertEqual((setup.data.max_source_length,
                      setup.data.max_target_length), (128, 160))
    self.assertEqual((setup.model.num_encoder_layers, setup.model.hidden_dim,
                      setup.model.dropout), (2, 128, 0.0))
    self.assertEqual(setup.training.local_epochs['atis'], 1)
    self.assertEqual(setup.training.local_epochs['geography'], 2)
    self.assertEqual(setup.training.learning_rates['atis'], 2e-3)
    with self.assertRaisesRegex(ValueError, 'num_clients'):
      workloads.text2sql_setup(num_clients=9)


if __name__ == '__main__':
  tf.test.main()
