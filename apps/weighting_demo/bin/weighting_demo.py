r"""Runs the client-weighting demo, `apps.weighting_demo.experiment`.

  python -m apps.weighting_demo.bin.weighting_demo \
      --flagfile=apps/weighting_demo/flags/weighting_demo.cpu.flags

Presets in `apps/weighting_demo/flags/`: `weighting_demo.smoke.flags` (seconds),
`weighting_demo.cpu.flags` (a few minutes on 2 CPU cores; no make target
runs it, the demo of the Makefile is text-to-SQL's),
`weighting_demo.paper.flags` (the Lorar paper's 8 clients and 60 rounds).
Flags given after `--flagfile` override the preset. Running the same command
again after an interruption resumes from the last checkpoint.

`--max_weight_share`, `--robust_aggregation` and differential privacy
(`--dp_noise_multiplier` or `--target_epsilon`, with `--weightings=uniform`;
ε recorded per round and in `results.json`) change the aggregation
(`tff_nlp.aggregators.factory`).
"""

import os

from absl import app
from absl import flags

from apps.weighting_demo import experiment
from apps.common import aggregation_flags
from apps.common import binary as common
from apps.common import config_flags
from tff_nlp.runtime import flags as runtime_flags
from apps.common import text_classification_task as text_classification

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(aggregation_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/weighting_demo')
flags.set_default(common.ROUNDS, 20)

_WEIGHTINGS = flags.DEFINE_list(
    'weightings', list(experiment.WEIGHTINGS),
    f'Client weightings to compare, in table order; from '
    f'{list(experiment.WEIGHTINGS)}.')

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
    experiment.WeightingTrainingConfig, specs={
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
                 f'{list(experiment.WEIGHTINGS)}.')
def _check_weightings(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(experiment.WEIGHTINGS))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  aggregation = aggregation_flags.aggregation_config()
  with runtime_flags.context_from_flags():
    experiment.run_weighting_demo(
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
                      experiment.TABLE_FILE)


if __name__ == '__main__':
  common.run(main)
