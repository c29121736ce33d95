r"""Keeps a benchmark's finished runs in a committable folder, or restores them.

A benchmark's run folder (`runs/...`) holds checkpoints and is lost with the
machine; the finished runs' results are small. `--action=save` copies every
finished run's results (`--files`, relative to a run's folder; `.jsonl`
files gzipped; `results.json` kept as `run.json`: one run, one seed) from `--runs_dir` into `--archive_dir`, and `--action=restore`
puts them back, so that the benchmark on a new machine reads those runs as
finished and trains only the others (`tff_nlp.training.run_cache`):

  .venv/bin/python -m apps.common.bin.run_archive --action=restore \
      --archive_dir=records/fcl/clients10 \
      --runs_dir=runs/fcl_cpu5/clients10/runs

`make bench-fcl` and `make bench-nmt` restore before they run and save
after every setting; their folders are `records/fcl/<setting>/` and
`records/nmt_dynamic_pulling/` (records/README.md).
"""

from absl import flags

from tff_nlp import errors
from apps.common import binary as common
from tff_nlp.training import run_cache

_ACTION = flags.DEFINE_enum(
    'action', None, ['save', 'restore'],
    'save: --runs_dir -> --archive_dir; restore: --archive_dir -> --runs_dir.',
    required=True)
_RUNS_DIR = flags.DEFINE_string(
    'runs_dir', None, 'The benchmark\'s folder of cached runs, one folder '
    'per run.', required=True)
_ARCHIVE_DIR = flags.DEFINE_string(
    'archive_dir', None, 'The folder that keeps the finished runs.',
    required=True)
_FILES = flags.DEFINE_list(
    'files', list(run_cache.ARCHIVED_FILES),
    'save: glob patterns, relative to a run\'s folder, of what to keep.')
_EXCLUDE = flags.DEFINE_list(
    'exclude', [], 'save: prefixes of run names not to keep (runs whose '
    'weights other runs start from).')


def main(argv) -> None:
  if len(argv) > 1:
    raise errors.InputError(f'unexpected arguments: {argv[1:]}')
  if _ACTION.value == 'save':
    names = run_cache.archive(_RUNS_DIR.value, _ARCHIVE_DIR.value,
                              files=_FILES.value, exclude=_EXCLUDE.value)
    print(f'{len(names)} finished run(s) kept in {_ARCHIVE_DIR.value}')
  else:
    names = run_cache.restore(_ARCHIVE_DIR.value, _RUNS_DIR.value)
    print(f'{len(names)} run(s) restored into {_RUNS_DIR.value}')


if __name__ == '__main__':
  common.run(main)
