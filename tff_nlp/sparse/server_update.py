"""The server step of a sparse round: apply the averaged update to the model.

Step 7 of a round (see `tff_nlp.sparse`). Updates follow TFF's convention:
a client's update is its initial minus its trained weights (a
pseudo-gradient), and the server subtracts the mean update. Applying an
update, not averaging client models, is what keeps the rows no client
selected this round: their mean update is 0 (`IndexedSlicesMeanFactory`), so
they stay as they were.
That holds for plain SGD on the server; momentum or adaptive optimizers
would keep moving rows nobody trained, so this step is SGD without momentum.
"""

import tensorflow_federated as tff


def build_delta_finalizer(
    model_weights_type, *, learning_rate: float = 1.0
) -> tff.learning.templates.FinalizerProcess:
  """Builds `weights - learning_rate * mean_update`, rejecting non-finite ones.

  A thin, documented use of TFF's
  `tff.learning.templates.build_apply_optimizer_finalizer` with
  `tff.learning.optimizers.build_sgdm(learning_rate)` (no momentum) on the
  mean update as pseudo-gradient. A non-finite update is rejected (the model
  is kept) and counted in `update_non_finite`.

  Args:
    model_weights_type: The `tff.learning.models.ModelWeights` type.
    learning_rate: The server learning rate (1.0: the new model is the old
      one minus the mean update, i.e. plus the mean client change).

  Returns:
    A `FinalizerProcess` whose `next` has type
    `(<<>@SERVER, W@SERVER, U@SERVER> -> <state=<>@SERVER, result=W@SERVER,
    measurements=<update_non_finite=int32>@SERVER>)` with W =
    `model_weights_type` and U its trainable part (the optimizer state is
    empty for SGD without momentum, shown here as `<>`).

  Raises:
    ValueError: If `learning_rate` is not positive.
  """
  if not learning_rate > 0:
    raise ValueError(f'learning_rate must be > 0, got {learning_rate!r}.')
  return tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(learning_rate=learning_rate),
      tff.types.to_type(model_weights_type))
