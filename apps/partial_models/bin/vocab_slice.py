r"""Benchmark: vocabulary-sliced vs dense FedAvg on the text-to-SQL clients.

Runs FedAvg (uniform weights) with the text-to-SQL flags given, once dense and
once per M in `--vocab_slice_keys` with each client downloading and uploading
only the M token-embedding rows of its sub-vocabulary
(`tff_nlp.algorithms.build_vocab_sliced_process`), and prints bytes per
client per round, the clients' sub-vocabularies and test accuracy side by
side (`apps.partial_models.vocab_slice_benchmark`). Each run is cached under
its configuration, so running the command again continues an interrupted
benchmark.

  python -m apps.partial_models.bin.vocab_slice \
      --flagfile=apps/text2sql/flags/train_text2sql.subword.flags \
      --output_dir=runs/vocab_slice_cpu             # or: make bench-vocab-slice

Results of the committed run are in docs/results/federated_select.md.
"""

import shlex
import sys

from absl import app
from absl import flags

from apps.text2sql.bin import _text2sql_flags as text2sql_flags
from apps.common import binary as common
from apps.partial_models import vocab_slice_benchmark
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(text2sql_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/vocab_slice')

_VOCAB_SLICE_KEYS = flags.DEFINE_list(
    'vocab_slice_keys', ['1000', '256'],
    'M per sliced run: embedding rows each client selects (the dense run is '
    'always included).')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    max_keys = [int(m) for m in _VOCAB_SLICE_KEYS.value]
  except ValueError as e:
    raise app.UsageError(
        f'--vocab_slice_keys: expected integers, got '
        f'{_VOCAB_SLICE_KEYS.value}.') from e
  with runtime_flags.context_from_flags():
    vocab_slice_benchmark.run_vocab_slice_benchmark(
        data_dir=common.DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        max_keys=max_keys,
        data=text2sql_flags.data_config(),
        model=text2sql_flags.model_config(),
        training=text2sql_flags.training_config(paradigm='federated'),
        loop=common.loop_config_from_flags(),
        command=shlex.join(['python', 'apps/partial_models/bin/vocab_slice.py']
                           + sys.argv[1:]),
    )


if __name__ == '__main__':
  common.run(main)
