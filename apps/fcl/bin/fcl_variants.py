r"""The FCL benchmark's settings side by side (`make bench-fcl` runs it last).

Reads the main setting's `results.json` in `--bench_dir` and every variant's
in `--bench_dir/<variant>` and writes `variants.md` and `variants.json`
(`apps.fcl.variants`) into `--report_dir`:

  .venv/bin/python -m apps.fcl.bin.fcl_variants --bench_dir=runs/fcl_cpu5 \
      --variants=paper_lr,skipgram,random,clients10 \
      --report_dir=docs/results/fcl
"""

from absl import flags

from tff_nlp import errors
from apps.common import binary as common
from apps.fcl import variants as fcl_variants

_BENCH_DIR = flags.DEFINE_string(
    'bench_dir', None, 'The main setting\'s output folder (train_fcl '
    '--output_dir); a variant\'s is its subfolder.', required=True)
_VARIANTS = flags.DEFINE_list(
    'variants', [], 'The variants\' subfolders of --bench_dir, in order.')
_REPORT_DIR = flags.DEFINE_string(
    'report_dir', None, 'Where variants.md and variants.json go.',
    required=True)


def main(argv) -> None:
  if len(argv) > 1:
    raise errors.InputError(f'unexpected arguments: {argv[1:]}')
  summary = fcl_variants.summarize(_BENCH_DIR.value, _VARIANTS.value)
  if not summary['rows']:
    raise errors.InputError(
        f'--bench_dir={_BENCH_DIR.value}: no results.json there or in the '
        f'variants\' subfolders {_VARIANTS.value}.')
  fcl_variants.write(summary, _REPORT_DIR.value)


if __name__ == '__main__':
  common.run(main)
