r"""Federated continual text classification: FedWeIT, FedSeIT, SIT, baselines.

  python -m apps.fcl.bin.train_fcl \
      --flagfile=apps/fcl/flags/train_fcl.smoke.flags

Builds C clients × T tasks from each dataset of `--datasets` (folders of
`<data_dir>/text_classification/`, `label<TAB>text` files), runs each
method of `--methods` (local, fedavg, fedprox, fedweit, fedseit,
fedseit_sit, and the ablation fedseit_no_foreign) and writes the accuracy
and macro-F1 tables (methods × datasets, with the paper's average gain),
forgetting, communication and the accuracy matrices as heatmaps to
`<output_dir>/results.md`; see `apps.fcl.experiment`.
`--max_weight_share` caps any client's share of a round's weight
(`tff_nlp.aggregators.weight_cap`). Each run is cached under its
configuration and checkpointed after every task, so running the command
again continues an interrupted benchmark. Presets in `apps/fcl/flags/`:
`train_fcl.smoke.flags` (a minute; checks the pipeline),
`train_fcl.cpu.flags` (`make bench-fcl`) and `train_fcl.paper.flags` (the
authors' settings; for GPUs).

`--report_only` trains nothing: it writes the report again from finished
runs, read from `<output_dir>/runs` (e.g. restored from `records/fcl/`
by `apps.common.bin.run_archive`) or from the report already in `<output_dir>`
(`apps.fcl.finished`), and names any run found in neither:

  python -m apps.common.bin.run_archive --action=restore \
      --archive_dir=records/fcl/main --runs_dir=runs/fcl_cpu5/runs
  python -m apps.fcl.bin.train_fcl \
      --flagfile=apps/fcl/flags/train_fcl.cpu.flags --report_only
"""

import os
import shlex
import sys

from absl import app
from absl import flags

from apps.common import presets
from apps.common import binary as common
from apps.common import config_flags
from tff_nlp.data import continual_tasks
from tff_nlp.data import word_vectors
from apps.fcl import experiment as fcl
from apps.fcl import report as fcl_report
from tff_nlp.runtime import flags as runtime_flags

# Flags of `common` that a task-sequence run does not read: refused by
# `main`, and left out of --helpshort (only the others are key flags here).
_NOT_USED = {
    'rounds': 'use --rounds_per_task.',
    'clients_per_round': 'every client takes part in every round.',
    'checkpoint_every': 'runs are checkpointed after every task.',
    'eval_every': 'clients are evaluated after every task.',
    'evaluate_initial': 'clients are evaluated after every task, not before '
                        'the first.',
    'progress': 'progress is logged once per task.',
}
for _flag in flags.FLAGS.get_key_flags_for_module(common):
  if _flag.name not in _NOT_USED:
    flags.declare_key_flag(_flag.name)
flags.set_default(common.OUTPUT_DIR, 'runs/fcl')

_DATASETS = flags.DEFINE_list(
    'datasets', ['r8', 'tmn', 'trec6'],
    'Datasets: folders of <data_dir>/text_classification/.')
_SEEDS = flags.DEFINE_list(
    'seeds', [],
    'Replicates: seed s trains with seed s on the tasks drawn with '
    '--task_seed + s (the methods of a seed share its tasks); the report '
    'gives means over seeds with 95% intervals and paired differences. '
    'Empty: one run with --seed and --task_seed.')
_METHODS = flags.DEFINE_list(
    'methods', list(fcl.METHODS), f'Methods, of {list(fcl.METHODS)}.')
_REPORT_ONLY = flags.DEFINE_bool(
    'report_only', False,
    'Train nothing: write the report from finished runs, read from '
    '<output_dir>/runs (e.g. restored by apps.common.bin.run_archive) or from '
    'the results.json already in <output_dir> when its settings match; a run '
    'found in neither is an error.')


def _zero_is_none(value: int):
  return value or None


# 0 (flag) is None (field): every document.
_DATA = config_flags.define_config(
    fcl.DataConfig, names={'seed': 'task_seed'},
    defaults={'max_train_per_task': 0, 'max_test_per_task': 0},
    parsers={'max_train_per_task': _zero_is_none,
             'max_test_per_task': _zero_is_none},
    specs={
        'num_clients': config_flags.Spec('Clients, C.', lower_bound=1),
        'tasks_per_client': config_flags.Spec(
            'Tasks per client, T.', lower_bound=1),
        'max_train_per_task': config_flags.Spec(
            'Training (+ validation) documents per task, stratified; 0: '
            'all.', lower_bound=0),
        'max_test_per_task': config_flags.Spec(
            'Test documents per task, stratified; 0: all.', lower_bound=0),
        'vocabulary_size': config_flags.Spec(
            'Word ids, padding and OOV included.', lower_bound=3),
        'max_length': config_flags.Spec(
            'Tokens per document (longer ones are cut, counted).',
            lower_bound=5),
        'task_seed': config_flags.Spec('Seed of the task generation.'),
        'construction': config_flags.Spec(
            'random: the authors\' task generator (label sets drawn per '
            'task); shared_labels: client c+1 learns client c\'s next label '
            'set one task earlier, on other documents, so foreign knowledge '
            'can transfer.',
            enum_values=list(continual_tasks.CONSTRUCTIONS)),
        'allow_repeated_label_sets': config_flags.Spec(
            'Accept a dataset whose labels cannot give a client distinct '
            'tasks (a 2-label dataset: every task is the same pair; the '
            'paper\'s Subj). Without it such a dataset is refused.'),
    })
# The training seed is --seed (common); FedProx's mu is defined below, with
# this binary's help.
_TRAINING = config_flags.define_config(
    fcl.TrainingConfig, exclude=('seed', 'proximal_strength'), specs={
        'rounds_per_task': config_flags.Spec(
            'Rounds per task, R.', lower_bound=1),
        'local_epochs': config_flags.Spec(
            'Local epochs per round.', lower_bound=1),
        'learning_rate': config_flags.Spec(
            'Adam learning rate.', lower_bound=0.0),
        'num_filters': config_flags.Spec(
            'Filters per width (3, 4, 5).', lower_bound=1),
        'sparsity': config_flags.Spec(
            'λ1: L1 on the A\'s, pruning threshold.', lower_bound=0.0),
        'drift': config_flags.Spec('λ2: the drift term.', lower_bound=0.0),
        'weight_decay': config_flags.Spec('wd.', lower_bound=0.0),
        'sit_top_k': config_flags.Spec('SIT: K.', lower_bound=1),
        'sit_threshold': config_flags.Spec('SIT: τ.'),
        'sit_clusters': config_flags.Spec(
            'SIT: k-means clusters of a task representation.',
            lower_bound=1),
        'word_vectors': config_flags.Spec(
            'Pre-trained word vectors, frozen from the start as in the '
            'papers: skipgram (pre-trained by the library on the public text '
            'of <data_dir>, --embedding_dim values, cached in '
            '<output_dir>/word_vectors), or a file of <data_dir>/word_vectors/ '
            '(e.g. '
            f'{word_vectors.GLOVE_50D}) or a path, GloVe text format, '
            '--embedding_dim values per word. Empty: learn the embedding on '
            'the first task.'),
        'kb_include_own': config_flags.Spec(
            'Put a client\'s own A\'s in its knowledge base (the authors\' '
            'code).'),
        'max_weight_share': config_flags.Spec(
            'If set, no client\'s share of a round\'s weight (its '
            'training-set size) exceeds this (in (0, 1]; the excess goes to '
            'the others in proportion to their sizes); e.g. 2/clients. Unset: '
            'no cap. local ignores it.', lower_bound=0.0, upper_bound=1.0),
    })

_PROXIMAL_STRENGTH = config_flags.define(
    'proximal_strength', fcl.TrainingConfig.proximal_strength, float,
    spec=config_flags.Spec(
        "FedProx's mu, the weight of the proximal term of the fedprox method "
        '(--methods); the other methods ignore it.', lower_bound=0.0))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  for name, instead in _NOT_USED.items():
    if flags.FLAGS[name].present:
      raise app.UsageError(f'--{name} does not apply to train_fcl; {instead}')
  fcl.check_methods(_METHODS.value)
  try:
    seeds = [int(s) for s in _SEEDS.value]
  except ValueError:
    raise app.UsageError(f'--seeds: {_SEEDS.value}: expected integers.'
                         ) from None
  if any(s < 0 for s in seeds):
    raise app.UsageError(f'--seeds: {seeds}: expected seeds >= 0.')
  documents = (f'{_DATA["max_train_per_task"].value} training documents'
               if _DATA['max_train_per_task'].value
               else 'every training document')
  presets.warn_without_preset(
      'train_fcl',
      f'{len(_METHODS.value)} methods ({",".join(_METHODS.value)}) on '
      f'{",".join(_DATASETS.value)} with {len(seeds) or 1} seed(s), each '
      f'{_DATA["num_clients"].value} clients x '
      f'{_DATA["tasks_per_client"].value} tasks of '
      f'{documents}, {_TRAINING["rounds_per_task"].value} rounds per task')
  data = _DATA.build()
  try:
    training = _TRAINING.build(seed=common.SEED.value,
                               proximal_strength=_PROXIMAL_STRENGTH.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  # A fresh worker per dataset and seed (`run_fcl`'s `context_fn`).
  fcl.run_fcl(
      datasets=_DATASETS.value,
      methods=_METHODS.value,
      data=data,
      training=training,
      output_dir=common.OUTPUT_DIR.value,
      data_dir=common.DATA_DIR.value,
      seeds=seeds,
      command=shlex.join(['python', '-m', 'apps.fcl.bin.train_fcl']
                         + sys.argv[1:]),
      context_fn=runtime_flags.context_from_flags,
      restart=common.RESTART.value,
      report_only=_REPORT_ONLY.value,
  )
  return os.path.join(common.OUTPUT_DIR.value, fcl_report.TABLE_FILE)


if __name__ == '__main__':
  common.run(main)
