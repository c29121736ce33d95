r"""Partial models vs dense FedAvg on tag prediction: `experiments.sparse_tags`.

  python -m apps.partial_models.bin.train_sparse_tags \
      --flagfile=apps/partial_models/flags/train_sparse_tags.cpu.flags

Presets in `apps/partial_models/flags/`: `train_sparse_tags.smoke.flags` (about a
minute), `train_sparse_tags.cpu.flags` (the committed comparison in
docs/results/federated_select.md, minutes on 2 CPU cores),
`train_sparse_tags.paper.flags` (a cross-device population: every TREC-50
question a client, 100 sampled per round). Flags given after `--flagfile`
override the preset. Running the same command again resumes each method from
its last checkpoint.

`--seeds=0,1,2` runs the comparison once per seed (in `<output_dir>/seed_<s>`;
seed s splits the clients and orders their data) and reports the means over
seeds with 95% intervals and the paired differences of precision@1
(`experiments.sparse_tags_seeds`); `--report_only` reports the seeds finished
so far. `--compare_with=DIR` then also compares each method with the same
method of DIR, another multi-seed run that differs only in training settings
(e.g. `--max_keys=50 --block_size=4` against one-row keys).
"""

import os

from absl import app
from absl import flags

from apps.partial_models import sparse_tags_flags
from apps.common import binary as common
from tff_nlp import errors
from apps.partial_models import tag_experiment as sparse_tags
from apps.partial_models import tag_seeds as sparse_tags_seeds
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(sparse_tags_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/sparse_tags')

_METHODS = flags.DEFINE_list(
    'methods', list(sparse_tags.METHODS),
    f'Methods to compare, in table order; from {list(sparse_tags.METHODS)}.')


@flags.validator('methods', f'--methods must name distinct methods from '
                 f'{list(sparse_tags.METHODS)}.')
def _check_methods(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(sparse_tags.METHODS))

_SEEDS = flags.DEFINE_list(
    'seeds', [],
    'Run once per seed, each in <output_dir>/seed_<s>, and report means over '
    'seeds with 95% intervals and paired differences; replaces --seed. '
    'Empty: one run with --seed in --output_dir.')
_REPORT_ONLY = flags.DEFINE_bool(
    'report_only', False,
    'With --seeds: train nothing, report the seeds finished so far.')
_COMPARE_WITH = flags.DEFINE_string(
    'compare_with', None,
    'With --seeds: another multi-seed run directory of the same data and '
    'seeds; each method of both is compared (this run - that run) into '
    '<output_dir>/comparison.{json,md}.')


def _seeds() -> list[int]:
  try:
    return [int(s) for s in _SEEDS.value]
  except ValueError:
    raise errors.InputError(
        f'--seeds: expected integers, got {",".join(_SEEDS.value)}.') from None


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not _SEEDS.value and (_REPORT_ONLY.value or _COMPARE_WITH.value):
    raise errors.InputError('--report_only and --compare_with need --seeds.')
  setup = dict(data_dir=common.DATA_DIR.value,
               output_dir=common.OUTPUT_DIR.value,
               data=sparse_tags_flags.DATA.build(),
               training=sparse_tags_flags.TRAINING.build(),
               loop=common.loop_config_from_flags(),
               methods=_METHODS.value)
  with runtime_flags.context_from_flags():
    if not _SEEDS.value:
      sparse_tags.run_sparse_tags(**setup, restart=common.RESTART.value)
      return os.path.join(common.OUTPUT_DIR.value, sparse_tags.TABLE_FILE)
    sparse_tags_seeds.run_seeds(**setup, seeds=_seeds(),
                                report_only=_REPORT_ONLY.value,
                                restart=common.RESTART.value)
    if _COMPARE_WITH.value:
      sparse_tags_seeds.compare_runs(
          common.OUTPUT_DIR.value, _COMPARE_WITH.value, seeds=_seeds(),
          output_dir=common.OUTPUT_DIR.value)
  return os.path.join(common.OUTPUT_DIR.value,
                      sparse_tags_seeds.COMPARISON_TABLE_FILE
                      if _COMPARE_WITH.value
                      else sparse_tags_seeds.SUMMARY_TABLE_FILE)


if __name__ == '__main__':
  common.run(main)
