"""Experiments: federated training runs on real data, with their reports.

`weighting_demo`: client weightings on label-skewed text classification.
`sparse_tags`: partial models (federated_select) vs dense FedAvg on tags.
`text2sql`: one run of the Lorar paper's federated text-to-SQL, starting
from fresh weights, another run or a keras-nlp preset (`text2sql_start`);
`text2sql_seed_runs`, `text2sql_summary` (`text2sql_summary_markdown`):
finished runs read back and reported over seeds.
`nmt`: mixed-domain translation engines with dynamic pulling, and BLEU.
`fcl`: federated continual learning.

The tasks they train are `tff_nlp.tasks`'; the benchmarks (methods x seeds,
round overhead, scaling) `tff_nlp.benchmarks`'. Modules other than the
classification ones are imported on first use (they import keras-nlp, which
takes seconds).
"""

from tff_nlp import _lazy

from tff_nlp.experiments import sparse_tags
from tff_nlp.experiments import weighting_demo
from tff_nlp.experiments.sparse_tags import run_sparse_tags
from tff_nlp.experiments.weighting_demo import run_weighting_demo
from tff_nlp.experiments.weighting_demo import WEIGHTINGS
from tff_nlp.experiments.weighting_demo import WeightingResult
from tff_nlp.experiments.weighting_demo import WeightingTrainingConfig

# name -> (module, attribute or None for the module itself).
_LAZY_EXPORTS = {
    'fcl': ('tff_nlp.experiments.fcl', None),
    'nmt': ('tff_nlp.experiments.nmt', None),
    'text2sql': ('tff_nlp.experiments.text2sql', None),
    'text2sql_seed_runs': ('tff_nlp.experiments.text2sql_seed_runs', None),
    'text2sql_start': ('tff_nlp.experiments.text2sql_start', None),
    'text2sql_summary': ('tff_nlp.experiments.text2sql_summary', None),
    'text2sql_summary_markdown': (
        'tff_nlp.experiments.text2sql_summary_markdown', None),
    'run_text2sql': ('tff_nlp.experiments.text2sql', 'run_text2sql'),
}


__getattr__, __dir__ = _lazy.lazy_exports(__name__, _LAZY_EXPORTS)
