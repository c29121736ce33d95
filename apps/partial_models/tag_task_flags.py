"""The tag task's flags and the scaling benchmarks' defaults for them.

`apps/scaling/bin/client_scaling.py` and `apps/scaling/bin/memory_growth.py` run on the
same task as `apps.partial_models.bin.train_sparse_tags` (`apps.partial_models.tag_experiment`);
importing this module defines its flags (`apps.partial_models.sparse_tags_flags`,
the same definitions) and sets the benchmarks' defaults on them: every
TREC-50 question a client, M = 32 rows, SGD at 20 on batches of 1.
"""

from absl import flags

from apps.partial_models import sparse_tags_flags
from apps.common import config_flags
from apps.partial_models import tag_experiment as sparse_tags

DATA_DIR = config_flags.define('data_dir', None, str)

flags.set_default(sparse_tags_flags.DATA['partition'], sparse_tags.DOCUMENT)
flags.set_default(sparse_tags_flags.TRAINING['max_keys'], 32)
flags.set_default(sparse_tags_flags.TRAINING['client_learning_rate'], 20.0)
flags.set_default(sparse_tags_flags.TRAINING['batch_size'], 1)

# The settings a benchmark's report records.
_RECORDED = (
    (sparse_tags_flags.DATA, ('dataset', 'partition', 'num_clients',
                              'max_words', 'max_tags')),
    (sparse_tags_flags.TRAINING, ('max_keys', 'client_learning_rate',
                                  'batch_size')),
)


def data_config() -> sparse_tags.TagDataConfig:
  return sparse_tags_flags.DATA.build()


def training_config() -> sparse_tags.TagTrainingConfig:
  return sparse_tags_flags.TRAINING.build()


def config_record() -> dict:
  """The task's settings for a benchmark's report."""
  return {field: config[field].value
          for config, fields in _RECORDED for field in fields}
