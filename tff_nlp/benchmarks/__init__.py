"""Benchmarks: measurements of the library's cost and of methods over seeds.

`round_overhead`: a TFF round against the same training in pure TensorFlow
(`round_overhead_workloads`, `round_overhead_pure_tf`).
`scaling`, `client_scaling`: the tag task's memory over many rounds and its
round time and memory against clients per round.
`text2sql_benchmark`: the Lorar paper's methods x seeds, resumable.
`vocab_slice_benchmark`: vocabulary-sliced against dense FedAvg on
text-to-SQL.
`robustness` (+ `attacks`, `robustness_tasks`, `robustness_text2sql`,
`robustness_report`): attacking clients against weightings and defences.

Their command lines are binaries of `tff_nlp.bin` (`round_overhead`,
`client_scaling`, `memory_growth`, `text2sql_benchmark`, `vocab_slice`, ...).
Every module is imported on first use: they import TFF, keras-nlp or
matplotlib.
"""

from tff_nlp import _lazy

# name -> (module, attribute or None for the module itself).
_LAZY_EXPORTS = {
    name: (f'tff_nlp.benchmarks.{name}', None)
    for name in ('client_scaling', 'round_overhead', 'round_overhead_pure_tf',
                 'round_overhead_workloads', 'scaling', 'text2sql_benchmark',
                 'vocab_slice_benchmark', 'attacks', 'robustness',
                 'robustness_report', 'robustness_tasks',
                 'robustness_text2sql')
}

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _LAZY_EXPORTS)
