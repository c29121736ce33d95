"""Flags shared by the text-to-SQL binaries: data, model, local training.

`train_text2sql` (one method) and `text2sql_benchmark` (several methods)
define the same experiment; this module defines its flags once and turns
them into the configs of `tff_nlp.tasks.text2sql`. Not a binary.
The model flags are `_seq2seq_flags`' (adopted here, and
`model_config` re-exported for the binaries).
"""

from absl import flags

from tff_nlp import algorithms
from tff_nlp.bin import _seq2seq_flags as seq2seq_flags
from tff_nlp.bin import common
from tff_nlp.data import text2sql
from tff_nlp.tasks import text2sql as experiment
from tff_nlp.tasks import text2sql_templates

flags.adopt_module_key_flags(seq2seq_flags)

PARSER = flags.DEFINE_enum(
    'parser', 'seq2seq', ['seq2seq', 'template'],
    'seq2seq: generates the SQL (the paper\'s kind of parser; --model and '
    'the model flags); template: classifies the question among its '
    'database\'s training SQL templates and fills in its values '
    '(tff_nlp.tasks.text2sql_templates; --template_* flags).')
TEMPLATE_EMBEDDING_DIM = flags.DEFINE_integer(
    'template_embedding_dim', 256,
    'With --parser=template: the n-gram embedding size.', lower_bound=1)
TEMPLATE_NGRAMS = flags.DEFINE_integer(
    'template_ngrams', 2,
    'With --parser=template: the longest word n-gram feature.', lower_bound=1)


def model_config():
  """The parser's model: a `Seq2SeqConfig` or a `TemplateParserConfig`."""
  if PARSER.value == 'template':
    return text2sql_templates.TemplateParserConfig(
        embedding_dim=TEMPLATE_EMBEDDING_DIM.value,
        ngrams=TEMPLATE_NGRAMS.value, seed=common.SEED.value)
  return seq2seq_flags.model_config()

DATA_DIR = flags.DEFINE_string(
    'data_dir', None,
    'The shared/data folder (holding text2sql/). Unset: $TFF_NLP_DATA_DIR, '
    'else <repository>/../shared/data, else a verified download.')

CLIENTS = flags.DEFINE_list(
    'clients', list(text2sql.CLIENTS), 'Clients (datasets) to use.')
WITH_VALUES = flags.DEFINE_bool(
    'with_values', True,
    'Fill values into questions and SQL (the paper); else keep variables.')
SCHEMA_COLUMNS = flags.DEFINE_bool(
    'schema_columns', True,
    'Append table and column names to the question (the paper); else table '
    'names only.')
TOKENIZER = flags.DEFINE_enum(
    'tokenizer', 'subword', list(experiment.TOKENIZERS),
    'copy_words: word tokens and a model that copies source words '
    '(pointer-generator); subword: SentencePiece, no copying.')
SQL_MERGES = flags.DEFINE_integer(
    'sql_merges', 0,
    'With --tokenizer=copy_words: the most SQL-phrase merges (frequent '
    'word pairs of the training SQL that no question holds become one '
    'token); 0: none.', lower_bound=0)
RETRIEVED_SQL = flags.DEFINE_bool(
    'retrieved_sql', False,
    'With --tokenizer=copy_words: retrieve-and-edit. Each input ends with '
    'the SQL of the most similar training question of the same client '
    '(the template-retrieval baseline; leave-one-out in training), which '
    'the parser copies and edits. Not in the paper.')
VOCABULARY_SIZE = flags.DEFINE_integer(
    'vocabulary_size', 4000, 'Vocabulary size (upper bound).',
    lower_bound=300)
MAX_SOURCE_LENGTH = flags.DEFINE_integer(
    'max_source_length', 256,
    'Encoder tokens (longer inputs truncated); 0 with --tokenizer='
    'copy_words: the longest input of the data.', lower_bound=0)
MAX_TARGET_LENGTH = flags.DEFINE_integer(
    'max_target_length', 256,
    'Decoder tokens (longer SQL truncated); 0 with --tokenizer=copy_words: '
    'the longest SQL of the data (none truncated).', lower_bound=0)
MAX_TRAIN_EXAMPLES = flags.DEFINE_list(
    'max_train_examples', ['0'],
    'Training examples per client (seeded subset); 0: all. A default and '
    'per-client values, e.g. 200,advising=400,atis=400.')
MAX_EVAL_EXAMPLES = flags.DEFINE_integer(
    'max_eval_examples', 0,
    'Dev and test examples per client (seeded subset); 0: all.',
    lower_bound=0)

CLIENT_OPTIMIZER = flags.DEFINE_enum(
    'client_optimizer', 'adam', sorted(algorithms.CLIENT_OPTIMIZERS),
    'Client optimizer (the paper: adafactor).')
LOCAL_EPOCHS = flags.DEFINE_list(
    'local_epochs', ['12', 'advising=6', 'atis=6'],
    'Local epochs per round: a default, then client=value overrides '
    '(federated only).')
LEARNING_RATES = flags.DEFINE_list(
    'learning_rates',
    ['1e-3', 'advising=1e-4', 'atis=1e-4', 'geography=1e-4', 'yelp=1e-4'],
    'Client learning rates: a default (also the centralized one), then '
    'client=value overrides.')
BATCH_SIZES = flags.DEFINE_list(
    'batch_sizes', ['4', 'advising=8', 'atis=8'],
    'Batch sizes: a default (also the centralized one), then client=value '
    'overrides.')
PROXIMAL_STRENGTH = flags.DEFINE_float(
    'proximal_strength', 1e-4, "FedProx's mu (--algorithm=fedprox).",
    lower_bound=0.0)
DECODE_BATCH_SIZE = flags.DEFINE_integer(
    'decode_batch_size', 64, 'Examples decoded at once in evaluation.',
    lower_bound=1)


@flags.validator('clients',
                 f'--clients must name distinct clients from '
                 f'{list(text2sql.CLIENTS)}.')
def _check_clients(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(text2sql.CLIENTS))


def data_config() -> experiment.DataConfig:
  """The data configuration given by the flags."""
  return experiment.DataConfig(
      clients=tuple(CLIENTS.value),
      with_values=WITH_VALUES.value,
      schema_columns=SCHEMA_COLUMNS.value,
      tokenizer=TOKENIZER.value,
      sql_merges=SQL_MERGES.value,
      retrieved_sql=RETRIEVED_SQL.value,
      vocabulary_size=VOCABULARY_SIZE.value,
      max_source_length=MAX_SOURCE_LENGTH.value,
      max_target_length=MAX_TARGET_LENGTH.value,
      max_train_examples=experiment.PerClient.parse(
          MAX_TRAIN_EXAMPLES.value, name='max_train_examples', kind=int,
          allow_zero=True),
      max_eval_examples=MAX_EVAL_EXAMPLES.value,
  )


def training_config(*, paradigm: str, algorithm: str = 'fedopt',
                    weighting: str = 'lorar') -> experiment.TrainingConfig:
  """The local-training flags, for one method."""
  return experiment.TrainingConfig(
      paradigm=paradigm,
      algorithm=algorithm,
      weighting=weighting,
      client_optimizer=CLIENT_OPTIMIZER.value,
      local_epochs=experiment.PerClient.parse(
          LOCAL_EPOCHS.value, name='local_epochs', kind=int),
      learning_rates=experiment.PerClient.parse(
          LEARNING_RATES.value, name='learning_rates'),
      batch_sizes=experiment.PerClient.parse(
          BATCH_SIZES.value, name='batch_sizes', kind=int),
      proximal_strength=PROXIMAL_STRENGTH.value,
      decode_batch_size=DECODE_BATCH_SIZE.value,
  )
