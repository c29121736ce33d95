"""Benchmark: partial models (federated_select) vs dense FedAvg as V grows.

For word vocabularies of V rows (10^3 to 10^6 by default) and a fixed M rows
per client, one run measures, side by side:

*   bytes per client per round, down and up, read from each process's round
    computation (`tff_nlp.analysis.round_communication`) and the rows the
    sparse clients actually uploaded;
*   the median wall time of a round of each process (after one warm-up
    round, from the same state, interleaved), with the server state sent
    from Python every round (`process.next`) and kept in the worker with
    the clients' data (`tff_nlp.runtime.ResidentProcess`, as a deployment
    keeps the model at the server and the data at the clients); there, each
    sparse variant's rounds alternate with the dense process's, and the
    speed-up dense ÷ sparse comes with a paired-bootstrap 95% interval;
*   the same for sparse rounds whose keys name blocks of B rows
    (`--blocks`, e.g. 25 keys of 4 rows: the same rows down as M = 100, a
    quarter of the `federated_select` calls), with the selection alone timed
    per client and the share of (example, word) entries the clients keep;
*   the server-side work of the sparse round, timed alone: the
    IndexedSlices mean (O(rows uploaded)) and applying it to its rows of the
    [V, T] model (which, called from Python, also moves the model into the
    runtime and back), on uploads of the same shapes.

Both processes' clients keep their batches stored as tensors
(`tff_nlp.data.tags.to_padded_dataset`; the sparse ones over their local
rows, `keyed_client_data`), so that no round pays for instantiating a
dataset function per client.

The data is real: TREC-6 questions (`shared/data/text_classification/trec6`)
as tag examples, split into label-skewed clients. The vocabulary of V rows is
the most frequent training words plus hashed OOV buckets up to V rows (TREC
has about 8.7k distinct training words, so the larger V are mostly buckets,
as in a production vocabulary sized for text the clients have not shown yet).

  python -m apps.partial_models.bin.select_scaling                  # or: make bench-select
  python -m apps.partial_models.bin.select_scaling --vocab_sizes=1000,10000 --repeats=2

Results of the committed run are in docs/results/federated_select.md. This is
a benchmark, not a test: its times depend on the machine.
"""

import collections
import json
import os
import platform
import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


from apps.partial_models import tag_process
from tff_nlp import analysis
from tff_nlp import data as data_lib
from tff_nlp import runtime
from tff_nlp.algorithms import partial_models as sparse
from apps.common import config_flags
from tff_nlp.data import tags as tags_lib
from tff_nlp.metrics import continual
from tff_nlp.runtime import flags as runtime_flags

_DATA_DIR = config_flags.define('data_dir', None, str)
_DATASET = config_flags.define('dataset', 'trec6')
_VOCAB_SIZES = flags.DEFINE_list(
    'vocab_sizes', ['1000', '10000', '100000', '1000000'],
    'Word rows V (words plus OOV buckets) to measure.')
_MAX_KEYS = flags.DEFINE_integer('max_keys', 100, 'M, rows per client.')
_BLOCKS = flags.DEFINE_list(
    'blocks', ['25x4', '10x16'],
    'Sparse variants whose keys name blocks of rows, as KEYSxB: KEYS keys of '
    'B rows each (empty: none).')
_NUM_CLIENTS = flags.DEFINE_integer('num_clients', 10, 'Clients per round.')
_BATCH_SIZE = config_flags.define('batch_size', 16)
_LEARNING_RATE = flags.DEFINE_float('learning_rate', 20.0, 'Client SGD rate.')
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed rounds of each process.')
_SEED = config_flags.define('seed', 0)
_OUTPUT_JSON = config_flags.define('output_json', None, str)


def _vocabularies(examples, num_rows):
  """The most frequent words, then OOV buckets up to `num_rows` rows."""
  vocab = tags_lib.TagVocabularies.build(
      examples, max_words=num_rows - 1, max_tags=100)
  return tags_lib.TagVocabularies(
      words=vocab.words, tags=vocab.tags,
      num_oov_word_buckets=num_rows - len(vocab.words))


def _median_seconds(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _server_side_seconds(num_rows, num_tags, max_keys, num_clients, repeats):
  """Median time of the sparse round's dense server work, alone."""
  rng = np.random.default_rng(0)
  uploads = [collections.OrderedDict(
      indices=np.sort(rng.choice(num_rows, max_keys, replace=False)).astype(
          np.int64),
      values=rng.normal(size=[max_keys, num_tags]).astype(np.float32))
             for _ in range(num_clients)]
  slices_type = sparse.indexed_slices_type([num_tags])
  aggregator = sparse.IndexedSlicesMeanFactory(num_rows).create(slices_type)
  weights_type = tff.learning.models.ModelWeights(
      trainable=[tff.TensorType(np.float32, [num_rows, num_tags])],
      non_trainable=[])
  finalizer = sparse.build_delta_finalizer(weights_type,
                                           update_type=[slices_type])
  weights = tff.learning.models.ModelWeights(
      trainable=[np.zeros([num_rows, num_tags], np.float32)],
      non_trainable=[])
  update = [aggregator.next(aggregator.initialize(), uploads).result]
  aggregate = _median_seconds(
      lambda: aggregator.next(aggregator.initialize(), uploads), repeats)
  finalizer.next(finalizer.initialize(), weights, update)
  apply = _median_seconds(
      lambda: finalizer.next(finalizer.initialize(), weights, update),
      repeats)
  return aggregate, apply


def _resident(process, state, client_data, worker):
  """`process` with `state` and `client_data` kept in `worker`.

  Returns the `ResidentProcess`, after a warm-up round, and the handle of
  its client data (`ResidentProcess.put_client_data`): the clients hold
  their data, so the timed rounds do not send it from Python.
  """
  resident = runtime.ResidentProcess(process, worker,
                                     num_clients=len(client_data))
  resident.set_state(state)
  data = resident.put_client_data(client_data)
  resident.next(data)
  return resident, data


def _alternating_seconds(first, second, repeats):
  """Times of `repeats` calls of each, alternating, so drift hits both."""
  first_seconds, second_seconds = [], []
  for _ in range(repeats):
    first_seconds.append(_median_seconds(first, 1))
    second_seconds.append(_median_seconds(second, 1))
  return first_seconds, second_seconds


def _paired_resident_seconds(sparse_round, dense_round, repeats):
  """Interleaved rounds of both resident processes, and their ratio.

  Round times drift by tens of percent between runs of this benchmark, so
  the ratio is taken pair by pair: each sparse round is followed by a dense
  one. The ratio's point estimate and 95% interval are the geometric mean
  of dense ÷ sparse over the pairs and the paired bootstrap of the mean log
  ratio (`metrics.continual.pair_bootstrap_difference`), exponentiated.
  """
  sparse_seconds, dense_seconds = _alternating_seconds(
      sparse_round, dense_round, repeats)
  log_ratio = continual.pair_bootstrap_difference(
      [np.log(dense_seconds)], [np.log(sparse_seconds)])
  return collections.OrderedDict(
      resident_round_seconds=statistics.median(sparse_seconds),
      paired_dense_round_seconds=statistics.median(dense_seconds),
      dense_over_sparse=float(np.exp(log_ratio.estimate)),
      dense_over_sparse_ci95=[float(np.exp(log_ratio.low)),
                              float(np.exp(log_ratio.high))])


def _select_seconds_per_client(num_rows, num_tags, keys, block_size, repeats):
  """Median time of `federated_select` alone (rows stacked), per client.

  The table is made in the worker (zeros, a few ms at V = 10^6, shared by
  the clients), not sent from Python, which would time its transfer.
  """
  table_type = tff.TensorType(np.float32, [num_rows, num_tags])
  select = sparse.build_row_selection(table_type, max_keys=len(keys[0]),
                                      block_size=block_size)
  make_table = tff.tensorflow.computation(
      lambda: tf.zeros([num_rows, num_tags]))

  @tff.federated_computation(select.type_signature.parameter[1])
  def select_from_worker_table(client_keys):
    return select(tff.federated_eval(make_table, tff.SERVER), client_keys)

  select_from_worker_table(keys)  # Warm-up.
  return _median_seconds(lambda: select_from_worker_table(keys),
                         repeats) / len(keys)


def _parse_blocks(values):
  """`['25x4', ...]` as `[(25, 4), ...]`, or a ValueError naming --blocks."""
  blocks = []
  for value in values:
    keys, _, size = value.partition('x')
    if not (keys.isdigit() and size.isdigit() and int(keys) > 0
            and int(size) > 0):
      raise ValueError(f'--blocks: expected KEYSxB with positive integers '
                       f'(e.g. 25x4), got {value!r}.')
    blocks.append((int(keys), int(size)))
  return blocks


class _Setting:
  """One vocabulary size: the clients' data and the processes' shape."""

  def __init__(self, num_rows, *, examples, partition, batch_size,
               learning_rate, repeats, worker):
    vocab = _vocabularies(examples, num_rows)
    encoded = tags_lib.encode(examples, vocab)
    clients = [encoded.subset(i) for i in partition.train_indices]
    self.datasets = [tags_lib.to_dataset(c, num_words=num_rows,
                                         batch_size=batch_size)
                     for c in clients]
    # The dense clients' batches stored as tensors, as the sparse clients'
    # local batches are (`keyed_client_data`): neither round instantiates a
    # dataset function per client (`tags.to_padded_dataset`).
    self.dense_datasets = [
        tags_lib.to_padded_dataset(c, num_words=num_rows,
                                   batch_size=batch_size, keras_pairs=True)
        for c in clients]
    # (example, word) entries, for the share the sparse clients keep.
    self.entries = sum(len(ids) for c in clients for ids in c.word_ids)
    self.num_rows, self.num_tags = num_rows, vocab.num_tag_columns
    self.learning_rate, self.repeats, self.worker = (learning_rate, repeats,
                                                     worker)

  def shape(self):
    return dict(num_words=self.num_rows, num_tags=self.num_tags,
                client_learning_rate=self.learning_rate)

  def sparse(self, max_keys, block_size, *, dense_round):
    """A sparse variant: bytes, rounds, keys and selection times, coverage.

    Its resident rounds are timed interleaved with `dense_round` (one round
    of the resident dense process). Returns the results, and the process,
    its state and its clients' data.
    """
    # Each client's keys are computed once (a client's keys change only
    # with its data) and travel with its batches, already over its local
    # rows: a round passes over a client's data once, to train.
    start = time.perf_counter()
    data = [tag_process.keyed_client_data(d, max_keys, block_size)
            for d in self.datasets]
    keys_seconds = (time.perf_counter() - start) / len(data)
    process = tag_process.build_sparse_tag_process(
        **self.shape(), max_keys=max_keys, keys_in_data=True,
        block_size=block_size)
    state = process.initialize()
    # Warm-up round: tracing, compilation, and the rows actually moved.
    train = process.next(state, data).metrics['client_work']['train']
    rows_up = train['rows_uploaded'] / len(data)
    traffic = analysis.round_communication(process.next)
    result = collections.OrderedDict(
        max_keys=max_keys, block_size=block_size,
        select_calls_per_client=max_keys,
        rows_down_per_client=max_keys * block_size,
        rows_uploaded_per_client=rows_up,
        entries_kept=1 - train['dropped_tokens'] / self.entries,
        bytes_down=traffic.bytes_down(rows_up),
        bytes_up=traffic.bytes_up(rows_up),
        select_seconds_per_client=_select_seconds_per_client(
            self.num_rows, self.num_tags, [d['keys'] for d in data],
            block_size, self.repeats),
        keys_once_per_client_seconds=keys_seconds)
    resident, resident_data = _resident(process, state, data, self.worker)
    with resident:
      result.update(_paired_resident_seconds(
          lambda: resident.next(resident_data), dense_round, self.repeats))
    return result, (process, state, data)


def measure(num_rows, *, examples, partition, batch_size, max_keys, blocks,
            learning_rate, repeats, worker):
  """One vocabulary size: bytes and times of every process."""
  setting = _Setting(num_rows, examples=examples, partition=partition,
                     batch_size=batch_size, learning_rate=learning_rate,
                     repeats=repeats, worker=worker)
  dense_data = setting.dense_datasets
  dense_process = tag_process.build_dense_tag_process(**setting.shape())
  dense_state = dense_process.initialize()
  dense_process.next(dense_state, dense_data)  # Warm-up.
  dense_traffic = analysis.round_communication(dense_process.next)
  # Two resident processes share the worker (tests/tff_nlp/runtime/resident_test.py).
  dense, dense_resident_data = _resident(dense_process, dense_state,
                                         dense_data, worker)
  with dense:
    dense_round = lambda: dense.next(dense_resident_data)
    base, (sparse_process, sparse_state, sparse_data) = setting.sparse(
        max_keys, 1, dense_round=dense_round)
    variants = [base] + [
        setting.sparse(keys, size, dense_round=dense_round)[0]
        for keys, size in blocks]
  sparse_seconds, dense_seconds = _alternating_seconds(
      lambda: sparse_process.next(sparse_state, sparse_data),
      lambda: dense_process.next(dense_state, dense_data), repeats)
  aggregate, apply = _server_side_seconds(
      num_rows, setting.num_tags, max_keys, len(sparse_data), repeats)
  return collections.OrderedDict(
      num_rows=num_rows, num_tags=setting.num_tags,
      rows_uploaded_per_client=base['rows_uploaded_per_client'],
      sparse_bytes_down=base['bytes_down'],
      sparse_bytes_up=base['bytes_up'],
      dense_bytes_down=dense_traffic.bytes_down(),
      dense_bytes_up=dense_traffic.bytes_up(),
      sparse_round_seconds=statistics.median(sparse_seconds),
      dense_round_seconds=statistics.median(dense_seconds),
      sparse_resident_round_seconds=base['resident_round_seconds'],
      keys_once_per_client_seconds=base['keys_once_per_client_seconds'],
      dense_resident_round_seconds=base['paired_dense_round_seconds'],
      sparse_server_aggregate_seconds=aggregate,
      sparse_server_apply_seconds=apply,
      sparse_variants=variants)


def _ratio(variant):
  low, high = variant['dense_over_sparse_ci95']
  return f'{variant["dense_over_sparse"]:.1f}× [{low:.1f}, {high:.1f}]'


def _kib(value):
  """Bytes in KiB (1,024 bytes; docs/results/README.md), one decimal."""
  return f'{value / 1024:,.1f}'


def markdown(rows, *, max_keys, num_clients) -> str:
  """The results as two Markdown tables: bytes, then round times."""
  base = rows[0]
  lines = [
      f'M = {max_keys} rows per client, {num_clients} clients per round, '
      f'T = {base["num_tags"]} tag columns.',
      '',
      '| V (rows) | sparse KiB down | sparse KiB up | dense KiB down | '
      'dense KiB up | sparse down vs smallest V | dense down vs smallest V |',
      '|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for r in rows:
    lines.append(
        f'| {r["num_rows"]:,} | {_kib(r["sparse_bytes_down"])} | '
        f'{_kib(r["sparse_bytes_up"])} | {_kib(r["dense_bytes_down"])} | '
        f'{_kib(r["dense_bytes_up"])} | '
        f'{r["sparse_bytes_down"] / base["sparse_bytes_down"]:.3f}× | '
        f'{r["dense_bytes_down"] / base["dense_bytes_down"]:.1f}× |')
  lines += [
      '',
      'Round seconds (medians). "State from Python": `process.next(state, '
      'data)`, the server state sent to the worker and back every round; '
      '"state in runtime": `tff_nlp.runtime.ResidentProcess`, the state '
      'and the clients\' data kept in the worker, only metrics returned. '
      'Sparse clients carry '
      'their keys and their batches over their local rows, computed once '
      'per client (`keyed_client_data`; last column, not in the rounds).',
      '',
      '| V (rows) | sparse, state from Python | dense, state from Python | '
      'sparse, state in runtime | dense, state in runtime | dense ÷ sparse '
      '(state in runtime) | sparse server-side s (aggregate + apply, from '
      'Python) | keys and local batches, once per client, ms |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for r in rows:
    lines.append(
        f'| {r["num_rows"]:,} | {r["sparse_round_seconds"]:.2f} | '
        f'{r["dense_round_seconds"]:.2f} | '
        f'{r["sparse_resident_round_seconds"]:.2f} | '
        f'{r["dense_resident_round_seconds"]:.2f} | '
        f'{_ratio(r["sparse_variants"][0])} | '
        f'{r["sparse_server_aggregate_seconds"]:.3f} + '
        f'{r["sparse_server_apply_seconds"]:.3f} | '
        f'{1000 * r["keys_once_per_client_seconds"]:.1f} |')
  lines += [
      '',
      'Sparse variants, state in runtime: keys of one row (M keys) or of '
      'blocks of B rows. `federated_select` makes one call per key; '
      '"select ms" is the selection alone, per client; "entries kept" is the '
      'share of the clients\' (example, word) entries among their rows.',
      '',
      '| V (rows) | keys × B | rows down | rows up | KiB down | KiB up | '
      'entries kept | select ms per client | round s | dense round s '
      '(interleaved) | dense ÷ sparse [95%] |',
      '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for r in rows:
    for v in r['sparse_variants']:
      lines.append(
          f'| {r["num_rows"]:,} | {v["max_keys"]} × {v["block_size"]} | '
          f'{v["rows_down_per_client"]} | '
          f'{v["rows_uploaded_per_client"]:.0f} | {_kib(v["bytes_down"])} | '
          f'{_kib(v["bytes_up"])} | {v["entries_kept"]:.3f} | '
          f'{1000 * v["select_seconds_per_client"]:.1f} | '
          f'{v["resident_round_seconds"]:.2f} | '
          f'{v["paired_dense_round_seconds"]:.2f} | {_ratio(v)} |')
  return '\n'.join(lines)


def run(*, data_dir, dataset, vocab_sizes, max_keys, blocks, num_clients,
        batch_size, learning_rate, repeats, seed, worker):
  task = data_lib.load_dataset(dataset, data_dir)
  examples = tags_lib.examples_from_labels(
      task.train.texts, [task.label_names[i] for i in task.train.labels])
  partition = data_lib.dirichlet_label_skew(
      task.train.labels, task.test.labels, num_clients=num_clients,
      alpha=0.5, seed=seed, min_train_examples=10)
  rows = []
  for num_rows in vocab_sizes:
    rows.append(measure(num_rows, examples=examples, partition=partition,
                        batch_size=batch_size, max_keys=max_keys,
                        blocks=blocks, learning_rate=learning_rate,
                        repeats=repeats,
                        worker=worker))
    print(json.dumps(rows[-1]), flush=True)
  return rows


def main(argv):
  del argv
  vocab_sizes = [int(v) for v in _VOCAB_SIZES.value]
  blocks = _parse_blocks(_BLOCKS.value)
  with runtime_flags.context_from_flags() as context:
    rows = run(data_dir=_DATA_DIR.value, dataset=_DATASET.value,
               worker=context.worker, vocab_sizes=vocab_sizes,
               max_keys=_MAX_KEYS.value, blocks=blocks,
               num_clients=_NUM_CLIENTS.value, batch_size=_BATCH_SIZE.value,
               learning_rate=_LEARNING_RATE.value, repeats=_REPEATS.value,
               seed=_SEED.value)
  print()
  print(f'Machine: {platform.machine()}, {os.cpu_count()} CPUs, '
        f'{platform.python_version()}')
  print(markdown(rows, max_keys=_MAX_KEYS.value,
                 num_clients=_NUM_CLIENTS.value))
  if _OUTPUT_JSON.value:
    with open(_OUTPUT_JSON.value, 'w', encoding='utf-8') as f:
      json.dump(dict(rows=rows, max_keys=_MAX_KEYS.value,
                     num_clients=_NUM_CLIENTS.value), f, indent=1)


if __name__ == '__main__':
  app.run(main)
