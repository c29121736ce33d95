"""The seq2seq model's tensors by group and layer, for dynamic pulling.

`tensor_layout` tells, for each trainable tensor of `seq2seq`'s model, its
group ('encoder' or 'decoder'), layer and size; `controller_mask` selects
the tensors the Controllers baseline exchanges. Used by
`tff_nlp.algorithms.dynamic_pulling`.
"""

from collections.abc import Sequence
from typing import NamedTuple, Optional

from tff_nlp.models import seq2seq

ENCODER_GROUP = 'encoder'
DECODER_GROUP = 'decoder'


class TensorInfo(NamedTuple):
  """One trainable tensor of `Seq2SeqTransformer` (see `tensor_layout`).

  Attributes:
    name: The Keras variable name (informational: not unique, since keras-nlp
      names some decoder sublayer variables without their layer's prefix,
      e.g. 'seq2seq_transformer/gamma:0').
    group: 'encoder' or 'decoder'.
    layer: The index `i` of `encoder_layers[i]` / `decoder_layers[i]` that
      owns the tensor, or None for embeddings and output layer norms.
    num_parameters: Its number of elements.
  """

  name: str
  group: str
  layer: Optional[int]
  num_parameters: int


def tensor_layout(
    config: seq2seq.Seq2SeqConfig, *, token_embedding_group: str = ENCODER_GROUP
) -> list[TensorInfo]:
  """Group, layer and size of each trainable tensor of the model.

  In the order of `seq2seq.build_keras_model(config).trainable_variables`,
  which is the order of `tff.learning.models.ModelWeights.trainable` of
  `seq2seq_model_fn.build_model_fn(config)`'s model. Groups:

  *   'encoder': `encoder_position_embedding`, the tensors of
      `encoder_layers[i]` (layer i) and `encoder_output_layer_norm`;
  *   'decoder': `decoder_position_embedding`, `decoder_layers[i]` (layer i)
      and `decoder_output_layer_norm`;
  *   the shared `token_embedding`: `token_embedding_group`, 'encoder' by
      default because it is the source side's input embedding, its first
      use in the forward pass. It is also the decoder's input embedding and
      (tied) the output projection, so neither group owns it alone; a caller
      may pass another group name to give it a group of its own.

  Variables are mapped to layers by object identity, not by name: keras-nlp's
  decoder sublayer variables do not carry their layer's name.

  Args:
    config: The model's shape (the weights are built and discarded).
    token_embedding_group: The group of the tied token embedding.

  Returns:
    One `TensorInfo` per trainable variable.

  Raises:
    ValueError: If a trainable variable belongs to none or to more than one
      of these components (a change of the model this function must follow).
  """
  model = seq2seq.build_keras_model(config)
  owners = [
      (model.token_embedding, token_embedding_group, None),
      (model.encoder_position_embedding, ENCODER_GROUP, None),
      (model.decoder_position_embedding, DECODER_GROUP, None),
      (model.encoder_output_layer_norm, ENCODER_GROUP, None),
      (model.decoder_output_layer_norm, DECODER_GROUP, None),
  ]
  owners += [(layer, ENCODER_GROUP, i)
             for i, layer in enumerate(model.encoder_layers)]
  owners += [(layer, DECODER_GROUP, i)
             for i, layer in enumerate(model.decoder_layers)]
  if config.copy_from_source:
    owners += [(layer, DECODER_GROUP, None) for layer in
               (model.copy_query, model.copy_key, model.copy_input)]
  owner_of = {}
  for layer, group, index in owners:
    for variable in layer.trainable_weights:
      key = variable.ref()
      if key in owner_of:
        raise ValueError(f'Variable {variable.name} belongs to two layers.')
      owner_of[key] = (group, index)
  layout = []
  for variable in model.trainable_variables:
    if variable.ref() not in owner_of:
      raise ValueError(f'Variable {variable.name} belongs to no known layer '
                       'of Seq2SeqTransformer; update tensor_layout.')
    group, index = owner_of[variable.ref()]
    layout.append(TensorInfo(name=variable.name, group=group, layer=index,
                             num_parameters=int(variable.shape.num_elements())))
  return layout


def controller_mask(
    layout: Sequence[TensorInfo], layers: Sequence[int] = (0, 3)
) -> list[bool]:
  """The tensors of the Controllers baseline (Roosta et al., 2021).

  Only the encoder and decoder layers whose index is in `layers` are
  exchanged, e.g. (0, 3) for the paper's "6E6D (0-3)"; embeddings and output
  layer norms stay local. For `dynamic_pulling.build_dynamic_pulling_process(
  ..., mode='controllers', exchanged=controller_mask(layout))`.

  Args:
    layout: `tensor_layout(config)`.
    layers: Layer indices to exchange, in both the encoder and the decoder.

  Returns:
    One bool per tensor of `layout`: whether it is exchanged.

  Raises:
    ValueError: If an index of `layers` is a layer of neither the encoder nor
      the decoder.
  """
  present = {t.layer for t in layout
             if t.group in (ENCODER_GROUP, DECODER_GROUP)
             and t.layer is not None}
  missing = sorted(set(layers) - present)
  if missing:
    raise ValueError(f'layers {missing} do not exist; the model has layers '
                     f'{sorted(present)}.')
  return [t.group in (ENCODER_GROUP, DECODER_GROUP) and t.layer is not None
          and t.layer in layers for t in layout]
