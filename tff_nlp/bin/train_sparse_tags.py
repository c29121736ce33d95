"""Partial models vs dense FedAvg on tag prediction: `experiments.sparse_tags`.

  python -m tff_nlp.bin.train_sparse_tags \
      --flagfile=tff_nlp/bin/flags/train_sparse_tags.cpu.flags

Presets in `tff_nlp/bin/flags/`: `train_sparse_tags.smoke.flags` (about a
minute), `train_sparse_tags.cpu.flags` (the committed comparison in
docs/results/federated_select.md, minutes on 2 CPU cores),
`train_sparse_tags.paper.flags` (a cross-device population: every TREC-50
question a client, 100 sampled per round). Flags given after `--flagfile`
override the preset. Running the same command again resumes each method from
its last checkpoint.
"""

from absl import app
from absl import flags

from tff_nlp.bin import _sparse_tags_flags as sparse_tags_flags
from tff_nlp.bin import common
from tff_nlp.experiments import sparse_tags
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


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with runtime_flags.context_from_flags():
    sparse_tags.run_sparse_tags(
        data_dir=common.DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        data=sparse_tags_flags.DATA.build(),
        training=sparse_tags_flags.TRAINING.build(),
        loop=common.loop_config_from_flags(),
        methods=_METHODS.value,
    )


if __name__ == '__main__':
  common.run(main)
