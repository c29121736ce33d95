"""Runs several methods of the Lorar paper's Table 2 and reports them together.

  python -m tff_nlp.bin.text2sql_benchmark \
      --flagfile=tff_nlp/bin/flags/train_text2sql.smoke.flags \
      --methods=fedavg/num_examples,fedavg/lorar

Without `--methods` it runs every method of
`experiments.text2sql_benchmark.default_methods()`. Each method runs in its
own directory keyed by its configuration, so running the command again
continues an interrupted benchmark; see `tff_nlp.experiments.
text2sql_benchmark`. Data, model and local-training flags are those of
`train_text2sql`.
"""

import shlex
import sys

from absl import app
from absl import flags

from tff_nlp.bin import _text2sql_flags as text2sql_flags
from tff_nlp.bin import common
from tff_nlp.experiments import text2sql_benchmark
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(text2sql_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/text2sql_benchmark')
flags.set_default(common.ROUNDS, 60)
flags.set_default(common.EVAL_EVERY, 5)

_METHODS = flags.DEFINE_list(
    'methods',
    [text2sql_benchmark.method_slug(m).replace('-', '/', 1)
     for m in text2sql_benchmark.default_methods()],
    'Methods to run: finetune, centralized, <algorithm>/<weighting>.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  methods = [text2sql_benchmark.parse_method(m) for m in _METHODS.value]
  with runtime_flags.context_from_flags():
    text2sql_benchmark.run_benchmark(
        data_dir=text2sql_flags.DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        methods=methods,
        data=text2sql_flags.data_config(),
        model=text2sql_flags.model_config(),
        training=text2sql_flags.training_config(paradigm='federated'),
        loop=common.loop_config_from_flags(),
        command=shlex.join(['python', '-m', 'tff_nlp.bin.text2sql_benchmark']
                           + sys.argv[1:]),
    )


if __name__ == '__main__':
  common.run(main)
