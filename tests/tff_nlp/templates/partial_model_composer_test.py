"""Tests of the partial-model composer and the split aggregator."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import partial_models as sparse

_SLICES_TYPE = sparse.indexed_slices_type([2])
_DENSE_TYPE = tff.TensorType(np.float32, [3])


def _split(dense=None, rows=None):
  return sparse.build_split_aggregator(
      dense, {} if rows is None else {'rows': rows})


def _mean_of_rows(num_rows=4):
  return sparse.IndexedSlicesMeanFactory(num_rows).create(_SLICES_TYPE)


def _weighted_mean():
  return tff.aggregators.MeanFactory().create(_DENSE_TYPE,
                                              tff.TensorType(np.float32))


class BuildSplitAggregatorComputationTest(tf.test.TestCase):

  def test_weighted_type_signature(self):
    process = _split(_weighted_mean(), _mean_of_rows())
    self.assertTrue(process.is_weighted)
    tff.test.assert_types_equivalent(
        process.next.type_signature.parameter[1],
        tff.FederatedType(collections.OrderedDict(
            dense=_DENSE_TYPE, rows=_SLICES_TYPE), tff.CLIENTS))
    tff.test.assert_types_equivalent(
        process.next.type_signature.result.result,
        tff.FederatedType(collections.OrderedDict(
            dense=_DENSE_TYPE, rows=_SLICES_TYPE), tff.SERVER))
    tff.test.assert_types_equivalent(
        process.next.type_signature.result.state,
        tff.FederatedType(collections.OrderedDict(
            dense=collections.OrderedDict(value_sum_process=(),
                                          weight_sum_process=()),
            rows=()), tff.SERVER))

  def test_sparse_only_is_unweighted(self):
    process = _split(rows=_mean_of_rows())
    self.assertFalse(process.is_weighted)
    tff.test.assert_types_equivalent(
        process.next.type_signature.result.measurements,
        tff.FederatedType(collections.OrderedDict(
            rows=collections.OrderedDict(clients=np.int32,
                                         rows_received=np.int32,
                                         rows_touched=np.int32)),
            tff.SERVER))

  def test_rejects_bad_parts(self):
    with self.assertRaisesRegex(ValueError, 'at least one part'):
      sparse.build_split_aggregator(None, {})
    with self.assertRaisesRegex(ValueError, "not named 'dense'"):
      sparse.build_split_aggregator(None, {'dense': _mean_of_rows()})
    with self.assertRaisesRegex(TypeError, 'unweighted'):
      sparse.build_split_aggregator(None, {'rows': _weighted_mean()})


class BuildSplitAggregatorExecutionTest(tf.test.TestCase):

  def test_each_part_is_aggregated_by_its_aggregator(self):
    process = _split(_weighted_mean(), _mean_of_rows())
    values = [
        collections.OrderedDict(
            dense=np.array([1, 2, 3], np.float32),
            rows=collections.OrderedDict(
                indices=np.array([0, 3], np.int64),
                values=np.array([[2, 2], [4, 4]], np.float32))),
        collections.OrderedDict(
            dense=np.array([3, 2, 1], np.float32),
            rows=collections.OrderedDict(
                indices=np.array([3], np.int64),
                values=np.array([[2, 0]], np.float32))),
    ]
    output = process.next(process.initialize(), values, [1.0, 3.0])
    # Dense: (1 * [1, 2, 3] + 3 * [3, 2, 1]) / 4. Rows (the weights are not
    # read): row 0 = [2, 2] / 2 clients, row 3 = [6, 4] / 2.
    np.testing.assert_allclose(output.result['dense'], [2.5, 2, 1.5])
    np.testing.assert_array_equal(output.result['rows']['indices'], [0, 3])
    np.testing.assert_allclose(output.result['rows']['values'],
                               [[1, 1], [3, 2]])
    self.assertEqual(output.measurements['rows'], collections.OrderedDict(
        clients=2, rows_received=3, rows_touched=2))


def _components(aggregator):
  """A one-table partial model whose clients send one fixed row each."""
  weights_type = tff.types.to_type(tff.learning.models.ModelWeights(
      trainable=[tff.TensorType(np.float32, [4, 2])], non_trainable=[]))

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights(
        trainable=[tf.ones([4, 2])], non_trainable=[])

  @tff.tensorflow.computation(np.int64)
  def upload(row):
    return collections.OrderedDict(
        update=collections.OrderedDict(
            indices=tf.reshape(row, [1]), values=tf.fill([1, 2], 4.0)),
        update_weight=tf.constant(1.0))

  @tff.federated_computation
  def initialize():
    return tff.federated_value(0, tff.SERVER)

  @tff.federated_computation(
      initialize.type_signature.result,
      tff.FederatedType(weights_type, tff.SERVER),
      tff.FederatedType(np.int64, tff.CLIENTS))
  def next_fn(state, weights, data):
    del weights  # Unused by this toy client work.
    return tff.templates.MeasuredProcessOutput(
        state=tff.federated_map(
            tff.tensorflow.computation(lambda s: s + 1, np.int32), state),
        result=tff.federated_map(upload, data), measurements=state)

  @tff.tensorflow.computation(_SLICES_TYPE)
  def as_trainable(update):
    return [update]

  finalizer = sparse.build_delta_finalizer(weights_type, learning_rate=0.5,
                                           update_type=[_SLICES_TYPE])
  return (initial_weights, tff.templates.MeasuredProcess(initialize, next_fn),
          aggregator, finalizer, as_trainable)


class ComposePartialModelProcessComputationTest(tf.test.TestCase):

  def test_type_signature(self):
    aggregator = sparse.IndexedSlicesClippingFactory(
        tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
            initial_estimate=1.0, target_quantile=0.5, learning_rate=0.5),
        sparse.IndexedSlicesMeanFactory(4)).create(_SLICES_TYPE)
    initial, work, _, finalizer, as_trainable = _components(aggregator)
    process = sparse.compose_partial_model_process(
        initial, work, aggregator, finalizer, model_update_fn=as_trainable)
    self.assertIsInstance(process, tff.learning.templates.LearningProcess)
    state_type = tff.FederatedType(
        tff.learning.templates.LearningAlgorithmState(
            global_model_weights=initial.type_signature.result,
            distributor=(),
            client_work=np.int32,
            aggregator=aggregator.initialize.type_signature.result.member,
            finalizer=finalizer.initialize.type_signature.result.member),
        tff.SERVER)
    tff.test.assert_types_equivalent(process.initialize.type_signature,
                                     tff.FunctionType(None, state_type))
    tff.test.assert_types_equivalent(
        process.next.type_signature,
        tff.FunctionType(
            collections.OrderedDict(
                state=state_type,
                client_data=tff.FederatedType(np.int64, tff.CLIENTS)),
            tff.learning.templates.LearningProcessOutput(
                state=state_type,
                metrics=tff.FederatedType(collections.OrderedDict(
                    distributor=(), client_work=np.int32,
                    aggregator=aggregator.next.type_signature.result
                    .measurements.member,
                    finalizer=collections.OrderedDict(
                        update_non_finite=np.int32)), tff.SERVER))))

  def test_rejects_components_that_do_not_chain(self):
    initial, work, aggregator, finalizer, _ = _components(_mean_of_rows())
    # Without model_update_fn, the aggregator's IndexedSlices are not the
    # finalizer's <IndexedSlices> (one per trainable tensor).
    with self.assertRaises(TypeError):
      sparse.compose_partial_model_process(initial, work, aggregator,
                                           finalizer)


class ComposePartialModelProcessExecutionTest(tf.test.TestCase):

  def test_every_state_is_threaded_between_rounds(self):
    # A fixed clipping norm of 2: each client's row [4, 4] (norm 4 * 2**.5)
    # is scaled to norm 2, i.e. [2**.5, 2**.5].
    aggregator = sparse.IndexedSlicesClippingFactory(
        tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
            initial_estimate=2.0, target_quantile=1.0, learning_rate=1.0),
        sparse.IndexedSlicesMeanFactory(4)).create(_SLICES_TYPE)
    initial, work, _, finalizer, as_trainable = _components(aggregator)
    process = sparse.compose_partial_model_process(
        initial, work, aggregator, finalizer, model_update_fn=as_trainable)
    state = process.initialize()
    reference_state = aggregator.initialize()
    for round_num in range(2):
      output = process.next(state, [1, 3])
      reference = aggregator.next(reference_state, [
          collections.OrderedDict(indices=np.array([r], np.int64),
                                  values=np.full([1, 2], 4.0, np.float32))
          for r in (1, 3)])
      reference_state = reference.state
      # The client work's state counts the rounds; the aggregator's follows
      # the aggregator alone's from round to round.
      self.assertEqual(output.metrics['client_work'], round_num)
      tf.nest.map_structure(
          lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
          tf.nest.flatten(output.state.aggregator),
          tf.nest.flatten(reference.state))
      expected = np.asarray(process.get_model_weights(state).trainable[0])
      mean = np.zeros([4, 2], np.float32)
      mean[reference.result['indices']] = reference.result['values']
      expected = expected - 0.5 * mean  # server lr 0.5
      np.testing.assert_allclose(
          process.get_model_weights(output.state).trainable[0], expected,
          rtol=1e-6)
      state = output.state
    self.assertEqual(output.state.client_work, 2)
    # The norm estimate grew (target quantile 1: every norm was above it).
    self.assertGreater(output.metrics['aggregator']['clipping_norm'], 2.0)


if __name__ == '__main__':
  tf.test.main()
