"""Federated continual text classification: local, FedAvg, FedProx, FedWeIT,
FedSeIT and FedSeIT with SIT, as TFF computations with stateful clients.

References:
  Jaehong Yoon, Wonyong Jeong, Giwoong Lee, Eunho Yang, Sung Ju Hwang.
  Federated Continual Learning with Weighted Inter-client Transfer. ICML 2021.
  Yatin Chaudhary, Pranav Rai, Matthias Schubert, Hinrich Schütze, Pankaj
  Gupta. Federated Continual Learning for Text Classification via Selective
  Inter-client Transfer. Findings of EMNLP 2022 (arXiv 2210.06101).
  The method as implemented, and every deviation from the released code, is
  in ../shared/docs/fedseit_spec.md; docs/algorithms.md summarises it.

Setting (spec §1): C clients each learn T tasks in lockstep; every client
takes part in every round; a task gets R rounds. A client's past tasks'
parameters (masks, task-adaptive weights, heads, ...) never leave it: they
live in its `ClientState`, which the computations take and return
(CLIENTS-placed), like `tff_nlp.algorithms.dynamic_pulling`.

Methods (`METHODS`) and the model each trains (`tff_nlp.models.fcl_cnn`):

*   'local': the plain text CNN, trained by each client alone (no server).
*   'fedavg': the plain CNN; the server averages the kernels (and, on the
    first task, the word embedding), weighted by the clients' training-set
    sizes; heads stay local.
*   'fedprox': as 'fedavg' with the proximal term (μ/2)‖w − w_server‖² on
    the averaged weights (a real FedProx, unlike the code's, spec §9.11).
*   'fedweit': decomposed kernels B ⊙ σ(m_t) + A_t + Σ_k α_k KB_k; the server
    averages B and keeps a store of every client's latest pruned A_t; at the
    start of task t a client receives the A's of the other clients' task
    t − 1 as its knowledge base (own A's too with `kb_include_own`, the
    authors' code, spec §9.6).
*   'fedseit': decomposed local kernels and the segregated foreign branch
    (same KB as FedWeIT) with alignment and augmentation projections.
*   'fedseit_sit': FedSeIT whose KB is the top-K stored A's of foreign
    (client, task)s ranked by the overlap of task representations that the
    clients send once per task (`tff_nlp.algorithms.sit`); α starts at the
    normalised scores.

The word embedding is trained (federated, except for 'local') on the first
task and frozen afterwards: it stands in for the paper's frozen GloVe, and it
gives SIT a fixed embedding space for its document vectors.

Computations of an `FclProcess` (C client states `{C}@CLIENTS`):

*   `initialize: ( -> S@SERVER)`, and `initial_client_state: (<S, int32> ->
    C)` (a TF computation of the server state and the client's id c: every
    client starts from the server's initial model).
*   `start_task: <S@SERVER, {TaskStart}@CLIENTS, {C}@CLIENTS> ->
    <state=S@SERVER, client_states={C}@CLIENTS, metrics=M@SERVER>`, once at
    the start of every task: the server broadcasts the word embedding and
    sends each client its knowledge base with `tff.federated_select` (SIT:
    after ranking the stored A's by the representations the clients just
    sent, each client receiving only its own row of the selection, again by
    `tff.federated_select`); each client snapshots θ*_j = B ⊙ σ(m_j) + A_j of its past tasks
    (the drift term's targets), sets A_t = B/5, writes the KB (and SIT's
    initial α) and resets its optimizer.
*   `next_first_task` (the rounds of task 0, sharing the embedding) and
    `next` (later rounds): `<S@SERVER, {D}@CLIENTS, {C}@CLIENTS> ->
    <state=S@SERVER, client_states={C}@CLIENTS, metrics=M@SERVER>`. The
    server broadcasts the shared weights; each client trains `local_epochs`
    epochs of Adam on cross-entropy + the regularisers
    (`fcl_cnn.regularization`, FedProx's term) and sends its shared weights
    (weighted by its training-set size) and its pruned A_t with its slot; a
    client whose loss or weights are not finite keeps its state from before
    the round (its shared weights being the broadcast ones), sends weight 0
    and zeros, so it cannot poison the model. The server averages the
    shared weights over the clients with weight > 0 (keeping them if none)
    and stores the A's.

What leaves a client: its shared weights (B, or the plain kernels; the
embedding on the first task) and training-set size; its pruned A_t and
slot (decomposed methods); its task representation, a few hundred mean word
vectors (SIT); summed round statistics. Masks, attention, past A's, heads
and data stay on the client.
"""

import collections
import dataclasses
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms import batch_loop
from tff_nlp.algorithms import optimizers as optimizers_lib
from tff_nlp.algorithms import sit as sit_lib
from tff_nlp.models import dropout_seeds
from tff_nlp.models import fcl_cnn

METHODS = ('local', 'fedavg', 'fedprox', 'fedweit', 'fedseit', 'fedseit_sit')
_ARCHITECTURE = {
    'local': 'plain', 'fedavg': 'plain', 'fedprox': 'plain',
    'fedweit': 'fedweit', 'fedseit': 'fedseit', 'fedseit_sit': 'fedseit',
}
# FedWeIT's initialisation of a new task's adaptive weights: A_t = B / 5
# (the FedSeIT code; official FedWeIT uses B / 3), spec §3.
ADAPTIVE_INIT_DIVISOR = 5.0
_BYTES_PER_FLOAT = 4


@dataclasses.dataclass(frozen=True)
class FclConfig:
  """A federated continual-learning method and its hyperparameters.

  Attributes:
    method: One of `METHODS`.
    num_clients: C.
    tasks_per_client: T.
    learning_rate: Adam's learning rate (reset at every task, kept across
      the task's rounds).
    local_epochs: Epochs over the task's training data per round.
    sparsity: λ1, the L1 weight on the A's and FedSeIT's local dense
      weights, and the pruning threshold of uploaded / evaluated A's.
    drift: λ2, the weight of the drift (forgetting) term.
    weight_decay: wd, ½‖·‖² on m_t, A_t, B (first task) and local dense
      weights (plain models: on the kernels).
    proximal_strength: FedProx's μ.
    foreign_branch: FedSeIT's segregated foreign branch (False: the
      ablation without foreign knowledge).
    kb_include_own: Whether a client's own A's are in its KB (the authors'
      code) or only foreign ones (the papers; the default).
    sit_top_k: K of SIT.
    sit_threshold: τ of SIT's rectified-linear score.
    sit_score: One of `sit.METHODS`.
    sit_max_vectors: Rows of a task representation (k-means clusters).
  """

  method: str
  num_clients: int
  tasks_per_client: int
  learning_rate: float = 1e-3
  local_epochs: int = 1
  sparsity: float = 1e-3
  drift: float = 1.0
  weight_decay: float = 1e-4
  proximal_strength: float = 0.01
  foreign_branch: bool = True
  kb_include_own: bool = False
  sit_top_k: int = 3
  sit_threshold: float = 0.7
  sit_score: str = 'rectified_linear'
  sit_max_vectors: int = 200

  def __post_init__(self):
    if self.method not in METHODS:
      raise ValueError(f'method must be one of {METHODS}, got '
                       f'{self.method!r}.')
    for name in ('num_clients', 'tasks_per_client', 'local_epochs',
                 'sit_top_k', 'sit_max_vectors'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)}.')
    if self.method == 'fedseit_sit' and not self.foreign_branch:
      raise ValueError('fedseit_sit needs foreign_branch=True (SIT selects '
                       'the foreign branch\'s knowledge base).')

  @property
  def architecture(self) -> str:
    return _ARCHITECTURE[self.method]

  @property
  def federated(self) -> bool:
    return self.method != 'local'

  @property
  def uses_sit(self) -> bool:
    return self.method == 'fedseit_sit'

  @property
  def kb_size(self) -> int:
    """K: SIT's top-K, else one entry per (other) client."""
    if self.architecture == 'plain':
      return 0
    if self.uses_sit:
      return self.sit_top_k
    return self.num_clients if self.kb_include_own else self.num_clients - 1

  @property
  def num_slots(self) -> int:
    return self.num_clients * self.tasks_per_client


def model_spec(config: FclConfig, *, vocab_size: int, max_length: int,
               num_classes: int, **kwargs) -> fcl_cnn.FclCnnSpec:
  """The `FclCnnSpec` of `config`'s method; kwargs set its other fields."""
  return fcl_cnn.FclCnnSpec(
      vocab_size=vocab_size, max_length=max_length,
      num_tasks=config.tasks_per_client, num_classes=num_classes,
      architecture=config.architecture, kb_size=config.kb_size,
      foreign_branch=config.foreign_branch, **kwargs)


class ClientState(NamedTuple):
  """What a client keeps between rounds and tasks (it never leaves it).

  Attributes:
    client_id: The client's index c, which names its slots c·T + t.
    weights: Every model weight, `fcl_cnn.weight_keys` -> value.
    snapshots: Per filter bank, θ* `[T, w, D, N]`: each past task's local
      kernel when the current task started (decomposed models; else empty).
    optimizer: Adam's state over the trainable weights (reset per task).
    task: The current task index.
  """

  client_id: Any
  weights: Any
  snapshots: Any
  optimizer: Any
  task: Any


class ServerState(NamedTuple):
  """The server's state.

  Attributes:
    shared: The federated weights (`fcl_cnn.shared_keys`).
    adaptive_store: Per filter bank, the latest pruned A of every (client,
      task) slot, `[C·T, w, D, N]` (decomposed methods; else empty).
    stored: bool `[C·T]`, the slots holding an A.
    representations: SIT's task representations `[C·T, R, D]` (other
      methods: `[C·T, 1, 1]` zeros).
    representation_counts: int32 `[C·T]`, rows of each.
    task: The current task index (-1 before the first `start_task`).
    round_num: Rounds run.
  """

  shared: Any
  adaptive_store: Any
  stored: Any
  representations: Any
  representation_counts: Any
  task: Any
  round_num: Any


class RoundOutput(NamedTuple):
  """The result of `start_task` and of a round."""

  state: Any
  client_states: Any
  metrics: Any


# Keys of `start_task`'s client input (`task_start_input`).
TASK = 'task'
REPRESENTATIONS = 'representations'
REPRESENTATION_COUNTS = 'representation_counts'
REPRESENTATION_TASKS = 'representation_tasks'
# At a task start a client sends the representations of at most two tasks:
# its new task's and, at task 1, task 0's (the embedding they are computed
# with is learned on task 0).
MAX_NEW_REPRESENTATIONS = 2
# A client's knowledge-base selection: slots, initial α, whether filled.
_SELECTION_KEYS = ('keys', 'alphas', 'valid')


@dataclasses.dataclass(frozen=True)
class FclProcess:
  """The computations of a federated continual-learning method.

  See the module docstring for their type signatures.
  """

  config: FclConfig
  spec: fcl_cnn.FclCnnSpec
  initialize: tff.Computation
  initial_client_state: tff.Computation
  start_task: tff.Computation
  next_first_task: tff.Computation
  next: tff.Computation

  def round_computation(self, task: int) -> tff.Computation:
    """The round computation for task `task` (the embedding trains on 0)."""
    return self.next_first_task if task == 0 else self.next

  def task_start_input(self, task: int, representations=None,
                       representation_tasks=()) -> collections.OrderedDict:
    """A client's input to `start_task`.

    Args:
      task: The task starting.
      representations: SIT: up to two `[rows, D]` arrays (task
        representations, `sit.task_representation`) to send.
      representation_tasks: The task index of each.

    Returns:
      An OrderedDict of numpy values of `start_task`'s client input type.
    """
    rows = self.config.sit_max_vectors if self.config.uses_sit else 1
    dim = self.spec.embedding_dim if self.config.uses_sit else 1
    vectors = np.zeros([MAX_NEW_REPRESENTATIONS, rows, dim], np.float32)
    counts = np.zeros([MAX_NEW_REPRESENTATIONS], np.int32)
    tasks = np.zeros([MAX_NEW_REPRESENTATIONS], np.int32)
    representations = list(representations or [])
    if len(representations) > MAX_NEW_REPRESENTATIONS or len(
        representations) != len(representation_tasks):
      raise ValueError(
          f'Expected at most {MAX_NEW_REPRESENTATIONS} representations, one '
          f'per entry of representation_tasks; got {len(representations)} '
          f'and {len(representation_tasks)}.')
    if representations and not self.config.uses_sit:
      raise ValueError(f'method {self.config.method!r} sends no task '
                       'representations (only fedseit_sit does).')
    for i, (rep, t) in enumerate(zip(representations, representation_tasks)):
      padded, count = sit_lib.pad_representation(np.asarray(rep), rows)
      vectors[i], counts[i], tasks[i] = padded, count, t
    return collections.OrderedDict([
        (TASK, np.int32(task)), (REPRESENTATIONS, vectors),
        (REPRESENTATION_COUNTS, counts), (REPRESENTATION_TASKS, tasks)])


def _trainable_keys(spec: fcl_cnn.FclCnnSpec) -> tuple[str, ...]:
  kb = set(fcl_cnn.kb_keys(spec))
  return tuple(k for k in fcl_cnn.weight_keys(spec) if k not in kb)


def _initial_optimizer_state(optimizer, weights, keys):
  state = optimizer.initialize(
      tuple(tf.TensorSpec(weights[k].shape, tf.float32) for k in keys))
  # Python numbers become tensors so that the state has a TFF type.
  return tf.nest.map_structure(tf.convert_to_tensor, state)


def _as_loop_state(optimizer_state):
  """Optimizer state with tuples for lists: `tf.data` would pack a list of
  differently shaped tensors into one tensor."""
  return collections.OrderedDict(
      (k, tuple(v) if isinstance(v, (list, tuple)) else v)
      for k, v in optimizer_state.items())


def _per_client(byte_counts, num_clients):
  """Summed int64 byte counts -> float64 means per client."""
  return collections.OrderedDict(
      (k, tf.cast(v, tf.float64) / num_clients)
      for k, v in byte_counts.items())


def _set_task_slice(tensor, task, value):
  """`tensor[task] = value` for a tensor with a leading task axis."""
  return tf.tensor_scatter_nd_update(tensor, [[task]], value[None])


def _num_bytes(shape) -> int:
  return int(np.prod(shape)) * _BYTES_PER_FLOAT


def _slot_aggregation(value_type, num_slots: int):
  """`tff.federated_aggregate` parts that gather per-slot uploads.

  A client's upload is `OrderedDict(slots=int32[n], sent=bool[n],
  values=...)` with leaves of leading size n; the result holds, per leaf,
  a `[num_slots, ...]` store with the sent values at their slots, and
  `received` (bool `[num_slots]`). Each client writes only its own slots, so
  partial stores are disjoint and merge by addition.
  """
  values_type = value_type['values']

  @tff.tensorflow.computation
  def zero():
    return collections.OrderedDict(
        values=tf.nest.map_structure(
            lambda t: tf.zeros((num_slots,) + tuple(t.shape[1:]), t.dtype),
            tff.types.type_to_tf_tensor_specs(values_type)),
        received=tf.zeros([num_slots], tf.bool))

  store_type = zero.type_signature.result

  @tff.tensorflow.computation(store_type, value_type)
  def accumulate(store, upload):
    indices = tf.boolean_mask(upload['slots'], upload['sent'])[:, None]
    values = tf.nest.map_structure(
        lambda s, v: tf.tensor_scatter_nd_update(
            s, indices, tf.boolean_mask(v, upload['sent'])),
        store['values'], upload['values'])
    received = tf.tensor_scatter_nd_update(
        store['received'], indices,
        tf.ones(tf.shape(indices)[:1], tf.bool))
    return collections.OrderedDict(values=values, received=received)

  @tff.tensorflow.computation(store_type, store_type)
  def merge(a, b):
    return collections.OrderedDict(
        values=tf.nest.map_structure(tf.add, a['values'], b['values']),
        received=tf.logical_or(a['received'], b['received']))

  @tff.tensorflow.computation(store_type)
  def report(store):
    return store

  return zero, accumulate, merge, report


def build_fcl_process(config: FclConfig, spec: fcl_cnn.FclCnnSpec
                      ) -> FclProcess:
  """Builds the computations of `config.method` for `spec`'s model.

  Args:
    config: The method and its hyperparameters.
    spec: The model, from `model_spec(config, ...)`.

  Returns:
    An `FclProcess`; the round computations take each client's training
    data as a dataset of `(token_ids int32 [B, L], labels int32 [B])`
    batches (`batch_spec`).

  Raises:
    ValueError: If `spec` is not the model of `config`'s method.
  """
  if (spec.architecture, spec.kb_size, spec.num_tasks) != (
      config.architecture, config.kb_size, config.tasks_per_client):
    raise ValueError(
        f'spec (architecture {spec.architecture!r}, kb_size {spec.kb_size}, '
        f'num_tasks {spec.num_tasks}) is not the model of method '
        f'{config.method!r} (architecture {config.architecture!r}, kb_size '
        f'{config.kb_size}, num_tasks {config.tasks_per_client}); build it '
        'with model_spec(config, ...).')
  num_clients, num_tasks = config.num_clients, config.tasks_per_client
  num_slots = config.num_slots
  optimizer = tff.learning.optimizers.build_adam(config.learning_rate)
  trainable = _trainable_keys(spec)
  shared = fcl_cnn.shared_keys(spec)
  adaptive = fcl_cnn.adaptive_keys(spec)
  kb = fcl_cnn.kb_keys(spec)
  attention = fcl_cnn.attention_keys(spec)
  widths = spec.filter_widths
  sit_rows = config.sit_max_vectors if config.uses_sit else 1
  sit_dim = spec.embedding_dim if config.uses_sit else 1
  kb_size = config.kb_size

  def new_model():
    return fcl_cnn.FclTextCnn(spec)

  with tf.Graph().as_default():
    shapes = {k: tuple(v.shape) for k, v in new_model().weight_dict().items()}
  bank_shapes = [shapes[f'conv{w}/base'] for w in widths]
  adaptive_bytes = sum(_num_bytes(s) for s in bank_shapes) if adaptive else 0
  embedding_bytes = _num_bytes(shapes['embedding'])

  # ---- initial values ----------------------------------------------------

  @tff.tensorflow.computation
  def initial_server_state():
    weights = new_model().weight_dict()
    return ServerState(
        shared=collections.OrderedDict(
            (k, tf.identity(weights[k])) for k in shared),
        adaptive_store=[tf.zeros((num_slots,) + s) for s in bank_shapes]
        if adaptive else [],
        stored=tf.zeros([num_slots], tf.bool),
        representations=tf.zeros([num_slots, sit_rows, sit_dim]),
        representation_counts=tf.zeros([num_slots], tf.int32),
        task=tf.constant(-1, tf.int32),
        round_num=tf.constant(0, tf.int32))

  server_type = initial_server_state.type_signature.result
  shared_type = server_type.shared

  @tff.federated_computation
  def initialize():
    return tff.federated_eval(initial_server_state, tff.SERVER)

  @tff.tensorflow.computation(server_type, np.int32)
  def initial_client_state(server_state, client_id):
    weights = collections.OrderedDict(
        (k, tf.identity(server_state.shared[k]) if k in shared
         else tf.identity(v))
        for k, v in new_model().weight_dict().items())
    snapshots = ([tf.zeros((num_tasks,) + s) for s in bank_shapes]
                 if spec.decomposed else [])
    return ClientState(
        client_id=client_id, weights=weights, snapshots=snapshots,
        optimizer=_initial_optimizer_state(optimizer, weights, trainable),
        task=tf.constant(-1, tf.int32))

  client_type = initial_client_state.type_signature.result

  # ---- start of a task ---------------------------------------------------

  start_input_type = tff.StructWithPythonType(
      [(TASK, np.int32),
       (REPRESENTATIONS, tff.TensorType(
           np.float32, [MAX_NEW_REPRESENTATIONS, sit_rows, sit_dim])),
       (REPRESENTATION_COUNTS, tff.TensorType(
           np.int32, [MAX_NEW_REPRESENTATIONS])),
       (REPRESENTATION_TASKS, tff.TensorType(
           np.int32, [MAX_NEW_REPRESENTATIONS]))],
      collections.OrderedDict)

  @tff.tensorflow.computation(server_type)
  def next_task(state):
    return state._replace(task=state.task + 1)

  @tff.tensorflow.computation(server_type)
  def embedding_of(state):
    return state.shared['embedding']

  @tff.tensorflow.computation(client_type, start_input_type)
  def representation_upload(client, inputs):
    counts = inputs[REPRESENTATION_COUNTS]
    return collections.OrderedDict(
        slots=client.client_id * num_tasks + inputs[REPRESENTATION_TASKS],
        sent=counts > 0,
        values=collections.OrderedDict(vectors=inputs[REPRESENTATIONS],
                                       counts=counts))

  rep_aggregation = _slot_aggregation(
      representation_upload.type_signature.result, num_slots)

  @tff.tensorflow.computation(client_type, start_input_type)
  def no_selection(client, inputs):
    del client, inputs
    return collections.OrderedDict(
        keys=tf.zeros([0], tf.int32), alphas=tf.zeros([0]),
        valid=tf.zeros([0], tf.bool))

  if kb and not config.uses_sit:
    @tff.tensorflow.computation(client_type, start_input_type)
    def foreign_selection(client, inputs):
      """FedWeIT / FedSeIT: the other clients' slots of task t − 1."""
      task = inputs[TASK]
      if config.kb_include_own:
        clients = tf.range(num_clients)
      else:
        others = tf.range(num_clients - 1)
        clients = tf.where(others < client.client_id, others, others + 1)
      valid = tf.fill([kb_size], task > 0)
      keys = tf.where(valid, clients * num_tasks + task - 1,
                      tf.zeros([kb_size], tf.int32))
      return collections.OrderedDict(keys=keys, alphas=tf.zeros([kb_size]),
                                     valid=valid)

    selection_type = foreign_selection.type_signature.result
  elif kb:
    selection_type = tff.StructWithPythonType([
        ('keys', tff.TensorType(np.int32, [kb_size])),
        ('alphas', tff.TensorType(np.float32, [kb_size])),
        ('valid', tff.TensorType(np.bool_, [kb_size]))],
        collections.OrderedDict)
  else:
    selection_type = no_selection.type_signature.result

  if config.uses_sit:
    @tff.tensorflow.computation(server_type, rep_aggregation[0].type_signature
                                .result)
    def sit_selection(state, received):
      """Stores the new representations; top-K slots for every client."""
      new = received['received']
      vectors = tf.where(new[:, None, None], received['values']['vectors'],
                         state.representations)
      counts = tf.where(new, received['values']['counts'],
                        state.representation_counts)
      rows = []
      for client in range(num_clients):
        query = client * num_tasks + state.task
        scores = sit_lib.overlap_score(
            vectors[query], counts[query], vectors, counts,
            method=config.sit_score, threshold=config.sit_threshold)
        candidates = sit_lib.candidate_mask(
            num_clients, num_tasks, client, state.task, state.stored,
            include_own=config.kb_include_own)
        rows.append(sit_lib.select_top_k(scores, candidates, kb_size))
      selection = collections.OrderedDict(
          keys=tf.stack([r[0] for r in rows]),
          alphas=tf.stack([r[1] for r in rows]),
          valid=tf.stack([r[2] for r in rows]))
      return collections.OrderedDict(
          state=state._replace(representations=vectors,
                               representation_counts=counts),
          selection=selection)

    selections_type = sit_selection.type_signature.result['selection']

    @tff.tensorflow.computation(selections_type, np.int32)
    def selection_row(selections, client_id):
      # A tuple: a sequence of OrderedDicts would reach the client with its
      # components in another (sorted) order.
      return tuple(selections[k][client_id] for k in _SELECTION_KEYS)

    @tff.tensorflow.computation(client_type)
    def own_key(client):
      return tf.reshape(client.client_id, [1])

    @tff.tensorflow.computation(tff.SequenceType(
        selection_row.type_signature.result))
    def only_row(rows):
      return collections.OrderedDict(
          zip(_SELECTION_KEYS, rows.get_single_element()))

  @tff.tensorflow.computation(selection_type)
  def keys_of(selection):
    return selection['keys']

  @tff.tensorflow.computation(server_type)
  def adaptive_store_of(state):
    return state.adaptive_store

  if adaptive:
    @tff.tensorflow.computation(server_type.adaptive_store, np.int32)
    def select_adaptive(store, key):
      return [bank[key] for bank in store]

    kb_sequence_type = tff.SequenceType(
        select_adaptive.type_signature.result)
  else:
    kb_sequence_type = None

  def begin_task_body(client, embedding, kb_values, selection, inputs):
    task = inputs[TASK]
    weights = collections.OrderedDict(client.weights)
    if embedding is not None:
      weights['embedding'] = embedding
    snapshots = list(client.snapshots)
    if spec.decomposed:
      snapshots = fcl_cnn.local_kernels(weights, spec)
      for key, width in zip(adaptive, widths):
        weights[key] = _set_task_slice(
            weights[key], task,
            weights[f'conv{width}/base'] / ADAPTIVE_INIT_DIVISOR)
    if kb:
      values = kb_values.batch(kb_size).get_single_element()
      valid = tf.cast(selection['valid'], tf.float32)
      for key, value in zip(kb, values):
        # `batch` leaves the KB's first dimension unknown; the state's is K.
        weights[key] = tf.ensure_shape(value * valid[:, None, None, None],
                                       client.weights[key].shape)
      if config.uses_sit:
        for key in attention:
          weights[key] = _set_task_slice(
              weights[key], task,
              tf.where(selection['valid'], selection['alphas'],
                       weights[key][task]))
    return ClientState(
        client_id=client.client_id, weights=weights, snapshots=snapshots,
        optimizer=_initial_optimizer_state(optimizer, weights, trainable),
        task=task)

  embedding_type = shared_type['embedding']
  if kb:
    @tff.tensorflow.computation(client_type, embedding_type, kb_sequence_type,
                                selection_type, start_input_type)
    def begin_task(client, embedding, kb_values, selection, inputs):
      return begin_task_body(client, embedding, kb_values, selection, inputs)
  elif config.federated:
    @tff.tensorflow.computation(client_type, embedding_type, start_input_type)
    def begin_task(client, embedding, inputs):
      return begin_task_body(client, embedding, None, None, inputs)
  else:
    @tff.tensorflow.computation(client_type, start_input_type)
    def begin_task(client, inputs):
      return begin_task_body(client, None, None, None, inputs)

  @tff.tensorflow.computation(selection_type,
                              representation_upload.type_signature.result)
  def start_stats(selection, upload):
    num_kb = tf.reduce_sum(tf.cast(selection['valid'], tf.int64))
    num_vectors = tf.reduce_sum(tf.cast(upload['values']['counts'],
                                        tf.int64))
    down = collections.OrderedDict(
        embedding=tf.constant(embedding_bytes if config.federated else 0,
                              tf.int64),
        knowledge_base=num_kb * adaptive_bytes)
    up = collections.OrderedDict(
        representations=(num_vectors * sit_dim * _BYTES_PER_FLOAT
                         if config.uses_sit else tf.constant(0, tf.int64)))
    return collections.OrderedDict(
        num_clients=tf.constant(1, tf.int64),
        bytes_down=tf.add_n(list(down.values())),
        bytes_up=tf.add_n(list(up.values())),
        bytes_down_by_part=down, bytes_up_by_part=up,
        kb_entries=num_kb)

  @tff.tensorflow.computation(start_stats.type_signature.result)
  def start_metrics(stats):
    n = tf.cast(tf.maximum(stats['num_clients'], 1), tf.float64)
    return collections.OrderedDict(
        bytes_down_per_client=tf.cast(stats['bytes_down'], tf.float64) / n,
        bytes_up_per_client=tf.cast(stats['bytes_up'], tf.float64) / n,
        kb_entries_per_client=tf.cast(stats['kb_entries'], tf.float64) / n,
        bytes_down_by_part_per_client=_per_client(
            stats['bytes_down_by_part'], n),
        bytes_up_by_part_per_client=_per_client(stats['bytes_up_by_part'],
                                                n))

  @tff.federated_computation(
      tff.FederatedType(server_type, tff.SERVER),
      tff.FederatedType(start_input_type, tff.CLIENTS),
      tff.FederatedType(client_type, tff.CLIENTS))
  def start_task(state, inputs, client_states):
    state = tff.federated_map(next_task, state)
    uploads = tff.federated_map(representation_upload,
                                (client_states, inputs))
    if config.uses_sit:
      received = tff.federated_aggregate(uploads, *[
          c() if i == 0 else c for i, c in enumerate(rep_aggregation)])
      result = tff.federated_map(sit_selection, (state, received))
      state = result.state
      # Each client receives only its own row of the selection table.
      selection = tff.federated_map(only_row, tff.federated_select(
          tff.federated_map(own_key, client_states),
          tff.federated_value(np.int32(num_clients - 1), tff.SERVER),
          result.selection, selection_row))
    elif kb:
      selection = tff.federated_map(foreign_selection,
                                    (client_states, inputs))
    else:
      selection = tff.federated_map(no_selection, (client_states, inputs))
    if kb:
      kb_values = tff.federated_select(
          tff.federated_map(keys_of, selection),
          tff.federated_value(np.int32(num_slots - 1), tff.SERVER),
          tff.federated_map(adaptive_store_of, state), select_adaptive)
      embedding = tff.federated_broadcast(
          tff.federated_map(embedding_of, state))
      new_clients = tff.federated_map(
          begin_task,
          (client_states, embedding, kb_values, selection, inputs))
    elif config.federated:
      embedding = tff.federated_broadcast(
          tff.federated_map(embedding_of, state))
      new_clients = tff.federated_map(begin_task,
                                      (client_states, embedding, inputs))
    else:
      new_clients = tff.federated_map(begin_task, (client_states, inputs))
    stats = tff.federated_sum(
        tff.federated_map(start_stats, (selection, uploads)))
    return RoundOutput(state=state, client_states=new_clients,
                       metrics=tff.federated_map(start_metrics, stats))

  # ---- rounds ------------------------------------------------------------

  batch_type = tff.SequenceType(
      (tff.TensorType(np.int32, [None, spec.max_length]),
       tff.TensorType(np.int32, [None])))

  def build_round(train_embedding: bool):
    round_shared = shared if train_embedding else tuple(
        k for k in shared if k != 'embedding')
    sent_shared = round_shared if config.federated else ()
    round_shared_type = tff.StructWithPythonType(
        [(k, shared_type[k]) for k in round_shared], collections.OrderedDict)
    shared_bytes = sum(_num_bytes(shapes[k]) for k in sent_shared)

    @tff.tensorflow.computation(server_type)
    def broadcast_part(state):
      return collections.OrderedDict((k, state.shared[k])
                                     for k in round_shared)

    @tff.tensorflow.computation(client_type)
    def own_part(client):
      return collections.OrderedDict((k, client.weights[k])
                                     for k in round_shared)

    @tf.function
    def train(model, variables, client, start_shared, dataset):
      start = collections.OrderedDict(client.weights)
      start.update(start_shared)
      for key, variable in variables.items():
        variable.assign(start[key])
      train_vars = [variables[k] for k in trainable]
      task = client.task
      frozen = () if train_embedding else ('embedding',)

      # Keys the dropout masks (see `dropout_seeds`): a resumed or repeated
      # run draws the same masks for the same start, task, batch and step.
      round_key = dropout_seeds.fingerprint((start, client.client_id, task))

      def train_on_batch(loop_state, batch):
        stats, carried = loop_state
        token_ids, labels = batch
        # Examples seen so far number the step: batches are never empty.
        step_key = dropout_seeds.fingerprint(
            (round_key, batch, stats['num_examples']))
        with tf.GradientTape() as tape, dropout_seeds.step_seed(step_key):
          logits = model((token_ids, task), training=True)
          cross_entropy = tf.reduce_mean(
              tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
          loss = cross_entropy + fcl_cnn.regularization(
              model, task, client.snapshots, sparsity=config.sparsity,
              drift=config.drift, weight_decay=config.weight_decay,
              is_first_task=tf.equal(task, 0))
          if config.method == 'fedprox':
            loss += 0.5 * config.proximal_strength * tf.add_n([
                tf.reduce_sum(tf.square(variables[k] - start_shared[k]))
                for k in round_shared])
        gradients = tape.gradient(loss, train_vars)
        gradients = [
            tf.zeros_like(v) if g is None or k in frozen
            else tf.convert_to_tensor(g)
            for k, v, g in zip(trainable, train_vars, gradients)]
        new_state, new_values = optimizer.next(
            carried, tuple(tf.identity(v) for v in train_vars),
            tuple(gradients))
        for variable, value in zip(train_vars, new_values):
          variable.assign(value)
        new_state = optimizers_lib.match_dtypes(carried, new_state)
        batch_size = tf.cast(tf.shape(labels)[0], tf.float32)
        stats = collections.OrderedDict(
            num_examples=stats['num_examples'] + batch_size,
            loss_sum=stats['loss_sum'] + cross_entropy * batch_size,
            finite=tf.logical_and(stats['finite'],
                                  tf.math.is_finite(loss)))
        return stats, new_state

      initial = (collections.OrderedDict(
          num_examples=tf.constant(0.0), loss_sum=tf.constant(0.0),
          finite=tf.constant(True)), _as_loop_state(client.optimizer))
      stats, optimizer_state = batch_loop.for_each_batch(
          dataset, initial, train_on_batch)
      trained = collections.OrderedDict(
          (k, tf.identity(v)) for k, v in variables.items())
      finite = tf.logical_and(stats['finite'], tf.reduce_all(
          [tf.reduce_all(tf.math.is_finite(v)) for v in trained.values()]))
      valid = tf.logical_and(finite, stats['num_examples'] > 0.0)
      # A rejected client keeps its state and sends weight 0 and zeros
      # (0·NaN would still poison a weighted sum).
      weights = tf.nest.map_structure(
          lambda new, old: tf.where(valid, new, old), trained, start)
      optimizer_state = tf.nest.map_structure(
          lambda new, old: tf.where(valid, new, old), optimizer_state,
          _as_loop_state(client.optimizer))
      size = tf.where(valid, stats['num_examples'] / config.local_epochs,
                      0.0)
      aggregand = collections.OrderedDict(
          weighted=collections.OrderedDict(
              (k, size * weights[k]) for k in sent_shared),
          weight=size)
      upload = collections.OrderedDict(
          slots=tf.reshape(client.client_id * num_tasks + task, [1]),
          sent=tf.reshape(valid, [1]),
          values=[fcl_cnn.prune(weights[k][task], config.sparsity)[None]
                  for k in adaptive])
      nonzero = tf.add_n([tf.math.count_nonzero(v, dtype=tf.int64)
                          for v in upload['values']]) if adaptive else (
                              tf.constant(0, tf.int64))
      sent = tf.cast(valid, tf.int64)
      round_stats = collections.OrderedDict(
          num_clients=tf.constant(1, tf.int64),
          num_examples=tf.cast(stats['num_examples'], tf.float64),
          loss_sum=tf.where(valid, tf.cast(stats['loss_sum'], tf.float64),
                            0.0),
          # The examples behind loss_sum (a rejected client's loss is left
          # out of both).
          valid_examples=tf.where(
              valid, tf.cast(stats['num_examples'], tf.float64), 0.0),
          non_finite_clients=tf.cast(tf.logical_not(finite), tf.int64),
          bytes_down=tf.constant(shared_bytes, tf.int64),
          bytes_up=sent * (shared_bytes + adaptive_bytes),
          bytes_up_by_part=collections.OrderedDict(
              shared_weights=sent * shared_bytes,
              adaptive=sent * adaptive_bytes),
          adaptive_nonzero=sent * nonzero)
      new_client = ClientState(
          client_id=client.client_id, weights=weights,
          snapshots=client.snapshots, optimizer=optimizer_state, task=task)
      return collections.OrderedDict(
          client=new_client, aggregand=aggregand, upload=upload,
          stats=round_stats)

    @tff.tensorflow.computation(client_type, round_shared_type, batch_type)
    def client_train(client, start_shared, dataset):
      model = new_model()
      variables = model.weight_dict()
      # A tf.function orders the variable reads after the training loop's
      # assignments (automatic control dependencies).
      return train(model, variables, client, start_shared, dataset)


    result_type = client_train.type_signature.result
    adaptive_aggregation = (_slot_aggregation(result_type['upload'],
                                              num_slots)
                            if adaptive else None)

    store_type = (adaptive_aggregation[0].type_signature.result
                  if adaptive else tff.StructType([]))

    @tff.tensorflow.computation(server_type, result_type['aggregand'],
                                store_type)
    def server_update(state, sums, received):
      new_shared = collections.OrderedDict(state.shared)
      for key in sent_shared:
        new_shared[key] = tf.where(
            sums['weight'] > 0.0,
            tf.math.divide_no_nan(sums['weighted'][key], sums['weight']),
            state.shared[key])
      store, stored = state.adaptive_store, state.stored
      if adaptive:
        got = received['received']
        store = [tf.where(got[:, None, None, None], new, old)
                 for new, old in zip(received['values'], store)]
        stored = tf.logical_or(stored, got)
      return state._replace(shared=new_shared, adaptive_store=store,
                            stored=stored, round_num=state.round_num + 1)

    @tff.tensorflow.computation(result_type['stats'])
    def round_metrics(stats):
      n = tf.cast(tf.maximum(stats['num_clients'], 1), tf.float64)
      return collections.OrderedDict(
          train_loss=tf.math.divide_no_nan(stats['loss_sum'],
                                           stats['valid_examples']),
          num_examples=stats['num_examples'],
          non_finite_clients=stats['non_finite_clients'],
          bytes_down_per_client=tf.cast(stats['bytes_down'], tf.float64) / n,
          bytes_up_per_client=tf.cast(stats['bytes_up'], tf.float64) / n,
          adaptive_nonzero_per_client=tf.cast(stats['adaptive_nonzero'],
                                              tf.float64) / n,
          # Down, a round sends only the shared weights (bytes_down).
          bytes_up_by_part_per_client=_per_client(
              stats['bytes_up_by_part'], n))

    @tff.tensorflow.computation
    def no_store():
      return collections.OrderedDict()

    @tff.federated_computation(
        tff.FederatedType(server_type, tff.SERVER),
        tff.FederatedType(batch_type, tff.CLIENTS),
        tff.FederatedType(client_type, tff.CLIENTS))
    def next_fn(state, client_data, client_states):
      if config.federated:
        start_shared = tff.federated_broadcast(
            tff.federated_map(broadcast_part, state))
      else:
        start_shared = tff.federated_map(own_part, client_states)
      results = tff.federated_map(
          client_train, (client_states, start_shared, client_data))
      sums = tff.federated_sum(results.aggregand)
      if adaptive:
        zero, accumulate, merge, report = adaptive_aggregation
        received = tff.federated_aggregate(
            results.upload, zero(), accumulate, merge,
            report)
      else:
        received = tff.federated_eval(no_store, tff.SERVER)
      new_state = tff.federated_map(server_update, (state, sums, received))
      metrics = tff.federated_map(
          round_metrics,
          tff.federated_sum(results.stats))
      return RoundOutput(state=new_state,
                         client_states=results.client,
                         metrics=metrics)

    return next_fn

  return FclProcess(
      config=config, spec=spec, initialize=initialize,
      initial_client_state=initial_client_state, start_task=start_task,
      next_first_task=build_round(train_embedding=True),
      next=build_round(train_embedding=False))


class Predictor:
  """A client model's predictions for any task, from a weight dict.

  Inference as in FedWeIT: task-adaptive weights pruned at |a| > λ1 (spec
  §3). One Keras model and one traced function serve every call.

  Args:
    spec: The model.
    adaptive_threshold: λ1 (the config's `sparsity`).
    batch_size: Examples per forward pass.
  """

  def __init__(self, spec: fcl_cnn.FclCnnSpec, *, adaptive_threshold: float,
               batch_size: int = 256):
    self._model = fcl_cnn.FclTextCnn(spec)
    self._model.adaptive_threshold = adaptive_threshold
    self._variables = self._model.weight_dict()
    self._batch_size = batch_size
    self._forward = tf.function(
        self._logits,
        input_signature=[tf.TensorSpec([None, spec.max_length], tf.int32),
                         tf.TensorSpec([], tf.int32)])

  def _logits(self, token_ids, task):
    return self._model((token_ids, task), training=False)

  def logits(self, weights, task: int, token_ids: np.ndarray) -> np.ndarray:
    """Logits `[N, num_classes]` of task `task`'s head.

    Args:
      weights: A client's `ClientState.weights` (key -> numpy value).
      task: The task whose head (and task-specific weights) are used.
      token_ids: int32 `[N, L]`.
    """
    for key, variable in self._variables.items():
      variable.assign(weights[key])
    task = tf.constant(task, tf.int32)
    outputs = [self._forward(token_ids[i:i + self._batch_size], task).numpy()
               for i in range(0, len(token_ids), self._batch_size)]
    if not outputs:
      return np.zeros([0, self._model.spec.num_classes], np.float32)
    return np.concatenate(outputs)

  def predict(self, weights, task: int, token_ids: np.ndarray) -> np.ndarray:
    """Predicted labels, int `[N]` (argmax of `logits`)."""
    return np.argmax(self.logits(weights, task, token_ids), axis=-1)
