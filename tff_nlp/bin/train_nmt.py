"""Federated mixed-domain NMT with dynamic pulling: trains engines, reports BLEU.

  python -m tff_nlp.bin.train_nmt \
      --flagfile=tff_nlp/bin/flags/train_nmt.smoke.flags

Trains each engine of `--engines` (and the generic engine they start from)
on the German→English domains and writes the paper's BLEU tables (single-
domain engines, centralised baselines, federated server and client models,
pulled parameters per mode) to `<output_dir>/results.md`; see
`tff_nlp.experiments.nmt`. Engines: `generic`, `single:<domain>`,
`combined`, `chained`, `federated:<mode>[:<rounds>][:rms]` with a mode of
`tff_nlp.algorithms.dynamic_pulling` (default, dp_g, dp_l, random, dp_l_33,
controllers). Each engine is cached under its configuration, so running the
command again continues an interrupted experiment. Presets in
`tff_nlp/bin/flags/`: `train_nmt.smoke.flags` (a minute: tiny model, few
sentences; checks the pipeline), `train_nmt.cpu.flags` (`make bench-nmt`)
and `train_nmt.paper.flags` (Transformer base, all data; for GPUs).
"""

import shlex
import sys

from absl import app
from absl import flags

from tff_nlp import algorithms
from tff_nlp.bin import _seq2seq_flags as seq2seq_flags
from tff_nlp.bin import common
from tff_nlp.data import nmt as nmt_data
from tff_nlp.experiments import nmt
from tff_nlp.runtime import flags as runtime_flags
from tff_nlp.tasks import nmt as nmt_task

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(seq2seq_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/nmt')
flags.set_default(common.ROUNDS, 5)
flags.set_default(common.EVAL_EVERY, 1)

_DATA_DIR = flags.DEFINE_string(
    'data_dir', None,
    'The shared/data folder (holding nmt_de_en/) or any folder of domains '
    '(sub-folders with {train,dev,test}.{de,en}). Unset: $TFF_NLP_DATA_DIR, '
    'else <repository>/../shared/data.')
_DOMAINS = flags.DEFINE_list(
    'domains', [],
    'Domains (clients), the generic one included. Unset: every domain folder '
    'of --data_dir (sub-folders with {train,dev,test}.{de,en}): the '
    f'paper\'s {",".join(nmt_data.DOMAINS)} first, then any other by name.')
_GENERIC_DOMAIN = flags.DEFINE_string(
    'generic_domain', 'wmt_news',
    'The domain of the generic engine that initialises the others.')
_VOCABULARY_SIZE = flags.DEFINE_integer(
    'vocabulary_size', 8000, 'Joint subword vocabulary (upper bound).',
    lower_bound=300)
_MAX_LENGTH = flags.DEFINE_integer(
    'max_length', 64, 'Source and target tokens (longer ones truncated).',
    lower_bound=8)
_MAX_TRAIN = flags.DEFINE_integer(
    'max_train_examples', 0, 'Training pairs per domain (seeded); 0: all.',
    lower_bound=0)
_MAX_EVAL = flags.DEFINE_integer(
    'max_eval_examples', 0, 'Dev and test pairs per domain (seeded); 0: all.',
    lower_bound=0)

_CLIENT_OPTIMIZER = flags.DEFINE_enum(
    'client_optimizer', 'adam', sorted(algorithms.CLIENT_OPTIMIZERS),
    'Optimizer of every training step.')
_LEARNING_RATE = flags.DEFINE_float(
    'learning_rate', 1e-3, 'Learning rate.', lower_bound=0.0)
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', 32, 'Sentence pairs per batch.', lower_bound=1)
_PRETRAIN_EPOCHS = flags.DEFINE_integer(
    'pretrain_epochs', 10, 'Epochs of the generic and single-domain engines.',
    lower_bound=1)
_FINETUNE_EPOCHS = flags.DEFINE_integer(
    'finetune_epochs', 1,
    'Epochs of data combination and of each domain of chained fine-tuning.',
    lower_bound=1)
_LOCAL_STEPS = flags.DEFINE_integer(
    'local_steps', 100, 'Batches per client per federated round.',
    lower_bound=1)
_BEAM_SIZE = flags.DEFINE_integer(
    'beam_size', 1, '1: greedy decoding; else beam search.', lower_bound=1)
_DECODE_BATCH_SIZE = flags.DEFINE_integer(
    'decode_batch_size', 64, 'Sentences decoded at once.', lower_bound=1)
_CONTROLLER_LAYERS = flags.DEFINE_list(
    'controller_layers', ['0', '3'],
    'Encoder and decoder layers the controllers baseline exchanges.')
_ENGINES = flags.DEFINE_list(
    'engines',
    ['generic', 'combined', 'chained', 'federated:default',
     'federated:dp_l', 'federated:dp_g', 'federated:random',
     'federated:dp_l_33', 'federated:controllers'],
    'Engines: generic, single:<domain>, combined, chained, '
    'federated:<mode>[:<rounds>][:<change_norm>] (rounds default: --rounds; '
    'change_norm l2, the paper, or rms).')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if common.CLIENTS_PER_ROUND.present:
    raise app.UsageError(
        '--clients_per_round does not apply to train_nmt: every domain takes '
        'part in every federated round, as in the paper.')
  try:
    controller_layers = tuple(int(v) for v in _CONTROLLER_LAYERS.value)
  except ValueError:
    raise app.UsageError(
        f'--controller_layers: expected integers, got '
        f'{_CONTROLLER_LAYERS.value}.') from None
  engines = [nmt.EngineSpec.parse(spec, default_rounds=common.ROUNDS.value)
             for spec in _ENGINES.value]
  try:
    data = nmt_task.DataConfig(
        domains=nmt_task.select_domains(_DATA_DIR.value, _DOMAINS.value),
        generic_domain=_GENERIC_DOMAIN.value,
        vocabulary_size=_VOCABULARY_SIZE.value, max_length=_MAX_LENGTH.value,
        max_train_examples=_MAX_TRAIN.value,
        max_eval_examples=_MAX_EVAL.value)
    training = nmt_task.TrainingConfig(
        client_optimizer=_CLIENT_OPTIMIZER.value,
        learning_rate=_LEARNING_RATE.value, batch_size=_BATCH_SIZE.value,
        pretrain_epochs=_PRETRAIN_EPOCHS.value,
        finetune_epochs=_FINETUNE_EPOCHS.value,
        local_steps=_LOCAL_STEPS.value, beam_size=_BEAM_SIZE.value,
        decode_batch_size=_DECODE_BATCH_SIZE.value,
        controller_layers=controller_layers)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  with runtime_flags.context_from_flags():
    nmt.run_nmt(
        engines=engines,
        data_dir=_DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        data=data,
        model=seq2seq_flags.model_config(),
        training=training,
        loop=common.loop_config_from_flags(),
        command=shlex.join(['python', '-m', 'tff_nlp.bin.train_nmt']
                           + sys.argv[1:]),
    )


if __name__ == '__main__':
  common.run(main)
