"""Small processes of every kind, as their tests build them.

Shared by the algorithm tests and by the check of what every process's
clients send (`tests/tff_nlp/analysis/client_flows_all_processes_test.py`): test
files import helper modules like this one, never each other (a test file's
Bazel target carries only itself and `//tests:test_support`).
"""

import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tff_nlp import algorithms
from tff_nlp.algorithms import dynamic_pulling

# ---------------------------------------------------------------------------
# `build_fl_process` on the linear model (tests/tff_nlp/algorithms/fl_process_test.py).

FL_ALGORITHMS = ('fedavg', 'fedopt', 'fedprox')
FL_WEIGHTINGS = ('num_examples', 'uniform', 'loss_reduction', 'lorar')
FL_CLIENT_LEARNING_RATE = 0.05
FL_PROXIMAL_STRENGTH = 0.5  # large enough to move the result well beyond 1e-5


def build_fl(algorithm='fedavg', weighting='lorar', **kwargs):
  kwargs.setdefault(
      'client_optimizer_fn',
      tff.learning.optimizers.build_sgdm(FL_CLIENT_LEARNING_RATE),
  )
  if algorithm == 'fedprox':
    kwargs.setdefault('proximal_strength', FL_PROXIMAL_STRENGTH)
  return algorithms.build_fl_process(
      linear_model.model_fn, algorithm=algorithm, weighting=weighting, **kwargs
  )


# ---------------------------------------------------------------------------
# Dynamic pulling on a chain of four linear Dense layers (3 -> 4 -> 3 -> 2 ->
# 1, MSE); tensors 0-3 are the 'encoder', 4-7 the 'decoder'
# (tests/tff_nlp/algorithms/dynamic_pulling_test.py).

DP_LEARNING_RATE = 0.05
DP_GROUPS = ('encoder',) * 4 + ('decoder',) * 4
# Controllers: the first encoder layer and the last decoder layer.
DP_EXCHANGED = (True, True, False, False, False, False, True, True)
DP_MODES = ('default', 'dp_g', 'dp_l', 'random', 'dp_l_33', 'controllers')
DP_LAYER_SIZES = (3, 4, 3, 2, 1)


def _dp_initial_weights() -> list[np.ndarray]:
  rng = np.random.default_rng(42)
  weights = []
  for fan_in, fan_out in zip(DP_LAYER_SIZES[:-1], DP_LAYER_SIZES[1:]):
    weights.append((0.6 * rng.normal(size=(fan_in, fan_out))).astype(
        np.float32))
    weights.append((0.1 * rng.normal(size=fan_out)).astype(np.float32))
  return weights


DP_INITIAL = _dp_initial_weights()


def dp_model_fn() -> tff.learning.models.VariableModel:
  layers = [tf.keras.Input((DP_LAYER_SIZES[0],))]
  for kernel, bias in zip(DP_INITIAL[::2], DP_INITIAL[1::2]):
    layers.append(tf.keras.layers.Dense(
        kernel.shape[1],
        kernel_initializer=tf.keras.initializers.Constant(kernel),
        bias_initializer=tf.keras.initializers.Constant(bias)))
  return tff.learning.models.from_keras_model(
      tf.keras.Sequential(layers), loss=tf.keras.losses.MeanSquaredError(),
      input_spec=linear_model.INPUT_SPEC)


@functools.lru_cache(maxsize=None)
def build_dynamic_pulling(mode, **kwargs):
  if mode == 'controllers':
    kwargs['exchanged'] = DP_EXCHANGED
  return dynamic_pulling.build_dynamic_pulling_process(
      dp_model_fn, mode=mode, tensor_groups=DP_GROUPS,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          DP_LEARNING_RATE), **kwargs)


def dp_client_data(clients, round_num, data_sizes=None):
  """The dynamic-pulling client data of `linear_model` clients in a round:
  seed (round, k) and, if given, client k's `data_sizes[k]`."""
  return [dynamic_pulling.client_data(
      linear_model.to_dataset(client), seed=(round_num, k),
      data_size=data_sizes[k] if data_sizes else 0.0)
          for k, client in enumerate(clients)]


def trainable_arrays(weights):
  """The trainable tensors of `ModelWeights` as numpy arrays."""
  return [np.asarray(w) for w in weights.trainable]


def dp_weights_type():
  return tff.to_type(tff.learning.models.ModelWeights(
      trainable=[tff.TensorType(np.float32, w.shape) for w in DP_INITIAL],
      non_trainable=[]))


# ---------------------------------------------------------------------------
# Federated continual learning: C = 3 clients, T = 2 tasks, the text CNN at
# tiny shapes (tests/tff_nlp/algorithms/fcl/fcl_test.py).

FCL_NUM_CLIENTS, FCL_TASKS_PER_CLIENT = 3, 2
FCL_WIDTHS = (2, 3)
FCL_LEARNING_RATE = 0.01
FCL_SPARSITY = 0.02  # λ1: prunes a good part of A = B/5 (|B| ~ 0.35)
FCL_DECOMPOSED = ('fedweit', 'fedseit', 'fedseit_sit')


def fcl_pretrained_table(seed: int) -> np.ndarray:
  """Stand-in pre-trained vectors of the tiny model: [30, 4]."""
  return np.random.default_rng(seed).normal(size=(30, 4)).astype(np.float32)


@functools.lru_cache(maxsize=None)
def build_fcl(method, model_aggregator=None, initial_embedding_seed=None,
              **kwargs):
  """The tiny FCL process (cached by its arguments); with an
  `initial_embedding_seed`, the embedding starts at
  `fcl_pretrained_table(seed)`."""
  from tff_nlp.algorithms import fcl  # pylint: disable=g-import-not-at-top
  config_kwargs = dict(learning_rate=FCL_LEARNING_RATE,
                       sparsity=FCL_SPARSITY, sit_top_k=2, sit_max_vectors=4)
  config_kwargs.update(kwargs)
  config = fcl.FclConfig(method=method, num_clients=FCL_NUM_CLIENTS,
                         tasks_per_client=FCL_TASKS_PER_CLIENT,
                         **config_kwargs)
  spec = fcl.model_spec(config, vocab_size=30, max_length=8, num_classes=3,
                        embedding_dim=4, filter_widths=FCL_WIDTHS,
                        num_filters=3, dropout=0.0, seed=1)
  return fcl.build_fcl_process(config, spec,
                               model_aggregator=model_aggregator,
                               initial_embedding=(
                                   None if initial_embedding_seed is None
                                   else fcl_pretrained_table(
                                       initial_embedding_seed)))


# ---------------------------------------------------------------------------
# Vocabulary-sliced FedAvg on a tiny seq2seq model
# (tests/apps/text2sql/vocab_sliced_test.py).

VS_VOCABULARY, VS_MAX_KEYS, VS_HIDDEN = 40, 12, 8
VS_LEARNING_RATE = 0.5


def vs_config():
  # Imported here: seq2seq imports keras-nlp, which the other processes'
  # tests do not need.
  from tff_nlp.models import seq2seq  # pylint: disable=g-import-not-at-top
  return seq2seq.Seq2SeqConfig(
      vocabulary_size=VS_VOCABULARY, num_encoder_layers=1,
      num_decoder_layers=1, num_heads=2, hidden_dim=VS_HIDDEN,
      intermediate_dim=16, dropout=0.0, max_source_length=8,
      max_target_length=8, seed=1)
