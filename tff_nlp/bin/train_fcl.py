"""Federated continual text classification: FedWeIT, FedSeIT, SIT, baselines.

  python -m tff_nlp.bin.train_fcl \
      --flagfile=tff_nlp/bin/flags/train_fcl.smoke.flags

Builds C clients × T tasks from each dataset of `--datasets` (folders of
`<data_dir>/text_classification/`, `label<TAB>text` files), runs each
method of `--methods` (local, fedavg, fedprox, fedweit, fedseit,
fedseit_sit, and the ablation fedseit_no_foreign) and writes the accuracy
and macro-F1 tables (methods × datasets, with the paper's average gain),
forgetting, communication and the accuracy matrices as heatmaps to
`<output_dir>/results.md`; see `tff_nlp.experiments.fcl`. Each run is
cached under its configuration and checkpointed after every task, so running
the command again continues an interrupted benchmark. Presets in
`tff_nlp/bin/flags/`: `train_fcl.smoke.flags` (a minute; checks the
pipeline), `train_fcl.cpu.flags` (`make bench-fcl`) and
`train_fcl.paper.flags` (the authors' settings; for GPUs).
"""

import shlex
import sys

from absl import app
from absl import flags

from tff_nlp.bin import common
from tff_nlp.experiments import fcl
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(common)
flags.set_default(common.OUTPUT_DIR, 'runs/fcl')

_DATA_DIR = flags.DEFINE_string(
    'data_dir', None,
    'The shared/data folder (holding text_classification/). Unset: '
    '$TFF_NLP_DATA_DIR, else <repository>/../shared/data.')
_DATASETS = flags.DEFINE_list(
    'datasets', ['r8', 'tmn', 'trec6'],
    'Datasets: folders of <data_dir>/text_classification/.')
_ALLOW_REPEATED_LABEL_SETS = flags.DEFINE_bool(
    'allow_repeated_label_sets', False,
    'Accept a dataset whose labels cannot give a client distinct tasks (a '
    '2-label dataset: every task is the same pair; the paper\'s Subj). '
    'Without it such a dataset is refused.')
_METHODS = flags.DEFINE_list(
    'methods', list(fcl.METHODS), f'Methods, of {list(fcl.METHODS)}.')
_NUM_CLIENTS = flags.DEFINE_integer('num_clients', 3, 'Clients, C.',
                                    lower_bound=1)
_TASKS_PER_CLIENT = flags.DEFINE_integer(
    'tasks_per_client', 5, 'Tasks per client, T.', lower_bound=1)
_MAX_TRAIN = flags.DEFINE_integer(
    'max_train_per_task', 0,
    'Training (+ validation) documents per task, stratified; 0: all.',
    lower_bound=0)
_MAX_TEST = flags.DEFINE_integer(
    'max_test_per_task', 0, 'Test documents per task, stratified; 0: all.',
    lower_bound=0)
_VOCABULARY_SIZE = flags.DEFINE_integer(
    'vocabulary_size', 20000, 'Word ids, padding and OOV included.',
    lower_bound=3)
_MAX_LENGTH = flags.DEFINE_integer(
    'max_length', 64, 'Tokens per document (longer ones are cut, counted).',
    lower_bound=5)
_TASK_SEED = flags.DEFINE_integer('task_seed', 42,
                                  'Seed of the task generation.')
_ROUNDS_PER_TASK = flags.DEFINE_integer('rounds_per_task', 3,
                                        'Rounds per task, R.', lower_bound=1)
_LOCAL_EPOCHS = flags.DEFINE_integer('local_epochs', 1,
                                     'Local epochs per round.', lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 64, 'Batch size.',
                                   lower_bound=1)
_LEARNING_RATE = flags.DEFINE_float('learning_rate', 1e-3,
                                    'Adam learning rate.', lower_bound=0.0)
_EMBEDDING_DIM = flags.DEFINE_integer('embedding_dim', 100,
                                      'Word embedding size D.', lower_bound=1)
_NUM_FILTERS = flags.DEFINE_integer('num_filters', 128,
                                    'Filters per width (3, 4, 5).',
                                    lower_bound=1)
_DROPOUT = flags.DEFINE_float('dropout', 0.3, 'Dropout rate.',
                              lower_bound=0.0, upper_bound=1.0)
_SPARSITY = flags.DEFINE_float('sparsity', 1e-3,
                               'λ1: L1 on the A\'s, pruning threshold.',
                               lower_bound=0.0)
_DRIFT = flags.DEFINE_float('drift', 1.0, 'λ2: the drift term.',
                            lower_bound=0.0)
_WEIGHT_DECAY = flags.DEFINE_float('weight_decay', 1e-4, 'wd.',
                                   lower_bound=0.0)
_PROXIMAL_STRENGTH = flags.DEFINE_float('proximal_strength', 0.01,
                                        'FedProx μ.', lower_bound=0.0)
_SIT_TOP_K = flags.DEFINE_integer('sit_top_k', 3, 'SIT: K.', lower_bound=1)
_SIT_THRESHOLD = flags.DEFINE_float('sit_threshold', 0.7, 'SIT: τ.')
_SIT_CLUSTERS = flags.DEFINE_integer(
    'sit_clusters', 200, 'SIT: k-means clusters of a task representation.',
    lower_bound=1)
_KB_INCLUDE_OWN = flags.DEFINE_bool(
    'kb_include_own', False,
    'Put a client\'s own A\'s in its knowledge base (the authors\' code).')

# Flags of `common` that a task-sequence run does not read.
_NOT_USED = {
    'rounds': 'use --rounds_per_task.',
    'clients_per_round': 'every client takes part in every round.',
    'checkpoint_every': 'runs are checkpointed after every task.',
    'eval_every': 'clients are evaluated after every task.',
    'progress': 'progress is logged once per task.',
}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  for name, instead in _NOT_USED.items():
    if flags.FLAGS[name].present:
      raise app.UsageError(f'--{name} does not apply to train_fcl; {instead}')
  fcl.check_methods(_METHODS.value)
  data = fcl.DataConfig(
      num_clients=_NUM_CLIENTS.value,
      tasks_per_client=_TASKS_PER_CLIENT.value,
      max_train_per_task=_MAX_TRAIN.value or None,
      max_test_per_task=_MAX_TEST.value or None,
      vocabulary_size=_VOCABULARY_SIZE.value, max_length=_MAX_LENGTH.value,
      seed=_TASK_SEED.value,
      allow_repeated_label_sets=_ALLOW_REPEATED_LABEL_SETS.value)
  training = fcl.TrainingConfig(
      rounds_per_task=_ROUNDS_PER_TASK.value,
      local_epochs=_LOCAL_EPOCHS.value, batch_size=_BATCH_SIZE.value,
      learning_rate=_LEARNING_RATE.value, embedding_dim=_EMBEDDING_DIM.value,
      num_filters=_NUM_FILTERS.value, dropout=_DROPOUT.value,
      sparsity=_SPARSITY.value, drift=_DRIFT.value,
      weight_decay=_WEIGHT_DECAY.value,
      proximal_strength=_PROXIMAL_STRENGTH.value,
      sit_top_k=_SIT_TOP_K.value, sit_threshold=_SIT_THRESHOLD.value,
      sit_clusters=_SIT_CLUSTERS.value, kb_include_own=_KB_INCLUDE_OWN.value,
      seed=common.SEED.value)
  with runtime_flags.context_from_flags():
    fcl.run_fcl(
        datasets=_DATASETS.value,
        methods=_METHODS.value,
        data=data,
        training=training,
        output_dir=common.OUTPUT_DIR.value,
        data_dir=_DATA_DIR.value,
        command=shlex.join(['python', '-m', 'tff_nlp.bin.train_fcl']
                           + sys.argv[1:]),
    )


if __name__ == '__main__':
  common.run(main)
