"""Paired, client-stratified bootstrap intervals of accuracies over test sets.

A benchmark run gives, for each method, training seed s and client c, a 0/1
outcome y[s, c, i] (e.g. exact match) for every test example i of c, in a
fixed example order (module `intervals` describes the two sources of
uncertainty in a reported accuracy, and the Student-t interval over seeds):

*   `bootstrap_accuracy` / `bootstrap_difference` (default): a percentile
    bootstrap over test examples, stratified by client, of the seed-averaged
    MacroAvg, MicroAvg and per-client accuracy (and, paired, of A - B). The
    trained runs are held fixed: it covers test-set sampling only, i.e. how
    much the numbers of *these* runs would move if every client's test set
    were redrawn, at its size, from the same distribution.
*   The same with `resample_seeds=True`: each replicate also resamples each
    method's seeds with replacement, so it covers both sources (see
    `bootstrap_difference` for how well, with few seeds).

With `units` (each example's number of scored units, e.g. its target tokens,
the same for every method and seed), y[s, c, i] counts example i's correct
units (0 <= y <= u_i) and an accuracy is a ratio of sums: client c's is
Σ_s Σ_i y[s, c, i] / (S Σ_i u_i), MicroAvg Σ y / (S Σ_c Σ_i u_i). Examples,
not units, are resampled (a question's tokens are not independent), so the
interval is that of a ratio estimator over clustered units. Without `units`
every u_i is 1 and the accuracies below are exact match's.

`client_difference` is the paired bootstrap of A - B on one client;
`intervals.verdict` reads an interval of a difference.

The bootstrap, replicate by replicate (B replicates, default 2000):

1.  With `resample_seeds`: draw S_m seed indices with replacement for each
    method m, once per replicate (a seed is one federated run, scored on
    every client, so all clients of a replicate share the draw).
2.  For every client c independently, draw n_c example indices with
    replacement from its n_c test examples (every client keeps its size,
    which MacroAvg needs); A and B get the same indices (paired).
3.  Per method, average the outcomes over the (drawn) seeds: client c's
    accuracy is acc_c = (1 / (S n_c)) Σ_s Σ_i y[s, c, idx_i], MacroAvg
    = (1/C) Σ_c acc_c and MicroAvg = Σ_c Σ_s Σ_i y[s, c, idx_i]
    / (S Σ_c n_c) (each the mean over seeds of that seed's MacroAvg /
    MicroAvg, since the resampled sizes are fixed); for a difference, A's
    minus B's. With `units`, n_c becomes Σ_i u[c, idx_i], the drawn
    examples' units.

The interval is the percentile interval: the (1 - confidence)/2 and
(1 + confidence)/2 quantiles of the B replicates (`np.quantile`, linear
interpolation), around the point estimate on the original data. The draws
come from `np.random.default_rng(seed)` in a fixed order (`_draw` documents
it), so a result is reproducible from its seed.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import math
from typing import Any, Optional, Union

import numpy as np

from tff_nlp.metrics.intervals import _check_confidence
from tff_nlp.metrics.intervals import DEFAULT_CONFIDENCE
from tff_nlp.metrics.intervals import Interval

DEFAULT_NUM_REPLICATES = 2000

# Names of the averages in `AccuracyIntervals.undefined`.
MACRO_AVG = 'MacroAvg'
MICRO_AVG = 'MicroAvg'

# Client name -> 0/1 outcomes of shape [num_seeds, num_examples] (with
# `units`, each example's count of correct units).
Outcomes = Mapping[str, Union[np.ndarray, Sequence[Sequence[float]]]]
# Client name -> each example's number of scored units, [num_examples].
Units = Mapping[str, Union[np.ndarray, Sequence[float]]]


@dataclasses.dataclass(frozen=True)
class AccuracyIntervals:
  """Bootstrap intervals of MacroAvg, MicroAvg and every client's accuracy.

  Of one method's seed-averaged accuracy (`bootstrap_accuracy`), or of the
  difference A - B (`bootstrap_difference`).

  Attributes:
    macro: MacroAvg, the mean of the per-client accuracies.
    micro: MicroAvg, correct over all examples.
    per_client: Client name -> its accuracy, in the input's order.
    num_seeds: Seeds per method: (S,) or (S_A, S_B).
    num_replicates: Bootstrap replicates.
    confidence: Coverage of the intervals.
    resample_seeds: Whether seeds were resampled too (covers seed variation
      as well as test-set sampling).
    seed: Seed of the bootstrap's random generator.
    undefined: Client name (or MACRO_AVG, MICRO_AVG) -> why its interval
      cannot be drawn, for every interval with NaN bounds: with `units`,
      some replicates drew none of the client's examples that have units,
      so its accuracy (and MacroAvg) is undefined there. Empty when every
      interval is defined.
  """

  macro: Interval
  micro: Interval
  per_client: Mapping[str, Interval]
  num_seeds: tuple[int, ...]
  num_replicates: int
  confidence: float
  resample_seeds: bool
  seed: int
  undefined: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict[str, Any]:
    """A JSON-ready dict of the attributes."""
    return collections.OrderedDict(
        macro_avg=self.macro.to_json(),
        micro_avg=self.micro.to_json(),
        per_client=collections.OrderedDict(
            (name, interval.to_json())
            for name, interval in self.per_client.items()),
        num_seeds=list(self.num_seeds),
        num_replicates=self.num_replicates,
        confidence=self.confidence,
        resample_seeds=self.resample_seeds,
        seed=self.seed,
        # Only when some interval cannot be drawn, so the records of
        # bootstraps that always could keep their form.
        **({'undefined': dict(self.undefined)} if self.undefined else {}),
    )


def _as_outcomes(outcomes: Outcomes, name: str,
                 units: Optional[Mapping[str, np.ndarray]] = None
                 ) -> dict[str, np.ndarray]:
  """Checks one method's outcomes; float64 [S, n_c] arrays of 0 and 1, or
  with `units` (`_as_units`) of whole numbers from 0 to each example's
  units."""
  if not outcomes:
    raise ValueError(f'{name}: need at least one client.')
  arrays = {}
  for client, values in outcomes.items():
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or 0 in array.shape:
      raise ValueError(
          f'{name}, client {client!r}: outcomes must have shape '
          f'[num_seeds, num_examples], both >= 1, got {array.shape}.')
    if units is None:
      if not np.all((array == 0) | (array == 1)):
        raise ValueError(
            f'{name}, client {client!r}: outcomes must be 0 or 1.')
    else:
      if client not in units:
        raise ValueError(f'{name}: client {client!r} has no units.')
      if array.shape[1] != units[client].shape[0]:
        raise ValueError(
            f'{name}, client {client!r}: {array.shape[1]} examples but '
            f'{units[client].shape[0]} units.')
      if not np.all((array == np.round(array)) & (array >= 0)
                    & (array <= units[client])):
        raise ValueError(
            f'{name}, client {client!r}: outcomes must be whole numbers '
            'from 0 to each example\'s units.')
    arrays[client] = array
  num_seeds = {client: array.shape[0] for client, array in arrays.items()}
  if len(set(num_seeds.values())) > 1:
    raise ValueError(
        f'{name}: every client needs the same number of seeds (one seed is '
        f'one run, scored on every client), got {num_seeds}.')
  return arrays


def _as_units(units: Optional[Units]) -> Optional[dict[str, np.ndarray]]:
  """Checks `units`: float64 [n_c] whole numbers >= 0, each client's > 0."""
  if units is None:
    return None
  arrays = {}
  for client, values in units.items():
    array = np.asarray(values, dtype=np.float64)
    if (array.ndim != 1 or not np.all(array == np.round(array))
        or np.any(array < 0) or not np.sum(array) > 0):
      raise ValueError(
          f'units, client {client!r}: need a [num_examples] vector of whole '
          'numbers >= 0 with a positive sum.')
    arrays[client] = array
  return arrays


def _check_paired(a: Mapping[str, np.ndarray],
                  b: Mapping[str, np.ndarray]) -> None:
  if set(a) != set(b):
    raise ValueError(
        f'A and B must have the same clients, got {list(a)} and {list(b)}.')
  for client in a:
    if a[client].shape[1] != b[client].shape[1]:
      raise ValueError(
          f'Client {client!r}: A and B must have the same examples, got '
          f'{a[client].shape[1]} and {b[client].shape[1]}.')


def _seed_weights(indices: np.ndarray, num_seeds: int) -> np.ndarray:
  """[B, S] how often each seed is among a replicate's drawn seeds."""
  return np.sum(indices[:, :, None] == np.arange(num_seeds), axis=1)


def _correct(y: np.ndarray, indices: np.ndarray,
             seed_weights: Optional[np.ndarray]) -> np.ndarray:
  """[B] correct outcomes over the drawn examples and seeds of each replicate.

  Σ_s w_bs Σ_i y[s, indices[b, i]] (w = 1 without seed resampling); exact
  integers in float64.
  """
  if seed_weights is None:
    return np.sum(np.sum(y, axis=0)[indices], axis=1)
  per_seed = np.stack([np.sum(row[indices], axis=1) for row in y], axis=1)
  return np.sum(per_seed * seed_weights, axis=1)


def _draw(methods: Sequence[Mapping[str, np.ndarray]], num_replicates: int,
          resample_seeds: bool, seed: int,
          units: Optional[Mapping[str, np.ndarray]] = None
          ) -> list[np.ndarray]:
  """The replicates of the seed-averaged accuracies, one array per method.

  Draw order from `np.random.default_rng(seed)`: with `resample_seeds`,
  `integers(0, S_m, size=(B, S_m))` for each method m in order; then, for
  each client c in the first method's order, `integers(0, n_c, size=(B,
  n_c))`, shared by the methods. Peak memory is about 16 B n_c bytes for the
  largest client (54 MB at B = 2000, n_c = 1700). `units` (shared by the
  methods) change the denominators only, not the draws.

  A replicate that draws only examples without units (possible when few of
  a client's examples have any, e.g. a template parser's gold templates
  that are not among its classes) has no accuracy for that client: its
  value is NaN there and in MacroAvg (`_intervals` then reports the
  interval as undefined and says why); MicroAvg stays defined while any
  client drew units.

  Returns:
    For each method, in order, a [C + 2, B] array: the C clients'
    accuracies, then MacroAvg and MicroAvg.
  """
  rng = np.random.default_rng(seed)
  clients = list(methods[0])
  weights = []
  for arrays in methods:
    num_seeds = next(iter(arrays.values())).shape[0]
    weights.append(
        _seed_weights(rng.integers(0, num_seeds, size=(num_replicates,
                                                       num_seeds)),
                      num_seeds) if resample_seeds else None)
  accuracies = [np.empty((len(clients) + 2, num_replicates))
                for _ in methods]
  total_correct = [np.zeros(num_replicates) for _ in methods]
  total_units = np.zeros(num_replicates)
  for row, client in enumerate(clients):
    num_examples = methods[0][client].shape[1]
    indices = rng.integers(0, num_examples,
                           size=(num_replicates, num_examples))
    drawn_units = (np.full(num_replicates, float(num_examples))
                   if units is None else np.sum(units[client][indices], axis=1))
    total_units += drawn_units
    for m, arrays in enumerate(methods):
      correct = _correct(arrays[client], indices, weights[m])
      total_correct[m] += correct
      with np.errstate(invalid='ignore'):  # 0 / 0: no units drawn, NaN.
        accuracies[m][row] = correct / (arrays[client].shape[0] * drawn_units)
  for m, arrays in enumerate(methods):
    num_seeds = next(iter(arrays.values())).shape[0]
    accuracies[m][-2] = np.mean(accuracies[m][:-2], axis=0)
    with np.errstate(invalid='ignore'):
      accuracies[m][-1] = total_correct[m] / (num_seeds * total_units)
  return accuracies


def _point(arrays: Mapping[str, np.ndarray],
           units: Optional[Mapping[str, np.ndarray]] = None) -> np.ndarray:
  """[C + 2] seed-averaged client accuracies, MacroAvg, MicroAvg."""
  sizes = {c: a.shape[1] if units is None else np.sum(units[c])
           for c, a in arrays.items()}
  per_client = [np.sum(a) / (a.shape[0] * sizes[c])
                for c, a in arrays.items()]
  micro = (sum(np.sum(a) for a in arrays.values()) /
           sum(a.shape[0] * sizes[c] for c, a in arrays.items()))
  return np.array(per_client + [np.mean(per_client), micro])


def _intervals(clients: Sequence[str], point: np.ndarray,
               replicates: np.ndarray, *, num_seeds: tuple[int, ...],
               confidence: float, resample_seeds: bool,
               seed: int) -> AccuracyIntervals:
  names = [*clients, MACRO_AVG, MICRO_AVG]
  undrawn = np.sum(np.isnan(replicates), axis=1)
  intervals, undefined = [], collections.OrderedDict()
  for name, estimate, row, count in zip(names, point, replicates, undrawn):
    if count:
      intervals.append(Interval(float(estimate), math.nan, math.nan))
      undefined[name] = (
          f'{count} of {replicates.shape[1]} replicates drew only examples '
          'without scored units' + (
              '' if name in clients
              else ' on ' + ', '.join(repr(c) for c, n in zip(clients, undrawn)
                                      if n)))
    else:
      low, high = np.quantile(
          row, [(1 - confidence) / 2, (1 + confidence) / 2])
      intervals.append(Interval(float(estimate), float(low), float(high)))
  return AccuracyIntervals(
      macro=intervals[-2],
      micro=intervals[-1],
      per_client=collections.OrderedDict(zip(clients, intervals[:-2])),
      undefined=undefined,
      num_seeds=num_seeds,
      num_replicates=replicates.shape[1],
      confidence=confidence,
      resample_seeds=resample_seeds,
      seed=seed,
  )


def _check_bootstrap_args(num_replicates: int, confidence: float) -> None:
  _check_confidence(confidence)
  if num_replicates < 1:
    raise ValueError(f'num_replicates must be >= 1, got {num_replicates}.')


def bootstrap_accuracy(
    outcomes: Outcomes,
    *,
    num_replicates: int = DEFAULT_NUM_REPLICATES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    resample_seeds: bool = False,
    units: Optional[Units] = None,
) -> AccuracyIntervals:
  """Percentile bootstrap intervals of one method's seed-averaged accuracy.

  Estimates, on the original data: client c's accuracy (1/(S n_c)) Σ_s Σ_i
  y[s, c, i], MacroAvg (their mean) and MicroAvg (Σ y / (S Σ_c n_c)). The
  replicates resample each client's examples (and with `resample_seeds` the
  seeds) as the module docstring describes.

  Args:
    outcomes: Client name -> 0/1 (or bool) outcomes of shape [num_seeds,
      num_examples]; the same num_seeds for every client.
    num_replicates: Bootstrap replicates B.
    confidence: Coverage in (0, 1).
    seed: Seed of `np.random.default_rng`.
    resample_seeds: Also resample the seeds (module docstring).
    units: Client name -> each example's number of scored units (e.g.
      target tokens); `outcomes` then count correct units (module
      docstring). None: one unit per example.

  Returns:
    The intervals; `num_seeds` is (S,).

  Raises:
    ValueError: On an empty mapping, a wrong shape, outcomes other than 0/1
      (with `units`: other than whole numbers up to the example's units),
      or clients with different numbers of seeds.
  """
  _check_bootstrap_args(num_replicates, confidence)
  units = _as_units(units)
  arrays = _as_outcomes(outcomes, 'outcomes', units)
  (replicates,) = _draw([arrays], num_replicates, resample_seeds, seed,
                        units)
  return _intervals(
      list(arrays), _point(arrays, units), replicates,
      num_seeds=(next(iter(arrays.values())).shape[0],),
      confidence=confidence, resample_seeds=resample_seeds, seed=seed)


def bootstrap_difference(
    outcomes_a: Outcomes,
    outcomes_b: Outcomes,
    *,
    num_replicates: int = DEFAULT_NUM_REPLICATES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    resample_seeds: bool = False,
    units: Optional[Units] = None,
) -> AccuracyIntervals:
  """Paired percentile bootstrap intervals of A - B.

  The estimate is A's seed-averaged MacroAvg (MicroAvg, client accuracy)
  minus B's, on the original data. Each replicate applies the same
  resampled examples to A and B (paired: examples are aligned per client),
  so the per-example correlation of the methods cancels out of the
  interval; A and B may have different numbers of seeds.

  What the interval covers:

  *   `resample_seeds=False`: test-set sampling only, for these trained
      runs; an interval excluding 0 says that these runs differ on the
      clients' question distributions, not that other seeds would. With
      identical outcomes it is exactly [0, 0].
  *   `resample_seeds=True`: test-set sampling and seed variation. Each
      replicate draws S_A seeds of A and, independently (seeds are not
      paired across methods), S_B of B with replacement. Caveats with few
      seeds: the bootstrap's seed variance is (S - 1)/S of the sample
      variance (2/3 with 3 seeds), and 3 seeds have only 10 distinct
      multisets, so the seed part is rough and, if anything, too narrow.

  Args:
    outcomes_a: Method A's outcomes, as in `bootstrap_accuracy`.
    outcomes_b: Method B's, for the same clients with the same examples
      in the same order; its number of seeds may differ.
    num_replicates: Bootstrap replicates B.
    confidence: Coverage in (0, 1).
    seed: Seed of `np.random.default_rng`.
    resample_seeds: Also resample each method's seeds.
    units: As in `bootstrap_accuracy`, one vector per client for both A and
      B (which must score the same units, e.g. tokenize alike).

  Returns:
    Intervals of A - B, clients in A's order; `num_seeds` is (S_A, S_B).
    `intervals.verdict` reads them.

  Raises:
    ValueError: As `bootstrap_accuracy`, or if A and B have different
      clients or a client's example counts differ.
  """
  _check_bootstrap_args(num_replicates, confidence)
  units = _as_units(units)
  a = _as_outcomes(outcomes_a, 'A', units)
  b = _as_outcomes(outcomes_b, 'B', units)
  _check_paired(a, b)
  replicates_a, replicates_b = _draw([a, b], num_replicates, resample_seeds,
                                     seed, units)
  return _intervals(
      list(a), _point(a, units) - _point({c: b[c] for c in a}, units),
      replicates_a - replicates_b,
      num_seeds=(next(iter(a.values())).shape[0],
                 next(iter(b.values())).shape[0]),
      confidence=confidence, resample_seeds=resample_seeds, seed=seed)


def client_difference(
    outcomes_a: Union[np.ndarray, Sequence[Sequence[float]]],
    outcomes_b: Union[np.ndarray, Sequence[Sequence[float]]],
    *,
    num_replicates: int = DEFAULT_NUM_REPLICATES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    resample_seeds: bool = False,
) -> Interval:
  """Paired bootstrap interval of A - B accuracy on one client.

  `bootstrap_difference` with this one client: the estimate is
  mean(y_A) - mean(y_B) (each over seeds and examples). The per-client
  intervals of a multi-client `bootstrap_difference` are the same kind of
  interval (clients are resampled independently) from other draws.

  Args:
    outcomes_a: A's 0/1 outcomes, [num_seeds_a, num_examples].
    outcomes_b: B's, [num_seeds_b, num_examples], examples aligned.
    num_replicates: Bootstrap replicates B.
    confidence: Coverage in (0, 1).
    seed: Seed of `np.random.default_rng`.
    resample_seeds: Also resample each method's seeds.

  Returns:
    Interval(A - B, low, high).
  """
  return bootstrap_difference(
      {'client': outcomes_a}, {'client': outcomes_b},
      num_replicates=num_replicates, confidence=confidence, seed=seed,
      resample_seeds=resample_seeds).per_client['client']
