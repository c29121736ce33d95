"""Tests of the seeded task sequences for federated continual learning.

Synthetic datasets (written to a temporary `<root>/text_classification/toy/`)
make every count derivable by hand: when `labels_per_task` equals the number
of labels, every task draws all of them, so the chunks, validation and test
sets follow from the documented rules alone. The real datasets of
`shared/data` check the invariants at full size.
"""

import collections
import itertools
import json
import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import data
from tff_nlp import errors
from tff_nlp.data import continual_tasks


def _make_dataset(root, train, test, dev=None, name='toy'):
  """Writes `<root>/text_classification/<name>/*.tsv` from (label, text)s."""
  folder = os.path.join(root, 'text_classification', name)
  os.makedirs(folder)
  splits = {'train': train, 'test': test}
  if dev is not None:
    splits['dev'] = dev
  for split, examples in splits.items():
    with open(os.path.join(folder, split + '.tsv'), 'w') as f:
      f.writelines(f'{label}\t{text}\n' for label, text in examples)
  return root


def _docs(counts, prefix=''):
  """Texts '<prefix><label><i>' for counts {label: n}, labels interleaved."""
  docs = []
  for i in range(max(counts.values())):
    docs += [(label, f'{prefix}{label}{i}') for label, n in counts.items()
             if i < n]
  return docs


def _label_of(text, prefix=''):
  """The label of a `_docs` text, with or without `prefix`."""
  return text.removeprefix(prefix).rstrip('0123456789')


def _class_counts(task, split):
  """{label name: number of documents} of `task.<split>`."""
  labels = getattr(task, split).labels
  return {name: int(np.sum(labels == i))
          for i, name in enumerate(task.label_names)}


def _fingerprint(seqs):
  return [[(t.name, t.label_names, t.train.texts, t.train.labels.tolist(),
            t.valid.texts, t.valid.labels.tolist(), t.test.texts,
            t.test.labels.tolist()) for t in tasks] for tasks in seqs.clients]


class SyntheticExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _build(self, train, test, dev=None, **kwargs):
    # The rules are checked on small label pools, where tasks repeat label
    # sets; test_too_few_label_sets_for_a_clients_tasks_is_refused checks
    # the refusal.
    kwargs.setdefault('allow_repeated_label_sets', True)
    root = _make_dataset(self.create_tempdir().full_path, train, test, dev)
    return continual_tasks.load_task_sequences('toy', root, **kwargs)

  def test_chunks_validation_and_test_by_hand(self):
    # 2 clients x 2 tasks = 4 tasks, each drawing all 3 labels. Chunks
    # (floor(n / 4), the last takes the rest):
    #   a: 10 docs -> a0-a1 | a2-a3 | a4-a5 | a6-a9
    #   b:  7 docs -> b0    | b1    | b2    | b3-b6
    #   c:  5 docs -> c0    | c1    | c2    | c3-c4
    seqs = self._build(_docs({'a': 10, 'b': 7, 'c': 5}),
                       _docs({'a': 3, 'b': 2, 'c': 1}, prefix='test-'),
                       num_clients=2, tasks_per_client=2, labels_per_task=3)
    self.assertEqual((seqs.num_clients, seqs.tasks_per_client), (2, 2))
    tasks = {t.name: t for c in seqs.clients for t in c}
    self.assertEqual(sorted(tasks), ['toy-t00', 'toy-t01', 'toy-t02',
                                     'toy-t03'])
    expected_chunks = {
        'toy-t00': {'a0', 'a1', 'b0', 'c0'},
        'toy-t01': {'a2', 'a3', 'b1', 'c1'},
        'toy-t02': {'a4', 'a5', 'b2', 'c2'},
        'toy-t03': {'a6', 'a7', 'a8', 'a9', 'b3', 'b4', 'b5', 'b6', 'c3',
                    'c4'},
    }
    all_test = tuple(text for _, text in
                     _docs({'a': 3, 'b': 2, 'c': 1}, prefix='test-'))
    for name, task in tasks.items():
      self.assertEqual(task.label_names, ('a', 'b', 'c'))
      self.assertEqual(task.num_classes, 3)
      self.assertEqual(set(task.train.texts + task.valid.texts),
                       expected_chunks[name])
      self.assertEmpty(set(task.train.texts) & set(task.valid.texts))
      # Test: every test document of the labels, in file order.
      self.assertEqual(task.test.texts, all_test)
    # Validation at 1/8, per class min(n-1, max(1, floor(n/8 + 1/2))):
    # t00: a 2 -> 1, b 1 -> 0 (single stays in train), c 1 -> 0.
    self.assertEqual(_class_counts(tasks['toy-t00'], 'valid'),
                     {'a': 1, 'b': 0, 'c': 0})
    self.assertEqual(_class_counts(tasks['toy-t00'], 'train'),
                     {'a': 1, 'b': 1, 'c': 1})
    # t03: a 4 -> floor(1.0) = 1, b 4 -> 1, c 2 -> max(1, 0) = 1.
    self.assertEqual(_class_counts(tasks['toy-t03'], 'valid'),
                     {'a': 1, 'b': 1, 'c': 1})
    self.assertEqual(_class_counts(tasks['toy-t03'], 'train'),
                     {'a': 3, 'b': 3, 'c': 1})
    self.assertEqual(_class_counts(tasks['toy-t03'], 'test'),
                     {'a': 3, 'b': 2, 'c': 1})

  @parameterized.named_parameters(
      # 17/8 = 2.125 -> 2; 2/8 -> 0, raised to 1; 1 doc stays in train;
      # 9/8 = 1.125 -> 1.
      ('eighth', {'a': 17, 'b': 2, 'c': 1, 'd': 9}, 1 / 8,
       {'a': 2, 'b': 1, 'c': 0, 'd': 1}),
      # 10/4 = 2.5 rounds half up to 3; 3/4 = 0.75 -> 1.
      ('half_up', {'a': 10, 'b': 3}, 0.25, {'a': 3, 'b': 1}),
      # 4 * 0.9 = 3.6 -> 4, capped at n - 1 = 3; 2 * 0.9 -> 2, capped at 1.
      ('keeps_one_for_training', {'a': 4, 'b': 2}, 0.9, {'a': 3, 'b': 1}),
  )
  def test_validation_counts_per_class(self, counts, fraction, expected):
    seqs = self._build(_docs(counts), [(k, f'test {k}') for k in counts],
                       num_clients=1, tasks_per_client=1,
                       labels_per_task=len(counts), valid_fraction=fraction)
    (task,) = seqs.clients[0]
    self.assertEqual(_class_counts(task, 'valid'), expected)
    self.assertEqual(_class_counts(task, 'train'),
                     {k: counts[k] - expected[k] for k in counts})

  def test_caps_are_seeded_stratified_samples(self):
    # Test cap 5 of a 6 / b 3 / c 1: one each, then 2 shared by n - 1 =
    # (5, 2, 0): exact 1.43, 0.57, 0 -> floors (1, 0, 0), the last one to the
    # largest remainder (b) -> a 2, b 2, c 1.
    # Train cap 9 of a 12 / b 4 / c 2: one each, then 6 shared by (11, 3, 1):
    # exact 4.4, 1.2, 0.4 -> floors (4, 1, 0), the remainder tie 0.4 goes to
    # the lower label (a) -> a 6, b 2, c 1. Validation of that (1/8):
    # a 6 -> 1, b 2 -> 1, c 1 -> 0.
    train = _docs({'a': 12, 'b': 4, 'c': 2})
    test = _docs({'a': 6, 'b': 3, 'c': 1}, prefix='test-')
    kwargs = dict(num_clients=1, tasks_per_client=1, labels_per_task=3,
                  max_train_per_task=9, max_test_per_task=5)
    seqs = self._build(train, test, **kwargs)
    (task,) = seqs.clients[0]
    self.assertEqual(_class_counts(task, 'test'), {'a': 2, 'b': 2, 'c': 1})
    self.assertEqual(_class_counts(task, 'valid'), {'a': 1, 'b': 1, 'c': 0})
    self.assertEqual(_class_counts(task, 'train'), {'a': 5, 'b': 1, 'c': 1})
    # A subset of the documents, kept in file order.
    all_test = [text for _, text in test]
    self.assertEqual(list(task.test.texts),
                     [t for t in all_test if t in task.test.texts])
    for split in (task.train, task.valid, task.test):
      for text, label in zip(split.texts, split.labels):
        self.assertEqual(task.label_names[label], _label_of(text, 'test-'))
    # Seeded: the same arguments give the same sample.
    again = self._build(train, test, **kwargs)
    self.assertEqual(_fingerprint(again), _fingerprint(seqs))

  def test_labels_renumbered_in_sorted_order(self):
    seqs = self._build(_docs({'zeta': 3, 'alpha': 3, 'mid': 3}),
                       _docs({'zeta': 1, 'mid': 1, 'alpha': 1}),
                       num_clients=1, tasks_per_client=1, labels_per_task=3)
    (task,) = seqs.clients[0]
    self.assertEqual(task.label_names, ('alpha', 'mid', 'zeta'))
    # Test file order zeta, mid, alpha -> local ids 2, 1, 0.
    self.assertEqual(task.test.texts, ('zeta0', 'mid0', 'alpha0'))
    self.assertEqual(task.test.labels.tolist(), [2, 1, 0])
    self.assertEqual(task.test.labels.dtype, np.int32)
    for split in (task.train, task.valid):
      self.assertEqual([task.label_names[i] for i in split.labels],
                       [_label_of(t) for t in split.texts])

  def test_dev_split_is_not_used(self):
    seqs = self._build(_docs({'a': 8, 'b': 8}), _docs({'a': 2, 'b': 2}),
                       dev=_docs({'a': 4, 'b': 4}, prefix='dev-'),
                       num_clients=2, tasks_per_client=1)
    self.assertEqual(seqs.config['labels_per_task'], 2)  # Binary default.
    for tasks in seqs.clients:
      for task in tasks:
        for split in (task.train, task.valid, task.test):
          self.assertFalse([t for t in split.texts if t.startswith('dev-')])

  @parameterized.named_parameters(
      # C(2, 2) = 1 label set for 2 tasks; C(3, 2) = 3 for 4.
      ('two_labels', {'a': 8, 'b': 8}, 2, 2, 1),
      ('three_labels', {'a': 8, 'b': 8, 'c': 8}, 4, 2, 3),
  )
  def test_too_few_label_sets_for_a_clients_tasks_is_refused(
      self, counts, tasks_per_client, labels_per_task, distinct):
    train, test = _docs(counts), _docs({k: 2 for k in counts})
    with self.assertRaisesRegex(
        errors.InputError,
        rf"Dataset 'toy' has {len(counts)} labels with test documents "
        rf"\({', '.join(sorted(counts))}\), which make {distinct} distinct "
        rf'label set\(s\) of labels_per_task={labels_per_task}: fewer than '
        rf'the tasks_per_client={tasks_per_client} tasks'):
      self._build(train, test, num_clients=1,
                  tasks_per_client=tasks_per_client,
                  labels_per_task=labels_per_task,
                  allow_repeated_label_sets=False)
    # Allowed, the tasks repeat label sets but not documents.
    seqs = self._build(train, test, num_clients=1,
                       tasks_per_client=tasks_per_client,
                       labels_per_task=labels_per_task,
                       allow_repeated_label_sets=True)
    (tasks,) = seqs.clients
    self.assertLen({t.label_names for t in tasks}, min(distinct,
                                                      tasks_per_client))
    # Enough label sets: C(3, 2) = 3 for 3 tasks.
    if len(counts) == 3:
      self._build(train, test, num_clients=1, tasks_per_client=3,
                  labels_per_task=2, allow_repeated_label_sets=False)

  def test_labels_without_test_documents_are_never_drawn(self):
    # d has training but no test documents, so the pool is (a, b, c).
    train = _docs({'a': 9, 'b': 9, 'c': 9, 'd': 9})
    test = _docs({'a': 1, 'b': 1, 'c': 1})
    seqs = self._build(train, test, num_clients=2, tasks_per_client=2,
                       labels_per_task=3)
    for tasks in seqs.clients:
      for task in tasks:
        self.assertEqual(task.label_names, ('a', 'b', 'c'))
    with self.assertRaisesRegex(
        ValueError, r"labels_per_task=4 exceeds the 3 labels of dataset "
        r"'toy' that have test documents \(4 training labels\)"):
      self._build(train, test, num_clients=1, tasks_per_client=1,
                  labels_per_task=4)

  def test_summary_markdown_and_config(self):
    # One task: a 8 -> valid 1, b 3 -> valid max(1, 0) = 1.
    seqs = self._build(_docs({'a': 8, 'b': 3}), _docs({'a': 2, 'b': 1}),
                       num_clients=1, tasks_per_client=1)
    self.assertEqual(
        continual_tasks.summary_markdown(seqs),
        '| client | position | task | labels | #train | #valid | #test |\n'
        '|---:|---:|---|---|---:|---:|---:|\n'
        '| 0 | 0 | toy-t00 | a, b | 9 | 2 | 3 |\n')
    self.assertEqual(seqs.config, {
        'dataset': 'toy', 'num_clients': 1, 'tasks_per_client': 1,
        'labels_per_task': 2, 'num_tasks': 1, 'valid_fraction': 0.125,
        'seed': 42, 'max_train_per_task': None, 'max_test_per_task': None,
    })
    self.assertEqual(json.loads(json.dumps(seqs.config)), seqs.config)

  @parameterized.named_parameters(
      # 2 tasks share a (1 doc) and b (1 doc): floor(1/2) = 0, so t00 gets
      # nothing and t01 gets both.
      ('empty_chunk', {'a': 1, 'b': 1}, {}, "'toy-t00'",
       'empty training chunk'),
      # a (1 doc) and b (5 docs) over 2 tasks: t00 gets b0-b1 only; b's 2
      # docs split 1 train / 1 valid, so train has one class.
      ('one_class_train', {'a': 1, 'b': 5}, {}, "'toy-t00'",
       'one-class task, its training set'),
      # Capped at 2 documents, each class keeps 1, and a single document
      # stays in training: nothing left to validate on.
      ('empty_valid', {'a': 5, 'b': 5}, {'max_train_per_task': 2,
                                         'tasks_per_client': 1},
       "'toy-t00'", 'empty validation set'),
  )
  def test_refuses_unusable_task(self, counts, kwargs, task, expected):
    args = dict(num_clients=1, tasks_per_client=2)
    args.update(kwargs)
    with self.assertRaises(ValueError) as cm:
      self._build(_docs(counts), _docs({'a': 1, 'b': 1}), **args)
    message = str(cm.exception)
    self.assertIsInstance(cm.exception, errors.InputError)
    self.assertIn(f"Dataset 'toy', task {task} (labels ['a', 'b'])", message)
    self.assertIn(expected, message)

  @parameterized.named_parameters(
      ('empty_test', [0, 1], [1], [], 'empty test set'),
      ('one_class_test', [0, 1], [1], [1, 1], 'one-class task, its test set'),
  )
  def test_refuses_unusable_test_set(self, train, valid, test, expected):
    # Unreachable through build_task_sequences (every drawn label has test
    # documents), so the check itself is tested.
    with self.assertRaisesRegex(
        ValueError,
        rf"Dataset 'toy', task 'toy-t03' \(labels \['a', 'b'\]\): {expected}"):
      continual_tasks._check_task('toy', 'toy-t03', ('a', 'b'), 3,
                                  np.array(train), np.array(valid),
                                  np.array(test))

  @parameterized.named_parameters(
      ('no_clients', {'num_clients': 0}, 'num_clients must be a positive'),
      ('float_clients', {'num_clients': 2.0}, 'num_clients must be a pos'),
      ('negative_tasks', {'tasks_per_client': -1},
       'tasks_per_client must be a positive'),
      ('too_few_tasks', {'num_tasks': 3},
       r'num_tasks=3 is less than num_clients \* tasks_per_client = 2 \* 2'),
      ('zero_tasks', {'num_tasks': 0}, 'num_tasks must be a positive'),
      ('one_label', {'labels_per_task': 1},
       'labels_per_task must be an integer >= 2'),
      ('too_many_labels', {'labels_per_task': 4},
       'labels_per_task=4 exceeds the 3 labels'),
      ('zero_fraction', {'valid_fraction': 0},
       r'valid_fraction must be in \(0, 1\), got 0'),
      ('whole_fraction', {'valid_fraction': 1.0}, 'valid_fraction must be'),
      ('negative_seed', {'seed': -1}, 'seed must be a non-negative integer'),
      ('small_train_cap', {'max_train_per_task': 2},
       r'max_train_per_task must be None or an integer >= labels_per_task '
       r'\(3\)'),
      ('small_test_cap', {'max_test_per_task': 0}, 'max_test_per_task must'),
  )
  def test_refuses_bad_argument(self, kwargs, expected):
    args = dict(num_clients=2, tasks_per_client=2, labels_per_task=3)
    args.update(kwargs)
    with self.assertRaisesRegex(ValueError, expected):
      self._build(_docs({'a': 9, 'b': 9, 'c': 9}), _docs({'a': 1, 'b': 1,
                                                          'c': 1}), **args)


_REAL = {}


def _real(name):
  """Loads a real dataset once for the whole test file."""
  if name not in _REAL:
    _REAL[name] = data.load_dataset(name, data.find_data_dir())
  return _REAL[name]


class RealDataExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('trec6', 'trec6', 4, 6),
      ('subj', 'subj', 2, 2),
      ('r8', 'r8', 4, 8),
      ('tmn', 'tmn', 4, 7),
      # 50 training labels, 8 of them without test documents.
      ('trec50', 'trec50', 4, 42),
  )
  def test_default_sequences(self, name, labels_per_task, pool_size):
    dataset = _real(name)
    # Subj's two labels make one label set: every task repeats it.
    seqs = continual_tasks.build_task_sequences(
        dataset, allow_repeated_label_sets=labels_per_task == 2)
    self.assertEqual((seqs.dataset, seqs.num_clients, seqs.tasks_per_client),
                     (name, 3, 5))
    self.assertEqual(seqs.config['num_tasks'], 15)
    tasks = [t for c in seqs.clients for t in c]
    self.assertEqual(sorted(t.name for t in tasks),
                     [f'{name}-t{i:02d}' for i in range(15)])
    pool = {dataset.label_names[k] for k in np.unique(dataset.test.labels)}
    self.assertLen(pool, pool_size)

    drawn = collections.Counter()  # label -> tasks drawing it
    chunk_texts = collections.defaultdict(collections.Counter)
    for task in tasks:
      self.assertEqual(task.num_classes, labels_per_task)
      self.assertEqual(list(task.label_names), sorted(set(task.label_names)))
      self.assertContainsSubset(task.label_names, pool)
      drawn.update(task.label_names)
      for split in (task.train, task.valid):
        for text, label in zip(split.texts, split.labels):
          chunk_texts[task.label_names[label]][text] += 1
      # Test: every test document of the task's labels, in file order.
      ids = [dataset.label_names.index(n) for n in task.label_names]
      where = np.isin(dataset.test.labels, ids)
      self.assertEqual(task.test.texts,
                       tuple(np.array(dataset.test.texts, object)[where]))
      self.assertEqual(
          [task.label_names[i] for i in task.test.labels],
          [dataset.label_names[k] for k in dataset.test.labels[where]])
      # Validation per class: min(n-1, max(1, floor(n/8 + 1/2))), 0 if n < 2.
      valid, train = _class_counts(task, 'valid'), _class_counts(task, 'train')
      for label in task.label_names:
        n = valid[label] + train[label]
        want = 0 if n < 2 else min(n - 1, max(1, int(np.floor(n / 8 + .5))))
        self.assertEqual(valid[label], want, (task.name, label))
    # The chunks of a label are disjoint and together are exactly its
    # training documents (as multisets: texts may repeat in a dataset).
    for label in drawn:
      k = dataset.label_names.index(label)
      expected = collections.Counter(
          t for t, y in zip(dataset.train.texts, dataset.train.labels)
          if y == k)
      self.assertEqual(chunk_texts[label], expected, label)

  def test_trec6_deterministic_and_seeded(self):
    trec6 = _real('trec6')
    a = continual_tasks.build_task_sequences(trec6)
    b = continual_tasks.build_task_sequences(trec6, seed=42)
    self.assertEqual(_fingerprint(a), _fingerprint(b))
    other = continual_tasks.build_task_sequences(trec6, seed=7)
    self.assertNotEqual([[t.label_names for t in c] for c in a.clients],
                        [[t.label_names for t in c] for c in other.clients])

  def test_trec6_assignment_follows_documented_seeds(self):
    trec6 = _real('trec6')
    seqs = continual_tasks.build_task_sequences(trec6, num_tasks=20, seed=3)
    names = [f'trec6-t{i:02d}' for i in range(20)]
    taken = set()
    for c, tasks in enumerate(seqs.clients):
      order = np.random.default_rng(c * 1000 + 3 + 5).permutation(20)
      mine = [names[j] for j in order if names[j] not in taken][:5]
      taken.update(mine)
      self.assertEqual([t.name for t in tasks], mine)
    # Label sets: shuffle with default_rng(seed), draw with seed + i.
    shuffled = np.random.default_rng(3).permutation(6)
    by_name = {t.name: t for c in seqs.clients for t in c}
    for name, task in by_name.items():
      i = int(name[-2:])
      drawn = np.random.default_rng(3 + i).choice(shuffled, 4, replace=False)
      self.assertEqual(task.label_names,
                       tuple(sorted(trec6.label_names[k] for k in drawn)))

  @parameterized.parameters((5, 'trec6'), (10, 'trec6'), (5, 'r8'),
                            (10, 'tmn'))
  def test_shared_labels_relays_label_sets(self, num_clients, name):
    dataset = _real(name)
    seqs = continual_tasks.build_task_sequences(
        dataset, num_clients=num_clients, tasks_per_client=5, seed=3,
        construction='shared_labels', max_train_per_task=400)
    self.assertEqual(seqs.config['construction'], 'shared_labels')
    labels = [[t.label_names for t in tasks] for tasks in seqs.clients]
    # The documented draw: C + T - 1 combinations of the sorted pool in
    # default_rng(seed).permutation order; client c's task t has S_{c+t}.
    pool = np.unique(dataset.test.labels)
    combinations = list(itertools.combinations(pool.tolist(), 4))
    order = np.random.default_rng(3).permutation(len(combinations))
    relayed = [tuple(sorted(dataset.label_names[k]
                            for k in combinations[j]))
               for j in order[:num_clients + 4]]
    self.assertLen(set(relayed), num_clients + 4)
    for c in range(num_clients):
      self.assertEqual(labels[c], relayed[c:c + 5])
      self.assertEqual([t.name for t in seqs.clients[c]],
                       [f'{name}-t{c * 5 + t:02d}' for t in range(5)])
    # What makes transfer possible: for t >= 1, client c + 1 learned client
    # c's labels at task t - 1.
    for c in range(num_clients - 1):
      for t in range(1, 5):
        self.assertEqual(labels[c][t], labels[c + 1][t - 1])
    # ... on other documents: no training document is in two tasks.
    seen = collections.Counter()
    for tasks in seqs.clients:
      for task in tasks:
        seen.update(task.train.texts + task.valid.texts)
    train_counts = collections.Counter(dataset.train.texts)
    self.assertEmpty([t for t, n in seen.items() if n > train_counts[t]])

  def test_shared_labels_refusals_name_the_numbers(self):
    trec6 = _real('trec6')  # 6 labels: C(6, 4) = 15 label sets.
    with self.assertRaisesRegex(
        errors.InputError, r'needs num_clients \+ tasks_per_client - 1 = 16 '
        r'distinct label sets.*make 15'):
      continual_tasks.build_task_sequences(
          trec6, num_clients=12, construction='shared_labels')
    with self.assertRaisesRegex(errors.InputError,
                                r'num_tasks=20: construction=shared_labels'):
      continual_tasks.build_task_sequences(
          trec6, num_tasks=20, construction='shared_labels')
    with self.assertRaisesRegex(errors.InputError,
                                r"Unknown task construction 'relay'"):
      continual_tasks.build_task_sequences(trec6, construction='relay')

  def test_random_construction_keeps_its_config(self):
    seqs = continual_tasks.build_task_sequences(_real('trec6'))
    self.assertNotIn('construction', seqs.config)

  def test_tmn_caps_for_cpu_runs(self):
    seqs = continual_tasks.build_task_sequences(
        _real('tmn'), max_train_per_task=400, max_test_per_task=300)
    for tasks in seqs.clients:
      for task in tasks:
        # 400 = train + valid; 1/8 per class of ~4 classes -> 50 valid.
        self.assertEqual(len(task.train) + len(task.valid), 400)
        self.assertBetween(len(task.valid), 48, 52)
        self.assertLen(task.test, 300)
        self.assertLen(np.unique(task.test.labels), 4)


if __name__ == '__main__':
  tf.test.main()
