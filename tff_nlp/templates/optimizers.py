"""Helpers around `tff.learning.optimizers` used by tff_nlp's client work."""

import collections

import tensorflow as tf

import tensorflow_federated as tff

# Client optimizers by name, for experiment configs and flags: each maps
# `learning_rate=` to a `tff.learning.optimizers.Optimizer`. Adafactor is the
# Lorar paper's (its TFF 0.87 bugs are worked around below).
CLIENT_OPTIMIZERS = {
    'adafactor': tff.learning.optimizers.build_adafactor,
    'adam': tff.learning.optimizers.build_adam,
    'sgd': tff.learning.optimizers.build_sgdm,
}


def set_hparams(optimizer: tff.learning.optimizers.Optimizer, state, hparams):
  """`optimizer.set_hparams(state, hparams)`, correct for every TFF optimizer.

  TFF 0.87's Adafactor returns only the updated hparams from `set_hparams`,
  dropping its step counter and moments (so `next` then fails with
  KeyError: 'steps'); its state keeps hparams under `state['hparams']`. For
  such a state we update that entry ourselves, leaving Python `bool` hparams
  (Adafactor's `relative_step`) at their built value.

  Args:
    optimizer: A `tff.learning.optimizers.Optimizer`.
    state: Its state, from `initialize`.
    hparams: A mapping of hyperparameter names to values.

  Returns:
    `state` with `hparams` set.
  """
  new_state = optimizer.set_hparams(state, hparams)
  if (
      isinstance(state, collections.abc.Mapping)
      and 'hparams' in state
      and set(new_state.keys()) != set(state.keys())
  ):
    merged = dict(state['hparams'])
    for key, value in hparams.items():
      # Adafactor branches in Python on `relative_step`: keep its static
      # Python bool, a traced one cannot drive Python control flow.
      if not isinstance(merged.get(key), bool):
        merged[key] = value
    new_state = dict(state)
    new_state['hparams'] = merged
  return new_state


def restore_python_bools(template, state):
  """Puts back the Python `bool` leaves of `template` into `state`.

  Optimizer state carried through the client's batch loop
  (`batch_loop.for_each_batch`) comes back with every leaf a tensor.
  Adafactor branches in Python on its `relative_step` hparam, so that leaf
  must stay the Python value it was built with.

  Args:
    template: The optimizer state before the loop.
    state: The same structure, as returned by the loop body.

  Returns:
    `state` with `template`'s Python bools.
  """
  return tf.nest.map_structure(
      lambda t, s: t if isinstance(t, bool) else s, template, state
  )


def match_dtypes(carried_state, new_state):
  """Casts each leaf of `new_state` to the dtype of `carried_state`'s leaf.

  A loop body must return the dtypes it received; TFF 0.87's Adafactor
  starts its step counter as an integer and returns it as float32.

  Args:
    carried_state: The optimizer state as the loop passed it in (tensors).
    new_state: The state returned by `optimizer.next`.

  Returns:
    `new_state` with `carried_state`'s dtypes.
  """
  return tf.nest.map_structure(
      lambda c, n: tf.cast(n, c.dtype), carried_state, new_state
  )
