"""The tasks of the attack benchmark (`robustness`): data, model, metric.

A task gives the benchmark, for a seed: the model (`model_fn`), each
client's data of a round, honest or altered by a data attack
(`client_data`), the final model's metric (`evaluate`) and, where known, the
true parameters (`truth`). Three tasks:

*   `LinearRegressionTask`: the issue's linear regression, eight clients of
    y = x·w* + b* + noise, whose true parameters are known;
*   `TextClassificationTask`: R8 split into label-skewed clients as the
    weighting demo does (`experiments.weighting_demo`), MacroAvg accuracy;
*   `Text2SqlTask` (in `robustness_text2sql`): the text-to-SQL template
    parser on the paper's eight databases, test exact match.

The data attacks (`attacks.Attack.data`) alter only the attacker's training
examples, and keep their number (so |D_i| is honest):

*   'label_flip': regression labels negated; class labels moved to the next
    class of the task's label set (`flip_labels`);
*   'inflate_loss': a data set built to make ΔL = max - min batch loss
    huge. Regression: labels ×(-50), the issue's attacker (every batch's
    loss is 2500 times an honest one, so is the spread of its losses).
    Classification (`loss_inflating_examples`): the first batch holds
    mislabelled examples, the rest is one correctly labelled example
    repeated. The global model, trained by the honest clients, is confident
    on the mislabelled batch (max loss: several nats), and the repeated
    example is fitted within a few steps (min loss near 0), while an honest
    client's batch losses differ by a fraction of a nat.
"""

import collections
from collections.abc import Mapping
import dataclasses
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


from tff_nlp import templates
from tff_nlp import models
from apps.common import text_classification_task as text_classification

REGRESSION_INFLATE_FACTOR = -50.0


def flip_labels(y: np.ndarray, label_set: np.ndarray) -> np.ndarray:
  """Each label replaced by the next one of `label_set` (sorted, cyclic)."""
  label_set = np.sort(np.asarray(label_set))
  position = np.searchsorted(label_set, y)
  return label_set[(position + 1) % len(label_set)].astype(y.dtype)


def loss_inflating_examples(x: Any, y: np.ndarray, *, batch_size: int,
                            label_set: np.ndarray) -> tuple[Any, np.ndarray]:
  """A classification attacker's examples that inflate ΔL; same count.

  The first `batch_size` examples keep their inputs with flipped labels
  (`flip_labels`); the remaining ones are all copies of the first example
  with its true label. Batched in this order (not shuffled), the first batch
  of every epoch has a high loss and the later ones a loss near zero.

  Args:
    x: The inputs, an array or a mapping of arrays, first axis examples.
    y: int labels [n].
    batch_size: The client's batch size.
    label_set: The labels `flip_labels` draws from.

  Returns:
    `(x, y)` of the same structure and length.
  """
  n = len(y)
  hard = min(batch_size, n)
  index = np.concatenate([np.arange(hard), np.zeros(n - hard, np.int64)])
  new_x = tf.nest.map_structure(lambda a: a[index], x)
  new_y = y[index].copy()
  new_y[:hard] = flip_labels(y[:hard], label_set)
  return new_x, new_y


@dataclasses.dataclass(frozen=True)
class LinearRegressionTask:
  """Eight clients of a linear regression with known true parameters.

  Each client holds `examples_per_client` examples x ~ N(0, I) of
  y = x·w* + b* + N(0, noise²), all clients equally many (so
  `num_examples` gives each 1/N), drawn from the seed; one epoch of
  batches of `batch_size` per round, in a seeded order per round; plain SGD
  from zero weights.
  """

  name: str = 'linear_regression'
  num_clients: int = 8
  examples_per_client: int = 32
  batch_size: int = 8
  rounds: int = 8
  learning_rate: float = 0.05
  noise: float = 0.1
  true_kernel: tuple[float, ...] = (1.0, -2.0, 0.5)
  true_bias: float = 0.3
  test_examples: int = 1000

  with_client_config = False
  metric_name = 'test_mse'
  metric_higher_is_better = False

  @property
  def num_features(self) -> int:
    return len(self.true_kernel)

  def config(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def model_fn(self, seed: int):
    del seed  # Every seed starts from zero weights.
    num_features = self.num_features

    def model_fn() -> tff.learning.models.VariableModel:
      keras_model = tf.keras.Sequential([
          tf.keras.Input((num_features,)),
          tf.keras.layers.Dense(1, kernel_initializer='zeros'),
      ])
      return tff.learning.models.from_keras_model(
          keras_model, loss=tf.keras.losses.MeanSquaredError(),
          input_spec=(tf.TensorSpec([None, num_features], tf.float32),
                      tf.TensorSpec([None, 1], tf.float32)))

    return model_fn

  def client_optimizer(self) -> tff.learning.optimizers.Optimizer:
    return tff.learning.optimizers.build_sgdm(self.learning_rate)

  def truth(self) -> np.ndarray:
    """The true parameters, flattened as the model's trainable weights."""
    return np.array(self.true_kernel + (self.true_bias,), np.float32)

  def _examples(self, seed: int, stream: int, n: int):
    rng = np.random.default_rng([seed, stream])
    x = rng.normal(size=(n, self.num_features)).astype(np.float32)
    y = x @ np.array(self.true_kernel)[:, None] + self.true_bias
    y = y + self.noise * rng.normal(size=y.shape)
    return x, y.astype(np.float32)

  def client_data(self, seed: int, round_num: int, client_id: int,
                  data_attack: str) -> tf.data.Dataset:
    x, y = self._examples(seed, client_id, self.examples_per_client)
    if data_attack == 'label_flip':
      y = -y
    elif data_attack == 'inflate_loss':
      y = np.float32(REGRESSION_INFLATE_FACTOR) * y
    order = np.random.default_rng([seed, round_num, client_id]).permutation(
        len(y))
    return tf.data.Dataset.from_tensor_slices(
        (x[order], y[order])).batch(self.batch_size)

  def evaluate(self, seed: int, weights: np.ndarray) -> dict[str, float]:
    # A stream no client uses: the clients are streams 0..N-1.
    x, y = self._examples(seed, 10_000, self.test_examples)
    prediction = x @ weights[:-1, None] + weights[-1]
    return {'test_mse': float(np.mean((prediction - y) ** 2))}


@dataclasses.dataclass(frozen=True)
class TextClassificationTask:
  """R8 in label-skewed clients: the weighting demo's CPU setting.

  Clients, model and training as `apps/weighting_demo/flags/weighting_demo.cpu.flags`
  (8 clients, Dirichlet 0.3, fastText-style classifier with 64-d embeddings,
  2 local epochs of batches of 16, SGD at 1.0), but 10 rounds, not 20 (a
  round takes about 5 s on 2 busy cores, and the grid has 72 runs); the
  metric is MacroAvg test accuracy over the clients' own test sets. The
  data is prepared once per seed (`prepare`).
  """

  name: str = 'r8'
  client_data_config: text_classification.ClientDataConfig = (
      text_classification.ClientDataConfig())
  data_dir: Optional[str] = dataclasses.field(default=None, compare=False)
  rounds: int = 10
  local_epochs: int = 2
  batch_size: int = 16
  learning_rate: float = 1.0
  embedding_dim: int = 64

  with_client_config = True
  metric_name = 'macro_avg'
  metric_higher_is_better = True

  @property
  def num_clients(self) -> int:
    return self.client_data_config.num_clients

  def config(self) -> dict[str, Any]:
    config = dataclasses.asdict(self)
    del config['data_dir']  # Where the data is does not change a result.
    return config

  def prepare(
      self, seed: int) -> text_classification.FederatedTextClassification:
    return _prepared_text_classification(self.client_data_config,
                                         self.data_dir, seed)

  def _spec(self, seed: int) -> models.TextClassifierSpec:
    return self.prepare(seed).model_spec(embedding_dim=self.embedding_dim,
                                         seed=seed)

  def model_fn(self, seed: int):
    return models.build_model_fn(self._spec(seed))

  def client_optimizer(self) -> tff.learning.optimizers.Optimizer:
    return templates.CLIENT_OPTIMIZERS['sgd'](learning_rate=self.learning_rate)

  def truth(self) -> None:
    return None

  def client_data(self, seed: int, round_num: int, client_id: int,
                  data_attack: str) -> Mapping[str, Any]:
    task = self.prepare(seed)
    client = task.clients[client_id]
    shuffle_seed = (seed, round_num, client_id)
    label_set = np.arange(len(task.label_names))
    if data_attack == 'label_flip':
      client = dataclasses.replace(
          client, train_y=flip_labels(client.train_y, label_set))
    elif data_attack == 'inflate_loss':
      x, y = loss_inflating_examples(
          client.train_x, client.train_y, batch_size=self.batch_size,
          label_set=label_set)
      client = dataclasses.replace(client, train_x=x, train_y=y)
      shuffle_seed = None  # The attacker keeps its order.
    return templates.with_client_config(
        text_classification.train_dataset(
            client, batch_size=self.batch_size, shuffle_seed=shuffle_seed),
        learning_rate=self.learning_rate, num_epochs=self.local_epochs)

  def evaluate(self, seed: int, weights: np.ndarray) -> dict[str, float]:
    task = self.prepare(seed)
    keras_model = models.build_keras_model(self._spec(seed))
    assign_flat_weights(keras_model.trainable_weights, weights)
    accuracies = text_classification.evaluate_classifier(
        keras_model, task.clients)
    return {'macro_avg': accuracies.macro, 'micro_avg': accuracies.micro}


_PREPARED = {}


def _prepared_text_classification(config, data_dir, seed):
  key = (config, data_dir, seed)
  if key not in _PREPARED:
    _PREPARED[key] = text_classification.prepare_clients(
        config, data_dir=data_dir, seed=seed)
  return _PREPARED[key]


def flatten_weights(weights) -> np.ndarray:
  """A model's trainable weights as one float64 vector, in their order."""
  return np.concatenate([np.asarray(w, np.float64).ravel()
                         for w in tf.nest.flatten(weights)])


def assign_flat_weights(variables, flat: np.ndarray) -> None:
  """Assigns a `flatten_weights` vector to `variables`, in their order."""
  offset = 0
  for variable in variables:
    size = int(np.prod(variable.shape))
    variable.assign(np.reshape(flat[offset:offset + size], variable.shape))
    offset += size
  if offset != len(flat):
    raise ValueError(f'{len(flat)} values for {offset} weights.')


TASKS = collections.OrderedDict(
    linear_regression=LinearRegressionTask, r8=TextClassificationTask)
