"""One logistic regression per tag over a bag of words.

The model of TFF's federated_select tutorial: a single weight matrix W of
shape [V, T] (word rows, OOV buckets included, by tag columns, OOV buckets
included), no bias; the logits of a batch are `bag @ W` with the bag's word
counts, and the loss is the sigmoid cross-entropy averaged over examples and
tags. The same functions score the sparse local model (M rows) and the dense
one (V rows), so the two processes train exactly the same model.
"""

import collections
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.algorithms.partial_models import local_vocabulary

WEIGHTS_NAME = 'tag_weights'


def logits(bag: Any, weights: tf.Tensor) -> tf.Tensor:
  """[B, T] logits of a bag [B, V] (struct or SparseTensor) and W [V, T]."""
  sparse = local_vocabulary.bag_to_sparse(bag)
  return tf.sparse.sparse_dense_matmul(
      tf.cast(sparse, weights.dtype), weights)


def loss(batch_logits: tf.Tensor, tags: tf.Tensor) -> tf.Tensor:
  """Sigmoid cross-entropy, averaged over examples and tags."""
  return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=tags, logits=batch_logits))


class TagRegression(tf.keras.Model):
  """W [V, T] as a Keras model on bag-of-words structs, for `tff.learning`.

  The dense baseline (FedAvg through `tff_nlp.algorithms.build_fl_process`)
  wraps this with `tff.learning.models.from_keras_model`; its loss,
  `tf.keras.losses.BinaryCrossentropy(from_logits=True)`, is `loss` above.

  Args:
    num_words: V, word rows (OOV buckets included).
    num_tags: T, tag columns (OOV buckets included).
    **kwargs: Passed to `tf.keras.Model`.
  """

  def __init__(self, num_words: int, num_tags: int, **kwargs):
    super().__init__(**kwargs)
    self.num_words = num_words
    self.num_tags = num_tags
    self.tag_weights = self.add_weight(
        name=WEIGHTS_NAME, shape=[num_words, num_tags],
        initializer='zeros', trainable=True)

  def call(self, inputs, training=False):
    del training
    return logits(inputs, self.tag_weights)

  def get_config(self):
    return dict(super().get_config(), num_words=self.num_words,
                num_tags=self.num_tags)


def build_model_fn(num_words: int, num_tags: int):
  """A `model_fn` for `tff.learning`: `TagRegression` on (tokens, tags).

  Batches must be `(tokens, tags)` pairs (see `as_keras_batches`).

  Args:
    num_words: V.
    num_tags: T.

  Returns:
    A no-arg callable returning a `tff.learning.models.VariableModel`.
  """
  bag_spec = collections.OrderedDict(
      indices=tf.TensorSpec([None, 2], tf.int64),
      values=tf.TensorSpec([None], tf.int32),
      dense_shape=tf.TensorSpec([2], tf.int64))
  input_spec = (bag_spec, tf.TensorSpec([None, num_tags], tf.float32))

  def model_fn():
    return tff.learning.models.from_keras_model(
        TagRegression(num_words, num_tags),
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
        input_spec=input_spec)

  return model_fn


def as_keras_batches(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`<tokens, tags>` batches as the `(x, y)` pairs Keras models take."""
  return dataset.map(lambda batch: (batch['tokens'], batch['tags']))


def hits_at_k(scores: np.ndarray, tags: np.ndarray, *, k: int,
              num_real_tags: int) -> np.ndarray:
  """Per example, how many of its k top-scored in-vocabulary tags are true.

  Only the first `num_real_tags` columns are ranked; equal scores rank the
  lower tag id first. `hits / k` is each example's precision@k (with k = 1,
  its 0/1 outcome, as paired bootstraps over test examples need).

  Args:
    scores: float [n, T] model scores.
    tags: {0, 1} [n, T] true tags.
    k: How many top tags to predict (1 <= k <= num_real_tags).
    num_real_tags: In-vocabulary tag columns.

  Returns:
    int [n] hit counts in [0, k].
  """
  if not 1 <= k <= num_real_tags:
    raise ValueError(f'k must be in [1, {num_real_tags}], got {k}.')
  scores = np.asarray(scores)[:, :num_real_tags]
  tags = np.asarray(tags)[:, :num_real_tags] > 0
  # Stable sort on -score: equal scores rank the lower tag id first.
  top = np.argsort(-scores, axis=1, kind='stable')[:, :k]
  return np.take_along_axis(tags, top, axis=1).sum(axis=1)


def precision_recall_at_k(
    scores: np.ndarray, tags: np.ndarray, *, k: int, num_real_tags: int
) -> collections.OrderedDict[str, float]:
  """Precision@k and recall@k of ranking in-vocabulary tags by score.

  Only the first `num_real_tags` columns (the tag vocabulary, not the OOV
  buckets) are ranked and counted. Precision@k is the share of the top k
  that are true tags (averaged over examples); recall@k the share of an
  example's true tags in its top k (averaged over examples with at least one
  in-vocabulary tag).

  Args:
    scores: float [n, T] model scores.
    tags: {0, 1} [n, T] true tags.
    k: How many top tags to predict (1 <= k <= num_real_tags).
    num_real_tags: In-vocabulary tag columns.

  Returns:
    OrderedDict(precision, recall, examples, examples_with_tags).
  """
  hits = hits_at_k(scores, tags, k=k, num_real_tags=num_real_tags)
  true_counts = (np.asarray(tags)[:, :num_real_tags] > 0).sum(axis=1)
  with_tags = true_counts > 0
  return collections.OrderedDict(
      precision=float(np.mean(hits / k)) if len(hits) else 0.0,
      recall=(float(np.mean(hits[with_tags] / true_counts[with_tags]))
              if with_tags.any() else 0.0),
      examples=int(len(hits)),
      examples_with_tags=int(with_tags.sum()))
