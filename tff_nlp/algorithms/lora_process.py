"""Federated LoRA fine-tuning: clients train and send only adapters.

Reference: Edward J. Hu et al. LoRA: Low-Rank Adaptation of Large Language
Models. ICLR 2022. https://arxiv.org/abs/2106.09685

`build_lora_process` is `build_fl_process` (FedAvg / FedOPT / FedProx with
any client weighting, Lorar included, and any model aggregator) on a
`models.lora_model_fn.LoraModelFn`, whose model weights are the adapters'
factors only. What moves in a round:

*   down: the global factors (broadcast);
*   up: each client's factor deltas and weight, through the aggregator;
*   never in a round: the frozen pre-trained weights. They are constants of
    the client computation (`LoraModelFn`), which reaches each client once.

The training loop's communication metrics (`bytes_down_per_client`,
`bytes_up_per_client`, from `analysis.round_communication`, which reads
the types) therefore count the factors only; `LoraModelFn.base_bytes` is
the one-off size of the base.
"""

from typing import Any

import tensorflow_federated as tff

from tff_nlp.algorithms import fl_process
from tff_nlp.models import lora_model_fn as lora_model_fn_lib


def build_lora_process(model_fn: lora_model_fn_lib.LoraModelFn,
                       **fl_process_args: Any
                       ) -> tff.learning.templates.LearningProcess:
  """Builds federated LoRA fine-tuning of a pre-trained model.

  The process's methods, with F the adapters' factors (and LayerNorms if
  `LoraConfig.train_layer_norms`), in `model_fn.keras_model()`'s
  `trainable_weights` order:

  *   `initialize`: `( -> S@SERVER)`, S a
      `tff.learning.templates.LearningAlgorithmState` whose
      `global_model_weights` are `<trainable=F, non_trainable=<>>`: A random
      (`LoraConfig.seed`), B zero, so the initial model is the base.
  *   `next`: `(<S@SERVER, {D}@CLIENTS> -> <state=S@SERVER, metrics=M@SERVER>)`
      exactly as `build_fl_process`'s, with D the client's batches (or
      `<examples=B*, config=<learning_rate, num_epochs>*>` with
      `with_client_config=True`).
  *   `get_model_weights`: `(S -> <trainable=F, non_trainable=<>>)`;
      `model_fn.merged_keras_model(weights)` gives the fine-tuned plain
      model, `model_fn.assign_weights_to(weights, keras_model)` sets an
      adapted one.

  With `client_outputs=True`, an `fl_process.FLProcess`, whose `next` also
  returns each client's statistics: `(<S@SERVER, {D}@CLIENTS> ->
  <state=S@SERVER, metrics=M@SERVER, client_outputs={C}@CLIENTS>)`, C as in
  `build_fl_process`.

  Args:
    model_fn: The `LoraModelFn` of the pre-trained model and adapters.
    **fl_process_args: `build_fl_process`'s arguments: `algorithm`,
      `weighting`, `client_optimizer_fn` (required), `server_optimizer_fn`,
      `proximal_strength` (FedProx pulls the factors towards the round's
      global factors), `model_aggregator`, `with_client_config`,
      `metrics_aggregator`, `num_examples_fallback`, `max_weight_share`,
      `client_outputs`.

  Returns:
    A `tff.learning.templates.LearningProcess` (an `FLProcess` with
    `client_outputs=True`).

  Raises:
    TypeError: If `model_fn` is not a `LoraModelFn` (a plain `model_fn`
      would broadcast the frozen weights every round).
    ValueError: As `build_fl_process`.
  """
  if not isinstance(model_fn, lora_model_fn_lib.LoraModelFn):
    raise TypeError(
        'model_fn must be a tff_nlp.models.lora_model_fn.LoraModelFn (a '
        'plain model_fn would broadcast the frozen weights every round), '
        f'got {type(model_fn)}.')
  return fl_process.build_fl_process(model_fn, **fl_process_args)
