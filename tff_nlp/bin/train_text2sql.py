"""Trains and evaluates one method of the Lorar paper's text-to-SQL Table 2.

  python -m tff_nlp.bin.train_text2sql \
      --flagfile=tff_nlp/bin/flags/train_text2sql.smoke.flags \
      --paradigm=federated --algorithm=fedopt --weighting=lorar

`--paradigm=finetune` (one model per client), `centralized` (one model on
the union) or `federated` (`--algorithm` x `--weighting`); see
`tff_nlp.experiments.text2sql`. Presets in `tff_nlp/bin/flags/`:
`train_text2sql.smoke.flags` (a minute: all eight clients, a few examples, a
tiny model), `train_text2sql.cpu.flags` (the CPU benchmark) and
`train_text2sql.paper.flags` (the paper's schedule and a T5-base-sized model,
for GPUs). Running the same command again resumes.
"""

from absl import app
from absl import flags

from tff_nlp.bin import common
from tff_nlp.data import text2sql
from tff_nlp.experiments import text2sql as experiment
from tff_nlp.models import seq2seq
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(common)
flags.set_default(common.OUTPUT_DIR, 'runs/text2sql')
flags.set_default(common.ROUNDS, 60)
flags.set_default(common.EVAL_EVERY, 5)

_DATA_DIR = flags.DEFINE_string(
    'data_dir', None,
    'The shared/data folder (holding text2sql/). Unset: $TFF_NLP_DATA_DIR, '
    'else <repository>/../shared/data, else a verified download.')

_PARADIGM = flags.DEFINE_enum(
    'paradigm', 'federated', list(experiment.PARADIGMS),
    'finetune: a model per client; centralized: one model on the union; '
    'federated: --algorithm with --weighting. Outside federated, a round is '
    'one epoch.')
_ALGORITHM = flags.DEFINE_enum(
    'algorithm', 'fedopt', ['fedavg', 'fedopt', 'fedprox'],
    'Federated algorithm (server SGD; SGD with momentum 0.9 for fedopt).')
_WEIGHTING = flags.DEFINE_enum(
    'weighting', 'lorar', ['num_examples', 'uniform', 'loss_reduction', 'lorar'],
    'Client weighting of the federated mean.')

_CLIENTS = flags.DEFINE_list(
    'clients', list(text2sql.CLIENTS), 'Clients (datasets) to use.')
_WITH_VALUES = flags.DEFINE_bool(
    'with_values', True,
    'Fill values into questions and SQL (the paper); else keep variables.')
_SCHEMA_COLUMNS = flags.DEFINE_bool(
    'schema_columns', True,
    'Append table and column names to the question (the paper); else table '
    'names only.')
_VOCABULARY_SIZE = flags.DEFINE_integer(
    'vocabulary_size', 4000, 'Subword vocabulary size (upper bound).',
    lower_bound=300)
_MAX_SOURCE_LENGTH = flags.DEFINE_integer(
    'max_source_length', 256, 'Encoder tokens (longer inputs truncated).',
    lower_bound=8)
_MAX_TARGET_LENGTH = flags.DEFINE_integer(
    'max_target_length', 256, 'Decoder tokens (longer SQL truncated).',
    lower_bound=8)
_MAX_TRAIN_EXAMPLES = flags.DEFINE_integer(
    'max_train_examples', 0,
    'Training examples per client (seeded subset); 0: all.', lower_bound=0)
_MAX_EVAL_EXAMPLES = flags.DEFINE_integer(
    'max_eval_examples', 0,
    'Dev and test examples per client (seeded subset); 0: all.',
    lower_bound=0)

_MODEL = flags.DEFINE_enum(
    'model', 'small', sorted(seq2seq.PRESETS),
    'Model preset; the flags below override its fields.')
_NUM_LAYERS = flags.DEFINE_integer(
    'num_layers', None, 'Encoder and decoder layers each.', lower_bound=1)
_HIDDEN_DIM = flags.DEFINE_integer(
    'hidden_dim', None, 'd_model.', lower_bound=1)
_NUM_HEADS = flags.DEFINE_integer(
    'num_heads', None, 'Attention heads.', lower_bound=1)
_INTERMEDIATE_DIM = flags.DEFINE_integer(
    'intermediate_dim', None, 'Feed-forward width.', lower_bound=1)
_DROPOUT = flags.DEFINE_float(
    'dropout', None, 'Dropout rate.', lower_bound=0.0, upper_bound=1.0)

_CLIENT_OPTIMIZER = flags.DEFINE_enum(
    'client_optimizer', 'adam', sorted(experiment.CLIENT_OPTIMIZERS),
    'Client optimizer (the paper: adafactor).')
_LOCAL_EPOCHS = flags.DEFINE_list(
    'local_epochs', ['12', 'advising=6', 'atis=6'],
    'Local epochs per round: a default, then client=value overrides '
    '(federated only).')
_LEARNING_RATES = flags.DEFINE_list(
    'learning_rates',
    ['1e-3', 'advising=1e-4', 'atis=1e-4', 'geography=1e-4', 'yelp=1e-4'],
    'Client learning rates: a default (also the centralized one), then '
    'client=value overrides.')
_BATCH_SIZES = flags.DEFINE_list(
    'batch_sizes', ['4', 'advising=8', 'atis=8'],
    'Batch sizes: a default (also the centralized one), then client=value '
    'overrides.')
_PROXIMAL_STRENGTH = flags.DEFINE_float(
    'proximal_strength', 1e-4, "FedProx's mu (--algorithm=fedprox).",
    lower_bound=0.0)
_DECODE_BATCH_SIZE = flags.DEFINE_integer(
    'decode_batch_size', 64, 'Examples decoded at once in evaluation.',
    lower_bound=1)


def _model_config() -> seq2seq.Seq2SeqConfig:
  overrides = {
      'num_encoder_layers': _NUM_LAYERS.value,
      'num_decoder_layers': _NUM_LAYERS.value,
      'hidden_dim': _HIDDEN_DIM.value,
      'num_heads': _NUM_HEADS.value,
      'intermediate_dim': _INTERMEDIATE_DIM.value,
      'dropout': _DROPOUT.value,
      'seed': common.SEED.value,
  }
  return seq2seq.Seq2SeqConfig.from_preset(
      _MODEL.value, **{k: v for k, v in overrides.items() if v is not None})


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  data = experiment.DataConfig(
      clients=tuple(_CLIENTS.value),
      with_values=_WITH_VALUES.value,
      schema_columns=_SCHEMA_COLUMNS.value,
      vocabulary_size=_VOCABULARY_SIZE.value,
      max_source_length=_MAX_SOURCE_LENGTH.value,
      max_target_length=_MAX_TARGET_LENGTH.value,
      max_train_examples=_MAX_TRAIN_EXAMPLES.value,
      max_eval_examples=_MAX_EVAL_EXAMPLES.value,
  )
  training_config = experiment.TrainingConfig(
      paradigm=_PARADIGM.value,
      algorithm=_ALGORITHM.value,
      weighting=_WEIGHTING.value,
      client_optimizer=_CLIENT_OPTIMIZER.value,
      local_epochs=experiment.PerClient.parse(
          _LOCAL_EPOCHS.value, name='local_epochs', kind=int),
      learning_rates=experiment.PerClient.parse(
          _LEARNING_RATES.value, name='learning_rates'),
      batch_sizes=experiment.PerClient.parse(
          _BATCH_SIZES.value, name='batch_sizes', kind=int),
      proximal_strength=_PROXIMAL_STRENGTH.value,
      decode_batch_size=_DECODE_BATCH_SIZE.value,
  )
  with runtime_flags.context_from_flags():
    experiment.run_text2sql(
        data_dir=_DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        data=data,
        model=_model_config(),
        training=training_config,
        loop=common.loop_config_from_flags(),
    )


@flags.validator('clients', f'--clients must name distinct clients from '
                 f'{list(text2sql.CLIENTS)}.')
def _check_clients(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(text2sql.CLIENTS))


if __name__ == '__main__':
  common.run(main)
