r"""Trains and evaluates one method of the Lorar paper's text-to-SQL Table 2.

  python -m apps.text2sql.bin.train_text2sql \
      --flagfile=apps/text2sql/flags/train_text2sql.smoke.flags \
      --paradigm=federated --algorithm=fedopt --weighting=lorar

`--paradigm=finetune` (one model per client), `centralized` (one model on
the union) or `federated` (`--algorithm` x `--weighting`); see
`apps.text2sql.experiment`. Presets in `apps/text2sql/flags/`:
`train_text2sql.smoke.flags` (about two minutes: all eight clients, a few
examples, a tiny seq2seq model; checks the pipeline),
`train_text2sql.demo.flags` (`make demo`: the template parser,
`--parser=template`, 8 rounds, 1-1.7 minutes per method),
`train_text2sql.templates.flags` (`make bench-text2sql-templates`, 2-6
minutes per method), `train_text2sql.cpu.flags` (`make bench-text2sql`,
the seq2seq parser, about an hour per method on 2 CPU cores) and
`train_text2sql.paper.flags` (the paper's schedule and a T5-base-sized model,
for GPUs). Running the same command again resumes. The defaults are the
paper's schedule (60 rounds of 6-12 local epochs on all data: days on 2 CPU
cores), so without `--flagfile` it first logs a warning naming what will
run and the presets.

`--lora_rank=r` fine-tunes LoRA adapters of rank r (`--lora_alpha`,
`--lora_targets`) instead of the whole model: clients train and send only
the adapters, the model of `--init_from` (e.g. a `pretrain_seq2seq` run)
stays frozen; see `tff_nlp.algorithms.build_lora_process`.
`--init_from_keras_nlp=<dir>` starts from a local keras-nlp BART preset
instead (its tokenizer and model; `tff_nlp.models.keras_nlp_preset`).
`--tokenizer_from=<run>` trains a model from scratch with that run's
tokenizer (the control of a pre-trained start). `--lowercase_sql` trains
on and scores SQL lower-cased outside its values, which a tokenizer of
natural language cuts into fewer pieces.

With `--paradigm=federated`: `--max_weight_share`, `--robust_aggregation`
and differential privacy (`--dp_noise_multiplier` or `--target_epsilon`,
with `--weighting=uniform`; ε recorded per round and in `results.json`)
change the aggregation (`tff_nlp.aggregators.factory`).
"""

import os

from absl import app
from absl import flags
from absl import logging

from apps.common import aggregation_flags
from apps.common import presets
from apps.text2sql.bin import _text2sql_flags as text2sql_flags
from apps.common import binary as common
from apps.common import config_flags
from apps.text2sql import experiment
from tff_nlp.runtime import flags as runtime_flags
from apps.text2sql import task as text2sql_task

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(text2sql_flags)
flags.adopt_module_key_flags(aggregation_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/text2sql')
flags.set_default(common.ROUNDS, 60)
flags.set_default(common.EVAL_EVERY, 5)

_METHOD = config_flags.define_config(
    text2sql_task.TrainingConfig, only=text2sql_flags.METHOD_FIELDS, specs={
        'paradigm': config_flags.Spec(
            'finetune: a model per client; centralized: one model on the '
            'union; federated: --algorithm with --weighting. Outside '
            'federated, a round is one epoch.',
            enum_values=list(text2sql_task.PARADIGMS)),
        'algorithm': config_flags.Spec(
            'Federated algorithm (server SGD; SGD with momentum 0.9 for '
            'fedopt).', enum_values=['fedavg', 'fedopt', 'fedprox']),
        'weighting': config_flags.Spec(
            'Client weighting of the federated mean.',
            enum_values=['num_examples', 'uniform', 'loss_reduction',
                         'lorar']),
    })

# text2sql_benchmark's flag, so that its presets serve both binaries
# (train_text2sql.demo.flags gives --methods to text2sql_benchmark and
# --algorithm to train_text2sql).
_METHODS = flags.DEFINE_list(
    'methods', None,
    'text2sql_benchmark\'s methods, accepted so that its presets run here: '
    'train_text2sql trains the one method of --paradigm, --algorithm and '
    '--weighting, and a warning says so when that method is not among '
    'them.')

_INIT_FROM = flags.DEFINE_string(
    'init_from', None,
    'Output directory of an earlier centralized or federated run to start '
    'from (its tokenizer and selected model); the model flags must match.')

_TOKENIZER_FROM = flags.DEFINE_string(
    'tokenizer_from', None,
    'Output directory of an earlier run (e.g. pretrain_seq2seq) whose '
    'tokenizer this run uses instead of training one; the model starts '
    'from scratch (e.g. to compare with --init_from of that run at the same '
    'tokenization). Not with --init_from or --init_from_keras_nlp.')

_VOCAB_SLICE_KEYS = flags.DEFINE_integer(
    'vocab_slice_keys', 0,
    'If > 0: vocabulary-sliced FedAvg, each client moving only the token '
    'embedding rows of its this-many most frequent ids (needs '
    '--paradigm=federated --algorithm=fedavg --weighting=uniform); 0: the '
    'whole model.', lower_bound=0)

_INIT_FROM_KERAS_NLP = flags.DEFINE_string(
    'init_from_keras_nlp', None,
    'A local keras-nlp BART preset directory (config.json, '
    'model.weights.h5, tokenizer.json, assets/tokenizer/; read offline): '
    'its tokenizer and model are the starting point (with --lora_rank, the '
    'frozen base); the model flags then give only the seed. Not with '
    '--init_from.')

_LORA_RANK = flags.DEFINE_integer(
    'lora_rank', 0,
    'If > 0: fine-tune LoRA adapters of this rank on the seq2seq parser '
    '(from --init_from\'s model, frozen) instead of the whole model; the '
    'clients train and send only the adapters. 0: the whole model.',
    lower_bound=0)
_NUM_EXAMPLES_FALLBACK = flags.DEFINE_bool(
    'num_examples_fallback', True,
    'With loss_reduction or lorar weighting: a round in which every '
    'client\'s loss reduction is 0 uses num_examples weights. --no'
    'num_examples_fallback keeps the model in such a round instead, which '
    'lets --num_workers/--worker_addresses split Lorar rounds across '
    'workers.')


@flags.multi_flags_validator(
    ['vocab_slice_keys', 'paradigm', 'algorithm', 'weighting'],
    '--vocab_slice_keys needs --paradigm=federated --algorithm=fedavg '
    '--weighting=uniform.')
def _check_vocab_slice(values):
  return not values['vocab_slice_keys'] or (
      values['paradigm'], values['algorithm'], values['weighting']) == (
          'federated', 'fedavg', 'uniform')


def _method_name(method) -> str:
  """The method as text2sql_benchmark's --methods names it."""
  if method['paradigm'] == 'federated':
    return f'{method["algorithm"]}/{method["weighting"]}'
  return method['paradigm']


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  presets.warn_without_preset('train_text2sql',
                              text2sql_flags.schedule_summary())
  method = _method_name(_METHOD.values())
  if _METHODS.value is not None and method not in _METHODS.value:
    logging.warning(
        '--methods=%s is text2sql_benchmark\'s; train_text2sql trains one '
        'method, %s (--paradigm, --algorithm, --weighting).',
        ','.join(_METHODS.value), method)
  training = text2sql_flags.training_config(**_METHOD.values())
  loop = common.loop_config_from_flags()
  aggregation = aggregation_flags.aggregation_config()
  spec = experiment.Text2SqlSpec(
      data=text2sql_flags.data_config(),
      model=text2sql_flags.model_config(),
      training=training,
      loop=loop,
      init_from=_INIT_FROM.value,
      init_from_keras_nlp=_INIT_FROM_KERAS_NLP.value,
      tokenizer_from=_TOKENIZER_FROM.value,
      vocab_slice_keys=_VOCAB_SLICE_KEYS.value,
      num_examples_fallback=_NUM_EXAMPLES_FALLBACK.value,
      aggregation=aggregation,
      lora=text2sql_flags.lora_config(_LORA_RANK.value, loop.seed),
  )
  with runtime_flags.context_from_flags():
    experiment.run_text2sql(
        spec,
        data_dir=common.DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        restart=common.RESTART.value,
    )
  return os.path.join(common.OUTPUT_DIR.value, experiment.TABLE_FILE)


if __name__ == '__main__':
  common.run(main)
