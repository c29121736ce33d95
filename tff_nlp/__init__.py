"""tff_nlp: TensorFlow Federated computations for federated NLP.

Subpackages:
  algorithms   FedAvg / FedOPT / FedProx with Lorar-family client weighting,
               as `tff.learning.templates.LearningProcess`es.
  analysis     Inspection of federated computations (what leaves a client).
  runtime      TFF execution contexts with an owned, always-stopped worker.
  data         Readers of the datasets in ../shared/data and federated splits.
  models       Keras models wrapped as `tff.learning` models.
  metrics      Task metrics: text-to-SQL exact match and execution accuracy,
               and the paper-layout results tables.
  training     The round loop of every experiment: client sampling,
               checkpoint/resume (`tff.program`), metrics to TensorBoard,
               CSV and JSON lines, progress bar.
  tasks        Each task's data, model_fn, learning process and client data
               (text classification, text-to-SQL, NMT).
  experiments  Federated training runs on real data, with their reports.
  benchmarks   Measurements: round overhead, scaling, methods x seeds.
  sparse       Partial models: `tff.federated_select` of the rows a client
               uses and IndexedSlices aggregation of what it changed.

Modules:
  errors       `InputError` / `CheckpointError`: bad input, reported with
               the file, line or argument at fault.
  plots        Matplotlib figures of training runs (PNG).

Binaries (`python -m tff_nlp.bin.<name>`) live in `tff_nlp.bin`; they are
entry points, not API, and are not imported here. `tasks`, `experiments`,
`benchmarks` and `plots` are imported on first use (`tff_nlp.experiments`,
or `from tff_nlp import plots`): the computations do not need the tasks'
keras-nlp, the experiments' runs or matplotlib.
"""

# First, before anything imports TensorFlow: a binary's terminal shows
# TensorFlow's C++ warnings and errors, not its INFO lines nor its known
# harmless errors (`_binary_stderr`); other users of the package keep
# TensorFlow's defaults.
from tff_nlp import _binary_stderr
_binary_stderr.start_if_binary()

from tff_nlp import _lazy

from tff_nlp import algorithms
from tff_nlp import analysis
from tff_nlp import data
from tff_nlp import errors
from tff_nlp import metrics
from tff_nlp import models
from tff_nlp import runtime
from tff_nlp import sparse
from tff_nlp import training

_LAZY_EXPORTS = {
    'benchmarks': ('tff_nlp.benchmarks', None),
    'experiments': ('tff_nlp.experiments', None),
    'plots': ('tff_nlp.plots', None),
    'tasks': ('tff_nlp.tasks', None),
}

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _LAZY_EXPORTS)

__version__ = '0.1.0'
