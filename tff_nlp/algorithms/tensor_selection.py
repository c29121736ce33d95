"""Which tensors a dynamic-pulling client sends: the selection rules.

Step 4 of `dynamic_pulling` (Passban et al., NAACL 2022; restated in
../shared/docs/dynamic_pulling.md). The model's trainable tensors t = 1..T
are in groups (`tensor_groups`); d_t is tensor t's change norm this round.

The mask m of tensors to send, per mode (`Mode`); n_g is the number of
tensors of group g, and every rule is applied within each group
separately:

*   default: all tensors (FedAvg weighted by n_k).
*   dp_g: d_t >= θ_g, θ_g the median of the group's norms.
*   dp_l: d_t < θ_g.
*   random: as many tensors per group as dp_l, chosen uniformly at random
    with the client's stateless `seed`: the tensors with the smallest
    priorities u = tf.random.stateless_uniform([T], seed) within the
    group. The same seed gives the same choice.
*   dp_l_33: the stricter "both directions, 33%" variant: d_t below the
    group's 1/3 quantile, and a restricted push (`Push`).
*   controllers: the caller's fixed mask `exchanged` (e.g. the tensors of
    encoder and decoder layers 0 and 3, `seq2seq_layout.controller_mask`).

Quantiles interpolate linearly between order statistics (numpy's default;
the median of an even count is the mean of the middle two). With
distinct norms, "d < q-quantile" selects exactly the k_g(q) =
ceil(q·(n_g - 1)) smallest norms: dp_l sends floor(n_g/2) tensors, dp_g
the other ceil(n_g/2) (so with an odd count dp_g sends the median tensor
and dp_l does not), dp_l_33 ceil((n_g - 1)/3) (12 of 36, 1 of 2 or 3 or 4,
0 of 1) and random floor(n_g/2). Ties are broken by rank: tensors are
ordered by (d, tensor index) and the first k_g are "below", so the counts
are always these, dp_g and dp_l are complements, and equal norms go to
the lower tensor index first.

Halving the tensor count is not halving the parameters: with whole-tensor
norms the median puts small tensors (biases, LayerNorm vectors) below it,
so dp_l sends a few thousand of millions of parameters. With
`split_by='parameters'` the quantile counts parameters instead: within a
group of P_g parameters, the tensors are taken in the same order, (d, index)
ascending (for random: the priorities u), and each is "below" if it still
fits in the budget B_g = floor(q·P_g) left by those before it (a tensor that
does not fit is skipped and the walk goes on, so a large tensor late in the
order does not stop smaller ones after it). dp_l, random and dp_l_33 send
the "below" tensors, at most B_g parameters and, with many tensors of
similar sizes (a Transformer's), close to it; dp_g sends the others, at
least P_g - B_g. So random sends as many parameters as dp_l would for the
same budget, not the same tensors' count. A tensor of more than B_g
parameters is never below: on Transformer base dp_l sends 49 % of the
parameters (by tensor count 0.1 %), on the `small` preset, whose tied
token embedding is 69 % of the encoder group, 36 %.

`Selection` holds a process's options of these rules (mode, groups, mask,
what a client keeps and what the server pushes, the change norm and
`split_by`), checked against the model by `Selection.resolved`.
"""

import collections
from collections.abc import Sequence
import dataclasses
import enum
from typing import Optional, Union

import tensorflow as tf

from tff_nlp.aggregators import weighting as weighting_lib


class Mode(enum.Enum):
  """Which tensors a client sends (module docstring)."""

  DEFAULT = 'default'
  DP_G = 'dp_g'
  DP_L = 'dp_l'
  RANDOM = 'random'
  DP_L_33 = 'dp_l_33'
  CONTROLLERS = 'controllers'


# Fraction q of a group's "below the q-quantile" rule, as (numerator,
# denominator) for integer arithmetic.
_QUANTILES = {
    Mode.DP_G: (1, 2),
    Mode.DP_L: (1, 2),
    Mode.RANDOM: (1, 2),
    Mode.DP_L_33: (1, 3),
}


# What a mode's quantile counts within a group (module docstring).
SPLIT_BY = ('tensors', 'parameters')


# How a client measures a tensor's change (`dynamic_pulling`).
CHANGE_NORMS = ('l2', 'rms')


class Push(enum.Enum):
  """Which tensors the server sends a client (`dynamic_pulling`)."""

  ALL = 'all'
  SHARED = 'shared'


@dataclasses.dataclass(frozen=True)
class Selection:
  """Which tensors dynamic pulling's clients send and take, and how.

  Attributes:
    mode: 'default', 'dp_g', 'dp_l', 'random', 'dp_l_33' or 'controllers'
      (a `Mode`).
    tensor_groups: The group of each trainable tensor, in the order of
      `ModelWeights.trainable`; medians and quantiles are per group.
    exchanged: For 'controllers' (only), the T bools of the tensors to send.
    keep_private: Whether a client keeps the tensors it did not send and
      takes only the others from the server; None: False for 'default',
      True otherwise.
    push: 'all' or 'shared' (the server sends only the tensors a client
      takes; needs `keep_private`); None: 'shared' for 'dp_l_33' and
      'controllers', 'all' otherwise.
    change_norm: 'l2' (the paper: the norm of a tensor's change) or 'rms'
      (that norm over sqrt(tensor size)); one of `CHANGE_NORMS`.
    split_by: What the median (or 1/3 quantile) counts within a group:
      'tensors' (the paper) or 'parameters'; one of `SPLIT_BY`.
  """

  mode: Union[str, Mode]
  tensor_groups: Sequence[str]
  exchanged: Optional[Sequence[bool]] = None
  keep_private: Optional[bool] = None
  push: Union[str, Push, None] = None
  change_norm: str = 'l2'
  split_by: str = 'tensors'

  def resolved(self, num_tensors: int) -> 'Selection':
    """These options checked against a model of `num_tensors` trainable
    tensors, with enums and the defaults of None filled in.

    Raises:
      ValueError: For an unknown `mode`, `push`, `change_norm` or
        `split_by`, `tensor_groups` or `exchanged` of the wrong length,
        `exchanged` given without 'controllers' or missing with it, or
        `push='shared'` without `keep_private`.
    """
    mode = weighting_lib.parse_option(self.mode, Mode, 'mode')
    keep_private = self.keep_private
    if keep_private is None:
      keep_private = mode is not Mode.DEFAULT
    push = self.push
    if push is None:
      push = (Push.SHARED if mode in (Mode.DP_L_33, Mode.CONTROLLERS)
              else Push.ALL)
    push = weighting_lib.parse_option(push, Push, 'push')
    if push is Push.SHARED and not keep_private:
      raise ValueError(
          "push='shared' needs keep_private=True: a client that takes every "
          'tensor needs the server to send every tensor.')
    if self.change_norm not in CHANGE_NORMS:
      raise ValueError(f'change_norm must be one of {CHANGE_NORMS}, got '
                       f'{self.change_norm!r}.')
    check_split_by(self.split_by)
    tensor_groups = tuple(str(g) for g in self.tensor_groups)
    if len(tensor_groups) != num_tensors:
      raise ValueError(f'tensor_groups has {len(tensor_groups)} entries; the '
                       f'model has {num_tensors} trainable tensors.')
    if (self.exchanged is not None) != (mode is Mode.CONTROLLERS):
      raise ValueError("exchanged is needed by mode='controllers' and only "
                       f'by it (mode={mode.value!r}).')
    exchanged = self.exchanged
    if exchanged is not None:
      exchanged = tuple(bool(e) for e in exchanged)
      if len(exchanged) != num_tensors:
        raise ValueError(f'exchanged has {len(exchanged)} entries; the '
                         f'model has {num_tensors} trainable tensors.')
    return dataclasses.replace(
        self, mode=mode, tensor_groups=tensor_groups, exchanged=exchanged,
        keep_private=keep_private, push=push)



def check_split_by(split_by: str) -> None:
  """Raises ValueError naming `split_by` unless it is one of `SPLIT_BY`."""
  if split_by not in SPLIT_BY:
    raise ValueError(f'split_by must be one of {SPLIT_BY}, got {split_by!r}.')


def num_below(num_tensors: int, mode: Union[str, Mode]) -> int:
  """k_g: how many of a group's tensors are "below" the mode's quantile.

  Args:
    num_tensors: n_g, the tensors of the group.
    mode: dp_g, dp_l, random or dp_l_33.

  Returns:
    ceil(q·(n_g - 1)), q = 1/2 or 1/3. dp_l, random and dp_l_33 send k_g
    tensors, dp_g sends n_g - k_g.
  """
  mode = weighting_lib.parse_option(mode, Mode, 'mode')
  numerator, denominator = _QUANTILES[mode]
  return max(0, -(-(num_tensors - 1) * numerator // denominator))


def _ranks(values: tf.Tensor) -> tf.Tensor:
  """int32 rank of each value when ordered by (value, index)."""
  index = tf.range(tf.size(values))
  before = tf.logical_or(
      values[None, :] < values[:, None],
      tf.logical_and(
          tf.equal(values[None, :], values[:, None]),
          index[None, :] < index[:, None],
      ),
  )
  return tf.reduce_sum(tf.cast(before, tf.int32), axis=1)


def parameter_budget(num_parameters: int, mode: Union[str, Mode]) -> int:
  """B_g: the parameters of a group "below" the mode's quantile may hold.

  Args:
    num_parameters: P_g, the parameters of the group.
    mode: dp_g, dp_l, random or dp_l_33.

  Returns:
    floor(q·P_g), q = 1/2 or 1/3 (`split_by='parameters'`).
  """
  mode = weighting_lib.parse_option(mode, Mode, 'mode')
  numerator, denominator = _QUANTILES[mode]
  return num_parameters * numerator // denominator


def _below_by_parameters(keys: tf.Tensor, sizes: Sequence[int],
                         budget: int) -> tf.Tensor:
  """bool[n]: the tensors that fit in `budget`, walked in (key, index) order."""
  ranks = _ranks(keys)
  # order[p]: the tensor of rank p.
  order = tf.math.invert_permutation(ranks)
  sorted_sizes = tf.gather(tf.constant(sizes, tf.int64), order)
  remaining = tf.constant(budget, tf.int64)
  taken = []
  for position in range(len(sizes)):  # A group holds tens of tensors.
    fits = sorted_sizes[position] <= remaining
    remaining -= tf.where(fits, sorted_sizes[position], 0)
    taken.append(fits)
  return tf.gather(tf.stack(taken), ranks)


def group_indices(tensor_groups: Sequence[str]) -> dict[str, list[int]]:
  """Group name -> tensor indices, groups in order of first appearance."""
  groups = collections.OrderedDict()
  for index, group in enumerate(tensor_groups):
    groups.setdefault(group, []).append(index)
  return groups


def select_tensors(
    norms: tf.Tensor,
    seed: tf.Tensor,
    *,
    mode: Union[str, Mode],
    tensor_groups: Sequence[str],
    exchanged: Optional[Sequence[bool]] = None,
    split_by: str = 'tensors',
    sizes: Optional[Sequence[int]] = None,
) -> tf.Tensor:
  """The mask m of tensors a client sends (module docstring, step 4).

  Args:
    norms: float32[T], the change norms d_t.
    seed: int64[2], the stateless seed of `random` (unused otherwise).
    mode: A `Mode` or its name.
    tensor_groups: T group names.
    exchanged: T bools, the mask of `controllers`.
    split_by: 'tensors' (the quantile counts tensors: the paper's median)
      or 'parameters' (it counts parameters; needs `sizes`).
    sizes: T parameter counts, for `split_by='parameters'`.

  Returns:
    bool[T].

  Raises:
    ValueError: For 'controllers' without `exchanged` of T entries, an
      unknown `split_by`, or 'parameters' without `sizes` of T positive
      counts.
  """
  mode = weighting_lib.parse_option(mode, Mode, 'mode')
  num_tensors = len(tensor_groups)
  check_split_by(split_by)
  if split_by == 'parameters' and (
      sizes is None or len(sizes) != num_tensors
      or any(int(size) < 1 for size in sizes)):
    raise ValueError(f"split_by='parameters' needs sizes: {num_tensors} "
                     f'positive parameter counts, got {sizes!r}.')
  if mode is Mode.DEFAULT:
    return tf.ones([num_tensors], tf.bool)
  if mode is Mode.CONTROLLERS:
    if exchanged is None or len(exchanged) != num_tensors:
      raise ValueError(f'controllers needs exchanged with {num_tensors} '
                       f'entries, got {exchanged!r}.')
    return tf.constant([bool(e) for e in exchanged], tf.bool)
  if mode is Mode.RANDOM:
    keys = tf.random.stateless_uniform(
        [num_tensors], seed=tf.cast(seed, tf.int64), dtype=tf.float32
    )
  else:
    keys = tf.cast(norms, tf.float32)
  mask = [None] * num_tensors
  for indices in group_indices(tensor_groups).values():
    group_keys = tf.gather(keys, indices)
    if split_by == 'parameters':
      group_sizes = [int(sizes[i]) for i in indices]
      below = _below_by_parameters(
          group_keys, group_sizes,
          parameter_budget(sum(group_sizes), mode))
    else:
      below = _ranks(group_keys) < num_below(len(indices), mode)
    chosen = tf.logical_not(below) if mode is Mode.DP_G else below
    for position, index in enumerate(indices):
      mask[index] = chosen[position]
  return tf.stack(mask)
