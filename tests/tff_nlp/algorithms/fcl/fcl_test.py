"""Tests of the federated continual-learning process (`fcl`).

Setting: C = 3 clients with 4, 8 and 4 training examples per task (batches
of 2), T = 2 tasks, the text CNN of `fcl_cnn` at tiny shapes (vocabulary 30,
L = 8, D = 4, filter widths (2, 3) with N = 3 filters, 3 classes, no
dropout). A-store slots are `slot(c, t) = c·T + t = 2c + t`: client 0 owns
slots 0, 1, client 1 slots 2, 3, client 2 slots 4, 5.

Sizes in floats (4 bytes each): embedding 30·4 = 120; B of the width-2 bank
2·4·3 = 24, of the width-3 bank 3·4·3 = 36; a plain bank's bias 3. So the
shared weights are 120 + 24 + 36 = 180 floats (decomposed) or 120 + 24 + 3 +
36 + 3 = 186 (plain) on task 0, and 60 resp. 66 without the embedding; one
task's A over both banks is 24 + 36 = 60 floats = 240 bytes.
"""

import collections
import math

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import training
from tff_nlp.algorithms import fcl
from tff_nlp.algorithms import sit
from tff_nlp.models import fcl_cnn

_F32, _F64, _I32, _I64 = np.float32, np.float64, np.int32, np.int64
_C = process_fixtures.FCL_NUM_CLIENTS
_T = process_fixtures.FCL_TASKS_PER_CLIENT
_SIZES = (4, 8, 4)
_WIDTHS = process_fixtures.FCL_WIDTHS
_LR = process_fixtures.FCL_LEARNING_RATE
_SPARSITY = process_fixtures.FCL_SPARSITY
_DECOMPOSED = process_fixtures.FCL_DECOMPOSED
# The fixture's own values of arguments the tests name: processes are
# cached by their arguments, so naming one at this value would build (trace)
# the same process again.
_FIXTURE_DEFAULTS = {'sit_top_k': 2, 'kb_include_own': False}


def _process(method, **kwargs):
  """`process_fixtures.build_fcl`, built once per configuration and test
  session: through `training.shared_processes()`, whose store (the
  session's, tests/conftest.py) gives what this file builds to
  fcl_aggregation_test.py (same key) on the other pytest worker."""
  kwargs = {k: v for k, v in kwargs.items()
            if k not in _FIXTURE_DEFAULTS or v != _FIXTURE_DEFAULTS[k]}
  return training.shared_processes().get(
      ('tests.build_fcl', method, tuple(sorted(kwargs.items()))),
      lambda: process_fixtures.build_fcl(method, **kwargs))


def _slot(client, task):
  return sit.slot(client, task, _T)


# ---------------------------------------------------------------------------
# Data and runs.


def _examples(client, task, size):
  """Post-padded token ids (lengths 3..8) and labels, fixed per (c, t)."""
  rng = np.random.default_rng(10 * task + client)
  ids = rng.integers(1, 30, size=(size, 8)).astype(_I32)
  lengths = rng.integers(3, 9, size=size)
  ids[np.arange(8)[None, :] >= lengths[:, None]] = 0
  return ids, rng.integers(0, 3, size=size).astype(_I32)


def _datasets(task, sizes=_SIZES, clients=None):
  clients = range(len(sizes)) if clients is None else clients
  return [tf.data.Dataset.from_tensor_slices(
      _examples(c, task, sizes[c])).batch(2) for c in clients]


def _initial(process):
  state = process.initialize()
  return state, [process.initial_client_state(state, np.int32(c))
                 for c in range(_C)]


def _start(process, state, clients, task, inputs=None):
  if inputs is None:
    inputs = [process.task_start_input(task)] * len(clients)
  return process.start_task(state, inputs, clients)


def _round(process, task, output, client_states=None, **kwargs):
  if client_states is None:
    client_states = output.client_states
  return process.round_computation(task)(
      output.state, _datasets(task, **kwargs), client_states)


# Runs that several tests read: each is executed once per process (one per
# configuration, `_process`) and shared. The tests only read them (they copy
# what they change, e.g. `_with_nan_head`).
_RUNS = {}


def _shared_run(process, name, run):
  key = (id(process), name)
  if key not in _RUNS:
    # Holding the process keeps its id from being reused by another.
    _RUNS[key] = (process, run())
  return _RUNS[key][1]


def _task0(process):
  """(initial state, initial clients, start_task(0), one round of task 0)."""

  def run():
    state, clients = _initial(process)
    started = _start(process, state, clients, 0)
    return state, clients, started, _round(process, 0, started)

  return _shared_run(process, 'task0', run)


def _start1(process):
  """After `_task0`: start_task(1) with the default inputs."""

  def run():
    first = _task0(process)[3]
    return _start(process, first.state, first.client_states, 1)

  return _shared_run(process, 'start1', run)


def _task1(process):
  """(`_start1`, one round of task 1 after it)."""
  started = _start1(process)
  return started, _shared_run(process, 'round1',
                              lambda: _round(process, 1, started))


def _weighted_mean(client_states, key, sizes=_SIZES):
  """FedAvg: Σ_c n_c w_c / Σ_c n_c (float64)."""
  total = sum(n * client.weights[key].astype(_F64)
              for n, client in zip(sizes, client_states))
  return total / sum(sizes)


def _local_kernels(weights, width):
  """θ*_j = B ⊙ σ(m_j) + A_j for every task j, numpy."""
  p = f'conv{width}/'
  return (weights[p + 'base'][None]
          / (1.0 + np.exp(-weights[p + 'mask']))[:, None, None, :]
          + weights[p + 'adaptive'])


def _prune(a, threshold):
  return np.where(np.abs(a) > threshold, a, 0.0)


def _with_nan_head(client):
  """A client whose task-0 head has a NaN: its loss is NaN."""
  weights = collections.OrderedDict(client.weights)
  head = np.array(weights['head/kernel'])
  head[0, 0, 0] = np.nan
  weights['head/kernel'] = head
  return client._replace(weights=weights)


# ---------------------------------------------------------------------------
# SIT's numpy reference.

# R_c^0 as sent at task 0 (stale: replaced at task 1, where R_c^0 is sent
# again, computed with the trained embedding).
_STALE = [[0.0, 0.0, 0.0, 1.0]]
_REP_TASK0 = (
    [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]],
    [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],
    [[4.0, 3.0, 0.0, 0.0], [3.0, 4.0, 0.0, 0.0]],
)
_REP_TASK1 = (
    [[1.0, 0.0, 0.0, 0.0]],
    [[0.0, 0.0, 1.0, 0.0]],
    [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]],
)


def _cos(u, v):
  norms = np.linalg.norm(u) * np.linalg.norm(v)
  return float(np.dot(u, v) / norms) if norms > 0 else 0.0


def _reference_score(query, rep, threshold=0.7):
  """Rectified linear: Σ_{u,v} cos(u, v)·1[cos > τ] / (|R_t||R_t'|)."""
  if not len(query) or not len(rep):
    return 0.0
  cosines = [_cos(np.array(u), np.array(v)) for u in query for v in rep]
  return sum(c for c in cosines if c > threshold) / len(cosines)


def _reference_selection(reps, stored, client, task, k, include_own):
  """(slots, α) of the top-K candidates (ties: lower slot first)."""
  query = reps[_slot(client, task)]
  scores = {s: _reference_score(query, reps.get(s, [])) for s in range(_C * _T)}
  candidates = [
      s for s in range(_C * _T)
      if stored[s] and (s // _T != client
                        or (include_own and s % _T < task))]
  chosen = sorted(candidates, key=lambda s: (-scores[s], s))[:k]
  total = sum(scores[s] for s in chosen)
  alphas = [scores[s] / total if total > 0 else 1.0 / len(chosen)
            for s in chosen]
  return chosen, alphas


class FclComputationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      [(m, m, 2) for m in fcl.METHODS]
      # K = 1: the KB's batch of one must keep the state's static shape.
      + [('fedseit_sit_k1', 'fedseit_sit', 1)])
  def test_type_signatures(self, method, top_k):
    process = _process(method, sit_top_k=top_k)
    self.assertEqual(process.config.sit_top_k, top_k)
    spec = process.spec
    uses_sit = method == 'fedseit_sit'
    server_type = process.initialize.type_signature.result
    self.assertIsInstance(server_type, tff.FederatedType)
    self.assertEqual(server_type.placement, tff.SERVER)
    tff.test.assert_types_equivalent(process.initialize.type_signature,
                                     tff.FunctionType(None, server_type))
    model_shapes = {k: tuple(v.shape)
                    for k, v in fcl_cnn.FclTextCnn(spec).weight_dict().items()}
    banks = ([tff.TensorType(_F32, (_C * _T, w, 4, 3)) for w in _WIDTHS]
             if method in _DECOMPOSED else [])
    rows, dim = (4, 4) if uses_sit else (1, 1)
    tff.test.assert_types_equivalent(server_type.member, tff.StructType([
        ('shared', tff.StructType([
            (k, tff.TensorType(_F32, model_shapes[k]))
            for k in fcl_cnn.shared_keys(spec)])),
        ('adaptive_store', tff.StructType(banks)),
        ('stored', tff.TensorType(np.bool_, [_C * _T])),
        ('representations', tff.TensorType(_F32, [_C * _T, rows, dim])),
        ('representation_counts', tff.TensorType(_I32, [_C * _T])),
        ('task', _I32), ('round_num', _I32),
        # No model aggregator: its part of the one state type is empty.
        ('aggregator', tff.StructType([]))]))

    # The client state: every model weight, θ* per bank, Adam, the task.
    client_type = process.initial_client_state.type_signature.result
    tff.test.assert_types_equivalent(
        process.initial_client_state.type_signature.parameter,
        tff.StructType([('server_state', server_type.member),
                        ('client_id', _I32)]))
    self.assertEqual(tff.structure.name_list(client_type),
                     ['client_id', 'weights', 'snapshots', 'optimizer',
                      'task'])
    tff.test.assert_types_equivalent(client_type.weights, tff.StructType([
        (k, tff.TensorType(_F32, model_shapes[k]))
        for k in fcl_cnn.weight_keys(spec)]))
    tff.test.assert_types_equivalent(client_type.snapshots, tff.StructType(
        [tff.TensorType(_F32, (_T, w, 4, 3)) for w in _WIDTHS]
        if method in _DECOMPOSED else []))
    tff.test.assert_types_equivalent(client_type.client_id,
                                     tff.TensorType(_I32))
    tff.test.assert_types_equivalent(client_type.task, tff.TensorType(_I32))

    # `<S@SERVER, {input}@CLIENTS, {C}@CLIENTS> ->
    #  <state=S@SERVER, client_states={C}@CLIENTS, metrics=M@SERVER>`.
    clients = tff.FederatedType(client_type, tff.CLIENTS)

    def signature(name, client_input, metrics):
      return tff.FunctionType(
          tff.StructType([
              ('state', server_type),
              (name, tff.FederatedType(client_input, tff.CLIENTS)),
              ('client_states', clients)]),
          tff.StructType([
              ('state', server_type), ('client_states', clients),
              ('metrics', tff.FederatedType(metrics, tff.SERVER))]))

    start_input = tff.StructType([
        ('task', _I32),
        ('representations', tff.TensorType(_F32, [2, rows, dim])),
        ('representation_counts', tff.TensorType(_I32, [2])),
        ('representation_tasks', tff.TensorType(_I32, [2]))])
    start_metrics = tff.StructType([
        ('bytes_down_per_client', _F64), ('bytes_up_per_client', _F64),
        ('kb_entries_per_client', _F64),
        ('bytes_down_by_part_per_client', tff.StructType([
            ('embedding', _F64), ('knowledge_base', _F64)])),
        ('bytes_up_by_part_per_client', tff.StructType([
            ('representations', _F64)]))])
    tff.test.assert_types_equivalent(
        process.start_task.type_signature,
        signature('inputs', start_input, start_metrics))
    batches = tff.SequenceType((tff.TensorType(_I32, [None, 8]),
                                tff.TensorType(_I32, [None])))
    round_metrics = tff.StructType([
        ('train_loss', _F64), ('num_examples', _F64),
        ('non_finite_clients', _I64), ('bytes_down_per_client', _F64),
        ('bytes_up_per_client', _F64), ('adaptive_nonzero_per_client', _F64),
        ('bytes_up_by_part_per_client', tff.StructType([
            ('shared_weights', _F64), ('adaptive', _F64)]))])
    for computation in (process.next_first_task, process.next):
      tff.test.assert_types_equivalent(
          computation.type_signature,
          signature('client_data', batches, round_metrics))
    self.assertIs(process.round_computation(0), process.next_first_task)
    self.assertIs(process.round_computation(1), process.next)

  @parameterized.named_parameters(
      # (method, shared floats on task 0, later; A floats uploaded; K).
      ('local', 'local', 0, 0, 0, 0),
      ('fedavg', 'fedavg', 186, 66, 0, 0),
      ('fedprox', 'fedprox', 186, 66, 0, 0),
      ('fedweit', 'fedweit', 180, 60, 60, 2),
      ('fedseit', 'fedseit', 180, 60, 60, 2),
      ('fedseit_sit', 'fedseit_sit', 180, 60, 60, 2),
  )
  def test_shared_weights_and_bytes(self, method, first_floats, later_floats,
                                    adaptive_floats, kb_size):
    process = _process(method)
    shared = fcl_cnn.shared_keys(process.spec)
    if method in ('local', 'fedavg', 'fedprox'):
      self.assertEqual(shared, ('embedding', 'conv2/base', 'conv2/bias',
                                'conv3/base', 'conv3/bias'))
    else:
      self.assertEqual(shared, ('embedding', 'conv2/base', 'conv3/base'))
    state, _, started, first = _task0(process)
    self.assertEqual(list(state.shared), list(shared))
    federated = method != 'local'
    # start_task sends the embedding (120 floats) and, from task 1, K A's.
    self.assertEqual(started.metrics['bytes_down_per_client'],
                     480.0 if federated else 0.0)
    self.assertEqual(started.metrics['kb_entries_per_client'], 0.0)
    self.assertEqual(started.metrics['bytes_up_per_client'], 0.0)
    # Task 0 rounds: down the shared weights with the embedding; up the same
    # and the pruned A_0 (the A counts whether or not entries are zero).
    self.assertEqual(first.metrics['bytes_down_per_client'], 4 * first_floats)
    self.assertEqual(first.metrics['bytes_up_per_client'],
                     4 * (first_floats + adaptive_floats))
    self.assertEqual(first.metrics['num_examples'], 16.0)
    self.assertEqual(first.metrics['non_finite_clients'], 0)
    self.assertEqual(first.state.task, 0)
    self.assertEqual(first.state.round_num, 1)
    if method == 'fedseit_sit':
      inputs = [process.task_start_input(1, [_REP_TASK0[c], _REP_TASK1[c]],
                                         [0, 1]) for c in range(_C)]
      second_start = _start(process, first.state, first.client_states, 1,
                            inputs)
      second = _round(process, 1, second_start)
    else:
      second_start, second = _task1(process)
    # 480 bytes of embedding + K·240 bytes of A's.
    self.assertEqual(second_start.metrics['bytes_down_per_client'],
                     480.0 + 240.0 * kb_size if federated else 0.0)
    self.assertEqual(second_start.metrics['kb_entries_per_client'], kb_size)
    self.assertEqual(
        dict(second_start.metrics['bytes_down_by_part_per_client']),
        {'embedding': 480.0 if federated else 0.0,
         'knowledge_base': 240.0 * kb_size})
    # Later rounds: no embedding either way.
    self.assertEqual(second.metrics['bytes_down_per_client'],
                     4 * later_floats)
    self.assertEqual(second.metrics['bytes_up_per_client'],
                     4 * (later_floats + adaptive_floats))
    self.assertEqual(dict(second.metrics['bytes_up_by_part_per_client']),
                     {'shared_weights': 4.0 * later_floats,
                      'adaptive': 4.0 * adaptive_floats})
    self.assertAllEqual(second.state.shared['embedding'],
                        second_start.state.shared['embedding'])
    self.assertEqual(second.state.task, 1)
    self.assertEqual(second.state.round_num, 2)
    for client in second.client_states:
      self.assertEqual(client.task, 1)

  def test_spec_must_match_the_method(self):
    config = fcl.FclConfig(method='fedweit', num_clients=3,
                           tasks_per_client=2)
    spec = fcl_cnn.FclCnnSpec(vocab_size=30, max_length=8, num_tasks=2,
                              num_classes=3, architecture='fedseit',
                              kb_size=2)
    with self.assertRaisesRegex(ValueError, 'is not the model of method'):
      fcl.build_fcl_process(config, spec)
    # K: one entry per other client, or all of them with kb_include_own.
    self.assertEqual(config.kb_size, 2)
    self.assertEqual(fcl.FclConfig(method='fedweit', num_clients=3,
                                   tasks_per_client=2,
                                   kb_include_own=True).kb_size, 3)

  @parameterized.named_parameters(
      ('method', dict(method='fedsgd'), 'method must be one of'),
      ('clients', dict(num_clients=0), 'num_clients must be positive'),
      ('sit_without_branch', dict(method='fedseit_sit', foreign_branch=False),
       'fedseit_sit needs foreign_branch=True'),
  )
  def test_invalid_config(self, change, message):
    fields = dict(method='fedseit', num_clients=3, tasks_per_client=2)
    fields.update(change)
    with self.assertRaisesRegex(ValueError, message):
      fcl.FclConfig(**fields)

  def test_task_start_input(self):
    process = _process('fedseit_sit')
    inputs = process.task_start_input(1, [_REP_TASK0[2], _REP_TASK1[0]],
                                      [0, 1])
    self.assertEqual(inputs['task'], 1)
    self.assertAllEqual(inputs['representation_counts'], [2, 1])
    self.assertAllEqual(inputs['representation_tasks'], [0, 1])
    self.assertAllEqual(inputs['representations'][0, :2], _REP_TASK0[2])
    self.assertAllEqual(inputs['representations'][0, 2:], np.zeros([2, 4]))
    with self.assertRaisesRegex(ValueError, 'sends no task representations'):
      _process('fedseit').task_start_input(1, [_REP_TASK1[0]], [1])
    with self.assertRaisesRegex(ValueError, 'at most 2 representations'):
      process.task_start_input(1, [_REP_TASK1[0]] * 3, [0, 1, 1])


class FclExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_stateful_clients_protocol(self):
    # `stateful_clients.StatefulClientsProcess`: every client's initial
    # state, and the round of the server state's task.
    process = _process('fedweit')
    state, clients, started, _ = _task0(process)
    for got, want in zip(process.initial_client_states(state, _C), clients):
      tf.nest.map_structure(self.assertAllEqual, got, want)
    with self.assertRaisesRegex(ValueError, 'clients'):
      process.initial_client_states(state, _C + 1)
    started = started.state
    self.assertIs(process.round_computation_for(started),
                  process.next_first_task)
    self.assertIs(process.round_computation_for(
        _start(process, started, clients, 1).state), process.next)

  @parameterized.named_parameters(
      (m, m) for m in ('fedavg', 'fedprox', 'fedweit', 'fedseit',
                       'fedseit_sit'))
  def test_fedavg_aggregation(self, method):
    process = _process(method)
    _, _, started, first = _task0(process)
    shared = fcl_cnn.shared_keys(process.spec)
    # n = (4, 8, 4), local_epochs = 1: weights (1/4, 1/2, 1/4).
    for key in shared:
      self.assertAllClose(first.state.shared[key],
                          _weighted_mean(first.client_states, key),
                          atol=1e-6, rtol=1e-6, msg=key)
      # Training moved the clients apart (the mean is not trivial).
      self.assertNotAllClose(first.client_states[0].weights[key],
                             first.client_states[1].weights[key], msg=key)
    second_start, second = _task1(process)
    for key in shared:
      if key == 'embedding':  # not aggregated after task 0
        want = second_start.state.shared[key]
      else:
        want = _weighted_mean(second.client_states, key)
      self.assertAllClose(second.state.shared[key], want, atol=1e-6,
                          rtol=1e-6, msg=key)

  def test_local_trains_alone(self):
    process = _process('local')
    state, _, _, first = _task0(process)
    # The server never changes; each client trains its own model.
    for key in fcl_cnn.shared_keys(process.spec):
      self.assertAllEqual(first.state.shared[key], state.shared[key])
    self.assertNotAllClose(first.client_states[0].weights['conv2/base'],
                           first.client_states[1].weights['conv2/base'])

  @parameterized.named_parameters(
      ('fedavg', 'fedavg'), ('fedseit', 'fedseit'), ('local', 'local'))
  def test_embedding_trained_only_on_first_task(self, method):
    process = _process(method)
    state, clients, _, first = _task0(process)
    for client in first.client_states:
      self.assertNotAllClose(client.weights['embedding'],
                             clients[0].weights['embedding'])
    output, second = _task1(process)
    for c, client in enumerate(output.client_states):
      if method == 'local':  # no server: the client's own embedding
        want = first.client_states[c].weights['embedding']
      else:  # the server's, broadcast at start_task
        want = output.state.shared['embedding']
      self.assertAllEqual(client.weights['embedding'], want)
    received = [c.weights['embedding'] for c in output.client_states]
    server_embedding = output.state.shared['embedding']
    # Two rounds of task 1: `_task1`'s, then one more.
    for output in (second, _round(process, 1, second)):
      for client, want in zip(output.client_states, received):
        self.assertAllEqual(client.weights['embedding'], want)
      # The other weights do train.
      self.assertNotAllClose(output.client_states[0].weights['head/kernel'],
                             first.client_states[0].weights['head/kernel'])
    self.assertAllEqual(output.state.shared['embedding'], server_embedding)
    del state

  @parameterized.named_parameters(
      ('fedavg', 'fedavg'), ('fedseit_sit', 'fedseit_sit'), ('local', 'local'))
  def test_pretrained_embedding_is_never_trained(self, method):
    # Pre-trained vectors (vocab_size 30, D = 4), frozen from the start.
    table = process_fixtures.fcl_pretrained_table(3)
    process = _process(method, train_embedding=False, initial_embedding_seed=3)
    self.assertIs(process.round_computation(0), process.next)
    self.assertIs(process.next_first_task, process.next)  # built once
    state, clients, _, first = _task0(process)
    self.assertAllEqual(state.shared['embedding'], table)
    for before, after in zip(clients, first.client_states):
      self.assertAllEqual(before.weights['embedding'], table)
      self.assertAllEqual(after.weights['embedding'], table)
      # The other weights do train on task 0.
      self.assertNotAllClose(after.weights['head/kernel'],
                             before.weights['head/kernel'])
    self.assertAllEqual(first.state.shared['embedding'], table)

  def test_initial_embedding_of_another_shape_is_refused(self):
    config = fcl.FclConfig(method='fedavg', num_clients=_C,
                           tasks_per_client=_T, train_embedding=False)
    spec = fcl.model_spec(config, vocab_size=30, max_length=8, num_classes=3,
                          embedding_dim=4, filter_widths=_WIDTHS,
                          num_filters=3)
    with self.assertRaisesRegex(ValueError,
                                r'initial_embedding has shape \(30, 5\)'):
      fcl.build_fcl_process(config, spec,
                            initial_embedding=np.zeros([30, 5], _F32))

  def _assert_started(self, before, output, task, kb_keys, kb_slots):
    """Checks start_task's client states against the ones it was given."""
    for c, (old, new) in enumerate(zip(before, output.client_states)):
      self.assertEqual(new.task, task)
      self.assertEqual(new.client_id, c)
      for b, width in enumerate(_WIDTHS):
        kb = new.weights[kb_keys[b]]
        self.assertEqual(kb.shape, (len(kb_slots[c]), width, 4, 3))
        if task == 0:  # nothing stored yet: an empty KB
          self.assertAllEqual(kb, np.zeros_like(kb))
        else:  # the stored A's of the expected slots, in order
          for entry, slot in enumerate(kb_slots[c]):
            self.assertAllEqual(kb[entry],
                                output.state.adaptive_store[b][slot])
        # A_t = B / 5, with the client's own (unchanged) B.
        base = new.weights[f'conv{width}/base']
        self.assertAllEqual(base, old.weights[f'conv{width}/base'])
        self.assertAllClose(new.weights[f'conv{width}/adaptive'][task],
                            base / 5.0, atol=1e-7, rtol=1e-6)
        # θ*_j = B ⊙ σ(m_j) + A_j of the weights before start_task.
        self.assertAllClose(new.snapshots[b],
                            _local_kernels(old.weights, width),
                            atol=1e-6, rtol=1e-6)
      self.assertAllEqual(new.weights['embedding'],
                          output.state.shared['embedding'])
      # Nothing else changes (A_t's other tasks included); Adam restarts.
      for key, value in new.weights.items():
        if key in kb_keys or key == 'embedding':
          continue
        if key.endswith('/adaptive'):
          value = np.delete(value, task, axis=0)
          self.assertAllEqual(value, np.delete(old.weights[key], task, axis=0))
        else:
          self.assertAllEqual(value, old.weights[key], msg=key)
      self.assertEqual(new.optimizer['step'], 0)
      for accumulator in new.optimizer['accumulator']:
        self.assertAllEqual(accumulator, np.zeros_like(accumulator))

  # Client c's KB at task 1 holds the A_0's of slots 2j (j ≠ c, in order),
  # or of every client with kb_include_own.
  @parameterized.named_parameters(
      ('fedweit', 'fedweit', False, [[2, 4], [0, 4], [0, 2]]),
      ('fedweit_own', 'fedweit', True, [[0, 2, 4]] * 3),
      ('fedseit', 'fedseit', False, [[2, 4], [0, 4], [0, 2]]),
      ('fedseit_own', 'fedseit', True, [[0, 2, 4]] * 3),
  )
  def test_start_task(self, method, include_own, kb_slots):
    process = _process(method, kb_include_own=include_own)
    self.assertEqual(process.config.kb_include_own, include_own)
    prefix = 'conv' if method == 'fedweit' else 'foreign'
    kb_keys = [f'{prefix}{w}/kb' for w in _WIDTHS]
    self.assertEqual(fcl_cnn.kb_keys(process.spec), tuple(kb_keys))
    _, clients, started, first = _task0(process)
    self.assertEqual(started.metrics['kb_entries_per_client'], 0.0)
    self._assert_started(clients, started, 0, kb_keys, kb_slots)
    output = _start1(process)
    self.assertEqual(output.metrics['kb_entries_per_client'],
                     len(kb_slots[0]))
    self._assert_started(first.client_states, output, 1, kb_keys, kb_slots)
    # The KB entries are distinct clients' A's.
    store = output.state.adaptive_store[0]
    self.assertNotAllClose(store[0], store[2])
    self.assertNotAllClose(store[2], store[4])

  @parameterized.named_parameters(('fedweit', 'fedweit'),
                                  ('fedseit', 'fedseit'))
  def test_server_stores_pruned_adaptive(self, method):
    process = _process(method)
    _, _, _, first = _task0(process)
    second = _task1(process)[1]
    for output, trained in ((first, [0]), (second, [0, 1])):
      slots = [_slot(c, t) for c in range(_C) for t in trained]
      self.assertAllEqual(output.state.stored,
                          [s in slots for s in range(_C * _T)])
      nonzero = 0
      for b, width in enumerate(_WIDTHS):
        store = output.state.adaptive_store[b]
        for s in range(_C * _T):
          if s not in slots:
            self.assertAllEqual(store[s], np.zeros_like(store[s]))
            continue
          c, t = divmod(s, _T)
          if t == 1 or output is first:
            a = output.client_states[c].weights[f'conv{width}/adaptive'][t]
            want = _prune(a, _SPARSITY)
            # Pruning did zero some entries and kept others.
            self.assertTrue(0 < np.sum(want == 0) < want.size)
          else:  # A_0 of task 0 was stored by the first round
            want = first.state.adaptive_store[b][s]
          self.assertAllEqual(store[s], want)
          if t == len(trained) - 1:
            nonzero += np.count_nonzero(want)
      # Mean over the clients of the non-zeros they sent this round.
      self.assertAllClose(output.metrics['adaptive_nonzero_per_client'],
                          nonzero / _C)

  # Hand derivation for client 0, query R_0^1 = {e1}, τ = 0.7:
  #   slot 0 (own task 0, {e1, e1 + e2}): cos 1 and 1/√2 = 0.7071 > τ:
  #     s = (1 + 0.7071)/2 = 0.8536;
  #   slot 2 (client 1, {e1, e3}): cos 1 and 0: s = 1/2 = 0.5;
  #   slot 4 (client 2, {(4,3,0,0), (3,4,0,0)}): cos 0.8 and 0.6 (<= τ):
  #     s = 0.8/2 = 0.4.
  # (The stale R^0 = {e4} sent at task 0 would score 0 for client 0.)
  @parameterized.named_parameters(
      # Foreign slots 2 (0.5) and 4 (0.4); K = 1: slot 2, α = 1.
      ('top1', 1, False, [2], [1.0]),
      # Own slot 0 too; K = 2: slots 0, 2, α = (0.8536, 0.5)/1.3536.
      ('top2_own', 2, True, [0, 2],
       [(1 + 1 / math.sqrt(2)) / 2 / ((1 + 1 / math.sqrt(2)) / 2 + 0.5),
        0.5 / ((1 + 1 / math.sqrt(2)) / 2 + 0.5)]),
      # Two candidates for K = 3: slots 2, 4, α = (5/9, 4/9); the third KB
      # entry stays empty and its α untouched.
      ('top3', 3, False, [2, 4], [5 / 9, 4 / 9]),
  )
  def test_sit_selection(self, k, include_own, client0_slots, client0_alphas):
    process = _process('fedseit_sit', sit_top_k=k, kb_include_own=include_own)
    self.assertEqual((process.config.sit_top_k, process.config.kb_include_own),
                     (k, include_own))
    state, clients = _initial(process)
    started = _start(process, state, clients, 0,
                     [process.task_start_input(0, [_STALE], [0])] * _C)
    self.assertEqual(started.metrics['kb_entries_per_client'], 0.0)
    # One row of D = 4 floats each.
    self.assertEqual(started.metrics['bytes_up_per_client'], 16.0)
    first = _round(process, 0, started)
    inputs = [process.task_start_input(1, [_REP_TASK0[c], _REP_TASK1[c]],
                                       [0, 1]) for c in range(_C)]
    output = _start(process, first.state, first.client_states, 1, inputs)
    # The server keeps every sent representation (R^0 replaced).
    reps = {}
    for c in range(_C):
      for t, rep in enumerate((_REP_TASK0[c], _REP_TASK1[c])):
        s = _slot(c, t)
        reps[s] = rep
        self.assertEqual(output.state.representation_counts[s], len(rep))
        self.assertAllEqual(output.state.representations[s][:len(rep)], rep)
    # Rows sent: 2 + 1, 2 + 1, 2 + 2, of 16 bytes.
    self.assertAllClose(output.metrics['bytes_up_per_client'],
                        (3 + 3 + 4) * 16 / 3)
    stored = np.asarray(first.state.stored)
    num_valid = 0
    for c, (old, new) in enumerate(zip(first.client_states,
                                       output.client_states)):
      slots, alphas = _reference_selection(reps, stored, c, 1, k,
                                           include_own)
      if c == 0:
        self.assertEqual(slots, client0_slots)
        self.assertAllClose(alphas, client0_alphas, atol=1e-6)
      num_valid += len(slots)
      for b, width in enumerate(_WIDTHS):
        kb = new.weights[f'foreign{width}/kb']
        attention = new.weights[f'foreign{width}/attention']
        old_attention = old.weights[f'foreign{width}/attention']
        for entry in range(k):
          if entry < len(slots):
            self.assertAllEqual(kb[entry],
                                output.state.adaptive_store[b][slots[entry]])
            self.assertAllClose(attention[1, entry], alphas[entry],
                                atol=1e-6, msg=f'client {c} entry {entry}')
          else:  # an empty slot: no KB, α as it was
            self.assertAllEqual(kb[entry], np.zeros_like(kb[entry]))
            self.assertEqual(attention[1, entry], old_attention[1, entry])
        self.assertAllEqual(attention[0], old_attention[0])
    self.assertAllClose(output.metrics['kb_entries_per_client'],
                        num_valid / _C)
    # The KB changes the model: the selected A's are not all zero.
    self.assertGreater(np.abs(output.client_states[0].weights[
        'foreign2/kb'][0]).sum(), 0.0)
    del state

  # Shared floats sent per round (module docstring): with the embedding on
  # task 0, without it later; plus one task's A (60 floats) if decomposed.
  _SHARED_FLOATS = {('fedavg', 0): 186, ('fedavg', 1): 66,
                    ('fedweit', 0): 180, ('fedweit', 1): 60,
                    ('fedseit', 0): 180, ('fedseit', 1): 60}

  @parameterized.named_parameters(
      ('fedavg_nan', 'fedavg', 'nan', 0),
      ('fedweit_nan', 'fedweit', 'nan', 0),
      ('fedavg_empty', 'fedavg', 'empty', 0),
      ('fedweit_empty', 'fedweit', 'empty', 0),
      # A later task: the round without the embedding, with a KB.
      ('fedseit_empty_task1', 'fedseit', 'empty', 1),
  )
  def test_faulty_client(self, method, fault, task):
    """Client 1 has a NaN head (its loss is NaN) or no training example."""
    process = _process(method)
    started = _start1(process) if task == 1 else _task0(process)[2]
    empty = fault == 'empty'
    sizes = (4, 0, 4) if empty else _SIZES
    faulty = list(started.client_states)
    if not empty:
      faulty[1] = _with_nan_head(faulty[1])
    output = _round(process, task, started, faulty, sizes=sizes)
    # An empty client is not faulty: it has no loss to be non-finite.
    self.assertEqual(output.metrics['non_finite_clients'], 0 if empty else 1)
    self._assert_kept_state(output.client_states[1], faulty[1],
                            started.state)
    # ... and the server averages clients 0 and 2 (4 examples each):
    # (4 w_0 + 4 w_2) / 8.
    healthy = [output.client_states[0], output.client_states[2]]
    for key, value in output.state.shared.items():
      self.assertTrue(np.all(np.isfinite(value)), msg=key)
      self.assertAllClose(value, _weighted_mean(healthy, key, (4, 4)),
                          atol=1e-6, rtol=1e-6, msg=key)
    # The same round without client 1 gives the same server state, the same
    # clients 0 and 2, and the same loss.
    alone = process.round_computation(task)(
        started.state, _datasets(task, clients=(0, 2)),
        [started.client_states[0], started.client_states[2]])
    for got, want in zip(tf.nest.flatten(output.state),
                         tf.nest.flatten(alone.state)):
      self.assertAllClose(got, want, atol=1e-6, rtol=0)
    for c, alone_client in zip((0, 2), alone.client_states):
      for got, want in zip(tf.nest.flatten(output.client_states[c]),
                           tf.nest.flatten(alone_client)):
        self.assertAllClose(got, want, atol=1e-6, rtol=0)
    self.assertAllClose(output.metrics['train_loss'],
                        alone.metrics['train_loss'], atol=1e-6, rtol=1e-6)
    # Examples processed: 4 + 8 + 4 (client 1's are trained on, then
    # rejected), or 4 + 0 + 4 for the empty client.
    self.assertEqual(output.metrics['num_examples'], 8.0 if empty else 16.0)
    self.assertEqual(alone.metrics['num_examples'], 8.0)
    # Every client is sent the shared weights; only clients 0 and 2 send.
    floats = self._SHARED_FLOATS[method, task]
    adaptive = 60 if method != 'fedavg' else 0
    self.assertEqual(output.metrics['bytes_down_per_client'], 4.0 * floats)
    self.assertAllClose(output.metrics['bytes_up_per_client'],
                        2 * 4.0 * (floats + adaptive) / 3)
    # The same non-zeros of A as the round of 2, spread over 3 clients.
    self.assertAllClose(3 * output.metrics['adaptive_nonzero_per_client'],
                        2 * alone.metrics['adaptive_nonzero_per_client'])
    if method != 'fedavg':
      # Slots 2c + t of clients 0 and 2 only (task 1: on top of task 0's).
      self.assertAllEqual(
          output.state.stored,
          [True, False, False, False, True, False] if task == 0 else
          [True, True, True, False, True, True])

    # With every client faulty the server keeps its weights.
    if empty:
      output = _round(process, task, started, sizes=(0, 0, 0))
    else:
      output = _round(process, task, started,
                      [_with_nan_head(c) for c in started.client_states])
    self.assertEqual(output.metrics['non_finite_clients'], 0 if empty else 3)
    self.assertEqual(output.metrics['num_examples'], 0.0 if empty else 16.0)
    self.assertEqual(output.metrics['train_loss'], 0.0)
    self.assertEqual(output.metrics['bytes_up_per_client'], 0.0)
    self.assertEqual(output.metrics['adaptive_nonzero_per_client'], 0.0)
    for key, value in output.state.shared.items():
      self.assertAllEqual(value, started.state.shared[key], msg=key)
    for b, store in enumerate(output.state.adaptive_store):
      self.assertAllEqual(store, started.state.adaptive_store[b])
    self.assertAllEqual(output.state.stored, started.state.stored)
    self.assertEqual(output.state.round_num, started.state.round_num + 1)
    if empty:
      for new, old in zip(output.client_states, started.client_states):
        self._assert_kept_state(new, old, started.state)

  def _assert_kept_state(self, new, old, server):
    """A rejected client keeps its state, its shared weights being the
    broadcast ones (the server's)."""
    self.assertEqual(new.client_id, old.client_id)
    self.assertEqual(new.task, old.task)
    for key, value in new.weights.items():
      want = server.shared[key] if key in server.shared else old.weights[key]
      self.assertAllEqual(value, want, msg=key)
    for got, want in zip(tf.nest.flatten((new.snapshots, new.optimizer)),
                         tf.nest.flatten((old.snapshots, old.optimizer))):
      self.assertAllEqual(got, want)

  def test_fedprox(self):
    fedavg = _process('fedavg')
    prox0 = _process('fedprox', proximal_strength=0.0)
    strong = _process('fedprox', proximal_strength=1e4)
    runs = {}
    for name, process in (('fedavg', fedavg), ('prox0', prox0),
                          ('strong', strong)):
      _, _, started, first = _task0(process)
      runs[name] = (started, first, _task1(process)[1])
    # μ = 0: the proximal term adds 0 to every gradient; FedAvg exactly.
    for got, want in zip(runs['prox0'][1:], runs['fedavg'][1:]):
      for a, b in zip(tf.nest.flatten((got.state, got.client_states)),
                      tf.nest.flatten((want.state, want.client_states))):
        self.assertAllEqual(a, b)

    def distance(run):
      # ‖w − w_server‖² over the shared weights after task 0's round.
      started, first, _ = run
      return sum(np.sum((first.state.shared[k] - started.state.shared[k])**2)
                 for k in started.state.shared)

    # A huge μ pulls each client back to the broadcast weights. With Adam
    # every step moves a weight by about the learning rate whatever the
    # gradient's scale, and the first step (at w = w_server, where the
    # proximal gradient is 0) is FedAvg's; from the second step on the
    # proximal gradient μ(w − w_server) dominates and points back. So FedAvg
    # drifts by up to 4 steps (client 1: 8 examples, batches of 2) while
    # FedProx stays within about a step: about 10 times less here.
    self.assertLess(distance(runs['strong']), 0.5 * distance(runs['fedavg']))

  @parameterized.named_parameters(('fedavg', 'fedavg'),
                                  ('fedweit', 'fedweit'),
                                  ('fedseit', 'fedseit'))
  def test_predictor(self, method):
    process = _process(method)
    spec = process.spec
    output = _task1(process)[1]
    ids, _ = _examples(7, 0, 7)
    # One predictor (batches of 3: 3 + 3 + 1 examples) for two clients'
    # weights and both tasks.
    predictor = fcl.Predictor(spec, adaptive_threshold=_SPARSITY,
                              batch_size=3)
    model = fcl_cnn.FclTextCnn(spec)
    for client in output.client_states[:2]:
      # The reference: a fresh Keras model with A pruned (|a| <= λ1 -> 0)
      # in numpy, logits of task t's head.
      for key, variable in model.weight_dict().items():
        value = client.weights[key]
        if key in fcl_cnn.adaptive_keys(spec):
          value = _prune(value, _SPARSITY)
        variable.assign(value)
      logits = {}
      for task in (0, 1):
        want = model((tf.constant(ids), tf.constant(task)),
                     training=False).numpy()
        logits[task] = predictor.logits(client.weights, task, ids)
        self.assertAllClose(logits[task], want, atol=1e-5, rtol=1e-5)
        self.assertAllEqual(predictor.predict(client.weights, task, ids),
                            np.argmax(want, axis=-1))
      # Each task has its own head.
      self.assertNotAllClose(logits[0], logits[1])
    if method != 'fedavg':
      # The threshold matters: unpruned A gives other logits.
      unpruned = fcl.Predictor(spec, adaptive_threshold=0.0)
      self.assertNotAllClose(
          unpruned.logits(output.client_states[0].weights, 1, ids),
          predictor.logits(output.client_states[0].weights, 1, ids))
    empty = np.zeros([0, 8], _I32)
    self.assertEqual(
        predictor.logits(output.client_states[0].weights, 0, empty).shape,
        (0, 3))
    self.assertEqual(
        predictor.predict(output.client_states[0].weights, 0, empty).shape,
        (0,))


if __name__ == '__main__':
  tf.test.main()
