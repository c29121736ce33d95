"""Configuration, states and computations of a federated continual-learning
method (see the package docstring)."""

import collections
import dataclasses
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow_federated as tff

from tff_nlp.algorithms import sit as sit_lib
from tff_nlp.aggregators import weight_cap
from tff_nlp.models import fcl_cnn

METHODS = ('local', 'fedavg', 'fedprox', 'fedweit', 'fedseit', 'fedseit_sit')
_ARCHITECTURE = {
    'local': 'plain', 'fedavg': 'plain', 'fedprox': 'plain',
    'fedweit': 'fedweit', 'fedseit': 'fedseit', 'fedseit_sit': 'fedseit',
}
# FedWeIT's initialisation of a new task's adaptive weights: A_t = B / 5
# (the FedSeIT code; official FedWeIT uses B / 3), spec §3.
ADAPTIVE_INIT_DIVISOR = 5.0


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
    max_weight_share: Caps each client's share of a round's weight (its
      training-set size) at this value in (0, 1]
      (`weight_cap.cap_client_weights`) before the shared weights are
      averaged; None: no cap. 'local' averages nothing and ignores it;
      `build_fcl_process` checks the value.
    train_embedding: Whether the word embedding is trained (federated, on
      the first task; the rounds of task 0 are then `next_first_task`'s) or
      never (pre-trained vectors kept frozen, as the papers' GloVe: pass
      them as `build_fcl_process`'s `initial_embedding`; every round is
      then `next`'s).
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
  max_weight_share: Optional[float] = None
  train_embedding: bool = True

  def __post_init__(self):
    if self.method not in METHODS:
      raise ValueError(f'method must be one of {METHODS}, got '
                       f'{self.method!r}.')
    for name in ('num_clients', 'tasks_per_client', 'local_epochs',
                 'sit_top_k', 'sit_max_vectors'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)}.')
    if self.max_weight_share is not None:
      weight_cap.check_max_share(self.max_weight_share)
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
  """The server's state, one type for every method and option.

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
    aggregator: With a `model_aggregator` (federated methods),
      `<first_task=A0, later_tasks=A1>`: the states of the aggregators of
      the shared weights' deltas in the rounds of task 0 (with the
      embedding) and of later tasks, each carried between the rounds that
      use it; without one, `()` (as TFF's `LearningAlgorithmState` holds
      absent parts).
  """

  shared: Any
  adaptive_store: Any
  stored: Any
  representations: Any
  representation_counts: Any
  task: Any
  round_num: Any
  aggregator: Any = ()


# The parts of the aggregator state of a process built with a
# `model_aggregator`: the first task's rounds aggregate the embedding too, a
# value of another type, so each kind of round has its own aggregator.
AGGREGATOR_PHASES = ('first_task', 'later_tasks')


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
SELECTION_KEYS = ('keys', 'alphas', 'valid')


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
    """The round computation for task `task` (the embedding trains on 0,
    unless `config.train_embedding` is False)."""
    if task == 0 and self.config.train_embedding:
      return self.next_first_task
    return self.next

  # The `stateful_clients.StatefulClientsProcess` protocol (FCL has no global
  # model: no `get_model_weights` / `set_model_weights`).

  def initial_client_states(self, state: Any,
                            num_clients: int) -> list[ClientState]:
    """Every client's state before its first task, from server `state`."""
    if num_clients != self.config.num_clients:
      raise ValueError(f'The process has {self.config.num_clients} clients, '
                       f'not {num_clients}.')
    return [self.initial_client_state(state, np.int32(c))
            for c in range(num_clients)]

  def round_computation_for(self, state: Any) -> tff.Computation:
    """The round computation of server `state`'s task (`ServerState.task`,
    set by `start_task`)."""
    return self.round_computation(int(state.task))

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


