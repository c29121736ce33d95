r"""Benchmark: resident memory over many rounds must stay flat.

Runs `--rounds` rounds (200) of a small process, the dense tag process of
`experiments.sparse_tags` with `--clients_per_round` (20) of the 5,452
TREC-50 question clients, and samples the resident memory (VmRSS) of the
Python process and of each TFF worker it started every `--sample_every`
(10) rounds. The growth from round `--baseline_round` (20) to the last
sample must stay under `--target_percent` (5%) for every process. The flags
build a `scaling.MemoryGrowthSpec` (their defaults are its fields'), run by
`scaling.run_memory_growth`. Writes `memory_growth.{json,md,png}` to
`--output_dir` and prints the table.

  python -m apps.scaling.bin.memory_growth                    # ~2.5 minutes, 2 cores
  # With glibc's default malloc in the worker (it grows ~17% by round 100):
  python -m apps.scaling.bin.memory_growth \
      --worker_malloc_arena_max=0 --worker_malloc_mmap_threshold=0

This is a benchmark, not a test: its numbers depend on the machine.
"""

import collections

from absl import app
from absl import flags

from apps.scaling import scaling
from apps.partial_models import tag_task_flags as _tag_task_flags
from apps.common import config_flags
from apps.partial_models import tag_experiment as sparse_tags
from tff_nlp.runtime import flags as runtime_flags

# glibc's defaults let the worker fragment over hundreds of rounds; these
# keep it flat (tff_nlp.runtime.ContextSettings). Pass 0 for the defaults.
flags.set_default(runtime_flags.WORKER_MALLOC_ARENA_MAX, 2)
flags.set_default(runtime_flags.WORKER_MALLOC_MMAP_THRESHOLD, 128 * 1024)

_OUTPUT_DIR = config_flags.define('output_dir', 'runs/memory_growth')
# The run's flags, one per field of the spec but the task's (whose flags
# `tag_task_flags` defines); their defaults are the spec's.
_SPEC = config_flags.define_config(
    scaling.MemoryGrowthSpec, exclude=('data', 'training'), specs={
        'method': config_flags.Spec(
            'The process to run.', enum_values=sparse_tags.METHODS),
        'sample_every': config_flags.Spec(
            'Sample memory every this many rounds.', lower_bound=1),
        'baseline_round': config_flags.Spec(
            'Growth is measured from this round on.', lower_bound=0),
        'target_percent': config_flags.Spec(
            'Growth allowed after the baseline round (%).'),
    })


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  spec = _SPEC.build(data=_tag_task_flags.data_config(),
                     training=_tag_task_flags.training_config())
  context = collections.OrderedDict(
      worker_malloc_arena_max=(
          runtime_flags.WORKER_MALLOC_ARENA_MAX.value or 'default'),
      worker_malloc_mmap_threshold=(
          runtime_flags.WORKER_MALLOC_MMAP_THRESHOLD.value or 'default'))
  with runtime_flags.context_from_flags():
    result = scaling.run_memory_growth(
        spec, data_dir=_tag_task_flags.DATA_DIR.value,
        output_dir=_OUTPUT_DIR.value, context=context)
  print(result['markdown'])
  print(f'\nWritten to {_OUTPUT_DIR.value}/')


if __name__ == '__main__':
  app.run(main)
