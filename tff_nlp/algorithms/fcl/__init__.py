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

By default the word embedding is trained (federated, except for 'local') on
the first task and frozen afterwards, which gives SIT a fixed embedding space
for its document vectors. As in the papers, it can instead be pre-trained
vectors frozen from the start (`FclConfig.train_embedding=False` and
`build_fcl_process(..., initial_embedding=...)`, e.g. GloVe through
`tff_nlp.data.word_vectors`); every round is then `next`'s. The server still
broadcasts the embedding at each task start (counted as `down/embedding`),
although a client holding the public vectors would not need it.

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
    and stores the A's. With a `model_aggregator` (`build_fcl_process`)
    the clients send the deltas of their shared weights through it
    instead, and `FclConfig.max_weight_share` caps each client's share of
    the weight.

What leaves a client: its shared weights (B, or the plain kernels; the
embedding on the first task) and training-set size; its pruned A_t and
slot (decomposed methods); its task representation, a few hundred mean word
vectors (SIT); summed round statistics. Masks, attention, past A's, heads
and data stay on the client.
"""

from tff_nlp.algorithms.fcl.core import ADAPTIVE_INIT_DIVISOR
from tff_nlp.algorithms.fcl.core import AGGREGATOR_PHASES
from tff_nlp.algorithms.fcl.core import ClientState
from tff_nlp.algorithms.fcl.core import FclConfig
from tff_nlp.algorithms.fcl.core import FclProcess
from tff_nlp.algorithms.fcl.core import MAX_NEW_REPRESENTATIONS
from tff_nlp.algorithms.fcl.core import METHODS
from tff_nlp.algorithms.fcl.core import model_spec
from tff_nlp.algorithms.fcl.core import REPRESENTATION_COUNTS
from tff_nlp.algorithms.fcl.core import REPRESENTATION_TASKS
from tff_nlp.algorithms.fcl.core import REPRESENTATIONS
from tff_nlp.algorithms.fcl.core import ServerState
from tff_nlp.algorithms.fcl.core import TASK
from tff_nlp.algorithms.fcl.predictor import Predictor
from tff_nlp.algorithms.fcl.process import build_fcl_process
