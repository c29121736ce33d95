"""The seq2seq model's loss and token accuracy, both ignoring padding.

The loss is the cross-entropy averaged over the batch's non-padding target
tokens; the accuracy counts the non-padding target tokens whose argmax
prediction is right. Both take labels [B, T] and logits [B, T, V] (`seq2seq`,
`seq2seq_inputs`).
"""

import tensorflow as tf

from tff_nlp.models import subword_tokenizer


@tf.keras.utils.register_keras_serializable(package='tff_nlp')
class MaskedSparseCategoricalCrossentropy(tf.keras.losses.Loss):
  """Cross-entropy on logits, averaged over the non-padding target tokens.

  For labels y [B, T], logits [B, T, V] and optional weights w ([B] or
  [B, T], default 1): Σ_bt m_bt·w_bt·(-log softmax(logits_bt)[y_bt]) /
  Σ_bt m_bt·w_bt with m_bt = [y_bt ≠ pad_id], so all of a batch's tokens
  weigh the same whatever sequence they are in; 0 if the batch has no
  target token.

  It gives the value of Keras's `SparseCategoricalCrossentropy(
  from_logits=True, ignore_class=pad_id)` but computes the cross-entropy of
  every position and masks it, where Keras gathers the non-padding logits
  (a copy of [B·T, V] floats, and a shape XLA cannot compile).

  Args:
    pad_id: The label id to ignore.
    name: The loss's name.
  """

  def __init__(self, pad_id: int = subword_tokenizer.PAD_ID,
               name: str = 'masked_sparse_categorical_crossentropy'):
    super().__init__(name=name)
    self.pad_id = pad_id

  def __call__(self, y_true, y_pred, sample_weight=None):
    with tf.name_scope(self.name):
      y_true = tf.cast(y_true, tf.int32)
      losses = self.call(y_true, y_pred)
      weights = tf.cast(tf.not_equal(y_true, self.pad_id), losses.dtype)
      if sample_weight is not None:
        sample_weight = tf.cast(sample_weight, losses.dtype)
        if sample_weight.shape.rank == 1:
          sample_weight = sample_weight[:, tf.newaxis]
        weights *= sample_weight
      return tf.math.divide_no_nan(
          tf.reduce_sum(losses * weights), tf.reduce_sum(weights)
      )

  def call(self, y_true, y_pred):
    """The per-token losses [B, T] (any value at padding)."""
    y_true = tf.cast(y_true, tf.int32)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.where(tf.not_equal(y_true, self.pad_id), y_true, 0),
        logits=tf.convert_to_tensor(y_pred),
    )

  def get_config(self):
    return {'pad_id': self.pad_id, 'name': self.name}


def masked_loss() -> tf.keras.losses.Loss:
  """The training loss: `MaskedSparseCategoricalCrossentropy()`."""
  return MaskedSparseCategoricalCrossentropy()


@tf.keras.utils.register_keras_serializable(package='tff_nlp')
class MaskedTokenAccuracy(tf.keras.metrics.Mean):
  """Fraction of non-padding target tokens whose argmax prediction is right.

  Its state (total correct, count) sums over batches and clients, so the
  federated value is the token accuracy over all clients' tokens.

  Args:
    pad_id: The label id to ignore.
    name: The metric's name.
    dtype: The metric's dtype.
  """

  def __init__(self, pad_id: int = subword_tokenizer.PAD_ID,
               name: str = 'token_accuracy',
               dtype=None):
    super().__init__(name=name, dtype=dtype)
    self.pad_id = pad_id

  def update_state(self, y_true, y_pred, sample_weight=None):
    y_true = tf.cast(y_true, tf.int32)
    correct = tf.cast(
        tf.equal(tf.argmax(y_pred, axis=-1, output_type=tf.int32), y_true),
        self.dtype,
    )
    weight = tf.cast(tf.not_equal(y_true, self.pad_id), self.dtype)
    if sample_weight is not None:
      sample_weight = tf.cast(sample_weight, self.dtype)
      if sample_weight.shape.rank == 1:
        sample_weight = sample_weight[:, tf.newaxis]
      weight *= sample_weight
    return super().update_state(correct, sample_weight=weight)

  def get_config(self):
    config = super().get_config()
    config.update({'pad_id': self.pad_id})
    return config
