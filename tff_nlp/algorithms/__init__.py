"""Model-agnostic federated algorithms, composed from `tff_nlp.templates`.

`build_fl_process`: FedAvg / FedOPT / FedProx with Lorar-family weighting, a
`tff.learning.templates.LearningProcess` (distributor, client work,
aggregator and finalizer, as TFF's `fed_avg.py`).
`build_lora_process`: the same on a `models.LoraModelFn`: clients train and
send only LoRA adapters; the frozen pre-trained weights never move in a round.
`partial_models`: partial models with `tff.federated_select` and
IndexedSlices aggregation (keys, row selection and the composer).
`build_dynamic_pulling_process` (module `dynamic_pulling`, its selection
rules in `tensor_selection`): dynamic pulling with stateful clients (Passban
et al., NAACL 2022), a `tff.templates.IterativeProcess` composed by
`templates.compose_stateful_clients_process` (options of the selection in
one `tensor_selection.Selection`);
`build_simulation_process` wraps it for the training loop.
`build_fcl_process` (package `fcl`, imported on first use): local, FedAvg,
FedProx, FedWeIT, FedSeIT and FedSeIT + SIT for federated continual learning.
`sit`: Selective Inter-client Transfer for federated continual learning
(Chaudhary et al., Findings of EMNLP 2022): task representations, overlap
scores and top-K selection of foreign task-adaptive weights.

The aggregators these builders take are in `tff_nlp.aggregators`, the parts
they are composed from (client work, batch loop, optimizers, the
stateful-clients protocol) in `tff_nlp.templates`.
"""

from tff_nlp import _lazy

from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.algorithms import partial_models
from tff_nlp.algorithms import sit
from tff_nlp.algorithms import tensor_selection
from tff_nlp.algorithms.dynamic_pulling import build_dynamic_pulling_process
from tff_nlp.algorithms.dynamic_pulling import build_simulation_process
from tff_nlp.algorithms.fl_process import Algorithm
from tff_nlp.algorithms.fl_process import build_fl_process
from tff_nlp.algorithms.fl_process import default_server_optimizer
from tff_nlp.algorithms.fl_process import FLProcess
from tff_nlp.algorithms.lora_process import build_lora_process

_LAZY_EXPORTS = {
    'fcl': ('tff_nlp.algorithms.fcl', None),
    'build_fcl_process': ('tff_nlp.algorithms.fcl', 'build_fcl_process'),
}

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _LAZY_EXPORTS)
