"""Sparse aggregation of IndexedSlices: O(rows uploaded) at the server.

Steps 5 and 6 of a round (see `tff_nlp.algorithms.partial_models`): each client uploads the
changes of the rows it trained as IndexedSlices, `<indices=int64[?],
values=float32[?,...]>` (global row ids and row deltas), and the server sums
them with `tff.federated_aggregate`, keeping only the distinct rows received (summed
with `tf.math.unsorted_segment_sum` over `tf.unique` ids): upload size,
server work and server memory are all bounded by the rows the clients
uploaded, whatever the table's size V (see `docs/results/federated_select.md`).
The result is IndexedSlices with distinct ids; `to_dense` makes it a
[V, ...] tensor where a consumer needs one.

Two `tff.aggregators.UnweightedAggregationFactory`s:

*   `IndexedSlicesSumFactory`: the sum.
*   `IndexedSlicesMeanFactory`: the mean, with a choice of divisor
    (`Divisor`): the number of clients that uploaded rows (as TFF's
    tutorial) or, per row, the number of clients that uploaded that row.

A client that uploads no rows (no data, or an update it rejected as
non-finite) counts in neither divisor: it has weight 0, as in FedAvg.
"""

import collections
import enum

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

INDICES = 'indices'
VALUES = 'values'


class Divisor(enum.Enum):
  """What a summed row delta is divided by.

  CLIENTS: the number of clients in the round that uploaded rows. A row
    trained by one client of ten moves a tenth of that client's update
    (TFF's tutorial).
  TOUCHING_CLIENTS: per row, the number of clients that uploaded the row. A
    rare row moves as much as a common one; rows nobody uploaded stay.
  """

  CLIENTS = 'clients'
  TOUCHING_CLIENTS = 'touching_clients'


def indexed_slices_type(row_shape, dtype=np.float32) -> tff.StructType:
  """`<indices=int64[?],values=dtype[?,*row_shape]>`, one upload's type."""
  return tff.StructType([
      (INDICES, tff.TensorType(np.int64, [None])),
      (VALUES, tff.TensorType(dtype, [None] + list(row_shape))),
  ])


def is_indexed_slices_type(value_type: tff.Type) -> bool:
  """Whether `value_type` is `<indices=...,values=...>` (IndexedSlices)."""
  return isinstance(value_type, tff.StructType) and [
      name for name, _ in tff.structure.iter_elements(value_type)] == [
          INDICES, VALUES]


def _row_shape(value_type: tff.Type) -> tuple[list[int], np.dtype]:
  """Checks `value_type` is IndexedSlices; returns the row shape and dtype."""
  expected = ('<indices=int64[?],values=float[?,...]> (IndexedSlices: global '
              'row ids and their rows)')
  if not is_indexed_slices_type(value_type):
    raise TypeError(f'Expected a value of type {expected}, got {value_type}.')
  indices, values = value_type.indices, value_type.values
  if (not isinstance(indices, tff.TensorType) or indices.dtype != np.int64
      or len(indices.shape) != 1 or not isinstance(values, tff.TensorType)
      or not np.issubdtype(values.dtype, np.floating) or not values.shape
      or not tff.types.is_shape_fully_defined(values.shape[1:])):
    raise TypeError(f'Expected a value of type {expected}, got {value_type}.')
  return list(values.shape[1:]), values.dtype


def _merge_rows(indices, values, row_clients, more_indices, more_values,
                more_row_clients):
  """One row per distinct id: `(indices, values, row_clients)` of two sets.

  The inputs' rows are summed by id (`tf.math.unsorted_segment_sum` over
  `tf.unique` positions, ids in order of first occurrence), so the result
  has as many rows as distinct ids, whatever V is.
  """
  unique, positions = tf.unique(tf.concat([indices, more_indices], 0))
  count = tf.size(unique)
  return (unique,
          tf.math.unsorted_segment_sum(tf.concat([values, more_values], 0),
                                       positions, count),
          tf.math.unsorted_segment_sum(
              tf.concat([row_clients, more_row_clients], 0), positions,
              count))


def _build_aggregate(value_type: tff.StructType,
                     num_rows: int) -> tff.Computation:
  """`{IndexedSlices}@CLIENTS -> <indices, values, row_clients, clients,
  rows>@SERVER`: the uploads summed row by row, one row per distinct id.

  The accumulator holds only the rows uploaded so far (O(rows uploaded), not
  O(V)): `indices` int64[?] (distinct ids), `values` their summed rows,
  `row_clients` float32[?] how many clients uploaded each of them.
  """
  row_shape, dtype = _row_shape(value_type)

  @tff.tensorflow.computation
  def zeros():
    # Shapes [?]: the accumulator grows with the rows uploaded, and TFF
    # types it from this zero, so its row count must be unknown here.
    def empty(shape, dtype):
      return tf.compat.v1.placeholder_with_default(
          tf.zeros([0] + shape, dtype), [None] + shape)
    return collections.OrderedDict(
        indices=empty([], tf.int64), values=empty(row_shape, dtype),
        row_clients=empty([], tf.float32),
        clients=tf.constant(0, tf.int32), rows=tf.constant(0, tf.int32))

  accumulator_type = zeros.type_signature.result

  @tff.tensorflow.computation(accumulator_type, value_type)
  def accumulate(accumulator, value):
    indices = value[INDICES]
    # An out-of-range id names no row of the model: fail the round rather
    # than apply it to nothing (or, densified, to a wrong place).
    check = tf.debugging.assert_less(
        indices, tf.constant(num_rows, tf.int64),
        message=f'IndexedSlices row id out of range [0, {num_rows})')
    with tf.control_dependencies([check, tf.debugging.assert_non_negative(
        indices, message='IndexedSlices row id < 0')]):
      indices = tf.identity(indices)
    # The client's own rows first (its duplicate ids add, and count it once
    # for the row), then merged into the accumulator.
    own, positions = tf.unique(indices)
    own_values = tf.math.unsorted_segment_sum(value[VALUES], positions,
                                              tf.size(own))
    merged = _merge_rows(accumulator['indices'], accumulator['values'],
                         accumulator['row_clients'], own, own_values,
                         tf.ones(tf.shape(own), tf.float32))
    return collections.OrderedDict(
        indices=merged[0], values=merged[1], row_clients=merged[2],
        # Only clients that sent rows count: an empty or rejected upload
        # (no data, or a non-finite update) has weight 0, as in FedAvg.
        clients=accumulator['clients'] + tf.cast(tf.size(indices) > 0,
                                                 tf.int32),
        rows=accumulator['rows'] + tf.shape(indices)[0])

  @tff.tensorflow.computation(accumulator_type, accumulator_type)
  def merge(a, b):
    merged = _merge_rows(a['indices'], a['values'], a['row_clients'],
                         b['indices'], b['values'], b['row_clients'])
    return collections.OrderedDict(
        indices=merged[0], values=merged[1], row_clients=merged[2],
        clients=a['clients'] + b['clients'], rows=a['rows'] + b['rows'])

  @tff.tensorflow.computation(accumulator_type)
  def report(accumulator):
    return accumulator

  @tff.federated_computation(tff.FederatedType(value_type, tff.CLIENTS))
  def aggregate(value):
    return tff.federated_aggregate(value, zeros(), accumulate, merge, report)

  return aggregate


def to_dense(slices, num_rows: int) -> tf.Tensor:
  """IndexedSlices with distinct ids (an aggregator's result) as a dense
  `[num_rows, *R]` tensor, zero where no id is; for TF code."""
  values = slices[VALUES]
  indices = slices[INDICES]
  return tf.scatter_nd(
      tf.expand_dims(indices, 1), values,
      tf.concat([[num_rows], tf.shape(values, out_type=indices.dtype)[1:]],
                0))


def _stateless_process(value_type, body) -> tff.templates.AggregationProcess:
  """An `AggregationProcess` with state `<>` whose round is `body(value)`.

  Args:
    value_type: The clients' value type.
    body: Traced in a federated computation: `{value_type}@CLIENTS` to
      `(result@SERVER, measurements@SERVER)`.
  """

  @tff.federated_computation
  def initialize():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(initialize.type_signature.result,
                             tff.FederatedType(value_type, tff.CLIENTS))
  def next_fn(state, value):
    result, measurements = body(value)
    return tff.templates.MeasuredProcessOutput(
        state=state, result=result, measurements=measurements)

  return tff.templates.AggregationProcess(initialize, next_fn)


def _check_num_rows(num_rows) -> int:
  if not isinstance(num_rows, (int, np.integer)) or num_rows < 1:
    raise ValueError(f'num_rows must be a positive int, got {num_rows!r}.')
  return int(num_rows)


class IndexedSlicesSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """Sums clients' IndexedSlices row by row at the server.

  `create(value_type)` with `value_type` =
  `<indices=int64[?],values=float32[?,*R]>` gives an `AggregationProcess`:

  *   `initialize`: `( -> <>@SERVER)`.
  *   `next`: `(<<>@SERVER, {value_type}@CLIENTS> -> <state=<>@SERVER,
      result=value_type@SERVER, measurements=<clients=int32,
      rows_received=int32>@SERVER>)`: the result has one row per distinct
      uploaded id (ids in order of first upload), the sum of every value
      uploaded with that id (duplicates included); ids nobody uploaded are
      absent, i.e. 0 (`to_dense`). `clients` counts the clients that
      uploaded rows, `rows_received` the uploaded rows (the wire cost).

  The server's work and memory are O(rows uploaded), not O(num_rows): the
  accumulator holds the distinct rows received so far.
  An index outside `[0, num_rows)` fails the round (it names no row).
  """

  def __init__(self, num_rows: int):
    """Initializes the factory.

    Args:
      num_rows: The model tensor's number of rows (the vocabulary size):
        valid ids are in [0, num_rows).

    Raises:
      ValueError: If `num_rows` is not a positive int.
    """
    self._num_rows = _check_num_rows(num_rows)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    value_type = tff.types.to_type(value_type)
    aggregate = _build_aggregate(value_type, self._num_rows)

    @tff.tensorflow.computation(aggregate.type_signature.result.member)
    def finish(total):
      return collections.OrderedDict(
          sum=collections.OrderedDict([(INDICES, total['indices']),
                                       (VALUES, total['values'])]),
          measurements=collections.OrderedDict(
              clients=total['clients'], rows_received=total['rows']))

    def sum_and_measurements(value):
      finished = tff.federated_map(finish, aggregate(value))
      return finished.sum, finished.measurements

    return _stateless_process(value_type, sum_and_measurements)


class IndexedSlicesMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """Averages clients' IndexedSlices row by row at the server.

  `create(value_type)` with `value_type` =
  `<indices=int64[?],values=float32[?,*R]>` gives an `AggregationProcess`:

  *   `initialize`: `( -> <>@SERVER)`.
  *   `next`: `(<<>@SERVER, {value_type}@CLIENTS> -> <state=<>@SERVER,
      result=value_type@SERVER, measurements=<clients=int32,
      rows_received=int32, rows_touched=int32>@SERVER>)`: the rows of
      `IndexedSlicesSumFactory` (one per distinct uploaded id) divided by
      the number of clients (`Divisor.CLIENTS`) or, row by row, by the
      number of clients that uploaded the row (`Divisor.TOUCHING_CLIENTS`).
      Rows nobody uploaded are absent (0), so applying the result to a model
      (`tff_nlp.algorithms.partial_models.build_delta_finalizer`) leaves them unchanged.
      `rows_touched` counts the rows at least one client uploaded.

  The server's work and memory are O(rows uploaded), not O(num_rows).
  """

  def __init__(self, num_rows: int, divisor: Divisor | str = Divisor.CLIENTS):
    """Initializes the factory.

    Args:
      num_rows: The model tensor's number of rows (the vocabulary size):
        valid ids are in [0, num_rows).
      divisor: A `Divisor` or its value ('clients', 'touching_clients').

    Raises:
      ValueError: If `num_rows` is not a positive int or `divisor` unknown.
    """
    self._num_rows = _check_num_rows(num_rows)
    try:
      self._divisor = Divisor(divisor)
    except ValueError:
      raise ValueError(
          f'divisor must be one of {[d.value for d in Divisor]}, got '
          f'{divisor!r}.') from None

  @property
  def divisor(self) -> Divisor:
    return self._divisor

  def create(self, value_type) -> tff.templates.AggregationProcess:
    value_type = tff.types.to_type(value_type)
    aggregate = _build_aggregate(value_type, self._num_rows)
    per_row = self._divisor is Divisor.TOUCHING_CLIENTS

    @tff.tensorflow.computation(aggregate.type_signature.result.member)
    def finish(total):
      divisor = (total['row_clients'] if per_row else tf.fill(
          tf.shape(total['row_clients']),
          tf.cast(total['clients'], tf.float32)))
      values = total['values']
      shape = tf.concat([tf.shape(divisor),
                         tf.ones([tf.rank(values) - 1], tf.int32)], 0)
      return collections.OrderedDict(
          mean=collections.OrderedDict([
              (INDICES, total['indices']),
              (VALUES, tf.math.divide_no_nan(
                  values, tf.cast(tf.reshape(divisor, shape),
                                  values.dtype)))]),
          measurements=collections.OrderedDict(
              clients=total['clients'], rows_received=total['rows'],
              rows_touched=tf.size(total['indices'])))

    def mean_and_measurements(value):
      finished = tff.federated_map(finish, aggregate(value))
      return finished.mean, finished.measurements

    return _stateless_process(value_type, mean_and_measurements)


def _constant_norm(value: float) -> tff.templates.EstimationProcess:
  """An `EstimationProcess` with state `<>` that always reports `value`."""

  @tff.federated_computation
  def initialize():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(initialize.type_signature.result,
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def next_fn(state, norms):
    del norms  # A fixed norm learns nothing from the clients' norms.
    return state

  @tff.federated_computation(initialize.type_signature.result)
  def report(state):
    del state
    return tff.federated_value(np.float32(value), tff.SERVER)

  return tff.templates.EstimationProcess(initialize, next_fn, report)


class IndexedSlicesClippingFactory(
    tff.aggregators.UnweightedAggregationFactory):
  """Clips each client's IndexedSlices to an L2 norm, then aggregates them.

  `tff.aggregators.clipping_factory` (and so `tff.learning.robust_aggregator`)
  for IndexedSlices, which TFF's factories refuse (their values must be
  structures of floats): a client's rows are scaled by `min(1, C / norm)`,
  norm the L2 norm of its values (its update's norm: the other rows are 0),
  and aggregated by the inner factory. With an `EstimationProcess` as C
  (e.g. `tff.aggregators.PrivateQuantileEstimationProcess.no_noise(...)`,
  the adaptive clipping of `robust_aggregator`), C follows a quantile of the
  clients' norms: the process is stateful, and a partial-model process
  composed with `tff_nlp.algorithms.partial_models.compose_partial_model_process` carries that
  state from round to round.

  `create(value_type)` with `value_type` =
  `<indices=int64[?],values=float32[?,*R]>` gives an `AggregationProcess`:

  *   `initialize`: `( -> <clipping_norm=N, inner_agg=I>@SERVER)`, N the norm
      process's state, I the inner process's.
  *   `next`: `(<state@SERVER, {value_type}@CLIENTS> -> <state@SERVER,
      result=R_i@SERVER, measurements=<clipping=M_i, clipping_norm=float32,
      clipped_count=int32>@SERVER>)`: R_i and M_i the inner process's result
      and measurements on the clipped values, `clipping_norm` the C used,
      `clipped_count` the clients whose rows were scaled down.
  """

  def __init__(self, clipping_norm, inner_agg_factory):
    """Initializes the factory.

    Args:
      clipping_norm: A positive float (fixed) or a
        `tff.templates.EstimationProcess` reporting float32 (adaptive).
      inner_agg_factory: An `UnweightedAggregationFactory` of IndexedSlices
        (e.g. `IndexedSlicesMeanFactory`).

    Raises:
      ValueError: For a non-positive fixed norm.
      TypeError: For an inner factory that is not unweighted.
    """
    if isinstance(clipping_norm, tff.templates.EstimationProcess):
      self._norm_process = clipping_norm
    elif clipping_norm > 0:
      self._norm_process = _constant_norm(float(clipping_norm))
    else:
      raise ValueError(f'clipping_norm must be > 0, got {clipping_norm!r}.')
    if not isinstance(inner_agg_factory,
                      tff.aggregators.UnweightedAggregationFactory):
      raise TypeError('inner_agg_factory must be an '
                      f'UnweightedAggregationFactory, got {inner_agg_factory}.')
    self._inner = inner_agg_factory

  def create(self, value_type) -> tff.templates.AggregationProcess:
    value_type = tff.types.to_type(value_type)
    _row_shape(value_type)
    inner = self._inner.create(value_type)
    norm_process = self._norm_process

    @tff.tensorflow.computation(value_type, np.float32)
    def clip(value, clipping_norm):
      values = value[VALUES]
      norm = tf.norm(tf.cast(values, tf.float32))
      clipped = norm > clipping_norm
      scale = tf.where(clipped, clipping_norm / norm, 1.0)
      return collections.OrderedDict(
          value=collections.OrderedDict([
              (INDICES, value[INDICES]),
              (VALUES, values * tf.cast(scale, values.dtype))]),
          norm=norm, clipped=tf.cast(clipped, tf.int32))

    @tff.federated_computation
    def initialize():
      return tff.federated_zip(collections.OrderedDict(
          clipping_norm=norm_process.initialize(),
          inner_agg=inner.initialize()))

    @tff.federated_computation(initialize.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      clipping_norm = norm_process.report(state.clipping_norm)
      clipped = tff.federated_map(
          clip, (value, tff.federated_broadcast(clipping_norm)))
      inner_output = inner.next(state.inner_agg, clipped.value)
      new_state = collections.OrderedDict(
          clipping_norm=norm_process.next(state.clipping_norm, clipped.norm),
          inner_agg=inner_output.state)
      measurements = collections.OrderedDict(
          clipping=inner_output.measurements, clipping_norm=clipping_norm,
          clipped_count=tff.federated_sum(clipped.clipped))
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(new_state), result=inner_output.result,
          measurements=tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(initialize, next_fn)
