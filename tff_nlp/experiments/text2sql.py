"""Federated text-to-SQL: finetuning, centralized and federated training.

Reproduces the protocol of Zhang et al., "Federated Learning for Semantic
Parsing: Task Formulation, Evaluation Setup, New Algorithms", ACL 2023
(arXiv 2305.17221; `shared/docs/lorar.md`): eight single-domain text-to-SQL
datasets (`tff_nlp.data.text2sql`) are eight clients; a seq2seq parser
(`tff_nlp.models.seq2seq`) maps the question followed by the serialized
schema to SQL with values. Three paradigms:

*   `finetune`: one model per client, trained on its own data, selected on
    its own dev set;
*   `centralized`: one model trained on the union of the training sets,
    selected on the merged dev set;
*   `federated`: FedAvg / FedOPT / FedProx with a client weighting
    (`num_examples`, `uniform`, `loss_reduction`, `lorar`), every client in
    every round with its own local epochs, learning rate and batch size;
    the global model is evaluated on the merged dev set every `eval_every`
    rounds.

In every paradigm the model with the best dev exact match is evaluated on
every client's test set (exact match, and execution accuracy where a SQLite
database exists). Teacher-forced token loss and accuracy
(`make_token_metrics_fn`) are recorded beside them, on dev at every evaluation
and on test at the end: they separate models whose exact match is still 0.

All three paradigms run through the same resumable loop
(`tff_nlp.training.run_training`) and the same TFF learning process: the
non-federated paradigms are a one-client FedAvg whose round is one epoch
and whose server step (SGD, learning rate 1) takes the client's model. This
gives them checkpoints, resume and metrics for free. The one difference from
a plain Keras loop: the client optimizer's state (e.g. Adam's moments)
starts afresh every epoch.

The subword vocabulary is trained on the training text of every client, a
stand-in for the public pre-trained T5 vocabulary of the paper; the text
never enters a federated computation.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import functools
import json
import os
import shutil
import time
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms
from tff_nlp import errors
from tff_nlp import plots
from tff_nlp import training as training_lib
from tff_nlp.algorithms import vocab_sliced
from tff_nlp.baselines import template_retrieval
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source
from tff_nlp.experiments import seq2seq_examples
from tff_nlp.experiments import text2sql_templates
from tff_nlp.experiments.seq2seq_examples import decode
from tff_nlp.experiments.seq2seq_examples import make_token_metrics_fn
from tff_nlp.experiments.seq2seq_examples import train_dataset
from tff_nlp.metrics import intervals
from tff_nlp.metrics import sql_execution
from tff_nlp.metrics import text2sql as text2sql_metrics
from tff_nlp.metrics import text2sql_report
from tff_nlp.models import copy_tokenizer
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_decoding
from tff_nlp.models import seq2seq_model_fn
from tff_nlp.models import subword_tokenizer
from tff_nlp.models import text_classifier
from tff_nlp.training import run_dir as run_dir_lib

PARADIGMS = ('finetune', 'centralized', 'federated')
TOKENIZERS = ('copy_words', 'subword')
TOKENIZER_DIR = 'tokenizer'
BEST_MODEL_FILE = 'best_model.npz'
# The selected model as a `seq2seq.save_checkpoint` checkpoint, per trained
# model (`federated`, `centralized` or the client): what `init_from` reads.
BEST_CHECKPOINT_DIR = 'best_checkpoint'
BEST_CHECKPOINT_PREFIX = 'ckpt'
BEST_MODEL_INFO_FILE = 'best_model.json'
RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
PREDICTIONS_DIR = 'predictions'
LOSS_PLOT_FILE = 'training_loss.png'
DEV_PLOT_FILE = 'dev_exact_match.png'
DEV_METRIC = 'dev_exact_match'
# The `Seq2SeqConfig` fields in which a run may differ from its `init_from`
# run: none changes what the loaded weights compute. `dropout` acts only in
# training; `seed` draws the initial weights, which the loaded ones replace,
# and keys dropout masks. `vocabulary_size` is the tokenizer's, and the
# tokenizer is copied from the `init_from` run, so the model has that run's
# vocabulary whatever `model` and `data.vocabulary_size` say. (The maximum
# lengths are `data`'s, not `model`'s, and they shape the learned position
# embeddings: `_check_init_model` compares `data`'s.)
INIT_FROM_FREE_FIELDS = ('dropout', 'seed', 'vocabulary_size')
_LENGTH_FIELDS = ('max_source_length', 'max_target_length')


@dataclasses.dataclass(frozen=True)
class PerClient:
  """A value per client: a default and the clients that differ from it.

  Written `12,advising=6,atis=6` on the command line (`parse`): a bare value
  is the default, `name=value` overrides one client.
  """

  default: float
  overrides: tuple[tuple[str, float], ...] = ()

  def __getitem__(self, client: str) -> float:
    return dict(self.overrides).get(client, self.default)

  @classmethod
  def parse(cls, spec: Sequence[str], *, name: str, kind: type = float,
            allow_zero: bool = False) -> 'PerClient':
    """Parses `['12', 'advising=6']` (a flag's list); errors name `name`.

    Values must be positive, or also 0 with `allow_zero`.
    """
    default, overrides = None, {}
    for item in spec:
      key, sep, value = item.strip().rpartition('=')
      try:
        number = kind(value)
      except ValueError:
        raise errors.InputError(
            f'--{name}: {item!r} is not a {kind.__name__} or '
            f'client={kind.__name__}.') from None
      if not (number > 0 or (allow_zero and number == 0)):
        raise errors.InputError(
            f'--{name}: {item!r} must be '
            f'{">= 0" if allow_zero else "positive"}.')
      if not sep:
        if default is not None:
          raise errors.InputError(f'--{name}: two default values in {spec}.')
        default = number
      elif key not in text2sql.CLIENTS:
        raise errors.InputError(
            f'--{name}: unknown client {key!r} in {item!r}; clients: '
            f'{list(text2sql.CLIENTS)}.')
      else:
        overrides[key] = number
    if default is None:
      raise errors.InputError(
          f'--{name}: needs a default value (e.g. "12,advising=6"), got '
          f'{list(spec)}.')
    return cls(default, tuple(sorted(overrides.items())))


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Which examples, and how they become token ids.

  Attributes:
    clients: Client names, from `text2sql.CLIENTS` (the paper's order).
    with_values: Values filled into questions and SQL (the paper's setting);
      False keeps the anonymised variable names.
    schema_columns: Serialize table and column names after the question (as
      the paper); False serializes table names only (shorter inputs).
    tokenizer: 'copy_words' (`models.copy_tokenizer`: word tokens, copy
      ids for source words outside the vocabulary, and a model that copies
      from its input) or 'subword' (a SentencePiece vocabulary, no copying).
    vocabulary_size: Upper bound of the vocabulary.
    sql_merges: With copy_words: the most SQL-phrase merges
      (`copy_tokenizer.learn_merges`: frequent word pairs of the training
      SQL that no question holds become one token); 0: none.
    retrieved_sql: Retrieve-and-edit (copy_words only): each input ends
      with the SQL that template retrieval (`baselines.template_retrieval.
      retrieved_sql`, the no-learning baseline) predicts for the question
      from the client's own training examples, leave-one-out in training
      (`copy_tokenizer.with_sql_hint`), so the parser copies the nearest
      example's SQL and edits it. Not in the paper (whose parser is a
      pre-trained T5): a way for a parser trained from scratch to start at
      the baseline.
    max_source_length: Encoder tokens; longer inputs are truncated, and
      counted in `results.json`. 0 (copy_words only): the longest input of
      the data, so none is truncated.
    max_target_length: Decoder tokens (SQL plus END); longer SQL is
      truncated in training, counted, and cannot be matched exactly. 0
      (copy_words only): the longest SQL of the data (every split: a length,
      not its content), so no gold SQL is truncated.
    max_train_examples: Training examples per client, a seeded random
      subset; 0 keeps all (smoke runs use a few). A `PerClient` (e.g.
      `PerClient(200, (('advising', 400), ('atis', 400)))`) caps each client
      differently, which keeps the clients' sizes unequal at a small scale;
      an int caps them all.
    max_eval_examples: Dev and test examples per client, a seeded random
      subset; 0 keeps all.
  """

  clients: tuple[str, ...] = text2sql.CLIENTS
  with_values: bool = True
  schema_columns: bool = True
  tokenizer: str = 'subword'
  vocabulary_size: int = 4000
  sql_merges: int = 0
  retrieved_sql: bool = False
  max_source_length: int = 256
  max_target_length: int = 256
  max_train_examples: PerClient | int = 0
  max_eval_examples: int = 0

  def __post_init__(self):
    if not self.clients:
      raise ValueError('clients must name at least one client.')
    for name in self.clients:
      text2sql.check_client(name)
    if len(set(self.clients)) != len(self.clients):
      raise ValueError(f'clients are repeated: {list(self.clients)}.')
    if self.tokenizer not in TOKENIZERS:
      raise ValueError(f'Unknown tokenizer {self.tokenizer!r}; expected one '
                       f'of {TOKENIZERS}.')
    if self.sql_merges < 0 or (self.sql_merges
                               and self.tokenizer != 'copy_words'):
      raise ValueError(f'sql_merges must be >= 0, and 0 unless the '
                       f'tokenizer is copy_words; got {self.sql_merges}.')
    if self.retrieved_sql and self.tokenizer != 'copy_words':
      raise ValueError('retrieved_sql needs the copy_words tokenizer, got '
                       f'{self.tokenizer!r}.')
    if self.vocabulary_size < 1:
      raise ValueError(
          f'vocabulary_size must be positive, got {self.vocabulary_size}.')
    for name in ('max_source_length', 'max_target_length'):
      value = getattr(self, name)
      if value < 0 or (value == 0 and self.tokenizer != 'copy_words'):
        raise ValueError(
            f'{name} must be positive (or 0 with the copy_words tokenizer: '
            f'the longest of the data), got {value}.')
    if not isinstance(self.max_train_examples, PerClient):
      object.__setattr__(self, 'max_train_examples',
                         PerClient(self.max_train_examples))
    train_limits = [self.max_train_examples.default] + [
        value for _, value in self.max_train_examples.overrides]
    if min(train_limits) < 0:
      raise ValueError(
          f'max_train_examples must be >= 0, got {self.max_train_examples}.')
    if self.max_eval_examples < 0:
      raise ValueError(
          f'max_eval_examples must be >= 0, got {self.max_eval_examples}.')


# The paper's local training (Section 5, `lorar.md`): Adafactor, 6 local
# epochs and batch 8 for the two large clients, 12 epochs and batch 4 for the
# others; learning rate 1e-4 for advising, atis, geography and yelp, 1e-3 for
# the others.
PAPER_LOCAL_EPOCHS = PerClient(12, (('advising', 6), ('atis', 6)))
PAPER_BATCH_SIZES = PerClient(4, (('advising', 8), ('atis', 8)))
PAPER_LEARNING_RATES = PerClient(
    1e-3, (('advising', 1e-4), ('atis', 1e-4), ('geography', 1e-4),
           ('yelp', 1e-4)))


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """How the parser is trained.

  Attributes:
    paradigm: One of `PARADIGMS`.
    algorithm: 'fedavg', 'fedopt' or 'fedprox' (federated only).
    weighting: The client weighting (federated only).
    client_optimizer: A key of `algorithms.CLIENT_OPTIMIZERS`.
    local_epochs: Local epochs per round, per client (federated only; in the
      other paradigms a round is one epoch).
    learning_rates: Client learning rate per client; the default is also
      the centralized model's.
    batch_sizes: Batch size per client; the default is also the centralized
      model's.
    proximal_strength: FedProx's mu (only for 'fedprox').
    decode_batch_size: Examples decoded at once in evaluation.
  """

  paradigm: str = 'federated'
  algorithm: str = 'fedopt'
  weighting: str = 'lorar'
  client_optimizer: str = 'adam'
  local_epochs: PerClient = PAPER_LOCAL_EPOCHS
  learning_rates: PerClient = PAPER_LEARNING_RATES
  batch_sizes: PerClient = PAPER_BATCH_SIZES
  proximal_strength: float = 1e-4
  decode_batch_size: int = 64

  def __post_init__(self):
    if self.paradigm not in PARADIGMS:
      raise ValueError(f'Unknown paradigm {self.paradigm!r}; expected one of '
                       f'{PARADIGMS}.')
    if self.client_optimizer not in algorithms.CLIENT_OPTIMIZERS:
      raise ValueError(
          f'Unknown client_optimizer {self.client_optimizer!r}; expected one '
          f'of {sorted(algorithms.CLIENT_OPTIMIZERS)}.')
    algorithms.Algorithm(self.algorithm)
    algorithms.Weighting(self.weighting)

  @property
  def method(self) -> text2sql_report.MethodKey:
    """The row of the paper's Table 2 this run fills."""
    if self.paradigm == 'federated':
      return ('federated', self.algorithm, self.weighting)
    return (self.paradigm,)


@dataclasses.dataclass
class EncodedSplit:
  """One split of one client as model inputs.

  Attributes:
    x: `seq2seq_inputs.input_spec` inputs (numpy, all examples).
    y: Target ids [N, T].
    sources: The model input texts.
    gold_sql: The gold SQL strings.
    gold_sql: The gold SQL strings, with values (on the anonymised
      protocol too: what predictions are scored against).
    truncated_sources: Inputs longer than `max_source_length`.
    truncated_targets: SQL longer than `max_target_length - 1`.
    variables: On the anonymised protocol, each example's variable values,
      filled into the predicted SQL before it is scored; else None.
    questions: The template parser's (query, sentence) of each example
      (`text2sql_templates`), whose values fill a predicted template; else
      None.
  """

  x: collections.OrderedDict
  y: np.ndarray
  sources: list[str]
  gold_sql: list[str]
  truncated_sources: int
  truncated_targets: int
  variables: Optional[list[Mapping[str, str]]] = None
  questions: Optional[list[Any]] = None

  def __len__(self) -> int:
    return len(self.gold_sql)


@dataclasses.dataclass
class Text2SqlTask:
  """The clients' data, tokenized, and the tokenizer.

  `source_length` and `target_length` are the encoded lengths (the
  config's, or the data's longest when the config says 0).
  """

  clients: tuple[str, ...]
  tokenizer: Any  # SubwordTokenizer or CopyTokenizer
  splits: dict[str, dict[str, EncodedSplit]]  # client -> split -> data
  databases: dict[str, str]  # client -> SQLite path, where one exists
  source_length: int = 0
  target_length: int = 0
  # Client -> the most tokens its decoding can need (`decode_length`).
  decode_lengths: dict[str, int] = dataclasses.field(default_factory=dict)

  def decode_length(self, client: str) -> int:
    """The most tokens worth generating for `client`'s questions.

    With the copy tokenizer every output token is at least one word of
    `copy_tokenizer.split_words`, so an output with more tokens than the
    client's longest SQL (of any split) has words (and END) matches no gold
    SQL of the client: decoding stops there instead of running a weak
    model's never-ending outputs to the longest SQL of all clients. Exact
    match is unchanged. Otherwise (subword pieces): `target_length`.
    """
    return min(self.decode_lengths.get(client, self.target_length),
               self.target_length)

  def model_config(self, model: seq2seq.Seq2SeqConfig
                   ) -> seq2seq.Seq2SeqConfig:
    """`model` with this task's vocabulary, lengths and copying."""
    copies = getattr(self.tokenizer, 'copies_from_source', False)
    return dataclasses.replace(
        model, vocabulary_size=self.tokenizer.vocabulary_size(),
        max_source_length=self.source_length,
        max_target_length=self.target_length,
        copy_from_source=copies,
        output_vocabulary_size=(self.tokenizer.output_vocabulary_size()
                                if copies else 0))


def _subset(examples, limit, seed, client, split):
  if not limit or len(examples) <= limit:
    return list(examples)
  rng = np.random.default_rng(
      [seed, text2sql.CLIENTS.index(client), text2sql.SPLITS.index(split)])
  return [examples[i] for i in sorted(rng.choice(len(examples), limit,
                                                 replace=False))]


def _encode(tokenizer, sources, gold_sql, config: DataConfig) -> EncodedSplit:
  encoded = seq2seq_examples.encode_pairs(
      tokenizer, sources, gold_sql, source_length=config.max_source_length,
      target_length=config.max_target_length)
  return EncodedSplit(
      x=encoded.x, y=encoded.y, sources=list(sources),
      gold_sql=list(gold_sql), truncated_sources=encoded.truncated_sources,
      truncated_targets=encoded.truncated_targets)


def _encode_copy(tokenizer: copy_tokenizer.CopyTokenizer, sources, targets,
                 *, source_length: int, target_length: int) -> EncodedSplit:
  """`seq2seq_inputs.pack_inputs`' layout with `copy_tokenizer` ids, numpy."""
  n = len(sources)
  x_source = np.zeros([n, source_length], np.int32)
  x_target = np.zeros([n, target_length], np.int32)
  y = np.zeros([n, target_length], np.int32)
  truncated_sources = truncated_targets = 0
  for row, (source, target) in enumerate(zip(sources, targets)):
    source_ids = tokenizer.encode_source(source)
    target_ids = tokenizer.encode_target(target, source)
    if len(source_ids) + 1 > source_length:
      truncated_sources += 1
      source_ids = source_ids[:source_length - 1]
      # A copy id past the cut names nothing.
      limit = tokenizer.output_vocabulary_size() + len(source_ids)
      target_ids = [i if i < limit else copy_tokenizer.UNK_ID
                    for i in target_ids]
    if len(target_ids) + 1 > target_length:
      truncated_targets += 1
      target_ids = target_ids[:target_length - 1]
    x_source[row, :len(source_ids) + 1] = source_ids + [seq2seq.END_ID]
    x_target[row, :len(target_ids) + 1] = [seq2seq.START_ID] + target_ids
    y[row, :len(target_ids) + 1] = target_ids + [seq2seq.END_ID]
  return EncodedSplit(
      x=collections.OrderedDict([(seq2seq.ENCODER_TOKEN_IDS, x_source),
                                 (seq2seq.DECODER_TOKEN_IDS, x_target)]),
      y=y, sources=list(sources), gold_sql=list(targets),
      truncated_sources=truncated_sources,
      truncated_targets=truncated_targets)


def _add_sql_hints(texts, folder: str, with_values: bool) -> None:
  """Appends each source's retrieved SQL (`DataConfig.retrieved_sql`)."""
  for name, splits in texts.items():
    queries = text2sql.read_client_queries(folder, name)
    questions = {
        split: template_retrieval.example_questions(splits[split][3],
                                                    queries, split)
        for split in text2sql.SPLITS}
    for split in text2sql.SPLITS:
      try:
        hints = template_retrieval.retrieved_sql(
            questions['train'],
            None if split == 'train' else questions[split],
            with_values=with_values)
      except ValueError as e:
        raise errors.InputError(
            f'{folder}: client {name!r}: retrieved_sql: {e}') from None
      sources, *rest = splits[split]
      splits[split] = ([copy_tokenizer.with_sql_hint(source, hint)
                        for source, hint in zip(sources, hints)], *rest)


def prepare_task(config: DataConfig, *, data_dir: Optional[str], seed: int,
                 tokenizer_dir: str) -> Text2SqlTask:
  """Loads, subsets and tokenizes the clients' data.

  The tokenizer is read from `tokenizer_dir` when it holds one (a resumed
  run), else trained on the training sources and SQL of every client and
  written there.

  Args:
    config: The data configuration.
    data_dir: The `shared/data` folder or the text2sql folder (see
      `text2sql_source.find_text2sql_dir`); None finds it.
    seed: Seed of the example subsets.
    tokenizer_dir: Where the run keeps its tokenizer.

  Returns:
    The `Text2SqlTask`.
  """
  folder = text2sql_source.find_text2sql_dir(data_dir)
  raw = text2sql.load_clients(config.clients, data_dir=data_dir,
                              with_values=config.with_values)
  texts = {}
  for name in config.clients:
    client = raw[name]
    texts[name] = {}
    for split in text2sql.SPLITS:
      limit = (config.max_train_examples[name] if split == 'train'
               else config.max_eval_examples)
      examples = _subset(getattr(client, split), limit, seed, name, split)
      if not examples:
        raise errors.InputError(
            f'{folder}: client {name!r} has no {split} examples.')
      texts[name][split] = (
          [text2sql.model_input(e.question, client.schema,
                                columns=config.schema_columns)
           for e in examples],
          [e.sql for e in examples],
          None if config.with_values else [e.variables for e in examples],
          examples)

  def training_texts():
    return [t for name in config.clients
            for part in texts[name]['train'][:2] for t in part]

  source_length = config.max_source_length
  target_length = config.max_target_length
  if config.tokenizer == 'copy_words':
    for name in config.clients:
      for split in text2sql.SPLITS:
        for text in texts[name][split][0] + texts[name][split][1]:
          copy_tokenizer.check_text(text, f'{folder}: client {name!r}')
    tokenizer = copy_tokenizer.load_or_build(
        tokenizer_dir,
        lambda: [pair for name in config.clients
                 for pair in zip(*texts[name]['train'][:2])],
        max_size=config.vocabulary_size, num_merges=config.sql_merges,
        reserved_input_words=((copy_tokenizer.SQL_HINT_MARK,)
                              if config.retrieved_sql else ()))
    if config.retrieved_sql:
      _add_sql_hints(texts, folder, config.with_values)
    lengths = [(len(tokenizer.source_tokens(source)) + 1,
                len(tokenizer.target_tokens(target)) + 1)
               for name in config.clients for split in text2sql.SPLITS
               for source, target in zip(*texts[name][split][:2])]
    source_length = source_length or max(s for s, _ in lengths)
    target_length = target_length or max(t for _, t in lengths)
    decode_lengths = {
        name: 1 + max(len(copy_tokenizer.split_words(target))
                      for split in text2sql.SPLITS
                      for target in texts[name][split][1])
        for name in config.clients}
    encode = functools.partial(_encode_copy, tokenizer,
                               source_length=source_length,
                               target_length=target_length)
  else:
    decode_lengths = {}
    tokenizer = subword_tokenizer.load_or_train(
        tokenizer_dir, training_texts, config.vocabulary_size)
    encode = functools.partial(_encode, tokenizer, config=config)
  splits = {}
  for name in config.clients:
    splits[name] = {}
    for split in text2sql.SPLITS:
      sources, sql, variables, _ = texts[name][split]
      encoded = encode(sources, sql)
      if variables is not None:
        # Anonymised protocol: the model reads and writes variable names;
        # its SQL is scored with the values filled in (oracle entities).
        encoded.variables = variables
        encoded.gold_sql = [text2sql.fill_variables(q, v)
                            for q, v in zip(sql, variables)]
      splits[name][split] = encoded
  databases = {name: path for name, path in
               sql_execution.find_databases(folder).items()
               if name in config.clients}
  return Text2SqlTask(tuple(config.clients), tokenizer, splits, databases,
                      source_length=source_length,
                      target_length=target_length,
                      decode_lengths=decode_lengths)


def prepare_template_task(config: DataConfig, *, data_dir: Optional[str],
                          seed: int, ngrams: int) -> Text2SqlTask:
  """`prepare_task` for the template parser (`text2sql_templates`).

  The "tokenizer" is a `text2sql_templates.TemplateTokenizer` (n-gram
  vocabulary and template classes), rebuilt from the data on every call
  (it is deterministic, and takes seconds).
  """
  questions = text2sql_templates.load_questions(
      config, data_dir,
      lambda examples, name, split: _subset(
          examples, (config.max_train_examples[name] if split == 'train'
                     else config.max_eval_examples), seed, name, split))
  tokenizer = text2sql_templates.build_tokenizer(
      questions, vocabulary_size=config.vocabulary_size, ngrams=ngrams)
  splits = {}
  for name in config.clients:
    splits[name] = {}
    for split in text2sql.SPLITS:
      pairs = questions[name][split]
      x, y = tokenizer.encode(name, pairs)
      splits[name][split] = EncodedSplit(
          x=x, y=y, sources=[' '.join(s.text.split()) for _, s in pairs],
          gold_sql=[text2sql.fill_sql(q, s) for q, s in pairs],
          truncated_sources=0, truncated_targets=0, questions=pairs)
  folder = text2sql_source.find_text2sql_dir(data_dir)
  databases = {name: path for name, path in
               sql_execution.find_databases(folder).items()
               if name in config.clients}
  return Text2SqlTask(tuple(config.clients), tokenizer, splits, databases,
                      source_length=tokenizer.max_length, target_length=1)


class _Seq2SeqParser:
  """How `run_text2sql` trains and applies the seq2seq parser."""

  def __init__(self, task: Text2SqlTask, config: seq2seq.Seq2SeqConfig,
               batch_size: int):
    self._task, self.config, self._batch_size = task, config, batch_size

  def model_fn(self):
    return seq2seq_model_fn.build_model_fn(self.config)

  def keras_model(self) -> tf.keras.Model:
    return seq2seq.build_keras_model(self.config)

  def train_dataset(self, data: EncodedSplit, **kwargs) -> tf.data.Dataset:
    return train_dataset(data, **kwargs)

  def predictor(self, keras_model):
    """(client, EncodedSplit) -> predicted SQL with values."""
    decode_fn = seq2seq_decoding.make_decode_fn(
        keras_model, max_length=self.config.max_target_length)
    return lambda client, data: predict_sql(
        decode_fn, self._task.tokenizer, data, batch_size=self._batch_size,
        max_length=self._task.decode_length(client))

  def metrics_fn(self, keras_model):
    """EncodedSplit -> {'token_loss', 'token_accuracy'}."""
    return make_token_metrics_fn(keras_model, batch_size=self._batch_size)


class _TemplateParser:
  """How `run_text2sql` trains and applies the template parser."""

  def __init__(self, task: Text2SqlTask,
               config: text2sql_templates.TemplateParserConfig,
               batch_size: int):
    self._task, self._batch_size = task, batch_size
    self.config = text2sql_templates.classifier_spec(config, task.tokenizer)

  def model_fn(self):
    return text_classifier.build_model_fn(self.config)

  def keras_model(self) -> tf.keras.Model:
    return text_classifier.build_keras_model(self.config)

  def train_dataset(self, data: EncodedSplit, **kwargs) -> tf.data.Dataset:
    return text2sql_templates.train_dataset(data, **kwargs)

  def predictor(self, keras_model):
    inventory = self._task.tokenizer.inventory

    def predict(client, data):
      del client  # The model's input names it.
      classes = text2sql_templates.predict_classes(
          keras_model, data.x, batch_size=self._batch_size)
      return [inventory.sql(c, sentence)
              for c, (_, sentence) in zip(classes, data.questions)]

    return predict

  def metrics_fn(self, keras_model):
    return functools.partial(text2sql_templates.template_metrics,
                             keras_model, batch_size=self._batch_size)


def _parser(task: Text2SqlTask, model, batch_size: int):
  if isinstance(model, text2sql_templates.TemplateParserConfig):
    return _TemplateParser(task, model, batch_size)
  return _Seq2SeqParser(task, task.model_config(model), batch_size)


def predict_sql(decode_fn, tokenizer, data: EncodedSplit, *,
                batch_size: int, max_length: Optional[int] = None
                ) -> list[str]:
  """Decoded SQL per example, with values filled in on the anonymised protocol.

  `max_length`: see `seq2seq_examples.decode` (`Text2SqlTask.decode_length`).
  """
  predictions = decode(decode_fn, tokenizer, data, batch_size=batch_size,
                       max_length=max_length)
  if data.variables is None:
    return predictions
  return [text2sql.fill_variables(p, v)
          for p, v in zip(predictions, data.variables)]


def _concatenate(parts: Sequence[EncodedSplit]) -> EncodedSplit:
  return EncodedSplit(
      x=collections.OrderedDict(
          (k, np.concatenate([p.x[k] for p in parts])) for k in parts[0].x),
      y=np.concatenate([p.y for p in parts]),
      sources=[s for p in parts for s in p.sources],
      gold_sql=[s for p in parts for s in p.gold_sql],
      truncated_sources=sum(p.truncated_sources for p in parts),
      truncated_targets=sum(p.truncated_targets for p in parts),
      variables=(None if parts[0].variables is None
                 else [v for p in parts for v in p.variables]),
      questions=(None if parts[0].questions is None
                 else [q for p in parts for q in p.questions]),
  )


@dataclasses.dataclass
class _Unit:
  """One trained model: what it trains on and how it is selected."""

  name: str  # 'federated', 'centralized' or a client (finetune)
  train_clients: list[str]
  dev_clients: list[str]
  test_clients: list[str]


def _units(training: TrainingConfig, clients) -> list[_Unit]:
  if training.paradigm == 'finetune':
    return [_Unit(c, [c], [c], [c]) for c in clients]
  return [_Unit(training.paradigm, list(clients), list(clients),
                list(clients))]


class _DevEvaluator:
  """Dev exact match of global weights; keeps the best weights on disk.

  The best is the last evaluation with the highest dev EM: a tie goes to the
  more trained model (so a run whose dev EM stays 0 does not select its
  untrained initial model). The best EM and its weights survive a restart,
  so a resumed run selects the same model as an uninterrupted one.
  """

  def __init__(self, task, unit, parser, run_dir):
    self._task = task
    self._dev_clients = list(unit.dev_clients)
    self._dev_parts = [task.splits[c]['dev'] for c in unit.dev_clients]
    self._dev = _concatenate(self._dev_parts)
    self._parser = parser
    self._keras_model = self._predict = self._token_metrics_fn = None
    self._weights_path = os.path.join(run_dir, BEST_MODEL_FILE)
    self._info_path = os.path.join(run_dir, BEST_MODEL_INFO_FILE)
    self.best = -1.0
    if os.path.exists(self._info_path):
      with open(self._info_path) as f:
        self.best = json.load(f)[DEV_METRIC]

  def __call__(self, model_weights):
    if self._keras_model is None:
      # Built on first use, after the learning process: a Keras model built
      # before TFF traces `model_fn` fails when first called in a
      # tf.function afterwards ("invalid state", a v1 layer).
      self._keras_model = self._parser.keras_model()
      self._predict = self._parser.predictor(self._keras_model)
      self._token_metrics_fn = self._parser.metrics_fn(self._keras_model)
    model_weights.assign_weights_to(self._keras_model)
    # Client by client: a batch then holds one client's SQL, of similar
    # lengths, and stops decoding when its longest output ends.
    predictions = [p for client, part in zip(self._dev_clients,
                                             self._dev_parts)
                   for p in self._predict(client, part)]
    correct = sum(text2sql_metrics.exact_match(p, g)
                  for p, g in zip(predictions, self._dev.gold_sql))
    em = correct / len(self._dev)
    tokens = self._token_metrics_fn(self._dev)
    if em >= self.best:
      self.best = em
      weights = [np.asarray(w) for w in
                 tf.nest.flatten(model_weights.trainable)]
      temp = self._weights_path + '.tmp.npz'
      np.savez(temp, *weights)
      os.replace(temp, self._weights_path)
      with open(self._info_path, 'w') as f:
        json.dump({DEV_METRIC: em}, f)
    return collections.OrderedDict(
        [(DEV_METRIC, em), ('dev_correct', correct),
         ('dev_examples', len(self._dev)),
         ('dev_token_loss', tokens['token_loss']),
         ('dev_token_accuracy', tokens['token_accuracy'])])

  def load_best(self, keras_model) -> None:
    with np.load(self._weights_path) as best:
      arrays = [best[f'arr_{i}'] for i in range(len(best.files))]
    for variable, value in zip(keras_model.trainable_weights, arrays):
      variable.assign(value)


def _build_process(training: TrainingConfig, parser, unit,
                   vocab_slice_keys: int = 0,
                   num_examples_fallback: bool = True):
  optimizer = algorithms.CLIENT_OPTIMIZERS[training.client_optimizer]
  learning_rate = (training.learning_rates[unit.train_clients[0]]
                   if training.paradigm == 'finetune'
                   else training.learning_rates.default)
  federated = training.paradigm == 'federated'
  if vocab_slice_keys:
    return vocab_sliced.build_vocab_sliced_process(
        parser.config, max_keys=vocab_slice_keys,
        client_optimizer_fn=optimizer(learning_rate=learning_rate),
        with_client_config=True)
  return algorithms.build_fl_process(
      parser.model_fn(),
      algorithm=training.algorithm if federated else 'fedavg',
      weighting=training.weighting if federated else 'num_examples',
      client_optimizer_fn=optimizer(learning_rate=learning_rate),
      proximal_strength=(training.proximal_strength
                         if federated and training.algorithm == 'fedprox'
                         else 0.0),
      with_client_config=True,
      num_examples_fallback=num_examples_fallback,
  )


def _client_data_fn(task, unit, training, seed, parser, slices=None):
  """The round's client data; with `slices`, sub-vocabularies and local ids."""
  slices = slices or {}
  if training.paradigm == 'centralized':
    union = _concatenate([task.splits[c]['train'] for c in unit.train_clients])

    def centralized_data(round_num, client_ids):
      del client_ids  # The one client: the union.
      return [algorithms.with_client_config(
          parser.train_dataset(
              union, batch_size=int(training.batch_sizes.default),
              shuffle_seed=(seed, round_num)),
          learning_rate=training.learning_rates.default, num_epochs=1)]

    return centralized_data

  def client_data(round_num, client_ids):
    data = []
    for i in client_ids:
      name = unit.train_clients[i]
      train = slices[name][1] if name in slices else task.splits[name][
          'train']
      client = algorithms.with_client_config(
          parser.train_dataset(
              train, batch_size=int(training.batch_sizes[name]),
              shuffle_seed=(seed, round_num, text2sql.CLIENTS.index(name))),
          learning_rate=training.learning_rates[name],
          num_epochs=(int(training.local_epochs[name])
                      if training.paradigm == 'federated' else 1))
      if name in slices:
        client = vocab_sliced.client_data(slices[name][0], client)
      data.append(client)
    return data

  return client_data


def run_text2sql(
    *,
    data_dir: Optional[str],
    output_dir: str,
    data: DataConfig,
    model: seq2seq.Seq2SeqConfig | text2sql_templates.TemplateParserConfig,
    training: TrainingConfig,
    loop: training_lib.LoopConfig,
    init_from: Optional[str] = None,
    vocab_slice_keys: int = 0,
    num_examples_fallback: bool = True,
) -> dict[str, Any]:
  """Trains and evaluates one method of the paper's Table 2.

  Writes to `output_dir`: `config.json`, `tokenizer/`, one run directory per
  trained model (`federated/`, `centralized/` or `finetune/<client>/`, each
  with checkpoints, metrics, `best_model.npz`), `predictions/<client>.jsonl`
  (test predictions), `results.json`, `results.md` (Table 2 layout, the
  paper's numbers beside ours), `dev_exact_match.png` and, for federated
  runs, `training_loss.png`. Running it again resumes.

  `results.json` holds the test exact match and execution accuracy per
  client with MacroAvg and MicroAvg (`test`), and
  `test_exact_match_bootstrap_ci95`: their 95 % percentile bootstrap
  intervals over the test examples (`intervals.bootstrap_accuracy`, as
  fractions). One run is one seed; `text2sql_benchmark` aggregates seeds.

  Args:
    data_dir: The `shared/data` (or text2sql) folder; None finds it.
    output_dir: The run directory.
    data: Data and tokenization.
    model: The parser. A `seq2seq.Seq2SeqConfig`: the seq2seq model; its
      `vocabulary_size` is replaced by the tokenizer's and its maximum
      lengths by `data`'s. A `text2sql_templates.TemplateParserConfig`: the
      template classifier (`data`'s `with_values`, tokenizer, merges and
      lengths do not apply to it; `retrieved_sql` and `init_from` are
      refused), whose records' token loss and accuracy are those of the
      gold template.
    training: Paradigm, algorithm, weighting and local training.
    loop: Rounds (epochs outside federated runs), evaluation cadence,
      checkpoints, seed.
    init_from: The output directory of an earlier centralized or federated
      run: its tokenizer and selected model (`best_checkpoint/`) are the
      starting point (e.g. pre-train centrally, then fine-tune federatedly).
      `model` and `data`'s maximum lengths must be that run's, except for
      `INIT_FROM_FREE_FIELDS`; the data may otherwise differ.
    vocab_slice_keys: If > 0, train with vocabulary-sliced FedAvg
      (`algorithms.vocab_sliced`): each client downloads and uploads only
      the token-embedding rows of its `vocab_slice_keys` most frequent ids.
      Needs the federated paradigm, 'fedavg' and 'uniform' weighting.
    num_examples_fallback: See `algorithms.build_fl_process`. False gives
      Lorar rounds a single aggregation stage, so that they are split across
      several TFF workers (`tff_nlp.runtime.multi_worker`).

  Returns:
    The content of `results.json`.

  Raises:
    CheckpointError: If `init_from` holds no single selected model, or one
      of another configuration (checked before `output_dir` is written).
  """
  templates = isinstance(model, text2sql_templates.TemplateParserConfig)
  if templates and (init_from or vocab_slice_keys or data.retrieved_sql
                    or data.sql_merges):
    raise errors.InputError(
        'The template parser (--parser=template) takes no --init_from, '
        '--vocab_slice_keys, --retrieved_sql or --sql_merges: they are the '
        'seq2seq parser\'s.')
  if vocab_slice_keys and (training.paradigm, training.algorithm,
                           training.weighting) != ('federated', 'fedavg',
                                                   'uniform'):
    raise ValueError(
        'vocab_slice_keys needs the federated paradigm with algorithm '
        "'fedavg' and weighting 'uniform' (the sliced embedding is averaged "
        f'uniformly), got {training.method}.')
  experiment = collections.OrderedDict(
      seed=loop.seed, data=data, model=model, training=training,
      init_from=init_from and os.path.abspath(init_from))
  if vocab_slice_keys:
    # Only when set, so that the configurations of dense runs (and the
    # benchmark's cache keys) stay as they were.
    experiment['vocab_slice_keys'] = vocab_slice_keys
  if not num_examples_fallback:
    experiment['num_examples_fallback'] = False
  config = collections.OrderedDict(
      experiment=experiment,
      loop=loop,
      data_dir=data_dir,
      versions=collections.OrderedDict(
          tensorflow=tf.__version__, tensorflow_federated=tff.__version__,
          numpy=np.__version__),
  )
  init_checkpoint = None
  if init_from is not None:
    # Before `output_dir` records this run's config: a refused `init_from`
    # leaves nothing that would refuse the corrected call.
    init_checkpoint = _selected_checkpoint(init_from)
    _check_init_model(init_from, data, model)
  training_lib.prepare_run_dir(output_dir, config)
  start = time.perf_counter()
  if init_from is not None:
    _copy_tokenizer(init_from, os.path.join(output_dir, TOKENIZER_DIR))
  if templates:
    task = prepare_template_task(data, data_dir=data_dir, seed=loop.seed,
                                 ngrams=model.ngrams)
  else:
    task = prepare_task(data, data_dir=data_dir, seed=loop.seed,
                        tokenizer_dir=os.path.join(output_dir, TOKENIZER_DIR))
  parser = _parser(task, model, training.decode_batch_size)
  model = parser.config
  logging.info('text2sql: %s, vocabulary %d, train sizes %s',
               training.method, task.tokenizer.vocabulary_size(),
               {c: len(task.splits[c]['train']) for c in task.clients})

  slices = {}
  if vocab_slice_keys:
    for client in task.clients:
      train = task.splits[client]['train']
      vocabulary, local_x, local_y, unknown = vocab_sliced.local_examples(
          train.x, train.y, max_keys=vocab_slice_keys)
      slices[client] = (vocabulary, dataclasses.replace(
          train, x=local_x, y=local_y), unknown)
      logging.info('text2sql: %s keeps %d of its %d distinct ids (%d ids '
                   'became UNK)', client, vocabulary.num_keys,
                   vocabulary.distinct_ids, unknown)

  initial_weights = None
  if init_checkpoint is not None:
    initial_weights = tf.nest.map_structure(
        lambda v: v.numpy(),
        seq2seq_model_fn.load_model_weights(model, init_checkpoint))
  predictions, unit_records, test_tokens = {}, {}, {}
  for unit in _units(training, task.clients):
    run_dir = (os.path.join(output_dir, 'finetune', unit.name)
               if training.paradigm == 'finetune'
               else os.path.join(output_dir, unit.name))
    os.makedirs(run_dir, exist_ok=True)
    evaluator = _DevEvaluator(task, unit, parser, run_dir)
    process = _build_process(training, parser, unit, vocab_slice_keys,
                             num_examples_fallback)
    num_clients = (1 if training.paradigm == 'centralized'
                   else len(unit.train_clients))
    run = training_lib.run_training(
        process,
        client_data_fn=_client_data_fn(task, unit, training, loop.seed,
                                       parser, slices),
        num_clients=num_clients,
        # Sampling is for federated rounds; a centralized or finetuning unit
        # trains its one client whatever --clients_per_round says.
        config=(loop if training.paradigm == 'federated'
                else dataclasses.replace(loop, clients_per_round=0)),
        output_dir=run_dir,
        evaluate_fn=evaluator,
        tensorboard_dir=os.path.join(output_dir, training_lib.TENSORBOARD_DIR,
                                     unit.name),
        description=unit.name,
        initial_model_weights=initial_weights,
    )
    unit_records[unit.name] = run.records
    keras_model = parser.keras_model()
    evaluator.load_best(keras_model)
    # Either parser's weights: `save_checkpoint` is not seq2seq-specific.
    seq2seq.save_checkpoint(keras_model, os.path.join(
        output_dir, BEST_CHECKPOINT_DIR, unit.name, BEST_CHECKPOINT_PREFIX))
    predict = parser.predictor(keras_model)
    token_metrics_fn = parser.metrics_fn(keras_model)
    for client in unit.test_clients:
      test = task.splits[client]['test']
      predictions[client] = (test, predict(client, test))
      test_tokens[client] = token_metrics_fn(test)

  evaluation = text2sql_metrics.evaluate(
      {c: list(zip(predictions[c][1], predictions[c][0].gold_sql))
       for c in task.clients},
      db_paths=task.databases)
  os.makedirs(os.path.join(output_dir, PREDICTIONS_DIR), exist_ok=True)
  for client, (test, predicted) in predictions.items():
    with open(os.path.join(output_dir, PREDICTIONS_DIR, f'{client}.jsonl'),
              'w', encoding='utf-8') as f:
      for source, gold, prediction in zip(test.sources, test.gold_sql,
                                          predicted):
        f.write(json.dumps(collections.OrderedDict(
            input=source, gold=gold, prediction=prediction,
            exact_match=text2sql_metrics.exact_match(prediction, gold)))
                + '\n')

  best_rounds = {
      name: _best_round(records) for name, records in unit_records.items()}
  # One seed: the interval covers test-set sampling only; the benchmark
  # (`text2sql_summary`) adds seed variation over several runs.
  bootstrap = intervals.bootstrap_accuracy(
      {c: [[text2sql_metrics.exact_match(p, g)
            for p, g in zip(predictions[c][1], predictions[c][0].gold_sql)]]
       for c in task.clients})
  results = collections.OrderedDict(
      config=config,
      method=list(training.method),
      method_label=text2sql_report.method_label(training.method),
      vocabulary_size=task.tokenizer.vocabulary_size(),
      examples={c: {s: len(task.splits[c][s]) for s in text2sql.SPLITS}
                for c in task.clients},
      truncated={c: {s: {'sources': task.splits[c][s].truncated_sources,
                         'targets': task.splits[c][s].truncated_targets}
                     for s in text2sql.SPLITS} for c in task.clients},
      best_rounds=best_rounds,
      test=evaluation.to_json(),
      test_exact_match_bootstrap_ci95=bootstrap.to_json(),
      test_tokens={c: test_tokens[c] for c in task.clients},
      vocab_slices={c: collections.OrderedDict(
          keys=int(v.num_keys), distinct_ids=int(v.distinct_ids),
          ids_to_unk=int(unknown)) for c, (v, _, unknown) in slices.items()},
      rounds=unit_records,
      **({'template_coverage': {
          c: dict(zip(('covered', 'total'), text2sql_templates.coverage(
              task.splits[c]['test'].y))) for c in task.clients}}
         if templates else {}),
      seconds=time.perf_counter() - start,
  )
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE), results)
  report = text2sql_report.run_markdown(
      training.method, evaluation, bootstrap=bootstrap,
      token_accuracy={c: v['token_accuracy'] for c, v in test_tokens.items()},
      best_rounds=best_rounds,
      token_accuracy_of=('the gold template (template accuracy)'
                         if templates else 'the gold SQL, teacher-forced'))
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write(report)
  write_plots(unit_records, output_dir, federated=training.paradigm ==
              'federated', clients=task.clients)
  # The Table 2 rows only: the benchmark and the demo print one per run.
  print(text2sql_report.table2_markdown(
      {training.method: evaluation.exact_match}, methods=[training.method]))
  return results


def _selected_checkpoint(run_dir: str) -> str:
  """The checkpoint path of the one model `run_dir` selected."""
  folder = os.path.join(run_dir, BEST_CHECKPOINT_DIR)
  units = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
  if len(units) != 1:
    raise errors.CheckpointError(
        f'{folder}: expected the selected model of one finished centralized '
        f'or federated run, found {units or "nothing"}.')
  return os.path.join(folder, units[0], BEST_CHECKPOINT_PREFIX)


def _check_init_model(run_dir: str, data: DataConfig,
                      model: seq2seq.Seq2SeqConfig) -> None:
  """Refuses an `init_from` run whose model is not this run's.

  `seq2seq.load_checkpoint` refuses variables of other shapes, but weights
  trained with, say, another `activation` or `layer_norm_epsilon` would load
  silently into a model that computes something else. So the model recorded
  in the run's `config.json` (with its `data`'s maximum lengths, which the
  run built it with) is compared with this one, field by field, except for
  `INIT_FROM_FREE_FIELDS`.

  Args:
    run_dir: The `init_from` run directory.
    data: This run's data config (its maximum lengths).
    model: This run's model config.

  Raises:
    CheckpointError: If the run's `config.json` cannot be read or records no
      text2sql model, or a field differs.
  """
  path = os.path.join(run_dir, run_dir_lib.CONFIG_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      earlier = json.load(f)[run_dir_lib.EXPERIMENT_KEY]
    earlier_model = dict(earlier['model'])
    earlier_model.update({name: earlier['data'][name]
                          for name in _LENGTH_FIELDS})
  except (OSError, ValueError, LookupError, TypeError) as e:
    raise errors.CheckpointError(
        f'{path}: cannot read the model configuration of the run in '
        f'{run_dir!r} ({type(e).__name__}: {e}); init_from needs the output '
        'directory of a text2sql run.') from e
  current = training_lib.to_json_value(dataclasses.replace(
      model, **{name: getattr(data, name) for name in _LENGTH_FIELDS}))
  diffs = []
  for field in dataclasses.fields(seq2seq.Seq2SeqConfig):
    if field.name in INIT_FROM_FREE_FIELDS:
      continue
    # A field added since the run was recorded had its default then.
    old = earlier_model.get(
        field.name,
        None if field.default is dataclasses.MISSING else field.default)
    if old != current[field.name]:
      diffs.append(f'{field.name}: {old!r} -> {current[field.name]!r}')
  if diffs:
    raise errors.CheckpointError(
        f'{path}: the run in {run_dir!r} trained a different model (its '
        f'value -> this run\'s: {"; ".join(diffs)}), so its weights cannot '
        'start this run. Use its model configuration and maximum lengths '
        f'(only {", ".join(INIT_FROM_FREE_FIELDS)} may differ), or start '
        'from another run.')


def _copy_tokenizer(run_dir: str, tokenizer_dir: str) -> None:
  names = (subword_tokenizer.PROTO_FILENAME, copy_tokenizer.VOCABULARY_FILE)
  sources = [os.path.join(run_dir, TOKENIZER_DIR, name) for name in names]
  if not any(os.path.exists(source) for source in sources):
    raise errors.CheckpointError(
        f'{os.path.join(run_dir, TOKENIZER_DIR)}: no tokenizer in '
        f'{run_dir!r}.')
  os.makedirs(tokenizer_dir, exist_ok=True)
  for name, source in zip(names, sources):
    if os.path.exists(source):
      shutil.copyfile(source, os.path.join(tokenizer_dir, name))


def _best_round(records: Sequence[Mapping[str, Any]]) -> Optional[int]:
  rounds, values = plots.metric_series(records, f'eval/{DEV_METRIC}')
  if not values:
    return None
  # The last of the best, as `_DevEvaluator` selects.
  return rounds[len(values) - 1 - int(np.argmax(values[::-1]))]


def write_plots(unit_records: Mapping[str, Sequence[Mapping[str, Any]]],
                output_dir: str, *, federated: bool,
                clients: Sequence[str]) -> None:
  """Dev EM against rounds per trained model; client losses if federated."""
  plots.plot_metric_by_round(
      {name: plots.metric_series(records, f'eval/{DEV_METRIC}')
       for name, records in unit_records.items()},
      os.path.join(output_dir, DEV_PLOT_FILE),
      y_label='dev exact match', title='Dev exact match')
  if federated:
    (records,) = unit_records.values()
    plots.plot_client_training_loss(
        {'federated': {clients[i]: series for i, series in
                       plots.client_loss_series(records).items()}},
        os.path.join(output_dir, LOSS_PLOT_FILE),
        y_label='mean training loss of the round')
