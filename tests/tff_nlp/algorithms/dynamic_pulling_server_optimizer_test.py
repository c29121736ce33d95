"""Dynamic pulling with a server optimizer (SGD; with momentum, FedAvgM).

The model and clients are those of dynamic_pulling_test.py (a linear chain
of 8 tensors in two groups; `linear_model.three_clients()`). The reference
is the process without a server optimizer, itself checked against numpy
there: from the same server weights and client states it gives the round's
average avg, and the server's step is then computed in numpy from the
pseudo-gradient g = w - avg (TFF's SGD with momentum: a <- m·a + g,
w <- w - lr·a).
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp.algorithms import dynamic_pulling

_process = process_fixtures.build_dynamic_pulling
_data = process_fixtures.dp_client_data
_trainable = process_fixtures.trainable_arrays


def _sgdm(learning_rate, momentum=None):
  return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                            momentum=momentum)


# The momentum tests' optimizer, one object: `_process` caches a built
# process by its arguments, the optimizer by identity (its state is
# explicit, in the process's), so the type test and the numbers test of
# dp_l build one process.
_LEARNING_RATE, _MOMENTUM = 1.5, 0.9
_SGDM = _sgdm(_LEARNING_RATE, _MOMENTUM)


class ServerOptimizerComputationTest(tf.test.TestCase):

  def test_state_and_metrics_carry_the_optimizer(self):
    process = _process('dp_l', server_optimizer_fn=_SGDM)
    state_type = process.initialize.type_signature.result.member
    self.assertEqual(tff.structure.name_list(state_type),
                     ['global_model_weights', 'distributor', 'client_work',
                      'aggregator', 'finalizer', 'round_num'])
    # Without a model aggregator its field is the empty struct.
    tff.test.assert_types_equivalent(state_type.aggregator,
                                     tff.StructType([]))
    # The finalizer's state is the optimizer's: lr, momentum and one
    # accumulator per trainable tensor.
    accumulator = state_type.finalizer['accumulator']
    self.assertEqual(
        [t.shape for t in accumulator],
        [tuple(w.shape) for w in process_fixtures.DP_INITIAL])
    next_type = process.next.type_signature
    tff.test.assert_types_equivalent(next_type.parameter['state'].member,
                                     state_type)
    tff.test.assert_types_equivalent(
        next_type.result.metrics.member['finalizer'],
        tff.to_type([('update_non_finite', np.int32)]))

  def test_with_a_model_aggregator_both_states_are_carried(self):
    process = _process('default', server_optimizer_fn=_sgdm(1.0, 0.5),
                       model_aggregator=tff.aggregators.MeanFactory())
    state_type = process.initialize.type_signature.result.member
    self.assertNotEqual(state_type.aggregator, tff.StructType([]))
    self.assertIn('finalizer', tff.structure.name_list(state_type))

  def test_not_an_optimizer_raises(self):
    with self.assertRaisesRegex(TypeError, 'server_optimizer_fn'):
      _process('default', server_optimizer_fn=tf.keras.optimizers.SGD())


class ServerOptimizerExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('default', 'default'), ('dp_l', 'dp_l'),
                                  ('dp_g_push_shared', 'dp_g'))
  def test_sgd_at_one_is_the_plain_average(self, mode):
    plain, stepped = _process(mode), _process(
        mode, server_optimizer_fn=_sgdm(1.0))
    clients = linear_model.three_clients()
    states = [p.initialize() for p in (plain, stepped)]
    client_states = [[dynamic_pulling.initial_client_state(plain)] * 3] * 2
    for round_num in range(3):
      outputs = [p.next(s, _data(clients, round_num), c)
                 for p, s, c in zip((plain, stepped), states, client_states)]
      self.assertAllClose(
          _trainable(dynamic_pulling.get_model_weights(outputs[1].state)),
          _trainable(dynamic_pulling.get_model_weights(outputs[0].state)),
          atol=1e-6, rtol=1e-6)
      self.assertEqual(outputs[1].metrics['finalizer']['update_non_finite'],
                       0)
      states = [o.state for o in outputs]
      client_states = [o.client_states for o in outputs]

  @parameterized.named_parameters(('default', 'default'), ('dp_l', 'dp_l'),
                                  ('random', 'random'))
  def test_momentum_matches_numpy_from_the_plain_average(self, mode):
    learning_rate, momentum = _LEARNING_RATE, _MOMENTUM
    plain = _process(mode)
    process = _process(mode, server_optimizer_fn=_SGDM)
    clients = linear_model.three_clients()
    state = process.initialize()
    client_states = [dynamic_pulling.initial_client_state(process, state)] * 3
    accumulator = [np.zeros_like(w) for w in process_fixtures.DP_INITIAL]
    unsent_seen = False
    for round_num in range(3):
      weights = dynamic_pulling.get_model_weights(state)
      data = _data(clients, round_num)
      want = plain.next(plain.set_model_weights(plain.initialize(), weights),
                        data, client_states)
      averaged = _trainable(dynamic_pulling.get_model_weights(want.state))
      sent = np.any([c.shared for c in want.client_states], axis=0)
      unsent_seen |= not sent.all()
      expected = []
      for t, (w, a) in enumerate(zip(_trainable(weights), averaged)):
        g = (w - a) if sent[t] else np.zeros_like(w)
        accumulator[t] = momentum * accumulator[t] + g
        expected.append(w - learning_rate * accumulator[t] if sent[t] else w)
      output = process.next(state, data, client_states)
      self.assertAllClose(
          _trainable(dynamic_pulling.get_model_weights(output.state)),
          expected, atol=1e-5, rtol=1e-5)
      self.assertAllClose(list(output.state.finalizer['accumulator']),
                          accumulator, atol=1e-5, rtol=1e-5)
      # The clients' side is the plain process's.
      for got, reference in zip(output.client_states, want.client_states):
        self.assertAllEqual(got.shared, reference.shared)
        self.assertAllClose(_trainable(got.weights),
                            _trainable(reference.weights), atol=1e-6)
      state, client_states = output.state, output.client_states
    if mode != 'default':
      # The rule above for a tensor no client sent was exercised.
      self.assertTrue(unsent_seen)


if __name__ == '__main__':
  tf.test.main()
