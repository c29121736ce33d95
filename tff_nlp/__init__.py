"""tff_nlp: TensorFlow Federated computations for federated NLP.

Subpackages, in import order (each imports only those after it):
  training     The resumable round loop: client sampling, checkpoint/resume
               (`tff.program`), metrics to TensorBoard, CSV and JSON lines.
  algorithms   Model-agnostic builders: FedAvg / FedOPT / FedProx with
               Lorar-family weighting, LoRA, partial models
               (`tff.federated_select`), dynamic pulling, FCL with SIT.
  templates    The parts they are composed from: client work, the batch
               loop, optimizers, the stateful-clients protocol, composers.
  aggregators  Weightings, weight cap, trimmed mean, delta aggregation,
               IndexedSlices sum/mean/clipping, the run's aggregator.
  models       Keras models wrapped as `tff.learning` models, tokenizers,
               LoRA.
  analysis     What leaves a client and bytes per round, read from types.
  data         Readers of the datasets in ../shared/data and federated splits.
  metrics      Exact match, SQL execution, BLEU, continual-learning metrics,
               intervals and the one verdict rule.
  runtime      TFF execution contexts with an owned, always-stopped worker.

Module:
  errors       `InputError` / `CheckpointError`: bad input, reported with
               the file, line or argument at fault.

The applications (text-to-SQL, NMT, FCL, partial models, PEFT, robustness,
scaling, the weighting demo) are not part of the library: each is a folder of
`apps/` beside it, with its binaries (`python -m apps.<application>.bin.<name>`).
`import tff_nlp` loads none of them.
"""

from tff_nlp import aggregators
from tff_nlp import algorithms
from tff_nlp import analysis
from tff_nlp import data
from tff_nlp import errors
from tff_nlp import metrics
from tff_nlp import models
from tff_nlp import runtime
from tff_nlp import templates
from tff_nlp import training

__version__ = '0.1.0'
