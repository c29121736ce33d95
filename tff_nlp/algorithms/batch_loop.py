"""The local training loop of every tff_nlp client: a loop over its batches.

`for_each_batch(dataset, initial_state, fn)` folds `fn` over a dataset's
elements like `dataset.reduce(initial_state, fn)`, but as a `tf.while_loop`
over the dataset's iterator instead of a `ReduceDataset` op.

Why not `Dataset.reduce`, which `tff.learning`'s own client work uses: a
`ReduceDataset` op instantiates its reduce function (here the whole training
step: forward pass, gradients, optimizer update) every time it runs, and
releases it when it finishes. In TFF's C++ worker that is once per client per
round, and the worker's sessions run with graph optimization switched off
(`disable_meta_optimizer`, optimizer level L0), while TFF's Python-side
Grappler pass skips functions owned by tf.data ops. On the text-to-SQL
seq2seq model of `docs/results/round_overhead.md` the instantiation cost
about 0.1 CPU-second per client call in the worker, and a `tf.function`
calling `Dataset.reduce` from Python, where Grappler runs at every
instantiation, about 1 second. The body of a `tf.while_loop` becomes part of
the computation's own graph: the worker builds it once per session (sessions
are kept between rounds) and every later call only runs it. Measured by
`bench/round_overhead.py --model=text2sql_seq2seq`.
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
