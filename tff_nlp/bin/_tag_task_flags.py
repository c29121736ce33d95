"""The tag task's flags and the scaling benchmarks' defaults for them.

`tff_nlp/bin/client_scaling.py` and `tff_nlp/bin/memory_growth.py` run on the
same task as `tff_nlp.bin.train_sparse_tags` (`tff_nlp.experiments.sparse_tags`);
importing this module defines its flags (`tff_nlp.bin._sparse_tags_flags`,
the same definitions) and sets the benchmarks' defaults on them: every
TREC-50 question a client, M = 32 rows, SGD at 20 on batches of 1.
"""

from absl import flags

from tff_nlp.bin import _sparse_tags_flags as sparse_tags_flags
from tff_nlp.bin import config_flags
from tff_nlp.experiments import sparse_tags

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
