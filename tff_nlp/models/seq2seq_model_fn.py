"""The seq2seq model (`seq2seq`) as a `tff.learning` model.

`build_model_fn` returns the `model_fn` of `tff_nlp.algorithms`' builders;
`load_model_weights` reads a checkpoint written by `seq2seq.save_checkpoint`
as the `tff.learning.models.ModelWeights` a process starts from;
`build_lora_model_fn` the `model_fn` of federated LoRA fine-tuning of a
pre-trained checkpoint (`algorithms.build_lora_process`).
"""

from collections.abc import Callable
import functools
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.models import lora
from tff_nlp.models import lora_model_fn
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_inputs
from tff_nlp.models import seq2seq_loss


def build_model_fn(
    config: seq2seq.Seq2SeqConfig,
) -> Callable[[], tff.learning.models.VariableModel]:
  """Returns a `model_fn` for `tff_nlp.algorithms.build_fl_process`.

  To start a process from a checkpoint: `process.set_model_weights(state,
  load_model_weights(config, checkpoint))`.

  Args:
    config: The model's shape and seed.

  Returns:
    A no-arg callable that builds a new Keras model (same initial weights on
    every call) and wraps it with `tff.learning.models.from_keras_model`,
    with `seq2seq_loss.masked_loss`, `seq2seq_loss.MaskedTokenAccuracy` and
    example and batch counts as metrics, taking batches as described by
    `seq2seq_inputs.input_spec`.
  """

  def model_fn() -> tff.learning.models.VariableModel:
    return wrap_keras_model(seq2seq.build_keras_model(config))

  return model_fn


def wrap_keras_model(
    keras_model: tf.keras.Model) -> tff.learning.models.VariableModel:
  """A seq2seq Keras model (this project's or `keras_nlp_preset`'s) as a
  `tff.learning` model: the masked loss, token accuracy, counts."""
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=seq2seq_loss.masked_loss(),
      input_spec=seq2seq_inputs.input_spec(),
      metrics=[
          seq2seq_loss.MaskedTokenAccuracy(),
          tff.learning.metrics.NumExamplesCounter(),
          tff.learning.metrics.NumBatchesCounter(),
      ],
  )


def build_lora_model_fn(
    config: seq2seq.Seq2SeqConfig, lora_config: lora.LoraConfig,
    checkpoint: Optional[str] = None) -> lora_model_fn.LoraModelFn:
  """The `model_fn` of LoRA fine-tuning from a pre-trained checkpoint.

  Args:
    config: The model's shape (that of the checkpoint).
    lora_config: The adapters.
    checkpoint: A `seq2seq.save_checkpoint` checkpoint of the pre-trained
      model; None fine-tunes the freshly initialised model of
      `config.seed` (a baseline: adapters on random weights).

  Returns:
    A `lora_model_fn.LoraModelFn` with `build_model_fn`'s loss, metrics and
    input spec, for `algorithms.build_lora_process`.
  """
  base = seq2seq.build_keras_model(config, checkpoint).get_weights()
  return lora_model_fn.LoraModelFn(
      functools.partial(seq2seq.build_keras_model, config), lora_config,
      base, wrap_keras_model)


def load_model_weights(
    config: seq2seq.Seq2SeqConfig, checkpoint: str
) -> tff.learning.models.ModelWeights:
  """The weights in `checkpoint`, ordered as `build_model_fn`'s model's."""
  return tff.learning.models.ModelWeights.from_model(
      seq2seq.build_keras_model(config, checkpoint)
  )

