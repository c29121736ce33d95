"""Experiments: federated training runs on real data, with their reports.

`weighting_demo`: client weightings on label-skewed text classification.
`sparse_tags`: partial models (federated_select) vs dense FedAvg on tags.
`text2sql`, `text2sql_benchmark`, `text2sql_summary`: the Lorar paper's
federated text-to-SQL (one run; methods x seeds; their report);
`round_overhead`: a TFF round against the same training in pure TensorFlow
(imported on first use: they import keras-nlp, which takes seconds).
"""

from tff_nlp import _lazy

from tff_nlp.experiments import federated_text
from tff_nlp.experiments import sparse_tags
from tff_nlp.experiments import weighting_demo
from tff_nlp.experiments.federated_text import Accuracies
from tff_nlp.experiments.federated_text import ClientDataConfig
from tff_nlp.experiments.federated_text import ClientExamples
from tff_nlp.experiments.federated_text import evaluate
from tff_nlp.experiments.federated_text import FederatedTextClassification
from tff_nlp.experiments.federated_text import prepare_clients
from tff_nlp.experiments.federated_text import train_dataset
from tff_nlp.experiments.sparse_tags import run_sparse_tags
from tff_nlp.experiments.weighting_demo import run_weighting_demo
from tff_nlp.experiments.weighting_demo import TrainingConfig
from tff_nlp.experiments.weighting_demo import WEIGHTINGS
from tff_nlp.experiments.weighting_demo import WeightingResult

# name -> (module, attribute or None for the module itself).
_LAZY_EXPORTS = {
    'text2sql': ('tff_nlp.experiments.text2sql', None),
    'text2sql_benchmark': ('tff_nlp.experiments.text2sql_benchmark', None),
    'text2sql_summary': ('tff_nlp.experiments.text2sql_summary', None),
    'round_overhead': ('tff_nlp.experiments.round_overhead', None),
    'run_text2sql': ('tff_nlp.experiments.text2sql', 'run_text2sql'),
    'run_text2sql_benchmark': (
        'tff_nlp.experiments.text2sql_benchmark', 'run_benchmark'),
}


__getattr__, __dir__ = _lazy.lazy_exports(__name__, _LAZY_EXPORTS)
