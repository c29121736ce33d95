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

from tff_nlp.bin import common
from tff_nlp.experiments import sparse_tags
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(common)
flags.set_default(common.OUTPUT_DIR, 'runs/sparse_tags')

_DATA_DIR = flags.DEFINE_string(
    'data_dir', None,
    'The shared/data folder. Unset: $TFF_NLP_DATA_DIR, else '
    '<repository>/../shared/data.')
_METHODS = flags.DEFINE_list(
    'methods', list(sparse_tags.METHODS),
    f'Methods to compare, in table order; from {list(sparse_tags.METHODS)}.')

_DATASET = flags.DEFINE_string(
    'dataset', 'trec50', 'A folder of shared/data/text_classification.')
_PARTITION = flags.DEFINE_enum(
    'partition', sparse_tags.LABEL_SKEW, list(sparse_tags.PARTITIONS),
    'label_skew: Dirichlet label skew into --num_clients; document: every '
    'training document is a client.')
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', 50, 'Clients of the label-skew split.', lower_bound=1)
_DIRICHLET_ALPHA = flags.DEFINE_float(
    'dirichlet_alpha', 0.5, 'Label-skew concentration; smaller is more '
    'skewed.', lower_bound=0.0)
_MIN_TRAIN_EXAMPLES = flags.DEFINE_integer(
    'min_train_examples', 10, 'Minimum examples of a label-skew client.',
    lower_bound=0)
_MAX_WORDS = flags.DEFINE_integer(
    'max_words', 10000, 'In-vocabulary words.', lower_bound=1)
_MAX_TAGS = flags.DEFINE_integer(
    'max_tags', 100, 'In-vocabulary tags.', lower_bound=1)
_OOV_WORD_BUCKETS = flags.DEFINE_integer(
    'num_oov_word_buckets', 1, 'Hashed rows of unknown words.', lower_bound=1)
_OOV_TAG_BUCKETS = flags.DEFINE_integer(
    'num_oov_tag_buckets', 1, 'Hashed columns of unknown tags.',
    lower_bound=1)

_MAX_KEYS = flags.DEFINE_integer(
    'max_keys', 1000, 'M: rows a sparse client selects.', lower_bound=1)
_CLIENT_LEARNING_RATE = flags.DEFINE_float(
    'client_learning_rate', 1.0, 'Client SGD step size.', lower_bound=0.0)
_CLIENT_EPOCHS = flags.DEFINE_integer(
    'client_epochs', 1, 'Passes over a client\'s data per round (the dense '
    'baseline supports 1).', lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', 16, 'Client batch size.', lower_bound=1)
_K_VALUES = flags.DEFINE_list(
    'k_values', ['1', '3'], 'The k of precision@k and recall@k.')


@flags.validator('methods', f'--methods must name distinct methods from '
                 f'{list(sparse_tags.METHODS)}.')
def _check_methods(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(sparse_tags.METHODS))


@flags.validator('k_values', '--k_values must be positive integers.')
def _check_k_values(value):
  return bool(value) and all(v.isdigit() and int(v) > 0 for v in value)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with runtime_flags.context_from_flags():
    sparse_tags.run_sparse_tags(
        data_dir=_DATA_DIR.value,
        output_dir=common.OUTPUT_DIR.value,
        data=sparse_tags.TagDataConfig(
            dataset=_DATASET.value,
            partition=_PARTITION.value,
            num_clients=_NUM_CLIENTS.value,
            dirichlet_alpha=_DIRICHLET_ALPHA.value,
            min_train_examples=_MIN_TRAIN_EXAMPLES.value,
            max_words=_MAX_WORDS.value,
            max_tags=_MAX_TAGS.value,
            num_oov_word_buckets=_OOV_WORD_BUCKETS.value,
            num_oov_tag_buckets=_OOV_TAG_BUCKETS.value,
        ),
        training=sparse_tags.TagTrainingConfig(
            max_keys=_MAX_KEYS.value,
            client_learning_rate=_CLIENT_LEARNING_RATE.value,
            client_epochs=_CLIENT_EPOCHS.value,
            batch_size=_BATCH_SIZE.value,
            k_values=tuple(int(k) for k in _K_VALUES.value),
        ),
        loop=common.loop_config_from_flags(),
        methods=_METHODS.value,
    )


if __name__ == '__main__':
  common.run(main)
