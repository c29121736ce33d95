"""The federated text-to-SQL task's parsers, processes and client data.

From a `text2sql.Text2SqlTask` (`apps.text2sql.task`): `build_parser`
gives the parser (seq2seq or template) with its `model_fn`, Keras model,
training datasets and predictions; `training_units` the models a paradigm
trains; `build_process` a unit's `tff.learning.templates.LearningProcess`;
`build_client_data_fn` the client datasets of its rounds, as
`tff_nlp.training.run_training` takes them.

The non-federated paradigms are a one-client FedAvg whose round is one
epoch and whose server step (SGD, learning rate 1) takes the client's model,
so every paradigm runs through the same resumable loop. The one difference
from a plain Keras loop: the client optimizer's state (e.g. Adam's moments)
starts afresh every epoch.
"""

from collections.abc import Callable, Mapping, Sequence
import dataclasses
import functools
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms

from tff_nlp import templates

from tff_nlp import aggregators
from tff_nlp import training as training_lib
from apps.text2sql import vocab_sliced
from tff_nlp.data import text2sql
from tff_nlp.models import keras_nlp_preset
from tff_nlp.models import lora
from tff_nlp.models import lora_model_fn as lora_model_fn_lib
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_model_fn
from tff_nlp.models import seq2seq_decoding
from tff_nlp.models import text_classifier
from apps.common import seq2seq_examples
from apps.text2sql import task as text2sql_task
from apps.text2sql import template_parser as text2sql_templates


class Seq2SeqParser:
  """The seq2seq parser (`models.seq2seq`): how it trains and predicts.

  `keras_model_fn` builds its Keras model: `seq2seq.build_keras_model` of
  `config` by default, or e.g. a keras-nlp preset's architecture
  (`models.keras_nlp_preset.build_keras_model`), of which `config` then
  only gives the shapes.
  """

  def __init__(self, task: text2sql_task.Text2SqlTask,
               config: seq2seq.Seq2SeqConfig, batch_size: int,
               keras_model_fn: Optional[Callable[[], tf.keras.Model]] = None):
    self._task, self.config, self._batch_size = task, config, batch_size
    self._keras_model_fn = keras_model_fn or functools.partial(
        seq2seq.build_keras_model, config)

  def model_fn(self):
    return lambda: seq2seq_model_fn.wrap_keras_model(self._keras_model_fn())

  def keras_model(self) -> tf.keras.Model:
    return self._keras_model_fn()

  def train_dataset(self, data: text2sql_task.EncodedSplit,
                    **kwargs) -> tf.data.Dataset:
    return seq2seq_examples.train_dataset(data, **kwargs)

  def predictor(self, keras_model):
    """(client, EncodedSplit) -> predicted SQL with values."""
    decode_fn = seq2seq_decoding.make_decode_fn(
        keras_model, max_length=self.config.max_target_length)
    return lambda client, data: predict_sql(
        decode_fn, self._task.tokenizer, data, batch_size=self._batch_size,
        max_length=self._task.decode_length(client))

  def metrics_fn(self, keras_model):
    """EncodedSplit -> {'token_loss', 'token_accuracy'}."""
    return seq2seq_examples.make_token_metrics_fn(
        keras_model, batch_size=self._batch_size)

  def assign_weights(self, model_weights, keras_model) -> None:
    """Sets `keras_model()` to a process's `ModelWeights`."""
    model_weights.assign_weights_to(keras_model)

  def export_model(self, keras_model) -> tf.keras.Model:
    """The model to checkpoint (what `init_from` and users load)."""
    return keras_model


class LoraSeq2SeqParser(Seq2SeqParser):
  """The seq2seq parser fine-tuned with LoRA adapters from given weights.

  Its processes train and send only the adapters
  (`algorithms.build_lora_process`); `keras_model()` is the adapted model
  with the base weights, and `export_model` merges the adapters into a
  plain model, which a later run's `init_from` (or a user) loads.
  """

  def __init__(self, task: text2sql_task.Text2SqlTask,
               config: seq2seq.Seq2SeqConfig, batch_size: int,
               lora_model_fn: lora_model_fn_lib.LoraModelFn):
    super().__init__(task, config, batch_size, lora_model_fn.keras_model)
    self.lora_config = lora_model_fn.config
    self.lora_model_fn = lora_model_fn

  def model_fn(self):
    return self.lora_model_fn

  def keras_model(self) -> tf.keras.Model:
    return self.lora_model_fn.keras_model()

  def assign_weights(self, model_weights, keras_model) -> None:
    self.lora_model_fn.assign_weights_to(model_weights, keras_model)

  def export_model(self, keras_model) -> tf.keras.Model:
    return self.lora_model_fn.merged_keras_model(
        tff.learning.models.ModelWeights(
            trainable=[w.numpy() for w in keras_model.trainable_weights],
            non_trainable=[]))


class TemplateParser:
  """The template parser (`text2sql_templates`): how it trains, predicts."""

  def __init__(self, task: text2sql_task.Text2SqlTask,
               config: text2sql_templates.TemplateParserConfig,
               batch_size: int):
    self._task, self._batch_size = task, batch_size
    self.config = text2sql_templates.classifier_spec(config, task.tokenizer)

  def model_fn(self):
    return text_classifier.build_model_fn(self.config)

  def keras_model(self) -> tf.keras.Model:
    return text_classifier.build_keras_model(self.config)

  def train_dataset(self, data: text2sql_task.EncodedSplit,
                    **kwargs) -> tf.data.Dataset:
    return text2sql_templates.train_dataset(data, **kwargs)

  def predictor(self, keras_model):
    tokenizer = self._task.tokenizer

    def predict(client, data):
      del client  # The model's input names it.
      classes = text2sql_templates.predict_classes(
          keras_model, data.x, batch_size=self._batch_size)
      return [tokenizer.sql(c, sentence)
              for c, (_, sentence) in zip(classes, data.questions)]

    return predict

  def metrics_fn(self, keras_model):
    return functools.partial(text2sql_templates.template_metrics,
                             keras_model, batch_size=self._batch_size)

  def assign_weights(self, model_weights, keras_model) -> None:
    model_weights.assign_weights_to(keras_model)

  def export_model(self, keras_model) -> tf.keras.Model:
    return keras_model


def build_parser(task: text2sql_task.Text2SqlTask, model, batch_size: int,
                 lora_config: Optional[lora.LoraConfig] = None,
                 checkpoint: Optional[str] = None,
                 preset: Optional[tf.keras.Model] = None
                 ) -> Seq2SeqParser | TemplateParser:
  """The parser of `model`'s kind, sized to `task`.

  Args:
    task: The prepared task (`task_data.prepare_task` for a
      `seq2seq.Seq2SeqConfig`, `task_data.prepare_template_task` for a
      `text2sql_templates.TemplateParserConfig`).
    model: The parser's configuration. A `Seq2SeqConfig` gets the task's
      vocabulary, lengths and copying (`Text2SqlTask.model_config`).
    batch_size: Examples decoded (or classified) at once.
    lora_config: If set, the seq2seq parser is fine-tuned with these LoRA
      adapters (`LoraSeq2SeqParser`) from `checkpoint`.
    checkpoint: With `lora_config`: the pre-trained model
      (`seq2seq.save_checkpoint`); None puts the adapters on the freshly
      initialised model.
    preset: A keras-nlp preset's model (`keras_nlp_preset.load_preset`):
      the parser has its architecture and (with `lora_config`) its weights
      as the frozen base; `model` then gives only the seed. The task's
      lengths must fit the preset's `max_sequence_length`.

  Returns:
    A `Seq2SeqParser` (`LoraSeq2SeqParser`) or `TemplateParser`: its
    `config`, `model_fn()`, `keras_model()`, `train_dataset(split,
    batch_size=, shuffle_seed=)`, `predictor(keras_model)` ((client, split)
    -> SQL), `metrics_fn(keras_model)` (split -> token loss and accuracy),
    `assign_weights(model_weights, keras_model)` and
    `export_model(keras_model)`.

  Raises:
    ValueError: For `lora_config` or `preset` with the template parser, or
      task lengths beyond the preset's.
  """
  if isinstance(model, text2sql_templates.TemplateParserConfig):
    if lora_config is not None or preset is not None:
      raise ValueError('LoRA adapters and keras-nlp presets need the '
                       'seq2seq parser, not the template parser.')
    return TemplateParser(task, model, batch_size)
  if preset is not None:
    limit = preset.config.max_source_length
    if max(task.source_length, task.target_length) > limit:
      raise ValueError(
          f'The task\'s lengths ({task.source_length} source, '
          f'{task.target_length} target tokens) exceed the preset\'s '
          f'max_sequence_length {limit}: set --max_source_length and '
          '--max_target_length.')
    config = dataclasses.replace(
        preset.config, seed=model.seed, max_source_length=task.source_length,
        max_target_length=task.target_length)
    keras_model_fn = functools.partial(
        keras_nlp_preset.build_keras_model, preset.backbone.get_config(),
        model.seed)
    if lora_config is None:
      return Seq2SeqParser(task, config, batch_size, keras_model_fn)
    return LoraSeq2SeqParser(task, config, batch_size,
                             lora_model_fn_lib.LoraModelFn(
                                 keras_model_fn, lora_config,
                                 preset.get_weights(),
                                 seq2seq_model_fn.wrap_keras_model))
  config = task.model_config(model)
  if lora_config is None:
    return Seq2SeqParser(task, config, batch_size)
  return LoraSeq2SeqParser(task, config, batch_size,
                           seq2seq_model_fn.build_lora_model_fn(
                               config, lora_config, checkpoint))


def predict_sql(decode_fn, tokenizer, data: text2sql_task.EncodedSplit, *,
                batch_size: int, max_length: Optional[int] = None
                ) -> list[str]:
  """Decoded SQL per example, with values filled in on the anonymised protocol.

  `max_length`: see `seq2seq_examples.decode` (`Text2SqlTask.decode_length`).
  """
  predictions = seq2seq_examples.decode(
      decode_fn, tokenizer, data, batch_size=batch_size, max_length=max_length)
  if data.variables is None:
    return predictions
  return [text2sql.fill_variables(p, v)
          for p, v in zip(predictions, data.variables)]


@dataclasses.dataclass
class Unit:
  """One trained model: what it trains on and how it is selected."""

  name: str  # 'federated', 'centralized' or a client (finetune)
  train_clients: list[str]
  dev_clients: list[str]
  test_clients: list[str]


def training_units(training: text2sql_task.TrainingConfig,
                   clients: Sequence[str]) -> list[Unit]:
  """The models `training.paradigm` trains on `clients`.

  One per client for `finetune` (named after it), else one (`federated` or
  `centralized`) trained on, selected on and tested on every client.
  """
  if training.paradigm == 'finetune':
    return [Unit(c, [c], [c], [c]) for c in clients]
  return [Unit(training.paradigm, list(clients), list(clients),
               list(clients))]


def unit_learning_rate(training: text2sql_task.TrainingConfig,
                       unit: Unit) -> float:
  """The client learning rate of `unit`: its client's when finetuning.

  The only part of `build_process`'s process that differs between the
  units of one run.
  """
  if training.paradigm == 'finetune':
    return training.learning_rates[unit.train_clients[0]]
  return training.learning_rates.default


def frozen_weights_digest(parser: Seq2SeqParser | TemplateParser
                          ) -> Optional[str]:
  """Of the base weights a LoRA parser's computations carry; else None.

  Part of a process cache key (`tff_nlp.training.ProcessCache`): two LoRA
  runs of one configuration from different pre-trained weights (the same
  `init_from` path, rewritten) build different computations.
  """
  if not isinstance(parser, LoraSeq2SeqParser):
    return None
  return training_lib.weights_digest(parser.keras_model().get_weights())


def build_process(training: text2sql_task.TrainingConfig,
                  parser: Seq2SeqParser | TemplateParser, unit: Unit,
                  vocab_slice_keys: int = 0,
                  num_examples_fallback: bool = True,
                  model_aggregator: Optional[
                      tff.aggregators.WeightedAggregationFactory] = None,
                  ) -> tff.learning.templates.LearningProcess:
  """The learning process that trains `unit` (with client configs).

  Federated: `training`'s algorithm and weighting. Otherwise a FedAvg with
  `num_examples` weighting over the unit's one client (the union of the
  training sets for `centralized`); a round is then one epoch.

  Args:
    training: The training configuration.
    parser: From `build_parser`.
    unit: From `training_units`.
    vocab_slice_keys: If > 0, vocabulary-sliced FedAvg
      (`vocab_sliced.build_vocab_sliced_process`) with this many
      token-embedding rows per client.
    num_examples_fallback: See `algorithms.build_fl_process`.
    model_aggregator: The federated paradigm's model aggregator (see
      `algorithms.build_fl_process`; e.g. from
      `aggregators.factory.build_model_aggregator`); None: the weighted
      mean. Not for vocabulary slicing or the other paradigms.

  Returns:
    A process whose `next` takes `templates.with_client_config` client
    data (`build_client_data_fn`).
  """
  optimizer = templates.CLIENT_OPTIMIZERS[training.client_optimizer]
  learning_rate = unit_learning_rate(training, unit)
  federated = training.paradigm == 'federated'
  if model_aggregator is not None and (vocab_slice_keys or not federated):
    raise ValueError(
        'model_aggregator applies to the federated paradigm without '
        f'vocab_slice_keys, got paradigm={training.paradigm!r}, '
        f'vocab_slice_keys={vocab_slice_keys}.')
  if vocab_slice_keys and isinstance(parser, LoraSeq2SeqParser):
    raise ValueError('vocab_slice_keys and LoRA adapters are two ways of '
                     'sending part of the model; use one.')
  if vocab_slice_keys:
    return vocab_sliced.build_vocab_sliced_process(
        parser.config, max_keys=vocab_slice_keys,
        client_optimizer_fn=optimizer(learning_rate=learning_rate),
        with_client_config=True)
  build = (algorithms.build_lora_process
           if isinstance(parser, LoraSeq2SeqParser)
           else algorithms.build_fl_process)
  return build(
      parser.model_fn(),
      algorithm=training.algorithm if federated else 'fedavg',
      weighting=training.weighting if federated else 'num_examples',
      client_optimizer_fn=optimizer(learning_rate=learning_rate),
      proximal_strength=(training.proximal_strength
                         if federated and training.algorithm == 'fedprox'
                         else 0.0),
      model_aggregator=model_aggregator,
      with_client_config=True,
      num_examples_fallback=num_examples_fallback,
      # Each client's weight and losses, in metrics.jsonl (the reports'
      # per-client figures read them).
      client_outputs=True,
  )


def build_client_data_fn(
    task: text2sql_task.Text2SqlTask, unit: Unit,
    training: text2sql_task.TrainingConfig, seed: int,
    parser: Seq2SeqParser | TemplateParser,
    slices: Optional[Mapping[str, tuple[Any, ...]]] = None,
) -> Callable[[int, Sequence[int]], list[tf.data.Dataset]]:
  """The round's client data; with `slices`, sub-vocabularies and local ids.

  Args:
    task: The prepared task.
    unit: The trained model (`training_units`); client ids index its
      `train_clients`.
    training: Batch sizes, learning rates and local epochs per client.
    seed: Seeds the shuffling, with the round (and the client).
    parser: From `build_parser` (its `train_dataset`).
    slices: Client -> (`vocab_sliced` vocabulary, the client's training
      split in local ids, ...) for vocabulary-sliced FedAvg.

  Returns:
    `(round_num, client_ids) -> datasets`, as `training.run_training` takes
    it: `templates.with_client_config` datasets (one, the union of the
    training sets, for `centralized`).
  """
  slices = slices or {}
  if training.paradigm == 'centralized':
    union = text2sql_task.concatenate(
        [task.splits[c]['train'] for c in unit.train_clients])

    def centralized_data(round_num, client_ids):
      del client_ids  # The one client: the union.
      return [templates.with_client_config(
          parser.train_dataset(
              union, batch_size=int(training.batch_sizes.default),
              shuffle_seed=(seed, round_num)),
          learning_rate=training.learning_rates.default, num_epochs=1)]

    return centralized_data

  def client_data(round_num, client_ids):
    data = []
    for i in client_ids:
      name = unit.train_clients[i]
      train = slices[name][1] if name in slices else task.splits[name][
          'train']
      client = templates.with_client_config(
          parser.train_dataset(
              train, batch_size=int(training.batch_sizes[name]),
              shuffle_seed=(seed, round_num, text2sql.CLIENTS.index(name))),
          learning_rate=training.learning_rates[name],
          num_epochs=(int(training.local_epochs[name])
                      if training.paradigm == 'federated' else 1))
      if name in slices:
        client = vocab_sliced.client_data(slices[name][0], client)
      data.append(client)
    return data

  return client_data
