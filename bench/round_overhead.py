"""Benchmark: one TFF round of `build_fl_process` vs a pure-TensorFlow loop.

Both sides do the same work for the same clients: each of `--num_clients`
clients of the r8 demo task (`tff_nlp.experiments.federated_text`) starts
from the same global weights, runs `--local_epochs` passes of SGD over the
same batches with the same `tff.learning.optimizers` optimizer and the same
`from_keras_model` loss, tracks its per-batch losses (Lorar needs max - min),
and the server applies the Lorar-weighted mean delta with server SGD.

*   TFF: `process.next(state, client_data)` in tff_nlp's local C++ context.
*   Pure TF: a `tf.function` per client over a Keras model (what one writes
    by hand without TFF), then the weighted mean and server step in eager
    TensorFlow.

The two are run interleaved, `--repeats` times each after one warm-up round
each (tracing and graph compilation are not part of a steady-state round),
each repeat from the same initial state. Before timing, the benchmark checks
that both produce the same global model (max abs difference printed). It
prints a Markdown table with the median round times and their ratio.

  python bench/round_overhead.py                # or: make bench
  python bench/round_overhead.py --max_concurrent_computation_calls=1

This is a benchmark, not a test: its numbers depend on the machine.
"""

import collections
import json
import os
import platform
import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms
from tff_nlp import models
from tff_nlp.experiments import federated_text
from tff_nlp.runtime import flags as runtime_flags

_DATA_DIR = flags.DEFINE_string(
    'data_dir', None, 'The shared/data folder (default: ../shared/data).')
_NUM_CLIENTS = flags.DEFINE_integer('num_clients', 8, 'Clients per round.')
_LOCAL_EPOCHS = flags.DEFINE_integer('local_epochs', 2, 'Local epochs.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 16, 'Client batch size.')
_EMBEDDING_DIM = flags.DEFINE_integer('embedding_dim', 64, 'Embedding size.')
_LEARNING_RATE = flags.DEFINE_float('learning_rate', 1.0, 'Client SGD rate.')
_REPEATS = flags.DEFINE_integer(
    'repeats', 5, 'Timed rounds of each side (interleaved).')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the split and the model.')
_OUTPUT_JSON = flags.DEFINE_string(
    'output_json', None, 'If set, also write the measurements there.')


def _client_batches(task, batch_size, seed):
  return [
      federated_text.train_dataset(
          client, batch_size=batch_size, shuffle_seed=(seed, client_id)
      )
      for client_id, client in enumerate(task.clients)
  ]


def build_pure_tf_round(spec, *, learning_rate, local_epochs):
  """The hand-written reference round: `(weights, datasets) -> weights`.

  Uses the same Keras model, loss wrapper and optimizer as the TFF process;
  the server step is SGD with learning rate 1 on the Lorar-weighted mean
  delta, i.e. `w - mean(delta)` (FedAvg's default server optimizer).
  """
  model = models.build_model_fn(spec)()
  trainable = tuple(model.trainable_variables)
  optimizer = tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)

  @tf.function
  def client_train(initial_trainable, dataset):
    for v, w in zip(trainable, initial_trainable):
      v.assign(w)
    initial_state = optimizer.initialize(
        tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable))

    def train_on_batch(loop_state, batch):
      num_examples, max_loss, min_loss, opt_state = loop_state
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      grads = tape.gradient(output.loss, trainable)
      opt_state, new_weights = optimizer.next(opt_state, trainable, grads)
      for v, w in zip(trainable, new_weights):
        v.assign(w)
      return (num_examples + tf.cast(output.num_examples, tf.float32),
              tf.maximum(max_loss, output.loss),
              tf.minimum(min_loss, output.loss),
              opt_state)

    # `Dataset.reduce`, not an autograph `for` loop over the dataset: on
    # this model the `for` loop's per-step overhead made the reference
    # round about 1.6x slower, which would flatter TFF.
    num_examples, max_loss, min_loss, _ = dataset.repeat(local_epochs).reduce(
        (tf.constant(0.0), tf.constant(-np.inf), tf.constant(np.inf),
         initial_state),
        train_on_batch)
    delta = tuple(w0 - v for w0, v in zip(initial_trainable, trainable))
    dataset_size = num_examples / local_epochs
    return delta, dataset_size * (max_loss - min_loss)

  def round_fn(global_trainable, datasets):
    deltas, weights = zip(*(client_train(global_trainable, ds)
                            for ds in datasets))
    total = tf.add_n(weights)
    mean_delta = [
        tf.add_n([w * d[i] for w, d in zip(weights, deltas)]) / total
        for i in range(len(global_trainable))
    ]
    return [w - d for w, d in zip(global_trainable, mean_delta)]

  return round_fn


def _timed(fn, times):
  start = time.perf_counter()
  result = fn()
  times.append(time.perf_counter() - start)
  return result


def run(*, data_dir, num_clients, local_epochs, batch_size, embedding_dim,
        learning_rate, repeats, seed):
  """Measures both sides; returns an OrderedDict of the results."""
  task = federated_text.prepare_clients(
      federated_text.ClientDataConfig(num_clients=num_clients),
      data_dir=data_dir, seed=seed)
  spec = task.model_spec(embedding_dim=embedding_dim, seed=seed)
  process = algorithms.build_fl_process(
      models.build_model_fn(spec),
      algorithm='fedavg',
      weighting='lorar',
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=learning_rate),
      with_client_config=True,
  )
  pure_tf_round = build_pure_tf_round(
      spec, learning_rate=learning_rate, local_epochs=local_epochs)

  state = process.initialize()
  initial = [tf.constant(w) for w in
             process.get_model_weights(state).trainable]
  datasets = _client_batches(task, batch_size, seed)
  client_data = [
      algorithms.with_client_config(
          ds, learning_rate=learning_rate, num_epochs=local_epochs)
      for ds in datasets
  ]

  def tff_round():
    return process.next(state, client_data).state

  def tf_round():
    result = pure_tf_round(initial, datasets)
    # Eager ops are asynchronous only on accelerators; reading back makes the
    # timing include all work on any device.
    return [w.numpy() for w in result]

  # Warm-up (tracing, compilation) and the equality check.
  tff_weights = process.get_model_weights(tff_round()).trainable
  tf_weights = tf_round()
  max_abs_diff = max(
      float(np.max(np.abs(np.asarray(a) - b)))
      for a, b in zip(tff_weights, tf_weights))
  max_abs_update = max(
      float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
      for a, b in zip(tff_weights, initial))
  if not max_abs_diff <= 1e-4 * max(1.0, max_abs_update):
    raise AssertionError(
        f'TFF and pure-TF rounds disagree: max |diff| {max_abs_diff:g} '
        f'(max |update| {max_abs_update:g}); the benchmark would compare '
        'different work.')

  tff_times, tf_times = [], []
  for _ in range(repeats):
    _timed(tff_round, tff_times)
    _timed(tf_round, tf_times)
  tff_median = statistics.median(tff_times)
  tf_median = statistics.median(tf_times)
  return collections.OrderedDict(
      num_clients=num_clients,
      client_train_examples=[c.num_train for c in task.clients],
      local_epochs=local_epochs,
      batch_size=batch_size,
      model_parameters=int(sum(np.size(w) for w in initial)),
      repeats=repeats,
      tff_round_seconds=tff_times,
      pure_tf_round_seconds=tf_times,
      tff_median_seconds=tff_median,
      pure_tf_median_seconds=tf_median,
      ratio=tff_median / tf_median,
      max_abs_weight_difference=max_abs_diff,
      max_abs_update=max_abs_update,
      machine=collections.OrderedDict(
          cpus=os.cpu_count(), python=platform.python_version(),
          tensorflow=tf.__version__, tff=tff.__version__),
  )


def markdown(result, max_concurrent_computation_calls) -> str:
  """The result as a Markdown table and a sentence."""
  concurrency = (max_concurrent_computation_calls
                 if max_concurrent_computation_calls > 0 else 'unlimited')
  return '\n'.join([
      f'| clients | examples | epochs | parameters | concurrency '
      '| TFF round (s) | pure TF (s) | ratio |',
      '|---|---|---|---|---|---|---|---|',
      f'| {result["num_clients"]} | {sum(result["client_train_examples"])} '
      f'| {result["local_epochs"]} | {result["model_parameters"]:,} '
      f'| {concurrency} '
      f'| {result["tff_median_seconds"]:.3f} '
      f'| {result["pure_tf_median_seconds"]:.3f} '
      f'| {result["ratio"]:.3f} |',
      '',
      f'Medians of {result["repeats"]} interleaved rounds after one warm-up; '
      f'max |TFF - pure TF| weight difference '
      f'{result["max_abs_weight_difference"]:.2e}.',
  ])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  settings = runtime_flags.settings_from_flags()
  with runtime_flags.context_from_flags():
    result = run(
        data_dir=_DATA_DIR.value,
        num_clients=_NUM_CLIENTS.value,
        local_epochs=_LOCAL_EPOCHS.value,
        batch_size=_BATCH_SIZE.value,
        embedding_dim=_EMBEDDING_DIM.value,
        learning_rate=_LEARNING_RATE.value,
        repeats=_REPEATS.value,
        seed=_SEED.value,
    )
  print(markdown(result, settings.max_concurrent_computation_calls))
  if _OUTPUT_JSON.value:
    with open(_OUTPUT_JSON.value, 'w') as f:
      json.dump(result, f, indent=2)


if __name__ == '__main__':
  app.run(main)
