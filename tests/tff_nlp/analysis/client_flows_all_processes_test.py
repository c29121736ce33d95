"""What leaves a client, for every learning process builder of tff_nlp.

For each builder (tiny configurations from its own tests), every federated
computation that takes client data is walked with
`analysis.client_to_server_flows` and its CLIENTS→SERVER flows are compared
with an explicit table of (intrinsic, kind, type). A new flow, or a changed
type, fails the test; docs/algorithms.md ("What leaves a client") is written
from these tables.

Each flow's kind is then checked structurally, and every flow must be free of
raw data: no sequence, no string tensor, no dimension that is unknown
(except the row dimension of a sparse row upload, bounded by `max_keys`).

Kinds:
  scalars: counts, sums, weights, metric sums (every tensor a scalar).
  update: a weighted model update; every tensor has a trainable weight's
    shape.
  update+weights: dynamic pulling; model-shaped tensors and one weight per
    tensor (float32[number of tensors]).
  keys: `federated_select` keys, int32[M] of row or slot ids.
  rows: IndexedSlices of touched rows, <indices=int64[?],values=float32[?,d]>
    where d is the embedding's row width; at most `max_keys` rows.
  slots: FedWeIT's adaptive weights, gathered per knowledge-base slot:
    <slots=int32[1],sent=bool[1],values=<one adaptive kernel per width>>.
  representations: SIT task representations, gathered per slot:
    vectors float32[MAX_NEW_REPRESENTATIONS, sit_max_vectors, D] and counts.
"""

import functools

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import analysis
from tff_nlp.algorithms import fcl
from apps.partial_models import tag_process as sparse_tags
from tff_nlp.models import fcl_cnn

# ---------------------------------------------------------------------------
# The expected flows, as (intrinsic, kind, type) in trace order.

_WEIGHTING_STATS = (
    'federated_sum', 'scalars',
    '<num_clients=float32,num_examples=float32,loss_sum=float32,'
    'valid_examples=float32,loss_reduction=float32,num_empty_clients=float32,'
    'num_non_finite_clients=float32,weight=float32,weight_squared=float32>')
_WEIGHT_MIN = ('federated_min', 'scalars', 'float32')
_WEIGHT_MAX = ('federated_max', 'scalars', 'float32')
_LOSS_METRICS = (
    'federated_sum', 'scalars',
    '<loss=<float32,float32>,num_examples=<int64>,num_batches=<int64>>')
_WEIGHT_SUM = ('federated_sum', 'scalars', 'float32')


def _weighted_mean_flows(update_type):
  """The client-work flows of `build_fl_process` and the mean aggregator's."""
  return [_WEIGHTING_STATS, _WEIGHT_MIN, _WEIGHT_MAX, _LOSS_METRICS,
          ('federated_sum', 'update', update_type), _WEIGHT_SUM]


# loss_reduction and lorar first sum the candidate weights (|D|·ΔL or ΔL)
# to detect an all-zero round and fall back to num_examples weighting.
_FALLBACK_TOTAL = ('federated_sum', 'scalars', 'float32')

_FL_UPDATE = '<float32[3,1],float32[1]>'
_FL_FLOWS = {
    'num_examples': _weighted_mean_flows(_FL_UPDATE),
    'uniform': _weighted_mean_flows(_FL_UPDATE),
    'loss_reduction': [_FALLBACK_TOTAL] + _weighted_mean_flows(_FL_UPDATE),
    'lorar': [_FALLBACK_TOTAL] + _weighted_mean_flows(_FL_UPDATE),
}

_SPARSE_FLOWS = [
    ('federated_select', 'keys', 'int32[3]'),
    # The client work's metric sums come before the aggregator's rows (TFF's
    # composition order: client work, then aggregator).
    ('federated_sum', 'scalars',
     '<loss_sum=float32,num_examples=int32,finite_examples=int32,'
     'selected_keys=int32,rows_uploaded=int32,truncated_clients=int32,'
     'dropped_tokens=int32,non_finite_clients=int32>'),
    ('federated_aggregate', 'rows', '<indices=int64[?],values=float32[?,4]>'),
]
_DENSE_FLOWS = _weighted_mean_flows('<float32[13,4]>')

# The client work's statistics, then the aggregator's masked sums (the
# order of `stateful_composer`'s parts).
_DP_FLOWS = _weighted_mean_flows(None)[:4] + [
    ('federated_sum', 'scalars',
     '<num_clients=int32,parameters_pulled=int64,parameters_pushed=int64,'
     'bytes_pulled=int64,bytes_pushed=int64,'
     'tensors_sent=<encoder=int32,decoder=int32>>'),
    ('federated_sum', 'update+weights',
     '<weighted=<float32[3,4],float32[4],float32[4,3],float32[3],'
     'float32[3,2],float32[2],float32[2,1],float32[1]>,weights=float32[8]>'),
]

_FCL_START_STATS = (
    'federated_sum', 'scalars',
    '<num_clients=int64,bytes_down=int64,bytes_up=int64,'
    'bytes_down_by_part=<embedding=int64,knowledge_base=int64>,'
    'bytes_up_by_part=<representations=int64>,kb_entries=int64>')
_FCL_ROUND_STATS = (
    'federated_sum', 'scalars',
    '<num_clients=int64,num_examples=float64,loss_sum=float64,'
    'valid_examples=float64,non_finite_clients=int64,bytes_down=int64,'
    'bytes_up=int64,bytes_up_by_part=<shared_weights=int64,adaptive=int64>,'
    'adaptive_nonzero=int64>')
_FCL_DENSE_SHARED = ('conv2/base=float32[2,4,3],conv2/bias=float32[3],'
                     'conv3/base=float32[3,4,3],conv3/bias=float32[3]')
_FCL_DECOMPOSED_SHARED = 'conv2/base=float32[2,4,3],conv3/base=float32[3,4,3]'
_FCL_EMBEDDING = 'embedding=float32[30,4],'
_FCL_ADAPTIVE = (
    'federated_aggregate', 'slots',
    '<slots=int32[1],sent=bool[1],values=<float32[1,2,4,3],float32[1,3,4,3]>>')
_FCL_KB_KEYS = ('federated_select', 'keys', 'int32[2]')


def _fcl_round(shared, first_task, adaptive):
  # Task 0 also trains (and averages) the embedding; later tasks freeze it.
  weighted = (_FCL_EMBEDDING if first_task else '') + shared
  flows = [('federated_sum', 'update',
            f'<weighted=<{weighted}>,weight=float32>')]
  return flows + ([_FCL_ADAPTIVE] if adaptive else []) + [_FCL_ROUND_STATS]


def _fcl_flows(method):
  decomposed = method in process_fixtures.FCL_DECOMPOSED
  shared = _FCL_DECOMPOSED_SHARED if decomposed else _FCL_DENSE_SHARED
  if method == 'local':  # Nothing is averaged: only the weight is summed.
    return dict(
        start_task=[_FCL_START_STATS],
        next_first_task=[('federated_sum', 'scalars',
                          '<weighted=<>,weight=float32>'), _FCL_ROUND_STATS],
        next=[('federated_sum', 'scalars', '<weighted=<>,weight=float32>'),
              _FCL_ROUND_STATS])
  if method == 'fedseit_sit':
    start = [('federated_aggregate', 'representations',
              '<slots=int32[2],sent=bool[2],'
              'values=<vectors=float32[2,4,4],counts=int32[2]>>'),
             ('federated_select', 'keys', 'int32[1]'),  # own selection row
             _FCL_KB_KEYS, _FCL_START_STATS]
  elif decomposed:
    start = [_FCL_KB_KEYS, _FCL_START_STATS]
  else:
    start = [_FCL_START_STATS]
  # The embedding is averaged in task 0 only when it is federated.
  return dict(start_task=start,
              next_first_task=_fcl_round(shared, True, decomposed),
              next=_fcl_round(shared, False, decomposed))


# ---------------------------------------------------------------------------
# Checks.


def _tensors(type_spec):
  """(path, TensorType) of every tensor; sequences and functions as None."""
  if isinstance(type_spec, tff.TensorType):
    return [('', type_spec)]
  if isinstance(type_spec, tff.StructType):
    out = []
    for i, (name, member) in enumerate(
        tff.structure.iter_elements(type_spec)):
      out += [(f'{name or i}/{p}', t) for p, t in _tensors(member)]
    return out
  return [('', None)]


def _flows(computation):
  return [(f.intrinsic, str(f.value_type))
          for f in analysis.client_to_server_flows(computation)]


def _model_shapes(type_spec):
  return {tuple(t.shape) for _, t in _tensors(type_spec)}


def _assert_not_raw(flow, kind):
  for path, tensor in _tensors(flow.value_type):
    assert tensor is not None, f'{flow}: {path} is a sequence or function'
    assert tensor.dtype.type not in (np.str_, np.bytes_, np.object_), (
        f'{flow}: {path} is a string tensor')
    shape = tuple(tensor.shape)
    unknown = [i for i, d in enumerate(shape) if d is None]
    # Only a sparse upload's row dimension may vary (≤ max_keys rows).
    assert not unknown or (kind == 'rows' and unknown == [0]), (
        f'{flow}: {path} has an unknown dimension')


def _assert_kind(flow, kind, model_shapes, *, max_keys=None, sit_shape=None):
  """Checks that `flow` is of `kind` (see the module docstring)."""
  tensors = _tensors(flow.value_type)
  shapes = [tuple(t.shape) for _, t in tensors]
  dtypes = [t.dtype.type for _, t in tensors]
  if kind == 'scalars':
    assert flow.is_scalar_only, flow
  elif kind == 'update':
    t = flow.value_type
    if 'weighted' in tff.structure.name_list(t):  # FCL: <weighted, weight>
      assert str(t.weight) == 'float32', flow
      t = t.weighted
    assert _model_shapes(t) <= model_shapes, flow
    assert all(d == np.float32 for d in dtypes), flow
  elif kind == 'update+weights':
    weighted, weights = flow.value_type.weighted, flow.value_type.weights
    assert _model_shapes(weighted) <= model_shapes, flow
    assert tuple(weights.shape) == (len(weighted),), flow
  elif kind == 'keys':
    assert dtypes == [np.int32] and len(shapes[0]) == 1, flow
    if max_keys is not None:
      assert shapes[0] == (max_keys,), flow
  elif kind == 'rows':
    indices, values = flow.value_type.indices, flow.value_type.values
    assert tuple(indices.shape) == (None,) and indices.dtype == np.int64
    assert tuple(values.shape)[0] is None
    assert tuple(values.shape)[1:] in {s[1:] for s in model_shapes}, flow
  elif kind == 'slots':
    t = flow.value_type
    assert str(t.slots) == 'int32[1]' and str(t.sent) == 'bool[1]', flow
    # One adaptive kernel per filter width, for the client's one slot.
    assert {(1,) + s for s in model_shapes} >= _model_shapes(t['values'])
  elif kind == 'representations':
    t = flow.value_type
    vectors, counts = t['values'].vectors, t['values'].counts
    assert tuple(vectors.shape) == sit_shape, flow
    assert tuple(counts.shape) == sit_shape[:1] and counts.dtype == np.int32
  else:
    raise AssertionError(f'unknown kind {kind!r}')
  _assert_not_raw(flow, kind)


def _check(computation, expected, model_shapes, **kwargs):
  """Computed flows == the table, and each flow is of its kind."""
  flows = analysis.client_to_server_flows(computation)
  assert [(f.intrinsic, str(f.value_type)) for f in flows] == [
      (i, t) for i, _, t in expected]
  for flow, (_, kind, _) in zip(flows, expected):
    _assert_kind(flow, kind, model_shapes, **kwargs)


def _fcl_computations(process):
  """Every federated computation of an `FclProcess`, by field name."""
  return {name: getattr(process, name) for name in (
      'initialize', 'initial_client_state', 'start_task', 'next_first_task',
      'next')}


@functools.lru_cache(maxsize=None)
def _vocab_sliced_process():
  from apps.text2sql import vocab_sliced  # pylint: disable=g-import-not-at-top
  config = process_fixtures.vs_config()
  process = vocab_sliced.build_vocab_sliced_process(
      config, max_keys=process_fixtures.VS_MAX_KEYS,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=process_fixtures.VS_LEARNING_RATE))
  return process, config


class ClientFlowsComputationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(algorithm=process_fixtures.FL_ALGORITHMS,
                         weighting=process_fixtures.FL_WEIGHTINGS)
  def test_fl_process(self, algorithm, weighting):
    process = process_fixtures.build_fl(algorithm, weighting)
    self.assertEqual(_flows(process.initialize), [])
    _check(process.next, _FL_FLOWS[weighting],
           _model_shapes(linear_model.weights_type().trainable))

  @parameterized.parameters(*process_fixtures.FL_WEIGHTINGS)
  def test_fl_process_with_weight_cap(self, weighting):
    # The cap gathers each client's weight (a float32 scalar) before the
    # weighted mean: one more flow, right before the update's.
    process = process_fixtures.build_fl('fedavg', weighting,
                                        max_weight_share=0.5)
    flows = list(_FL_FLOWS[weighting])
    flows.insert(-2, ('federated_aggregate', 'scalars', 'float32'))
    _check(process.next, flows,
           _model_shapes(linear_model.weights_type().trainable))

  def test_sparse_tag_process(self):
    process = sparse_tags.build_sparse_tag_process(
        num_words=13, num_tags=4, max_keys=3, client_learning_rate=0.1)
    self.assertEqual(_flows(process.initialize), [])
    _check(process.next, _SPARSE_FLOWS, {(13, 4)}, max_keys=3)

  def test_dense_tag_process(self):
    process = sparse_tags.build_dense_tag_process(
        num_words=13, num_tags=4, client_learning_rate=0.1)
    self.assertEqual(_flows(process.initialize), [])
    _check(process.next, _DENSE_FLOWS, {(13, 4)})

  @parameterized.parameters('default', 'dp_l', 'controllers')
  def test_dynamic_pulling_process(self, mode):
    process = process_fixtures.build_dynamic_pulling(mode)
    self.assertEqual(_flows(process.initialize), [])
    _check(process.next, _DP_FLOWS,
           _model_shapes(process_fixtures.dp_weights_type().trainable))

  @parameterized.parameters(*fcl.METHODS)
  def test_fcl_process(self, method):
    process = process_fixtures.build_fcl(method)
    computations = _fcl_computations(process)
    # No computation of the class is missed.
    self.assertEqual(set(computations), {
        f for f, v in vars(process).items() if isinstance(v, tff.Computation)})
    self.assertIs(process.round_computation(0), process.next_first_task)
    self.assertIs(process.round_computation(1), process.next)
    expected = _fcl_flows(method)
    for name in ('initialize', 'initial_client_state'):
      self.assertEqual(_flows(computations[name]), [], name)
    weights = fcl_cnn.FclTextCnn(process.spec).weight_dict()
    model_shapes = {tuple(v.shape) for v in weights.values()}
    # Adaptive kernels are stored per task: [T, w, D, N]; one slot is [w, D, N].
    model_shapes |= {s[1:] for k, s in ((k, tuple(v.shape))
                                        for k, v in weights.items())
                     if 'adaptive' in k}
    sit_shape = (fcl.MAX_NEW_REPRESENTATIONS,
                 process.config.sit_max_vectors, process.spec.embedding_dim)
    for name in ('start_task', 'next_first_task', 'next'):
      _check(computations[name], expected[name], model_shapes,
             sit_shape=sit_shape)

  def test_vocab_sliced_process(self):
    from tff_nlp.models import seq2seq  # pylint: disable=g-import-not-at-top
    process, config = _vocab_sliced_process()
    self.assertEqual(_flows(process.initialize), [])
    shapes = [tuple(w.shape)
              for w in seq2seq.build_keras_model(config).trainable_weights]
    self.assertEqual(shapes.count((40, 8)), 1)  # the embedding: V x D
    rest = [s for s in shapes if s != (40, 8)]
    update = '<' + ','.join(
        'float32[' + ','.join(map(str, s)) + ']' for s in rest) + '>'
    expected = [
        ('federated_select', 'keys', 'int32[12]'),  # the client's top-M ids
        _WEIGHTING_STATS, _WEIGHT_MIN, _WEIGHT_MAX,
        ('federated_sum', 'scalars',
         '<token_accuracy=<float32,float32>,num_examples=<int64>,'
         'num_batches=<int64>,loss=<float32,float32>>'),
        # Everything but the embedding, dense and weighted; then its weight.
        ('federated_sum', 'update', update), _WEIGHT_SUM,
        # The embedding: only the touched rows, as IndexedSlices.
        ('federated_aggregate', 'rows',
         '<indices=int64[?],values=float32[?,8]>'),
    ]
    _check(process.next, expected, set(shapes), max_keys=12)

  def test_select_keys_are_flows(self):
    """`federated_select` keys count as CLIENTS→SERVER, as in the traffic."""
    process = sparse_tags.build_sparse_tag_process(
        num_words=13, num_tags=4, max_keys=3, client_learning_rate=0.1)
    ups = [(t.intrinsic, str(t.value_type))
           for t in analysis.round_communication(process.next).transfers
           if t.direction == 'up']
    self.assertEqual(_flows(process.next), ups)

  def test_a_raw_data_flow_is_caught(self):
    """A computation that sums the clients' datasets' first batch fails."""
    flow = analysis.ClientFlow('federated_sum', tff.SequenceType(np.float32))
    with self.assertRaisesRegex(AssertionError, 'sequence'):
      _assert_not_raw(flow, 'scalars')
    flow = analysis.ClientFlow('federated_sum', tff.TensorType(np.str_, [3]))
    with self.assertRaisesRegex(AssertionError, 'string'):
      _assert_not_raw(flow, 'scalars')
    flow = analysis.ClientFlow('federated_sum',
                               tff.TensorType(np.float32, [None, 3]))
    with self.assertRaisesRegex(AssertionError, 'unknown dimension'):
      _assert_not_raw(flow, 'update')


if __name__ == '__main__':
  tf.test.main()
