"""The tag task's flags, shared by the scaling benchmarks.

`tff_nlp/bin/client_scaling.py` and `tff_nlp/bin/memory_growth.py` run on the
same task (`tff_nlp.experiments.sparse_tags`; by default every TREC-50
question is a client); importing this module defines its flags.
"""

from absl import flags

from tff_nlp.experiments import sparse_tags

DATA_DIR = flags.DEFINE_string(
    'data_dir', None, 'The shared/data folder (default: ../shared/data).')
_DATASET = flags.DEFINE_string(
    'dataset', 'trec50', 'A folder of shared/data/text_classification.')
_PARTITION = flags.DEFINE_enum(
    'partition', sparse_tags.DOCUMENT, list(sparse_tags.PARTITIONS),
    'document: every training document is a client; label_skew: '
    '--num_clients Dirichlet shards.')
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', 50, 'Clients of the label-skew split.', lower_bound=1)
_MAX_WORDS = flags.DEFINE_integer(
    'max_words', 10000, 'In-vocabulary words.', lower_bound=1)
_MAX_TAGS = flags.DEFINE_integer(
    'max_tags', 100, 'In-vocabulary tags.', lower_bound=1)
_MAX_KEYS = flags.DEFINE_integer(
    'max_keys', 32, 'M: rows a sparse client selects.', lower_bound=1)
_CLIENT_LEARNING_RATE = flags.DEFINE_float(
    'client_learning_rate', 20.0, 'Client SGD step size.', lower_bound=0.0)
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', 1, 'Client batch size.', lower_bound=1)


def data_config() -> sparse_tags.TagDataConfig:
  return sparse_tags.TagDataConfig(
      dataset=_DATASET.value, partition=_PARTITION.value,
      num_clients=_NUM_CLIENTS.value, max_words=_MAX_WORDS.value,
      max_tags=_MAX_TAGS.value)


def training_config() -> sparse_tags.TagTrainingConfig:
  return sparse_tags.TagTrainingConfig(
      max_keys=_MAX_KEYS.value,
      client_learning_rate=_CLIENT_LEARNING_RATE.value,
      batch_size=_BATCH_SIZE.value)


def config_record() -> dict:
  """The task's settings for a benchmark's report."""
  return dict(
      dataset=_DATASET.value, partition=_PARTITION.value,
      num_clients=_NUM_CLIENTS.value, max_words=_MAX_WORDS.value,
      max_tags=_MAX_TAGS.value, max_keys=_MAX_KEYS.value,
      client_learning_rate=_CLIENT_LEARNING_RATE.value,
      batch_size=_BATCH_SIZE.value)
