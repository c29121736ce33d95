"""Runs the client-weighting demo (`make demo`): `experiments.weighting_demo`.

  python -m tff_nlp.bin.weighting_demo \
      --flagfile=tff_nlp/bin/flags/weighting_demo.cpu.flags

Presets in `tff_nlp/bin/flags/`: `weighting_demo.smoke.flags` (seconds),
`weighting_demo.cpu.flags` (a few minutes on 2 CPU cores; `make demo`),
`weighting_demo.paper.flags` (the Lorar paper's 8 clients and 60 rounds).
Flags given after `--flagfile` override the preset. Running the same command
again after an interruption resumes from the last checkpoint.
"""

from absl import app
from absl import flags

from tff_nlp import experiments
from tff_nlp.bin import common
from tff_nlp.runtime import flags as runtime_flags
from tff_nlp.tasks import text_classification

flags.adopt_module_key_flags(common)
flags.set_default(common.OUTPUT_DIR, 'runs/weighting_demo')
flags.set_default(common.ROUNDS, 20)

_DATA_DIR = flags.DEFINE_string(
    'data_dir', None,
    'The shared/data folder. Unset: $TFF_NLP_DATA_DIR, else '
    '<repository>/../shared/data.')
_WEIGHTINGS = flags.DEFINE_list(
    'weightings', list(experiments.WEIGHTINGS),
    f'Client weightings to compare, in table order; from '
    f'{list(experiments.WEIGHTINGS)}.')

_DATASET = flags.DEFINE_string(
    'dataset', 'r8', 'A folder of shared/data/text_classification.')
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', 8, 'Number of clients.', lower_bound=1)
_DIRICHLET_ALPHA = flags.DEFINE_float(
    'dirichlet_alpha', 0.3,
    'Label-skew concentration of the client split; smaller is more skewed.',
    lower_bound=0.0)
_MIN_TRAIN_EXAMPLES = flags.DEFINE_integer(
    'min_train_examples', 50, 'Minimum training examples of every client.',
    lower_bound=0)
_VOCAB_SIZE = flags.DEFINE_integer(
    'vocab_size', 10000, 'Token ids, padding and OOV included.',
    lower_bound=3)
_MAX_LENGTH = flags.DEFINE_integer(
    'max_length', 128, 'Tokens kept per text.', lower_bound=1)

_ALGORITHM = flags.DEFINE_enum(
    'algorithm', 'fedavg', ['fedavg', 'fedopt', 'fedprox'],
    'Federated algorithm.')
_LOCAL_EPOCHS = flags.DEFINE_integer(
    'local_epochs', 2, 'Passes of each client over its data per round.',
    lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', 16, 'Client batch size.', lower_bound=1)
_CLIENT_OPTIMIZER = flags.DEFINE_enum(
    'client_optimizer', 'sgd', ['sgd', 'adam'], 'Client optimizer.')
_CLIENT_LEARNING_RATE = flags.DEFINE_float(
    'client_learning_rate', 1.0, 'Client learning rate.', lower_bound=0.0)
_PROXIMAL_STRENGTH = flags.DEFINE_float(
    'proximal_strength', 0.0, "FedProx's mu (only with --algorithm=fedprox).",
    lower_bound=0.0)
_EMBEDDING_DIM = flags.DEFINE_integer(
    'embedding_dim', 64, 'Word-embedding size of the classifier.',
    lower_bound=1)


@flags.validator('weightings',
                 f'--weightings must name distinct weightings from '
                 f'{list(experiments.WEIGHTINGS)}.')
def _check_weightings(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(experiments.WEIGHTINGS))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with runtime_flags.context_from_flags():
    experiments.run_weighting_demo(
        data_dir=_DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        client_data=text_classification.ClientDataConfig(
            dataset=_DATASET.value,
            num_clients=_NUM_CLIENTS.value,
            dirichlet_alpha=_DIRICHLET_ALPHA.value,
            min_train_examples=_MIN_TRAIN_EXAMPLES.value,
            vocab_size=_VOCAB_SIZE.value,
            max_length=_MAX_LENGTH.value,
        ),
        training=experiments.WeightingTrainingConfig(
            algorithm=_ALGORITHM.value,
            local_epochs=_LOCAL_EPOCHS.value,
            batch_size=_BATCH_SIZE.value,
            client_optimizer=_CLIENT_OPTIMIZER.value,
            client_learning_rate=_CLIENT_LEARNING_RATE.value,
            proximal_strength=_PROXIMAL_STRENGTH.value,
            embedding_dim=_EMBEDDING_DIM.value,
        ),
        loop=common.loop_config_from_flags(),
        weightings=_WEIGHTINGS.value,
    )


if __name__ == '__main__':
  common.run(main)
