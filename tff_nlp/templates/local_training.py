"""One client's local training in the client work of `client_work`.

`build_client_update` builds the `tf.function` a client runs in a round:
train the broadcast model on its batches (optionally with the FedProx
proximal term), record every batch's training loss, and return its model
delta, its round statistics and its model metrics. `client_work` composes it
into the federated round; it lives apart so that `client_work.py` holds the
round's composition and this file the client's loop.

Each training step runs inside `models.dropout_seeds.step_seed`, keyed by the
round's start weights, the batch and the step, so a model with seeded dropout
draws the same masks in a rerun or a resumed run.
"""

import collections
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.templates import batch_loop
from tff_nlp.templates import client_data as client_data_lib
from tff_nlp.templates import optimizers as optimizers_lib
from tff_nlp.aggregators import weighting as weighting_lib
from tff_nlp.models import dropout_seeds


def build_client_update(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    optimizer: tff.learning.optimizers.Optimizer,
    weighting: weighting_lib.Weighting,
    proximal_strength: float,
    with_client_config: bool,
):
  """Returns the `tf.function` that trains one client; builds its model.

  The returned function is `(hparams, initial_weights, data) -> <update=T,
  stats=<...>, metrics=X>`: the client's model delta (zeroed if the client
  is rejected), the per-client statistics of `client_work.CLIENT_STAT_KEYS`
  (the weighting's `candidate_weight` included) plus `batch_losses`, and
  the model's unfinalized metrics. It must be called inside the
  `tff.tensorflow.computation` that traces it: the model is built here, in
  that graph.

  Args:
    model_fn: No-arg callable returning a new
      `tff.learning.models.VariableModel`.
    optimizer: The client optimizer.
    weighting: The client weighting; gives each client's candidate weight.
    proximal_strength: FedProx's mu (0 disables the proximal term).
    with_client_config: Whether `data` carries the client's learning rate
      and epochs beside its examples (`client_data.with_client_config`).

  Returns:
    The `tf.function` above.
  """
  model = model_fn()
  model_weights = tff.learning.models.ModelWeights.from_model(model)
  trainable = tuple(tf.nest.flatten(model_weights.trainable))

  @tf.function
  def client_update(optimizer_hparams, initial_weights, data):
    tf.nest.map_structure(
        lambda v, t: v.assign(t), model_weights, initial_weights
    )
    initial_trainable = tuple(tf.nest.flatten(initial_weights.trainable))
    # Keys the dropout masks of models built with seeded dropout (see
    # `dropout_seeds`): same global model, batch and step, same masks.
    round_key = dropout_seeds.fingerprint(initial_trainable)
    hparams = collections.OrderedDict(optimizer_hparams)
    if with_client_config:
      config = data[client_data_lib.CONFIG_KEY].get_single_element()
      hparams[tff.learning.optimizers.LEARNING_RATE_KEY] = config[
          client_data_lib.LEARNING_RATE_KEY
      ]
      num_epochs = config[client_data_lib.NUM_EPOCHS_KEY]
      dataset = data[client_data_lib.EXAMPLES_KEY].repeat(
          tf.cast(num_epochs, tf.int64)
      )
    else:
      num_epochs = tf.constant(1, tf.int32)
      dataset = data

    optimizer_state = optimizer.initialize(
        tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)
    )
    optimizer_state = optimizers_lib.set_hparams(
        optimizer, optimizer_state, hparams
    )
    zero = tf.constant(0.0, tf.float32)
    initial_loop_state = (
        collections.OrderedDict(
            num_examples=zero,
            num_batches=zero,
            first_batch_loss=zero,
            last_batch_loss=zero,
            max_batch_loss=tf.constant(-np.inf, tf.float32),
            min_batch_loss=tf.constant(np.inf, tf.float32),
            loss_sum=zero,
            losses_finite=tf.constant(True),
            # Every batch's loss, in order: the paper's per-step curves.
            batch_losses=tf.TensorArray(
                tf.float32, size=0, dynamic_size=True, element_shape=[]),
        ),
        optimizer_state,
    )

    def train_on_batch(loop_state, batch):
      stats, carried_optimizer_state = loop_state
      optimizer_state = optimizers_lib.restore_python_bools(
          initial_loop_state[1], carried_optimizer_state
      )
      step_key = dropout_seeds.fingerprint(
          (round_key, batch, stats['num_batches']))
      with tf.GradientTape() as tape, dropout_seeds.step_seed(step_key):
        output = model.forward_pass(batch, training=True)
      gradients = tape.gradient(output.loss, trainable)
      if proximal_strength > 0.0:
        # Gradient of (mu/2)·||w - w_global||².
        gradients = tuple(
            g + proximal_strength * (w - w0)
            for g, w, w0 in zip(gradients, trainable, initial_trainable)
        )
      optimizer_state, new_weights = optimizer.next(
          optimizer_state, trainable, gradients
      )
      for variable, value in zip(trainable, new_weights):
        variable.assign(value)
      optimizer_state = optimizers_lib.match_dtypes(
          carried_optimizer_state, optimizer_state
      )

      loss = tf.cast(output.loss, tf.float32)
      if output.num_examples is None:
        batch_size = tf.shape(tf.nest.flatten(output.predictions)[0])[0]
      else:
        batch_size = output.num_examples
      batch_size = tf.cast(batch_size, tf.float32)
      stats = collections.OrderedDict(
          num_examples=stats['num_examples'] + batch_size,
          num_batches=stats['num_batches'] + 1.0,
          # Tensor `==` is Python identity when TFF traces in graph mode.
          first_batch_loss=tf.where(
              tf.equal(stats['num_batches'], 0.0),
              loss,
              stats['first_batch_loss'],
          ),
          last_batch_loss=loss,
          max_batch_loss=tf.maximum(stats['max_batch_loss'], loss),
          min_batch_loss=tf.minimum(stats['min_batch_loss'], loss),
          loss_sum=stats['loss_sum'] + loss * batch_size,
          losses_finite=tf.logical_and(
              stats['losses_finite'], tf.math.is_finite(loss)
          ),
          batch_losses=stats['batch_losses'].write(
              tf.cast(stats['num_batches'], tf.int32), loss),
      )
      return stats, optimizer_state

    loop_stats, _ = batch_loop.for_each_batch(
        dataset, initial_loop_state, train_on_batch
    )

    delta = tf.nest.map_structure(
        tf.subtract, initial_weights.trainable, model_weights.trainable
    )
    update_finite = tf.reduce_all(
        [tf.reduce_all(tf.math.is_finite(d)) for d in tf.nest.flatten(delta)]
    )
    has_batches = loop_stats['num_batches'] > 0.0
    is_non_finite = tf.logical_not(
        tf.logical_and(update_finite, loop_stats['losses_finite'])
    )
    is_valid = tf.logical_and(has_batches, tf.logical_not(is_non_finite))
    # A rejected client sends zeros, never NaN: 0·NaN would still poison the
    # weighted sum in the aggregator.
    delta = tf.nest.map_structure(
        lambda d: tf.where(is_valid, d, tf.zeros_like(d)), delta
    )
    metrics = tf.nest.map_structure(
        lambda m: tf.where(is_valid, m, tf.zeros_like(m)),
        model.report_local_unfinalized_metrics(),
    )

    loss_reduction = tf.where(
        is_valid,
        loop_stats['max_batch_loss'] - loop_stats['min_batch_loss'],
        0.0,
    )
    dataset_size = loop_stats['num_examples'] / tf.cast(num_epochs, tf.float32)
    candidate = weighting_lib.raw_client_weight(
        weighting, dataset_size, loss_reduction
    )

    def if_batches(value):
      return tf.where(has_batches, value, 0.0)

    stats = collections.OrderedDict(
        num_examples=loop_stats['num_examples'],
        num_batches=loop_stats['num_batches'],
        dataset_size=dataset_size,
        first_batch_loss=loop_stats['first_batch_loss'],
        last_batch_loss=loop_stats['last_batch_loss'],
        max_batch_loss=if_batches(loop_stats['max_batch_loss']),
        min_batch_loss=if_batches(loop_stats['min_batch_loss']),
        mean_batch_loss=tf.math.divide_no_nan(
            loop_stats['loss_sum'], loop_stats['num_examples']
        ),
        loss_reduction=loss_reduction,
        is_empty=tf.cast(tf.logical_not(has_batches), tf.float32),
        is_non_finite=tf.cast(
            tf.logical_and(has_batches, is_non_finite), tf.float32
        ),
        candidate_weight=tf.where(is_valid, candidate, 0.0),
        fallback_weight=tf.where(is_valid, dataset_size, 0.0),
        batch_losses=loop_stats['batch_losses'].stack(),
    )
    return collections.OrderedDict(update=delta, stats=stats, metrics=metrics)

  return client_update
