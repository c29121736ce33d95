"""What a TFF round costs over the same local training in plain TensorFlow.

One round of `tff_nlp.algorithms.build_fl_process` (FedAvg, Lorar weighting,
per-client learning rate and epochs) is timed against hand-written
pure-TensorFlow rounds doing the same work for the same clients: each client
starts from the same global weights, trains on the same batches with the same
`tff.learning.optimizers` optimizer and the same `from_keras_model` loss,
tracks its batch losses (Lorar needs max - min), and the server applies the
Lorar-weighted mean delta with SGD at learning rate 1.

Two workloads (`MODELS`):

*   `r8_classifier`: the r8 demo task and bag-of-embeddings classifier of
    `tff_nlp.experiments.federated_text` (`R8Setup`), client SGD;
*   `text2sql_seq2seq`: the text-to-SQL clients and Keras seq2seq model as
    `tff_nlp.experiments.text2sql` builds them (its `prepare_task`,
    `_build_process` and `_client_data_fn`), with the cpu preset's data,
    model and local training (`text2sql_setup`), client Adam.

Four sides (`SIDES`) run in one process, interleaved, each from the same
initial state in every round:

*   `tff`: TFF in a context with the given `ContextSettings` (by default
    unlimited concurrency: the worker trains every client at once);
*   `tff_c1`: TFF in a second context, with its own worker, with
    `max_concurrent_computation_calls=1`: one client at a time, the schedule
    of the pure-TF loops;
*   `pure_tf_while` and `pure_tf_steps`: the two client loops of
    `PureTfRound` (a `tf.function` per client looping over its batches with
    `algorithms.batch_loop.for_each_batch`, as TFF's client work; a Python
    loop of `tf.function` steps), then the weighted
    mean and server step in eager TensorFlow. The faster is the reference
    of the ratios, so a slow hand-written loop cannot flatter TFF.

After one warm-up round each, every side's global model must match the
others' (`check_same_model`), so the timings compare the same work. Where
the time goes (`run_round_overhead`'s `breakdown`, per side):

*   tracing and compilation: first round minus the median steady round;
    besides, the one-off Python tracing when the process is built;
*   serialization (TFF sides): `tff.framework.serialize_value` of what a
    round passes through TFF's Python runtime: the state and the client
    datasets, and the compiled round computation, which the context sends
    with every call, and the result, which the worker serializes in C++
    (timed here in Python, an estimate); with byte sizes;
*   compute: the pure-TF per-client training time, summed over clients (on
    the TFF sides: the reference loop's);
*   remainder: round minus serialization minus compute. On the TFF sides:
    scheduling, gRPC, deserialization, and any difference in how fast the
    worker trains the clients (negative when it overlaps clients or trains
    them faster than the reference); on the pure-TF sides: the server step.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
from typing import Any, ClassVar, Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms
from tff_nlp import models
from tff_nlp import runtime
from tff_nlp import training as training_lib
from tff_nlp.algorithms import client_data as client_data_lib
from tff_nlp.data import text2sql as text2sql_data
from tff_nlp.experiments import federated_text
from tff_nlp.experiments import text2sql
from tff_nlp.models import seq2seq

R8_CLASSIFIER = 'r8_classifier'
TEXT2SQL_SEQ2SEQ = 'text2sql_seq2seq'
MODELS = (R8_CLASSIFIER, TEXT2SQL_SEQ2SEQ)
# Issue 2's target for TFF's round time over the pure-TF reference.
TARGET_RATIO = 1.15
# Sides of the comparison, as keys of the result.
TFF = 'tff'
TFF_C1 = 'tff_c1'
PURE_TF_WHILE = 'pure_tf_while'
PURE_TF_STEPS = 'pure_tf_steps'
SIDES = (TFF, TFF_C1, PURE_TF_WHILE, PURE_TF_STEPS)
# The two hand-written client loops (`PureTfRound`), and their sides.
WHILE = 'while'
STEPS = 'steps'
PURE_TF_LOOPS = (WHILE, STEPS)
PURE_TF_SIDES = {PURE_TF_WHILE: WHILE, PURE_TF_STEPS: STEPS}
# Values serialized in a round, as keys of `result['serialization']`.
SERIALIZED = ('state', 'client_data', 'computation', 'result')
# The global models of the sides must agree to this fraction of the norm of
# the round's update (see `check_same_model`).
RELATIVE_TOLERANCE = 1e-2


@dataclasses.dataclass(frozen=True)
class R8Setup:
  """The r8 demo classifier's round (`MODELS[0]`).

  Attributes:
    data: The clients (dataset, split, vocabulary).
    local_epochs: Local epochs of every client.
    batch_size: Client batch size.
    embedding_dim: Embedding size of the classifier.
    learning_rate: Client SGD learning rate.
  """

  data: federated_text.ClientDataConfig = federated_text.ClientDataConfig()
  local_epochs: int = 2
  batch_size: int = 16
  embedding_dim: int = 64
  learning_rate: float = 1.0
  name: ClassVar[str] = R8_CLASSIFIER


@dataclasses.dataclass(frozen=True)
class Text2SqlSetup:
  """The text-to-SQL seq2seq round (`MODELS[1]`), in the experiment's configs.

  Attributes:
    data: Clients, tokenization and training examples per client.
    model: The seq2seq model; its vocabulary size and lengths are replaced
      by the tokenizer's and `data`'s, its seed by the run's, as
      `text2sql.run_text2sql` does. Must have dropout 0 (see
      `text2sql_setup`).
    training: Local training; must be federated FedAvg with Lorar weighting
      and SGD or Adam clients (per-client learning rate), what the pure-TF
      reference implements.
  """

  data: text2sql.DataConfig
  model: seq2seq.Seq2SeqConfig
  training: text2sql.TrainingConfig
  name: ClassVar[str] = TEXT2SQL_SEQ2SEQ

  def __post_init__(self):
    if self.model.dropout:
      raise ValueError(
          'The model needs dropout 0: dropout masks are random, so the TFF '
          'and pure-TF rounds could not be checked to compute the same '
          f'model; got dropout={self.model.dropout}.')
    if self.training.method != ('federated', 'fedavg', 'lorar'):
      raise ValueError(
          'The round must be federated FedAvg + Lorar (what the pure-TF '
          f'reference implements); got {self.training.method}.')
    if self.training.client_optimizer not in ('sgd', 'adam'):
      raise ValueError(
          "client_optimizer must be 'sgd' or 'adam' (what the pure-TF "
          f'reference implements), got {self.training.client_optimizer!r}.')


def text2sql_setup(
    *,
    num_clients: int = len(text2sql_data.CLIENTS),
    max_train_examples: Union[text2sql.PerClient, int] = text2sql.PerClient(
        40, (('advising', 80), ('atis', 80))),
    local_epochs: Optional[int] = None,
    batch_size: int = 16,
    learning_rate: Optional[float] = None,
) -> Text2SqlSetup:
  """The text-to-SQL cpu preset (`train_text2sql.cpu.flags`), resized.

  The preset's data (values filled in, table names only, vocabulary 4000,
  128 / 160 tokens), model (2+2 layers, d=128, 4 heads, d_ff 512) and local
  training (FedAvg + Lorar, Adam at 2e-3, batch 16, 2 local epochs, 1 for
  advising and atis), with two changes: fewer training examples per client
  (`max_train_examples`, the size knob; the preset has 200, 400 for advising
  and atis) and no dropout (random masks would differ between the sides).

  Args:
    num_clients: The first this many of `text2sql.CLIENTS`.
    max_train_examples: Training examples per client (seeded subsets).
    local_epochs: Local epochs of every client; None keeps the preset's.
    batch_size: Client batch size.
    learning_rate: Client Adam learning rate; None keeps the preset's.

  Returns:
    A `Text2SqlSetup`.
  """
  if not 1 <= num_clients <= len(text2sql_data.CLIENTS):
    raise ValueError(
        f'num_clients must be in 1..{len(text2sql_data.CLIENTS)}, got '
        f'{num_clients}.')
  return Text2SqlSetup(
      data=text2sql.DataConfig(
          clients=text2sql_data.CLIENTS[:num_clients],
          with_values=True,
          schema_columns=False,
          vocabulary_size=4000,
          max_source_length=128,
          max_target_length=160,
          max_train_examples=max_train_examples,
          # Dev and test are not used; 0 would keep all of them.
          max_eval_examples=1,
      ),
      model=seq2seq.Seq2SeqConfig.from_preset(
          'small', num_encoder_layers=2, num_decoder_layers=2, hidden_dim=128,
          num_heads=4, intermediate_dim=512, dropout=0.0),
      training=text2sql.TrainingConfig(
          paradigm='federated',
          algorithm='fedavg',
          weighting='lorar',
          client_optimizer='adam',
          local_epochs=(
              text2sql.PerClient(2, (('advising', 1), ('atis', 1)))
              if local_epochs is None else text2sql.PerClient(local_epochs)),
          learning_rates=text2sql.PerClient(
              2e-3 if learning_rate is None else learning_rate),
          batch_sizes=text2sql.PerClient(batch_size),
      ),
  )


Setup = Union[R8Setup, Text2SqlSetup]


@dataclasses.dataclass
class ClientWork:
  """One client's local training, as the pure-TF reference runs it.

  Attributes:
    name: The client's name (text-to-SQL) or index (r8).
    dataset: Its batches: one epoch, the same the TFF process receives.
    learning_rate: Its client learning rate.
    num_epochs: Its local epochs.
    batch_size: Its batch size.
    train_examples: Its training examples.
  """

  name: str
  dataset: tf.data.Dataset
  learning_rate: float
  num_epochs: int
  batch_size: int
  train_examples: int


@dataclasses.dataclass
class Workload:
  """One round's work, built once and run by every side.

  Attributes:
    process: The TFF learning process.
    client_data: `process.next`'s client data.
    model_fn: Builds the `tff.learning` model (also the pure-TF side's).
    client_optimizer: The client optimizer; the pure-TF side sets each
      client's learning rate into its state, as the process does.
    clients: Each client's training, for the pure-TF side.
    prepare_seconds: Loading and encoding the data (and the tokenizer).
    build_seconds: Building the process (Python tracing of its
      computations).
  """

  process: algorithms.FLProcess
  client_data: list[Any]
  model_fn: Callable[[], tff.learning.models.VariableModel]
  client_optimizer: tff.learning.optimizers.Optimizer
  clients: list[ClientWork]
  prepare_seconds: float
  build_seconds: float


def _build_r8_workload(setup: R8Setup, *, data_dir: Optional[str],
                       seed: int) -> Workload:
  start = time.perf_counter()
  task = federated_text.prepare_clients(
      setup.data, data_dir=data_dir, seed=seed)
  spec = task.model_spec(embedding_dim=setup.embedding_dim, seed=seed)
  datasets = [
      federated_text.train_dataset(
          client, batch_size=setup.batch_size, shuffle_seed=(seed, client_id))
      for client_id, client in enumerate(task.clients)
  ]
  prepared = time.perf_counter()
  model_fn = models.build_model_fn(spec)
  optimizer = tff.learning.optimizers.build_sgdm(
      learning_rate=setup.learning_rate)
  process = algorithms.build_fl_process(
      model_fn,
      algorithm='fedavg',
      weighting='lorar',
      client_optimizer_fn=optimizer,
      with_client_config=True,
  )
  built = time.perf_counter()
  return Workload(
      process=process,
      client_data=[
          algorithms.with_client_config(
              ds, learning_rate=setup.learning_rate,
              num_epochs=setup.local_epochs)
          for ds in datasets
      ],
      model_fn=model_fn,
      client_optimizer=optimizer,
      clients=[
          ClientWork(name=str(i), dataset=ds,
                     learning_rate=setup.learning_rate,
                     num_epochs=setup.local_epochs,
                     batch_size=setup.batch_size,
                     train_examples=client.num_train)
          for i, (ds, client) in enumerate(zip(datasets, task.clients))
      ],
      prepare_seconds=prepared - start,
      build_seconds=built - prepared,
  )


def _build_text2sql_workload(setup: Text2SqlSetup, *,
                             data_dir: Optional[str], seed: int) -> Workload:
  start = time.perf_counter()
  # The tokenizer is trained for this run and not kept.
  with tempfile.TemporaryDirectory(prefix='round_overhead_') as tokenizer_dir:
    task = text2sql.prepare_task(setup.data, data_dir=data_dir, seed=seed,
                                 tokenizer_dir=tokenizer_dir)
  model_config = dataclasses.replace(
      setup.model, vocabulary_size=task.tokenizer.vocabulary_size(),
      max_source_length=setup.data.max_source_length,
      max_target_length=setup.data.max_target_length, seed=seed)
  # The experiment's own builders, so that both measure the same thing.
  # pylint: disable=protected-access
  (unit,) = text2sql._units(setup.training, task.clients)
  parser = text2sql._Seq2SeqParser(task, model_config,
                                   setup.training.decode_batch_size)
  # Round 1's client data, as the experiment's round loop would get it.
  client_data = text2sql._client_data_fn(
      task, unit, setup.training, seed, parser)(
          1, range(len(unit.train_clients)))
  prepared = time.perf_counter()
  process = text2sql._build_process(setup.training, parser, unit)
  # pylint: enable=protected-access
  built = time.perf_counter()
  training = setup.training
  return Workload(
      process=process,
      client_data=client_data,
      model_fn=seq2seq.build_model_fn(model_config),
      client_optimizer=algorithms.CLIENT_OPTIMIZERS[training.client_optimizer](
          learning_rate=training.learning_rates.default),
      clients=[
          # The same batches the process gets: the examples of its client
          # data; learning rate and epochs from the configuration.
          ClientWork(name=name, dataset=data[client_data_lib.EXAMPLES_KEY],
                     learning_rate=training.learning_rates[name],
                     num_epochs=int(training.local_epochs[name]),
                     batch_size=int(training.batch_sizes[name]),
                     train_examples=len(task.splits[name]['train']))
          for name, data in zip(unit.train_clients, client_data)
      ],
      prepare_seconds=prepared - start,
      build_seconds=built - prepared,
  )


def build_workload(setup: Setup, *, data_dir: Optional[str],
                   seed: int) -> Workload:
  """Prepares the clients and builds the process of `setup`'s model.

  Args:
    setup: An `R8Setup` or a `Text2SqlSetup`.
    data_dir: The `shared/data` folder; None finds it.
    seed: Seed of the data (split, subsets, batch order) and the model.

  Returns:
    The `Workload`.
  """
  if isinstance(setup, R8Setup):
    return _build_r8_workload(setup, data_dir=data_dir, seed=seed)
  if isinstance(setup, Text2SqlSetup):
    return _build_text2sql_workload(setup, data_dir=data_dir, seed=seed)
  raise TypeError(f'Expected an R8Setup or a Text2SqlSetup, got {setup!r}.')


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
      `algorithms.batch_loop.for_each_batch` (a `tf.while_loop` over the
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

    num_examples, max_loss, min_loss, _ = algorithms.batch_loop.for_each_batch(
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
               clients: Sequence[ClientWork], *,
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


def _serialize(process, state, client_data, result, computation
               ) -> collections.OrderedDict:
  """Seconds and bytes of `tff.framework.serialize_value` of each value."""
  state_type, data_type = process.next.type_signature.parameter
  values = dict(
      state=(state, state_type),
      client_data=(client_data, data_type),
      computation=(computation, computation.type_signature),
      result=(result, process.next.type_signature.result),
  )
  measured = collections.OrderedDict()
  for name in SERIALIZED:
    value, value_type = values[name]
    start = time.perf_counter()
    proto, _ = tff.framework.serialize_value(value, value_type)
    measured[name] = (time.perf_counter() - start, proto.ByteSize())
  return measured


def _concurrency_label(calls: int) -> str:
  return str(calls) if calls > 0 else 'unlimited'


def _measure(workload: Workload, pure_tf_round: PureTfRound,
             contexts: Mapping[str, Any], *, computation,
             repeats: int) -> dict[str, Any]:
  """Runs the warm-up, the check and the interleaved timed rounds.

  Args:
    workload: The round's work.
    pure_tf_round: The pure-TF reference.
    contexts: The TFF sides' execution contexts, by side.
    computation: The compiled round computation, to serialize.
    repeats: Timed rounds per side.

  Returns:
    A dict: `initial` weights, per side `times` (timed rounds) and `first`
    (the warm-up), per pure-TF side `compute` (per timed round, its clients'
    seconds summed), `differences` (`check_same_model`) and per serialized
    value its (seconds, bytes) per repeat (`serialization`).
  """
  process = workload.process
  stack = tff.framework.get_context_stack()
  with stack.install(contexts[TFF]):
    state = process.initialize()
    initial = [np.asarray(w) for w in
               process.get_model_weights(state).trainable]
  times = {side: [] for side in SIDES}
  first = {}
  compute = {side: [] for side in PURE_TF_SIDES}
  serialization = collections.defaultdict(list)
  outputs = {}

  def run_side(side, timed):
    if side in contexts:
      with stack.install(contexts[side]):
        start = time.perf_counter()
        outputs[side] = process.next(state, workload.client_data)
        return time.perf_counter() - start
    start = time.perf_counter()
    outputs[side], client_seconds = pure_tf_round(
        initial, workload.clients, loop=PURE_TF_SIDES[side])
    seconds = time.perf_counter() - start
    if timed:
      compute[side].append(sum(client_seconds))
    return seconds

  # Warm-up (tracing, compilation, the workers' first runs), then the check
  # that every side computed the same model.
  for side in SIDES:
    first[side] = run_side(side, timed=False)
  with stack.install(contexts[TFF]):
    weights = {side: process.get_model_weights(outputs[side].state).trainable
               for side in contexts}
  weights.update((side, outputs[side]) for side in PURE_TF_SIDES)
  differences = check_same_model(weights, initial, reference=TFF)

  for repeat in range(repeats):
    # Rotating the order keeps drift (e.g. other processes on the machine)
    # from always hitting the same side first.
    for i in range(len(SIDES)):
      side = SIDES[(repeat + i) % len(SIDES)]
      times[side].append(run_side(side, timed=True))
    for name, value in _serialize(process, state, workload.client_data,
                                  outputs[TFF], computation).items():
      serialization[name].append(value)
  return dict(initial=initial, times=times, first=first, compute=compute,
              differences=differences, serialization=serialization)


def run_round_overhead(
    *,
    setup: Setup,
    data_dir: Optional[str],
    repeats: int,
    seed: int,
    context_settings: runtime.ContextSettings = runtime.ContextSettings(),
) -> collections.OrderedDict:
  """Times the sides interleaved; returns the measurements.

  Starts the TFF workers of two contexts (`context_settings`, and the same
  with `max_concurrent_computation_calls=1`) and stops them before
  returning. The pure-TF reference is the faster of the two `PureTfRound`
  loops (by median round time), so that a slow hand-written loop cannot
  flatter TFF; both are reported.

  Args:
    setup: The workload: an `R8Setup` or a `Text2SqlSetup`.
    data_dir: The `shared/data` folder; None finds it.
    repeats: Timed rounds of each side, after one warm-up round each.
    seed: Seed of the data and the model.
    context_settings: The first TFF side's context (its workers are started
      here; the second side's are the same with concurrency 1). With
      several workers, Lorar rounds still run whole on the first one (see
      `tff_nlp.runtime.multi_worker`).

  Returns:
    A JSON-serializable OrderedDict: the configuration, every side's round
    times, medians, the ratios TFF / pure TF, the breakdown, serialized
    bytes and the weight check. Field by field: see the code below and
    `markdown`.

  Raises:
    AssertionError: If the sides do not compute the same global model.
    ValueError: For `repeats < 1`, or remote workers in `context_settings`
      (their concurrency cannot be set from here).
  """
  if repeats < 1:
    raise ValueError(f'repeats must be >= 1, got {repeats}.')
  if context_settings.worker_addresses:
    raise ValueError(
        'The benchmark starts its own workers (one context with concurrency '
        '1); remote worker_addresses cannot be given a concurrency from '
        f'here: {list(context_settings.worker_addresses)}.')
  workload = build_workload(setup, data_dir=data_dir, seed=seed)
  process = workload.process
  # Built after the process: a Keras model built before TFF traces
  # `model_fn` fails when first called in a tf.function afterwards.
  start = time.perf_counter()
  pure_tf_round = PureTfRound(workload.model_fn, workload.client_optimizer)
  pure_tf_build_seconds = time.perf_counter() - start
  # As the contexts compile it on their first call; serialized below because
  # they send it with every call.
  start = time.perf_counter()
  computation = tff.backends.native.desugar_and_transform_to_native(
      process.next)
  compile_seconds = time.perf_counter() - start

  c1_settings = dataclasses.replace(
      context_settings, max_concurrent_computation_calls=1,
      # Both contexts name their worker logs by pid: keep them apart.
      log_dir=(os.path.join(context_settings.log_dir, 'concurrency_1')
               if context_settings.log_dir else None))
  # Both contexts' workers run for the whole measurement (a context's `with`
  # stops its workers on exit); each call installs its own context.
  with contextlib.ExitStack() as exit_stack:
    contexts = {
        side: exit_stack.enter_context(runtime.CppContext(settings))
        .tff_context
        for side, settings in ((TFF, context_settings), (TFF_C1, c1_settings))
    }
    measured = _measure(workload, pure_tf_round, contexts,
                        computation=computation, repeats=repeats)
  times, first, compute = (measured['times'], measured['first'],
                            measured['compute'])
  initial, differences = measured['initial'], measured['differences']

  medians = {side: statistics.median(t) for side, t in times.items()}
  reference = min(PURE_TF_SIDES, key=lambda side: medians[side])
  compute_medians = {side: statistics.median(c) for side, c in compute.items()}
  serialized = collections.OrderedDict(
      (name, collections.OrderedDict(
          seconds=statistics.median(seconds for seconds, _ in values),
          bytes=values[-1][1]))
      for name, values in measured['serialization'].items())
  serialization_seconds = sum(v['seconds'] for v in serialized.values())
  breakdown = collections.OrderedDict()
  for side in SIDES:
    serial = serialization_seconds if side in contexts else 0.0
    side_compute = compute_medians.get(side, compute_medians[reference])
    breakdown[side] = collections.OrderedDict(
        round_seconds=medians[side],
        first_round_seconds=first[side],
        tracing_seconds=first[side] - medians[side],
        serialization_seconds=serial,
        compute_seconds=side_compute,
        remainder_seconds=medians[side] - serial - side_compute,
    )
  clients = workload.clients
  return collections.OrderedDict(
      model=setup.name,
      num_clients=len(clients),
      client_names=[c.name for c in clients],
      client_train_examples=[c.train_examples for c in clients],
      client_local_epochs=[c.num_epochs for c in clients],
      client_batch_sizes=[c.batch_size for c in clients],
      client_learning_rates=[c.learning_rate for c in clients],
      # The most common values, for tables (r8: every client's).
      local_epochs=statistics.mode(c.num_epochs for c in clients),
      batch_size=statistics.mode(c.batch_size for c in clients),
      model_parameters=int(sum(np.size(w) for w in initial)),
      repeats=repeats,
      concurrency=_concurrency_label(
          context_settings.max_concurrent_computation_calls),
      num_workers=context_settings.num_workers,
      pure_tf_loop=PURE_TF_SIDES[reference],
      # Issue 2's fields (the pure-TF side is the reference loop's).
      tff_round_seconds=times[TFF],
      pure_tf_round_seconds=times[reference],
      tff_median_seconds=medians[TFF],
      pure_tf_median_seconds=medians[reference],
      ratio=medians[TFF] / medians[reference],
      tff_c1_round_seconds=times[TFF_C1],
      tff_c1_median_seconds=medians[TFF_C1],
      ratio_c1=medians[TFF_C1] / medians[reference],
      target_ratio=TARGET_RATIO,
      round_seconds=times,
      median_seconds=medians,
      first_round_seconds=first,
      client_compute_seconds=compute,
      max_abs_weight_difference=max(
          differences[side]['max_abs'] for side in SIDES[1:]),
      relative_weight_difference=max(
          differences[side]['relative'] for side in SIDES[1:]),
      weight_differences=collections.OrderedDict(
          (side, differences[side]) for side in SIDES[1:]),
      max_abs_update=differences['max_abs_update'],
      update_norm=differences['update_norm'],
      prepare_seconds=workload.prepare_seconds,
      build_seconds=collections.OrderedDict(
          tff=workload.build_seconds, tff_compile=compile_seconds,
          pure_tf=pure_tf_build_seconds),
      serialization=serialized,
      serialization_seconds=serialization_seconds,
      breakdown=breakdown,
      machine=training_lib.machine_info(),
  )


def _side_label(result: Mapping[str, Any], side: str) -> str:
  if side == TFF:
    return f'TFF, concurrency {result["concurrency"]}'
  if side == TFF_C1:
    return 'TFF, concurrency 1'
  reference = ' (reference)' if PURE_TF_SIDES[side] == result[
      'pure_tf_loop'] else ''
  return f'pure TF, {PURE_TF_SIDES[side]}{reference}'


def markdown(result: Mapping[str, Any]) -> str:
  """The result as Markdown: round times, where the time goes, bytes."""
  breakdown = result['breakdown']
  n = result['repeats']
  reference = f'pure_tf_{result["pure_tf_loop"]}'
  other = next(s for s in PURE_TF_SIDES if s != reference)

  fewest, most = (min(result['client_local_epochs']),
                  max(result['client_local_epochs']))
  epochs = str(fewest) if fewest == most else f'{fewest}-{most}'

  def ratio_row(side, concurrency, ratio):
    return (f'| {result["model"]} | {result["num_clients"]} '
            f'| {sum(result["client_train_examples"]):,} '
            f'| {epochs} | {result["model_parameters"]:,} '
            f'| {concurrency} | {result["median_seconds"][side]:.3f} '
            f'| {result["pure_tf_median_seconds"]:.3f} | {ratio:.3f} |')

  def part_row(label, how, key):
    cells = ' | '.join(f'{breakdown[s][key]:.3f}' for s in SIDES)
    return f'| {label} | {how} | {cells} |'

  build = result['build_seconds']
  serialization = result['serialization']
  return '\n'.join([
      '| model | clients | examples | epochs | parameters | TFF concurrency '
      '| TFF round (s) | pure TF (s) | ratio |',
      '|---|---|---|---|---|---|---|---|---|',
      ratio_row(TFF, result['concurrency'], result['ratio']),
      ratio_row(TFF_C1, 1, result['ratio_c1']),
      '',
      f'Medians of {n} interleaved rounds per side after one warm-up each '
      f'(target ratio <= {result["target_ratio"]}). Pure TF: the '
      f'{result["pure_tf_loop"]} loop, the faster of the two (the '
      f'{PURE_TF_SIDES[other]} loop: {result["median_seconds"][other]:.3f} '
      's). Every side computed the global model of TFF (concurrency '
      f'{result["concurrency"]}) to ||difference|| <= '
      f'{result["relative_weight_difference"]:.1e} x ||update|| (max '
      f'|difference| {result["max_abs_weight_difference"]:.1e}, max |update| '
      f'{result["max_abs_update"]:.1e}; floating-point noise, amplified by '
      'training).',
      '',
      '| seconds | how it was obtained | '
      + ' | '.join(_side_label(result, s) for s in SIDES) + ' |',
      '|---|---|' + '---|' * len(SIDES),
      part_row('round', f'median of {n} timed rounds', 'round_seconds'),
      part_row('serialization', 'serialize_value of state, client data, '
               'computation and result (table below)',
               'serialization_seconds'),
      part_row('compute', 'pure-TF per-client training, summed over '
               'clients, median over timed rounds (TFF: the reference '
               "loop's)", 'compute_seconds'),
      part_row('remainder', 'round - serialization - compute; TFF: '
               'runtime (scheduling, gRPC, deserialization) and any '
               'difference in client speed, negative if it overlaps '
               'clients; pure TF: server step', 'remainder_seconds'),
      part_row('first round', 'the warm-up round', 'first_round_seconds'),
      part_row('tracing, compilation', 'first round - steady round',
               'tracing_seconds'),
      '',
      f'Once, before the rounds: building the TFF process (Python tracing of '
      f'its computations) {build["tff"]:.2f} s, compiling its round to '
      f'the native form {build["tff_compile"]:.2f} s (each context does '
      f'this again in its first round), building the pure-TF Keras model '
      f'{build["pure_tf"]:.2f} s (its tf.functions are traced in its first '
      'round).',
      '',
      '| serialized per round | bytes | serialize_value (ms) |',
      '|---|---|---|',
      *(f'| {name} | {serialization[name]["bytes"]:,} '
        f'| {1000 * serialization[name]["seconds"]:.1f} |'
        for name in serialization),
      '',
      'Python-side `tff.framework.serialize_value`, median of one call per '
      'repeat. The context serializes state, client data (the datasets\' '
      'graphs, with their examples) and the compiled computation on every '
      'call; the result is serialized by the worker in C++, so its time here '
      'is an estimate.',
  ])
