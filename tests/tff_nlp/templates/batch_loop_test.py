"""Tests of `for_each_batch` against `Dataset.reduce` and hand-derived folds."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tensorflow_federated.proto.v0 import computation_pb2

from tests import linear_model
from tff_nlp import algorithms
from tff_nlp import templates
from tff_nlp.templates import batch_loop


def _running_stats(state, batch):
  """Sum, count and the last batch's first element, over [n]-shaped batches."""
  total, count, last = state
  return (total + tf.reduce_sum(batch), count + tf.size(batch),
          tf.cast(batch[0], tf.float32))


def _compiled_ops(computation):
  """Op types in the TF graphs (and their functions) TFF's worker receives."""
  proto = tff.framework.ConcreteComputation.get_proto(
      tff.backends.native.desugar_and_transform_to_native(computation))
  ops = set()

  def visit(message):
    if isinstance(message, computation_pb2.TensorFlow):
      graph = tf.compat.v1.GraphDef()
      message.graph_def.Unpack(graph)
      ops.update(n.op for n in graph.node)
      for function in graph.library.function:
        ops.update(n.op for n in function.node_def)
      return
    for field, value in message.ListFields():
      if field.type == field.TYPE_MESSAGE:
        for item in (value if field.label == field.LABEL_REPEATED
                     else [value]):
          visit(item)

  visit(proto)
  return ops


class ForEachBatchExecutionTest(tf.test.TestCase,
                                 parameterized.TestCase):

  @parameterized.parameters(
      # 0+1+...+6 = 21 over 7 elements; batches [0..2], [3..5], [6].
      (range(7), 3, (21, 7, 6.0)),
      # One batch.
      ([5, -2], 4, (3, 2, 5.0)),
      # No batch: the initial state unchanged.
      ([], 2, (0, 0, -1.0)),
  )
  def test_fold_matches_hand_derived_and_reduce(self, values, batch_size,
                                                expected):
    dataset = tf.data.Dataset.from_tensor_slices(
        tf.constant(list(values), tf.int32)).batch(batch_size)
    initial = (tf.constant(0), tf.constant(0), tf.constant(-1.0))

    @tf.function
    def fold(loop):
      if loop == 'while':
        return batch_loop.for_each_batch(dataset, initial, _running_stats)
      return dataset.reduce(initial, _running_stats)

    got = [x.numpy() for x in fold('while')]
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(got, [x.numpy() for x in fold('reduce')])

  def test_steps_run_in_order_with_variable_updates(self):
    # w <- 2w + x for x = 1, 2, 3 from w = 0: 1, 4, 11 (order matters: any
    # other order gives a different value).
    w = tf.Variable(0.0)

    @tf.function
    def train(dataset):
      w.assign(0.0)

      def step(num_steps, x):
        w.assign(2.0 * w + x)
        return num_steps + 1

      return batch_loop.for_each_batch(dataset, tf.constant(0), step)

    dataset = tf.data.Dataset.from_tensor_slices([1.0, 2.0, 3.0])
    self.assertEqual(train(dataset).numpy(), 3)
    self.assertEqual(w.numpy(), 11.0)
    # Repeated epochs continue the same sequence: 2·11+1=23, 48, 99.
    self.assertEqual(train(dataset.repeat(2)).numpy(), 6)
    self.assertEqual(w.numpy(), 99.0)

  def test_nested_state_in_a_tff_computation(self):
    element = tff.TensorType(np.float32, [None])

    @tff.tensorflow.computation(tff.SequenceType(element))
    def mean_and_max(dataset):
      state = collections.OrderedDict(
          total=tf.constant(0.0), count=tf.constant(0.0),
          largest=tf.constant(-np.inf))

      def fold(s, batch):
        return collections.OrderedDict(
            total=s['total'] + tf.reduce_sum(batch),
            count=s['count'] + tf.cast(tf.size(batch), tf.float32),
            largest=tf.maximum(s['largest'], tf.reduce_max(batch)))

      s = batch_loop.for_each_batch(dataset, state, fold)
      return s['total'] / s['count'], s['largest']

    # Batches [1, 2], [6]: mean 3, max 6.
    mean, largest = mean_and_max([np.array([1.0, 2.0], np.float32),
                                  np.array([6.0], np.float32)])
    self.assertAllClose(mean, 3.0)
    self.assertAllClose(largest, 6.0)

  def test_exported_from_algorithms(self):
    self.assertIs(templates.for_each_batch, batch_loop.for_each_batch)


class ForEachBatchComputationTest(tf.test.TestCase):

  def test_client_training_compiles_to_a_while_loop_not_reduce_dataset(self):
    # The reason for for_each_batch (see its module docstring): TFF's worker
    # would instantiate a ReduceDataset op's training function on every call.
    process = algorithms.build_fl_process(
        linear_model.model_fn, algorithm='fedavg', weighting='lorar',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
    ops = _compiled_ops(process.next)
    self.assertNotIn('ReduceDataset', ops)
    # TFF's Grappler pass lowers the tf.while_loop into the graph's own control
    # flow (LoopCond, Enter, Exit, ...), which the worker builds once.
    self.assertContainsSubset({'LoopCond', 'Enter', 'Exit', 'NextIteration'},
                              ops)
    self.assertIn('AnonymousIteratorV3', ops)


if __name__ == '__main__':
  tf.test.main()
