"""The tiny linear regression model and client data shared by algorithm tests."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import lorar_reference

NUM_FEATURES = 3
INITIAL_KERNEL = np.array([[0.1], [-0.2], [0.3]], np.float32)
INITIAL_BIAS = np.array([0.05], np.float32)
INPUT_SPEC = (
    tf.TensorSpec([None, NUM_FEATURES], tf.float32),
    tf.TensorSpec([None, 1], tf.float32),
)


def model_fn() -> tff.learning.models.VariableModel:
  keras_model = tf.keras.Sequential([
      tf.keras.layers.Dense(
          1,
          input_shape=(NUM_FEATURES,),
          kernel_initializer=tf.keras.initializers.Constant(INITIAL_KERNEL),
          bias_initializer=tf.keras.initializers.Constant(INITIAL_BIAS),
      )
  ])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.MeanSquaredError(),
      input_spec=INPUT_SPEC,
  )


def make_client(num_examples, batch_size, *, seed, learning_rate=0.05,
                num_epochs=1, scale=1.0) -> lorar_reference.Client:
  """Client data of y = x·[1, -2, 0.5] + 0.3 + noise, scaled by `scale`."""
  rng = np.random.default_rng(seed)
  x = (scale * rng.normal(size=(num_examples, NUM_FEATURES))).astype(np.float32)
  y = x @ np.array([[1.0], [-2.0], [0.5]]) + 0.3
  y = (y + 0.1 * rng.normal(size=y.shape)).astype(np.float32)
  return lorar_reference.Client(x, y, batch_size, learning_rate, num_epochs)


def three_clients(**kwargs):
  """Three clients of different sizes: batches of 3+3+1, 2+2 and 4+4+2."""
  return [
      make_client(7, 3, seed=1, **kwargs),
      make_client(4, 2, seed=2, **kwargs),
      make_client(10, 4, seed=3, **kwargs),
  ]


def to_dataset(client: lorar_reference.Client) -> tf.data.Dataset:
  """One epoch of the client's batches (epochs are repeated by the caller)."""
  return tf.data.Dataset.from_tensor_slices((client.x, client.y)).batch(
      client.batch_size
  )


def to_repeated_dataset(client: lorar_reference.Client) -> tf.data.Dataset:
  return to_dataset(client).repeat(client.num_epochs)


def initial_state() -> lorar_reference.ServerState:
  return lorar_reference.ServerState(
      INITIAL_KERNEL.astype(np.float64), INITIAL_BIAS.astype(np.float64)
  )


def global_weights(process, state):
  kernel, bias = process.get_model_weights(state).trainable
  return np.asarray(kernel), np.asarray(bias)


def weights_type() -> tff.types.Type:
  return tff.to_type(tff.learning.models.ModelWeights(
      trainable=[
          tff.TensorType(np.float32, [NUM_FEATURES, 1]),
          tff.TensorType(np.float32, [1]),
      ],
      non_trainable=[],
  ))


