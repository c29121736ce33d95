"""Tag prediction trained with partial models: federated_select + sparse sums.

Reference: TensorFlow Federated tutorial "Client-efficient large-model
federated learning via federated_select and sparse aggregation" (restated in
`shared/docs/federated_select.md`). The model is one logistic regression per
tag over a bag of words (`apps.partial_models.tag_model`), a matrix W of
shape [V, T]. In a round each client

1. picks its keys: the M words that occur in the most of its examples
   (`tff_nlp.algorithms.partial_models.client_keys`), padded to M, or with `block_size` B the M
   blocks of B rows whose words occur the most;
2. downloads those M rows (M * B) of W with `tff.federated_select`;
3. maps its batches to local word ids, dropping words it did not select;
4. runs SGD on the local [M, T] model;
5. uploads the update of the rows of its words as IndexedSlices (global ids,
   initial minus trained rows);

and the server averages the updates row by row
(`tff_nlp.algorithms.partial_models.IndexedSlicesMeanFactory`, dividing by the clients or, per
row, by the clients that touched it) and subtracts the mean from those rows
only, so rows nobody selected keep their values and the server's work is
O(rows uploaded). A client downloads and uploads M rows whatever V
is.

With M at least every client's number of distinct words, no word is dropped
and the round equals FedAvg with uniform client weights on the dense model
(`build_dense_tag_process`); the tests check that to 1e-5.
"""

import collections
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import partial_models as sparse
from tff_nlp.templates import batch_loop
from tff_nlp.algorithms import fl_process
from tff_nlp.aggregators import weighting as weighting_lib
from tff_nlp.data import tags as tags_data
from apps.partial_models import tag_model as tag_regression


def _check_positive(**values) -> None:
  for name, value in values.items():
    if not value > 0:
      raise ValueError(f'{name} must be > 0, got {value!r}.')


def _client_data_type(num_words: int, num_tags: int) -> tff.SequenceType:
  del num_words  # The dense width is a value (`dense_shape`), not a type.
  return tff.SequenceType(tff.types.tensorflow_to_type(
      tags_data.element_type_spec(num_tags)))


BATCHES = 'batches'
DROPPED_TOKENS = 'dropped_tokens'


def client_keys(dataset, max_keys: int,
                block_size: int = 1) -> collections.OrderedDict:
  """A client's keys: its `max_keys` words (or blocks) in the most examples.

  Args:
    dataset: The client's batches (`tff_nlp.data.tags.to_dataset`).
    max_keys: M.
    block_size: B; the keys are blocks of B word rows
      (`tff_nlp.algorithms.partial_models.top_blocks`), with B = 1 the words themselves.

  Returns:
    `<keys=int32[M], num_keys=int32, distinct_tokens=int32>`: the keys
    (`tff_nlp.algorithms.partial_models.top_blocks`, padded to M), how many are
    real, and how many distinct words the client has (if its keys cover
    fewer, it is truncated).
  """
  return _keys_of_counts(*sparse.example_counts(dataset), max_keys=max_keys,
                         block_size=block_size)


def _keys_of_counts(token_ids, counts, *, max_keys: int,
                    block_size: int) -> collections.OrderedDict:
  """`client_keys` from the client's `sparse.example_counts`."""
  # With B = 1 the blocks are the words and this is `top_keys`.
  keys = sparse.top_blocks(token_ids, counts, max_blocks=max_keys,
                           block_size=block_size)
  return collections.OrderedDict(
      keys=keys.keys, num_keys=keys.num_keys,
      distinct_tokens=tf.size(token_ids))


def keyed_client_data(dataset, max_keys: int,
                      block_size: int = 1) -> collections.OrderedDict:
  """A client's data for `build_sparse_tag_process(keys_in_data=True)`.

  Its keys are computed here, once (eagerly, from the batches of the one
  pass over `dataset`), and its batches are re-indexed to them (steps 1 and
  3 of a round, done once), so a round neither passes over the client's data
  to find its keys nor maps each batch to local ids: the batches it trains
  on are already over its local rows. A deployed client would keep its data
  so; keep the result for the client's later rounds.

  Args:
    dataset: The client's batches (`tff_nlp.data.tags.to_dataset`: every
      batch but the last of one size).
    max_keys: M, as given to the process.
    block_size: B, as given to the process.

  Returns:
    `<keys=int32[M], num_keys=int32, distinct_tokens=int32,
    dropped_tokens=int32, batches=B*>`: `client_keys`; the (example, word)
    entries of words outside the keys, dropped from the batches; and the
    batches, whose bags are over the client's M * B local rows (dense shape
    [batch, M * B]) instead of the V global ones, stored as padded tensors
    (`tff_nlp.data.tags.to_padded_dataset`: entries of count 0 pad them).

  Raises:
    ValueError: If the batches are not all of one size but the last.
  """
  batches = list(dataset)
  sizes = [int(tf.shape(b['tags'])[0]) for b in batches]
  if any(n != sizes[0] for n in sizes[:-1]) or sizes[-1:] > sizes[:1]:
    raise ValueError('keyed_client_data re-batches the data in batches of '
                     'one size (the last may be smaller); got batches of '
                     f'{sizes}.')
  # All examples as one bag [examples, V], mapped in one call.
  starts = np.cumsum([0] + sizes)
  num_rows = (int(batches[0]['tokens']['dense_shape'][1]) if batches
              else max_keys * block_size)
  bag = collections.OrderedDict(
      indices=np.concatenate(
          [np.zeros([0, 2], np.int64)]
          + [b['tokens']['indices'].numpy() + [start, 0]
             for b, start in zip(batches, starts)]),
      values=np.concatenate([np.zeros([0], np.int32)] + [
          b['tokens']['values'].numpy() for b in batches]),
      dense_shape=np.array([starts[-1], num_rows], np.int64))
  # The keys from the batches read above (the one pass over `dataset`):
  # counted over the one bag of all examples, which holds the batches'
  # (example, word) entries, they are `client_keys(dataset, ...)`.
  keys = _keys_of_counts(
      *sparse.example_counts(tf.data.Dataset.from_tensors(
          collections.OrderedDict(tokens=bag))),
      max_keys=max_keys, block_size=block_size)
  local_bag, dropped = sparse.to_local_bag(bag, sparse.block_rows(
      sparse.ClientKeys(keys=keys['keys'], num_keys=keys['num_keys']),
      block_size=block_size, num_rows=num_rows))
  # The bag's entries are in example order: split them per example.
  ends = np.cumsum(np.bincount(local_bag.indices[:, 0].numpy(),
                               minlength=starts[-1]))[:-1]
  word_ids, word_counts = (
      (np.split(local_bag.indices[:, 1].numpy(), ends),
       np.split(local_bag.values.numpy(), ends)) if batches else ([], []))
  num_tags = dataset.element_spec['tags'].shape[1]
  local = tags_data.EncodedTags(
      word_ids=tuple(word_ids), word_counts=tuple(word_counts),
      tags=(np.concatenate([b['tags'].numpy() for b in batches]) if batches
            else np.zeros([0, num_tags], np.float32)),
      oov_words=-1, oov_tags=-1)
  data = collections.OrderedDict(
      (name, value.numpy()) for name, value in keys.items())
  data[DROPPED_TOKENS] = dropped.numpy()
  # Stored, not mapped: the worker then instantiates no function per
  # round to iterate them (`tags_data.to_padded_dataset`).
  data[BATCHES] = tags_data.to_padded_dataset(
      local, num_words=max_keys * block_size,
      batch_size=sizes[0] if sizes else 1)
  return data


class _SparseParts:
  """The components of the sparse process, composed by `tff_nlp.algorithms.partial_models`."""

  def __init__(
      self, *, num_words: int, num_tags: int, max_keys: int,
      client_learning_rate: float, client_epochs: int,
      server_learning_rate: float,
      aggregation_factory: tff.aggregators.UnweightedAggregationFactory,
      keys_in_data: bool = False, block_size: int = 1):
    self.table_type = tff.TensorType(np.float32, [num_words, num_tags])
    batches_type = _client_data_type(num_words, num_tags)
    self.weights_type = tff.types.to_type(tff.learning.models.ModelWeights(
        trainable=[self.table_type], non_trainable=[]))
    # The rows arrive as federated_select's sequence and are stacked in the
    # client's training call (one TF call per client fewer).
    select = sparse.build_row_selection(self.table_type, max_keys=max_keys,
                                        stacked=False, block_size=block_size)
    rows_type = select.type_signature.result.member
    self.aggregator = aggregation_factory.create(
        sparse.indexed_slices_type([num_tags]))
    # The mean update: IndexedSlices of the rows uploaded (the
    # `tff_nlp.algorithms.partial_models` aggregators), applied to those rows only.
    update_type = self.aggregator.next.type_signature.result.result.member
    self.finalizer = sparse.build_delta_finalizer(
        self.weights_type, learning_rate=server_learning_rate,
        update_type=[update_type])

    @tff.tensorflow.computation
    def initial_weights():
      return tff.learning.models.ModelWeights(
          trainable=[tf.zeros([num_words, num_tags])], non_trainable=[])

    self.initial_weights = initial_weights

    keys_fn = tff.tensorflow.computation(
        lambda data: client_keys(data, max_keys, block_size), batches_type)
    keys_type = keys_fn.type_signature.result
    if keys_in_data:
      # A client's data carries its keys and its batches over its local rows
      # (computed once per client, `keyed_client_data`), so a round passes
      # over its batches once, to train, and maps no ids.
      keys_type = tff.StructWithPythonType(
          list(tff.structure.iter_elements(keys_type))
          + [(DROPPED_TOKENS, np.int32)], collections.OrderedDict)
      self.data_type = tff.StructWithPythonType(
          list(tff.structure.iter_elements(keys_type))
          + [(BATCHES, batches_type)], collections.OrderedDict)
    else:
      self.data_type = batches_type
    table_type = self.table_type

    def local_bag(tokens, client):
      """A batch's bag over the local rows, and the entries it dropped.

      None for the dropped entries of the local batches of `keys_in_data`:
      they drop none (the data carries what `keyed_client_data` dropped).
      """
      if not keys_in_data:
        return sparse.to_local_bag(tokens, client)
      # Already local; the width as a constant keeps the gradient's shape
      # [M * B, T] static.
      return tf.SparseTensor(
          indices=tokens['indices'], values=tokens['values'],
          dense_shape=tf.stack([tokens['dense_shape'][0],
                                tf.constant(max_keys * block_size,
                                            tf.int64)])), None

    @tff.tensorflow.computation(rows_type, keys_type, batches_type)
    def client_update(selected, keys, data):
      rows = sparse.stack_selected_rows(selected, table_type,
                                        max_keys=max_keys,
                                        block_size=block_size)
      # The rows of the client's blocks (with B = 1, its keys unchanged).
      client = sparse.block_rows(
          sparse.ClientKeys(keys=keys['keys'], num_keys=keys['num_keys']),
          block_size=block_size, num_rows=num_words)
      local_rows = max_keys * block_size

      # The loop's state; a last element, the entries dropped, only when the
      # batches are mapped to local ids here (not with `keys_in_data`).
      def train_on_batch(state, batch):
        weights, loss_sum, examples, seen, *dropped = state
        bag, batch_dropped = local_bag(batch['tokens'], client)
        # The local rows of words in the client's data: the rows it trains.
        # (Entries of count 0 are padding, `tags_data.to_padded_dataset`.)
        seen = tf.tensor_scatter_nd_max(
            seen, bag.indices[:, 1:], tf.cast(bag.values > 0, tf.int32))
        with tf.GradientTape() as tape:
          tape.watch(weights)
          batch_loss = tag_regression.loss(
              tag_regression.logits(bag, weights), batch['tags'])
        gradient = tape.gradient(batch_loss, weights)
        batch_size = tf.shape(batch['tags'])[0]
        return (weights - client_learning_rate * gradient,
                loss_sum + batch_loss * tf.cast(batch_size, tf.float32),
                examples + batch_size, seen,
                *(d + batch_dropped for d in dropped))

      trained, loss_sum, examples, seen, *dropped = batch_loop.for_each_batch(
          data.repeat(client_epochs),
          (rows, tf.constant(0.0), tf.constant(0),
           tf.zeros([local_rows], tf.int32),
           *(() if keys_in_data else (tf.constant(0),))),
          train_on_batch)
      # Only the rows of the client's own words are uploaded: the others
      # (the rest of a block) have no gradient. Without blocks these are
      # exactly its real keys, each a word of its data.
      trained_rows = tf.reshape(tf.where(seen > 0), [-1])
      update = tf.gather(rows - trained, trained_rows)
      finite = tf.reduce_all(tf.math.is_finite(update))
      # A non-finite update is not uploaded at all (0 rows): it would
      # otherwise poison every row it touches at the server.
      num_rows = tf.where(finite, tf.size(trained_rows), 0)
      return collections.OrderedDict(
          result=collections.OrderedDict(
              update=collections.OrderedDict(
                  indices=tf.cast(tf.gather(client.keys,
                                            trained_rows[:num_rows]),
                                  tf.int64),
                  values=update[:num_rows]),
              # Read by no sparse aggregator (they weigh the clients that
              # sent rows); 1 for those clients, as in `Divisor.CLIENTS`.
              update_weight=tf.cast(num_rows > 0, tf.float32)),
          stats=collections.OrderedDict(
              loss_sum=tf.where(finite, loss_sum, 0.0),
              num_examples=examples // client_epochs,
              finite_examples=tf.where(finite, examples, 0),
              selected_keys=client.num_keys,
              rows_uploaded=num_rows,
              truncated_clients=tf.cast(
                  keys['distinct_tokens'] > tf.size(trained_rows), tf.int32),
              dropped_tokens=(keys[DROPPED_TOKENS] if keys_in_data
                              else dropped[0] // client_epochs),
              non_finite_clients=1 - tf.cast(finite, tf.int32)))

    @tff.tensorflow.computation(client_update.type_signature.result['stats'])
    def train_metrics(sums):
      return collections.OrderedDict(
          loss=tf.math.divide_no_nan(
              sums['loss_sum'], tf.cast(sums['finite_examples'], tf.float32)),
          num_examples=sums['num_examples'],
          selected_keys=sums['selected_keys'],
          rows_uploaded=sums['rows_uploaded'],
          truncated_clients=sums['truncated_clients'],
          dropped_tokens=sums['dropped_tokens'],
          non_finite_clients=sums['non_finite_clients'])

    @tff.federated_computation
    def initialize():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(
        initialize.type_signature.result,
        tff.FederatedType(self.weights_type, tff.SERVER),
        tff.FederatedType(self.data_type, tff.CLIENTS))
    def next_fn(state, weights, data):
      if keys_in_data:
        keys = tff.federated_zip(collections.OrderedDict(
            (name, getattr(data, name))
            for name, _ in tff.structure.iter_elements(keys_type)))
        batches = getattr(data, BATCHES)
      else:
        keys, batches = tff.federated_map(keys_fn, data), data
      rows = select(weights.trainable[0], keys.keys)
      outputs = tff.federated_map(client_update, (rows, keys, batches))
      measurements = tff.federated_zip(collections.OrderedDict(
          train=tff.federated_map(train_metrics,
                                  tff.federated_sum(outputs.stats))))
      return tff.templates.MeasuredProcessOutput(
          state=state, result=outputs.result, measurements=measurements)

    # Keys, selection and local training: the distribution depends on the
    # clients' data, so it is client work (see `tff_nlp.templates.partial_model_composer`).
    self.client_work = tff.templates.MeasuredProcess(initialize, next_fn)

    @tff.tensorflow.computation(update_type)
    def as_trainable(update):
      return [update]

    self.as_trainable = as_trainable

  def compose(self) -> tff.learning.templates.LearningProcess:
    return sparse.compose_partial_model_process(
        self.initial_weights, self.client_work, self.aggregator,
        self.finalizer, model_update_fn=self.as_trainable)


def _aggregation_factory(
    num_words: int, divisor, aggregation_factory
) -> tff.aggregators.UnweightedAggregationFactory:
  """The given factory of IndexedSlices, or the mean with `divisor`."""
  divisor = weighting_lib.parse_option(divisor, sparse.Divisor, 'divisor')
  if aggregation_factory is None:
    return sparse.IndexedSlicesMeanFactory(num_words, divisor)
  if divisor is not sparse.Divisor.CLIENTS:
    raise ValueError('divisor is the default aggregation\'s; with an '
                     'aggregation_factory, choose it in the factory.')
  return aggregation_factory


def build_sparse_tag_process(
    *,
    num_words: int,
    num_tags: int,
    max_keys: int,
    client_learning_rate: float,
    client_epochs: int = 1,
    server_learning_rate: float = 1.0,
    divisor: Union[str, sparse.Divisor] = sparse.Divisor.CLIENTS,
    aggregation_factory: Optional[
        tff.aggregators.UnweightedAggregationFactory] = None,
    keys_in_data: bool = False,
    block_size: int = 1,
) -> tff.learning.templates.LearningProcess:
  """Builds the partial-model (federated_select) tag learning process.

  Client data D are batches B = `<tokens=<indices=int64[?,2],values=int32[?],
  dense_shape=int64[2]>,tags=float32[?,T]>` (`tff_nlp.data.tags.to_dataset`),
  B*; with `keys_in_data`, `<keys=int32[M], num_keys=int32,
  distinct_tokens=int32, dropped_tokens=int32, batches=B*>`
  (`keyed_client_data`; the bags over the client's M * B local rows). The
  process (`tff_nlp.algorithms.partial_models.compose_partial_model_process`) has methods:

  *   `initialize`: `( -> S@SERVER)`, S a
      `tff.learning.templates.LearningAlgorithmState` whose
      `global_model_weights` are `ModelWeights(trainable=[float32[V,T]],
      non_trainable=[])`, all zeros; `aggregator` and `finalizer` hold the
      aggregator's and the server optimizer's states (threaded from round to
      round), the other parts are empty.
  *   `next`: `(<S@SERVER, {D}@CLIENTS> -> <state=S@SERVER,
      metrics=M@SERVER>)`, M = `<distributor=<>, client_work=<train=<loss,
      num_examples, selected_keys, rows_uploaded, truncated_clients,
      dropped_tokens, non_finite_clients>>, aggregator=<clients,
      rows_received, rows_touched>, finalizer=<update_non_finite>>`:
      `loss` is the example-weighted mean training loss, the counts are sums
      over the round's clients (`selected_keys`: real rows selected;
      `truncated_clients`: clients with words outside their keys; `dropped_tokens`: (example, word) entries of words not
      selected, per epoch). With an `aggregation_factory`, `aggregator` is
      its measurements.
  *   `get_model_weights`, `set_model_weights`.

  Args:
    num_words: V, word rows (vocabulary plus OOV buckets).
    num_tags: T, tag columns (vocabulary plus OOV buckets).
    max_keys: M, rows each client selects.
    client_learning_rate: SGD step size on the clients.
    client_epochs: Passes over each client's data per round.
    server_learning_rate: Server SGD step on the mean update (no momentum,
      see `tff_nlp.algorithms.partial_models.build_delta_finalizer`).
    divisor: 'clients' (TFF's tutorial) or 'touching_clients' (per row), the
      divisor of the default aggregation.
    aggregation_factory: The aggregation of the clients' IndexedSlices
      updates (`<indices=int64[?],values=float32[?,T]>`) into the mean
      update, IndexedSlices of the rows uploaded or a dense float32[V,T],
      e.g.
      `tff_nlp.algorithms.partial_models.IndexedSlicesClippingFactory` around
      `IndexedSlicesMeanFactory`; stateful ones keep their state
      between rounds. None: `IndexedSlicesMeanFactory(V, divisor)`.
    keys_in_data: Whether each client's data carries its keys and its
      batches already over its local rows (`keyed_client_data`, computed
      once per client) instead of the round finding the keys in a pass over
      the client's batches and mapping every batch to local ids. The rounds
      are the same; a pass over a client's data costs about as much as its
      training (`docs/results/federated_select.md`).
    block_size: B, word rows per key. With B > 1 each client selects the
      M blocks of B consecutive rows whose words occur in the most of its
      examples (`tff_nlp.algorithms.partial_models.top_blocks`), downloads M * B rows in M
      `federated_select` calls instead of one call per row, trains the rows
      of its words among them and uploads only those. With a vocabulary
      sorted by frequency a client's frequent words share blocks, so fewer
      keys cover them; the price is the rest of each block downloaded.

  Returns:
    A `tff.learning.templates.LearningProcess`.

  Raises:
    ValueError: For a non-positive size, rate or epoch count, an unknown
      divisor, or a divisor together with an `aggregation_factory`.
  """
  _check_positive(num_words=num_words, num_tags=num_tags, max_keys=max_keys,
                  client_learning_rate=client_learning_rate,
                  client_epochs=client_epochs,
                  server_learning_rate=server_learning_rate,
                  block_size=block_size)
  return _SparseParts(
      num_words=num_words, num_tags=num_tags, max_keys=max_keys,
      client_learning_rate=client_learning_rate, client_epochs=client_epochs,
      server_learning_rate=server_learning_rate,
      aggregation_factory=_aggregation_factory(
          num_words, divisor, aggregation_factory),
      keys_in_data=keys_in_data, block_size=block_size).compose()


def build_sparse_tag_round(
    *,
    num_words: int,
    num_tags: int,
    max_keys: int,
    client_learning_rate: float,
    client_epochs: int = 1,
    divisor: Union[str, sparse.Divisor] = sparse.Divisor.CLIENTS,
) -> tff.Computation:
  """One round as in TFF's tutorial: the model in, the new model out.

  The same round as `build_sparse_tag_process(...).next` (server learning
  rate 1) from a fresh state, without metrics, for users who compose their
  own loop.

  Args:
    num_words: V.
    num_tags: T.
    max_keys: M.
    client_learning_rate: SGD step size on the clients.
    client_epochs: Passes over each client's data per round.
    divisor: 'clients' or 'touching_clients'.

  Returns:
    A federated computation of type `(<server_model=float32[V,T]@SERVER,
    client_data={B*}@CLIENTS> -> float32[V,T]@SERVER)`, B as in
    `build_sparse_tag_process`.
  """
  _check_positive(num_words=num_words, num_tags=num_tags, max_keys=max_keys,
                  client_learning_rate=client_learning_rate,
                  client_epochs=client_epochs)
  parts = _SparseParts(
      num_words=num_words, num_tags=num_tags, max_keys=max_keys,
      client_learning_rate=client_learning_rate, client_epochs=client_epochs,
      server_learning_rate=1.0,
      aggregation_factory=_aggregation_factory(num_words, divisor, None))
  process = parts.compose()

  @tff.tensorflow.computation(process.initialize.type_signature.result.member,
                              parts.table_type)
  def with_table(state, table):
    return process.set_model_weights(state, tff.learning.models.ModelWeights(
        trainable=[table], non_trainable=[]))

  @tff.tensorflow.computation(process.initialize.type_signature.result.member)
  def table_of(state):
    return process.get_model_weights(state).trainable[0]

  @tff.federated_computation(
      tff.FederatedType(parts.table_type, tff.SERVER),
      tff.FederatedType(parts.data_type, tff.CLIENTS))
  def sparse_round(server_model, client_data):
    state = tff.federated_map(with_table,
                              (process.initialize(), server_model))
    return tff.federated_map(table_of,
                             process.next(state, client_data).state)

  return sparse_round


def build_dense_tag_process(
    *,
    num_words: int,
    num_tags: int,
    client_learning_rate: float,
    server_learning_rate: float = 1.0,
    client_outputs: bool = True,
) -> tff.learning.templates.LearningProcess:
  """FedAvg on the same tag model, every client with the whole matrix.

  The dense baseline of the sparse process: `build_fl_process` with
  `tag_regression.build_model_fn`, uniform client weights (the sparse
  process's `Divisor.CLIENTS`), client and server SGD. Client data are
  `(tokens, tags)` pairs (`tag_regression.as_keras_batches`).

  Args:
    num_words: V.
    num_tags: T.
    client_learning_rate: Client SGD step size.
    server_learning_rate: Server SGD step size (no momentum).
    client_outputs: Whether `next` also returns each client's outputs (an
      `FLProcess`, for the loop's records); False gives TFF's plain
      `LearningProcess`, which TFF's own wrappers (e.g.
      `tff.simulation.compose_dataset_computation_with_learning_process`)
      take.

  Returns:
    The process (see `build_fl_process` for its type signature).
  """
  _check_positive(num_words=num_words, num_tags=num_tags,
                  client_learning_rate=client_learning_rate,
                  server_learning_rate=server_learning_rate)
  return fl_process.build_fl_process(
      tag_regression.build_model_fn(num_words, num_tags),
      algorithm='fedavg', weighting='uniform',
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=client_learning_rate),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=server_learning_rate),
      client_outputs=client_outputs)
