"""FCL with a model aggregator and with a weight-share cap.

The process is fcl_test.py's (C = 3 clients, T = 2 tasks, the tiny text
CNN of `process_fixtures.build_fcl`); the clients here have 4, 8 and 4
examples per task (weights 4, 8, 4 with one local epoch). The references:
the process without options (its plain weighted average is checked against
numpy in fcl_test.py), the aggregator's own process run alone on deltas
computed in numpy (`delta_reference`), and hand-derived capped shares.
"""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests.tff_nlp.algorithms import delta_reference
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import training
from tff_nlp.algorithms import fcl
from tff_nlp.models import fcl_cnn

_F32 = np.float32
_C = process_fixtures.FCL_NUM_CLIENTS
_SIZES = (4, 8, 4)


def _process(method, **kwargs):
  """`process_fixtures.build_fcl`, built once per configuration and test
  session: through `training.shared_processes()` (the key of fcl_test.py),
  whose store (the session's, tests/conftest.py) holds the processes
  without a model aggregator that fcl_test.py built on the other pytest
  worker. A factory's key is its identity (not stored on disk)."""
  return training.shared_processes().get(
      ('tests.build_fcl', method, tuple(sorted(kwargs.items()))),
      lambda: process_fixtures.build_fcl(method, **kwargs))


# One instance of each factory for the whole file: processes are cached by
# their arguments, and a factory compares by identity, so a new instance per
# test would build (trace) the same process again.
_MEAN = tff.aggregators.MeanFactory()
_CLIPPING = delta_reference.adaptive_clipping_factory()


def _datasets(task, sizes):
  """Per client, its `sizes[c]` examples of task `task` (batches of 2)."""
  datasets = []
  for c, size in enumerate(sizes):
    rng = np.random.default_rng(100 + 10 * task + c)
    ids = rng.integers(1, 30, size=(size, 8)).astype(np.int32)
    labels = rng.integers(0, 3, size=size).astype(np.int32)
    datasets.append(
        tf.data.Dataset.from_tensor_slices((ids, labels)).batch(2))
  return datasets


def _run(process, rounds_per_task=(2, 1), sizes=_SIZES):
  """[(task, state before the round, round output)] of every round."""
  state = process.initialize()
  clients = [process.initial_client_state(state, np.int32(c))
             for c in range(_C)]
  records = []
  for task, num_rounds in enumerate(rounds_per_task):
    started = process.start_task(
        state, [process.task_start_input(task)] * _C, clients)
    state, clients = started.state, started.client_states
    for _ in range(num_rounds):
      output = process.round_computation(task)(
          state, _datasets(task, sizes), clients)
      records.append((task, state, output))
      state, clients = output.state, output.client_states
  return records


def _sent_keys(process, task):
  return [k for k in fcl_cnn.shared_keys(process.spec)
          if task == 0 or k != 'embedding']


def _phase(task):
  return fcl.AGGREGATOR_PHASES[0 if task == 0 else 1]


def _value_type(process, task):
  shared_type = process.initialize.type_signature.result.member.shared
  return tff.StructWithPythonType(
      [shared_type[k] for k in _sent_keys(process, task)], list)


class FclAggregatorComputationTest(tf.test.TestCase):

  def test_state_and_metrics_carry_the_aggregators(self):
    factory = _CLIPPING
    process = _process('fedweit', model_aggregator=factory)
    server_type = process.initialize.type_signature.result.member
    self.assertEqual(tff.structure.name_list(server_type)[-1], 'aggregator')
    self.assertEqual(tff.structure.name_list(server_type.aggregator),
                     list(fcl.AGGREGATOR_PHASES))
    for task, computation in ((0, process.next_first_task),
                              (1, process.next)):
      aggregator = factory.create(_value_type(process, task),
                                  tff.TensorType(_F32))
      tff.test.assert_types_equivalent(
          server_type.aggregator[_phase(task)],
          aggregator.initialize.type_signature.result.member)
      signature = computation.type_signature
      tff.test.assert_types_equivalent(
          signature.parameter['state'].member, server_type)
      tff.test.assert_types_equivalent(signature.result['state'].member,
                                       server_type)
      metrics_type = signature.result['metrics'].member
      self.assertEqual(tff.structure.name_list(metrics_type)[-1],
                       'aggregator')
      tff.test.assert_types_equivalent(
          metrics_type.aggregator,
          aggregator.next.type_signature.result.measurements.member)
    tff.test.assert_types_equivalent(
        process.start_task.type_signature.result['state'].member,
        server_type)

  def test_one_server_state_type_with_or_without_an_aggregator(self):
    # One type, `fcl.ServerState`: the aggregator field is always there,
    # `()` without a model aggregator (as TFF's LearningAlgorithmState).
    plain = _process('fedweit')
    aggregated = _process(
        'fedweit', model_aggregator=_MEAN)
    plain_type = plain.initialize.type_signature.result.member
    aggregated_type = aggregated.initialize.type_signature.result.member
    self.assertEqual(tff.structure.name_list(plain_type),
                     list(fcl.ServerState._fields))
    self.assertEqual(tff.structure.name_list(aggregated_type),
                     list(fcl.ServerState._fields))
    self.assertEmpty(tff.structure.name_list(plain_type.aggregator))
    self.assertLen(plain_type.aggregator, 0)
    for process in (plain, aggregated):
      state = process.initialize()
      self.assertIsInstance(state, fcl.ServerState)
    self.assertEqual(plain.initialize().aggregator, ())
    self.assertFalse(hasattr(fcl, 'ServerStateWithAggregator'))

  def test_weight_cap_metrics_type(self):
    process = _process('fedavg', max_weight_share=0.5)
    metrics_type = process.next.type_signature.result['metrics'].member
    self.assertEqual(tff.structure.name_list(metrics_type.weight_cap),
                     ['max_share_before', 'max_share_after', 'num_capped',
                      'cap_infeasible'])

  def test_local_ignores_both(self):
    plain = _process('local')
    process = _process('local', max_weight_share=0.5,
                       model_aggregator=_MEAN)
    tff.test.assert_types_equivalent(process.next.type_signature,
                                     plain.next.type_signature)

  def test_bad_arguments_raise(self):
    with self.assertRaisesRegex(TypeError, 'model_aggregator'):
      _process('fedavg', model_aggregator=tff.aggregators.SumFactory())
    with self.assertRaisesRegex(ValueError, 'max_weight_share'):
      _process('fedavg', max_weight_share=0.0)


class FclAggregatorExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('fedavg', 'fedavg'),
                                  ('fedweit', 'fedweit'))
  def test_mean_factory_equals_plain_average(self, method):
    plain = _run(_process(method))
    mean = _run(_process(method,
                         model_aggregator=_MEAN))
    for (_, _, want), (_, _, got) in zip(plain, mean):
      self.assertAllClose(got.state.shared, want.state.shared, atol=1e-6,
                          rtol=1e-6)
      self.assertAllClose(got.state.adaptive_store, want.state.adaptive_store,
                          atol=1e-6, rtol=1e-6)
      for got_client, want_client in zip(got.client_states,
                                         want.client_states):
        self.assertAllClose(got_client.weights, want_client.weights,
                            atol=1e-6, rtol=1e-6)

  @parameterized.named_parameters(('fedavg', 'fedavg'),
                                  ('fedseit', 'fedseit'))
  def test_adaptive_clipping_matches_the_aggregator_alone(self, method):
    factory = _CLIPPING
    process = _process(method, model_aggregator=factory)
    records = _run(process)
    aggregators = {task: factory.create(_value_type(process, task),
                                        tff.TensorType(_F32))
                   for task in (0, 1)}
    initial = process.initialize().aggregator
    for task in (0, 1):
      self.assertAllClose(initial[_phase(task)],
                          aggregators[task].initialize())
    plain = _run(_process(method), rounds_per_task=(1,))[0][2]
    for task, state, output in records:
      keys = _sent_keys(process, task)
      phase = _phase(task)
      other = fcl.AGGREGATOR_PHASES[1 - fcl.AGGREGATOR_PHASES.index(phase)]
      want, want_output = delta_reference.reference_round(
          aggregators[task], state.aggregator[phase],
          [state.shared[k] for k in keys],
          [[c.weights[k] for k in keys] for c in output.client_states],
          _SIZES)
      self.assertAllClose([output.state.shared[k] for k in keys], want,
                          atol=1e-6, rtol=1e-5)
      self.assertAllClose(output.state.aggregator[phase], want_output.state)
      self.assertAllClose(output.metrics['aggregator'],
                          want_output.measurements)
      # The phase's state moves (the norm estimate); the other's is kept.
      self.assertNotAllClose(output.state.aggregator[phase],
                             state.aggregator[phase])
      self.assertAllClose(output.state.aggregator[other],
                          state.aggregator[other])
    # Carried into the next round and across start_task.
    for (_, _, before), (_, after, _) in zip(records, records[1:]):
      self.assertAllClose(after.aggregator, before.state.aggregator)
    # The initial norm clips the first round: not the plain average.
    self.assertNotAllClose(records[0][2].state.shared, plain.state.shared)

  def test_weight_cap_by_hand(self):
    # Weights n = (6, 1, 1) (examples, one local epoch), cap c = 0.5.
    # Uncapped shares are (0.75, 0.125, 0.125). The capped shares s_i =
    # min(c, λ·n_i) sum to 1: with client 0 capped, 0.5 + λ·(1 + 1) = 1, so
    # λ = 0.25; check: λ·6 = 1.5 > c (capped), λ·1 = 0.25 < c (not
    # capped). Shares (0.5, 0.25, 0.25): the new shared weights are
    # 0.5·w_0 + 0.25·w_1 + 0.25·w_2.
    for kwargs in ({}, dict(model_aggregator=_MEAN)):
      process = _process('fedavg', max_weight_share=0.5, **kwargs)
      _, _, output = _run(process, rounds_per_task=(1,),
                          sizes=(6, 1, 1))[0]
      for key in fcl_cnn.shared_keys(process.spec):
        w = [np.asarray(c.weights[key], np.float64)
             for c in output.client_states]
        self.assertAllClose(output.state.shared[key],
                            0.5 * w[0] + 0.25 * w[1] + 0.25 * w[2],
                            atol=1e-6, rtol=1e-6, msg=key)
      self.assertAllClose(output.metrics['weight_cap'],
                          collections.OrderedDict(
                              max_share_before=0.75, max_share_after=0.5,
                              num_capped=1, cap_infeasible=0))


if __name__ == '__main__':
  tf.test.main()
