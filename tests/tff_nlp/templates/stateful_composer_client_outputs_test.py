"""Per-client outputs of `compose_stateful_clients_process`.

A toy process with stateful clients: the model is one float32[2] tensor,
a client's data float32 numbers, its state the running sum of its data;
its upload is the global model minus its round's sum, averaged by the
aggregator and applied by TFF's SGD finalizer (learning rate 0.5).
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import test_helpers
from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.templates import stateful_clients
from tff_nlp.templates import stateful_composer

_WEIGHTS_TYPE = tff.types.to_type(tff.learning.models.ModelWeights(
    trainable=[tff.TensorType(np.float32, [2])], non_trainable=[]))
_DATA_TYPE = tff.SequenceType(np.float32)
_OUTPUTS_TYPE = collections.OrderedDict(data_sum=np.float32,
                                        previous_state=np.float32)
_CLIENT_DATA = ([1.0, 2.0], [3.0], [])


@tff.tensorflow.computation
def _initial_weights():
  return tff.learning.models.ModelWeights(
      trainable=[tf.constant([1.0, 2.0])], non_trainable=[])


@tff.tensorflow.computation(np.float32, _WEIGHTS_TYPE, _DATA_TYPE, np.float32)
def _client_update(scale, weights, data, client_state):
  data_sum = data.reduce(tf.constant(0.0), lambda total, x: total + x)
  return collections.OrderedDict(
      result=collections.OrderedDict(
          client_states=client_state + data_sum,
          update=[scale * (weights.trainable[0] - data_sum)]),
      outputs=collections.OrderedDict(data_sum=data_sum,
                                      previous_state=client_state))


def _client_work(client_outputs: bool) -> tff.templates.MeasuredProcess:
  """The toy client work; its state is a scale of the update (0.5)."""

  @tff.federated_computation
  def initialize():
    return tff.federated_value(np.float32(0.5), tff.SERVER)

  @tff.federated_computation(
      initialize.type_signature.result,
      tff.FederatedType(_WEIGHTS_TYPE, tff.CLIENTS),
      tff.FederatedType(_DATA_TYPE, tff.CLIENTS),
      tff.FederatedType(np.float32, tff.CLIENTS))
  def next_fn(state, weights, data, client_states):
    updates = tff.federated_map(_client_update, (
        tff.federated_broadcast(state), weights, data, client_states))
    measurements = tff.federated_zip(collections.OrderedDict(
        data_total=tff.federated_sum(updates.outputs.data_sum)))
    if not client_outputs:
      return tff.templates.MeasuredProcessOutput(state, updates.result,
                                                 measurements)
    return client_work_lib.ClientWorkOutput(state, updates.result,
                                            measurements, updates.outputs)

  if client_outputs:
    return client_work_lib.MeasuredProcessWithClientOutputs(initialize,
                                                            next_fn)
  return tff.templates.MeasuredProcess(initialize, next_fn)


def _aggregator() -> tff.templates.MeasuredProcess:
  """The mean of the updates; its state counts the rounds."""

  @tff.federated_computation
  def initialize():
    return tff.federated_value(0, tff.SERVER)

  @tff.federated_computation(
      initialize.type_signature.result,
      tff.FederatedType(_WEIGHTS_TYPE, tff.SERVER),
      tff.FederatedType(_WEIGHTS_TYPE, tff.CLIENTS),
      tff.FederatedType(_WEIGHTS_TYPE.trainable, tff.CLIENTS))
  def next_fn(state, global_weights, distributed, updates):
    del global_weights, distributed  # Unused by this toy aggregator.
    return tff.templates.MeasuredProcessOutput(
        state=tff.federated_map(
            tff.tensorflow.computation(lambda n: n + 1, np.int32), state),
        result=tff.federated_mean(updates),
        measurements=tff.federated_zip(
            collections.OrderedDict(aggregations=state)))

  return tff.templates.MeasuredProcess(initialize, next_fn)


def _compose(client_outputs: bool):
  return stateful_composer.compose_stateful_clients_process(
      _initial_weights,
      tff.learning.templates.build_broadcast_process(_WEIGHTS_TYPE),
      _client_work(client_outputs),
      _aggregator(),
      tff.learning.templates.build_apply_optimizer_finalizer(
          tff.learning.optimizers.build_sgdm(learning_rate=0.5),
          _WEIGHTS_TYPE),
      initial_client_state_fn=lambda weights: np.float32(0.0))


def _datasets():
  return [tf.data.Dataset.from_tensor_slices(np.array(d, np.float32))
          for d in _CLIENT_DATA]




class StatefulComposerClientOutputsComputationTest(tf.test.TestCase):

  def test_next_type_signature(self):
    process = _compose(client_outputs=True)
    finalizer_state = tff.learning.templates.build_apply_optimizer_finalizer(
        tff.learning.optimizers.build_sgdm(learning_rate=0.5),
        _WEIGHTS_TYPE).initialize.type_signature.result.member
    state_type = tff.FederatedType(stateful_composer.StatefulClientsState(
        global_model_weights=_WEIGHTS_TYPE, distributor=(),
        client_work=np.float32, aggregator=np.int32,
        finalizer=finalizer_state, round_num=np.int32), tff.SERVER)
    client_states_type = tff.FederatedType(np.float32, tff.CLIENTS)
    expected = tff.FunctionType(
        collections.OrderedDict(
            state=state_type,
            client_data=tff.FederatedType(_DATA_TYPE, tff.CLIENTS),
            client_states=client_states_type),
        stateful_clients.RoundOutputWithClientOutputs(
            state=state_type,
            client_states=client_states_type,
            metrics=tff.FederatedType(collections.OrderedDict(
                data_total=np.float32, aggregations=np.int32,
                update_non_finite=np.int32), tff.SERVER),
            client_outputs=tff.FederatedType(_OUTPUTS_TYPE, tff.CLIENTS)))
    tff.test.assert_types_equivalent(process.next.type_signature, expected)
    self.assertIs(process.next.type_signature.result.python_container,
                  stateful_clients.RoundOutputWithClientOutputs)
    tff.test.assert_types_equivalent(
        process.initialize.type_signature, tff.FunctionType(None, state_type))

  def test_without_client_outputs_next_is_unchanged(self):
    with_outputs = _compose(client_outputs=True).next.type_signature
    plain = _compose(client_outputs=False).next.type_signature
    self.assertIs(plain.result.python_container,
                  stateful_clients.RoundOutput)
    tff.test.assert_types_equivalent(plain.parameter, with_outputs.parameter)
    tff.test.assert_types_equivalent(
        plain.result,
        tff.StructType([(name, with_outputs.result[name])
                        for name in stateful_clients.RoundOutput._fields]))

  def test_client_work_must_place_client_outputs_at_clients(self):

    @tff.federated_computation
    def initialize():
      return tff.federated_value(0, tff.SERVER)

    @tff.federated_computation(initialize.type_signature.result,
                               tff.FederatedType(np.int32, tff.CLIENTS))
    def next_fn(state, data):
      return client_work_lib.ClientWorkOutput(
          state, data, state, tff.federated_sum(data))

    with self.assertRaisesRegex(TypeError, 'client_outputs must be placed'):
      client_work_lib.MeasuredProcessWithClientOutputs(initialize, next_fn)


class StatefulComposerClientOutputsExecutionTest(tf.test.TestCase):

  def test_client_outputs_are_the_client_works_and_the_round_unchanged(self):
    process = _compose(client_outputs=True)
    plain = _compose(client_outputs=False)
    work = _client_work(client_outputs=True)
    state = process.initialize()
    plain_state = plain.initialize()
    client_states = process.initial_client_states(state, len(_CLIENT_DATA))
    plain_client_states = list(client_states)
    for _ in range(2):
      direct = work.next(state.client_work,
                         [process.get_model_weights(state)] * 3, _datasets(),
                         client_states)
      output = process.next(state, _datasets(), client_states)
      plain_output = plain.next(plain_state, _datasets(),
                                plain_client_states)
      self.assertIsInstance(output,
                            stateful_clients.RoundOutputWithClientOutputs)
      self.assertIsInstance(plain_output, stateful_clients.RoundOutput)
      test_helpers.assert_nested_allclose(list(output.client_outputs),
                              list(direct.client_outputs))
      test_helpers.assert_nested_allclose(list(output.client_states),
                              [r['client_states'] for r in direct.result])
      test_helpers.assert_nested_allclose(output.state, plain_output.state)
      test_helpers.assert_nested_allclose(output.metrics, plain_output.metrics)
      test_helpers.assert_nested_allclose(list(output.client_states),
                              list(plain_output.client_states))
      state, client_states = output.state, list(output.client_states)
      plain_state = plain_output.state
      plain_client_states = list(plain_output.client_states)
    # Round 2: each client's outputs are its data's sum and its state, the
    # sum of its round-1 data.
    self.assertEqual(
        [tuple(o.values()) for o in output.client_outputs],
        [(3.0, 3.0), (3.0, 3.0), (0.0, 0.0)])
    # Round 1: w - 0.5 * mean(0.5 * (w - s)) with s = 3, 3, 0, from [1, 2].
    # Round 2 likewise from there.
    w = np.array([1.0, 2.0])
    for _ in range(2):
      w = w - 0.5 * np.mean([0.5 * (w - s) for s in (3.0, 3.0, 0.0)], axis=0)
    np.testing.assert_allclose(
        process.get_model_weights(state).trainable[0], w, rtol=1e-6)

  def test_simulation_process_returns_the_client_outputs(self):
    simulation = stateful_clients.SimulationProcess(
        _compose(client_outputs=True), len(_CLIENT_DATA))
    plain = stateful_clients.SimulationProcess(
        _compose(client_outputs=False), len(_CLIENT_DATA))
    output = simulation.next(simulation.initialize(), _datasets())
    plain_output = plain.next(plain.initialize(), _datasets())
    self.assertIsInstance(plain_output,
                          tff.learning.templates.LearningProcessOutput)
    self.assertEqual([o['data_sum'] for o in output.client_outputs],
                     [3.0, 3.0, 0.0])
    test_helpers.assert_nested_allclose(output.state, plain_output.state)
    test_helpers.assert_nested_allclose(output.metrics, plain_output.metrics)


if __name__ == '__main__':
  tf.test.main()
