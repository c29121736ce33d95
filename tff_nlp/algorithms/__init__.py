"""Federated learning algorithms as `tff.learning.templates.LearningProcess`es.

`for_each_batch` (module `batch_loop`): the clients' local training loop.
`build_fl_process`: FedAvg / FedOPT / FedProx with Lorar-family weighting.
`build_lora_process`: the same on a `models.LoraModelFn`: clients train and
send only LoRA adapters; the frozen pre-trained weights never move in a round.
`build_sparse_tag_process`: partial models with `tff.federated_select`
(`build_dense_tag_process` is its dense FedAvg baseline).
`build_vocab_sliced_process`: the same for a seq2seq model's token embedding
(imported on first use: it imports keras-nlp, which takes seconds).
`build_dynamic_pulling_process` (module `dynamic_pulling`, its selection
rules in `tensor_selection`): dynamic pulling with stateful clients (Passban
et al., NAACL 2022), a `tff.templates.IterativeProcess`;
`build_simulation_process` wraps it for the training loop.
`build_fcl_process` (package `fcl`, imported on first use): local, FedAvg,
FedProx, FedWeIT, FedSeIT and FedSeIT + SIT for federated continual learning.
`weight_cap`: `max_weight_share`, a cap on any client's share of a round's
weight (`WeightShareCapFactory` wraps any weighted aggregator with it).
`trimmed_mean`: `TrimmedMeanFactory`, a coordinate-wise trimmed weighted mean
that drops the most extreme clients' values of every coordinate.
`stateful_clients`: the protocol of processes with stateful clients (one
`RoundOutput`) and `SimulationProcess`, which keeps their clients' states in
the training loop's state.
`sit`: Selective Inter-client Transfer for federated continual learning
(Chaudhary et al., Findings of EMNLP 2022): task representations, overlap
scores and top-K selection of foreign task-adaptive weights.
"""

from tff_nlp import _lazy

from tff_nlp.algorithms import batch_loop
from tff_nlp.algorithms.batch_loop import for_each_batch
from tff_nlp.algorithms.client_data import with_client_config
from tff_nlp.algorithms.client_work import build_weighted_client_work
from tff_nlp.algorithms.client_work import CLIENT_STAT_KEYS
from tff_nlp.algorithms.client_work import WeightedClientWorkProcess
from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.algorithms.dynamic_pulling import build_dynamic_pulling_process
from tff_nlp.algorithms.dynamic_pulling import build_simulation_process
from tff_nlp.algorithms.fl_process import Algorithm
from tff_nlp.algorithms.fl_process import build_fl_process
from tff_nlp.algorithms.fl_process import default_server_optimizer
from tff_nlp.algorithms.fl_process import FLProcess
from tff_nlp.algorithms.lora_process import build_lora_process
from tff_nlp.algorithms.optimizers import CLIENT_OPTIMIZERS
from tff_nlp.algorithms import sit
from tff_nlp.algorithms import stateful_clients
from tff_nlp.algorithms.sparse_tags import build_dense_tag_process
from tff_nlp.algorithms.sparse_tags import build_sparse_tag_process
from tff_nlp.algorithms.sparse_tags import build_sparse_tag_round
from tff_nlp.algorithms.sparse_tags import keyed_client_data
from tff_nlp.algorithms import tensor_selection
from tff_nlp.algorithms import trimmed_mean
from tff_nlp.algorithms.trimmed_mean import TrimmedMeanFactory
from tff_nlp.algorithms import weight_cap
from tff_nlp.algorithms.weight_cap import WeightShareCapFactory
from tff_nlp.algorithms.weighting import Weighting

# name -> (module, attribute or None for the module itself).
_LAZY_EXPORTS = {
    'fcl': ('tff_nlp.algorithms.fcl', None),
    'build_fcl_process': ('tff_nlp.algorithms.fcl', 'build_fcl_process'),
    'vocab_sliced': ('tff_nlp.algorithms.vocab_sliced', None),
    'build_vocab_sliced_process': (
        'tff_nlp.algorithms.vocab_sliced', 'build_vocab_sliced_process'),
}

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _LAZY_EXPORTS)
