"""Tasks: data -> model_fn -> learning process -> client data, one per task.

What an experiment or a benchmark trains, as public builders:

`text_classification`: label-skewed clients of a text classification
dataset, the fastText-style classifier and its per-client evaluation
(`prepare_clients`, `train_dataset`, `evaluate_classifier`).
`text2sql`: federated text-to-SQL (the Lorar paper): configurations, the
clients' data and its encoding (`prepare_task`); `text2sql_process`: its
parsers, the trained units, learning processes and client data
(`build_parser`, `training_units`, `build_process`, `build_client_data_fn`);
`text2sql_templates`: the template parser.
`nmt`: federated mixed-domain translation (dynamic pulling): the domains'
data, centralised and federated processes and their client data.
`seq2seq_examples`: encoding, batching and decoding shared by the seq2seq
tasks.

Every module is imported on first use (`tff_nlp.tasks.text2sql`): the
seq2seq tasks import keras-nlp, which takes seconds.
"""

from tff_nlp import _lazy

# name -> (module, attribute or None for the module itself).
_LAZY_EXPORTS = {
    name: (f'tff_nlp.tasks.{name}', None)
    for name in ('nmt', 'seq2seq_examples', 'text2sql', 'text2sql_process',
                 'text2sql_templates', 'text_classification')
}

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _LAZY_EXPORTS)
