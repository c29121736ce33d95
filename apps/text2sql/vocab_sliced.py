"""Vocabulary-sliced FedAvg for seq2seq models: clients move only their rows.

The partial-model technique of `tff_nlp.algorithms.partial_models` applied to
`tff_nlp.models.seq2seq.Seq2SeqTransformer`, whose one vocabulary-indexed
tensor is the tied token embedding / output projection `token_embedding`
[V, d]. Each client has a fixed sub-vocabulary (its *keys*): the M ids that
occur in the most of its training examples, with the special ids PAD, UNK,
START and END always included, so that they keep their ids locally. A round:

1. `tff.federated_select` sends each client the M embedding rows at its
   keys; the rest of the model is broadcast whole;
2. the client assembles a `Seq2SeqTransformer(vocabulary_size=M)` from them
   and trains it on its examples, already mapped to local ids
   (`local_examples`; ids outside its keys become UNK, counted), with the
   client work of `build_fl_process` (so any client optimizer);
3. it uploads the embedding update of its real rows as IndexedSlices and the
   rest of the update densely;
4. the server averages both over the clients that trained (uniform weights),
   puts the embedding mean (zero on rows nobody selected) back in place and
   applies the update with SGD, learning rate 1 (FedAvg): rows nobody
   selected keep their values.

The local softmax runs over the client's M tokens only, so a client's
gradient never pushes down the logits of tokens it does not have: with
M < V this is an approximation of FedAvg, not FedAvg (the benchmark in
`docs/results/federated_select.md` measures the accuracy difference).
"""

import collections
from collections.abc import Sequence
import dataclasses
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import partial_models as sparse
from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.aggregators import weighting as weighting_lib
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_model_fn

EMBEDDING_VARIABLE = 'token_embedding'
SPECIAL_IDS = (seq2seq.PAD_ID, seq2seq.UNK_ID, seq2seq.START_ID,
               seq2seq.END_ID)
KEYS = 'keys'
NUM_KEYS = 'num_keys'
TRAINING_DATA = 'training_data'
# The aggregator's part (state, measurements) of the embedding's rows.
EMBEDDING = 'embedding'


class SubVocabulary(NamedTuple):
  """A client's keys (ascending, padded with PAD) and how many are real."""

  keys: np.ndarray
  num_keys: int
  distinct_ids: int


def sub_vocabulary(id_arrays: Sequence[np.ndarray], *,
                   max_keys: int) -> SubVocabulary:
  """The M ids occurring in the most examples, the special ids always in.

  The top-keys rule of `tff_nlp.algorithms.partial_models.top_keys` (the tag task's), with the
  special ids counted in every example and once more, so they are chosen.

  Args:
    id_arrays: int arrays [N, L_i] of the same N examples (e.g. encoder ids,
      decoder ids, targets); 0 is padding.
    max_keys: M (at least the number of special ids).

  Returns:
    A `SubVocabulary`: int32 keys [M] in ascending order, then PAD; ties in
    example counts go to the smaller id.
  """
  if max_keys < len(SPECIAL_IDS):
    raise ValueError(f'max_keys must be >= {len(SPECIAL_IDS)} (the special '
                     f'ids), got {max_keys}.')
  counts = collections.Counter()
  num_examples = len(id_arrays[0])
  for row in range(num_examples):
    counts.update(set(np.concatenate([a[row] for a in id_arrays]).tolist()))
  counts.pop(seq2seq.PAD_ID, None)
  for special in SPECIAL_IDS:
    counts[special] = num_examples + 1  # Always selected.
  token_ids = sorted(counts)
  # PAD_ID is sparse.PAD_KEY (0): the keys are padded with PAD.
  keys = sparse.top_keys(
      tf.constant(token_ids, tf.int64),
      tf.constant([counts[i] for i in token_ids], tf.int64),
      max_keys=max_keys)
  return SubVocabulary(keys=keys.keys.numpy(), num_keys=int(keys.num_keys),
                       distinct_ids=len(counts))


def to_local_ids(ids: np.ndarray,
                 vocabulary: SubVocabulary) -> tuple[np.ndarray, int]:
  """Global ids as positions in the keys; unselected ids become UNK.

  Returns:
    `(local_ids, unknown)`: int32 ids of `ids`' shape and the number of
    non-padding ids that were not selected (now UNK).
  """
  local, found = sparse.to_local_ids(
      tf.constant(ids, tf.int64),
      sparse.ClientKeys(keys=tf.constant(vocabulary.keys, tf.int32),
                        num_keys=tf.constant(vocabulary.num_keys, tf.int32)))
  found = found.numpy()
  # The special ids are the smallest keys, so they keep their ids locally.
  local = np.where(found, local.numpy(), seq2seq.UNK_ID).astype(np.int32)
  return local, int(np.sum(~found & (ids != seq2seq.PAD_ID)))


def local_examples(x: dict[str, np.ndarray], y: np.ndarray, *,
                   max_keys: int):
  """A client's sub-vocabulary and its examples in local ids.

  Args:
    x: {encoder_token_ids, decoder_token_ids} int arrays [N, L].
    y: Target ids [N, L].
    max_keys: M.

  Returns:
    `(vocabulary, local_x, local_y, unknown)` with `unknown` the ids mapped
    to UNK because they were not selected.
  """
  vocabulary = sub_vocabulary(
      [x[seq2seq.ENCODER_TOKEN_IDS], x[seq2seq.DECODER_TOKEN_IDS], y],
      max_keys=max_keys)
  unknown = 0
  local_x = collections.OrderedDict()
  for name, ids in x.items():
    local_x[name], count = to_local_ids(np.asarray(ids), vocabulary)
    unknown += count
  local_y, count = to_local_ids(np.asarray(y), vocabulary)
  return vocabulary, local_x, local_y, unknown + count


def client_data(vocabulary: SubVocabulary,
                training_data: Any) -> collections.OrderedDict:
  """One client's data for the sliced process's `next`.

  Args:
    vocabulary: The client's `SubVocabulary`.
    training_data: Its batches in local ids (a `tf.data.Dataset`), or with
      `with_client_config` the output of `templates.with_client_config`.
  """
  return collections.OrderedDict([
      (KEYS, vocabulary.keys), (NUM_KEYS, np.int32(vocabulary.num_keys)),
      (TRAINING_DATA, training_data)])


def _embedding_index(model_fn) -> int:
  """Position of the token embedding among the model's trainable weights."""
  with tf.Graph().as_default():
    names = [v.name for v in model_fn().trainable_variables]
  matches = [i for i, n in enumerate(names) if EMBEDDING_VARIABLE in n]
  if len(matches) != 1:
    raise ValueError(f'Expected one {EMBEDDING_VARIABLE!r} variable, found '
                     f'{[names[i] for i in matches]}.')
  return matches[0]


def build_vocab_sliced_process(
    config: seq2seq.Seq2SeqConfig,
    *,
    max_keys: int,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    with_client_config: bool = False,
    dense_aggregation_factory: Optional[
        tff.aggregators.WeightedAggregationFactory] = None,
    embedding_aggregation_factory: Optional[
        tff.aggregators.UnweightedAggregationFactory] = None,
) -> tff.learning.templates.LearningProcess:
  """Builds vocabulary-sliced FedAvg (uniform client weights) for seq2seq.

  Client data D = `<keys=int32[M],num_keys=int32,training_data=E>`
  (`client_data`), with E = `B*`, B the `(x, y)` batches of
  `seq2seq_inputs.input_spec` in local ids (`local_examples`), or with
  `with_client_config` E = `<examples=B*,config=<learning_rate=float32,
  num_epochs=int32>*>` (`templates.with_client_config`). The process
  (`tff_nlp.algorithms.partial_models.compose_partial_model_process`):

  *   `initialize`: `( -> S@SERVER)`, a `LearningAlgorithmState` whose
      `global_model_weights` are those of
      `seq2seq_model_fn.build_model_fn(config)`,
      `aggregator` = `<dense=A_d, embedding=A_e>` the two aggregators'
      states (threaded from round to round).
  *   `next`: `(<S@SERVER, {D}@CLIENTS> -> <state=S@SERVER,
      metrics=<distributor=<>, client_work=<train=X, weighting=W>,
      aggregator=<dense=M_d, embedding=M_e>, finalizer=<update_non_finite>>
      @SERVER>)`; X and W as in `build_fl_process`; by default M_d = `<>`
      and M_e = `<clients, rows_received, rows_touched>`.

  Args:
    config: The global model (vocabulary V).
    max_keys: M, rows of the embedding each client selects (< V saves
      bandwidth; each client's sub-vocabulary should fit).
    client_optimizer_fn: The client optimizer.
    with_client_config: Whether clients carry their own learning rate and
      epochs, as in `build_fl_process`.
    dense_aggregation_factory: The weighted aggregation of every tensor but
      the embedding (any TFF factory, e.g. `tff.learning.robust_aggregator`
      or `tff.learning.dp_aggregator`). None: `tff.aggregators.MeanFactory()`.
    embedding_aggregation_factory: The aggregation of the embedding's
      IndexedSlices `<indices=int64[?],values=float32[?,d]>` into the
      embedding's update, IndexedSlices of its rows (made [V, d] for the
      server optimizer) or a dense [V, d] (a factory of IndexedSlices, see
      `tff_nlp.algorithms.partial_models`).
      None: `tff_nlp.algorithms.partial_models.IndexedSlicesMeanFactory(V)`.

  Returns:
    A `tff.learning.templates.LearningProcess`.
  """
  if not len(SPECIAL_IDS) <= max_keys <= config.vocabulary_size:
    raise ValueError(f'max_keys must be in [{len(SPECIAL_IDS)}, '
                     f'{config.vocabulary_size}], got {max_keys}.')
  if dense_aggregation_factory is None:
    dense_aggregation_factory = tff.aggregators.MeanFactory()
  if embedding_aggregation_factory is None:
    embedding_aggregation_factory = sparse.IndexedSlicesMeanFactory(
        config.vocabulary_size)
  global_model_fn = seq2seq_model_fn.build_model_fn(config)
  local_model_fn = seq2seq_model_fn.build_model_fn(
      dataclasses.replace(config, vocabulary_size=max_keys))

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(global_model_fn())

  weights_type = initial_weights.type_signature.result
  index = _embedding_index(global_model_fn)
  embedding_type = weights_type.trainable[index]
  client_work = client_work_lib.build_weighted_client_work(
      local_model_fn, optimizer=client_optimizer_fn,
      weighting=weighting_lib.Weighting.UNIFORM,
      with_client_config=with_client_config)
  select = sparse.build_row_selection(embedding_type, max_keys=max_keys)
  rest_type = [t for i, t in enumerate(weights_type.trainable) if i != index]
  aggregator = sparse.build_split_aggregator(
      dense=dense_aggregation_factory.create(tff.types.to_type(rest_type),
                                             tff.TensorType(np.float32)),
      sparse={EMBEDDING: embedding_aggregation_factory.create(
          sparse.indexed_slices_type(embedding_type.shape[1:]))})
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(learning_rate=1.0), weights_type)
  data_type = tff.StructWithPythonType([
      (KEYS, tff.TensorType(np.int32, [max_keys])),
      (NUM_KEYS, tff.TensorType(np.int32)),
      (TRAINING_DATA, client_work.next.type_signature.parameter[2].member),
  ], collections.OrderedDict)

  @tff.tensorflow.computation(weights_type)
  def embedding_of(weights):
    return weights.trainable[index]

  @tff.tensorflow.computation(weights_type)
  def without_embedding(weights):
    # The embedding travels by federated_select; broadcast an empty
    # placeholder of no bytes in its place.
    trainable = list(weights.trainable)
    trainable[index] = tf.zeros([0] + list(embedding_type.shape[1:]),
                                embedding_type.dtype)
    return tff.learning.models.ModelWeights(
        trainable=trainable, non_trainable=list(weights.non_trainable))

  @tff.tensorflow.computation(
      without_embedding.type_signature.result,
      tff.TensorType(embedding_type.dtype,
                     [max_keys] + list(embedding_type.shape[1:])))
  def assemble(weights, rows):
    trainable = list(weights.trainable)
    trainable[index] = rows
    return tff.learning.models.ModelWeights(
        trainable=trainable, non_trainable=list(weights.non_trainable))

  update_type = client_work.next.type_signature.result.result.member

  @tff.tensorflow.computation(update_type, np.int32,
                              tff.TensorType(np.int32, [max_keys]))
  def split_update(result, num_keys, keys):
    update = list(result.update)
    # A client with weight 0 (no data, or a non-finite update) sends no
    # rows, so it counts in neither average.
    rows = tf.where(result.update_weight > 0, num_keys, 0)
    return collections.OrderedDict(
        update=collections.OrderedDict([
            (sparse.DENSE, [u for i, u in enumerate(update) if i != index]),
            (EMBEDDING, collections.OrderedDict(
                indices=tf.cast(keys[:rows], tf.int64),
                values=update[index][:rows]))]),
        update_weight=result.update_weight)

  @tff.federated_computation(
      client_work.initialize.type_signature.result,
      tff.FederatedType(weights_type, tff.SERVER),
      tff.FederatedType(data_type, tff.CLIENTS))
  def sliced_client_work(state, weights, data):
    keys = getattr(data, KEYS)
    rows = select(tff.federated_map(embedding_of, weights), keys)
    local_weights = tff.federated_map(assemble, (
        tff.federated_broadcast(tff.federated_map(without_embedding,
                                                  weights)), rows))
    work = client_work.next(state, local_weights,
                            getattr(data, TRAINING_DATA))
    split = tff.federated_map(
        split_update, (work.result, getattr(data, NUM_KEYS), keys))
    return tff.templates.MeasuredProcessOutput(
        state=work.state, result=split, measurements=work.measurements)

  aggregated_type = aggregator.next.type_signature.result.result.member
  # The tff_nlp.algorithms.partial_models aggregators return the embedding's mean as
  # IndexedSlices of the rows uploaded; TFF's server optimizer (the
  # finalizer) takes the whole [V, d] update.
  embedding_is_slices = sparse.is_indexed_slices_type(
      aggregated_type[EMBEDDING])

  @tff.tensorflow.computation(aggregated_type)
  def combine(aggregated):
    update = list(aggregated[sparse.DENSE])
    embedding = aggregated[EMBEDDING]
    if embedding_is_slices:
      embedding = sparse.to_dense(embedding, config.vocabulary_size)
    update.insert(index, embedding)
    return update

  return sparse.compose_partial_model_process(
      initial_weights,
      tff.templates.MeasuredProcess(client_work.initialize,
                                    sliced_client_work),
      aggregator, finalizer, model_update_fn=combine)
