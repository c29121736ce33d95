"""95 % intervals for results over seeds, and their verdicts.

A benchmark run gives, for each method, training seed s and client c, a 0/1
outcome y[s, c, i] (e.g. exact match) for every test example i of c, in a
fixed example order. Two sources of uncertainty sit in a reported accuracy,
and each interval covers a stated part of it:

*   `seed_interval`: a Student-t interval over seeds, for a per-seed number
    (e.g. MacroAvg of each seed's run). It covers training randomness (the
    seed's initialisation, client sampling and data order) with each seed
    scored on the same, fixed test sets; it says nothing about how the test
    sets were drawn. With 3 seeds, t_{2,0.975} = 4.30, so it is wide.
*   The paired, client-stratified bootstrap over test examples (optionally
    also over seeds) of MacroAvg, MicroAvg and per-client accuracy, and of a
    difference A - B: module `bootstrap` (`bootstrap_accuracy`,
    `bootstrap_difference`, `client_difference`).

`verdict` turns an interval of a difference A - B into 'no difference',
'A higher' or 'B higher'; `comparison_verdict` is the one verdict rule of
every results page (`VERDICT_RULE`), from both intervals.
"""

import collections
from collections.abc import Sequence
import math
from typing import NamedTuple, Optional, Union

import numpy as np


DEFAULT_CONFIDENCE = 0.95

# Verdicts of `verdict`.
NO_DIFFERENCE = 'no difference'
UNDETERMINED = 'undetermined'


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

