"""The tiny tag task of the partial-model tests, and its numpy reference.

Shared by the tests of `tag_process` and of the multi-worker
runtime (a test file imports this helper module, never another test file).
"""

import collections

import numpy as np
import tensorflow_federated as tff

from tff_nlp.data import tags

# The spec's tiny example: 12 words + 1 OOV bucket, 3 tags + 1 OOV bucket.
WORDS = tuple('w%d' % i for i in range(12))
VOCAB = tags.TagVocabularies(words=WORDS, tags=('t0', 't1', 't2'))
V, T = VOCAB.num_word_rows, VOCAB.num_tag_columns  # 13, 4
LR = 0.5


def tag_examples(*docs):
  """`(words, tags)` pairs as TagExamples."""
  return [tags.TagExample(tokens=w, title='', tags=t) for w, t in docs]


# Client 0: 4 distinct words, one of them OOV ('zz' -> row 12).
# Client 1: 6 distinct words, an OOV tag ('new' -> column 3).
# Client 2: 2 distinct words. Rows 7..11 occur nowhere.
CLIENTS = [
    tag_examples(('w0 w1 w1 zz', 't0|t1'), ('w1 w2', 't1'), ('w0 w1', 't2')),
    tag_examples(('w3 w4 w5 w0', 't0'), ('w6 w0 w3', 'new'),
              ('w2 w3', 't1|t2'), ('w4', 't0')),
    tag_examples(('w5 w5 w6', 't2')),
]


def datasets(batch_size=2):
  return [tags.to_dataset(tags.encode(c, VOCAB), num_words=V,
                          batch_size=batch_size) for c in CLIENTS]


def faulty_dataset(examples, fault):
  """The test hook: a client's dataset with a NaN / Inf label, or empty.

  'nan' sets one tag of the first example to NaN, 'inf' every tag to +Inf:
  the loss, so the update, is non-finite. 'empty' drops every example (the
  same element type, no batch).
  """
  encoded = tags.encode(examples if fault != 'empty' else [], VOCAB)
  if fault == 'nan':
    encoded.tags[0, 0] = np.nan
  elif fault == 'inf':
    encoded.tags[:] = np.inf
  return tags.to_dataset(encoded, num_words=V, batch_size=2)


def reference_keys(examples, *, max_keys, block_size=1):
  """Numpy spec step 1: a client's trained word rows and its selected rows.

  Keys are the words in the most examples, ties by smaller id; with blocks,
  the blocks of `block_size` rows with the largest summed example counts,
  ties by smaller block id, and the client trains the rows of its words in
  them (the rest of a block has no gradient). Returns `(rows, selected)`:
  the sorted word rows the client trains and uploads, and how many rows
  (below V) its keys select.
  """
  encoded = tags.encode(examples, VOCAB)
  counts = collections.Counter(int(i) for ids in encoded.word_ids for i in ids)
  if block_size == 1:
    keys = sorted(sorted(counts, key=lambda i: (-counts[i], i))[:max_keys])
    return keys, len(keys)
  scores = collections.Counter()
  for word, count in counts.items():
    scores[word // block_size] += count
  blocks = sorted(scores, key=lambda b: (-scores[b], b))[:max_keys]
  selected = sum(min(block_size, V - b * block_size) for b in blocks)
  return sorted(w for w in counts if w // block_size in blocks), selected


def reference_client_updates(table, clients, *, max_keys, block_size=1,
                             batch_size=2):
  """Numpy spec steps 1-5: each client's (keys, initial minus trained rows)."""
  updates = []
  for examples in clients:
    encoded = tags.encode(examples, VOCAB)
    # 1. Keys: example counts, most frequent first, ties by smaller id.
    keys, _ = reference_keys(examples, max_keys=max_keys,
                             block_size=block_size)
    local = {k: i for i, k in enumerate(keys)}
    # 2.-4. Select the rows, drop unselected words, SGD per batch.
    weights = table[keys].astype(np.float64)
    start = weights.copy()
    for b in range(0, len(encoded), batch_size):
      rows = range(b, min(b + batch_size, len(encoded)))
      x = np.zeros([len(rows), len(keys)])
      for r, e in enumerate(rows):
        for i, c in zip(encoded.word_ids[e], encoded.word_counts[e]):
          if int(i) in local:
            x[r, local[int(i)]] = c
      y = encoded.tags[list(rows)]
      p = 1 / (1 + np.exp(-(x @ weights)))
      # d(mean over [B, T] of sigmoid CE)/dW = x^T (p - y) / (B * T).
      weights = weights - LR * x.T @ (p - y) / y.size
    # 5. Upload initial minus trained rows.
    updates.append((keys, start - weights))
  return updates


def reference_round(table, clients, *, max_keys, divisor, block_size=1,
                    batch_size=2):
  """A numpy re-implementation of one round (spec steps 1-7)."""
  total = np.zeros_like(table, np.float64)
  touches = np.zeros(len(table))
  contributing = 0
  for keys, rows in reference_client_updates(
      table, clients, max_keys=max_keys, block_size=block_size,
      batch_size=batch_size):
    # 6. Sum at the server.
    for k, update in zip(keys, rows):
      total[k] += update
      touches[k] += 1
    contributing += bool(keys)
  if divisor == 'clients':
    mean = total / contributing
  else:
    mean = total / np.maximum(touches, 1)[:, None]
  # 7. Subtract the mean update (server SGD, learning rate 1).
  return table - mean


def as_indexed_slices(keys, rows):
  """A reference client update as the process uploads it."""
  return collections.OrderedDict(
      indices=np.array(keys, np.int64),
      values=np.array(rows, np.float32).reshape(len(keys), T))


def start_table():
  return np.random.default_rng(3).normal(size=[V, T]).astype(np.float32)


def run_round(process, table, datasets):
  state = process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights(trainable=[table], non_trainable=[]))
  output = process.next(state, datasets)
  return process.get_model_weights(output.state).trainable[0], output.metrics
