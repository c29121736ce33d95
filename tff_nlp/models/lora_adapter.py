"""`LoraAdapter`: the Keras layer of one kernel's LoRA factors.

It holds the factors A [d_in, r] and B [r, d_out] of one kernel W and,
called on W, returns the effective kernel W + (alpha / r) * A @ B (reshaped
and transposed to W's axes for an `EinsumDense` kernel of several axes).
Module `lora` gives a built model's target layers their adapters
(`add_lora`), folds them back (`merge_lora`) and counts them.
"""

import math
from typing import Sequence

import numpy as np
import tensorflow as tf


@tf.keras.utils.register_keras_serializable(package='tff_nlp')
class LoraAdapter(tf.keras.layers.Layer):
  """The LoRA factors of one kernel, and the effective kernel they give.

  Holds A [d_in, r] (random, He-uniform with fan-in d_in, from a stateless
  draw keyed by `seed`) and B [r, d_out] (zeros); for an embedding table
  (`embedding=True`), A is zeros and B standard normal (the same draw), as
  PEFT initialises LoRA on embeddings: a row's update A[i] @ B then starts
  at zero and A, whose rows only the tokens a batch reads move, gets its
  gradient from the first step. Called on the frozen kernel W (of the shape
  it was built for), it returns

      W + scale * transpose(reshape(A @ B, input dims + output dims))

  where the input dims are W's axes `input_axes` (d_in is the product of
  their sizes) and the output dims the other axes, in order; the transpose
  puts them back in W's axis order. For a `Dense` kernel [d_in, d_out],
  `input_axes=(0,)` and the update is plainly scale * A @ B.

  `add_lora` creates and builds one per target kernel; the layer's weights
  are `[A, B]`, in that order.

  Args:
    input_axes: The kernel axes that are contracted with the layer's input
      (e.g. (0,) for a query projection [d_model, heads, head_dim], (0, 1)
      for an output projection [heads, head_dim, d_model]).
    rank: r.
    scale: alpha / r.
    seed: Two ints keying the stateless draw of A (of B, for an
      embedding).
    embedding: Whether W is an embedding table [vocabulary, d] (the
      initialisation above).
    **kwargs: Forwarded to `tf.keras.layers.Layer` (e.g. `name`).

  Call arguments:
    kernel: The frozen kernel W, a tensor or variable of the built shape.

  Returns:
    The effective kernel, W's shape and dtype.
  """

  def __init__(self, input_axes: Sequence[int], rank: int, scale: float,
               seed: Sequence[int] = (0, 0), embedding: bool = False,
               **kwargs):
    super().__init__(**kwargs)
    self.embedding = bool(embedding)
    self.input_axes = tuple(int(a) for a in input_axes)
    self.rank = int(rank)
    self.scale = float(scale)
    self.seed = tuple(int(s) for s in seed)
    if len(self.seed) != 2:
      raise ValueError(f'seed must be two ints, got {seed!r}.')
    if not self.input_axes or self.rank < 1:
      raise ValueError('LoraAdapter needs input_axes and a positive rank, '
                       f'got input_axes={input_axes!r}, rank={rank!r}.')

  def build(self, input_shape):
    shape = tf.TensorShape(input_shape).as_list()
    if any(d is None for d in shape) or (
        not set(self.input_axes) <= set(range(len(shape)))
        or len(set(self.input_axes)) == len(shape)):
      raise ValueError(
          f'LoraAdapter with input_axes={self.input_axes} cannot adapt a '
          f'kernel of shape {shape}: it needs a fully known shape with the '
          'input axes among its axes and at least one output axis.')
    self.kernel_shape = tuple(shape)
    self.output_axes = tuple(
        a for a in range(len(shape)) if a not in self.input_axes)
    d_in = int(np.prod([shape[a] for a in self.input_axes]))
    d_out = int(np.prod([shape[a] for a in self.output_axes]))
    limit = math.sqrt(6.0 / d_in)
    seed = self.seed

    def uniform(shape, dtype=None):
      # Stateless: the same factor whenever and wherever (eager,
      # tf.function, a TFF model_fn) the adapter is built.
      return tf.random.stateless_uniform(
          shape, seed=seed, minval=-limit, maxval=limit,
          dtype=dtype or tf.float32)

    def normal(shape, dtype=None):
      return tf.random.stateless_normal(shape, seed=seed,
                                        dtype=dtype or tf.float32)

    self.lora_a = self.add_weight(
        name='lora_a', shape=[d_in, self.rank],
        initializer='zeros' if self.embedding else uniform, trainable=True)
    self.lora_b = self.add_weight(
        name='lora_b', shape=[self.rank, d_out],
        initializer=normal if self.embedding else 'zeros', trainable=True)
    super().build(input_shape)

  def delta(self) -> tf.Tensor:
    """scale * A @ B in the kernel's shape (see the class docstring)."""
    update = tf.matmul(self.lora_a, self.lora_b) * self.scale
    update = tf.reshape(update, [self.kernel_shape[a] for a in
                                 self.input_axes + self.output_axes])
    permutation = np.argsort(self.input_axes + self.output_axes)
    if list(permutation) != list(range(len(permutation))):
      update = tf.transpose(update, permutation)
    return update

  def effective_kernel(self, kernel) -> tf.Tensor:
    """W + delta, in the dtype W is read in.

    Under a mixed precision policy the layer reads its (float32) kernel as
    float16 inside its call; the update is added in that dtype.
    """
    kernel = tf.convert_to_tensor(kernel)
    return kernel + tf.cast(self.delta(), kernel.dtype)

  def call(self, kernel):
    return self.effective_kernel(kernel)

  def get_config(self):
    config = super().get_config()
    config.update(input_axes=list(self.input_axes), rank=self.rank,
                  scale=self.scale, seed=list(self.seed),
                  embedding=self.embedding)
    return config
