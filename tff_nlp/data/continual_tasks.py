"""Seeded task sequences for federated continual text classification.

FedWeIT / FedSeIT / SIT (`shared/docs/fedseit_spec.md` §1) train C clients,
each on a private sequence of T classification tasks, one task at a time, with
one classifier head per task (task-incremental learning). The tasks are cut
from one text-classification dataset (`text_classification.load_dataset`) as
the authors' `split_option=non_iid` generator does (spec §6), so that a run is
defined by the dataset and a handful of arguments, and the same arguments give
the same tasks, example for example.

The rules, in order (spec §6; "[code]" marks a rule taken from the authors'
`FedWeit/data/generator.py` where the spec is silent):

1. Label pool. The labels that have at least one test document, in sorted
   order [code: `labels = np.unique(y_test)`]. Every training label has test
   documents in R8, TMN, TREC6 and Subj; TREC50 has 50 training labels but
   only 42 in its test split, so its 8 untestable labels never form a task.
2. Shuffle the pool with `np.random.default_rng(seed).permutation`.
3. For task i = 0 .. num_tasks-1, `np.random.default_rng(seed + i).choice`
   draws `labels_per_task` distinct labels from the shuffled pool (default 4,
   or 2 for a dataset with 2 labels, e.g. Subj). A label may be drawn by
   several tasks. The default `num_tasks` is `num_clients * tasks_per_client`
   (15 for 3 x 5).
4. Training chunks. The training documents of a label, in file order, are cut
   into m contiguous disjoint chunks, m being the number of tasks that drew
   the label; the j-th task (by task index) that drew it gets chunk j. Every
   chunk but the last has floor(n / m) documents, the last takes the
   remainder [code: `split_instance_non_iid`]. So with a rare label (TREC50,
   spec §9.13) drawn by more tasks than it has documents, the early chunks are
   empty: the task keeps the label (its head has the output, its test set the
   documents) without a training document of it. Tasks that no client takes
   (num_tasks > num_clients * tasks_per_client) still consume their chunks,
   as in the code.
5. `max_train_per_task` (optional, for CPU runs) caps a task's chunk with a
   seeded stratified sample (see "Stratified samples") before step 6, so it
   bounds train + valid.
6. Validation. A stratified `valid_fraction` (default 1/8) of the task's
   chunk, class by class: a class with n >= 2 documents gives
   `min(n - 1, max(1, floor(n * valid_fraction + 0.5)))` of them (rounded
   half up, at least one, and at least one left for training); a class with
   a single document keeps it in training. Which documents is a seeded
   permutation. The code calls sklearn's `train_test_split(stratify=...)`,
   which takes ceil(N / 8) in all and fails on a class with one document;
   our per-class rule never fails and is written down, but it does not pick
   the same documents or always the same counts. A dev split (TMN's
   `dev.tsv`) is not used at all: neither trained on nor validated on, as
   the code reads only training and test files.
7. Test set. All test documents of the task's labels, in file order (the
   code orders them by class; the order does not matter since we always
   evaluate the whole set, spec §9.4). Tasks with the same label share test
   documents. `max_test_per_task` (optional) caps it with a seeded stratified
   sample.
8. Labels are renumbered 0..L-1 within the task in sorted label order:
   local id i is `Task.label_names[i]`.
9. Assignment. The tasks, sorted by name, are shuffled by client c with
   `np.random.default_rng(c * 1000 + seed + 5).permutation`; the client takes
   the first `tasks_per_client` tasks of its shuffled list that earlier
   clients have not taken, in that order, and that order is its task order
   (the code's `--exhaust-tasks`: no task is shared between clients). The
   code seeds Python's `random` with `cid * random_seed_task_alloc +
   num_pick_tasks`, with a separate allocation seed ({1, 2} in its scripts)
   and the tasks per client (5); we tie the allocation to `seed` so that one
   number defines the whole sequence.

The `shared_labels` construction (`construction='shared_labels'`; the rules
above are `'random'`, the authors' generator, kept as the control). With
`random`, a client's knowledge base at the start of a task holds the other
clients' task-adaptive weights of their previous task, trained on label sets
drawn independently of its own: foreign knowledge can only help by chance.
`shared_labels` builds sequences in which it can help, by relaying label
sets from client to client:

1'. Label sets. M = C + T - 1 distinct label sets S_0 .. S_{M-1}: the
   combinations of `labels_per_task` labels of the pool (sorted), in the
   order of `np.random.default_rng(seed).permutation`, the first M.
2'. Client c's task t (task index c * T + t) has the labels S_{c+t}. So for
   t >= 1, client c + 1 learned S_{c+t} one task earlier (its task t - 1),
   on other documents: the knowledge base client c receives at the start of
   task t (every other client's weights at the end of task t - 1) holds a
   foreign task of exactly its labels. Client C - 1 and every first task
   have no such partner; a client's T label sets are distinct.
3'. Steps 4-8 as above (a label's training documents are cut into one chunk
   per task that has it, so no two tasks share a training document); step
   9 is 2': no task is shared between clients.

It needs M distinct label sets (C(|pool|, labels_per_task) >= C + T - 1,
refused by name otherwise) and makes exactly C * T tasks (another
`num_tasks` is refused).

Stratified samples (steps 5 and 7; module `stratified`) of size k from N
documents of P present classes: every present class first gets one
document, and the other k - P are shared out in proportion to the classes'
remaining counts (n_c - 1) by the largest-remainder method (ties to the
lower label id), then each class's documents are a seeded random subset,
kept in file order. The caps must be at least `labels_per_task`.

Seeds. Every random draw uses numpy's `np.random.default_rng`; steps 5, 6
and 7 of task i use `default_rng([seed, i, 1])`, `([seed, i, 2])` and
`([seed, i, 3])`. This is not bit-identical to the code's Python `random`,
`np.random.seed` and sklearn draws: the same seed does not give the authors'
label sets. Task names are zero-padded ('trec6-t03'), so sorting them sorts
by task index; the code's 'trec6_10' sorts before 'trec6_2'.

Refusals (`errors.InputError`, naming the dataset, the task and its labels):
a task whose training chunk is empty, whose training set (after the
validation split) or test set has fewer than 2 classes (a one-class task
cannot be trained or scored as a classification task), whose validation or
test set is empty. Arguments are refused by name: non-positive counts, a
`labels_per_task` below 2 or above the pool size, `num_tasks` below
`num_clients * tasks_per_client`, `valid_fraction` outside (0, 1), a
negative seed, or a cap below `labels_per_task`. A dataset whose labels make
fewer distinct label sets than a client's tasks (a 2-label dataset: every
task is the same {a, b} task) is refused unless `allow_repeated_label_sets`.
"""

from collections.abc import Sequence
import dataclasses
import itertools
import math
import numbers
from typing import Any, Optional

import numpy as np

from tff_nlp import errors
from tff_nlp.data import stratified
from tff_nlp.data import text_classification

# How label sets are drawn and assigned (module docstring): the authors'
# generator, or label sets relayed from client to client.
CONSTRUCTIONS = ('random', 'shared_labels')
DEFAULT_LABELS_PER_TASK = 4
BINARY_LABELS_PER_TASK = 2
# Client c shuffles the sorted task list with seed
# c * CLIENT_SEED_STRIDE + seed + CLIENT_SEED_OFFSET.
CLIENT_SEED_STRIDE = 1000
CLIENT_SEED_OFFSET = 5
# The last element of the per-task seed `[seed, task index, purpose]`.
_TRAIN_CAP_PURPOSE = 1
_VALID_PURPOSE = 2
_TEST_CAP_PURPOSE = 3

Split = text_classification.Split


@dataclasses.dataclass(frozen=True)
class Task:
  """One classification task of a client's sequence.

  Attributes:
    name: '<dataset>-t<index>', e.g. 'trec6-t03'; the index is the task's
      generation index, zero-padded to at least 2 digits.
    dataset: The dataset's name, e.g. 'trec6'.
    label_names: The task's labels, sorted; local label id i is
      `label_names[i]`.
    train: Training examples (file order) with local label ids.
    valid: Validation examples (file order) with local label ids.
    test: Test examples (file order) with local label ids.
  """

  name: str
  dataset: str
  label_names: tuple[str, ...]
  train: Split
  valid: Split
  test: Split

  @property
  def num_classes(self) -> int:
    return len(self.label_names)


@dataclasses.dataclass(frozen=True)
class TaskSequences:
  """The task sequence of every client.

  Attributes:
    dataset: The dataset's name.
    clients: `clients[c][t]` is the t-th task of client c.
    config: The arguments of `build_task_sequences` after defaults were
      applied (plus 'dataset'), JSON-serialisable, for run configurations.
  """

  dataset: str
  clients: tuple[tuple[Task, ...], ...]
  config: dict[str, Any]

  @property
  def num_clients(self) -> int:
    return len(self.clients)

  @property
  def tasks_per_client(self) -> int:
    return len(self.clients[0]) if self.clients else 0


def _is_int(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_positive_int(name: str, value) -> None:
  if not _is_int(value) or value < 1:
    raise errors.InputError(
        f'{name} must be a positive integer, got {value!r}.')


def _check_task(
    dataset: str,
    name: str,
    label_names: tuple[str, ...],
    chunk_size: int,
    train_labels: np.ndarray,
    valid_labels: np.ndarray,
    test_labels: np.ndarray,
) -> None:
  """Refuses a task that cannot be trained, validated or scored.

  Raises:
    InputError: naming the dataset, the task and its labels.
  """
  what = f'Dataset {dataset!r}, task {name!r} (labels {list(label_names)})'
  fewer_tasks = ('use fewer tasks (num_tasks, num_clients, tasks_per_client) '
                 'or another seed')
  if chunk_size == 0:
    raise errors.InputError(
        f'{what}: empty training chunk; its labels\' training documents are '
        f'split over too many tasks; {fewer_tasks}.'
    )
  num_train_classes = len(np.unique(train_labels))
  if num_train_classes < 2:
    raise errors.InputError(
        f'{what}: one-class task, its training set (after the validation '
        f'split) has {num_train_classes} class(es) in {len(train_labels)} '
        f'documents; {fewer_tasks}.'
    )
  if not len(valid_labels):
    raise errors.InputError(
        f'{what}: empty validation set (no class has 2 training documents); '
        f'raise max_train_per_task or {fewer_tasks}.'
    )
  if not len(test_labels):
    raise errors.InputError(f'{what}: empty test set.')
  num_test_classes = len(np.unique(test_labels))
  if num_test_classes < 2:
    raise errors.InputError(
        f'{what}: one-class task, its test set has {num_test_classes} '
        f'class in {len(test_labels)} documents.'
    )


def _local_split(
    split: Split, indices: np.ndarray, to_local: np.ndarray
) -> Split:
  """The examples `indices` of `split`, relabelled by `to_local[label]`."""
  return Split(texts=tuple(split.texts[i] for i in indices),
               labels=to_local[split.labels[indices]].astype(np.int32))


def _assign_exhausting(tasks: list[Task], num_clients: int,
                       tasks_per_client: int, seed: int
                       ) -> list[tuple[Task, ...]]:
  """Step 9: each client's first `tasks_per_client` untaken tasks in its
  seeded order of the tasks sorted by name."""
  by_name = sorted(tasks, key=lambda task: task.name)
  taken = set()
  clients = []
  for c in range(num_clients):
    order = np.random.default_rng(
        c * CLIENT_SEED_STRIDE + seed + CLIENT_SEED_OFFSET
    ).permutation(len(by_name))
    mine = [by_name[j] for j in order if by_name[j].name not in taken]
    mine = mine[:tasks_per_client]
    taken.update(task.name for task in mine)
    clients.append(tuple(mine))
  return clients


def _check_task_counts(
    data: text_classification.TextClassificationData, pool: np.ndarray, *,
    num_clients, tasks_per_client, labels_per_task, num_tasks,
) -> tuple[int, int]:
  """Checks `build_task_sequences`' counts: `(labels_per_task, num_tasks)`."""
  for name, value in (('num_clients', num_clients),
                      ('tasks_per_client', tasks_per_client)):
    _check_positive_int(name, value)
  if labels_per_task is None:
    labels_per_task = (BINARY_LABELS_PER_TASK if data.num_classes == 2
                       else DEFAULT_LABELS_PER_TASK)
  if not _is_int(labels_per_task) or labels_per_task < 2:
    raise errors.InputError(
        f'labels_per_task must be an integer >= 2 (a task needs two '
        f'classes), got {labels_per_task!r}.'
    )
  if labels_per_task > len(pool):
    raise errors.InputError(
        f'labels_per_task={labels_per_task} exceeds the {len(pool)} labels '
        f'of dataset {data.name!r} that have test documents '
        f'({data.num_classes} training labels).'
    )
  minimum_tasks = num_clients * tasks_per_client
  if num_tasks is None:
    num_tasks = minimum_tasks
  _check_positive_int('num_tasks', num_tasks)
  if num_tasks < minimum_tasks:
    raise errors.InputError(
        f'num_tasks={num_tasks} is less than num_clients * tasks_per_client '
        f'= {num_clients} * {tasks_per_client} = {minimum_tasks}; no task is '
        'shared between clients.'
    )
  return labels_per_task, num_tasks


def _check_sampling(*, valid_fraction, seed, labels_per_task,
                    max_train_per_task, max_test_per_task) -> None:
  """Checks the validation share, the seed and the caps of the splits."""
  if (not isinstance(valid_fraction, numbers.Real)
      or isinstance(valid_fraction, bool)
      or not 0 < valid_fraction < 1):
    raise errors.InputError(
        f'valid_fraction must be in (0, 1), got {valid_fraction!r}.'
    )
  if not _is_int(seed) or seed < 0:
    raise errors.InputError(
        f'seed must be a non-negative integer, got {seed!r}.'
    )
  for name, cap in (('max_train_per_task', max_train_per_task),
                    ('max_test_per_task', max_test_per_task)):
    if cap is not None and (not _is_int(cap) or cap < labels_per_task):
      raise errors.InputError(
          f'{name} must be None or an integer >= labels_per_task '
          f'({labels_per_task}), so that every class keeps a document; got '
          f'{cap!r}.'
      )


def _check_label_sets(
    data: text_classification.TextClassificationData, pool: np.ndarray, *,
    construction: str, num_clients: int, tasks_per_client: int,
    labels_per_task: int, allow_repeated_label_sets: bool,
) -> None:
  """Checks that the dataset has the label sets `construction` needs."""
  if construction not in CONSTRUCTIONS:
    raise errors.InputError(
        f'Unknown task construction {construction!r}; expected one of '
        f'{list(CONSTRUCTIONS)}.')
  distinct_sets = math.comb(len(pool), labels_per_task)
  relayed_sets = num_clients + tasks_per_client - 1
  if construction == 'shared_labels' and distinct_sets < relayed_sets:
    raise errors.InputError(
        f'construction=shared_labels needs num_clients + tasks_per_client - '
        f'1 = {relayed_sets} distinct label sets, but dataset {data.name!r} '
        f'has {len(pool)} labels with test documents, which make '
        f'{distinct_sets} of labels_per_task={labels_per_task}. Use fewer '
        'clients or tasks, or fewer labels per task.')
  if distinct_sets < tasks_per_client and not allow_repeated_label_sets:
    raise errors.InputError(
        f'Dataset {data.name!r} has {len(pool)} labels with test documents '
        f'({", ".join(data.label_names[k] for k in pool)}), which make '
        f'{distinct_sets} distinct label set(s) of labels_per_task='
        f'{labels_per_task}: fewer than the tasks_per_client='
        f'{tasks_per_client} tasks of a client, so every client would repeat '
        'a task and its forgetting and backward transfer would mean nothing. '
        'Use a dataset with more labels or fewer tasks per client, or allow '
        'repeated label sets (allow_repeated_label_sets, '
        '--allow_repeated_label_sets: the paper\'s Subj setting).')


def _draw_label_sets(
    data: text_classification.TextClassificationData, pool: np.ndarray, *,
    construction: str, num_clients: int, tasks_per_client: int,
    labels_per_task: int, num_tasks: int, seed: int,
) -> list[list[int]]:
  """Steps 1-3 (or 1'-2'): every task's labels, sorted by name."""
  task_labels = []
  if construction == 'shared_labels':
    minimum_tasks = num_clients * tasks_per_client
    if num_tasks != minimum_tasks:
      raise errors.InputError(
          f'num_tasks={num_tasks}: construction=shared_labels makes exactly '
          f'num_clients * tasks_per_client = {minimum_tasks} tasks; leave '
          'num_tasks unset.')
    combinations = list(itertools.combinations(pool.tolist(),
                                               labels_per_task))
    order = np.random.default_rng(seed).permutation(len(combinations))
    relayed = [combinations[j]
               for j in order[:num_clients + tasks_per_client - 1]]
    for c in range(num_clients):
      for t in range(tasks_per_client):
        task_labels.append(sorted(relayed[c + t],
                                  key=lambda k: data.label_names[k]))
  else:
    shuffled = np.random.default_rng(seed).permutation(pool)
    for i in range(num_tasks):
      drawn = np.random.default_rng(seed + i).choice(
          shuffled, size=labels_per_task, replace=False)
      task_labels.append(sorted((int(k) for k in drawn),
                                key=lambda k: data.label_names[k]))
  return task_labels


def _training_chunks(
    data: text_classification.TextClassificationData,
    task_labels: Sequence[Sequence[int]],
) -> list[list[np.ndarray]]:
  """Step 4: each label's training documents, one chunk per task (indices)."""
  tasks_of_label: dict[int, list[int]] = {}
  for i, labels in enumerate(task_labels):
    for k in labels:
      tasks_of_label.setdefault(k, []).append(i)
  chunks = [[] for _ in range(len(task_labels))]
  for k, tasks in tasks_of_label.items():
    members = np.flatnonzero(data.train.labels == k)
    size = len(members) // len(tasks)
    for j, i in enumerate(tasks):
      end = size * (j + 1) if j < len(tasks) - 1 else len(members)
      chunks[i].append(members[size * j:end])
  return chunks


def _build_tasks(
    data: text_classification.TextClassificationData,
    task_labels: Sequence[Sequence[int]],
    chunks: Sequence[Sequence[np.ndarray]], *,
    valid_fraction: float, seed: int,
    max_train_per_task: Optional[int], max_test_per_task: Optional[int],
) -> list[Task]:
  """Steps 5-8: the splits of every task, checked, relabelled locally."""
  width = max(2, len(str(len(task_labels) - 1)))
  tasks = []
  for i, labels in enumerate(task_labels):
    name = f'{data.name}-t{i:0{width}d}'
    label_names = tuple(data.label_names[k] for k in labels)
    chunk = np.sort(np.concatenate(chunks[i]))
    if max_train_per_task is not None:
      chunk = stratified.stratified_sample(
          chunk, data.train.labels, max_train_per_task,
          np.random.default_rng([seed, i, _TRAIN_CAP_PURPOSE]))
    train, valid = stratified.split_valid(
        chunk, data.train.labels, valid_fraction,
        np.random.default_rng([seed, i, _VALID_PURPOSE]))
    test = np.flatnonzero(np.isin(data.test.labels, labels))
    if max_test_per_task is not None:
      test = stratified.stratified_sample(
          test, data.test.labels, max_test_per_task,
          np.random.default_rng([seed, i, _TEST_CAP_PURPOSE]))
    _check_task(data.name, name, label_names, len(chunk),
                data.train.labels[train], data.train.labels[valid],
                data.test.labels[test])
    to_local = np.full(data.num_classes, -1, np.int64)
    to_local[labels] = np.arange(len(labels))
    tasks.append(Task(
        name=name,
        dataset=data.name,
        label_names=label_names,
        train=_local_split(data.train, train, to_local),
        valid=_local_split(data.train, valid, to_local),
        test=_local_split(data.test, test, to_local),
    ))
  return tasks


def build_task_sequences(
    data: text_classification.TextClassificationData,
    *,
    num_clients: int = 3,
    tasks_per_client: int = 5,
    labels_per_task: Optional[int] = None,
    num_tasks: Optional[int] = None,
    valid_fraction: float = 1 / 8,
    seed: int = 42,
    max_train_per_task: Optional[int] = None,
    max_test_per_task: Optional[int] = None,
    allow_repeated_label_sets: bool = False,
    construction: str = 'random',
) -> TaskSequences:
  """Cuts a dataset into per-client task sequences (see the module docstring).

  Args:
    data: The dataset, e.g. from `text_classification.load_dataset`.
    num_clients: C, the number of clients.
    tasks_per_client: T, the length of every client's sequence.
    labels_per_task: Labels of every task; default 4, or 2 if the dataset has
      2 labels. At least 2 and at most the number of labels with test
      documents.
    num_tasks: Tasks generated; default and minimum C * T.
    valid_fraction: Share of each class of a task's training chunk held out
      for validation, in (0, 1).
    seed: Non-negative seed of every random draw.
    max_train_per_task: If set, a task's training chunk (train + valid) is cut
      to this many documents by a seeded stratified sample.
    max_test_per_task: If set, a task's test set is cut to this many
      documents by a seeded stratified sample.
    allow_repeated_label_sets: Accept a dataset whose labels make fewer
      distinct label sets of `labels_per_task` than `tasks_per_client`, so
      that a client meets the same labels again (the tasks then differ only
      in their documents, and forgetting and backward transfer measure a
      repeated task): the paper's Subj setting, 2 labels and 2 per task.
      False refuses such a dataset.
    construction: 'random' (the authors' generator) or 'shared_labels'
      (label sets relayed from client c + 1 to client c one task later;
      see the module docstring).

  Returns:
    A `TaskSequences` with C sequences of T distinct tasks.

  Raises:
    InputError: If an argument is out of range (the message names it) or a
      task cannot be used (the message names the dataset, task and labels).
  """
  pool = np.unique(data.test.labels).astype(np.int64)
  labels_per_task, num_tasks = _check_task_counts(
      data, pool, num_clients=num_clients, tasks_per_client=tasks_per_client,
      labels_per_task=labels_per_task, num_tasks=num_tasks)
  _check_sampling(valid_fraction=valid_fraction, seed=seed,
                  labels_per_task=labels_per_task,
                  max_train_per_task=max_train_per_task,
                  max_test_per_task=max_test_per_task)
  _check_label_sets(data, pool, construction=construction,
                    num_clients=num_clients,
                    tasks_per_client=tasks_per_client,
                    labels_per_task=labels_per_task,
                    allow_repeated_label_sets=allow_repeated_label_sets)
  seed, num_tasks = int(seed), int(num_tasks)
  valid_fraction = float(valid_fraction)

  task_labels = _draw_label_sets(
      data, pool, construction=construction, num_clients=num_clients,
      tasks_per_client=tasks_per_client, labels_per_task=labels_per_task,
      num_tasks=num_tasks, seed=seed)
  tasks = _build_tasks(
      data, task_labels, _training_chunks(data, task_labels),
      valid_fraction=valid_fraction, seed=seed,
      max_train_per_task=max_train_per_task,
      max_test_per_task=max_test_per_task)

  # Step 9 (or 2'): assignment to clients.
  if construction == 'shared_labels':
    clients = [tuple(tasks[c * tasks_per_client:(c + 1) * tasks_per_client])
               for c in range(num_clients)]
  else:
    clients = _assign_exhausting(tasks, num_clients, tasks_per_client, seed)

  config = {
      'dataset': data.name,
      'num_clients': int(num_clients),
      'tasks_per_client': int(tasks_per_client),
      'labels_per_task': int(labels_per_task),
      'num_tasks': num_tasks,
      'valid_fraction': valid_fraction,
      'seed': seed,
      'max_train_per_task': (None if max_train_per_task is None
                             else int(max_train_per_task)),
      'max_test_per_task': (None if max_test_per_task is None
                            else int(max_test_per_task)),
  }
  if construction != 'random':  # The control keeps its configuration.
    config['construction'] = construction
  return TaskSequences(dataset=data.name, clients=tuple(clients),
                       config=config)


def load_task_sequences(
    dataset: str, data_dir: Optional[str] = None, **kwargs
) -> TaskSequences:
  """Loads a dataset and builds its task sequences.

  Args:
    dataset: The dataset folder, e.g. 'trec6' (see
      `text_classification.load_dataset`).
    data_dir: The `shared/data` folder; see `data_root.find_data_dir`.
    **kwargs: Keyword arguments of `build_task_sequences`.

  Returns:
    The `TaskSequences` of the dataset.
  """
  return build_task_sequences(
      text_classification.load_dataset(dataset, data_dir), **kwargs)


def summary_markdown(seqs: TaskSequences) -> str:
  """A Markdown table of every client's tasks, in sequence order.

  Columns: client, position (0-based), task name, labels (local id order),
  and the numbers of training, validation and test documents.
  """
  lines = ['| client | position | task | labels | #train | #valid | #test |',
           '|---:|---:|---|---|---:|---:|---:|']
  for c, tasks in enumerate(seqs.clients):
    for t, task in enumerate(tasks):
      labels = ', '.join(task.label_names).replace('|', r'\|')
      lines.append(f'| {c} | {t} | {task.name} | {labels} | '
                   f'{len(task.train)} | {len(task.valid)} | '
                   f'{len(task.test)} |')
  return '\n'.join(lines) + '\n'
