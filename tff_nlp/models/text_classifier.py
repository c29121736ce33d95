"""A fastText-style text classifier (Joulin et al., 2017) for `tff.learning`.

token ids → Embedding → mean over the non-padding tokens → Dense softmax.

It is the smallest model that learns real text classification in a few
federated rounds on a CPU, which is what demos and benchmarks of the
federated algorithms need; its cost per example is dominated by the embedding
lookup, so round overheads of the framework stay visible.

`build_model_fn` returns the no-arg `model_fn` that TFF calls several times
(in different graphs) while building a learning process: every call builds a
new Keras model with the same seeded initial weights.
"""

from collections.abc import Callable
import dataclasses

import tensorflow as tf
import tensorflow_federated as tff


@dataclasses.dataclass(frozen=True)
class TextClassifierSpec:
  """Shape and initialisation of the classifier.

  Attributes:
    vocab_size: Number of token ids, padding and OOV included.
    num_classes: Number of labels.
    max_length: L, the length of every encoded text.
    embedding_dim: Size of the word embeddings.
    seed: Seed of the initial weights.
  """

  vocab_size: int
  num_classes: int
  max_length: int
  embedding_dim: int
  seed: int


def input_spec(
    max_length: int,
) -> tuple[tf.TensorSpec, tf.TensorSpec]:
  """The `(x, y)` batch spec: token ids [B, L] and label ids [B], int32."""
  return (
      tf.TensorSpec([None, max_length], tf.int32),
      tf.TensorSpec([None], tf.int32),
  )


def build_keras_model(spec: TextClassifierSpec) -> tf.keras.Model:
  """Builds a new, uncompiled Keras model with the seeded initial weights.

  Args:
    spec: The model's shape and seed.

  Returns:
    A functional `tf.keras.Model` mapping int32 token ids [B, L] to class
    probabilities [B, num_classes].
  """
  token_ids = tf.keras.Input(
      shape=(spec.max_length,), dtype=tf.int32, name='token_ids'
  )
  # Seeded Keras initializers are stateless: every call of this function, in
  # any graph, draws the same values.
  embeddings = tf.keras.layers.Embedding(
      spec.vocab_size,
      spec.embedding_dim,
      embeddings_initializer=tf.keras.initializers.RandomUniform(
          -0.05, 0.05, seed=spec.seed
      ),
      mask_zero=True,  # Padding is id 0 (`vocabulary.PAD_ID`).
      name='embedding',
  )(token_ids)
  # The mask of the embedding layer makes this a mean over real tokens only.
  text_embedding = tf.keras.layers.GlobalAveragePooling1D(name='mean')(
      embeddings
  )
  probabilities = tf.keras.layers.Dense(
      spec.num_classes,
      activation='softmax',
      kernel_initializer=tf.keras.initializers.GlorotUniform(
          seed=spec.seed + 1
      ),
      bias_initializer='zeros',
      name='classifier',
  )(text_embedding)
  return tf.keras.Model(token_ids, probabilities, name='text_classifier')


def build_model_fn(
    spec: TextClassifierSpec,
) -> Callable[[], tff.learning.models.VariableModel]:
  """Returns a `model_fn` for `tff_nlp.algorithms.build_fl_process`.

  Args:
    spec: The model's shape and seed.

  Returns:
    A no-arg callable that builds a new Keras model (same initial weights on
    every call) and wraps it with `tff.learning.models.from_keras_model`,
    with sparse categorical cross-entropy loss, accuracy, example and batch
    counts as metrics, taking batches as described by `input_spec`.
  """

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        build_keras_model(spec),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=input_spec(spec.max_length),
        # Listing TFF's counters ourselves keeps from_keras_model from adding
        # (and logging about) them on every model_fn call.
        metrics=[
            tf.keras.metrics.SparseCategoricalAccuracy(),
            tff.learning.metrics.NumExamplesCounter(),
            tff.learning.metrics.NumBatchesCounter(),
        ],
    )

  return model_fn
