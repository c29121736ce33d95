"""Tests of dynamic pulling: types, selection rules, and rounds against numpy.

The model is a chain of four linear Dense layers (3 -> 4 -> 3 -> 2 -> 1,
MSE), whose first two layers are the 'encoder' (tensors 0-3) and last two the
'decoder' (tensors 4-7); the clients are `linear_model.three_clients()`.
`_reference_round` re-implements a round in numpy (float64).
"""

import collections
import dataclasses
import math

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import lorar_reference
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import algorithms
from tff_nlp import templates
from tff_nlp import training
from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.templates import stateful_clients
from tff_nlp.algorithms import tensor_selection
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_layout

_F32, _F64, _I32, _I64 = np.float32, np.float64, np.int32, np.int64
_LR = process_fixtures.DP_LEARNING_RATE
_GROUPS = process_fixtures.DP_GROUPS
_EXCHANGED = process_fixtures.DP_EXCHANGED
_MODES = process_fixtures.DP_MODES
_LAYER_SIZES = process_fixtures.DP_LAYER_SIZES
_INITIAL = process_fixtures.DP_INITIAL
_SIZES = [w.size for w in _INITIAL]


_model_fn = process_fixtures.dp_model_fn
_process = process_fixtures.build_dynamic_pulling


# ---------------------------------------------------------------------------
# The numpy reference.


def _train(start, client):
  """Local SGD of the linear chain; (trained, valid) as in client_work."""
  w = [s.copy() for s in start]
  n = len(client.x)
  finite = True
  with np.errstate(all='ignore'):
    for _ in range(client.num_epochs):
      for first in range(0, n, client.batch_size):
        x = client.x[first:first + client.batch_size].astype(_F64)
        y = client.y[first:first + client.batch_size].astype(_F64)
        activations = [x]
        for kernel, bias in zip(w[::2], w[1::2]):
          activations.append(activations[-1] @ kernel + bias)
        residual = activations[-1] - y
        finite &= bool(np.isfinite(np.mean(residual**2)))
        grad = 2.0 * residual / residual.size
        grads = [None] * len(w)
        for layer in reversed(range(len(w) // 2)):
          grads[2 * layer] = activations[layer].T @ grad
          grads[2 * layer + 1] = grad.sum(axis=0)
          grad = grad @ w[2 * layer].T
        w = [v - client.learning_rate * g for v, g in zip(w, grads)]
  valid = n > 0 and finite and all(np.all(np.isfinite(v)) for v in w)
  return (w if valid else [s.copy() for s in start]), valid


def _reference_mask(norms, seed, mode, split_by='tensors',
                    groups=_GROUPS, sizes=_SIZES):
  """Per group: the k smallest keys by (key, index); see the module doc.

  With split_by='parameters': walking the keys in (key, index) order, each
  tensor that still fits in floor(q·P_g) parameters is below.
  """
  if mode == 'default':
    return np.ones(len(norms), bool)
  if mode == 'controllers':
    return np.array(_EXCHANGED)
  keys = np.asarray(norms)
  if mode == 'random':
    keys = tf.random.stateless_uniform(
        [len(norms)], seed=seed, dtype=tf.float32).numpy()
  q = 1 / 3 if mode == 'dp_l_33' else 1 / 2
  mask = np.zeros(len(norms), bool)
  for group in set(groups):
    indices = np.array([i for i, g in enumerate(groups) if g == group])
    order = indices[np.argsort(keys[indices], kind='stable')]
    if split_by == 'parameters':
      budget = math.floor(sum(sizes[i] for i in indices) * q + 1e-9)
      chosen = []
      for i in order:
        if sizes[i] <= budget:
          chosen.append(i)
          budget -= sizes[i]
      below = np.isin(indices, chosen)
    else:
      k = math.ceil(q * (len(indices) - 1) - 1e-9)
      below = np.isin(indices, order[:k])
    mask[indices] = ~below if mode == 'dp_g' else below
  return mask


@dataclasses.dataclass
class _RefClient:
  weights: list  # float64 arrays
  shared: np.ndarray


def _reference_round(server, states, clients, seeds, *, mode, keep_private,
                     push, data_sizes=None, change_norm='l2',
                     split_by='tensors'):
  """One round in numpy: (server weights, client states, metrics)."""
  num = [np.zeros_like(w) for w in server]
  den = np.zeros(len(server))
  new_states = []
  pulled = pushed = 0
  tensors_sent = collections.Counter()
  data_sizes = data_sizes or [0] * len(clients)
  for state, client, seed, size in zip(states, clients, seeds, data_sizes):
    take = state.shared if keep_private else np.ones(len(server), bool)
    push_mask = state.shared if push == 'shared' else np.ones(len(server),
                                                             bool)
    start = [s if t else p for s, p, t in zip(server, state.weights, take)]
    trained, valid = _train(start, client)
    n = (size or len(client.x)) if valid else 0
    norms = [np.linalg.norm(a - b) / (np.sqrt(a.size) if change_norm == 'rms'
                                      else 1.0)
             for a, b in zip(trained, state.weights)]
    mask = _reference_mask(norms, seed, mode, split_by)
    for t in np.flatnonzero(mask & (n > 0)):
      num[t] += n * trained[t]
      den[t] += n
      pulled += _SIZES[t]
      tensors_sent[_GROUPS[t]] += 1
    pushed += sum(s for s, p in zip(_SIZES, push_mask) if p)
    new_states.append(_RefClient(trained, mask))
  new_server = [a / d if d > 0 else w for a, d, w in zip(num, den, server)]
  k = len(clients)
  metrics = dict(
      parameters_pulled=pulled, parameters_pushed=pushed,
      parameters_pulled_per_client=pulled / k,
      parameters_pushed_per_client=pushed / k,
      bytes_pulled_per_client=4 * pulled / k,
      bytes_pushed_per_client=4 * pushed / k,
      tensors_sent=collections.OrderedDict(
          encoder=tensors_sent['encoder'], decoder=tensors_sent['decoder']),
      tensors_updated=int(np.sum(den > 0)),
  )
  return new_server, new_states, metrics


def _reference_initial_states(num_clients):
  return [_RefClient([w.astype(_F64) for w in _INITIAL],
                     np.ones(len(_INITIAL), bool))
          for _ in range(num_clients)]


# ---------------------------------------------------------------------------
# Helpers for running the process.


def _datasets(clients, round_num, config=False, data_sizes=None):
  data = []
  for k, client in enumerate(clients):
    batches = linear_model.to_dataset(client)
    if config:
      batches = templates.with_client_config(
          batches, learning_rate=client.learning_rate,
          num_epochs=client.num_epochs)
    data.append(dynamic_pulling.client_data(
        batches, seed=(round_num, k),
        data_size=data_sizes[k] if data_sizes else 0.0))
  return data


def _faulty(client, fault):
  """The test hook: the client with a NaN / +Inf label, or without examples.

  'nan' / 'inf': one label becomes NaN, or +Inf (its squared residual, so
  the batch's MSE, is +Inf), in place; `_train` and the process both see a
  non-finite loss and give the client weight 0. 'empty': a new client with
  no example (weight 0 as well, in `_train` because n = 0).
  """
  if fault == 'empty':
    return lorar_reference.Client(
        np.zeros((0, 3), _F32), np.zeros((0, 1), _F32), client.batch_size,
        client.learning_rate, client.num_epochs)
  client.y[1, 0] = {'nan': np.nan, 'inf': np.inf}[fault]
  return client


_trainable = process_fixtures.trainable_arrays


def _client_state(trainable, shared):
  return dynamic_pulling.ClientState(
      weights=tff.learning.models.ModelWeights(
          trainable=[np.asarray(w, _F32) for w in trainable],
          non_trainable=[]),
      shared=np.asarray(shared, np.bool_))


def _with_learning_rate(state, learning_rate):
  return state._replace(client_work=collections.OrderedDict(
      learning_rate=np.float32(learning_rate)))


_weights_type = process_fixtures.dp_weights_type


class DynamicPullingComputationTest(tf.test.TestCase, parameterized.TestCase):

  def test_type_signatures(self):
    process = _process('dp_l')
    self.assertIsInstance(process, tff.templates.IterativeProcess)
    # One server state type for every option (absent parts are <>).
    state = collections.OrderedDict(
        global_model_weights=_weights_type(),
        distributor=(),
        client_work=collections.OrderedDict(learning_rate=_F32),
        aggregator=(), finalizer=(),
        round_num=_I32)
    client_state = tff.FederatedType(
        collections.OrderedDict(weights=_weights_type(),
                                shared=tff.TensorType(np.bool_, [8])),
        tff.CLIENTS)
    data = tff.FederatedType(collections.OrderedDict(
        training_data=tff.SequenceType((tff.TensorType(_F32, [None, 3]),
                                        tff.TensorType(_F32, [None, 1]))),
        seed=tff.TensorType(_I64, [2]), data_size=_F32), tff.CLIENTS)
    weighting = collections.OrderedDict(
        num_clients=_I32, num_examples=_F32, mean_training_loss=_F32,
        mean_loss_reduction=_F32, num_empty_clients=_I32,
        num_non_finite_clients=_I32, fell_back_to_num_examples=_I32,
        weight_sum=_F32, weight_min=_F32, weight_max=_F32, weight_std=_F32)
    metrics = collections.OrderedDict(
        parameters_pulled=_I64, parameters_pushed=_I64,
        parameters_pulled_per_client=_F64, parameters_pushed_per_client=_F64,
        bytes_pulled_per_client=_F64, bytes_pushed_per_client=_F64,
        tensors_sent=collections.OrderedDict(encoder=_I32, decoder=_I32),
        non_finite_clients=_I32,
        train=collections.OrderedDict(loss=_F32, num_examples=_I64,
                                      num_batches=_I64),
        weighting=weighting,
        tensors_updated=_I32)
    server_state = tff.FederatedType(state, tff.SERVER)
    tff.test.assert_types_equivalent(
        process.initialize.type_signature,
        tff.FunctionType(None, server_state))
    tff.test.assert_types_equivalent(
        process.next.type_signature,
        tff.FunctionType(
            collections.OrderedDict(state=server_state, client_data=data,
                                    client_states=client_state),
            collections.OrderedDict(
                state=server_state, client_states=client_state,
                metrics=tff.FederatedType(metrics, tff.SERVER))))
    tff.test.assert_types_equivalent(
        process.get_model_weights.type_signature,
        tff.FunctionType(state, _weights_type()))

  def test_client_config_data_type(self):
    process = _process('dp_l', with_client_config=True)
    expected = tff.FederatedType(collections.OrderedDict(
        training_data=collections.OrderedDict(
            examples=tff.SequenceType((tff.TensorType(_F32, [None, 3]),
                                       tff.TensorType(_F32, [None, 1]))),
            config=tff.SequenceType(collections.OrderedDict(
                learning_rate=_F32, num_epochs=_I32))),
        seed=tff.TensorType(_I64, [2]), data_size=_F32), tff.CLIENTS)
    tff.test.assert_types_equivalent(
        process.next.type_signature.parameter['client_data'], expected)

  @parameterized.named_parameters(
      ('default', 'default', False, 'all'),
      ('dp_g', 'dp_g', True, 'all'),
      ('dp_l', 'dp_l', True, 'all'),
      ('random', 'random', True, 'all'),
      ('dp_l_33', 'dp_l_33', True, 'shared'),
      ('controllers', 'controllers', True, 'shared'),
  )
  def test_defaults(self, mode, keep_private, push):
    process = _process(mode)
    self.assertEqual(process.mode.value, mode)
    self.assertEqual(process.keep_private, keep_private)
    self.assertEqual(process.push.value, push)

  @parameterized.named_parameters(
      ('unknown_mode', dict(mode='dp'), ValueError, "'default', 'dp_g'"),
      ('groups_length', dict(tensor_groups=_GROUPS[:7]), ValueError,
       'tensor_groups has 7 entries'),
      ('controllers_without_mask', dict(mode='controllers'), ValueError,
       'exchanged is needed'),
      ('mask_without_controllers', dict(exchanged=_EXCHANGED), ValueError,
       'exchanged is needed'),
      ('mask_length', dict(mode='controllers', exchanged=_EXCHANGED[:3]),
       ValueError, 'exchanged has 3 entries'),
      ('unknown_push', dict(push='some'), ValueError, "'all', 'shared'"),
      ('push_shared_without_keep_private',
       dict(push='shared', keep_private=False), ValueError, 'keep_private'),
      ('keras_optimizer',
       dict(client_optimizer_fn=tf.keras.optimizers.SGD(0.1)), TypeError,
       'tff.learning.optimizers'),
  )
  def test_invalid_arguments_raise(self, kwargs, error, message):
    arguments = dict(mode='dp_l', tensor_groups=_GROUPS,
                     client_optimizer_fn=tff.learning.optimizers.build_sgdm(
                         _LR))
    arguments.update(kwargs)
    with self.assertRaisesRegex(error, message):
      dynamic_pulling.build_dynamic_pulling_process(_model_fn, **arguments)


class SelectTensorsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  # Interleaved groups: encoder tensors 0, 2, 4, 5 (norms 0.5, 0.1, 2, 0.3;
  # median 0.4), decoder tensors 1, 3, 6 (norms 3, 1, 2; median 2, an odd
  # count). The median of all seven norms, 1.0, would put tensor 0 (0.5) in
  # dp_l and tensor 3 (1.0) in dp_g instead.
  _NORMS = (0.5, 3.0, 0.1, 1.0, 2.0, 0.3, 2.0)
  _GROUPS7 = ('encoder', 'decoder', 'encoder', 'decoder', 'encoder',
              'encoder', 'decoder')

  def _select(self, mode, norms=_NORMS, groups=_GROUPS7, seed=(0, 0),
              **kwargs):
    return tensor_selection.select_tensors(
        tf.constant(norms, tf.float32), tf.constant(seed, tf.int64),
        mode=mode, tensor_groups=groups, **kwargs).numpy().tolist()

  @parameterized.named_parameters(
      # d >= θ_g: encoder 0.5, 2; decoder 3 and the median tensor 2.
      ('dp_g', 'dp_g', [1, 1, 0, 0, 1, 0, 1]),
      # d < θ_g: encoder 0.1, 0.3; decoder 1.
      ('dp_l', 'dp_l', [0, 0, 1, 1, 0, 1, 0]),
      # Below the 1/3 quantiles 0.3 (encoder) and 1.67 (decoder).
      ('dp_l_33', 'dp_l_33', [0, 0, 1, 1, 0, 0, 0]),
      ('default', 'default', [1] * 7),
  )
  def test_rules_on_hand_set_norms(self, mode, expected):
    self.assertEqual(self._select(mode), [bool(e) for e in expected])

  def test_controllers_mask_ignores_norms(self):
    exchanged = [True, False, False, True, False, False, True]
    for norms in (self._NORMS, self._NORMS[::-1]):
      self.assertEqual(
          self._select('controllers', norms, exchanged=exchanged), exchanged)

  @parameterized.named_parameters(
      # All equal: the lower indices count as smaller.
      ('all_equal', (1.0, 1.0, 1.0, 1.0), [1, 1, 0, 0]),
      # Ranks by (d, index): t1 (1), t2 (1), t0 (2), t3 (3).
      ('partial_tie', (2.0, 1.0, 1.0, 3.0), [0, 1, 1, 0]),
      # Zero change (e.g. a round without training): still two of four.
      ('zeros', (0.0, 0.0, 5.0, 0.0), [1, 1, 0, 0]),
  )
  def test_ties_are_broken_by_index_and_modes_are_complements(
      self, norms, dp_l):
    groups = ('encoder',) * 4
    self.assertEqual(self._select('dp_l', norms, groups),
                     [bool(e) for e in dp_l])
    self.assertEqual(self._select('dp_g', norms, groups),
                     [not e for e in dp_l])

  @parameterized.named_parameters(
      ('dp_l', 'dp_l', {1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 36: 18}),
      ('dp_l_33', 'dp_l_33',
       {1: 0, 2: 1, 3: 1, 4: 1, 5: 2, 6: 2, 7: 2, 8: 3, 36: 12}),
  )
  def test_num_below(self, mode, expected):
    self.assertEqual(
        {n: tensor_selection.num_below(n, mode) for n in expected}, expected)

  @parameterized.named_parameters(
      ('dp_g', 'dp_g', 0.5), ('dp_l', 'dp_l', 0.5),
      ('dp_l_33', 'dp_l_33', 1 / 3))
  def test_distinct_norms_follow_numpy_quantiles(self, mode, q):
    rng = np.random.default_rng(0)
    for n_encoder, n_decoder in ((1, 2), (3, 4), (5, 6), (7, 10), (12, 9)):
      groups = ('encoder',) * n_encoder + ('decoder',) * n_decoder
      norms = rng.permutation(rng.uniform(size=len(groups)))
      expected = np.zeros(len(groups), bool)
      for group in ('encoder', 'decoder'):
        index = np.array([g == group for g in groups])
        theta = np.quantile(norms[index], q)
        expected[index] = (norms[index] >= theta if mode == 'dp_g'
                           else norms[index] < theta)
      self.assertEqual(self._select(mode, norms, groups),
                       expected.tolist(), msg=str(groups))

  # Encoder sizes 100, 4, 4, 60, 36 (P 204, budget 102; dp_l_33 68), norms
  # 0.5, 0.1, 0.2, 0.3, 0.4: walked t1 (4, left 98), t2 (4, 94), t3 (60,
  # 34), t4 (36 > 34: skipped), t0 (100: skipped) -> 68 parameters below;
  # dp_l_33: 4, 4, 60 fill 68 exactly. Decoder sizes 10, 30, 20, 40 (P 100,
  # budget 50; 33), norms 4, 1, 3, 2: t1 (30, left 20), t3 (40: skipped),
  # t2 (20, left 0), t0 (10: skipped) -> 50; dp_l_33: t1 (30, left 3), none
  # else fits.
  _SIZES9 = (100, 4, 4, 60, 36, 10, 30, 20, 40)
  _NORMS9 = (0.5, 0.1, 0.2, 0.3, 0.4, 4.0, 1.0, 3.0, 2.0)
  _GROUPS9 = ('encoder',) * 5 + ('decoder',) * 4

  @parameterized.named_parameters(
      ('dp_l', 'dp_l', [0, 1, 1, 1, 0, 0, 1, 1, 0]),
      ('dp_g', 'dp_g', [1, 0, 0, 0, 1, 1, 0, 0, 1]),
      ('dp_l_33', 'dp_l_33', [0, 1, 1, 1, 0, 0, 1, 0, 0]),
  )
  def test_parameter_split_by_hand(self, mode, expected):
    self.assertEqual(
        self._select(mode, self._NORMS9, self._GROUPS9,
                     split_by='parameters', sizes=self._SIZES9),
        [bool(e) for e in expected])

  @parameterized.named_parameters(
      ('dp_l', 'dp_l'), ('dp_g', 'dp_g'), ('dp_l_33', 'dp_l_33'),
      ('random', 'random'))
  def test_parameter_split_follows_numpy_reference(self, mode):
    rng = np.random.default_rng(1)
    for trial in range(6):
      groups = ('encoder',) * (trial + 2) + ('decoder',) * (8 - trial)
      sizes = rng.integers(1, 500, size=len(groups)).tolist()
      norms = rng.uniform(size=len(groups))
      seed = (trial, 7)
      self.assertEqual(
          self._select(mode, norms, groups, seed=seed, split_by='parameters',
                       sizes=sizes),
          _reference_mask(norms, seed, mode, 'parameters', groups,
                          sizes).tolist(), msg=str((groups, sizes)))

  def test_transformer_base_halves_parameters_within_five_percent(self):
    # The paper's model (Table 6: DP_l pulls 22,863,104 of 45,724,160): by
    # tensor count, dp_l sends a small share of the parameters; by
    # parameters, 50 % ± 5 % of each group, whatever the norms.
    layout = seq2seq_layout.tensor_layout(
        seq2seq.Seq2SeqConfig.from_preset('transformer_base'))
    groups = [t.group for t in layout]
    sizes = [t.num_parameters for t in layout]
    rng = np.random.default_rng(0)
    for draw in range(3):
      # Whole-tensor L2 norms of a random change: they grow with size.
      norms = np.sqrt(np.array(sizes)) * rng.uniform(0.5, 1.5, len(sizes))
      for split_by, low, high in (('tensors', 0.0, 0.2),
                                  ('parameters', 0.45, 0.5)):
        mask = np.array(self._select('dp_l', norms, groups, seed=(draw, 0),
                                     split_by=split_by, sizes=sizes))
        for group in set(groups):
          index = np.array([g == group for g in groups])
          share = np.sum(np.array(sizes)[index & mask]) / np.sum(
              np.array(sizes)[index])
          self.assertBetween(share, low, high,
                             msg=f'{split_by} {group} draw {draw}')

  def test_parameter_split_needs_sizes(self):
    with self.assertRaisesRegex(ValueError, 'needs sizes'):
      self._select('dp_l', split_by='parameters')
    with self.assertRaisesRegex(ValueError, 'split_by must be one of'):
      self._select('dp_l', split_by='bytes')

  def test_random_counts_seeds_and_independence_of_norms(self):
    groups = ('encoder',) * 12 + ('decoder',) * 9
    rng = np.random.default_rng(0)
    masks = {}
    for seed in ((1, 2), (1, 3), (7, 0)):
      mask = np.array(self._select('random', rng.uniform(size=21), groups,
                                   seed=seed))
      # As many as dp_l: floor(12/2) and floor(9/2) per group.
      self.assertEqual((mask[:12].sum(), mask[12:].sum()), (6, 4))
      again = self._select('random', rng.uniform(size=21), groups, seed=seed)
      self.assertEqual(mask.tolist(), again)
      masks[seed] = tuple(mask)
    self.assertLen(set(masks.values()), 3)
    counts = np.sum([self._select('random', np.zeros(21), groups, seed=(s, 0))
                     for s in range(60)], axis=0)
    # Every tensor is chosen sometimes, none always.
    self.assertTrue(np.all((counts > 0) & (counts < 60)), msg=str(counts))


class DynamicPullingExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _run(self, process, clients, num_rounds, *, config=False,
           data_sizes=None, change_norm='l2', split_by='tensors'):
    """Runs process and reference; asserts they agree; returns both."""
    state = process.initialize()
    client_states = [dynamic_pulling.initial_client_state(process, state)
                     ] * len(clients)
    server = [w.astype(_F64) for w in _INITIAL]
    reference_states = _reference_initial_states(len(clients))
    for round_num in range(num_rounds):
      output = process.next(
          state, _datasets(clients, round_num, config, data_sizes),
          client_states)
      state, client_states = output.state, output.client_states
      server, reference_states, reference_metrics = _reference_round(
          server, reference_states, clients,
          [(round_num, k) for k in range(len(clients))],
          mode=process.mode.value, keep_private=process.keep_private,
          push=process.push.value, data_sizes=data_sizes,
          change_norm=change_norm, split_by=split_by)
      for key, value in reference_metrics.items():
        self.assertAllClose(output.metrics[key], value, msg=key)
      for got, want in zip(client_states, reference_states):
        self.assertAllEqual(got.shared, want.shared)
        self.assertAllClose(_trainable(got.weights), want.weights, atol=1e-5,
                            rtol=0)
      self.assertAllClose(
          _trainable(dynamic_pulling.get_model_weights(state)), server,
          atol=1e-5, rtol=0)
      self.assertEqual(state.round_num, round_num + 1)
    return output, reference_metrics

  @parameterized.named_parameters(
      [(mode, mode, {}) for mode in _MODES] + [
          ('dp_l_public', 'dp_l', dict(keep_private=False)),
          ('dp_g_push_shared', 'dp_g', dict(push='shared')),
      ])
  def test_two_rounds_match_reference(self, mode, kwargs):
    output, _ = self._run(_process(mode, **kwargs),
                          linear_model.three_clients(), num_rounds=2)
    self.assertEqual(output.metrics['non_finite_clients'], 0)
    self.assertEqual(output.metrics['train']['num_examples'], 21)

  @parameterized.named_parameters(('default', 'default'), ('dp_l', 'dp_l'))
  def test_data_size_weights_match_reference(self, mode):
    # The weights are the given corpus sizes, not the examples trained on
    # (the paper: fixed steps per client, mean weighted by data size).
    self._run(_process(mode), linear_model.three_clients(), num_rounds=2,
              data_sizes=[100.0, 10.0, 1000.0])

  @parameterized.named_parameters(('dp_l', 'dp_l'), ('dp_g', 'dp_g'))
  def test_rms_change_norm_matches_reference(self, mode):
    self._run(_process(mode, change_norm='rms'),
              linear_model.three_clients(), num_rounds=2, change_norm='rms')

  @parameterized.named_parameters(
      ('dp_l', 'dp_l'), ('dp_g', 'dp_g'), ('random', 'random'),
      ('dp_l_33', 'dp_l_33'))
  def test_parameter_split_matches_reference(self, mode):
    # Encoder 12+4+12+3 = 31 parameters (budget 15), decoder 6+2+2+1 = 11
    # (budget 5; 3 for dp_l_33).
    output, _ = self._run(_process(mode, split_by='parameters'),
                          linear_model.three_clients(), num_rounds=2,
                          split_by='parameters')
    pulled = output.metrics['parameters_pulled'] / 3
    if mode == 'dp_g':
      self.assertGreaterEqual(pulled, 42 - 15 - 5)
    else:
      self.assertLessEqual(pulled, 10 + 3 if mode == 'dp_l_33' else 15 + 5)

  def test_client_config_matches_reference(self):
    clients = linear_model.three_clients()
    clients[0].learning_rate, clients[0].num_epochs = 0.02, 2
    clients[2].num_epochs = 3
    self._run(_process('dp_l', with_client_config=True), clients,
              num_rounds=2, config=True)

  @parameterized.named_parameters(
      ('dp_l_33', 'dp_l_33', {}, 1), ('controllers', 'controllers', {}, 2),
      ('dp_l_push_shared', 'dp_l', dict(push='shared'), 2))
  def test_push_shared_sends_what_each_client_shared(self, mode, kwargs,
                                                     per_group):
    process = _process(mode, **kwargs)
    state = process.initialize()
    client_states = [dynamic_pulling.initial_client_state(process)] * 3
    clients = linear_model.three_clients()
    pushed = []
    for round_num in range(2):
      shared = [s.shared for s in client_states]
      output = process.next(state, _datasets(clients, round_num),
                            client_states)
      state, client_states = output.state, output.client_states
      pushed.append(output.metrics['parameters_pushed'])
      # Each client sends `per_group` of the 4 tensors of each group.
      self.assertEqual(output.metrics['tensors_sent'],
                       collections.OrderedDict(encoder=3 * per_group,
                                               decoder=3 * per_group))
    # Round 1: every tensor to every client; round 2: what each sent in 1.
    self.assertEqual(pushed[0], 3 * sum(_SIZES))
    self.assertEqual(pushed[1],
                     sum(np.dot(s, _SIZES) for s in shared))
    self.assertEqual(output.metrics['bytes_pushed_per_client'],
                     4 * pushed[1] / 3)

  def _hand_round(self, process):
    """A round with learning rate 0 from hand-set client states.

    The server has the initial weights W. Client k (n = 7, 4, 10 examples)
    keeps two tensors per group private (shared False) with the value v_k =
    1, 2, 4 everywhere; its other tensors are W + 1. With learning rate 0 the
    trained model is the start model, so with `keep_private` the change norms
    are 0 for the private tensors and > 0 for the others: dp_l sends exactly
    the private tensors.
    """
    private = [(0, 1, 4, 5), (0, 2, 4, 5), (0, 1, 4, 6)]
    values = (1.0, 2.0, 4.0)
    states = []
    for tensors, value in zip(private, values):
      trainable = [np.full_like(w, value) if t in tensors else w + 1.0
                   for t, w in enumerate(_INITIAL)]
      states.append(_client_state(
          trainable, [t not in tensors for t in range(8)]))
    state = _with_learning_rate(process.initialize(), 0.0)
    output = process.next(state, _datasets(linear_model.three_clients(), 0),
                          states)
    return output, private, values

  def test_aggregation_by_hand(self):
    output, private, values = self._hand_round(_process('dp_l'))
    new = _trainable(dynamic_pulling.get_model_weights(output.state))
    expected = {
        0: (7 * 1 + 4 * 2 + 10 * 4) / 21,  # all three clients
        1: (7 * 1 + 10 * 4) / 17,  # clients 0 and 2
        2: 2.0,  # client 1 alone
        3: None,  # nobody: unchanged
        4: (7 * 1 + 4 * 2 + 10 * 4) / 21,
        5: (7 * 1 + 4 * 2) / 11,
        6: 4.0,
        7: None,
    }
    for t, value in expected.items():
      want = _INITIAL[t] if value is None else np.full_like(_INITIAL[t], value)
      self.assertAllClose(new[t], want, atol=1e-6, rtol=0, msg=str(t))
    for k, client_state in enumerate(output.client_states):
      self.assertAllEqual(client_state.shared,
                          [t in private[k] for t in range(8)])
    self.assertEqual(output.metrics['tensors_updated'], 6)
    self.assertEqual(output.metrics['tensors_sent'],
                     collections.OrderedDict(encoder=6, decoder=6))
    self.assertEqual(output.metrics['parameters_pulled'],
                     sum(_SIZES[t] for tensors in private for t in tensors))

  @parameterized.named_parameters(('keep_private', True), ('public', False))
  def test_private_tensors_are_not_overwritten(self, keep_private):
    process = _process('dp_l', keep_private=keep_private)
    output, private, values = self._hand_round(process)
    for k, client_state in enumerate(output.client_states):
      trainable = _trainable(client_state.weights)
      for t in range(8):
        if keep_private and t in private[k]:
          want = np.full_like(_INITIAL[t], values[k])  # its own value
        else:
          want = _INITIAL[t]  # the server's
        self.assertAllClose(trainable[t], want, atol=0, rtol=0)

  def test_default_mode_equals_fedavg(self):
    clients = linear_model.three_clients()
    process = _process('default')
    fedavg = algorithms.build_fl_process(
        _model_fn, algorithm='fedavg', weighting='num_examples',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(_LR))
    state = process.initialize()
    client_states = [dynamic_pulling.initial_client_state(_model_fn)] * 3
    fedavg_state = fedavg.initialize()
    for round_num in range(2):
      data = _datasets(clients, round_num)
      output = process.next(state, data, client_states)
      state, client_states = output.state, output.client_states
      fedavg_state = fedavg.next(
          fedavg_state, [linear_model.to_dataset(c) for c in clients]).state
    self.assertAllClose(
        _trainable(dynamic_pulling.get_model_weights(state)),
        _trainable(fedavg.get_model_weights(fedavg_state)), atol=1e-5, rtol=0)
    self.assertEqual(output.metrics['parameters_pulled'], 3 * sum(_SIZES))

  @parameterized.named_parameters(
      ('dp_l_nan', 'dp_l', 'nan'), ('dp_l_inf', 'dp_l', 'inf'),
      ('default_nan', 'default', 'nan'), ('default_inf', 'default', 'inf'),
      ('dp_l_empty', 'dp_l', 'empty'), ('default_empty', 'default', 'empty'),
      # An empty client that claims a corpus size still weighs 0.
      ('dp_l_empty_data_size', 'dp_l', 'empty', (100.0, 10.0, 1000.0)))
  def test_faulty_client_contributes_nothing(self, mode, fault,
                                             data_sizes=None):
    clients = linear_model.three_clients()
    clients[1] = _faulty(clients[1], fault)
    # The reference gives client 1 weight 0 and its start model back.
    output, _ = self._run(_process(mode), clients, num_rounds=2,
                          data_sizes=data_sizes and list(data_sizes))
    empty = fault == 'empty'
    self.assertEqual(output.metrics['non_finite_clients'], 0 if empty else 1)
    # num_examples weighting: clients 0 and 2 weigh 7 and 10, client 1 0.
    weighting = output.metrics['weighting']
    self.assertEqual(weighting['num_clients'], 3)
    self.assertEqual(weighting['num_empty_clients'], 1 if empty else 0)
    self.assertEqual(weighting['num_non_finite_clients'], 0 if empty else 1)
    self.assertEqual(weighting['weight_sum'], 17.0)
    self.assertEqual(weighting['weight_min'], 0.0)
    self.assertEqual(weighting['weight_max'], 10.0)
    # Examples seen: 7 + 4 + 10, or 7 + 0 + 10 without client 1's.
    self.assertEqual(weighting['num_examples'], 17.0 if empty else 21.0)
    # The model's metrics count the clients that trained: 7 + 10 examples
    # in 3 + 3 batches (batches of 3 and 4).
    self.assertEqual(output.metrics['train']['num_examples'], 17)
    self.assertEqual(output.metrics['train']['num_batches'], 6)
    # Only clients 0 and 2 send: all 4 tensors of each group (default) or
    # floor(4/2) = 2 of them (dp_l); every client is pushed every tensor.
    per_group = 2 * (4 if mode == 'default' else 2)
    self.assertEqual(output.metrics['tensors_sent'], collections.OrderedDict(
        encoder=per_group, decoder=per_group))
    self.assertEqual(output.metrics['parameters_pushed'], 3 * sum(_SIZES))
    if mode == 'default':
      self.assertEqual(output.metrics['parameters_pulled'], 2 * sum(_SIZES))
    global_weights = _trainable(
        dynamic_pulling.get_model_weights(output.state))
    for weights in global_weights:
      self.assertTrue(np.all(np.isfinite(weights)))
    # The same two rounds without client 1 give the same global model.
    healthy, _ = self._run(
        _process(mode), [clients[0], clients[2]], num_rounds=2,
        data_sizes=data_sizes and [data_sizes[0], data_sizes[2]])
    self.assertAllClose(
        _trainable(dynamic_pulling.get_model_weights(healthy.state)),
        global_weights, atol=1e-6, rtol=0)
    self.assertEqual(healthy.metrics['train']['num_examples'], 17)

  @parameterized.named_parameters(
      ('dp_l', 'dp_l', ('nan', 'inf', 'nan')),
      ('default', 'default', ('nan', 'inf', 'nan')),
      ('dp_l_empty', 'dp_l', ('empty',) * 3),
      ('default_empty', 'default', ('empty',) * 3))
  def test_round_with_every_client_faulty_keeps_the_model(self, mode, faults):
    process = _process(mode)
    clients = linear_model.three_clients()
    state = process.initialize()
    client_states = [dynamic_pulling.initial_client_state(process, state)] * 3
    # A healthy first round, so the kept model is not the initial one.
    first = process.next(state, _datasets(clients, 0), client_states)
    clients = [_faulty(c, f) for c, f in zip(clients, faults)]
    output = process.next(first.state, _datasets(clients, 1),
                          first.client_states)
    before = _trainable(dynamic_pulling.get_model_weights(first.state))
    after = _trainable(dynamic_pulling.get_model_weights(output.state))
    self.assertTrue(any(np.any(b != w) for b, w in zip(before, _INITIAL)))
    for got, want in zip(after, before):
      self.assertAllEqual(got, want)  # exactly: no tensor was received
    self.assertEqual(output.state.round_num, 2)
    empty = faults[0] == 'empty'
    self.assertEqual(output.metrics['non_finite_clients'], 0 if empty else 3)
    self.assertEqual(output.metrics['weighting']['num_empty_clients'],
                     3 if empty else 0)
    self.assertEqual(output.metrics['weighting']['weight_sum'], 0.0)
    self.assertEqual(output.metrics['train']['num_examples'], 0)
    self.assertEqual(output.metrics['tensors_updated'], 0)
    self.assertEqual(output.metrics['parameters_pulled'], 0)
    self.assertEqual(output.metrics['tensors_sent'],
                     collections.OrderedDict(encoder=0, decoder=0))
    # Each client keeps its start model (update 0): the server's tensors,
    # or with keep_private its own private ones.
    for old, new in zip(first.client_states, output.client_states):
      for t, (got, own) in enumerate(zip(_trainable(new.weights),
                                         _trainable(old.weights))):
        want = before[t] if old.shared[t] or mode == 'default' else own
        self.assertAllEqual(got, want)
      for weights in _trainable(new.weights):
        self.assertTrue(np.all(np.isfinite(weights)))

  def test_initial_client_state_and_model_weights(self):
    process = _process('dp_l')
    state = process.initialize()
    from_process = dynamic_pulling.initial_client_state(process)
    from_model_fn = dynamic_pulling.initial_client_state(_model_fn)
    self.assertAllEqual(from_process.shared, [True] * 8)
    self.assertAllClose(_trainable(from_process.weights), _INITIAL)
    self.assertAllClose(_trainable(from_model_fn.weights), _INITIAL)
    shifted = tff.learning.models.ModelWeights(
        trainable=[w + 1.0 for w in _INITIAL], non_trainable=[])
    state = process.set_model_weights(state, shifted)
    self.assertAllClose(_trainable(process.get_model_weights(state)),
                        shifted.trainable)
    self.assertAllClose(
        _trainable(dynamic_pulling.initial_client_state(process,
                                                        state).weights),
        shifted.trainable)


class SimulationProcessExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _train(self, output_dir, rounds, **kwargs):
    process = stateful_clients.SimulationProcess(_process('dp_l', **kwargs), 3)
    clients = linear_model.three_clients()
    run = training.run_training(
        process,
        client_data_fn=lambda round_num, ids: [
            _datasets(clients, round_num)[i] for i in ids],
        num_clients=3,
        config=training.LoopConfig(rounds=rounds, progress=False),
        output_dir=output_dir)
    return process, run

  # With server momentum round 2 steps with round 1's accumulator, so a
  # resume that lost it would move the model elsewhere.
  @parameterized.named_parameters(
      ('plain', {}),
      ('server_momentum', dict(server_optimizer_fn=(
          tff.learning.optimizers.build_sgdm(learning_rate=1.0,
                                             momentum=0.9)))))
  def test_resumed_run_equals_uninterrupted_with_client_states(self, kwargs):
    _, straight = self._train(self.create_tempdir().full_path, rounds=2,
                              **kwargs)
    resumed_dir = self.create_tempdir().full_path
    self._train(resumed_dir, rounds=1, **kwargs)
    process, resumed = self._train(resumed_dir, rounds=2, **kwargs)
    self.assertEqual(resumed.resumed_from, 1)
    self.assertAllClose(
        _trainable(process.get_model_weights(resumed.state)),
        _trainable(process.get_model_weights(straight.state)), atol=1e-6)
    for got, want in zip(process.client_model_weights(resumed.state),
                         process.client_model_weights(straight.state)):
      self.assertAllClose(_trainable(got), _trainable(want), atol=1e-6)
    for got, want in zip(resumed.state.clients, straight.state.clients):
      self.assertAllEqual(got.shared, want.shared)
    # The loop recorded the process's own traffic metrics.
    self.assertIn('parameters_pulled', resumed.records[-1]['train'])

  def test_set_model_weights_resets_every_client(self):
    process = stateful_clients.SimulationProcess(_process('dp_l'), 2)
    state = process.initialize()
    weights = process.get_model_weights(state)
    zeros = weights._replace(
        trainable=[np.zeros_like(w) for w in weights.trainable])
    state = process.set_model_weights(state, zeros)
    for client in process.client_model_weights(state):
      for w in client.trainable:
        self.assertAllEqual(w, np.zeros_like(w))

  def test_every_client_takes_part(self):
    process = stateful_clients.SimulationProcess(_process('dp_l'), 3)
    with self.assertRaisesRegex(ValueError, 'clients_per_round=0'):
      process.next(process.initialize(),
                   _datasets(linear_model.three_clients()[:2], 0))


if __name__ == '__main__':
  tf.test.main()
