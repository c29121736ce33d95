"""A fastText-style text classifier (Joulin et al., 2017) for `tff.learning`.

token ids → Embedding → mean over the non-padding tokens → Dense softmax.

With `class_groups` the classes are split into groups and each example names
its group: the softmax runs over that group's classes only (a restricted
softmax). The text-to-SQL template parser
(`apps.text2sql.template_parser`) uses it so that a question of one
database is classified among that database's SQL templates only: a client
never pushes down the templates of the other clients' databases, which it
has never seen, and a prediction never names another database's query.

It is the smallest model that learns real text classification in a few
federated rounds on a CPU, which is what demos and benchmarks of the
federated algorithms need; its cost per example is dominated by the embedding
lookup, so round overheads of the framework stay visible.

`build_model_fn` returns the no-arg `model_fn` that TFF calls several times
(in different graphs) while building a learning process: every call builds a
new Keras model with the same seeded initial weights.
"""

import collections
from collections.abc import Callable
import dataclasses
import functools

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
    class_groups: Empty, or the group (an int in [0, G)) of each of the
      `num_classes` classes: the model then also takes each example's group
      (`GROUP`) and gives probability 0 to the classes of other groups.
  """

  vocab_size: int
  num_classes: int
  max_length: int
  embedding_dim: int
  seed: int
  class_groups: tuple[int, ...] = ()

  def __post_init__(self):
    if self.class_groups and (len(self.class_groups) != self.num_classes
                              or min(self.class_groups) < 0):
      raise ValueError(
          f'class_groups must give a group >= 0 for each of the '
          f'{self.num_classes} classes, got {len(self.class_groups)} groups '
          f'(smallest {min(self.class_groups)}).')


# The input names of a model with `class_groups`.
TOKEN_IDS = 'token_ids'
GROUP = 'group'
# A restricted class's logit: exp underflows to exactly 0 in float32.
_EXCLUDED_LOGIT = -1e9


def input_spec(max_length: int, *, grouped: bool = False):
  """The `(x, y)` batch spec: token ids [B, L] and label ids [B], int32.

  With `grouped` (a spec with `class_groups`), x is an OrderedDict of the
  token ids (`TOKEN_IDS`) and each example's group (`GROUP`, int32 [B]).
  """
  token_ids = tf.TensorSpec([None, max_length], tf.int32)
  if grouped:
    token_ids = collections.OrderedDict([
        (TOKEN_IDS, token_ids), (GROUP, tf.TensorSpec([None], tf.int32))])
  return (token_ids, tf.TensorSpec([None], tf.int32))


class RestrictToGroup(tf.keras.layers.Layer):
  """Logits [B, C] and groups [B] to logits with other groups' classes off.

  Args:
    class_groups: The group of each of the C classes.
    **kwargs: Passed to `tf.keras.layers.Layer`.
  """

  def __init__(self, class_groups, **kwargs):
    super().__init__(**kwargs)
    self.class_groups = tuple(int(g) for g in class_groups)
    # A constant, not a weight: it is the task's definition, never trained
    # or aggregated.
    self._groups = tf.constant(self.class_groups, tf.int32)

  def call(self, inputs):
    logits, groups = inputs
    allowed = tf.equal(groups[:, tf.newaxis], self._groups[tf.newaxis, :])
    return tf.where(allowed, logits, tf.cast(_EXCLUDED_LOGIT, logits.dtype))

  def get_config(self):
    return {**super().get_config(), 'class_groups': list(self.class_groups)}


def build_keras_model(spec: TextClassifierSpec) -> tf.keras.Model:
  """Builds a new, uncompiled Keras model with the seeded initial weights.

  Args:
    spec: The model's shape and seed.

  Returns:
    A functional `tf.keras.Model` mapping int32 token ids [B, L] (and, with
    `class_groups`, the groups [B]) to class probabilities [B, num_classes].
  """
  token_ids = tf.keras.Input(
      shape=(spec.max_length,), dtype=tf.int32, name=TOKEN_IDS
  )
  # Seeded Keras initializers are stateless: every call of this function, in
  # any graph, draws the same values.
  embeddings = tf.keras.layers.Embedding(
      spec.vocab_size,
      spec.embedding_dim,
      embeddings_initializer=tf.keras.initializers.RandomUniform(
          -0.05, 0.05, seed=spec.seed
      ),
      mask_zero=True,  # Padding is id 0 (`data.vocabulary.PAD_ID`).
      name='embedding',
  )(token_ids)
  # The mask of the embedding layer makes this a mean over real tokens only.
  text_embedding = tf.keras.layers.GlobalAveragePooling1D(name='mean')(
      embeddings
  )
  classifier = functools.partial(
      tf.keras.layers.Dense,
      spec.num_classes,
      kernel_initializer=tf.keras.initializers.GlorotUniform(
          seed=spec.seed + 1
      ),
      bias_initializer='zeros',
      name='classifier',
  )
  if not spec.class_groups:
    probabilities = classifier(activation='softmax')(text_embedding)
    return tf.keras.Model(token_ids, probabilities, name='text_classifier')
  group = tf.keras.Input(shape=(), dtype=tf.int32, name=GROUP)
  logits = RestrictToGroup(spec.class_groups, name='restrict_to_group')(
      [classifier()(text_embedding), group])
  probabilities = tf.keras.layers.Softmax(name='probabilities')(logits)
  return tf.keras.Model(collections.OrderedDict(
      [(TOKEN_IDS, token_ids), (GROUP, group)]), probabilities,
                        name='text_classifier')


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
        input_spec=input_spec(spec.max_length,
                              grouped=bool(spec.class_groups)),
        # Listing TFF's counters ourselves keeps from_keras_model from adding
        # (and logging about) them on every model_fn call.
        metrics=[
            tf.keras.metrics.SparseCategoricalAccuracy(),
            tff.learning.metrics.NumExamplesCounter(),
            tff.learning.metrics.NumBatchesCounter(),
        ],
    )

  return model_fn
