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
maximum lengths passes `_check_init_model`.

Besides: `corpus.npz` (the tokenized texts, cached), `checkpoints/` (model
and Adam state every `checkpoint_every` steps, written atomically, the two
newest kept; `state.json` points to the newest and holds the history),
`history.json`, `pretrain_loss.png` and, last, `results.json` (held-out
loss and perplexity, steps, examples and tokens seen, wall time, corpora
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
from tff_nlp.data import files
from tff_nlp.data import text_classification
from tff_nlp.models import dropout_seeds
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_loss
from tff_nlp.models import span_corruption
from tff_nlp.models import subword_tokenizer
from tff_nlp.training import run_cache

# The layout `experiments.text2sql`'s init_from reads (the same names as
# its TOKENIZER_DIR, BEST_CHECKPOINT_DIR and BEST_CHECKPOINT_PREFIX).
TOKENIZER_DIR = 'tokenizer'
BEST_CHECKPOINT_DIR = 'best_checkpoint'
BEST_CHECKPOINT_PREFIX = 'ckpt'
UNIT = 'pretrain'
CHECKPOINTS_DIR = 'checkpoints'
STATE_FILE = 'state.json'
CORPUS_FILE = 'corpus.npz'
HISTORY_FILE = 'history.json'
RESULTS_FILE = 'results.json'
LOSS_PLOT_FILE = 'pretrain_loss.png'

# The public text of shared/data that no text-to-SQL client owns: both
# sides of every nmt_de_en_large training split, and the classification
# training texts (trec6 and not trec50, r8 and not reuters8_fedseit: the
# same texts).
_NMT_DOMAINS = ('generic', 'multi30k_captions', 'php_docs', 'ted_iwslt14',
                'ubuntu_l10n', 'wmt_news')
DEFAULT_CORPORA = tuple(
    f'nmt_de_en_large/{domain}/train.{lang}' for domain in _NMT_DOMAINS
    for lang in ('en', 'de')) + tuple(
        f'text_classification/{name}/train.tsv'
        for name in ('r8', 'subj', 'tmn', 'trec6'))


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """The pre-training text and how it becomes examples.

  Attributes:
    corpora: Text files, relative to the data folder (or absolute): one
      text per line, or `label<TAB>text` lines for `.tsv` files (the text
      is taken). Empty lines are skipped.
    max_texts_per_corpus: A seeded subset of each file; 0: every line.
    heldout_texts: Texts held out (seeded, from all files) for the held-out
      denoising loss.
    vocabulary_size: Upper bound of the tokenizer's vocabulary (sentinels
      included).
    tokenizer_texts: Training texts the tokenizer is trained on (a seeded
      subset); 0: all.
    num_sentinels: Sentinel ids, the top of the vocabulary.
    max_source_length: Encoder tokens (the text2sql run's); longer texts
      are cut into pieces that fit.
    max_target_length: Decoder tokens (the text2sql run's).
    noise_density: Fraction of a text's tokens corrupted.
    mean_noise_span_length: Mean length of a corrupted span.
  """

  corpora: tuple[str, ...] = DEFAULT_CORPORA
  max_texts_per_corpus: int = 0
  heldout_texts: int = 1000
  vocabulary_size: int = 8000
  tokenizer_texts: int = 200000
  num_sentinels: int = span_corruption.NUM_SENTINELS
  max_source_length: int = 128
  max_target_length: int = 160
  noise_density: float = span_corruption.NOISE_DENSITY
  mean_noise_span_length: float = span_corruption.MEAN_NOISE_SPAN_LENGTH

  def __post_init__(self):
    if not self.corpora:
      raise errors.InputError('--corpora: name at least one text file.')
    for name in ('heldout_texts', 'vocabulary_size', 'num_sentinels',
                 'max_source_length', 'max_target_length'):
      if getattr(self, name) < 1:
        raise errors.InputError(
            f'--{name} must be positive, got {getattr(self, name)}.')
    if not 0 < self.noise_density < 1:
      raise errors.InputError(
          f'--noise_density must be in (0, 1), got {self.noise_density}.')
    if self.mean_noise_span_length < 1:
      raise errors.InputError('--mean_noise_span_length must be >= 1, got '
                              f'{self.mean_noise_span_length}.')
    if self.text_length() < 2:
      raise errors.InputError(
          f'--max_source_length={self.max_source_length} and '
          f'--max_target_length={self.max_target_length} leave no room for '
          'a corrupted text of 2 tokens.')

  def text_length(self) -> int:
    """L: the most tokens of a text whose corruption fits both lengths.

    Input: L - noise + spans + END <= L + 1 <= max_source_length. Target:
    noise + spans + END, spans <= noise.
    """
    length = self.max_source_length - 1
    while length > 1:
      noise = min(max(round(length * self.noise_density), 1), length - 1)
      if 2 * noise + 1 <= self.max_target_length:
        break
      length -= 1
    return length


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


def read_corpus(path: str) -> list[str]:
  """The non-empty texts of one corpus file (InputError naming it)."""
  if path.endswith(text_classification.SPLIT_SUFFIX):
    texts = text_classification.read_tsv(path)[1]
  else:
    content = files.read_file_bytes(path, 'a UTF-8 text file, one text per '
                                    'line')
    try:
      texts = content.decode('utf-8').split('\n')
    except UnicodeDecodeError as e:
      raise errors.InputError(
          f'{path}: not valid UTF-8 (byte {e.start}).') from None
  texts = [t.strip() for t in texts if t.strip()]
  if not texts:
    raise errors.InputError(f'{path}: empty corpus; expected one text per '
                            'line.')
  return texts


def _load_texts(data: DataConfig, data_dir: Optional[str], seed: int
                ) -> tuple[list[str], list[dict[str, Any]]]:
  """Every corpus's texts (seeded subsets) and their counts."""
  root = None
  texts, counts = [], []
  for index, name in enumerate(data.corpora):
    if os.path.isabs(name):
      path = name
    else:
      root = root or data_root.find_data_dir(data_dir)
      path = os.path.join(root, name)
    lines = read_corpus(path)
    total = len(lines)
    if 0 < data.max_texts_per_corpus < total:
      keep = np.random.default_rng([seed, 3, index]).choice(
          total, data.max_texts_per_corpus, replace=False)
      lines = [lines[i] for i in np.sort(keep)]
    texts += lines
    counts.append(collections.OrderedDict(
        corpus=name, lines=total, texts=len(lines),
        characters=sum(len(t) for t in lines)))
  return texts, counts


def _save_atomically(directory: str, write) -> None:
  """Calls `write(temp_dir)`, then renames temp_dir to `directory`."""
  temp = directory + '.tmp'
  shutil.rmtree(temp, ignore_errors=True)
  os.makedirs(temp)
  write(temp)
  shutil.rmtree(directory, ignore_errors=True)
  os.replace(temp, directory)


def prepare_corpus(output_dir: str, data: DataConfig, data_dir: Optional[str],
                   seed: int):
  """(tokenizer, texts as id arrays, held-out ids, corpus info), cached.

  The tokenizer (trained on a seeded subset of the non-held-out texts, then
  `span_corruption.add_sentinels`) is kept in `tokenizer/`, the token ids
  in `corpus.npz`; a restart reads both back. Texts of fewer than 2
  tokens are dropped, longer ones than `data.text_length()` cut into pieces.
  """
  tokenizer_dir = os.path.join(output_dir, TOKENIZER_DIR)
  corpus_path = os.path.join(output_dir, CORPUS_FILE)
  if os.path.exists(corpus_path) and os.path.isdir(tokenizer_dir):
    tokenizer = subword_tokenizer.SubwordTokenizer.load(tokenizer_dir)
    with np.load(corpus_path) as cached:
      arrays = {k: cached[k] for k in cached.files}
    info = json.loads(str(arrays['info']))
  else:
    start = time.perf_counter()
    texts, counts = _load_texts(data, data_dir, seed)
    if len(texts) <= data.heldout_texts:
      raise errors.InputError(
          f'--corpora hold {len(texts)} texts, not more than '
          f'--heldout_texts={data.heldout_texts}.')
    order = np.random.default_rng([seed, 4]).permutation(len(texts))
    heldout = np.sort(order[:data.heldout_texts])
    train = np.sort(order[data.heldout_texts:])
    if not os.path.isdir(tokenizer_dir):
      sample = train
      if 0 < data.tokenizer_texts < len(train):
        sample = np.sort(np.random.default_rng([seed, 5]).choice(
            train, data.tokenizer_texts, replace=False))
      logging.info('pretrain: training the tokenizer on %d texts',
                   len(sample))
      try:
        tokenizer = subword_tokenizer.SubwordTokenizer.train(
            [texts[i] for i in sample], data.vocabulary_size)
      except ValueError as e:  # SentencePiece refuses the vocabulary size.
        raise errors.InputError(
            f'--vocabulary_size={data.vocabulary_size}: no tokenizer of this '
            f'size can be trained on --corpora ({e}).') from e
      tokenizer = span_corruption.add_sentinels(
          tokenizer, data.num_sentinels)
      _save_atomically(tokenizer_dir, tokenizer.save)
    tokenizer = span_corruption.add_sentinels(
        subword_tokenizer.SubwordTokenizer.load(tokenizer_dir),
        data.num_sentinels)
    arrays = {}
    for name, part in (('train', train), ('heldout', heldout)):
      ids, offsets = _tokenize([texts[i] for i in part], tokenizer,
                               data.text_length())
      arrays[f'{name}_ids'], arrays[f'{name}_offsets'] = ids, offsets
    info = collections.OrderedDict(
        corpora=counts, texts=len(texts), heldout_texts=len(heldout),
        train_examples=len(arrays['train_offsets']) - 1,
        heldout_examples=len(arrays['heldout_offsets']) - 1,
        train_tokens=len(arrays['train_ids']),
        heldout_tokens=len(arrays['heldout_ids']),
        vocabulary_size=tokenizer.vocabulary_size(),
        text_length=data.text_length(),
        preparation_seconds=time.perf_counter() - start)
    arrays['info'] = np.array(json.dumps(info))
    temp = corpus_path + '.tmp.npz'
    np.savez(temp, **arrays)
    os.replace(temp, corpus_path)

  def split(name):
    ids, offsets = arrays[f'{name}_ids'], arrays[f'{name}_offsets']
    return [ids[a:b] for a, b in zip(offsets[:-1], offsets[1:])]

  if not split('train'):
    raise errors.InputError('--corpora: no training text of 2 or more tokens.')
  return tokenizer, split('train'), split('heldout'), info


def _tokenize(texts, tokenizer, length: int, chunk: int = 4096):
  """Flat int32 ids and offsets of the pieces (2..length tokens) of texts."""
  pieces = []
  for start in range(0, len(texts), chunk):
    ragged = tokenizer.tokenize(tf.constant(texts[start:start + chunk]))
    for row in ragged.to_list():
      for begin in range(0, len(row), length):
        piece = row[begin:begin + length]
        if len(piece) >= 2:
          pieces.append(piece)
  offsets = np.cumsum([0] + [len(p) for p in pieces]).astype(np.int64)
  ids = (np.concatenate([np.asarray(p, np.int32) for p in pieces])
         if pieces else np.zeros([0], np.int32))
  return ids, offsets


class _Batches:
  """The batch of step s: a function of (seed, s) only.

  Each epoch is a seeded permutation of the examples (the last
  `len % batch_size` left out), cut into windows of `_WINDOW` batches whose
  examples are sorted by length before they are cut into batches, and the
  epoch's batches are then shuffled: a batch holds texts of similar
  lengths, so little of it is padding (random batches of the cpu preset's
  texts are 5x their tokens once padded), and every example is seen once
  an epoch.
  """

  _WINDOW = 50

  def __init__(self, examples, data: DataConfig, batch_size: int, seed: int,
               vocabulary_size: int):
    self._examples = examples
    self._lengths = np.array([len(e) for e in examples])
    self._data, self._batch_size, self._seed = data, batch_size, seed
    self.sentinels = span_corruption.sentinel_ids(vocabulary_size,
                                                  data.num_sentinels)
    self.batches_per_epoch = max(len(examples) // batch_size, 1)
    self._epoch, self._batches = None, None

  def _epoch_batches(self, epoch: int) -> np.ndarray:
    """int [batches_per_epoch, batch_size]: the epoch's batches, in order."""
    size = self.batches_per_epoch * self._batch_size
    order = np.resize(np.random.default_rng([self._seed, 1, epoch])
                      .permutation(len(self._examples)), size)
    window = self._WINDOW * self._batch_size
    for start in range(0, size, window):
      part = order[start:start + window]
      order[start:start + window] = part[np.argsort(self._lengths[part],
                                                    kind='stable')]
    batches = order.reshape(self.batches_per_epoch, self._batch_size)
    return batches[np.random.default_rng([self._seed, 7, epoch]).permutation(
        self.batches_per_epoch)]

  def corrupt(self, examples, rng):
    return span_corruption.pack([span_corruption.corrupt(
        e, rng, self.sentinels, noise_density=self._data.noise_density,
        mean_noise_span_length=self._data.mean_noise_span_length)
                                 for e in examples])

  def __call__(self, step: int):
    epoch, index = divmod(step, self.batches_per_epoch)
    if epoch != self._epoch:
      self._epoch, self._batches = epoch, self._epoch_batches(epoch)
    examples = [self._examples[i] for i in self._batches[index]]
    return self.corrupt(examples, np.random.default_rng([self._seed, 2, step]))


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


def _heldout_batches(examples, batches: _Batches, seed: int, size: int = 128):
  """The held-out examples, corrupted once (seeded), by length in batches."""
  rng = np.random.default_rng([seed, 6])
  pairs = [batches.corrupt([e], rng) for e in examples]
  pairs = sorted(pairs, key=lambda p: p[0][seq2seq.ENCODER_TOKEN_IDS].shape)
  return [_concatenate(pairs[i:i + size]) for i in range(0, len(pairs), size)]


def _concatenate(batches):
  """One batch of `span_corruption.pack` batches, padded to the longest."""
  def stack(arrays):
    width = max(a.shape[1] for a in arrays)
    return np.concatenate([np.pad(a, [[0, 0], [0, width - a.shape[1]]])
                           for a in arrays])
  x = collections.OrderedDict(
      (key, stack([b[0][key] for b in batches])) for key in batches[0][0])
  return x, stack([b[1] for b in batches])


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
  _save_atomically(os.path.join(folder, name), lambda d: trainer.checkpoint(
  ).write(os.path.join(d, 'ckpt')))
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
                 seed: int = 0) -> dict[str, Any]:
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

  Returns:
    The content of `results.json`.

  Raises:
    InputError: Bad corpora or settings (naming the file or flag).
    CheckpointError: `output_dir` holds another experiment.
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
  training_lib.prepare_run_dir(output_dir, config)
  tokenizer, train, heldout, info = prepare_corpus(output_dir, data, data_dir,
                                                   seed)
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
  batches = _Batches(train, data, training.batch_size, seed,
                     tokenizer.vocabulary_size())
  heldout_batches = _heldout_batches(heldout, batches, seed)

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

  _save_atomically(os.path.join(output_dir, BEST_CHECKPOINT_DIR),
                   lambda d: seq2seq.save_checkpoint(
                       trainer.model, os.path.join(d, UNIT,
                                                   BEST_CHECKPOINT_PREFIX)))
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
