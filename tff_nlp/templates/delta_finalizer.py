"""The server step of a sparse round: apply the averaged update to the model.

Step 7 of a round (see `tff_nlp.algorithms.partial_models`). Updates follow TFF's convention:
a client's update is its initial minus its trained weights (a
pseudo-gradient), and the server subtracts the mean update. Applying an
update, not averaging client models, is what keeps the rows no client
selected this round: they are not in the mean update
(`IndexedSlicesMeanFactory`), so they stay as they were. An IndexedSlices
update is scattered into its rows only (`tf.tensor_scatter_nd_sub`), so the
step's arithmetic is O(rows uploaded), not O(V).
That holds for plain SGD on the server; momentum or adaptive optimizers
would keep moving rows nobody trained, so this step is SGD without momentum.
"""

import collections
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.aggregators import indexed_slices as aggregation


def build_delta_finalizer(
    model_weights_type, *, learning_rate: float = 1.0,
    update_type: Optional[Any] = None,
) -> tff.learning.templates.FinalizerProcess:
  """Builds `weights - learning_rate * mean_update`, rejecting non-finite ones.

  SGD without momentum on the mean update as pseudo-gradient, tensor by
  tensor: a dense update is subtracted whole, an IndexedSlices update
  (`<indices=int64[?],values=float32[?,...]>` with distinct ids, as the
  `tff_nlp.algorithms.partial_models` aggregators return it) from its rows only. A non-finite
  update is rejected (the model is kept) and counted in `update_non_finite`.

  Args:
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    learning_rate: The server learning rate (1.0: the new model is the old
      one minus the mean update, i.e. plus the mean client change).
    update_type: The update's type, one element per trainable tensor: the
      tensor's own type (dense) or IndexedSlices of its rows. None: every
      tensor dense.

  Returns:
    A `FinalizerProcess` whose `next` has type
    `(<<>@SERVER, W@SERVER, U@SERVER> -> <state=<>@SERVER, result=W@SERVER,
    measurements=<update_non_finite=int32>@SERVER>)` with W =
    `model_weights_type` and U `update_type`.

  Raises:
    ValueError: If `learning_rate` is not positive.
    TypeError: If `update_type` does not match the trainable tensors.
  """
  if not learning_rate > 0:
    raise ValueError(f'learning_rate must be > 0, got {learning_rate!r}.')
  weights_type = tff.types.to_type(model_weights_type)
  trainable_types = list(weights_type.trainable)
  if update_type is None:
    update_type = tff.types.to_type(trainable_types)
  update_type = tff.types.to_type(update_type)
  elements = [t for _, t in tff.structure.iter_elements(update_type)]
  if len(elements) != len(trainable_types):
    raise TypeError(f'update_type has {len(elements)} parts, the model '
                    f'{len(trainable_types)} trainable tensors: {update_type}')
  sparse_parts = []
  for i, (part, tensor) in enumerate(zip(elements, trainable_types)):
    if aggregation.is_indexed_slices_type(part):
      part.values.check_assignable_from(tff.TensorType(
          tensor.dtype, [None] + list(tensor.shape[1:])))
      sparse_parts.append(i)
    else:
      part.check_assignable_from(tensor)

  @tff.tensorflow.computation(weights_type, update_type)
  def apply(weights, update):
    update = list(update)
    parts = [u[aggregation.VALUES] if i in sparse_parts else u
             for i, u in enumerate(update)]
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(p))
                            for p in parts])
    old = list(weights.trainable)

    def stepped():
      new = []
      for i, (w, u) in enumerate(zip(old, update)):
        if i in sparse_parts:
          ids = u[aggregation.INDICES]
          # tensor_scatter_nd_sub drops an out-of-range id on CPU: fail.
          check = tf.debugging.assert_less(
              ids, tf.cast(tf.shape(w, out_type=tf.int64)[0], ids.dtype),
              message=f'update of trainable tensor {i}: row id out of range')
          with tf.control_dependencies([check]):
            new.append(tf.tensor_scatter_nd_sub(
                w, tf.expand_dims(ids, 1),
                learning_rate * u[aggregation.VALUES]))
        else:
          new.append(w - learning_rate * u)
      return new

    trainable = tf.cond(finite, stepped, lambda: old)
    return collections.OrderedDict(
        weights=tff.learning.models.ModelWeights(
            trainable=trainable, non_trainable=list(weights.non_trainable)),
        update_non_finite=1 - tf.cast(finite, tf.int32))

  @tff.federated_computation
  def initialize():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(
      initialize.type_signature.result,
      tff.FederatedType(weights_type, tff.SERVER),
      tff.FederatedType(update_type, tff.SERVER))
  def next_fn(state, weights, update):
    applied = tff.federated_map(apply, (weights, update))
    return tff.templates.MeasuredProcessOutput(
        state=state, result=applied.weights,
        measurements=tff.federated_zip(collections.OrderedDict(
            update_non_finite=applied.update_non_finite)))

  return tff.learning.templates.FinalizerProcess(initialize, next_fn)
