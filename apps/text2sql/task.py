"""The federated text-to-SQL task: configurations, data and encoding.

The data side of the protocol of Zhang et al., "Federated Learning for
Semantic Parsing: Task Formulation, Evaluation Setup, New Algorithms", ACL
2023 (arXiv 2305.17221; `shared/docs/lorar.md`): eight single-domain
text-to-SQL datasets (`tff_nlp.data.text2sql`) are eight clients; a parser
maps the question followed by the serialized schema to SQL with values.

`prepare_task` loads, subsets and tokenizes the clients' data for the
seq2seq parser (`tff_nlp.models.seq2seq`), `prepare_template_task` for the
template parser (`apps.text2sql.template_parser`). `DataConfig` says which
examples and how they become token ids; `TrainingConfig` how a parser is
trained (paradigm, algorithm, weighting, local training per client).
`apps.text2sql.process` builds the parser's `model_fn`, the learning
process and the client data from them; `apps.text2sql.experiment` runs
and reports one method.

The subword vocabulary is trained on the training text of every client, a
stand-in for the public pre-trained T5 vocabulary of the paper; the text
never enters a federated computation.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import functools
from typing import Any, Optional

import numpy as np

from tff_nlp import algorithms

from tff_nlp import templates

from tff_nlp import aggregators
from tff_nlp import errors
from apps.text2sql import template_retrieval
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source
from tff_nlp.metrics import sql_execution
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import report as text2sql_report
from tff_nlp.models import copy_tokenizer
from tff_nlp.models import seq2seq
from tff_nlp.models import subword_tokenizer
from apps.common import seq2seq_examples
from apps.text2sql import template_parser as text2sql_templates
from tff_nlp.training import release


PARADIGMS = ('finetune', 'centralized', 'federated')
TOKENIZERS = ('copy_words', 'subword')


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
    retrieved_sql_values: With `retrieved_sql`, how the hint is filled
      (`text2sql.fill_template`): 'stated' (default; the values the
      question states, any other variable the retrieved training example's
      own) or 'annotated' (every value annotated on the question, stated or
      not: oracle entities, the only filling of the runs made before the
      field). Without `retrieved_sql` it means nothing and is set to
      'annotated', which the records omit, so those runs keep their keys.
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
    lowercase_sql: Lower-case the SQL outside its string literals
      (`metrics.text2sql.lowercase_sql`: keywords, table and column names,
      aliases; values keep their case) in the training targets and in the
      gold SQL that exact match compares, and the schema's names in the
      input (the question keeps its case). SQLite ignores that case, so
      execution accuracy is unchanged; no two gold queries of the eight
      clients differ only there (11,238 questions: 7,575 distinct SQL with
      values, 1,983 anonymised, the same counts lower-cased), so exact
      match on lower-cased SQL counts the same predictions correct as the
      paper's, for a parser that writes lower case. Why: a tokenizer
      trained on natural language (a pre-trained model's) splits
      upper-case names such as `COURSEalias0.ADVISORY_REQUIREMENT` into
      many more pieces (advising's median test SQL: 321 pieces of the
      `make pretrain` tokenizer, 192 lower-cased). Not with the template
      parser, whose SQL is the training SQL.
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
  # Omitted from the records at False: runs made before it keep their keys.
  lowercase_sql: bool = release.field_added_later(False)
  # Recorded unless 'annotated' (the runs made before it).
  retrieved_sql_values: str = release.field_added_later(
      text2sql.STATED, legacy=text2sql.ANNOTATED)

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
    if self.retrieved_sql_values not in text2sql.VALUE_SOURCES:
      raise ValueError(
          f'retrieved_sql_values must be one of {text2sql.VALUE_SOURCES}, '
          f'got {self.retrieved_sql_values!r}.')
    if not self.retrieved_sql:
      # No hint: nothing is filled; the legacy value keeps the keys.
      object.__setattr__(self, 'retrieved_sql_values', text2sql.ANNOTATED)
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
    client_optimizer: A key of `templates.CLIENT_OPTIMIZERS`.
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
    if self.client_optimizer not in templates.CLIENT_OPTIMIZERS:
      raise ValueError(
          f'Unknown client_optimizer {self.client_optimizer!r}; expected one '
          f'of {sorted(templates.CLIENT_OPTIMIZERS)}.')
    algorithms.Algorithm(self.algorithm)
    aggregators.Weighting(self.weighting)

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
  """`seq2seq_inputs.pack_inputs`' layout with `copy_tokenizer` ids, in numpy."""
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


def _add_sql_hints(texts, folder: str, with_values: bool, *,
                   lowercase: bool, values: str) -> None:
  """Appends each source's retrieved SQL (`DataConfig.retrieved_sql`),
  filled under `values` (`DataConfig.retrieved_sql_values`) and lower-cased
  as the targets are with `lowercase`."""
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
            with_values=with_values, values=values)
      except ValueError as e:
        raise errors.InputError(
            f'{folder}: client {name!r}: retrieved_sql: {e}') from None
      if lowercase:
        hints = [text2sql_metrics.lowercase_sql(hint) for hint in hints]
      sources, *rest = splits[split]
      splits[split] = ([copy_tokenizer.with_sql_hint(source, hint)
                        for source, hint in zip(sources, hints)], *rest)


def prepare_task(config: DataConfig, *, data_dir: Optional[str], seed: int,
                 tokenizer_dir: str, tokenizer=None) -> Text2SqlTask:
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
    tokenizer: A ready subword tokenizer to use instead (neither trained
      nor written), e.g. a keras-nlp preset's
      (`models.keras_nlp_preset.BartTokenizerAdapter`); not with
      `config.tokenizer='copy_words'`.

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
      sql = [e.sql for e in examples]
      variables = (None if config.with_values
                   else [e.variables for e in examples])
      if config.lowercase_sql:
        sql = [text2sql_metrics.lowercase_sql(q) for q in sql]
        # The anonymised SQL's variable names are lower-cased with it.
        variables = variables and [{k.lower(): v for k, v in names.items()}
                                   for names in variables]
      texts[name][split] = (
          [text2sql.model_input(e.question, client.schema,
                                columns=config.schema_columns,
                                lowercase_schema=config.lowercase_sql)
           for e in examples],
          sql, variables, examples)

  def training_texts():
    return [t for name in config.clients
            for part in texts[name]['train'][:2] for t in part]

  source_length = config.max_source_length
  target_length = config.max_target_length
  if tokenizer is not None and config.tokenizer == 'copy_words':
    raise errors.InputError(
        'A ready (e.g. keras-nlp preset) tokenizer replaces the subword one; '
        'it cannot be combined with --tokenizer=copy_words.')
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
      _add_sql_hints(texts, folder, config.with_values,
                     lowercase=config.lowercase_sql,
                     values=config.retrieved_sql_values)
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
    tokenizer = tokenizer or subword_tokenizer.load_or_train(
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
                          seed: int, ngrams: int,
                          values: str = text2sql.STATED) -> Text2SqlTask:
  """`prepare_task` for the template parser (`text2sql_templates`).

  The "tokenizer" is a `text2sql_templates.TemplateTokenizer` (n-gram
  vocabulary and template classes, and `values`: how a predicted template
  is filled, `TemplateParserConfig.values`), rebuilt from the data on every
  call (it is deterministic, and takes seconds).
  """
  questions = text2sql_templates.load_questions(
      config, data_dir,
      lambda examples, name, split: _subset(
          examples, (config.max_train_examples[name] if split == 'train'
                     else config.max_eval_examples), seed, name, split))
  tokenizer = text2sql_templates.build_tokenizer(
      questions, vocabulary_size=config.vocabulary_size, ngrams=ngrams,
      values=values)
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

def concatenate(parts: Sequence[EncodedSplit]) -> EncodedSplit:
  """The examples of `parts`, in order, as one split."""
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

