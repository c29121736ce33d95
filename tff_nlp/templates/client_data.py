"""Per-client training configuration carried next to each client's examples.

TFF clients are anonymous: the only per-client input of a round is the client's
data. The Lorar paper trains clients with different learning rates (1e-4 or
1e-3) and epochs (6 or 12), so a process built with
`build_fl_process(..., with_client_config=True)` takes, for every client,

  <examples=B*, config=<learning_rate=float32,num_epochs=int32>*>

where `config` is a dataset of exactly one element. `with_client_config`
below builds that structure. The client trains on `examples` repeated
`num_epochs` times with its optimizer's learning rate replaced by
`learning_rate`, and counts |D_i| (for `num_examples` and `lorar` weighting)
as the examples of one pass.

Without a config, the client data is the plain dataset `B*`: epochs and batch
size are then properties of the dataset (`ds.repeat(E).batch(B)`), and |D_i|
counts every example processed in the round, i.e. E_i·|D_i|. The two agree
when all clients train the same number of epochs, because weights are
normalised.
"""

import collections

import numpy as np
import tensorflow as tf

EXAMPLES_KEY = 'examples'
CONFIG_KEY = 'config'
LEARNING_RATE_KEY = 'learning_rate'
NUM_EPOCHS_KEY = 'num_epochs'


def config_element_spec() -> collections.OrderedDict:
  return collections.OrderedDict([
      (LEARNING_RATE_KEY, tf.TensorSpec([], tf.float32)),
      (NUM_EPOCHS_KEY, tf.TensorSpec([], tf.int32)),
  ])


def with_client_config(
    examples: tf.data.Dataset, *, learning_rate: float, num_epochs: int = 1
) -> collections.OrderedDict:
  """Pairs a client's batched examples with its learning rate and epochs.

  Args:
    examples: The client's batched dataset, one pass over its training data.
    learning_rate: The client optimizer's learning rate for this client.
    num_epochs: Passes over `examples` per round (positive).

  Returns:
    An `OrderedDict(examples=..., config=...)` to pass as this client's data.

  Raises:
    ValueError: If `learning_rate` is not a positive finite number or
      `num_epochs` is not a positive integer.
  """
  if not (np.isfinite(learning_rate) and learning_rate > 0):
    raise ValueError(
        f'learning_rate must be a positive finite number, got {learning_rate!r}.'
    )
  if int(num_epochs) != num_epochs or num_epochs < 1:
    raise ValueError(f'num_epochs must be a positive integer, got {num_epochs!r}.')
  config = tf.data.Dataset.from_tensors(
      collections.OrderedDict([
          (LEARNING_RATE_KEY, tf.constant(learning_rate, tf.float32)),
          (NUM_EPOCHS_KEY, tf.constant(num_epochs, tf.int32)),
      ])
  )
  return collections.OrderedDict(
      [(EXAMPLES_KEY, examples), (CONFIG_KEY, config)]
  )
