r"""Federated mixed-domain NMT with dynamic pulling: trains engines, reports BLEU.

  python -m apps.nmt.bin.train_nmt \
      --flagfile=apps/nmt/flags/train_nmt.smoke.flags

Trains each engine of `--engines` (and the generic engine they start from)
on the German→English domains of `--corpus` (a folder of domains in the data
folder `--data_dir`: `nmt_de_en`, or `nmt_de_en_large`) and writes the paper's BLEU tables (single-
domain engines, centralised baselines, federated server and client models,
pulled parameters per mode) to `<output_dir>/results.md`; see
`apps.nmt.experiment`. Engines: `generic`, `single:<domain>`,
`finetuned:<domain>`, `combined`, `chained`,
`federated:<mode>[:<rounds>][:rms]` with a mode of
`tff_nlp.algorithms.dynamic_pulling` (default, dp_g, dp_l, random, dp_l_33,
controllers). `--max_weight_share` caps any domain's share of a federated
round's weight (`tff_nlp.aggregators.weight_cap`). Each engine is cached
under its configuration, so running the command again continues an
interrupted experiment. Presets in `apps/nmt/flags/`:
`train_nmt.smoke.flags` (a minute: tiny model, few sentences; checks the
pipeline), `train_nmt.cpu.flags` (`make bench-nmt`) and
`train_nmt.paper.flags` (Transformer base, all data; for GPUs).
"""

import os
import shlex
import sys

from absl import app
from absl import flags


from tff_nlp import templates
from tff_nlp.algorithms import tensor_selection
from apps.common import presets
from apps.common import seq2seq_flags
from apps.common import binary as common
from apps.common import config_flags
from tff_nlp.data import nmt as nmt_data
from apps.nmt import experiment as nmt
from apps.nmt import results as nmt_results
from tff_nlp.runtime import flags as runtime_flags
from apps.nmt import task as nmt_task

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(seq2seq_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/nmt')
flags.set_default(common.ROUNDS, 5)
flags.set_default(common.EVAL_EVERY, 1)

_CORPUS = flags.DEFINE_string(
    'corpus', nmt_data.NMT_SUBDIR,
    'The corpus: a folder of domains (sub-folders with '
    '{train,dev,test}.{de,en}), by its name in the data folder --data_dir '
    f'({nmt_data.NMT_SUBDIR}, or {nmt_data.LARGE_SUBDIR}: more training '
    f'text and the {nmt_data.GENERIC_CORPUS}/ corpus) or by a path (with a '
    '/, e.g. ./my_domains).')
_DATA = config_flags.define_config(
    nmt_task.DataConfig, defaults={'domains': []}, specs={
        'domains': config_flags.Spec(
            'Domains (clients). Unset: every domain folder of --corpus '
            '(sub-folders with {train,dev,test}.{de,en}): the paper\'s '
            f'{",".join(nmt_data.DOMAINS)} first, then any other by name; '
            'the --generic_domain folder only if it is one of the paper\'s '
            'five.'),
        'generic_domain': config_flags.Spec(
            'The domain folder of the generic engine that initialises the '
            'others: a client (wmt_news, the paper\'s news, on nmt_de_en) or '
            f'no client ({nmt_data.GENERIC_CORPUS}, on '
            f'{nmt_data.LARGE_SUBDIR}).'),
        'vocabulary_size': config_flags.Spec(
            'Joint subword vocabulary (upper bound).', lower_bound=300),
        'max_length': config_flags.Spec(
            'Source and target tokens (longer ones truncated).',
            lower_bound=8),
        'max_train_examples': config_flags.Spec(
            'Training pairs per domain (seeded); 0: all.', lower_bound=0),
    })
_TRAINING = config_flags.define_config(
    nmt_task.TrainingConfig, specs={
        'client_optimizer': config_flags.Spec(
            'Optimizer of every training step.',
            enum_values=sorted(templates.CLIENT_OPTIMIZERS)),
        'learning_rate': config_flags.Spec(
            'Learning rate (of the first round with a decaying schedule).',
            lower_bound=0.0),
        'learning_rate_schedule': config_flags.Spec(
            'constant, or linear: round r of an engine\'s R rounds at '
            'learning_rate·(R-r+1)/R.',
            enum_values=list(nmt_task.LEARNING_RATE_SCHEDULES)),
        'pretrain_learning_rate': config_flags.Spec(
            'If set, the learning rate of the engines trained from scratch '
            '(generic, single-domain); unset: --learning_rate.',
            lower_bound=0.0),
        'pretrain_learning_rate_schedule': config_flags.Spec(
            'If set, their schedule; unset: --learning_rate_schedule.',
            enum_values=list(nmt_task.LEARNING_RATE_SCHEDULES)),
        'pretrain_dropout': config_flags.Spec(
            'If set, their dropout; unset: --dropout.', lower_bound=0.0,
            upper_bound=1.0),
        'pretrain_epochs': config_flags.Spec(
            'Epochs of the generic and single-domain engines.',
            lower_bound=1),
        'finetune_epochs': config_flags.Spec(
            'Epochs of data combination and of each domain of chained '
            'fine-tuning.', lower_bound=1),
        'local_steps': config_flags.Spec(
            'Batches per client per federated round.', lower_bound=1),
        'beam_size': config_flags.Spec(
            '1: greedy decoding; else beam search.', lower_bound=1),
        'controller_layers': config_flags.Spec(
            'Encoder and decoder layers the controllers baseline exchanges.'),
        'split_by': config_flags.Spec(
            'What dynamic pulling\'s median counts per group: tensors (the '
            'paper\'s text) or parameters (half the parameters, as its '
            'Table 6).', enum_values=list(tensor_selection.SPLIT_BY)),
        'steps_per_round': config_flags.Spec(
            'Centralised engines: batches per round (a checkpoint, and a '
            'fresh optimizer state); 0: one epoch per round.',
            lower_bound=0),
        'score_client_models': config_flags.Spec(
            'Score a federated engine\'s client models beside its server '
            'model (each on every test set).'),
        'max_weight_share': config_flags.Spec(
            'If set, no domain\'s share of a federated round\'s weight (its '
            'training-set size) exceeds this (in (0, 1]; the excess goes to '
            'the others in proportion to their sizes); e.g. 2/domains. '
            'Unset: no cap.', lower_bound=0.0, upper_bound=1.0),
    })
_ENGINES = flags.DEFINE_list(
    'engines',
    ['generic', 'combined', 'chained', 'federated:default',
     'federated:dp_l', 'federated:dp_g', 'federated:random',
     'federated:dp_l_33', 'federated:controllers'],
    'Engines: generic, single:<domain> (from scratch), finetuned:<domain> '
    '(the generic engine fine-tuned on one domain), combined, chained, '
    'federated:<mode>[:<rounds>][:<change_norm>][:<server_optimizer>] '
    '(rounds default: --rounds; change_norm l2, the paper, or rms; '
    'server_optimizer none, the paper, or momentum: FedAvgM).')
_REPORT_ONLY = flags.DEFINE_bool(
    'report_only', False,
    'Train nothing: write the report of the engines finished so far (e.g. '
    'while the same command runs elsewhere) and leave out the others.')
_SEEDS = flags.DEFINE_list(
    'seeds', [],
    'Training seeds, each running every engine (the generic engine, the '
    'tokenizer and the data subsets once, with the first). Empty: --seed.')


def _schedule_summary(engines, seeds) -> str:
  """What the flags train, in words (for `_presets`' warning)."""
  pairs = (f'{_DATA["max_train_examples"].value} training pairs'
           if _DATA['max_train_examples'].value else 'every training pair')
  model = seq2seq_flags.MODEL.value
  try:
    config = seq2seq_flags.model_config()
    model += (f' ({config.num_encoder_layers}+{config.num_decoder_layers} '
              f'layers, d={config.hidden_dim})')
  except ValueError:  # Reported where main builds it.
    pass
  return (f'{len(engines)} engines ({",".join(_ENGINES.value)}) with '
          f'{len(seeds) or 1} seed(s) on {pairs} of each domain of '
          f'{_CORPUS.value}, federated engines '
          f'{common.ROUNDS.value} rounds of '
          f'{_TRAINING["local_steps"].value} steps per domain, model {model}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if common.CLIENTS_PER_ROUND.present:
    raise app.UsageError(
        '--clients_per_round does not apply to train_nmt: every domain takes '
        'part in every federated round, as in the paper.')
  engines = [nmt.EngineSpec.parse(spec, default_rounds=common.ROUNDS.value)
             for spec in _ENGINES.value]
  try:
    seeds = [int(s) for s in _SEEDS.value]
  except ValueError:
    raise app.UsageError(f'--seeds: {_SEEDS.value}: expected integers.'
                         ) from None
  presets.warn_without_preset('train_nmt', _schedule_summary(engines, seeds))
  # The folder of domains: --corpus in the data folder --data_dir.
  corpus_dir = nmt_data.find_corpus_dir(common.DATA_DIR.value, _CORPUS.value)
  try:
    data = _DATA.build(domains=nmt_task.select_domains(
        corpus_dir, _DATA['domains'].value,
        generic_domain=_DATA['generic_domain'].value))
    training = _TRAINING.build()
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  with runtime_flags.context_from_flags():
    nmt.run_nmt(
        engines=engines,
        data_dir=corpus_dir,
        output_dir=common.OUTPUT_DIR.value,
        data=data,
        model=seq2seq_flags.model_config(),
        training=training,
        loop=common.loop_config_from_flags(),
        seeds=seeds,
        report_only=_REPORT_ONLY.value,
        command=shlex.join(['python', '-m', 'apps.nmt.bin.train_nmt']
                           + sys.argv[1:]),
        restart=common.RESTART.value,
    )
  return os.path.join(common.OUTPUT_DIR.value, nmt_results.TABLE_FILE)


if __name__ == '__main__':
  common.run(main)
