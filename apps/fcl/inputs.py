"""What the model saw in an FCL benchmark: the section its reports open with.

Every results page opens with what produced its numbers
(`docs/results/README.md`): the training documents each client had per
task, what was cut from the inputs, what the test sets are, what the model
is given at test time and the rule that turns intervals into verdicts. A
reader who meets the accuracies first cannot tell a setting with 20
training documents a task from one with 400, or a frozen GloVe embedding
from a learned one.

`describe` measures the data from the encoded tasks of every seed
(`experiments.fcl.encode_dataset`): the arrays the runs train and are scored
on, so the counts use the runs' tokenizer, vocabulary and length.
`markdown` writes the section from them and the settings, and quotes
`intervals.VERDICT_RULE` rather than restating it.
"""

import collections
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from tff_nlp.data import vocabulary as vocabulary_lib
from tff_nlp.data import word_vectors as word_vectors_lib
from apps.fcl import word_vectors as fcl_word_vectors
from tff_nlp.metrics import intervals

# Display names of the datasets of the benchmark.
DATASET_LABELS = {'trec6': 'TREC-6', 'trec50': 'TREC-50', 'r8': 'R8',
                  'tmn': 'TMN', 'subj': 'Subj'}


def _label(dataset: str) -> str:
  return DATASET_LABELS.get(dataset, dataset)


def describe_seed(encoded: Any) -> collections.OrderedDict:
  """The data of one seed of one dataset, per client and task.

  Args:
    encoded: An `experiments.fcl.EncodedDataset`.

  Returns:
    JSON-ready: `train_documents`, `test_documents` and `labels`, [C][T]
    counts per client and task; `train_documents_cut` and
    `test_documents_cut`, documents longer than the encoded length (summed
    over the (client, task) sets, so a test document two tasks share counts
    twice, as it is scored twice); `test_documents_no_known_word`, test
    documents of which not one word is in the vocabulary (the model sees
    only the OOV id).
  """
  tasks = [t for client in encoded.clients for t in client]
  return collections.OrderedDict(
      train_documents=[[len(t.y_train) for t in c] for c in encoded.clients],
      test_documents=[[len(t.y_test) for t in c] for c in encoded.clients],
      labels=[[t.num_classes for t in c] for c in encoded.clients],
      train_documents_cut=sum(t.train_truncated for t in tasks),
      test_documents_cut=sum(t.test_truncated for t in tasks),
      test_documents_no_known_word=int(sum(
          np.sum(np.all(t.x_test <= vocabulary_lib.OOV_ID, axis=1))
          for t in tasks)))


def describe(encoded_by_seed: Mapping[int, Any]) -> collections.OrderedDict:
  """`describe_seed` of every seed of one dataset, keyed by str(seed)."""
  return collections.OrderedDict(
      (str(seed), describe_seed(encoded))
      for seed, encoded in encoded_by_seed.items())


def _range(values: Sequence[int]) -> str:
  low, high = min(values), max(values)
  mean = float(np.mean(values))
  span = f'{low:,}' if low == high else f'{low:,}–{high:,}'
  return f'{span} (mean {mean:,.0f})'


def _share(count: int, total: int) -> str:
  return f'{count:,} of {total:,} ({100 * count / max(total, 1):.1f} %)'


def word_vectors_text(word_vectors: str, embedding_dim: int) -> str:
  """How the model embeds words, from `TrainingConfig.word_vectors`."""
  if not word_vectors:
    return (f'a {embedding_dim}-d word embedding learned on the first task '
            '(federated, except for Local) and frozen from the second task '
            'on; no pre-trained vectors')
  if word_vectors == fcl_word_vectors.SKIPGRAM:
    text = (f'the library\'s skip-gram vectors ({embedding_dim} values a '
            'word, pre-trained on the public text of `shared/data`), frozen '
            'from the start')
  elif word_vectors == word_vectors_lib.GLOVE_50D:
    text = (f'GloVe 6B 50d vectors (`{word_vectors}`, the 50,000 most '
            'frequent words), frozen from the start')
  else:
    text = (f'pre-trained vectors `{word_vectors}` ({embedding_dim} values '
            'a word), frozen from the start')
  return text


def markdown(inputs: Mapping[str, Mapping[str, Any]], *, data: Any,
             training: Any,
             coverage: Optional[Mapping[str, float]] = None
             ) -> list[str]:
  """The "What the model saw" section of `results.md`, as lines.

  Args:
    inputs: inputs[dataset], `describe` of its seeds.
    data: The run's `experiments.fcl.DataConfig`.
    training: Its `experiments.fcl.TrainingConfig`.
    coverage: Per dataset, the share of the vocabulary's words that have a
      pre-trained vector (mean over runs), if any.

  Returns:
    The section's lines, ending with an empty one.
  """
  coverage = coverage or {}
  words = word_vectors_text(training.word_vectors, training.embedding_dim)
  if training.word_vectors and coverage:
    words += ('; the vocabulary\'s words with a vector: ' + ', '.join(
        f'{_label(d)} {100 * coverage[d]:.1f} %' for d in inputs
        if d in coverage) + ' (the others, and OOV, get a small random one)')
  seeds = {len(by_seed) for by_seed in inputs.values()}
  cap_train = (f'at most {data.max_train_per_task} training + validation '
               'documents a task, a stratified sample'
               if data.max_train_per_task else
               'every training document of the task\'s labels')
  cap_test = (f'a stratified sample of at most {data.max_test_per_task} of '
              'them' if data.max_test_per_task else 'all of them')
  not_whole = (', so not the whole test split' if data.max_test_per_task
               else '')
  lines = [
      '## What the model saw', '',
      f'* **Training examples:** per client and task, {cap_train}, less '
      'its validation split (1/8, not used: training runs a fixed number '
      'of rounds); every one of them in each of the '
      f'{training.rounds_per_task} rounds × {training.local_epochs} local '
      'epoch(s) of its task, never again after it. Labels per task: '
      + ', '.join(
          f'{_label(d)} ' + '/'.join(str(n) for n in sorted(
              {n for s in by_seed.values() for row in s['labels']
               for n in row})) for d, by_seed in inputs.items())
      + ' (a head per task).',
      f'* **Inputs:** words of the dataset\'s training split, a vocabulary '
      f'of {data.vocabulary_size:,} ids (padding and OOV included); every '
      f'document cut at {data.max_length} tokens (longer ones keep their '
      'first tokens). **Targets** are one label a document, never cut: '
      'truncation makes no test document impossible to get right.',
      f'* **Test set:** every (client, task) is scored on the dataset\'s '
      f'test documents of its labels, {cap_test}{not_whole}; tasks that '
      'share a label can share its documents. The same documents for every '
      'method of a seed; each seed draws its own tasks. ACC is the mean over '
      'the (client, task) pairs of the accuracy after the last task.',
      '* **Protocol:** task-incremental: the task is known at test time (a '
      'client scores task j with task j\'s head and weights). Words: '
      + words + '.',
      f'* {intervals.VERDICT_RULE} Here the bootstrap over test '
      'examples resamples the (client, task) pairs of every seed (2,000 '
      'replicates), each pair\'s accuracy over its test documents.',
      '',
      'Per dataset, over every (client, task) pair of '
      f'{"/".join(str(n) for n in sorted(seeds))} seed(s); documents are '
      'counted once per (client, task) set that holds them, as they are '
      'trained on or scored:', '',
      f'| dataset | training documents per (client, task) | test documents '
      f'per (client, task) | test documents cut at {data.max_length} tokens '
      '| test documents with no word in the vocabulary | training documents '
      'cut |',
      '|---|---:|---:|---:|---:|---:|']
  for dataset, by_seed in inputs.items():
    train = [n for s in by_seed.values() for row in s['train_documents']
             for n in row]
    test = [n for s in by_seed.values() for row in s['test_documents']
            for n in row]
    lines.append(
        f'| {_label(dataset)} | {_range(train)} | {_range(test)} | '
        + _share(sum(s['test_documents_cut'] for s in by_seed.values()),
                 sum(test)) + ' | '
        + _share(sum(s['test_documents_no_known_word']
                     for s in by_seed.values()), sum(test)) + ' | '
        + _share(sum(s['train_documents_cut'] for s in by_seed.values()),
                 sum(train)) + ' |')
  lines.append('')
  return lines
