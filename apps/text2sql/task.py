"""The federated text-to-SQL task: its configurations and encoded data types.

The data side of the protocol of Zhang et al., "Federated Learning for
Semantic Parsing: Task Formulation, Evaluation Setup, New Algorithms", ACL
2023 (arXiv 2305.17221; `shared/docs/lorar.md`): eight single-domain
text-to-SQL datasets (`tff_nlp.data.text2sql`) are eight clients; a parser
maps the question followed by the serialized schema to SQL with values.

`apps.text2sql.task_data` loads, subsets and tokenizes the clients' data
(`prepare_task` for the seq2seq parser, `prepare_template_task` for the
template parser) into a `Text2SqlTask` of `EncodedSplit`s, the types here.
`DataConfig` says which examples and how they become token ids;
`TrainingConfig` how a parser is trained (paradigm, algorithm, weighting,
local training per client).
`apps.text2sql.process` builds the parser's `model_fn`, the learning
process and the client data from them; `apps.text2sql.experiment` runs
and reports one method.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any, Optional

import numpy as np

from tff_nlp import algorithms

from tff_nlp import templates

from tff_nlp import aggregators
from tff_nlp import errors
from tff_nlp.data import text2sql
from apps.text2sql import report as text2sql_report
from tff_nlp.models import seq2seq
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

