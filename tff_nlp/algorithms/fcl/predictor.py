"""`Predictor`: a client model's predictions from its weights."""

import numpy as np
import tensorflow as tf

from tff_nlp.models import fcl_cnn


class Predictor:
  """A client model's predictions for any task, from a weight dict.

  Inference as in FedWeIT: task-adaptive weights pruned at |a| > λ1 (spec
  §3). One Keras model and one traced function serve every call.

  Args:
    spec: The model.
    adaptive_threshold: λ1 (the config's `sparsity`).
    batch_size: Examples per forward pass.
  """

  def __init__(self, spec: fcl_cnn.FclCnnSpec, *, adaptive_threshold: float,
               batch_size: int = 256):
    self._model = fcl_cnn.FclTextCnn(spec)
    self._model.adaptive_threshold = adaptive_threshold
    self._variables = self._model.weight_dict()
    self._batch_size = batch_size
    self._forward = tf.function(
        self._logits,
        input_signature=[tf.TensorSpec([None, spec.max_length], tf.int32),
                         tf.TensorSpec([], tf.int32)])

  def _logits(self, token_ids, task):
    return self._model((token_ids, task), training=False)

  def logits(self, weights, task: int, token_ids: np.ndarray) -> np.ndarray:
    """Logits `[N, num_classes]` of task `task`'s head.

    Args:
      weights: A client's `ClientState.weights` (key -> numpy value).
      task: The task whose head (and task-specific weights) are used.
      token_ids: int32 `[N, L]`.
    """
    for key, variable in self._variables.items():
      variable.assign(weights[key])
    task = tf.constant(task, tf.int32)
    outputs = [self._forward(token_ids[i:i + self._batch_size], task).numpy()
               for i in range(0, len(token_ids), self._batch_size)]
    if not outputs:
      return np.zeros([0, self._model.spec.num_classes], np.float32)
    return np.concatenate(outputs)

  def predict(self, weights, task: int, token_ids: np.ndarray) -> np.ndarray:
    """Predicted labels, int `[N]` (argmax of `logits`)."""
    return np.argmax(self.logits(weights, task, token_ids), axis=-1)
