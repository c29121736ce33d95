r"""Pre-trains the seq2seq model with T5 span corruption on public text.

  python -m apps.text2sql.bin.pretrain_seq2seq \
      --flagfile=apps/text2sql/flags/pretrain_seq2seq.smoke.flags

Trains a SentencePiece tokenizer (with sentinel ids) and the encoder-decoder
of `tff_nlp.models.seq2seq` on the text of `--corpora` (default: both sides
of nmt_de_en_large's training splits and the classification training texts;
no text-to-SQL data), and writes a run directory that
`train_text2sql --init_from=<output_dir>` takes (with the subword tokenizer,
the same model flags and the same --max_source_length and
--max_target_length); see `apps.text2sql.pretrain`. Running the
command again resumes an interrupted run and reads a finished one back.
`--eval_every` and `--checkpoint_every` count training steps here.
Presets in `apps/text2sql/flags/`: `pretrain_seq2seq.smoke.flags` (seconds:
tiny model, a few hundred texts) and `pretrain_seq2seq.cpu.flags`
(`make pretrain`: the `small` model of the subword text-to-SQL preset, under
60 minutes on 2 CPU cores).
"""

import json
import os

from absl import app
from absl import flags

from apps.common import seq2seq_flags
from apps.common import binary as common
from apps.common import config_flags
from apps.text2sql import pretrain

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(seq2seq_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/pretrain')
flags.set_default(common.EVAL_EVERY, 200)
flags.set_default(common.LOOP['checkpoint_every'], 200)

_DATA = config_flags.define_config(pretrain.DataConfig, specs={
    'corpora': config_flags.Spec(
        'Text files, relative to --data_dir (or absolute): one text per '
        'line, or label<TAB>text for .tsv files. Default: both sides of '
        'nmt_de_en_large/*/train and the r8, subj, tmn and trec6 training '
        'texts.'),
    'max_texts_per_corpus': config_flags.Spec(
        'Texts per file (seeded subset); 0: all.', lower_bound=0),
    'heldout_texts': config_flags.Spec(
        'Texts held out (seeded) for the held-out loss and perplexity.',
        lower_bound=1),
    'vocabulary_size': config_flags.Spec(
        'Subword vocabulary (upper bound; sentinels included).',
        lower_bound=300),
    'tokenizer_texts': config_flags.Spec(
        'Texts the tokenizer is trained on (seeded subset); 0: all.',
        lower_bound=0),
    'num_sentinels': config_flags.Spec(
        'Sentinel ids (the top of the vocabulary).', lower_bound=1),
    'max_source_length': config_flags.Spec(
        'Encoder tokens: the text-to-SQL run\'s --max_source_length.',
        lower_bound=3),
    'max_target_length': config_flags.Spec(
        'Decoder tokens: the text-to-SQL run\'s --max_target_length.',
        lower_bound=3),
    'noise_density': config_flags.Spec(
        'Fraction of each text\'s tokens corrupted.', lower_bound=0.0,
        upper_bound=1.0),
    'mean_noise_span_length': config_flags.Spec(
        'Mean length of a corrupted span.', lower_bound=1.0),
})
_TRAINING = config_flags.define_config(pretrain.TrainingConfig, specs={
    'learning_rate': config_flags.Spec(
        'Adam\'s learning rate after the warm-up.', lower_bound=0.0),
    'warmup_steps': config_flags.Spec(
        'Steps of linear learning-rate warm-up.', lower_bound=0),
    'clip_norm': config_flags.Spec(
        'Global gradient norm clip; 0: none.', lower_bound=0.0),
})
_BUDGET = config_flags.define_config(
    pretrain.BudgetConfig, only=('train_steps', 'max_minutes'), specs={
        'train_steps': config_flags.Spec(
            'Training steps (a resumed run continues up to this).',
            lower_bound=1),
        'max_minutes': config_flags.Spec(
            'Or stop after this much training time, summed over restarts.',
            lower_bound=0.0),
    })


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  for name in ('rounds', 'clients_per_round', 'evaluate_initial'):
    if flags.FLAGS[name].present:
      raise app.UsageError(
          f'--{name} does not apply to pretrain_seq2seq (see --train_steps; '
          'the initial model is always evaluated).')
  results = pretrain.run_pretrain(
      data_dir=common.DATA_DIR.value,
      output_dir=common.OUTPUT_DIR.value,
      data=_DATA.build(),
      model=seq2seq_flags.model_config(),
      training=_TRAINING.build(),
      budget=_BUDGET.build(
          eval_every=common.EVAL_EVERY.value or 10**9,
          checkpoint_every=common.LOOP['checkpoint_every'].value),
      seed=common.SEED.value,
      restart=common.RESTART.value,
  )
  print(json.dumps({key: results[key] for key in (
      'steps', 'stopped_by', 'examples_seen', 'training_seconds',
      'steps_per_second', 'initial_heldout_perplexity', 'heldout_loss',
      'heldout_perplexity', 'vocabulary_size', 'parameters')}, indent=1))
  return os.path.join(common.OUTPUT_DIR.value, pretrain.RESULTS_FILE)


if __name__ == '__main__':
  common.run(main)
