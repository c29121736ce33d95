"""95 % intervals for results over seeds and test sets, and their verdicts.

A benchmark run gives, for each method, training seed s and client c, a 0/1
outcome y[s, c, i] (e.g. exact match) for every test example i of c, in a
fixed example order. Two sources of uncertainty sit in a reported accuracy,
and each interval here covers a stated part of it:

*   `seed_interval`: a Student-t interval over seeds, for a per-seed number
    (e.g. MacroAvg of each seed's run). It covers training randomness (the
    seed's initialisation, client sampling and data order) with each seed
    scored on the same, fixed test sets; it says nothing about how the test
    sets were drawn. With 3 seeds, t_{2,0.975} = 4.30, so it is wide.
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

`verdict` turns an interval of a difference A - B into 'no difference',
'A higher' or 'B higher'. `client_difference` is the paired bootstrap of A - B
on one client.

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
from typing import Any, NamedTuple, Optional, Union

import numpy as np

DEFAULT_CONFIDENCE = 0.95
DEFAULT_NUM_REPLICATES = 2000

# Names of the averages in `AccuracyIntervals.undefined`.
MACRO_AVG = 'MacroAvg'
MICRO_AVG = 'MicroAvg'

# Verdicts of `verdict`.
NO_DIFFERENCE = 'no difference'
UNDETERMINED = 'undetermined'

# Client name -> 0/1 outcomes of shape [num_seeds, num_examples] (with
# `units`, each example's count of correct units).
Outcomes = Mapping[str, Union[np.ndarray, Sequence[Sequence[float]]]]
# Client name -> each example's number of scored units, [num_examples].
Units = Mapping[str, Union[np.ndarray, Sequence[float]]]


class Interval(NamedTuple):
  """A point estimate and a two-sided interval; unpacks as a 3-tuple.

  Attributes:
    estimate: The point estimate (e.g. the mean over seeds).
    low: Lower bound; NaN when undefined (one seed in `seed_interval`).
    high: Upper bound; NaN when undefined.
  """

  estimate: float
  low: float
  high: float

  def bounds(self) -> Optional[list[float]]:
    """`[low, high]` for JSON, or None when the interval is undefined."""
    if math.isnan(self.low):
      return None
    return [self.low, self.high]

  def to_json(self) -> dict[str, Optional[float]]:
    """A JSON-ready dict; NaN bounds become None."""
    return collections.OrderedDict(
        (k, None if math.isnan(v) else v) for k, v in self._asdict().items())


def _check_confidence(confidence: float) -> None:
  if not 0 < confidence < 1:
    raise ValueError(f'confidence must be in (0, 1), got {confidence}.')


def _t_central_probability(theta: float, df: int) -> float:
  """P(|T| <= t) for T ~ Student-t(df) and t = sqrt(df) tan(theta).

  Abramowitz & Stegun 26.7.3-4, exact for integer df (c = cos theta):
  df = 1: 2 theta / pi; odd df > 1: (2/pi) (theta + sin theta c (1 + 2/3
  c^2 + (2 4)/(3 5) c^4 + ... + (2 4 ... (df-3))/(3 5 ... (df-2))
  c^(df-3))); even df: sin theta (1 + 1/2 c^2 + (1 3)/(2 4) c^4 + ...
  + (1 3 ... (df-3))/(2 4 ... (df-2)) c^(df-2)).
  """
  c2 = math.cos(theta)**2
  if df % 2:
    k = np.arange(1, (df - 1) // 2, dtype=np.float64)
    coefficients = np.cumprod(2 * k / (2 * k + 1))
    series = 1.0 + float(np.sum(coefficients * c2**k))
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * (
        series if df > 1 else 0.0))
  k = np.arange(1, df // 2, dtype=np.float64)
  coefficients = np.cumprod((2 * k - 1) / (2 * k))
  return math.sin(theta) * (1.0 + float(np.sum(coefficients * c2**k)))


def _t_two_sided(confidence: float, df: int) -> float:
  """t > 0 with P(|T| <= t) = confidence, T ~ Student-t(df), df integer."""
  # P(|T| <= sqrt(df) tan(theta)) increases from 0 to 1 on [0, pi/2):
  # bisection on theta, to the last bit.
  low, high = 0.0, math.pi / 2
  while True:
    middle = (low + high) / 2
    if middle in (low, high):
      break
    if _t_central_probability(middle, df) < confidence:
      low = middle
    else:
      high = middle
  return math.sqrt(df) * math.tan(middle)


def t_quantile(p: float, df: int) -> float:
  """The p quantile of Student's t distribution with df degrees of freedom.

  Without scipy: the CDF is A&S 26.7.3-4's finite series in theta =
  atan(t / sqrt(df)), exact for integer df, inverted by bisection to the
  last bit of theta. The CDF at the result is p to about 1e-16, and the
  quantile is good to about 1e-13 relative for p up to 0.9999 (the tail
  is ill-conditioned in p). E.g. t_quantile(0.975, 2) = 4.30265272974946
  (exactly 0.95 / sqrt(0.04875)); scipy 1.9.3's `t.ppf` is 4e-11 off here
  and up to ~2e-9 in the tails.

  Args:
    p: Probability in (0, 1).
    df: Degrees of freedom, an integer >= 1.

  Returns:
    t with P(T <= t) = p.

  Raises:
    ValueError: If p is not in (0, 1) or df is not an integer >= 1.
  """
  if not 0 < p < 1:
    raise ValueError(f'p must be in (0, 1), got {p}.')
  if int(df) != df or df < 1:
    raise ValueError(f'df must be an integer >= 1, got {df}.')
  if p == 0.5:
    return 0.0
  t = _t_two_sided(abs(2 * p - 1), int(df))
  return t if p > 0.5 else -t


def seed_interval(values: Sequence[float],
                  confidence: float = DEFAULT_CONFIDENCE) -> Interval:
  """Mean over seeds with its Student-t interval.

  For n per-seed values v with mean m and sample standard deviation s
  (ddof = 1): m ± t_{n-1, (1+confidence)/2} s / sqrt(n). E.g. [1, 2, 3]:
  m = 2, s = 1, 2 ± 4.3027 / sqrt(3) = 2 ± 2.4841. It treats the seeds as
  independent draws of a normally distributed metric; it covers training
  randomness on fixed test sets (module docstring). A difference of two
  methods with paired seeds (same seeds and client samples) is the interval
  of the per-seed differences.

  Args:
    values: One finite number per seed, at least one.
    confidence: Coverage in (0, 1).

  Returns:
    Interval(mean, low, high). With one seed the spread is unknown and the
    result is (v, NaN, NaN): reports print "n=1" rather than an interval
    (`verdict` gives UNDETERMINED).

  Raises:
    ValueError: If values is empty, not 1-D or not finite.
  """
  _check_confidence(confidence)
  values = np.asarray(values, dtype=np.float64)
  if values.ndim != 1 or not values.size:
    raise ValueError(
        f'values must be a non-empty 1-D sequence, got shape {values.shape}.')
  if not np.all(np.isfinite(values)):
    raise ValueError(f'values must be finite, got {values.tolist()}.')
  mean = float(np.mean(values))
  if values.size == 1:
    return Interval(mean, math.nan, math.nan)
  half_width = _t_two_sided(confidence, values.size - 1) * float(
      np.std(values, ddof=1)) / math.sqrt(values.size)
  return Interval(mean, mean - half_width, mean + half_width)


def verdict(interval: Union[Interval, Sequence[float]], a: str = 'A',
            b: str = 'B') -> str:
  """The plain-language reading of an interval of a difference A - B.

  Args:
    interval: (estimate, low, high) of A - B, e.g. from
      `bootstrap_difference`.
    a: Name of method A in the verdict.
    b: Name of method B.

  Returns:
    NO_DIFFERENCE ('no difference') if low <= 0 <= high (the interval
    contains 0, endpoints included); f'{a} higher' ('A higher') if
    low > 0; f'{b} higher' ('B higher') if high < 0; UNDETERMINED
    ('undetermined') if a bound is NaN (one seed in `seed_interval`).
  """
  _, low, high = interval
  if math.isnan(low) or math.isnan(high):
    return UNDETERMINED
  if low > 0:
    return f'{a} higher'
  if high < 0:
    return f'{b} higher'
  return NO_DIFFERENCE


# The one verdict rule of every results page (`docs/results/README.md`
# states it; `comparison_verdict` applies it).
VERDICT_RULE = (
    'Verdict rule (every page): a difference A - B is called ("A higher" or '
    '"B higher") only when both of its 95 % intervals exclude 0 on the same '
    'side: the Student-t interval over paired seeds (training randomness) '
    'and the paired bootstrap over test examples (test-set sampling). '
    'Otherwise it is "no difference". With fewer than two paired seeds no '
    'difference is called: "undetermined" if the bootstrap interval excludes '
    '0, else "no difference".')


def comparison_verdict(seed: Union[Interval, Sequence[float], None],
                       bootstrap: Union[Interval, Sequence[float], None],
                       a: str = 'A', b: str = 'B') -> str:
  """`VERDICT_RULE`: the verdict of A - B from its two intervals.

  Args:
    seed: (estimate, low, high) of the Student-t interval over paired seeds,
      or (low, high), or None (fewer than two paired seeds); NaN bounds count
      as undefined.
    bootstrap: The same for the paired bootstrap over test examples.
    a: Name of method A in the verdict.
    b: Name of method B.

  Returns:
    f'{a} higher' or f'{b} higher' when both intervals are defined and
    exclude 0 on that side; UNDETERMINED when the seed interval is undefined
    and the bootstrap interval (defined) excludes 0, or the reverse, or
    both are undefined; else NO_DIFFERENCE.
  """
  readings = [verdict(_as_interval(x), a, b) for x in (seed, bootstrap)]
  if readings == [UNDETERMINED, UNDETERMINED]:
    return UNDETERMINED
  called = [r for r in readings if r not in (NO_DIFFERENCE, UNDETERMINED)]
  if NO_DIFFERENCE in readings or len(set(called)) > 1:
    return NO_DIFFERENCE
  if UNDETERMINED in readings:
    return UNDETERMINED if called else NO_DIFFERENCE
  return called[0]


def _as_interval(x) -> Interval:
  """An `Interval` of (estimate, low, high), (low, high) or None."""
  if x is None:
    return Interval(math.nan, math.nan, math.nan)
  x = tuple(math.nan if v is None else float(v) for v in x)
  if len(x) == 2:
    return Interval(math.nan, *x)
  return Interval(*x)


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
    `verdict` reads them.

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
