"""Dynamic pulling with a model aggregator and with a weight-share cap.

The model and clients are those of dynamic_pulling_test.py (a linear chain
of 8 tensors in two groups; `linear_model.three_clients()` with 7, 4 and 10
examples). The references: the process without options (the plain weighted
average, itself checked against numpy there), the aggregator's own process
run alone on deltas computed in numpy (`delta_reference`), and hand-derived
capped shares.
"""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests.tff_nlp.algorithms import delta_reference
from tests import linear_model
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp.algorithms import dynamic_pulling

_F32, _I32 = np.float32, np.int32
_process = process_fixtures.build_dynamic_pulling
_NUM_EXAMPLES = (7, 4, 10)


_data = process_fixtures.dp_client_data
_trainable = process_fixtures.trainable_arrays


def _run(process, num_rounds, data_sizes=None):
  """[(state before, client states before, output)] per round."""
  clients = linear_model.three_clients()
  state = process.initialize()
  client_states = [dynamic_pulling.initial_client_state(process, state)] * 3
  rounds = []
  for round_num in range(num_rounds):
    output = process.next(state, _data(clients, round_num, data_sizes),
                          client_states)
    rounds.append((state, client_states, output))
    state, client_states = output.state, output.client_states
  return rounds


def _value_type():
  return process_fixtures.dp_weights_type().trainable


# One factory for every test: `_process` caches a built process by its
# arguments, the factory by identity (a factory keeps no state of its own:
# its processes' states are explicit), so the tests of one configuration
# build it once.
_CLIPPING = delta_reference.adaptive_clipping_factory()


class DynamicPullingAggregatorComputationTest(tf.test.TestCase):

  def test_state_and_metrics_carry_the_aggregator(self):
    factory = _CLIPPING
    process = _process('dp_l', model_aggregator=factory)
    aggregator = factory.create(_value_type(), tff.TensorType(_F32))
    state_type = process.initialize.type_signature.result.member
    self.assertEqual(tff.structure.name_list(state_type),
                     ['global_model_weights', 'distributor', 'client_work',
                      'aggregator', 'finalizer', 'round_num'])
    tff.test.assert_types_equivalent(
        state_type.aggregator,
        aggregator.initialize.type_signature.result.member)
    next_type = process.next.type_signature
    tff.test.assert_types_equivalent(next_type.parameter['state'].member,
                                     state_type)
    tff.test.assert_types_equivalent(next_type.result['state'].member,
                                     state_type)
    metrics_type = next_type.result['metrics'].member
    self.assertEqual(tff.structure.name_list(metrics_type)[-1], 'aggregator')
    tff.test.assert_types_equivalent(
        metrics_type.aggregator,
        aggregator.next.type_signature.result.measurements.member)
    tff.test.assert_types_equivalent(
        process.get_model_weights.type_signature.result,
        process_fixtures.dp_weights_type())

  def test_weight_cap_metrics_type(self):
    process = _process('dp_l', max_weight_share=0.5)
    metrics_type = process.next.type_signature.result['metrics'].member
    self.assertEqual(tff.structure.name_list(metrics_type.weight_cap),
                     ['max_share_before', 'max_share_after', 'num_capped',
                      'cap_infeasible'])
    # Without a model aggregator the state's aggregator is empty.
    tff.test.assert_types_equivalent(
        process.initialize.type_signature.result.member.aggregator,
        tff.StructType([]))

  def test_bad_arguments_raise(self):
    with self.assertRaisesRegex(TypeError, 'model_aggregator'):
      _process('dp_l', model_aggregator=tff.aggregators.SumFactory())
    with self.assertRaisesRegex(ValueError, 'max_weight_share'):
      _process('dp_l', max_weight_share=1.5)


class DynamicPullingAggregatorExecutionTest(tf.test.TestCase,
                                            parameterized.TestCase):

  @parameterized.named_parameters(
      ('default', 'default', {}), ('dp_l', 'dp_l', {}),
      ('controllers', 'controllers', {}),
      ('dp_g_push_shared', 'dp_g', dict(push='shared')))
  def test_mean_factory_equals_plain_average(self, mode, kwargs):
    plain = _run(_process(mode, **kwargs), num_rounds=2)
    mean = _run(_process(mode, model_aggregator=tff.aggregators.MeanFactory(),
                         **kwargs), num_rounds=2)
    for (_, _, want), (_, _, got) in zip(plain, mean):
      self.assertAllClose(
          _trainable(dynamic_pulling.get_model_weights(got.state)),
          _trainable(dynamic_pulling.get_model_weights(want.state)),
          atol=1e-6, rtol=1e-6)
      for got_client, want_client in zip(got.client_states,
                                         want.client_states):
        self.assertAllEqual(got_client.shared, want_client.shared)
        self.assertAllClose(_trainable(got_client.weights),
                            _trainable(want_client.weights), atol=1e-6,
                            rtol=1e-6)
      self.assertEqual(got.metrics['tensors_updated'],
                       want.metrics['tensors_updated'])

  @parameterized.named_parameters(('dp_l', 'dp_l'), ('default', 'default'))
  def test_adaptive_clipping_matches_the_aggregator_alone(self, mode):
    factory = _CLIPPING
    rounds = _run(_process(mode, model_aggregator=factory), num_rounds=2)
    aggregator = factory.create(_value_type(), tff.TensorType(_F32))
    self.assertAllClose(rounds[0][0].aggregator, aggregator.initialize())
    plain = _run(_process(mode), num_rounds=1)[0][2]
    for state, _, output in rounds:
      # What each client sent: its trained tensors (its new state) where
      # its new mask is set, with weight its number of examples.
      trained = [_trainable(c.weights) for c in output.client_states]
      masks = [c.shared for c in output.client_states]
      want, want_output = delta_reference.reference_round(
          aggregator, state.aggregator,
          _trainable(dynamic_pulling.get_model_weights(state)), trained,
          _NUM_EXAMPLES, masks)
      self.assertAllClose(
          _trainable(dynamic_pulling.get_model_weights(output.state)), want,
          atol=1e-6, rtol=1e-5)
      self.assertAllClose(output.state.aggregator, want_output.state)
      self.assertAllClose(output.metrics['aggregator'],
                          want_output.measurements)
      # The aggregator's state moves every round (the norm estimate).
      self.assertNotAllClose(output.state.aggregator, state.aggregator)
    self.assertAllClose(rounds[1][0].aggregator,
                        rounds[0][2].state.aggregator)
    # The initial norm clips the first round: not the plain average.
    self.assertNotAllClose(
        _trainable(dynamic_pulling.get_model_weights(rounds[0][2].state)),
        _trainable(dynamic_pulling.get_model_weights(plain.state)))

  @parameterized.named_parameters(
      ('plain', {}), ('mean_factory',
                      dict(model_aggregator=tff.aggregators.MeanFactory())))
  def test_weight_cap_by_hand(self, kwargs):
    # Weights n = (6, 1, 1) (data sizes), cap c = 0.5. Uncapped shares are
    # (0.75, 0.125, 0.125). The capped shares s_i = min(c, λ·n_i) sum to 1:
    # with client 0 capped, 0.5 + λ·(1 + 1) = 1, so λ = 0.25; check: λ·6 =
    # 1.5 > c (capped), λ·1 = 0.25 < c (not capped). Shares (0.5, 0.25,
    # 0.25). In mode 'default' every client sends every tensor, so the new
    # global tensors are 0.5·w_0 + 0.25·w_1 + 0.25·w_2.
    process = _process('default', max_weight_share=0.5, **kwargs)
    _, _, output = _run(process, num_rounds=1, data_sizes=[6.0, 1.0, 1.0])[0]
    trained = [_trainable(c.weights) for c in output.client_states]
    want = [0.5 * a + 0.25 * b + 0.25 * c for a, b, c in zip(*trained)]
    self.assertAllClose(
        _trainable(dynamic_pulling.get_model_weights(output.state)), want,
        atol=1e-6, rtol=1e-6)
    self.assertAllClose(output.metrics['weight_cap'], collections.OrderedDict(
        max_share_before=0.75, max_share_after=0.5, num_capped=1,
        cap_infeasible=0))

  def test_weight_cap_per_tensor(self):
    # dp_l: tensor t averages over the clients that sent it with the capped
    # shares (0.5, 0.25, 0.25) (see test_weight_cap_by_hand):
    # Σ_k s_k m_kt w_k / Σ_k s_k m_kt.
    shares = (0.5, 0.25, 0.25)
    process = _process('dp_l', max_weight_share=0.5)
    state, _, output = _run(process, num_rounds=1,
                            data_sizes=[6.0, 1.0, 1.0])[0]
    old = _trainable(dynamic_pulling.get_model_weights(state))
    new = _trainable(dynamic_pulling.get_model_weights(output.state))
    for t, old_value in enumerate(old):
      senders = [(s, _trainable(c.weights)[t])
                 for s, c in zip(shares, output.client_states) if c.shared[t]]
      total = sum(s for s, _ in senders)
      want = (sum(s * w for s, w in senders) / total if senders
              else old_value)
      self.assertAllClose(new[t], want, atol=1e-6, rtol=1e-6, msg=str(t))

  def test_loose_cap_changes_nothing(self):
    # Largest share 10/21 < 0.9: no client is capped, shares n_k / 21 give
    # the plain average.
    plain = _run(_process('dp_l'), num_rounds=1)[0][2]
    capped = _run(_process('dp_l', max_weight_share=0.9), num_rounds=1)[0][2]
    self.assertAllClose(
        _trainable(dynamic_pulling.get_model_weights(capped.state)),
        _trainable(dynamic_pulling.get_model_weights(plain.state)),
        atol=1e-6, rtol=1e-6)
    self.assertEqual(capped.metrics['weight_cap']['num_capped'], 0)


if __name__ == '__main__':
  tf.test.main()
