"""The parts learning processes are composed from.

`batch_loop`: `for_each_batch`, the clients' local training loop.
`client_data`: a client's dataset with its round configuration (learning
rate, epochs) beside the examples.
`client_work`: `build_weighted_client_work`, TFF client work that trains
locally and reports a Lorar-family weight and client statistics, and
`MeasuredProcessWithClientOutputs`, any composer's client work with
per-client outputs; `local_training`: a client's loop in it;
`extended_outputs`: the checks of processes whose `next` also returns
per-client outputs, and `FLProcess`, a `LearningProcess` with them.
`optimizers`: the client optimizers by name, and what their states need to
survive a round trip.
`stateful_clients`: the protocol of processes whose clients keep state (one
`RoundOutput`, or `RoundOutputWithClientOutputs`) and `SimulationProcess`,
which keeps the clients' states in the training loop's state; `stateful_composer`:
`compose_stateful_clients_process`, the one composer of such processes
(one server state type, `StatefulClientsState`).
`partial_model_composer`: `compose_partial_model_process`, TFF's
composition for partial models (federated_select), and
`build_split_aggregator`; `delta_finalizer`: their server update.
"""

from tff_nlp.templates import batch_loop
from tff_nlp.templates import client_data
from tff_nlp.templates import client_work
from tff_nlp.templates import delta_finalizer
from tff_nlp.templates import optimizers
from tff_nlp.templates import partial_model_composer
from tff_nlp.templates import stateful_clients
from tff_nlp.templates import stateful_composer
from tff_nlp.templates.batch_loop import for_each_batch
from tff_nlp.templates.client_data import with_client_config
from tff_nlp.templates.client_work import build_weighted_client_work
from tff_nlp.templates.client_work import CLIENT_STAT_KEYS
from tff_nlp.templates.client_work import WeightedClientWorkProcess
from tff_nlp.templates.delta_finalizer import build_delta_finalizer
from tff_nlp.templates.optimizers import CLIENT_OPTIMIZERS
from tff_nlp.templates.partial_model_composer import build_split_aggregator
from tff_nlp.templates.partial_model_composer import compose_partial_model_process
from tff_nlp.templates.stateful_clients import SimulationProcess
from tff_nlp.templates.stateful_composer import compose_stateful_clients_process
from tff_nlp.templates.stateful_composer import StatefulClientsState
