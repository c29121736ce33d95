"""One report engine: finished runs -> tidy records -> intervals -> verdicts.

Every results page compares methods over seeds the same way (issue 66): a
method's mean over seeds with its Student-t interval, and per declared
comparison A - B the paired difference with two intervals and one verdict.
This module does it once; an application says what its records are and
which comparisons it wants:

1.  Its finished runs become `Record`s, the tidy table: one number a row,
    of a method, a seed and a metric. A record without an `example` is the
    seed's own number (e.g. the ACC a run recorded); records with one are
    the seed's examples, each in a `unit` (client, domain, task...).
2.  It declares `Comparison(a, b, metric, average=..., examples=...)`s.
3.  `method_intervals` gives each method's means over seeds with t
    intervals; `compare` (`compare_all`) a comparison's `Difference`: the t
    interval of the per-seed differences, the paired bootstrap over examples
    and the one verdict from both (`intervals.comparison_verdict`, the rule
    `intervals.VERDICT_RULE` states).
4.  `Difference.to_json` and `difference_cells` render them; the tables
    around them, in a paper's layout, stay the application's.

No statistic is computed here: the intervals are `tff_nlp.metrics.intervals`'
(and `tff_nlp.metrics.continual`'s per-seed pair bootstrap), called with the
arguments and draw order the applications used, so a report moved onto the
engine keeps its numbers bit for bit.

A seed's number of a metric is its seed record if it has one (what the run
recorded, so a report prints what the run said), else its examples' average
as declared: `MICRO`, the mean over all its examples; `MACRO`, the mean over
units of each unit's mean. With both, they must agree (to `TOLERANCE`), or
the examples are not of that run.

How the bootstrap resamples the examples, declared per comparison:

*   `SHARED`: every seed scores the same examples (one test set); each
    unit's examples are resampled once for all seeds and both methods
    (`bootstrap_lib.bootstrap_difference`, stratified by unit; MacroAvg or
    MicroAvg as `average` says). The values must be 0/1 outcomes.
*   `PER_SEED`: each seed has its own examples (e.g. tasks drawn per seed);
    a seed's examples, pooled over units, are resampled within the seed, the
    same for both methods (`continual.pair_bootstrap_difference`). It
    estimates the mean over examples, so `MACRO` needs every unit of a seed
    to have as many examples (then the averages agree).

Without examples there is no bootstrap interval (None), and the verdict is
the rule's reading of a missing interval.

An example may score several units (`Record.size`, e.g. its target tokens;
its value then counts the correct ones): a seed's number is then a ratio of
sums (MICRO, all its examples; MACRO, the mean over units of each unit's),
and the `SHARED` bootstrap resamples whole examples, each weighing its size
(`bootstrap_lib.bootstrap_difference`'s `units`). `Comparison.resample_seeds`
resamples the seeds too (`SHARED`; both sources of variation, for
information), `Difference.drawn` keeps the whole bootstrap (each unit's
interval, what could not be drawn), and `bootstrap_method` is the same
bootstrap of one method's accuracy.
"""

import collections
from collections.abc import Iterable, Mapping, Sequence
import math
from typing import Any, NamedTuple, Optional

import numpy as np

from tff_nlp import errors
from tff_nlp.metrics import continual
from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals

# How a seed's examples make its number (`Comparison.average`).
MICRO = 'micro'
MACRO = 'macro'
# Which examples the bootstrap resamples (`Comparison.examples`).
SHARED = 'shared'
PER_SEED = 'per_seed'
# A seed record and its examples' average may differ by this much (another
# summation order); more, and they are not of one run.
TOLERANCE = 1e-9
# `Difference.to_json`'s fields, in order.
JSON_FIELDS = ('a', 'b', 'seeds', 'difference', 'per_seed', 'seed_ci95',
               'bootstrap_ci95', 'verdict')


class Record(NamedTuple):
  """One number of a finished run: a row of the tidy table.

  Attributes:
    method: The method (or run) it is of.
    seed: The training seed.
    metric: What it measures, e.g. 'accuracy'.
    value: The number.
    unit: For an example, the group it belongs to (client, domain, task);
      the bootstrap resamples within units.
    example: The example's id, None for the seed's own number. Ids pair
      the examples of two methods, so they must match, in order.
    size: For an example, its number of scored units (e.g. target tokens),
      `value` then the number of them right; None: one unit, `value` its
      0/1 outcome (or score). Every example of a metric has one, or none.
  """

  method: str
  seed: int
  metric: str
  value: float
  unit: Any = ''
  example: Any = None
  size: Optional[float] = None


class Comparison(NamedTuple):
  """A declared comparison A - B of one metric.

  Attributes:
    a: Method A.
    b: Method B.
    metric: The metric compared.
    average: `MICRO` or `MACRO`: how a seed's examples make its number
      (module docstring).
    examples: `SHARED` or `PER_SEED`: how the bootstrap resamples them.
    names: (A, B) as the verdict names them; None: (a, b).
    resample_seeds: `SHARED` only: each replicate resamples each method's
      seeds too (`bootstrap_lib.bootstrap_difference`), covering training
      randomness as well as the test examples.
  """

  a: str
  b: str
  metric: str
  average: str = MICRO
  examples: str = SHARED
  names: Optional[tuple[str, str]] = None
  resample_seeds: bool = False

  @property
  def key(self) -> str:
    """'a - b', the comparison's key in the reports."""
    return f'{self.a} - {self.b}'


class Difference(NamedTuple):
  """The result of a `Comparison` (`compare`).

  Attributes:
    comparison: What was compared.
    seeds: The seeds both methods have, in A's order.
    per_seed: A's number minus B's in each of them.
    seed: `intervals.seed_interval` of `per_seed` (NaN bounds, one seed).
    bootstrap: The paired bootstrap over examples, or None without examples.
    verdict: `intervals.comparison_verdict` of the two.
    drawn: The whole `SHARED` bootstrap (`bootstrap_lib.AccuracyIntervals`:
      each unit's interval, MacroAvg, MicroAvg, what could not be drawn);
      None for `PER_SEED` or without examples.
  """

  comparison: Comparison
  seeds: list[int]
  per_seed: list[float]
  seed: intervals.Interval
  bootstrap: Optional[intervals.Interval]
  verdict: str
  drawn: Optional[bootstrap_lib.AccuracyIntervals] = None

  def to_json(self, fields: Sequence[str] = JSON_FIELDS,
              rename: Optional[Mapping[str, str]] = None
              ) -> collections.OrderedDict:
    """The `fields` (of `JSON_FIELDS`, and 'metric'), in that order.

    `rename` maps a field to the key a report stores it under (e.g. FCL's
    'pair_bootstrap_ci95'), so reports keep the layout their readers know.
    """
    values = dict(
        a=self.comparison.a, b=self.comparison.b,
        metric=self.comparison.metric, seeds=list(self.seeds),
        difference=self.seed.estimate, per_seed=list(self.per_seed),
        seed_ci95=self.seed.bounds(),
        bootstrap_ci95=(None if self.bootstrap is None
                        else [self.bootstrap.low, self.bootstrap.high]),
        verdict=self.verdict)
    rename = rename or {}
    return collections.OrderedDict(
        (rename.get(field, field), values[field]) for field in fields)

  def with_bootstrap(self, bootstrap: intervals.Interval) -> 'Difference':
    """This difference with a bootstrap the engine does not draw (e.g.
    SacreBLEU's paired bootstrap of corpus BLEU), and the one verdict of
    its seed interval and that one."""
    names = self.comparison.names or (self.comparison.a, self.comparison.b)
    return self._replace(
        bootstrap=bootstrap, drawn=None,
        verdict=intervals.comparison_verdict(self.seed, bootstrap, *names))


class _Seed:
  """One method's records of one metric in one seed."""

  __slots__ = ('value', 'units')

  def __init__(self):
    self.value = None  # The seed record's number.
    # unit -> ([ids], [values], [sizes]); sizes None for one-unit examples.
    self.units = collections.OrderedDict()


class Table:
  """The tidy table of `Record`s, indexed by method, metric and seed.

  Record order is kept: seeds, units and examples are in the order of their
  first record (the order the statistics see them in).
  """

  def __init__(self, records: Iterable[Record]):
    self._cells = collections.OrderedDict()
    for r in records:
      cell = self._cells.setdefault(
          (r.method, r.metric), collections.OrderedDict()).setdefault(
              r.seed, _Seed())
      if r.example is None:
        if cell.value is not None:
          raise errors.InputError(
              f'{r.method}, seed {r.seed}: two records of {r.metric}.')
        cell.value = float(r.value)
      else:
        ids, values, sizes = cell.units.setdefault(r.unit, ([], [], []))
        ids.append(r.example)
        values.append(r.value)
        sizes.append(r.size)
    for (method, metric), seeds in self._cells.items():
      sized = set()
      for seed, cell in seeds.items():
        for unit, (ids, _, sizes) in cell.units.items():
          if len(set(ids)) != len(ids):
            raise errors.InputError(
                f'{method}, seed {seed}, {metric}: unit {unit!r} repeats '
                'an example.')
          sized.update(size is not None for size in sizes)
      if len(sized) > 1:
        raise errors.InputError(
            f'{method}, {metric}: some examples have a size and others not.')

  def metrics(self, method: str) -> list[str]:
    return [metric for m, metric in self._cells if m == method]

  def seeds(self, method: str, metric: str) -> list[int]:
    return list(self._cells.get((method, metric), {}))

  def examples(self, method: str, metric: str, seed: int
               ) -> collections.OrderedDict:
    """unit -> (example ids, values, sizes) of one seed; empty without
    examples. Sizes are None for examples without (`Record.size`)."""
    return self._cells[method, metric][seed].units

  def seed_value(self, method: str, metric: str, seed: int,
                 average: str = MICRO, *, unit: Any = None) -> float:
    """The seed's number: its record, else its examples' `average`.

    With `unit`, the number of that unit's examples alone (their mean, or
    with sizes their values' sum over their sizes').

    Raises:
      InputError: If the record and the examples' average differ by more
        than `TOLERANCE`.
    """
    cell = self._cells[method, metric][seed]
    if unit is not None:
      return _mean(*cell.units[unit][1:])
    if not cell.units:
      return cell.value
    parts = list(cell.units.values())
    if average == MICRO:
      mean = _mean([v for _, values, _ in parts for v in values],
                   [n for _, _, sizes in parts for n in sizes])
    elif average == MACRO:
      mean = float(np.mean([_mean(values, sizes)
                            for _, values, sizes in parts]))
    else:
      raise ValueError(f'average must be {MICRO!r} or {MACRO!r}, got '
                       f'{average!r}.')
    if cell.value is None:
      return mean
    if not abs(mean - cell.value) <= TOLERANCE:
      raise errors.InputError(
          f'{method}, seed {seed}: its {metric} examples give {mean:.6f}, '
          f'the run recorded {cell.value:.6f}; they are not of one run.')
    return cell.value


def _mean(values: Sequence[float], sizes: Sequence[Optional[float]]) -> float:
  """The examples' mean, or with sizes the values' sum over the sizes'."""
  if sizes and sizes[0] is not None:
    return float(np.sum(np.asarray(values, np.float64))
                 / np.sum(np.asarray(sizes, np.float64)))
  return float(np.mean(np.asarray(values, np.float64)))


def _seed_interval(values: Sequence[float],
                   confidence: float) -> intervals.Interval:
  """`intervals.seed_interval`; a number some seed has not finite (a run
  that could not measure it) keeps its mean, NaN, and no interval."""
  if all(math.isfinite(v) for v in values):
    return intervals.seed_interval(values, confidence)
  return intervals.Interval(float(np.mean(values)), math.nan, math.nan)


def method_intervals(table: Table, method: str, *, average: str = MICRO,
                     confidence: float = intervals.DEFAULT_CONFIDENCE
                     ) -> collections.OrderedDict:
  """metric -> Interval(mean over seeds, t interval) of one method.

  Every metric the method has in each of its seeds, in record order; the
  mean is `intervals.seed_interval`'s, float(np.mean) of the seeds' numbers
  in seed order, so a plain seed mean (bytes, seconds) is its estimate.
  """
  seeds = list(collections.OrderedDict.fromkeys(
      s for metric in table.metrics(method)
      for s in table.seeds(method, metric)))
  return collections.OrderedDict(
      (metric, _seed_interval(
          [table.seed_value(method, metric, s, average) for s in seeds],
          confidence))
      for metric in table.metrics(method)
      if set(table.seeds(method, metric)) == set(seeds))


def _check_paired(a: Mapping[Any, Any], b: Mapping[Any, Any],
                  where: str) -> None:
  """A's and B's examples of one seed are the same, unit by unit."""
  if list(a) != list(b):
    raise errors.InputError(
        f'{where}: different units, {list(a)} and {list(b)}.')
  for unit in a:
    ids_a, ids_b = a[unit][0], b[unit][0]
    if len(ids_a) != len(ids_b):
      raise errors.InputError(
          f'{where}, unit {unit!r}: examples of different lengths '
          f'({len(ids_a)} and {len(ids_b)}); the runs were not scored on one '
          'test set.')
    if ids_a != ids_b:
      raise errors.InputError(
          f'{where}, unit {unit!r}: different examples; the runs were not '
          'scored on one test set.')


def _shared_arrays(sides: Sequence[Sequence[Mapping[Any, Any]]],
                   seeds: Sequence[Sequence[int]], names: Sequence[str],
                   where: str):
  """Each side's unit -> [num_seeds, num_examples] values of `SHARED`
  examples, and unit -> each example's size (None without sizes), checked:
  every seed of a side has the first one's examples and sizes, and so does
  every other side (`sides[i][j]`: unit -> (ids, values, sizes) of
  `seeds[i][j]`)."""
  first = sides[0][0]
  for side, side_seeds, name in zip(sides, seeds, names):
    for s, other in zip(side_seeds, side):
      if other is not first:
        _check_paired(first, other, f'{where}: seeds {seeds[0][0]} of '
                      f'{names[0]} and {s} of {name} ({SHARED} examples)')
      if any(other[unit][2] != first[unit][2] for unit in first):
        raise errors.InputError(
            f'{where}: seed {s} of {name} has other example sizes than '
            f'seed {seeds[0][0]} of {names[0]}; a {SHARED} bootstrap needs '
            'the same.')
  arrays = [collections.OrderedDict(
      (unit, np.stack([np.asarray(s[unit][1], np.float64) for s in side]))
      for unit in side[0]) for side in sides]
  sized = any(sizes and sizes[0] is not None
              for _, _, sizes in first.values())
  units = (collections.OrderedDict(
      (unit, np.asarray(sizes, np.float64))
      for unit, (_, _, sizes) in first.items()) if sized else None)
  return arrays, units


def _bootstrap(a: Sequence[Mapping[Any, Any]], b: Sequence[Mapping[Any, Any]],
               comparison: Comparison, seeds: Sequence[int], where: str, *,
               num_replicates: int, seed: int, confidence: float
               ) -> tuple[intervals.Interval,
                          Optional[bootstrap_lib.AccuracyIntervals]]:
  """The paired bootstrap of A - B over the examples of `seeds` (`a[i]`,
  `b[i]`: unit -> (ids, values, sizes) of seeds[i]): its interval and the
  whole `SHARED` result (None for `PER_SEED`)."""
  if comparison.examples == SHARED:
    arrays, units = _shared_arrays((a, b), (seeds, seeds),
                                   (comparison.a, comparison.b), where)
    result = bootstrap_lib.bootstrap_difference(
        *arrays, num_replicates=num_replicates, confidence=confidence,
        seed=seed, resample_seeds=comparison.resample_seeds, units=units)
    return (result.macro if comparison.average == MACRO
            else result.micro), result
  if comparison.examples != PER_SEED:
    raise ValueError(f'examples must be {SHARED!r} or {PER_SEED!r}, got '
                     f'{comparison.examples!r}.')
  if comparison.resample_seeds or any(
      sizes[0] is not None for s in a for _, _, sizes in s.values()):
    raise ValueError(f'resample_seeds and example sizes are {SHARED} only.')
  if comparison.average == MACRO and any(
      len({len(ids) for ids, _, _ in s.values()}) > 1 for s in a):
    raise errors.InputError(
        f'{where}: {MACRO} over units of different sizes; the {PER_SEED} '
        'bootstrap estimates the mean over examples.')
  flat = [np.stack([np.concatenate([np.asarray(values, np.float64)
                                    for _, values, _ in s.values()])
                    for s in side]) for side in (a, b)]
  return continual.pair_bootstrap_difference(
      *flat, num_replicates=num_replicates, confidence=confidence,
      seed=seed), None


def compare(table: Table, comparison: Comparison, *,
            num_replicates: int = bootstrap_lib.DEFAULT_NUM_REPLICATES,
            seed: int = 0, confidence: float = intervals.DEFAULT_CONFIDENCE
            ) -> Difference:
  """A - B of `comparison.metric` over the seeds both have.

  Args:
    table: The records.
    comparison: What to compare.
    num_replicates: Replicates of the bootstrap.
    seed: Its seed.
    confidence: Coverage of both intervals.

  Returns:
    The `Difference`: the seed interval of the per-seed differences (seeds
    paired: the same seed's split, tasks or test set), the paired bootstrap
    over the examples of those seeds (None when neither method has any) and
    the one verdict.

  Raises:
    ValueError: If the methods share no seed.
    InputError: If their examples are not paired (module docstring).
  """
  c = comparison
  names = c.names or (c.a, c.b)
  seeds_b = table.seeds(c.b, c.metric)
  common = [s for s in table.seeds(c.a, c.metric) if s in seeds_b]
  if not common:
    raise ValueError(f'{names[0]} and {names[1]} share no seed.')
  per_seed = [table.seed_value(c.a, c.metric, s, c.average)
              - table.seed_value(c.b, c.metric, s, c.average) for s in common]
  by_seed = intervals.seed_interval(per_seed, confidence)
  a = [table.examples(c.a, c.metric, s) for s in common]
  b = [table.examples(c.b, c.metric, s) for s in common]
  by_example = drawn = None
  if any(a) or any(b):
    for s, units_a, units_b in zip(common, a, b):
      _check_paired(units_a, units_b, f'{names[0]} and {names[1]}, seed {s}')
    by_example, drawn = _bootstrap(
        a, b, c, common, f'{names[0]} and {names[1]}',
        num_replicates=num_replicates, seed=seed, confidence=confidence)
  return Difference(c, common, per_seed, by_seed, by_example,
                    intervals.comparison_verdict(by_seed, by_example, *names),
                    drawn)


def bootstrap_method(table: Table, method: str, metric: str, *,
                     resample_seeds: bool = False,
                     num_replicates: int = bootstrap_lib.DEFAULT_NUM_REPLICATES,
                     seed: int = 0,
                     confidence: float = intervals.DEFAULT_CONFIDENCE
                     ) -> Optional[bootstrap_lib.AccuracyIntervals]:
  """The `SHARED` bootstrap of one method's `metric` over its seeds.

  `bootstrap_lib.bootstrap_accuracy` of its examples (every seed the same, as
  for `compare`), stratified by unit: each unit's interval, MacroAvg and
  MicroAvg; with `resample_seeds` the seeds resampled too. None without
  examples.

  Raises:
    InputError: If its seeds have different examples.
  """
  seeds = table.seeds(method, metric)
  side = [table.examples(method, metric, s) for s in seeds]
  if not any(side):
    return None
  (arrays,), units = _shared_arrays((side,), (seeds,), (method,),
                                    f'{method}, {metric}')
  return bootstrap_lib.bootstrap_accuracy(
      arrays, num_replicates=num_replicates, confidence=confidence,
      seed=seed, resample_seeds=resample_seeds, units=units)


def compare_all(table: Table, comparisons: Iterable[Comparison],
                **kwargs) -> collections.OrderedDict:
  """key -> `compare` of each comparison whose two methods both have records
  of its metric (a benchmark may run a subset of the methods)."""
  return collections.OrderedDict(
      (c.key, compare(table, c, **kwargs)) for c in comparisons
      if table.seeds(c.a, c.metric) and table.seeds(c.b, c.metric))


def stored_bounds(interval: Any) -> Optional[tuple[float, float]]:
  """(low, high) of an interval as a report stored it: [low, high],
  {'low', 'high'} (`intervals.Interval.to_json`), or None; None when it is
  missing or its bounds are (one seed)."""
  if not interval:
    return None
  if isinstance(interval, Mapping):
    interval = (interval['low'], interval['high'])
  if interval[0] is None or interval[1] is None:
    return None
  return tuple(interval)


def stored_verdict(seed_ci95: Any, bootstrap_ci95: Any, a: str = 'A',
                   b: str = 'B') -> str:
  """The one verdict (`intervals.comparison_verdict`) of A - B from its two
  intervals as a report stored them (`stored_bounds`), so a report is
  rewritten from its JSON alone."""
  return intervals.comparison_verdict(stored_bounds(seed_ci95),
                                      stored_bounds(bootstrap_ci95), a, b)


def interval_cell(bounds: Optional[Sequence[float]], *, scale: float = 100.0,
                  signed: bool = False, missing: str = 'n=1',
                  digits: int = 2) -> str:
  """'[low, high]' times `scale` to `digits` decimals (with their signs if
  `signed`), or `missing` for None (one seed: no interval)."""
  if not bounds:
    return missing
  style = f'{"+" if signed else ""}.{digits}f'
  return f'[{scale * bounds[0]:{style}}, {scale * bounds[1]:{style}}]'


def difference_cells(difference: float, seed_ci95: Optional[Sequence[float]],
                     bootstrap_ci95: Optional[Sequence[float]], verdict: str,
                     *, scale: float = 100.0, signed: bool = True,
                     digits: int = 2, missing: str = 'n=1') -> list[str]:
  """The Markdown cells of one difference, from its JSON fields.

  From the stored fields (not a `Difference`), so a report is rewritten from
  its JSON alone.

  Args:
    difference: A - B, the mean over seeds.
    seed_ci95: [low, high] over seeds; None with one seed ('n=1').
    bootstrap_ci95: [low, high] of the bootstrap; None without one ('–').
    verdict: The one verdict.
    scale: What the numbers are multiplied by (100: fractions to points).
    signed: Whether interval bounds carry their sign (+0.46).
    digits: Decimals of every number.
    missing: The seed interval's cell without one.

  Returns:
    [difference, 95% over seeds, 95% bootstrap, verdict], to `digits`
    decimals.
  """
  return [f'{scale * difference:+.{digits}f}',
          interval_cell(seed_ci95, scale=scale, signed=signed, digits=digits,
                        missing=missing),
          interval_cell(bootstrap_ci95, scale=scale, signed=signed,
                        missing='–', digits=digits), verdict]


def markdown_row(cells: Iterable[str]) -> str:
  """'| a | b |'."""
  return '| ' + ' | '.join(cells) + ' |'


def verdict_note() -> str:
  """The one rule every verdict follows, quoted once under a report's
  comparisons."""
  return (f'{intervals.VERDICT_RULE} (`tff_nlp.metrics.intervals`; '
          f'docs/results/README.md.)')
