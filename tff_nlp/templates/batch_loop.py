"""The local training loop of every tff_nlp client: a loop over its batches.

`for_each_batch(dataset, initial_state, fn)` folds `fn` over a dataset's
elements like `dataset.reduce(initial_state, fn)`, but as a `tf.while_loop`
over the dataset's iterator instead of a `ReduceDataset` op.

It is the loop of `tff.learning.LoopImplementation.DATASET_ITERATOR`, which
TFF offers for GPUs (`tf.device` does not reach into a dataset op's
function, so a `Dataset.reduce` body is not placed on the GPU), without
autograph. Why not `Dataset.reduce`, `tff.learning`'s default: a
`ReduceDataset` op instantiates its reduce function (here the whole training
step: forward pass, gradients, optimizer update) every time it runs and
releases it when it finishes, so TFF's C++ worker rebuilt the training graph
and its kernels for every client in every round. It also ran that function
unoptimized: the worker's sessions switch graph optimization off
(`disable_meta_optimizer`, optimizer level L0) and TFF's Python-side Grappler
pass skips functions owned by tf.data ops. A `tf.while_loop` over the
dataset's iterator is lowered by TFF's compiler into the computation's own
graph (`LoopCond`, `Enter`, `Exit`, ...), which the worker builds once per
session and keeps between rounds. On the text-to-SQL seq2seq model this took
a TFF round from 1.19x to 0.76x the time of a hand-written pure-TensorFlow
loop (`apps/scaling/bin/round_overhead.py --model=text2sql_seq2seq`,
`docs/results/round_overhead.md`).
"""

from collections.abc import Callable
from typing import Any, TypeVar

import tensorflow as tf

State = TypeVar('State')


def for_each_batch(
    dataset: tf.data.Dataset,
    initial_state: State,
    fn: Callable[[State, Any], State],
) -> State:
  """`fn` folded over `dataset`'s elements, in order; `initial_state` if empty.

  The same result as `dataset.reduce(initial_state, fn)`. Use it where a
  dataset can be consumed: in a `tf.function`, a TFF TensorFlow computation
  or eagerly.

  Args:
    dataset: The elements to loop over (e.g. a client's batches, already
      repeated for its local epochs).
    initial_state: A nested structure of tensors (or values convertible to
      tensors) carried through the loop.
    fn: `fn(state, element) -> state`, returning the same structure, dtypes
      and shapes as `initial_state` (as `tf.while_loop` requires of its loop
      variables).

  Returns:
    The state after the last element.
  """
  if not tf.inside_function():
    # A dataset iterator can only be made in a function graph (or eagerly);
    # TFF traces `tff.tensorflow.computation`s in a plain graph. TFF's
    # compiler inlines this call into the computation's graph.
    return tf.function(
        lambda: for_each_batch(dataset, initial_state, fn), autograph=False
    )()
  iterator = iter(dataset)

  def has_element(unused_state, next_element):
    return next_element.has_value()

  def step(state, next_element):
    return fn(state, next_element.get_value()), iterator.get_next_as_optional()

  final_state, _ = tf.while_loop(
      has_element, step, (initial_state, iterator.get_next_as_optional())
  )
  return final_state
