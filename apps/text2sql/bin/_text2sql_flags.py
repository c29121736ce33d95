"""Flags shared by the text-to-SQL binaries: data, model, local training.

`train_text2sql` (one method) and `text2sql_benchmark` (several methods)
define the same experiment; this module defines their flags once, from the
configs of `apps.text2sql.task` (`config_flags`), and builds the
configs back. Not a binary.
The model flags are `_seq2seq_flags`' (adopted here, and
`model_config` re-exported for the binaries).
"""

from absl import flags


from tff_nlp import templates
from apps.common import seq2seq_flags
from apps.common import binary as common
from apps.common import config_flags
from tff_nlp.data import text2sql
from tff_nlp.models import lora
from apps.text2sql import task as text2sql_task
from apps.text2sql import template_parser as text2sql_templates

flags.adopt_module_key_flags(seq2seq_flags)

PARSER = flags.DEFINE_enum(
    'parser', 'seq2seq', ['seq2seq', 'template'],
    'seq2seq: generates the SQL (the paper\'s kind of parser; --model and '
    'the model flags); template: classifies the question among its '
    'database\'s training SQL templates and fills in its values '
    '(apps.text2sql.template_parser; --template_* flags).')
TEMPLATE = config_flags.define_config(
    text2sql_templates.TemplateParserConfig, exclude=('seed',),
    names={'embedding_dim': 'template_embedding_dim',
           'ngrams': 'template_ngrams', 'values': 'template_values'},
    specs={
        'template_embedding_dim': config_flags.Spec(
            'With --parser=template: the n-gram embedding size.',
            lower_bound=1),
        'template_ngrams': config_flags.Spec(
            'With --parser=template: the longest word n-gram feature.',
            lower_bound=1),
        'template_values': config_flags.Spec(
            'With --parser=template (and the template-retrieval baseline of '
            'the report): where a predicted template\'s values come from. '
            'stated (the headline protocol): only values the question '
            'states, any other variable keeps its training example\'s '
            'value; annotated: every annotated value, including values the '
            'question never states (the "oracle entities" setting).',
            enum_values=list(text2sql.VALUE_SOURCES)),
    })


def model_config():
  """The parser's model: a `Seq2SeqConfig` or a `TemplateParserConfig`."""
  if PARSER.value == 'template':
    return TEMPLATE.build(seed=common.SEED.value)
  return seq2seq_flags.model_config()


def _per_client_flag(value: text2sql_task.PerClient) -> list[str]:
  """A `PerClient` as its list flag: the default, then client=value."""
  return [str(value.default), *(f'{c}={v}' for c, v in value.overrides)]


def _per_client(name: str, kind: type = float, **kwargs):
  return lambda value: text2sql_task.PerClient.parse(
      value, name=name, kind=kind, **kwargs)


DATA = config_flags.define_config(
    text2sql_task.DataConfig,
    defaults={'max_train_examples': ['0']},
    kinds={'max_train_examples': list},
    parsers={'max_train_examples': _per_client(
        'max_train_examples', int, allow_zero=True)},
    specs={
        'clients': config_flags.Spec('Clients (datasets) to use.'),
        'with_values': config_flags.Spec(
            'Fill values into questions and SQL (the paper); else keep '
            'variables.'),
        'schema_columns': config_flags.Spec(
            'Append table and column names to the question (the paper); '
            'else table names only.'),
        'tokenizer': config_flags.Spec(
            'copy_words: word tokens and a model that copies source words '
            '(pointer-generator); subword: SentencePiece, no copying.',
            enum_values=list(text2sql_task.TOKENIZERS)),
        'sql_merges': config_flags.Spec(
            'With --tokenizer=copy_words: the most SQL-phrase merges '
            '(frequent word pairs of the training SQL that no question holds '
            'become one token); 0: none.', lower_bound=0),
        'retrieved_sql': config_flags.Spec(
            'With --tokenizer=copy_words: retrieve-and-edit. Each input ends '
            'with the SQL of the most similar training question of the same '
            'client (the template-retrieval baseline; leave-one-out in '
            'training), which the parser copies and edits. Not in the '
            'paper.'),
        'retrieved_sql_values': config_flags.Spec(
            'With --retrieved_sql: how the hint is filled. stated: the values '
            'the question states, any other variable the retrieved training '
            'example\'s own; annotated: every value annotated on the '
            'question, including values it never states (oracle entities; '
            'the runs archived before this flag).',
            enum_values=list(text2sql.VALUE_SOURCES)),
        'vocabulary_size': config_flags.Spec(
            'Vocabulary size (upper bound).', lower_bound=300),
        'max_source_length': config_flags.Spec(
            'Encoder tokens (longer inputs truncated); 0 with --tokenizer='
            'copy_words: the longest input of the data.', lower_bound=0),
        'max_target_length': config_flags.Spec(
            'Decoder tokens (longer SQL truncated); 0 with --tokenizer='
            'copy_words: the longest SQL of the data (none truncated).',
            lower_bound=0),
        'max_train_examples': config_flags.Spec(
            'Training examples per client (seeded subset); 0: all. A default '
            'and per-client values, e.g. 200,advising=400,atis=400.'),
        'lowercase_sql': config_flags.Spec(
            'Lower-case the SQL outside its string literals (and the '
            'schema\'s names in the input), for training and exact match; '
            'SQLite runs it the same. Fewer pieces for a tokenizer trained '
            'on natural language (--init_from a pretrain_seq2seq run).'),
    })

# The method (paradigm, algorithm, weighting) is train_text2sql's flags or
# text2sql_benchmark's --methods.
METHOD_FIELDS = ('paradigm', 'algorithm', 'weighting')
_PER_CLIENT_FIELDS = ('local_epochs', 'learning_rates', 'batch_sizes')
_TRAINING_DEFAULTS = text2sql_task.TrainingConfig()
TRAINING = config_flags.define_config(
    text2sql_task.TrainingConfig,
    exclude=METHOD_FIELDS,
    defaults={f: _per_client_flag(getattr(_TRAINING_DEFAULTS, f))
              for f in _PER_CLIENT_FIELDS},
    kinds={f: list for f in _PER_CLIENT_FIELDS},
    parsers={'local_epochs': _per_client('local_epochs', int),
             'learning_rates': _per_client('learning_rates'),
             'batch_sizes': _per_client('batch_sizes', int)},
    specs={
        'client_optimizer': config_flags.Spec(
            'Client optimizer (the paper: adafactor).',
            enum_values=sorted(templates.CLIENT_OPTIMIZERS)),
        'local_epochs': config_flags.Spec(
            'Local epochs per round: a default, then client=value overrides '
            '(federated only).'),
        'learning_rates': config_flags.Spec(
            'Client learning rates: a default (also the centralized one), '
            'then client=value overrides.'),
        'batch_sizes': config_flags.Spec(
            'Batch sizes: a default (also the centralized one), then '
            'client=value overrides.'),
    })
@flags.validator('clients',
                 f'--clients must name distinct clients from '
                 f'{list(text2sql.CLIENTS)}.')
def _check_clients(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(text2sql.CLIENTS))


def data_config() -> text2sql_task.DataConfig:
  """The data configuration given by the flags."""
  return DATA.build()


def training_config(**method) -> text2sql_task.TrainingConfig:
  """The local-training flags, for one method (`paradigm`, ...)."""
  return TRAINING.build(**method)


LORA_ALPHA = flags.DEFINE_float(
    'lora_alpha', None,
    'LoRA scale numerator: the adapters\' update is scaled by alpha / rank '
    '(default: alpha = rank, scale 1).')
LORA_TARGETS = flags.DEFINE_multi_enum(
    'lora_targets', list(lora.LoraConfig().targets), list(lora.TARGETS),
    'Which weights get LoRA adapters: attention (query, key, value, output '
    'projections), feedforward, all_dense (every Dense/EinsumDense), '
    'embedding (the token embedding table; tied, the output projection '
    'too).')
LORA_TRAIN_LAYER_NORMS = flags.DEFINE_bool(
    'lora_train_layer_norms', False,
    'With LoRA adapters: also train (and send) the LayerNorms.')


def lora_config(rank: int, seed: int = 0):
  """The LoRA flags' `lora.LoraConfig` of `rank`, or None for rank 0."""
  if not rank:
    return None
  return lora.LoraConfig(
      rank=rank, alpha=LORA_ALPHA.value, targets=tuple(LORA_TARGETS.value),
      train_layer_norms=LORA_TRAIN_LAYER_NORMS.value, seed=seed)


# The flags whose defaults are the Lorar paper's schedule (for GPUs).
_SCHEDULE_FLAGS = ('rounds', 'local_epochs', 'max_train_examples', 'clients',
                   'parser', 'model')


def schedule_summary() -> str:
  """What the parsed flags train, in words (for `_presets`' warning)."""
  epochs, *overrides = TRAINING['local_epochs'].value
  if overrides:
    epochs = f'{epochs} ({", ".join(overrides)})'
  examples = ','.join(DATA['max_train_examples'].value)
  examples = ('every training example' if examples == '0'
              else f'{examples} training examples')
  if PARSER.value == 'template':
    parser = 'the template parser'
  else:
    parser = f'the seq2seq parser, model {seq2seq_flags.MODEL.value}'
    try:
      model = seq2seq_flags.model_config()
      parser += (f' ({model.num_encoder_layers}+{model.num_decoder_layers} '
                 f'layers, d={model.hidden_dim})')
    except ValueError:  # Reported where the binary builds it.
      pass
  summary = (f'{common.ROUNDS.value} rounds of {epochs} local epochs on '
             f'{examples} of {len(DATA["clients"].value)} clients, {parser}')
  if not any(flags.FLAGS[name].present for name in _SCHEDULE_FLAGS):
    summary = ('the Lorar paper\'s schedule, for GPUs (days on 2 CPU cores): '
               + summary)
  return summary
