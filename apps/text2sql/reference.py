"""A short run beside the committed benchmark of the same comparison.

`make demo` trains FedAvg and FedAvg + Lorar once, for a few rounds, while
the library's claim about Lorar rests on the benchmark's three seeds
(`make bench-text2sql-templates`, `docs/results/text2sql_templates/`). One
seed's difference is well inside the spread of the benchmark's own seeds,
so shown alone it can say the opposite of the benchmark. `compare` puts the
committed figures under the run's tables, labelled (settings, seeds,
intervals), and says in one sentence how the two relate.

Nothing here can fail a report: a missing or unreadable reference is a
warning (`ReferenceComparison.markdown` says so) and the run's own report
stands.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import json
import math
import os
from typing import Any, Optional

from tff_nlp.metrics import intervals
from apps.text2sql import report as text2sql_report

# What the comparison reads from both reports: Lorar minus num_examples
# with this algorithm.
ALGORITHM = 'fedavg'
_BASE = f'{ALGORITHM}-num_examples'
_LORAR = f'{ALGORITHM}-lorar'
# Settings of a run's `config.json` that are not part of what it measures.
_NOT_SETTINGS = frozenset({'seed', 'data_dir', 'versions', 'progress',
                           'checkpoint_every'})


@dataclasses.dataclass(frozen=True)
class ReferenceComparison:
  """The committed benchmark's figures beside this run's.

  Attributes:
    markdown: The section printed and appended to `results.md`.
    record: The same for `results.json` (`reference` entry), or None when
      the reference could not be read.
  """

  markdown: str
  record: Optional[dict[str, Any]]


def _points(value: float) -> str:
  return f'{100 * value:+.2f}'


def _percent(value: float) -> str:
  return f'{100 * value:.2f}'


def _bounds(bounds: Optional[Sequence[float]], points: bool = False) -> str:
  if not bounds:
    return text2sql_report.MISSING
  form = _points if points else _percent
  return f'[{form(bounds[0])}, {form(bounds[1])}]'


def _flatten(value: Any, prefix: str = '') -> dict[str, Any]:
  if isinstance(value, Mapping):
    flat = {}
    for key, item in value.items():
      if key not in _NOT_SETTINGS:
        flat.update(_flatten(item, f'{prefix}{key}.'))
    return flat
  return {prefix[:-1]: value}


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
  """A run's settings: its experiment and loop, without seeds and paths."""
  return _flatten({'experiment': config.get('experiment', {}),
                   'loop': config.get('loop', {})})


# Where a committed report's runs are kept, relative to the checkout:
# `records/<page>/runs/<run name>/` for the report `docs/results/<page>/`
# (records/README.md).
RECORDS_DIR = 'records'


def records_dir(page_dir: str) -> str:
  """The folder of a committed report's recorded runs.

  Args:
    page_dir: The report's folder, `<checkout>/docs/results/<page>`.

  Returns:
    `<checkout>/records/<page>/runs`.
  """
  page_dir = os.path.abspath(page_dir)
  checkout = os.path.dirname(os.path.dirname(os.path.dirname(page_dir)))
  return os.path.join(checkout, RECORDS_DIR, os.path.basename(page_dir),
                      'runs')


def _run_config(report: Mapping[str, Any], method: str, base_dir: str
                ) -> Optional[dict[str, Any]]:
  """The `config.json` of a report's first run of `method`, if found.

  A report records its runs relative to the directory it was written in;
  a committed report's runs are kept under the same names in the
  checkout's records (`records_dir`), or beside it in `runs/`.
  """
  seeds = report['methods'][method]['seeds']
  name = os.path.basename(os.path.normpath(seeds[0]['run_dir']))
  for path in (os.path.join(base_dir, seeds[0]['run_dir'], 'config.json'),
               os.path.join(records_dir(base_dir), name, 'config.json'),
               os.path.join(base_dir, 'runs', name, 'config.json')):
    if os.path.isfile(path):
      with open(path, encoding='utf-8') as f:
        return json.load(f)
  return None


def _differing_settings(run: Optional[Mapping[str, Any]],
                        reference: Optional[Mapping[str, Any]]) -> list[str]:
  if run is None or reference is None:
    return []
  ours, theirs = _settings(run), _settings(reference)
  return [f'{key.split(".", 1)[1]} {ours.get(key)!r} here, '
          f'{theirs.get(key)!r} there'
          for key in sorted(set(ours) | set(theirs))
          if ours.get(key) != theirs.get(key)]


def prediction_interval(per_seed: Sequence[float], num_new: int,
                        confidence: float = intervals.DEFAULT_CONFIDENCE
                        ) -> Optional[tuple[float, float]]:
  """Where the mean of `num_new` more seeds is expected, from `per_seed`.

  The Student-t prediction interval m ± t_{n-1} s sqrt(1/num_new + 1/n)
  for n per-seed values with mean m and sample sd s (the seeds as normal
  draws, as `intervals.seed_interval` assumes); None with fewer than two.
  E.g. [1, 2, 3], one new seed: 2 ± 4.3027 · 1 · sqrt(4/3) = 2 ± 4.9683.
  """
  n = len(per_seed)
  if n < 2:
    return None
  mean = sum(per_seed) / n
  sd = math.sqrt(sum((v - mean)**2 for v in per_seed) / (n - 1))
  half = (intervals.t_quantile((1 + confidence) / 2, n - 1) * sd
          * math.sqrt(1 / num_new + 1 / n))
  return mean - half, mean + half


def _relation(run_difference: float, num_seeds: int,
              reference: Mapping[str, Any], differing: Sequence[str]) -> str:
  """One plain sentence relating this run's difference to the reference's."""
  runs = "This run's" if num_seeds == 1 else "These runs'"
  seeds = f'{num_seeds} seed{"" if num_seeds == 1 else "s"}'
  per_seed = ', '.join(_points(v) for v in reference['per_seed'])
  here = (f'{runs} Lorar − FedAvg MacroAvg is {_points(run_difference)} '
          f'points ({seeds}{", other settings" if differing else ""}); the '
          f'benchmark\'s is {_points(reference["difference"])}')
  if reference['bootstrap_seeds_ci95']:
    here += (f' ({_bounds(reference["bootstrap_seeds_ci95"], True)} over '
             'test examples and seeds)')
  here += f' and its seeds gave {per_seed}'
  expected = prediction_interval(reference['per_seed'], num_seeds)
  if expected is None:
    return here + '.'
  here += (f', so {seeds} of it would give {_bounds(expected, True)} (95 % '
           'prediction interval)')
  low, high = expected
  if low <= run_difference <= high and num_seeds > 1:
    return here + ': this result is consistent with the benchmark.'
  if low <= run_difference <= high:
    return (here + ': this result is within what the benchmark\'s own seeds '
            'vary by, so it neither confirms nor contradicts the benchmark, '
            'which shows the effect only over three seeds and the test '
            'examples (make bench-text2sql-templates).')
  side = 'below' if run_difference < low else 'above'
  return (here + f': this result lies {side} that range'
          + (', with other settings' if differing else '')
          + ', so it does not reproduce the benchmark; the benchmark\'s '
          'figures are the library\'s claim.')


def compare(report: Mapping[str, Any], *, output_dir: str,
            reference_path: str) -> ReferenceComparison:
  """The reference's FedAvg vs FedAvg + Lorar beside this run's.

  Args:
    report: This run's `results.json` content
      (`text2sql_summary.summarize_runs`), with both FedAvg weightings.
    output_dir: Where `report` was written (its run directories are
      relative to it).
    reference_path: The committed benchmark's `results.json`, e.g.
      `docs/results/text2sql_templates/results.json`.

  Returns:
    The section and its record; never raises on a bad reference (the
    section then says what is wrong).
  """
  title = ('## The committed benchmark of the same comparison\n\n')
  try:
    with open(reference_path, encoding='utf-8') as f:
      reference = json.load(f)
    ref_difference = reference['lorar_vs_num_examples'][ALGORITHM][
        'exact_match']['macro_avg']
    ref_methods = [reference['methods'][m] for m in (_BASE, _LORAR)]
  except (OSError, ValueError, KeyError, TypeError) as e:
    reason = (f'{reference_path}: cannot be read as a benchmark report with '
              f'FedAvg and FedAvg + Lorar ({type(e).__name__}: {e}).')
    return ReferenceComparison(title + f'Not shown: {reason}\n', None)
  run_difference = report['lorar_vs_num_examples'][ALGORITHM]['exact_match'][
      'macro_avg']
  num_seeds = report['methods'][_LORAR]['num_seeds']
  differing = _differing_settings(
      _run_config(report, _LORAR, output_dir),
      _run_config(reference, _LORAR, os.path.dirname(reference_path)))
  base_by_seed = {s['seed']: s['test']['exact_match']['macro_avg']
                  for s in reference['methods'][_BASE]['seeds']}
  per_seed = [s['test']['exact_match']['macro_avg'] - base_by_seed[s['seed']]
              for s in reference['methods'][_LORAR]['seeds']
              if s['seed'] in base_by_seed]
  reference_summary = collections.OrderedDict(
      difference=ref_difference['difference'],
      per_seed=per_seed,
      seed_ci95=ref_difference.get('seed_ci95'),
      bootstrap_seeds_ci95=ref_difference.get('bootstrap_seeds_ci95'))
  sentence = _relation(run_difference['difference'], num_seeds,
                       reference_summary, differing)

  rows = ['| Method | seeds | MacroAvg | t 95% CI (seeds) | bootstrap 95% CI '
          '(examples and seeds) |', '|---|---:|---:|---|---|']
  for method in ref_methods:
    exact = method['test']['exact_match']
    rows.append(f'| {method["label"]} | {exact["num_seeds"]} | '
                f'{_percent(exact["macro_avg"])} | '
                f'{_bounds(exact["macro_avg_ci95"])} | '
                f'{_bounds(exact["macro_avg_bootstrap_seeds_ci95"])} |')
  rows.append(f'| Lorar − num_examples | {len(per_seed)} paired | '
              f'{_points(ref_difference["difference"])} | '
              f'{_bounds(ref_difference.get("seed_ci95"), True)} | '
              f'{_bounds(ref_difference.get("bootstrap_seeds_ci95"), True)} |')
  if reference.get('baseline'):
    exact = reference['baseline']['test']['exact_match']
    rows.append(f'| {reference["baseline"].get("label", "Template retrieval")}'
                f' | – | {_percent(exact["macro_avg"])} | – | '
                f'{_bounds(exact["macro_avg_bootstrap_seeds_ci95"])} |')
  settings = ('Settings that differ from this run: ' + '; '.join(differing)
              + '.\n\n' if differing else
              'Its settings are this run\'s but for the seeds.\n\n')
  markdown = (
      title + f'From `{reference_path}` (test exact match, %, MacroAvg; '
      f'seeds {", ".join(str(s) for s in reference.get("seeds", []))}). '
      + settings + '\n'.join(rows) + '\n\n' + sentence + '\n')
  record = collections.OrderedDict(
      path=reference_path, differing_settings=differing,
      this_run=collections.OrderedDict(
          difference=run_difference['difference'], num_seeds=num_seeds),
      reference=reference_summary, sentence=sentence)
  return ReferenceComparison(markdown, record)
