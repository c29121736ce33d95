"""Pre-training the seq2seq model with T5 span corruption, centrally.

Issue 30, point 1: the text-to-SQL parser (`tff_nlp.models.seq2seq`) starts
from a model pre-trained on public text that no text-to-SQL client owns
(e.g. both sides of `nmt_de_en_large`'s training splits and the
classification texts), with T5's denoising objective
(`models.span_corruption`), instead of from random weights.

`run_pretrain` writes a run directory that text-to-SQL's `--init_from`
takes unchanged (`experiments.text2sql`): `tokenizer/` (a `SubwordTokenizer`
trained on the pre-training text, its top `num_sentinels` ids the
sentinels), `best_checkpoint/pretrain/ckpt` (the final model, a
`seq2seq.save_checkpoint` checkpoint) and `config.json`, whose `experiment`
records the `model` and the `data` lengths as a text2sql run does. A
text2sql run with the subword tokenizer, the same model sizes and the same
maximum lengths passes `text2sql_start.check_init_model`.

Besides: `corpus.npz` (the tokenized texts, cached; `pretrain_corpus`
prepares the text and the batches), `checkpoints/` (model
and Adam state every `checkpoint_every` steps, written atomically, the two
newest kept; `state.json` points to the newest and holds the history),
`history.json`, `pretrain_loss.png` and, last, `results.json` (held-out
loss and perplexity, steps, examples seen, epochs, training time, corpora
and their sizes).

Determinism: the batch of step s is a function of (seed, s) (examples in
seeded epoch permutations, corruption from `np.random.default_rng([seed,
2, s])`), dropout masks a function of (seed, s) (`dropout_seeds`), and the
held-out examples and their corruption are fixed by the seed. So running
again resumes from the newest checkpoint and ends with the weights of an
uninterrupted run, and a finished run is read back, not trained again.
"""

import collections
import dataclasses
import json
import os
import shutil
import time
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.data import data_root
from apps.text2sql import pretrain_corpus
from tff_nlp.models import dropout_seeds
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_loss
from tff_nlp.training import run_cache

# The layout `experiments.text2sql`'s init_from reads (the same names as
# its TOKENIZER_DIR, BEST_CHECKPOINT_DIR and BEST_CHECKPOINT_PREFIX).
TOKENIZER_DIR = pretrain_corpus.TOKENIZER_DIR
BEST_CHECKPOINT_DIR = 'best_checkpoint'
BEST_CHECKPOINT_PREFIX = 'ckpt'
UNIT = 'pretrain'
CHECKPOINTS_DIR = 'checkpoints'
STATE_FILE = 'state.json'
CORPUS_FILE = pretrain_corpus.CORPUS_FILE
HISTORY_FILE = 'history.json'
RESULTS_FILE = 'results.json'
LOSS_PLOT_FILE = 'pretrain_loss.png'
DataConfig = pretrain_corpus.DataConfig
DEFAULT_CORPORA = pretrain_corpus.DEFAULT_CORPORA


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """Adam with linear warm-up, then a constant rate; clipped gradients."""

  batch_size: int = 64
  learning_rate: float = 1e-3
  warmup_steps: int = 200
  clip_norm: float = 1.0


@dataclasses.dataclass(frozen=True)
class BudgetConfig:
  """When to stop, evaluate and checkpoint; may change between restarts.

  Attributes:
    train_steps: Stop after this many steps.
    max_minutes: Or after this much training time (summed over restarts;
      evaluation included, data preparation not).
    eval_every: Held-out loss every this many steps (and at 0 and the end).
    checkpoint_every: Training state every this many steps (and at the end).
  """

  train_steps: int = 1000
  max_minutes: float = 60.0
  eval_every: int = 200
  checkpoint_every: int = 200


class _WarmupSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
  """rate · min(1, (step + 1) / warmup_steps)."""

  def __init__(self, rate: float, warmup_steps: int):
    super().__init__()
    self.rate, self.warmup_steps = rate, max(warmup_steps, 1)

  def __call__(self, step):
    step = tf.cast(step, tf.float32) + 1.0
    return self.rate * tf.minimum(1.0, step / float(self.warmup_steps))

  def get_config(self):
    return {'rate': self.rate, 'warmup_steps': self.warmup_steps}


class _Trainer:
  """Model, Adam, train step and held-out loss."""

  def __init__(self, model_config, training: TrainingConfig):
    self.model = seq2seq.build_keras_model(model_config)
    self.optimizer = tf.keras.optimizers.Adam(
        learning_rate=_WarmupSchedule(training.learning_rate,
                                     training.warmup_steps),
        global_clipnorm=training.clip_norm or None)
    self.optimizer.build(self.model.trainable_variables)
    self._loss = seq2seq_loss.MaskedSparseCategoricalCrossentropy()
    ids = tf.TensorSpec([None, None], tf.int32)
    self.train_step = tf.function(self._train_step, input_signature=[
        ids, ids, ids, tf.TensorSpec([], tf.int64)])
    self.loss_sum = tf.function(self._loss_sum, input_signature=[ids] * 3)

  def _inputs(self, encoder, decoder):
    return {seq2seq.ENCODER_TOKEN_IDS: encoder,
            seq2seq.DECODER_TOKEN_IDS: decoder}

  def _train_step(self, encoder, decoder, labels, step):
    variables = self.model.trainable_variables
    with dropout_seeds.step_seed(step), tf.GradientTape() as tape:
      logits = self.model(self._inputs(encoder, decoder), training=True)
      loss = self._loss(labels, logits)
    self.optimizer.apply_gradients(zip(tape.gradient(loss, variables),
                                       variables))
    return loss

  def _loss_sum(self, encoder, decoder, labels):
    logits = self.model(self._inputs(encoder, decoder), training=False)
    losses = self._loss.call(labels, logits)
    mask = tf.cast(labels != seq2seq.PAD_ID, tf.float32)
    return tf.reduce_sum(losses * mask), tf.reduce_sum(mask)

  def heldout_loss(self, batches) -> float:
    total = count = 0.0
    for x, y in batches:
      loss, tokens = self.loss_sum(x[seq2seq.ENCODER_TOKEN_IDS],
                                   x[seq2seq.DECODER_TOKEN_IDS], y)
      total += float(loss)
      count += float(tokens)
    return total / count

  def checkpoint(self):
    return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)


def _restore(trainer: _Trainer, output_dir: str) -> dict[str, Any]:
  """The state of the newest checkpoint (restored), or a fresh one."""
  folder = os.path.join(output_dir, CHECKPOINTS_DIR)
  state_path = os.path.join(folder, STATE_FILE)
  if not os.path.exists(state_path):
    shutil.rmtree(folder, ignore_errors=True)
    return {'step': 0, 'seconds': 0.0, 'history': [],
            'pending_loss': [0.0, 0]}
  with open(state_path, encoding='utf-8') as f:
    state = json.load(f)
  path = os.path.join(folder, f'step-{state["step"]}', 'ckpt')
  try:
    trainer.checkpoint().read(path).assert_consumed()
  except (tf.errors.OpError, AssertionError, ValueError) as e:
    raise errors.CheckpointError(
        f'{path}: cannot restore the pre-training state ({type(e).__name__}:'
        f' {str(e)[:300]}). Remove {output_dir!r} to start over.') from e
  if int(trainer.optimizer.iterations.numpy()) != state['step']:
    raise errors.CheckpointError(f'{path}: holds step '
                                 f'{int(trainer.optimizer.iterations)}, '
                                 f'{state_path} says {state["step"]}.')
  logging.info('pretrain: resumed at step %d', state['step'])
  return state


def _save(trainer: _Trainer, output_dir: str, state: dict[str, Any]) -> None:
  """Checkpoint + state, atomically; keeps the two newest checkpoints."""
  folder = os.path.join(output_dir, CHECKPOINTS_DIR)
  os.makedirs(folder, exist_ok=True)
  name = f'step-{state["step"]}'
  pretrain_corpus.save_atomically(
      os.path.join(folder, name),
      lambda d: trainer.checkpoint().write(os.path.join(d, 'ckpt')))
  training_lib.write_json(os.path.join(folder, STATE_FILE), state)
  steps = sorted(int(n[len('step-'):]) for n in os.listdir(folder)
                 if n.startswith('step-') and n[len('step-'):].isdigit())
  for old in steps[:-2]:
    shutil.rmtree(os.path.join(folder, f'step-{old}'), ignore_errors=True)


def plot_history(history, path: str) -> None:
  """Training and held-out denoising loss against steps (PNG)."""
  # pylint: disable-next=g-import-not-at-top
  from matplotlib import figure
  # pylint: disable-next=g-import-not-at-top
  from matplotlib.backends import backend_agg
  fig = figure.Figure(figsize=(6.5, 4.0))
  backend_agg.FigureCanvasAgg(fig)
  ax = fig.add_subplot(1, 1, 1)
  for key, label in (('train_loss', 'training (mean since last point)'),
                     ('heldout_loss', 'held-out')):
    points = [(r['step'], r[key]) for r in history if r.get(key) is not None]
    if points:
      ax.plot(*zip(*points), marker='.', label=label)
  ax.set_xlabel('step')
  ax.set_ylabel('denoising loss (nats per target token)')
  ax.set_title('Span-corruption pre-training')
  ax.grid(alpha=0.3)
  ax.legend(fontsize='small')
  fig.savefig(path, dpi=110)


def run_pretrain(*, data_dir: Optional[str], output_dir: str,
                 data: DataConfig, model: seq2seq.Seq2SeqConfig,
                 training: TrainingConfig, budget: BudgetConfig,
                 seed: int = 0, restart: bool = False) -> dict[str, Any]:
  """Pre-trains (or resumes, or reads back) the run in `output_dir`.

  Args:
    data_dir: The shared/data folder; None finds it.
    output_dir: The run directory (see the module docstring).
    data: Corpora, tokenizer and corruption.
    model: The seq2seq model; its maximum lengths are replaced by `data`'s
      and its vocabulary size by the tokenizer's (as text2sql does).
    training: The optimizer.
    budget: Steps, time, evaluation and checkpoint cadence.
    seed: Seed of everything (model initialisation included).
    restart: Remove the run `output_dir` holds (its tokenizer and corpus
      cache included) and start over.

  `config.json` and `data_fingerprint.json` (the corpus files read) are
  written once the corpus is prepared; a run resumed after a corpus file
  changed is refused (the corpus is cached in `corpus.npz`, but the files
  it came from are hashed again).

  Returns:
    The content of `results.json`.

  Raises:
    InputError: Bad corpora or settings (naming the file or flag).
    CheckpointError: `output_dir` holds another experiment, or a run whose
      corpus files changed.
  """
  model = dataclasses.replace(
      model, seed=seed, vocabulary_size=data.vocabulary_size,
      max_source_length=data.max_source_length,
      max_target_length=data.max_target_length)
  config = collections.OrderedDict(
      experiment=collections.OrderedDict(
          seed=seed, objective='t5_span_corruption', data=data, model=model,
          training=training),
      loop=budget, data_dir=data_dir,
      versions=collections.OrderedDict(tensorflow=tf.__version__,
                                       numpy=np.__version__))
  with training_lib.prepare_run_dir(
      output_dir, config, restart=restart,
      data_root=data_root.locate_data_dir(data_dir).path):
    tokenizer, train, heldout, info = pretrain_corpus.prepare_corpus(
        output_dir, data, data_dir, seed)
  # The run has started: its config and data fingerprint are recorded.
  model = dataclasses.replace(model,
                              vocabulary_size=tokenizer.vocabulary_size())
  logging.info('pretrain: %d training examples (%d tokens), vocabulary %d',
               info['train_examples'], info['train_tokens'],
               info['vocabulary_size'])
  trainer = _Trainer(model, training)
  state = _restore(trainer, output_dir)
  results_path = os.path.join(output_dir, RESULTS_FILE)
  budget_seconds = budget.max_minutes * 60.0

  def done():
    return (state['step'] >= budget.train_steps
            or state['seconds'] >= budget_seconds)

  previous = run_cache.finished_results(output_dir)
  if done() and previous is not None and previous['steps'] == state['step']:
    logging.info('pretrain: %s finished at step %d; reusing it', output_dir,
                 state['step'])
    return previous
  batches = pretrain_corpus.Batches(train, data, training.batch_size, seed,
                     tokenizer.vocabulary_size())
  heldout_batches = pretrain_corpus.heldout_batches(heldout, batches,
                                                    seed)

  def evaluate(record):
    loss = trainer.heldout_loss(heldout_batches)
    record.update(heldout_loss=loss, heldout_perplexity=float(np.exp(loss)))

  if not state['history']:
    record = {'step': 0, 'seconds': 0.0}
    evaluate(record)
    state['history'].append(record)
  start = time.perf_counter()
  offset = state['seconds']
  while not done():
    x, y = batches(state['step'])
    loss = trainer.train_step(x[seq2seq.ENCODER_TOKEN_IDS],
                              x[seq2seq.DECODER_TOKEN_IDS], y,
                              tf.constant(state['step'], tf.int64))
    state['step'] += 1
    state['pending_loss'][0] += float(loss)
    state['pending_loss'][1] += 1
    state['seconds'] = offset + time.perf_counter() - start
    last = done()
    if last or state['step'] % budget.eval_every == 0:
      total, count = state['pending_loss']
      record = {'step': state['step'], 'train_loss': total / count}
      evaluate(record)
      state['seconds'] = offset + time.perf_counter() - start
      record['seconds'] = state['seconds']
      state['history'].append(record)
      state['pending_loss'] = [0.0, 0]
      logging.info('pretrain: step %d, %s', state['step'], record)
    if last or state['step'] % budget.checkpoint_every == 0:
      _save(trainer, output_dir, state)
  if state['history'][-1]['step'] != state['step']:
    # Stopped by the budget right after a checkpoint: record the end.
    record = {'step': state['step']}
    evaluate(record)
    state['history'].append(record)

  pretrain_corpus.save_atomically(
      os.path.join(output_dir, BEST_CHECKPOINT_DIR),
      lambda d: seq2seq.save_checkpoint(
          trainer.model, os.path.join(d, UNIT, BEST_CHECKPOINT_PREFIX)))
  history = state['history']
  training_lib.write_json(os.path.join(output_dir, HISTORY_FILE), history)
  plot_history(history, os.path.join(output_dir, LOSS_PLOT_FILE))
  steps_per_second = None
  timed = [r for r in history if r.get('seconds')]
  if timed:
    steps_per_second = timed[-1]['step'] / timed[-1]['seconds']
  results = collections.OrderedDict(
      config=config,
      corpus=info,
      vocabulary_size=tokenizer.vocabulary_size(),
      steps=state['step'],
      stopped_by=('steps' if state['step'] >= budget.train_steps else
                  'max_minutes'),
      examples_seen=state['step'] * training.batch_size,
      epochs=state['step'] / batches.batches_per_epoch,
      training_seconds=state['seconds'],
      steps_per_second=steps_per_second,
      initial_heldout_perplexity=history[0]['heldout_perplexity'],
      heldout_loss=history[-1]['heldout_loss'],
      heldout_perplexity=history[-1]['heldout_perplexity'],
      selected_checkpoint=os.path.join(BEST_CHECKPOINT_DIR, UNIT,
                                       BEST_CHECKPOINT_PREFIX),
      parameters=int(sum(np.prod(v.shape)
                         for v in trainer.model.trainable_variables)),
  )
  training_lib.write_json(results_path, results)
  return results
