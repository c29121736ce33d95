"""Benchmark: one training step of the text-to-SQL parser with and without XLA.

Issue 22 asks to compile the client step (`jit_compile`) where it is faster.
This times the cpu preset's model (2+2 layers, d=128, copying, K=1,100
output words) on batches of 32 at three (source, target) lengths, the same
random batches for both, alternating XLA and plain TensorFlow in each
repeat so that a drift of the machine's speed hits both; it prints the
first-call (trace or compile) time and the median time of 9 steps, and
their ratio.

  .venv/bin/python -m apps.text2sql.bin.seq2seq_xla_step

Measured on 2 shared cores (docs/results/text2sql.md): XLA 1.25x slower
per step, and 271 s of compilation for three shapes against 50 s of
tracing, so the client step is not compiled.
"""

import time

from absl import app
import numpy as np
import tensorflow as tf

from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_loss

_SHAPES = ((40, 30), (60, 40), (80, 60))  # (source, target) tokens
_BATCH = 32
_REPEATS = 4


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  config = seq2seq.Seq2SeqConfig.from_preset(
      'small', vocabulary_size=6000, num_encoder_layers=2,
      num_decoder_layers=2, hidden_dim=128, num_heads=4,
      intermediate_dim=512, dropout=0.1, max_source_length=512,
      max_target_length=448, copy_from_source=True,
      output_vocabulary_size=1100)
  model = seq2seq.build_keras_model(config)
  loss_fn = seq2seq_loss.masked_loss()
  rng = np.random.default_rng(0)
  batches = [({seq2seq.ENCODER_TOKEN_IDS: tf.constant(
      rng.integers(4, 6000, (_BATCH, s)), tf.int32),
               seq2seq.DECODER_TOKEN_IDS: tf.constant(
                   rng.integers(4, 1100, (_BATCH, t)), tf.int32)},
              tf.constant(rng.integers(4, 1100, (_BATCH, t)), tf.int32))
             for s, t in _SHAPES]

  def make_step(jit_compile):
    optimizer = tf.keras.optimizers.Adam(1e-3)

    @tf.function(jit_compile=jit_compile, reduce_retracing=True)
    def step(x, y):
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      gradients = tape.gradient(loss, model.trainable_variables)
      optimizer.apply_gradients(zip(gradients, model.trainable_variables))
      return loss

    return step

  steps = {jit: make_step(jit) for jit in (False, True)}
  for jit, step in steps.items():
    start = time.perf_counter()
    for x, y in batches:
      step(x, y).numpy()
    print(f'jit_compile={jit}: first calls {time.perf_counter() - start:.1f} s')
  times = {False: [], True: []}
  for _ in range(_REPEATS):
    for jit, step in steps.items():
      start = time.perf_counter()
      for x, y in batches:
        for _ in range(3):
          step(x, y).numpy()
      times[jit].append(time.perf_counter() - start)
  for jit, values in times.items():
    print(f'jit_compile={jit}: median of {_REPEATS} x 9 steps '
          f'{np.median(values):.2f} s')
  print('ratio XLA / plain (median of paired repeats): '
        f'{np.median(np.array(times[True]) / np.array(times[False])):.2f}')


if __name__ == '__main__':
  app.run(main)
