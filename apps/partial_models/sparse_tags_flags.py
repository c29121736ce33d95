"""Flags of the tag task: `experiments.sparse_tags`' data and training.

Defined once, from `TagDataConfig` and `TagTrainingConfig`
(`config_flags`), for `train_sparse_tags` and the scaling benchmarks
(`client_scaling`, `memory_growth`, which set their own defaults on the
same flags). Not a binary.
"""

from absl import flags

from apps.common import config_flags
from apps.partial_models import tag_experiment as sparse_tags

DATA = config_flags.define_config(
    sparse_tags.TagDataConfig, specs={
        'partition': config_flags.Spec(
            'label_skew: Dirichlet label skew into --num_clients; document: '
            'every training document is a client.',
            enum_values=list(sparse_tags.PARTITIONS)),
        'num_clients': config_flags.Spec(
            'Clients of the label-skew split.', lower_bound=1),
        'max_words': config_flags.Spec(
            'In-vocabulary words.', lower_bound=1),
        'max_tags': config_flags.Spec('In-vocabulary tags.', lower_bound=1),
        'num_oov_word_buckets': config_flags.Spec(
            'Hashed rows of unknown words.', lower_bound=1),
        'num_oov_tag_buckets': config_flags.Spec(
            'Hashed columns of unknown tags.', lower_bound=1),
    })
TRAINING = config_flags.define_config(
    sparse_tags.TagTrainingConfig, specs={
        'max_keys': config_flags.Spec(
            'M: keys a sparse client selects (rows, or blocks of rows).',
            lower_bound=1),
        'block_size': config_flags.Spec(
            'B: rows per key of a sparse client (1: a key is a row; B > 1: '
            'M blocks of B rows, fewer federated_select calls).',
            lower_bound=1),
        'client_epochs': config_flags.Spec(
            'Passes over a client\'s data per round (the dense baseline '
            'supports 1).', lower_bound=1),
        'k_values': config_flags.Spec('The k of precision@k and recall@k.'),
    })


@flags.validator('k_values', '--k_values must be positive integers.')
def _check_k_values(value):
  return bool(value) and all(v.isdigit() and int(v) > 0 for v in value)
