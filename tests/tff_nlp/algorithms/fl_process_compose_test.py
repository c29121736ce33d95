"""`fl_process.compose_learning_process` refuses parts that do not fit.

With client work that returns per-client outputs the library composes the
process itself; the parts are checked by TFF's public composer, on the same
parts without the outputs, so both paths refuse what TFF refuses, with
TFF's errors. The model is `linear_model`'s (kernel float32[3, 1], bias
float32[1]).
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tff_nlp.aggregators import weighting as weighting_lib
from tff_nlp.algorithms import fl_process
from tff_nlp.templates import client_work as client_work_lib


def _client_work(client_outputs: bool):
  return client_work_lib.build_weighted_client_work(
      linear_model.model_fn,
      optimizer=tff.learning.optimizers.build_sgdm(0.1),
      weighting=weighting_lib.Weighting.NUM_EXAMPLES,
      client_outputs=client_outputs)


@tff.tensorflow.computation
def _initial_weights():
  return tff.learning.models.ModelWeights(
      trainable=[tf.constant(linear_model.INITIAL_KERNEL),
                 tf.constant(linear_model.INITIAL_BIAS)],
      non_trainable=[])


def _parts(client_outputs: bool, finalizer_weights_type=None):
  weights_type = linear_model.weights_type()
  return (
      _initial_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      _client_work(client_outputs),
      tff.aggregators.MeanFactory().create(
          weights_type.trainable, tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(
          tff.learning.optimizers.build_sgdm(1.0),
          finalizer_weights_type or weights_type),
  )


class ComposeLearningProcessComputationTest(parameterized.TestCase):

  @parameterized.parameters(False, True)
  def test_a_finalizer_of_other_weights_is_refused(self, client_outputs):
    # The finalizer's weights lack the bias: not the global model's type.
    other = tff.to_type(tff.learning.models.ModelWeights(
        trainable=[tff.TensorType(np.float32, [linear_model.NUM_FEATURES,
                                               1])],
        non_trainable=[]))
    with self.assertRaises(TypeError):
      fl_process.compose_learning_process(
          *_parts(client_outputs, finalizer_weights_type=other))

  def test_with_client_outputs_the_process_has_them_and_tffs_state(self):
    plain = fl_process.compose_learning_process(*_parts(False))
    with_outputs = fl_process.compose_learning_process(*_parts(True))
    self.assertIsInstance(with_outputs, fl_process.FLProcess)
    self.assertNotIsInstance(plain, fl_process.FLProcess)
    tff.test.assert_types_equivalent(
        with_outputs.initialize.type_signature,
        plain.initialize.type_signature)
    result = with_outputs.next.type_signature.result
    self.assertEqual(result.client_outputs.placement, tff.CLIENTS)
    tff.test.assert_types_equivalent(
        result.metrics, plain.next.type_signature.result.metrics)


if __name__ == '__main__':
  tf.test.main()
