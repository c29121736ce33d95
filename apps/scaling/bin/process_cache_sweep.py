r"""Benchmark: what the shared process cache saves on a 10-run sweep.

Runs the sparse-tags comparison `--runs` times (10; seeds `--seed`,
`--seed`+1, ...) in this one Python process, each seed twice side by side:
without the process cache (every run builds its processes) and with
`tff_nlp.training.shared_processes()` (the first run builds, the others
reuse); prints the per-run times and the total saved, checks that both give
the same results, and writes `process_cache_sweep.json` to `--output_dir`
(`apps.scaling.process_cache_sweep`).

  python -m apps.scaling.bin.process_cache_sweep \
      --flagfile=apps/partial_models/flags/train_sparse_tags.smoke.flags \
      --output_dir=runs/process_cache_sweep --progress=off   # make bench-process-cache

This is a benchmark, not a test: its numbers depend on the machine.
"""

import os

from absl import app
from absl import flags

from apps.common import binary as common
from apps.partial_models import sparse_tags_flags
from apps.partial_models import tag_experiment as sparse_tags
from apps.scaling import process_cache_sweep
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(sparse_tags_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/process_cache_sweep')

_RUNS = flags.DEFINE_integer('runs', 10, 'Runs (seeds) of the sweep.',
                             lower_bound=1)
_METHODS = flags.DEFINE_list(
    'methods', list(sparse_tags.METHODS),
    f'Methods of each run; from {list(sparse_tags.METHODS)}.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with runtime_flags.context_from_flags():
    process_cache_sweep.run_sweep(
        data_dir=common.DATA_DIR.value, output_dir=common.OUTPUT_DIR.value,
        data=sparse_tags_flags.DATA.build(),
        training=sparse_tags_flags.TRAINING.build(),
        loop=common.loop_config_from_flags(), methods=_METHODS.value,
        runs=_RUNS.value)
  return os.path.join(common.OUTPUT_DIR.value,
                      process_cache_sweep.RESULTS_FILE)


if __name__ == '__main__':
  common.run(main)
