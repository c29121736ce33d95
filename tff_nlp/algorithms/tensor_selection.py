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
    group's 1/3 quantile, and a restricted push (`dynamic_pulling.Push`).
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
"""

import collections
from collections.abc import Sequence
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
