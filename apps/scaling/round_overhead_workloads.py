"""The two workloads of the round-overhead benchmark (`round_overhead`).

A `Workload` is one round's work, built once and run by every side of the
comparison: the TFF learning process and its client data, and each client's
training for the pure-TensorFlow reference (`round_overhead_pure_tf`).

*   `r8_classifier` (`R8Setup`): the r8 demo task and bag-of-embeddings
    classifier of `apps.common.text_classification_task`, client SGD;
*   `text2sql_seq2seq` (`Text2SqlSetup`, `text2sql_setup`): the text-to-SQL
    clients and Keras seq2seq model as the text-to-SQL task builds them
    (`apps.text2sql.task_data.prepare_task` and
    `apps.text2sql.process`'s parser, process and client data), with
    the cpu preset's data, model and local training, client Adam.
"""

import dataclasses
import tempfile
import time
from typing import Any, Callable, ClassVar, Optional, Union

import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms

from tff_nlp import templates
from tff_nlp import models
from tff_nlp.templates import client_data as client_data_lib
from tff_nlp.data import text2sql as text2sql_data
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_model_fn
from apps.text2sql import task as text2sql
from apps.text2sql import task_data as text2sql_task_data
from apps.text2sql import process as text2sql_process
from apps.common import text_classification_task as text_classification


R8_CLASSIFIER = 'r8_classifier'
TEXT2SQL_SEQ2SEQ = 'text2sql_seq2seq'
MODELS = (R8_CLASSIFIER, TEXT2SQL_SEQ2SEQ)


@dataclasses.dataclass(frozen=True)
class R8Setup:
  """The r8 demo classifier's round (`MODELS[0]`).

  Attributes:
    data: The clients (dataset, split, vocabulary).
    local_epochs: Local epochs of every client.
    batch_size: Client batch size.
    embedding_dim: Embedding size of the classifier.
    learning_rate: Client SGD learning rate.
  """

  data: text_classification.ClientDataConfig = (
      text_classification.ClientDataConfig())
  local_epochs: int = 2
  batch_size: int = 16
  embedding_dim: int = 64
  learning_rate: float = 1.0
  name: ClassVar[str] = R8_CLASSIFIER


@dataclasses.dataclass(frozen=True)
class Text2SqlSetup:
  """The text-to-SQL seq2seq round (`MODELS[1]`), in the experiment's configs.

  Attributes:
    data: Clients, tokenization and training examples per client.
    model: The seq2seq model; its vocabulary size and lengths are replaced
      by the tokenizer's and `data`'s, its seed by the run's, as
      `text2sql.run_text2sql` does. Must have dropout 0 (see
      `text2sql_setup`).
    training: Local training; must be federated FedAvg with Lorar weighting
      and SGD or Adam clients (per-client learning rate), what the pure-TF
      reference implements.
  """

  data: text2sql.DataConfig
  model: seq2seq.Seq2SeqConfig
  training: text2sql.TrainingConfig
  name: ClassVar[str] = TEXT2SQL_SEQ2SEQ

  def __post_init__(self):
    if self.model.dropout:
      raise ValueError(
          'The model needs dropout 0: dropout masks are random, so the TFF '
          'and pure-TF rounds could not be checked to compute the same '
          f'model; got dropout={self.model.dropout}.')
    if self.training.method != ('federated', 'fedavg', 'lorar'):
      raise ValueError(
          'The round must be federated FedAvg + Lorar (what the pure-TF '
          f'reference implements); got {self.training.method}.')
    if self.training.client_optimizer not in ('sgd', 'adam'):
      raise ValueError(
          "client_optimizer must be 'sgd' or 'adam' (what the pure-TF "
          f'reference implements), got {self.training.client_optimizer!r}.')


def text2sql_setup(
    *,
    num_clients: int = len(text2sql_data.CLIENTS),
    max_train_examples: Union[text2sql.PerClient, int] = text2sql.PerClient(
        40, (('advising', 80), ('atis', 80))),
    local_epochs: Optional[int] = None,
    batch_size: int = 16,
    learning_rate: Optional[float] = None,
) -> Text2SqlSetup:
  """The text-to-SQL cpu preset (`train_text2sql.cpu.flags`), resized.

  The preset's data (values filled in, table names only, vocabulary 4000,
  128 / 160 tokens), model (2+2 layers, d=128, 4 heads, d_ff 512) and local
  training (FedAvg + Lorar, Adam at 2e-3, batch 16, 2 local epochs, 1 for
  advising and atis), with two changes: fewer training examples per client
  (`max_train_examples`, the size knob; the preset has 200, 400 for advising
  and atis) and no dropout (random masks would differ between the sides).

  Args:
    num_clients: The first this many of `text2sql.CLIENTS`.
    max_train_examples: Training examples per client (seeded subsets).
    local_epochs: Local epochs of every client; None keeps the preset's.
    batch_size: Client batch size.
    learning_rate: Client Adam learning rate; None keeps the preset's.

  Returns:
    A `Text2SqlSetup`.
  """
  if not 1 <= num_clients <= len(text2sql_data.CLIENTS):
    raise ValueError(
        f'num_clients must be in 1..{len(text2sql_data.CLIENTS)}, got '
        f'{num_clients}.')
  return Text2SqlSetup(
      data=text2sql.DataConfig(
          clients=text2sql_data.CLIENTS[:num_clients],
          with_values=True,
          schema_columns=False,
          vocabulary_size=4000,
          max_source_length=128,
          max_target_length=160,
          max_train_examples=max_train_examples,
          # Dev and test are not used; 0 would keep all of them.
          max_eval_examples=1,
      ),
      model=seq2seq.Seq2SeqConfig.from_preset(
          'small', num_encoder_layers=2, num_decoder_layers=2, hidden_dim=128,
          num_heads=4, intermediate_dim=512, dropout=0.0),
      training=text2sql.TrainingConfig(
          paradigm='federated',
          algorithm='fedavg',
          weighting='lorar',
          client_optimizer='adam',
          local_epochs=(
              text2sql.PerClient(2, (('advising', 1), ('atis', 1)))
              if local_epochs is None else text2sql.PerClient(local_epochs)),
          learning_rates=text2sql.PerClient(
              2e-3 if learning_rate is None else learning_rate),
          batch_sizes=text2sql.PerClient(batch_size),
      ),
  )


Setup = Union[R8Setup, Text2SqlSetup]


@dataclasses.dataclass
class ClientWork:
  """One client's local training, as the pure-TF reference runs it.

  Attributes:
    name: The client's name (text-to-SQL) or index (r8).
    dataset: Its batches: one epoch, the same the TFF process receives.
    learning_rate: Its client learning rate.
    num_epochs: Its local epochs.
    batch_size: Its batch size.
    train_examples: Its training examples.
  """

  name: str
  dataset: tf.data.Dataset
  learning_rate: float
  num_epochs: int
  batch_size: int
  train_examples: int


@dataclasses.dataclass
class Workload:
  """One round's work, built once and run by every side.

  Attributes:
    process: The TFF learning process.
    client_data: `process.next`'s client data.
    model_fn: Builds the `tff.learning` model (also the pure-TF side's).
    client_optimizer: The client optimizer; the pure-TF side sets each
      client's learning rate into its state, as the process does.
    clients: Each client's training, for the pure-TF side.
    prepare_seconds: Loading and encoding the data (and the tokenizer).
    build_seconds: Building the process (Python tracing of its
      computations).
  """

  process: tff.learning.templates.LearningProcess
  client_data: list[Any]
  model_fn: Callable[[], tff.learning.models.VariableModel]
  client_optimizer: tff.learning.optimizers.Optimizer
  clients: list[ClientWork]
  prepare_seconds: float
  build_seconds: float


def _build_r8_workload(setup: R8Setup, *, data_dir: Optional[str],
                       seed: int) -> Workload:
  start = time.perf_counter()
  task = text_classification.prepare_clients(
      setup.data, data_dir=data_dir, seed=seed)
  spec = task.model_spec(embedding_dim=setup.embedding_dim, seed=seed)
  datasets = [
      text_classification.train_dataset(
          client, batch_size=setup.batch_size, shuffle_seed=(seed, client_id))
      for client_id, client in enumerate(task.clients)
  ]
  prepared = time.perf_counter()
  model_fn = models.build_model_fn(spec)
  optimizer = tff.learning.optimizers.build_sgdm(
      learning_rate=setup.learning_rate)
  process = algorithms.build_fl_process(
      model_fn,
      algorithm='fedavg',
      weighting='lorar',
      client_optimizer_fn=optimizer,
      with_client_config=True,
  )
  built = time.perf_counter()
  return Workload(
      process=process,
      client_data=[
          templates.with_client_config(
              ds, learning_rate=setup.learning_rate,
              num_epochs=setup.local_epochs)
          for ds in datasets
      ],
      model_fn=model_fn,
      client_optimizer=optimizer,
      clients=[
          ClientWork(name=str(i), dataset=ds,
                     learning_rate=setup.learning_rate,
                     num_epochs=setup.local_epochs,
                     batch_size=setup.batch_size,
                     train_examples=client.num_train)
          for i, (ds, client) in enumerate(zip(datasets, task.clients))
      ],
      prepare_seconds=prepared - start,
      build_seconds=built - prepared,
  )


def _build_text2sql_workload(setup: Text2SqlSetup, *,
                             data_dir: Optional[str], seed: int) -> Workload:
  start = time.perf_counter()
  # The tokenizer is trained for this run and not kept.
  with tempfile.TemporaryDirectory(prefix='round_overhead_') as tokenizer_dir:
    task = text2sql_task_data.prepare_task(setup.data, data_dir=data_dir, seed=seed,
                                 tokenizer_dir=tokenizer_dir)
  model_config = dataclasses.replace(
      setup.model, vocabulary_size=task.tokenizer.vocabulary_size(),
      max_source_length=setup.data.max_source_length,
      max_target_length=setup.data.max_target_length, seed=seed)
  # The task's own builders, so that both measure the same thing.
  (unit,) = text2sql_process.training_units(setup.training, task.clients)
  parser = text2sql_process.Seq2SeqParser(task, model_config,
                                          setup.training.decode_batch_size)
  # Round 1's client data, as the experiment's round loop would get it.
  client_data = text2sql_process.build_client_data_fn(
      task, unit, setup.training, seed, parser)(
          1, range(len(unit.train_clients)))
  prepared = time.perf_counter()
  process = text2sql_process.build_process(setup.training, parser, unit)
  built = time.perf_counter()
  training = setup.training
  return Workload(
      process=process,
      client_data=client_data,
      model_fn=seq2seq_model_fn.build_model_fn(model_config),
      client_optimizer=templates.CLIENT_OPTIMIZERS[training.client_optimizer](
          learning_rate=training.learning_rates.default),
      clients=[
          # The same batches the process gets: the examples of its client
          # data; learning rate and epochs from the configuration.
          ClientWork(name=name, dataset=data[client_data_lib.EXAMPLES_KEY],
                     learning_rate=training.learning_rates[name],
                     num_epochs=int(training.local_epochs[name]),
                     batch_size=int(training.batch_sizes[name]),
                     train_examples=len(task.splits[name]['train']))
          for name, data in zip(unit.train_clients, client_data)
      ],
      prepare_seconds=prepared - start,
      build_seconds=built - prepared,
  )


def build_workload(setup: Setup, *, data_dir: Optional[str],
                   seed: int) -> Workload:
  """Prepares the clients and builds the process of `setup`'s model.

  Args:
    setup: An `R8Setup` or a `Text2SqlSetup`.
    data_dir: The `shared/data` folder; None finds it.
    seed: Seed of the data (split, subsets, batch order) and the model.

  Returns:
    The `Workload`.
  """
  if isinstance(setup, R8Setup):
    return _build_r8_workload(setup, data_dir=data_dir, seed=seed)
  if isinstance(setup, Text2SqlSetup):
    return _build_text2sql_workload(setup, data_dir=data_dir, seed=seed)
  raise TypeError(f'Expected an R8Setup or a Text2SqlSetup, got {setup!r}.')

