r"""Runs the client-weighting demo, `experiments.weighting_demo`.

  python -m tff_nlp.bin.weighting_demo \
      --flagfile=tff_nlp/bin/flags/weighting_demo.cpu.flags

Presets in `tff_nlp/bin/flags/`: `weighting_demo.smoke.flags` (seconds),
`weighting_demo.cpu.flags` (a few minutes on 2 CPU cores; no make target
runs it, the demo of the Makefile is text-to-SQL's),
`weighting_demo.paper.flags` (the Lorar paper's 8 clients and 60 rounds).
Flags given after `--flagfile` override the preset. Running the same command
again after an interruption resumes from the last checkpoint.

`--max_weight_share`, `--robust_aggregation` and differential privacy
(`--dp_noise_multiplier` or `--target_epsilon`, with `--weightings=uniform`;
ε recorded per round and in `results.json`) change the aggregation
(`tff_nlp.algorithms.aggregation`).
"""

import os

from absl import app
from absl import flags

from tff_nlp import experiments
from tff_nlp.bin import _aggregation_flags as aggregation_flags
from tff_nlp.bin import common
from tff_nlp.bin import config_flags
from tff_nlp.runtime import flags as runtime_flags
from tff_nlp.tasks import text_classification

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(aggregation_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/weighting_demo')
flags.set_default(common.ROUNDS, 20)

_WEIGHTINGS = flags.DEFINE_list(
    'weightings', list(experiments.WEIGHTINGS),
    f'Client weightings to compare, in table order; from '
    f'{list(experiments.WEIGHTINGS)}.')

_CLIENT_DATA = config_flags.define_config(
    text_classification.ClientDataConfig, specs={
        'num_clients': config_flags.Spec(
            'Number of clients.', lower_bound=1),
        'vocab_size': config_flags.Spec(
            'Token ids, padding and OOV included.', lower_bound=3),
        'max_length': config_flags.Spec(
            'Tokens kept per text.', lower_bound=1),
    })
_TRAINING = config_flags.define_config(
    experiments.WeightingTrainingConfig, specs={
        'algorithm': config_flags.Spec(
            'Federated algorithm.',
            enum_values=['fedavg', 'fedopt', 'fedprox']),
        'local_epochs': config_flags.Spec(
            'Passes of each client over its data per round.', lower_bound=1),
        'client_optimizer': config_flags.Spec(
            'Client optimizer.', enum_values=['sgd', 'adam']),
    })


@flags.validator('weightings',
                 f'--weightings must name distinct weightings from '
                 f'{list(experiments.WEIGHTINGS)}.')
def _check_weightings(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(experiments.WEIGHTINGS))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  aggregation = aggregation_flags.aggregation_config()
  with runtime_flags.context_from_flags():
    experiments.run_weighting_demo(
        data_dir=common.DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        client_data=_CLIENT_DATA.build(),
        training=_TRAINING.build(),
        loop=common.loop_config_from_flags(),
        weightings=_WEIGHTINGS.value,
        aggregation=aggregation,
        restart=common.RESTART.value,
    )
  return os.path.join(common.OUTPUT_DIR.value,
                      experiments.weighting_demo.TABLE_FILE)


if __name__ == '__main__':
  common.run(main)
