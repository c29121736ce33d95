r"""Attack benchmark: attackers × weightings × defences (bench-robustness).

Issue 25, point 3 (`benchmarks.robustness`): 1-3 attacking clients of 8
(scaled update, sign flip, inflated example count, label flip, a data set
that inflates ΔL) against num_examples, uniform and Lorar weighting, with no
defence, the weight-share cap (2/N), TFF's robust aggregator, both, the
trimmed mean, or the cap around it; on the linear regression (true weights
known), R8 (the weighting demo) and text-to-SQL (the template parser).

  python -m apps.robustness.bin.robustness --tasks=linear_regression   # ~1 hour
  python -m apps.robustness.bin.robustness --tasks=r8 --defences=none,cap
  python -m apps.robustness.bin.robustness \
      --flagfile=apps/robustness/flags/robustness.all.flags

Runs are cached under `--output_dir/<task>/runs/`, so running the command
again resumes: finished runs are read back. The reports (`results.json`,
`tables.md`, `<task>_distance_ratio.png`) go to `--report_dir`; what they
held of other tasks or configurations is kept (`--keep_reported`).
"""

from absl import app
from absl import flags

from apps.robustness import attacks
from apps.robustness import benchmark as robustness
from apps.common import binary as common
from tff_nlp.runtime import flags as runtime_flags

# --output_dir and --data_dir (common's); its loop flags (--rounds, ...) are
# not used: each task's rounds are part of what a cached run is.
flags.set_default(common.OUTPUT_DIR, 'runs/robustness')

_TASKS = flags.DEFINE_list(
    'tasks', ['linear_regression'],
    f'Tasks to run, in order, from {list(robustness.DEFAULT_GRIDS)}.')
_REPORT_DIR = flags.DEFINE_string(
    'report_dir', None,
    'Where results.json, tables.md and the figures go; default '
    '--output_dir.')
_KEEP_REPORTED = flags.DEFINE_bool(
    'keep_reported', True,
    'Keep what --report_dir\'s results.json reports that this run does not '
    'measure: other tasks, and other configurations of a task with the same '
    'settings (so one task or defence can be added without the rest). '
    'False: the reports hold this run\'s tasks only.')
_SEEDS = flags.DEFINE_list(
    'seeds', [],
    'Seeds of every task\'s runs; empty: each task\'s default (0,1,2 for '
    'the linear regression, 0 for R8 and text-to-SQL).')

_DEFENCES = flags.DEFINE_list(
    'defences', [],
    f'Defences of every task\'s runs, from {list(attacks.DEFENCES)}; empty: '
    'each task\'s default. With --keep_reported, adds them to a report.')


@flags.validator('defences', f'--defences must name defences from '
                 f'{list(attacks.DEFENCES)}.')
def _check_defences(value):
  return set(value) <= set(attacks.DEFENCES)


@flags.validator('tasks', f'--tasks must name distinct tasks from '
                 f'{list(robustness.DEFAULT_GRIDS)}.')
def _check_tasks(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(robustness.DEFAULT_GRIDS))


@flags.validator('seeds', '--seeds must be non-negative integers.')
def _check_seeds(value):
  return all(v.isdigit() for v in value)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with runtime_flags.context_from_flags():
    robustness.run_benchmark(
        _TASKS.value,
        output_dir=common.OUTPUT_DIR.value,
        report_dir=_REPORT_DIR.value,
        seeds=[int(s) for s in _SEEDS.value] or None,
        defences=_DEFENCES.value or None,
        data_dir=common.DATA_DIR.value,
        keep_reported=_KEEP_REPORTED.value,
    )


if __name__ == '__main__':
  common.run(main)
