"""Tests of `build_fl_process`: types, and numbers against Algorithm 1 in numpy."""

import collections
import itertools

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import lorar_reference
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp import algorithms
from tff_nlp.algorithms import fl_process
from tff_nlp import templates
from tff_nlp import analysis

ALGORITHMS = process_fixtures.FL_ALGORITHMS
WEIGHTINGS = process_fixtures.FL_WEIGHTINGS
CLIENT_LEARNING_RATE = process_fixtures.FL_CLIENT_LEARNING_RATE
PROXIMAL_STRENGTH = process_fixtures.FL_PROXIMAL_STRENGTH
# Built processes, one per configuration, shared by this file's tests: a
# process holds no training state (tff_nlp/training/process_cache.py), and
# tracing one costs more than the rounds the tests run with it. Arguments
# that are objects (optimizers, aggregators) key by identity, so only a test
# that passes the very same object shares its process.
_BUILT = {}


def _build(algorithm='fedavg', weighting='lorar', **kwargs):
  key = (algorithm, weighting, tuple(sorted(kwargs.items())))
  try:
    hash(key)
  except TypeError:  # E.g. a Keras optimizer, which the builder rejects.
    return process_fixtures.build_fl(algorithm, weighting, **kwargs)
  if key not in _BUILT:
    _BUILT[key] = process_fixtures.build_fl(algorithm, weighting, **kwargs)
  return _BUILT[key]


def _reference_kwargs(algorithm):
  return dict(
      proximal_strength=PROXIMAL_STRENGTH if algorithm == 'fedprox' else 0.0,
      server_momentum=0.9 if algorithm == 'fedopt' else 0.0,
  )


def _weighting_metrics(output):
  return output.metrics['client_work']['weighting']


_F32 = np.float32
_I32 = np.int32
_I64 = np.int64


def _expected_metrics_type():
  return collections.OrderedDict(
      distributor=(),
      client_work=collections.OrderedDict(
          train=collections.OrderedDict(
              loss=_F32, num_examples=_I64, num_batches=_I64
          ),
          weighting=collections.OrderedDict(
              num_clients=_I32,
              num_examples=_F32,
              mean_training_loss=_F32,
              mean_loss_reduction=_F32,
              num_empty_clients=_I32,
              num_non_finite_clients=_I32,
              fell_back_to_num_examples=_I32,
              weight_sum=_F32,
              weight_min=_F32,
              weight_max=_F32,
              weight_std=_F32,
          ),
      ),
      aggregator=collections.OrderedDict(mean_value=(), mean_weight=()),
      finalizer=collections.OrderedDict(update_non_finite=_I32),
  )


def _expected_state_type(finalizer_state):
  return tff.learning.templates.LearningAlgorithmState(
      global_model_weights=linear_model.weights_type(),
      distributor=(),
      client_work=collections.OrderedDict(learning_rate=_F32),
      aggregator=collections.OrderedDict(
          value_sum_process=(), weight_sum_process=()
      ),
      finalizer=finalizer_state,
  )


class BuildFlProcessComputationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('fedavg', 'fedavg', collections.OrderedDict(learning_rate=_F32)),
      (
          'fedopt',
          'fedopt',
          collections.OrderedDict(
              learning_rate=_F32,
              momentum=_F32,
              accumulator=[
                  tff.TensorType(_F32, [3, 1]),
                  tff.TensorType(_F32, [1]),
              ],
          ),
      ),
  )
  def test_next_type_signature(self, algorithm, finalizer_state):
    process = _build(algorithm, 'lorar')
    state_type = tff.FederatedType(
        _expected_state_type(finalizer_state), tff.SERVER
    )
    expected = tff.FunctionType(
        parameter=collections.OrderedDict(
            state=state_type,
            client_data=tff.FederatedType(
                tff.SequenceType(
                    (
                        tff.TensorType(_F32, [None, 3]),
                        tff.TensorType(_F32, [None, 1]),
                    )
                ),
                tff.CLIENTS,
            ),
        ),
        result=tff.learning.templates.LearningProcessOutput(
            state=state_type,
            metrics=tff.FederatedType(_expected_metrics_type(), tff.SERVER),
        ),
    )
    self.assertIsInstance(process, tff.learning.templates.LearningProcess)
    tff.test.assert_types_equivalent(process.next.type_signature, expected)
    tff.test.assert_types_equivalent(
        process.get_model_weights.type_signature,
        tff.FunctionType(
            _expected_state_type(finalizer_state), linear_model.weights_type()
        ),
    )

  def test_client_config_data_type(self):
    process = _build(with_client_config=True)
    expected = tff.FederatedType(
        collections.OrderedDict(
            examples=tff.SequenceType(
                (
                    tff.TensorType(_F32, [None, 3]),
                    tff.TensorType(_F32, [None, 1]),
                )
            ),
            config=tff.SequenceType(
                collections.OrderedDict(learning_rate=_F32, num_epochs=_I32)
            ),
        ),
        tff.CLIENTS,
    )
    tff.test.assert_types_equivalent(
        process.next.type_signature.parameter[1], expected
    )

  def test_client_outputs_next_type_signature(self):
    process = _build('fedavg', 'lorar', client_outputs=True)
    default = _build('fedavg', 'lorar')
    self.assertIsInstance(process, algorithms.FLProcess)
    self.assertIsInstance(process, tff.learning.templates.LearningProcess)
    self.assertNotIsInstance(default, algorithms.FLProcess)
    state_type = tff.FederatedType(
        _expected_state_type(collections.OrderedDict(learning_rate=_F32)),
        tff.SERVER,
    )
    client_outputs_type = tff.FederatedType(
        collections.OrderedDict(
            [(key, _F32) for key in templates.CLIENT_STAT_KEYS]
            + [('weight', _F32),
               # One loss per batch: as many as the client's batches.
               ('batch_losses', tff.TensorType(np.float32, [None]))]
        ),
        tff.CLIENTS,
    )
    # (<S@SERVER, {D}@CLIENTS> -> <state=S@SERVER, metrics=M@SERVER,
    #   client_outputs={C}@CLIENTS>): one `next`, no twin.
    expected = tff.FunctionType(
        parameter=collections.OrderedDict(
            state=state_type,
            client_data=tff.FederatedType(
                tff.SequenceType(
                    (
                        tff.TensorType(_F32, [None, 3]),
                        tff.TensorType(_F32, [None, 1]),
                    )
                ),
                tff.CLIENTS,
            ),
        ),
        result=fl_process.FLProcessOutput(
            state=state_type,
            metrics=tff.FederatedType(_expected_metrics_type(), tff.SERVER),
            client_outputs=client_outputs_type,
        ),
    )
    tff.test.assert_types_equivalent(process.next.type_signature, expected)
    self.assertIs(process.next.type_signature.result.python_container,
                  fl_process.FLProcessOutput)
    self.assertFalse(hasattr(process, 'next_with_client_outputs'))
    # The default process's other computations, unchanged.
    for name in ('initialize', 'get_model_weights', 'set_model_weights',
                 'get_hparams', 'set_hparams'):
      tff.test.assert_types_equivalent(
          getattr(process, name).type_signature,
          getattr(default, name).type_signature)
    tff.test.assert_types_equivalent(
        process.next.type_signature.parameter,
        default.next.type_signature.parameter)

  @parameterized.named_parameters(
      (f'{a}_{w}', a, w) for a, w in itertools.product(ALGORITHMS, WEIGHTINGS)
  )
  def test_only_scalars_reach_server_outside_the_aggregator(
      self, algorithm, weighting
  ):
    process = _build(algorithm, weighting)
    aggregator = tff.aggregators.MeanFactory().create(
        linear_model.weights_type().trainable, tff.TensorType(_F32)
    )
    round_flows = collections.Counter(
        str(f) for f in analysis.client_to_server_flows(process.next)
    )
    aggregator_flows = collections.Counter(
        str(f) for f in analysis.client_to_server_flows(aggregator.next)
    )
    # The aggregator's flows are the weighted sum of deltas and of weights.
    self.assertEqual(
        aggregator_flows,
        collections.Counter(['federated_sum(<float32[3,1],float32[1]>)',
                             'federated_sum(float32)']),
    )
    self.assertEqual(round_flows & aggregator_flows, aggregator_flows)
    other_flows = [
        f
        for f in analysis.client_to_server_flows(process.next)
        if str(f) not in aggregator_flows
    ]
    self.assertNotEmpty(other_flows)  # metrics and weighting statistics
    for flow in other_flows:
      self.assertTrue(flow.is_scalar_only, msg=str(flow))

  @parameterized.named_parameters(
      ('algorithm', dict(algorithm='fedsgd'), "'fedavg', 'fedopt', 'fedprox'"),
      (
          'weighting',
          dict(weighting='examples'),
          "'num_examples', 'uniform', 'loss_reduction', 'lorar'",
      ),
  )
  def test_unknown_name_raises_listing_valid_names(self, kwargs, valid_names):
    arguments = dict(algorithm='fedavg', weighting='lorar')
    arguments.update(kwargs)
    with self.assertRaisesRegex(ValueError, 'expected one of: ' + valid_names):
      _build(**arguments)

  @parameterized.named_parameters(
      ('fedprox_without_mu', 'fedprox', 0.0),
      ('fedavg_with_mu', 'fedavg', 0.1),
      ('fedopt_with_mu', 'fedopt', 0.1),
  )
  def test_proximal_strength_must_fit_algorithm(self, algorithm, mu):
    with self.assertRaisesRegex(ValueError, 'proximal_strength'):
      _build(algorithm, proximal_strength=mu)

  def test_keras_optimizer_is_rejected(self):
    with self.assertRaisesRegex(TypeError, 'tff.learning.optimizers'):
      _build(client_optimizer_fn=tf.keras.optimizers.SGD(0.1))


class BuildFlProcessExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _run_and_compare(self, process, clients, datasets, *, weighting,
                       num_rounds, **reference_kwargs):
    state = process.initialize()
    reference = linear_model.initial_state()
    for _ in range(num_rounds):
      output = process.next(state, datasets)
      state = output.state
      reference, rounds, info = lorar_reference.run_round(
          reference, clients, weighting=weighting, **reference_kwargs
      )
    kernel, bias = linear_model.global_weights(process, state)
    self.assertAllClose(kernel, reference.w, atol=1e-5, rtol=0)
    self.assertAllClose(bias, reference.b, atol=1e-5, rtol=0)
    return output, rounds, info

  @parameterized.named_parameters(
      (f'{a}_{w}', a, w) for a, w in itertools.product(ALGORITHMS, WEIGHTINGS)
  )
  def test_two_rounds_match_numpy_algorithm_1(self, algorithm, weighting):
    clients = linear_model.three_clients()
    datasets = [linear_model.to_dataset(c) for c in clients]
    output, rounds, info = self._run_and_compare(
        _build(algorithm, weighting),
        clients,
        datasets,
        weighting=weighting,
        num_rounds=2,
        **_reference_kwargs(algorithm),
    )
    metrics = _weighting_metrics(output)
    weights = info['weights']
    self.assertAllClose(metrics['weight_sum'], weights.sum(), rtol=1e-5)
    self.assertAllClose(metrics['weight_min'], weights.min(), rtol=1e-5)
    self.assertAllClose(metrics['weight_max'], weights.max(), rtol=1e-5)
    self.assertAllClose(metrics['weight_std'], weights.std(), rtol=1e-4)
    self.assertEqual(metrics['num_examples'], 21)
    self.assertEqual(metrics['fell_back_to_num_examples'], 0)
    batch_losses = [loss for r in rounds for loss in r.batch_losses]
    example_counts = [3, 3, 1, 2, 2, 4, 4, 2]  # batch sizes, in batch order
    self.assertAllClose(
        metrics['mean_training_loss'],
        np.dot(batch_losses, example_counts) / 21,
        rtol=1e-5,
    )

  @parameterized.named_parameters(('lorar', 'lorar'),
                                  ('num_examples', 'num_examples'))
  def test_per_client_learning_rates_and_epochs(self, weighting):
    clients = [
        linear_model.make_client(7, 3, seed=1, learning_rate=0.1, num_epochs=2),
        linear_model.make_client(4, 2, seed=2, learning_rate=0.01, num_epochs=1),
        linear_model.make_client(10, 4, seed=3, learning_rate=0.05,
                                 num_epochs=3),
    ]
    datasets = [
        templates.with_client_config(
            linear_model.to_dataset(c),
            learning_rate=c.learning_rate,
            num_epochs=c.num_epochs,
        )
        for c in clients
    ]
    process = _build('fedavg', weighting, with_client_config=True,
                     client_outputs=True)
    output = process.next(process.initialize(), datasets)
    reference, rounds, info = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting=weighting
    )
    kernel, bias = linear_model.global_weights(process, output.state)
    self.assertAllClose(kernel, reference.w, atol=1e-5, rtol=0)
    self.assertAllClose(bias, reference.b, atol=1e-5, rtol=0)
    client_outputs = output.client_outputs
    # |D_i| is one epoch even though the client trained several.
    self.assertEqual([o['dataset_size'] for o in client_outputs], [7, 4, 10])
    self.assertEqual([o['num_examples'] for o in client_outputs], [14, 4, 30])
    self.assertAllClose([o['weight'] for o in client_outputs], info['weights'],
                        rtol=1e-5)
    self.assertAllClose(
        [o['loss_reduction'] for o in client_outputs],
        [r.loss_reduction for r in rounds],
        rtol=1e-5,
    )

  def test_client_outputs_match_reference_and_next(self):
    clients = linear_model.three_clients()
    datasets = [linear_model.to_dataset(c) for c in clients]
    process = _build('fedprox', 'lorar', client_outputs=True)
    default = _build('fedprox', 'lorar')
    with_outputs = process.next(process.initialize(), datasets)
    plain = default.next(default.initialize(), datasets)
    # The library's composition and TFF's give the same round.
    tf.nest.map_structure(
        self.assertAllEqual,
        with_outputs.metrics,
        plain.metrics,
    )
    tf.nest.map_structure(
        self.assertAllEqual,
        process.get_model_weights(with_outputs.state).trainable,
        default.get_model_weights(plain.state).trainable,
    )
    _, rounds, info = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting='lorar',
        **_reference_kwargs('fedprox'))
    for output, reference, weight in zip(
        with_outputs.client_outputs, rounds, info['weights']
    ):
      losses = reference.batch_losses
      self.assertAllClose(
          [output['first_batch_loss'], output['last_batch_loss'],
           output['max_batch_loss'], output['min_batch_loss'],
           output['loss_reduction'], output['weight']],
          [losses[0], losses[-1], max(losses), min(losses),
           max(losses) - min(losses), weight],
          rtol=1e-5,
      )
      self.assertEqual(output['num_batches'], len(losses))
      # Every batch's loss, in training order (the numpy reference's).
      self.assertAllClose(output['batch_losses'], losses, rtol=1e-5)

  @parameterized.named_parameters(('lorar', 'lorar'),
                                  ('loss_reduction', 'loss_reduction'))
  def test_all_loss_reductions_zero_falls_back_to_num_examples(self, weighting):
    # One batch per client: max = min, so every ΔL is 0 and ΣΔL cannot
    # normalise; the round must use |D_i| = 3, 2, 5 instead.
    clients = [
        linear_model.make_client(3, 3, seed=1),
        linear_model.make_client(2, 4, seed=2),
        linear_model.make_client(5, 8, seed=3),
    ]
    datasets = [linear_model.to_dataset(c) for c in clients]
    output, _, info = self._run_and_compare(
        _build('fedavg', weighting), clients, datasets,
        weighting=weighting, num_rounds=1,
    )
    self.assertTrue(info['fell_back'])
    metrics = _weighting_metrics(output)
    self.assertEqual(metrics['fell_back_to_num_examples'], 1)
    self.assertEqual(metrics['weight_sum'], 10.0)  # 3 + 2 + 5
    self.assertEqual(metrics['mean_loss_reduction'], 0.0)

  def test_without_fallback_all_zero_round_keeps_the_model(self):
    # The same one-batch clients: every Lorar weight is 0, the weighted mean
    # is 0/0 and the finalizer must leave the initial model in place.
    clients = [
        linear_model.make_client(3, 3, seed=1),
        linear_model.make_client(2, 4, seed=2),
        linear_model.make_client(5, 8, seed=3),
    ]
    datasets = [linear_model.to_dataset(c) for c in clients]
    process = _build('fedavg', 'lorar', num_examples_fallback=False)
    state = process.initialize()
    output = process.next(state, datasets)
    metrics = _weighting_metrics(output)
    self.assertEqual(metrics['fell_back_to_num_examples'], 0)
    self.assertEqual(metrics['weight_sum'], 0.0)
    self.assertEqual(output.metrics['finalizer']['update_non_finite'], 1)
    kernel, bias = linear_model.global_weights(process, output.state)
    self.assertAllEqual(kernel, linear_model.INITIAL_KERNEL)
    self.assertAllEqual(bias, linear_model.INITIAL_BIAS)

  def test_without_fallback_lorar_round_matches_the_reference(self):
    clients = linear_model.three_clients()
    datasets = [linear_model.to_dataset(c) for c in clients]
    process = _build('fedavg', 'lorar', num_examples_fallback=False)
    output = process.next(process.initialize(), datasets)
    reference, _, info = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting='lorar')
    self.assertFalse(info['fell_back'])
    kernel, _ = linear_model.global_weights(process, output.state)
    self.assertAllClose(kernel, reference.w, atol=1e-5, rtol=0)

  def test_single_batch_client_gets_zero_lorar_weight(self):
    clients = linear_model.three_clients()[:2] + [
        linear_model.make_client(5, 8, seed=4)  # one batch: ΔL = 0
    ]
    datasets = [linear_model.to_dataset(c) for c in clients]
    process = _build('fedavg', 'lorar', client_outputs=True)
    output = process.next(process.initialize(), datasets)
    reference, _, info = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting='lorar')
    self.assertEqual(info['weights'][2], 0.0)
    self.assertFalse(info['fell_back'])
    self.assertEqual(output.client_outputs[2]['weight'], 0.0)
    self.assertEqual(output.client_outputs[2]['num_batches'], 1)
    kernel, _ = linear_model.global_weights(process, output.state)
    self.assertAllClose(kernel, reference.w, atol=1e-5, rtol=0)

  @parameterized.named_parameters(
      ('nan_labels', 'nan'),
      ('overflowing_loss', 'overflow'),
  )
  def test_non_finite_client_gets_zero_weight(self, fault):
    clients = linear_model.three_clients()
    if fault == 'nan':
      clients[1].y[1, 0] = np.nan
    else:  # finite data whose squared residuals overflow float32
      clients[1].x[:] = 1e20
    datasets = [linear_model.to_dataset(c) for c in clients]
    process = _build('fedopt', 'lorar', client_outputs=True)
    output = process.next(process.initialize(), datasets)
    client_outputs = output.client_outputs
    self.assertEqual(client_outputs[1]['is_non_finite'], 1.0)
    self.assertEqual(client_outputs[1]['weight'], 0.0)
    metrics = _weighting_metrics(output)
    self.assertEqual(metrics['num_non_finite_clients'], 1)
    self.assertTrue(np.isfinite(metrics['mean_training_loss']))
    kernel, bias = linear_model.global_weights(process, output.state)
    # The healthy clients alone decide the round.
    reference, _, _ = lorar_reference.run_round(
        linear_model.initial_state(), [clients[0], clients[2]],
        weighting='lorar', server_momentum=0.9)
    self.assertAllClose(kernel, reference.w, atol=1e-5, rtol=0)
    self.assertAllClose(bias, reference.b, atol=1e-5, rtol=0)

  @parameterized.named_parameters(('lorar', 'lorar'),
                                  ('num_examples', 'num_examples'),
                                  ('uniform', 'uniform'))
  def test_empty_client_gets_zero_weight(self, weighting):
    clients = linear_model.three_clients()
    empty = lorar_reference.Client(
        np.zeros((0, 3), np.float32), np.zeros((0, 1), np.float32), 2, 0.05)
    datasets = [linear_model.to_dataset(c) for c in clients + [empty]]
    process = _build('fedavg', weighting, client_outputs=True)
    output = process.next(process.initialize(), datasets)
    self.assertEqual(output.client_outputs[3]['is_empty'], 1.0)
    self.assertEqual(output.client_outputs[3]['weight'], 0.0)
    self.assertEqual(_weighting_metrics(output)['num_empty_clients'], 1)
    reference, _, _ = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting=weighting)
    kernel, _ = linear_model.global_weights(process, output.state)
    self.assertAllClose(kernel, reference.w, atol=1e-5, rtol=0)

  def test_round_with_every_client_rejected_keeps_model_and_momentum(self):
    clients = linear_model.three_clients()
    process = _build('fedopt', 'lorar')
    state = process.next(
        process.initialize(), [linear_model.to_dataset(c) for c in clients]
    ).state
    for client in clients:
      client.y[0, 0] = np.nan
    output = process.next(state, [linear_model.to_dataset(c) for c in clients])
    self.assertEqual(_weighting_metrics(output)['num_non_finite_clients'], 3)
    self.assertEqual(output.metrics['finalizer']['update_non_finite'], 1)
    tf.nest.map_structure(self.assertAllEqual, output.state.finalizer,
                          state.finalizer)
    tf.nest.map_structure(
        self.assertAllEqual,
        process.get_model_weights(output.state).trainable,
        process.get_model_weights(state).trainable,
    )

  @parameterized.named_parameters(
      ('sgd', tff.learning.optimizers.build_sgdm(0.05)),
      ('sgd_momentum', tff.learning.optimizers.build_sgdm(0.05, momentum=0.9)),
      ('adam', tff.learning.optimizers.build_adam(0.05)),
      ('adafactor', tff.learning.optimizers.build_adafactor(0.05)),
      ('yogi', tff.learning.optimizers.build_yogi(0.05)),
  )
  def test_client_optimizer_matches_local_training(self, optimizer):
    # With one client, FedAvg's new global model is the locally trained model;
    # the reference trains it in eager TF with the same optimizer.
    client = linear_model.make_client(9, 2, seed=5)
    process = _build('fedavg', 'lorar', client_optimizer_fn=optimizer)
    state = process.next(process.initialize(),
                         [linear_model.to_dataset(client)]).state

    keras_model = linear_model.model_fn()
    weights = tuple(keras_model.trainable_variables)
    optimizer_state = optimizer.initialize(
        tuple(tf.TensorSpec(v.shape, v.dtype) for v in weights))
    for x, y in linear_model.to_dataset(client):
      with tf.GradientTape() as tape:
        loss = keras_model.forward_pass((x, y), training=True).loss
      gradients = tape.gradient(loss, weights)
      optimizer_state, new_weights = optimizer.next(
          optimizer_state, weights, gradients)
      for variable, value in zip(weights, new_weights):
        variable.assign(value)
    kernel, bias = linear_model.global_weights(process, state)
    self.assertAllClose(kernel, weights[0].numpy(), atol=1e-6, rtol=0)
    self.assertAllClose(bias, weights[1].numpy(), atol=1e-6, rtol=0)
    self.assertNotAllClose(kernel, linear_model.INITIAL_KERNEL)

  def test_clipping_aggregator_composes(self):
    clip = 0.01
    clients = linear_model.three_clients()
    process = _build(
        'fedavg', 'lorar',
        model_aggregator=tff.aggregators.clipping_factory(
            clip, tff.aggregators.MeanFactory()),
    )
    state = process.next(
        process.initialize(), [linear_model.to_dataset(c) for c in clients]
    ).state
    # Reference: each Δ_i clipped to global L2 norm `clip`, then the
    # Lorar-weighted mean.
    _, rounds, info = lorar_reference.run_round(
        linear_model.initial_state(), clients, weighting='lorar')
    weights = info['weights']
    clipped = []
    for r in rounds:
      norm = np.sqrt(np.sum(r.delta_w**2) + np.sum(r.delta_b**2))
      scale = min(1.0, clip / norm)
      clipped.append((scale * r.delta_w, scale * r.delta_b))
    mean_w = sum(p * d[0] for p, d in zip(weights, clipped)) / weights.sum()
    kernel, _ = linear_model.global_weights(process, state)
    self.assertAllClose(
        kernel, linear_model.INITIAL_KERNEL - mean_w, atol=1e-6, rtol=0)

  def test_unweighted_dp_aggregator_composes_and_ignores_weights(self):
    # tff.learning.dp_aggregator is unweighted: wrapped with
    # as_weighted_aggregator it drops the update weights, so Lorar and
    # num_examples weighting give the same model. Noise 0 keeps it exact.
    clients = linear_model.three_clients()
    kernels = []
    for weighting in ('lorar', 'num_examples'):
      dp = tff.aggregators.as_weighted_aggregator(
          tff.learning.dp_aggregator(noise_multiplier=0.0,
                                     clients_per_round=3))
      process = _build('fedavg', weighting, model_aggregator=dp)
      output = process.next(
          process.initialize(), [linear_model.to_dataset(c) for c in clients])
      self.assertIn('dp_query_metrics', output.metrics['aggregator']['zeroing'])
      kernels.append(linear_model.global_weights(process, output.state)[0])
    self.assertAllClose(kernels[0], kernels[1], atol=1e-7, rtol=0)
    self.assertNotAllClose(kernels[0], linear_model.INITIAL_KERNEL)


if __name__ == '__main__':
  tf.test.main()
