"""The pure-TensorFlow reference round of the round-overhead benchmark.

`PureTfRound` does by hand, in plain TensorFlow, the work of one round of
`tff_nlp.algorithms.build_fl_process` (FedAvg, Lorar weighting, per-client
learning rate and epochs) on a `round_overhead_workloads.Workload`'s clients;
`check_same_model` checks that the sides of the comparison computed the same
global model, so that `round_overhead` times the same work.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import time
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


from tff_nlp import templates
from apps.scaling import round_overhead_workloads


# The two hand-written client loops (`PureTfRound`), and their sides.
WHILE = 'while'
STEPS = 'steps'
PURE_TF_LOOPS = (WHILE, STEPS)
# The global models of the sides must agree to this fraction of the norm of
# the round's update (see `check_same_model`).
RELATIVE_TOLERANCE = 1e-2


class PureTfRound:
  """The hand-written reference round, with either of two client loops.

  `pure_tf_round(global_trainable, clients, loop=...)` trains each client in
  turn from `global_trainable` (a list of arrays) and returns the new global
  trainable weights (numpy) and each client's training seconds. Each client:
  the optimizer with the client's learning rate, its batches repeated
  `num_epochs` times, weight |D_i|·(max - min batch loss) (Lorar; |D_i|
  examples per epoch), and if every client's max - min is 0, |D_i| (the
  process's fallback). The server step is SGD with learning rate 1 on the
  weighted mean delta, i.e. `w - mean(delta)` (FedAvg's).

  The client loops:

  *   `WHILE`: one `tf.function` per client looping over its batches with
      `templates.batch_loop.for_each_batch` (a `tf.while_loop` over the
      dataset's iterator), as TFF's client work does.
  *   `STEPS`: a Python loop over the batches calling one `tf.function`
      training step (shape-relaxed, traced once), the usual hand-written
      loop: a small Python dispatch cost per batch.
  """

  def __init__(self, model_fn: Callable[[], tff.learning.models.VariableModel],
               optimizer: tff.learning.optimizers.Optimizer):
    """Builds the model (its variables are reused by every client).

    Args:
      model_fn: Builds the `tff.learning` model (`forward_pass` gives the
        loss the process trains on).
      optimizer: The client optimizer; only its learning rate is set per
        client.
    """
    self._model = model_fn()
    self._trainable = tuple(self._model.trainable_variables)
    self._optimizer = optimizer
    self._while_fn = tf.function(self._train_with_while)
    self._step_fn = None  # Built on first use, from the batches' spec.

  def _initial_optimizer_state(self, learning_rate):
    state = self._optimizer.initialize(
        tuple(tf.TensorSpec(v.shape, v.dtype) for v in self._trainable))
    return self._optimizer.set_hparams(
        state, {tff.learning.optimizers.LEARNING_RATE_KEY: learning_rate})

  def _train_step(self, optimizer_state, batch):
    with tf.GradientTape() as tape:
      output = self._model.forward_pass(batch, training=True)
    grads = tape.gradient(output.loss, self._trainable)
    optimizer_state, new_weights = self._optimizer.next(
        optimizer_state, self._trainable, grads)
    for v, w in zip(self._trainable, new_weights):
      v.assign(w)
    return (optimizer_state, tf.cast(output.num_examples, tf.float32),
            output.loss)

  def _train_with_while(self, initial_trainable, dataset, learning_rate,
                        num_epochs):
    for v, w in zip(self._trainable, initial_trainable):
      v.assign(w)

    def train_on_batch(loop_state, batch):
      num_examples, max_loss, min_loss, optimizer_state = loop_state
      optimizer_state, batch_size, loss = self._train_step(
          optimizer_state, batch)
      return (num_examples + batch_size, tf.maximum(max_loss, loss),
              tf.minimum(min_loss, loss), optimizer_state)

    num_examples, max_loss, min_loss, _ = templates.batch_loop.for_each_batch(
        dataset.repeat(tf.cast(num_epochs, tf.int64)),
        (tf.constant(0.0), tf.constant(-np.inf), tf.constant(np.inf),
         self._initial_optimizer_state(learning_rate)),
        train_on_batch)
    delta = tuple(w0 - v for w0, v in zip(initial_trainable, self._trainable))
    return (delta, num_examples / tf.cast(num_epochs, tf.float32),
            max_loss - min_loss)

  def _train_with_steps(self, initial_trainable, dataset, learning_rate,
                        num_epochs):
    for v, w in zip(self._trainable, initial_trainable):
      v.assign(w)
    state = tf.nest.map_structure(
        tf.convert_to_tensor, self._initial_optimizer_state(learning_rate))
    if self._step_fn is None:
      # Batches differ in size and length (trimmed padding): one trace for
      # all of them.
      relaxed = tf.nest.map_structure(
          lambda s: tf.TensorSpec([None] * s.shape.rank, s.dtype),
          dataset.element_spec)
      self._step_fn = tf.function(
          self._train_step,
          input_signature=(tf.nest.map_structure(tf.TensorSpec.from_tensor,
                                                 state), relaxed))
    sizes, losses = [], []
    for batch in dataset.repeat(num_epochs):
      state, batch_size, loss = self._step_fn(state, batch)
      sizes.append(batch_size)
      losses.append(loss)
    delta = tuple(tf.constant(w0) - v
                  for w0, v in zip(initial_trainable, self._trainable))
    losses = tf.stack(losses)
    return (delta, tf.add_n(sizes) / num_epochs,
            tf.reduce_max(losses) - tf.reduce_min(losses))

  def __call__(self, global_trainable: Sequence[np.ndarray],
               clients: Sequence[round_overhead_workloads.ClientWork], *,
               loop: str) -> tuple[list[np.ndarray], list[float]]:
    """One round: the new global trainable weights and client seconds."""
    deltas, sizes, reductions, seconds = [], [], [], []
    for client in clients:
      start = time.perf_counter()
      if loop == WHILE:
        delta, size, reduction = self._while_fn(
            global_trainable, client.dataset,
            tf.constant(client.learning_rate, tf.float32),
            tf.constant(client.num_epochs, tf.int32))
      elif loop == STEPS:
        delta, size, reduction = self._train_with_steps(
            global_trainable, client.dataset,
            tf.constant(client.learning_rate, tf.float32), client.num_epochs)
      else:
        raise ValueError(f'loop must be one of {PURE_TF_LOOPS}, got {loop!r}.')
      # On CPU a tf.function returns when its work is done; reading a scalar
      # back makes that explicit on any device.
      reduction = float(reduction)
      seconds.append(time.perf_counter() - start)
      deltas.append(delta)
      sizes.append(size)
      reductions.append(reduction)
    weights = [s * r for s, r in zip(sizes, reductions)]
    if not any(reductions):
      weights = sizes
    total = tf.add_n(weights)
    new_weights = [
        (w - tf.add_n([p * d[i] for p, d in zip(weights, deltas)]) / total)
        .numpy()
        for i, w in enumerate(global_trainable)
    ]
    return new_weights, seconds


def _max_abs(arrays: Sequence[np.ndarray]) -> float:
  return max(float(np.max(np.abs(a))) for a in arrays)


def _norm(arrays: Sequence[np.ndarray]) -> float:
  return float(np.sqrt(sum(np.sum(np.square(a, dtype=np.float64))
                           for a in arrays)))


def check_same_model(weights: Mapping[str, Sequence[Any]],
                     initial: Sequence[Any], *,
                     reference: str) -> collections.OrderedDict:
  """Checks that every side computed the reference side's global model.

  The sides' weights differ by floating-point noise (TFF's worker runs its
  own optimized graph), which training amplifies: on the seq2seq model with
  Adam, 6 local steps turn it into differences of a tenth of the largest
  coordinate's update, though only 1e-3 of the update as a whole. So the
  check compares norms: ||w_side - w_reference|| must be at most
  `RELATIVE_TOLERANCE` times ||w_reference - w_initial||. Different work (a
  client's learning rate, epochs, batches or weight) moves the global
  update by far more.

  Args:
    weights: Side -> its global trainable weights after the round.
    initial: The global trainable weights before the round.
    reference: The side the others are compared with.

  Returns:
    An OrderedDict: `max_abs_update` and `update_norm` of the reference,
    and per other side `{side: OrderedDict(max_abs=..., relative=...)}`
    (max |difference|, ||difference|| / update_norm).

  Raises:
    AssertionError: If a side's relative difference exceeds
      `RELATIVE_TOLERANCE`: the benchmark would time different work.
  """
  initial = [np.asarray(w, np.float64) for w in initial]
  ref = [np.asarray(w, np.float64) for w in weights[reference]]
  update = [r - w0 for r, w0 in zip(ref, initial)]
  update_norm = _norm(update)
  result = collections.OrderedDict(max_abs_update=_max_abs(update),
                                   update_norm=update_norm)
  for side, side_weights in weights.items():
    if side == reference:
      continue
    difference = [np.asarray(w, np.float64) - r
                  for w, r in zip(side_weights, ref)]
    relative = _norm(difference) / update_norm if update_norm else (
        0.0 if _norm(difference) == 0 else np.inf)
    result[side] = collections.OrderedDict(
        max_abs=_max_abs(difference), relative=relative)
    if not relative <= RELATIVE_TOLERANCE:
      raise AssertionError(
          f'{side} and {reference} rounds disagree: ||difference|| is '
          f'{relative:.3g} of ||update|| (max |difference| '
          f'{result[side]["max_abs"]:.3g}, max |update| '
          f'{result["max_abs_update"]:.3g}); the benchmark would compare '
          'different work.')
  return result
