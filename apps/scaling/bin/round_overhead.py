r"""Benchmark: one TFF round of `build_fl_process` vs a pure-TensorFlow loop.

Both sides do the same work for the same clients (FedAvg + Lorar, per-client
learning rate and epochs): `--model=r8_classifier`, the r8 demo task's
bag-of-embeddings classifier with client SGD, or
`--model=text2sql_seq2seq`, the text-to-SQL clients and seq2seq model of the
cpu preset with client Adam and `--max_train_examples` per client (the size
knob). In one run, interleaved, `--repeats` times each after a warm-up
round each: TFF in a context given by the runtime flags (default: unlimited
concurrency), TFF with `max_concurrent_computation_calls=1` (a second
worker), and two hand-written pure-TF loops (a `tf.while_loop` per client,
as in tff_nlp's client work, and a Python loop of `tf.function` steps); the
faster loop is the reference.
The benchmark first checks that all sides produce the same global model,
then prints Markdown tables: the medians and ratios TFF / pure TF, where the
time goes (tracing and compilation, serialization, compute, the rest), and
the bytes serialized per round. See `apps.scaling.round_overhead`.

  python -m apps.scaling.bin.round_overhead                # or: make bench
  python -m apps.scaling.bin.round_overhead --model=text2sql_seq2seq --repeats=15 \
      --output_json=docs/results/round_overhead_text2sql.json

This is a benchmark, not a test: its numbers depend on the machine.
"""

import json

from absl import app
from absl import flags

from tff_nlp import errors
from apps.scaling import round_overhead
from apps.scaling import round_overhead_workloads
from apps.common import config_flags
from tff_nlp.runtime import flags as runtime_flags
from apps.text2sql import task as text2sql
from apps.common import text_classification_task as text_classification

_MODEL = flags.DEFINE_enum(
    'model', round_overhead_workloads.R8_CLASSIFIER,
    list(round_overhead_workloads.MODELS),
    'The workload: the r8 demo classifier or the text-to-SQL seq2seq model.')
_DATA_DIR = config_flags.define('data_dir', None, str)
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', 8,
    'Clients per round (text2sql: the first this many of its 8 clients).',
    lower_bound=1)
_LOCAL_EPOCHS = flags.DEFINE_integer(
    'local_epochs', None,
    "Local epochs of every client. Unset: the model's default (r8: 2; "
    'text2sql: the cpu preset\'s 2, and 1 for advising and atis).',
    lower_bound=1)
_BATCH_SIZE = config_flags.define('batch_size', 16)
_LEARNING_RATE = flags.DEFINE_float(
    'learning_rate', None,
    "Client learning rate. Unset: the model's default (r8: SGD at 1.0; "
    'text2sql: Adam at 2e-3).', lower_bound=0.0)
_EMBEDDING_DIM = config_flags.define('embedding_dim', 64)  # r8 only.
_MAX_TRAIN_EXAMPLES = flags.DEFINE_list(
    'max_train_examples', ['40', 'advising=80', 'atis=80'],
    'Training examples per client (text2sql only; seeded subsets): a '
    'default, then client=value overrides. The default makes a round take '
    'about 5-7 s on 2 CPU cores (the cpu preset: 200,advising=400,atis=400).')
_REPEATS = flags.DEFINE_integer(
    'repeats', 5, 'Timed rounds of each side (interleaved).', lower_bound=1)
_SEED = config_flags.define('seed', 0)
_OUTPUT_JSON = config_flags.define('output_json', None, str)


def _setup() -> round_overhead_workloads.Setup:
  """The workload given by the flags."""
  if _MODEL.value == round_overhead_workloads.R8_CLASSIFIER:
    defaults = round_overhead_workloads.R8Setup()
    return round_overhead_workloads.R8Setup(
        data=text_classification.ClientDataConfig(
            num_clients=_NUM_CLIENTS.value),
        local_epochs=(defaults.local_epochs if _LOCAL_EPOCHS.value is None
                      else _LOCAL_EPOCHS.value),
        batch_size=_BATCH_SIZE.value,
        embedding_dim=_EMBEDDING_DIM.value,
        learning_rate=(defaults.learning_rate if _LEARNING_RATE.value is None
                       else _LEARNING_RATE.value),
    )
  try:
    max_train_examples = text2sql.PerClient.parse(
        _MAX_TRAIN_EXAMPLES.value, name='max_train_examples', kind=int,
        allow_zero=True)
  except errors.InputError as e:
    raise app.UsageError(str(e)) from None
  try:
    return round_overhead_workloads.text2sql_setup(
        num_clients=_NUM_CLIENTS.value,
        max_train_examples=max_train_examples,
        local_epochs=_LOCAL_EPOCHS.value,
        batch_size=_BATCH_SIZE.value,
        learning_rate=_LEARNING_RATE.value,
    )
  except ValueError as e:  # E.g. more than the 8 text-to-SQL clients.
    raise app.UsageError(str(e)) from None


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  result = round_overhead.run_round_overhead(
      setup=_setup(),
      data_dir=_DATA_DIR.value,
      repeats=_REPEATS.value,
      seed=_SEED.value,
      context_settings=runtime_flags.settings_from_flags(),
  )
  print(round_overhead.markdown(result))
  if _OUTPUT_JSON.value:
    with open(_OUTPUT_JSON.value, 'w') as f:
      json.dump(result, f, indent=2)


if __name__ == '__main__':
  app.run(main)
