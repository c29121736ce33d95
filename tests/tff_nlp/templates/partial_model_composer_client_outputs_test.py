"""Per-client outputs of `compose_partial_model_process`.

The parts: `build_weighted_client_work` on the tiny linear model (Lorar
weighting), taking the global weights @SERVER as the partial-model
composer's client work does (here it broadcasts them whole), TFF's weighted
mean and an SGD finalizer.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import test_helpers
from tff_nlp.aggregators import weighting as weighting_lib
from tff_nlp.algorithms import fl_process
from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.templates import extended_outputs
from tff_nlp.templates import partial_model_composer


def _weighted_work(client_outputs: bool):
  return client_work_lib.build_weighted_client_work(
      linear_model.model_fn,
      optimizer=tff.learning.optimizers.build_sgdm(learning_rate=0.05),
      weighting=weighting_lib.Weighting.LORAR,
      client_outputs=client_outputs)


def _client_work(inner) -> tff.templates.MeasuredProcess:
  """`inner` taking the weights @SERVER (and broadcasting them)."""

  @tff.federated_computation(
      inner.initialize.type_signature.result,
      tff.FederatedType(linear_model.weights_type(), tff.SERVER),
      inner.next.type_signature.parameter[2])
  def next_fn(state, weights, data):
    work = inner.next(state, tff.federated_broadcast(weights), data)
    if not inner.client_outputs:
      return tff.templates.MeasuredProcessOutput(work.state, work.result,
                                                 work.measurements)
    return client_work_lib.ClientWorkOutput(
        work.state, work.result, work.measurements, work.client_outputs)

  if inner.client_outputs:
    return client_work_lib.MeasuredProcessWithClientOutputs(
        inner.initialize, next_fn)
  return tff.templates.MeasuredProcess(inner.initialize, next_fn)


@tff.tensorflow.computation
def _initial_weights():
  return tff.learning.models.ModelWeights.from_model(linear_model.model_fn())


def _aggregator():
  return tff.aggregators.MeanFactory().create(
      linear_model.weights_type().trainable, tff.TensorType(np.float32))


def _finalizer():
  return tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(learning_rate=1.0),
      linear_model.weights_type())


def _compose(client_outputs: bool):
  return partial_model_composer.compose_partial_model_process(
      _initial_weights, _client_work(_weighted_work(client_outputs)),
      _aggregator(), _finalizer())


def _datasets():
  return [linear_model.to_dataset(c) for c in linear_model.three_clients()]




class PartialModelComposerClientOutputsComputationTest(tf.test.TestCase):

  def test_next_type_signature(self):
    process = _compose(client_outputs=True)
    self.assertIsInstance(process, extended_outputs.FLProcess)
    self.assertIs(fl_process.FLProcess, extended_outputs.FLProcess)
    inner = _weighted_work(client_outputs=False)
    state_type = tff.FederatedType(
        tff.learning.templates.LearningAlgorithmState(
            global_model_weights=linear_model.weights_type(),
            distributor=(),
            client_work=inner.initialize.type_signature.result.member,
            aggregator=_aggregator().initialize.type_signature.result.member,
            finalizer=_finalizer().initialize.type_signature.result.member),
        tff.SERVER)
    client_outputs_type = collections.OrderedDict(
        [(key, np.float32) for key in client_work_lib.CLIENT_STAT_KEYS]
        + [('weight', np.float32),
           ('batch_losses', tff.TensorType(np.float32, [None]))])
    expected = tff.FunctionType(
        collections.OrderedDict(
            state=state_type,
            client_data=tff.FederatedType(
                tff.SequenceType(
                    tff.types.tensorflow_to_type(linear_model.INPUT_SPEC)),
                tff.CLIENTS)),
        extended_outputs.FLProcessOutput(
            state=state_type,
            metrics=tff.FederatedType(collections.OrderedDict(
                distributor=(),
                client_work=inner.next.type_signature.result.measurements
                .member,
                aggregator=_aggregator().next.type_signature.result
                .measurements.member,
                finalizer=collections.OrderedDict(
                    update_non_finite=np.int32)), tff.SERVER),
            client_outputs=tff.FederatedType(client_outputs_type,
                                             tff.CLIENTS)))
    tff.test.assert_types_equivalent(process.next.type_signature, expected)
    self.assertIs(process.next.type_signature.result.python_container,
                  extended_outputs.FLProcessOutput)

  def test_without_client_outputs_next_is_unchanged(self):
    plain = _compose(client_outputs=False)
    self.assertNotIsInstance(plain, extended_outputs.FLProcess)
    self.assertIs(plain.next.type_signature.result.python_container,
                  tff.learning.templates.LearningProcessOutput)
    with_outputs = _compose(client_outputs=True).next.type_signature
    tff.test.assert_types_equivalent(plain.next.type_signature.parameter,
                                     with_outputs.parameter)
    tff.test.assert_types_equivalent(
        plain.next.type_signature.result,
        tff.StructType([(name, with_outputs.result[name])
                        for name in ('state', 'metrics')]))


class PartialModelComposerClientOutputsExecutionTest(tf.test.TestCase):

  def test_client_outputs_are_the_client_works_and_the_round_unchanged(self):
    process = _compose(client_outputs=True)
    plain = _compose(client_outputs=False)
    inner = _weighted_work(client_outputs=True)
    state = process.initialize()
    plain_state = plain.initialize()
    for _ in range(2):
      weights = process.get_model_weights(state)
      direct = inner.next(state.client_work, [weights] * 3, _datasets())
      output = process.next(state, _datasets())
      plain_output = plain.next(plain_state, _datasets())
      self.assertIsInstance(output, extended_outputs.FLProcessOutput)
      self.assertIsInstance(plain_output,
                            tff.learning.templates.LearningProcessOutput)
      self.assertLen(output.client_outputs, 3)
      test_helpers.assert_nested_allclose(list(output.client_outputs),
                              list(direct.client_outputs))
      test_helpers.assert_nested_allclose(output.state, plain_output.state)
      test_helpers.assert_nested_allclose(output.metrics, plain_output.metrics)
      state, plain_state = output.state, plain_output.state
    # The batches of 3+3+1, 2+2 and 4+4+2 examples.
    self.assertEqual([len(o['batch_losses']) for o in output.client_outputs],
                     [3, 2, 3])
    self.assertEqual([o['num_examples'] for o in output.client_outputs],
                     [7.0, 4.0, 10.0])

  def test_model_weights_and_hparams(self):
    process = _compose(client_outputs=True)
    state = process.initialize()
    self.assertEqual(process.get_hparams(state), collections.OrderedDict())
    weights = process.get_model_weights(state)
    test_helpers.assert_nested_allclose(
        weights.trainable,
        [linear_model.INITIAL_KERNEL, linear_model.INITIAL_BIAS])
    test_helpers.assert_nested_allclose(
        process.get_model_weights(process.set_model_weights(state, weights)),
        weights)


if __name__ == '__main__':
  tf.test.main()
