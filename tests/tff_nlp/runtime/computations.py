"""A tiny federated computation the runtime tests run on their workers."""

import numpy as np
import tensorflow_federated as tff


@tff.tensorflow.computation(np.float32)
def _add_one(x):
  return x + 1.0


@tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
def sum_plus_one(x):
  """Σ (x_i + 1) over the clients: e.g. [1, 2, 3] -> 2 + 3 + 4 = 9."""
  return tff.federated_sum(tff.federated_map(_add_one, x))
