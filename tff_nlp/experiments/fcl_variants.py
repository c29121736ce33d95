"""The FCL benchmark's settings side by side: does any make transfer help?

`make bench-fcl` runs the main setting into its output folder and every
variant (more clients, the paper's learning rate and λ1, the library's
skip-gram vectors, the authors' random task construction) into a subfolder
of it, each with its own `results.json` (`fcl_report.write_report`).
`summarize` reads them and puts, per setting and dataset, the ACC of the
methods that transfer knowledge and the paper's two paired comparisons
(FedSeIT − no foreign branch, FedSeIT + SIT − FedSeIT) with both intervals
and the one verdict of `intervals.VERDICT_RULE` in one table; `write` writes
it as `variants.md` and `variants.json`. A setting whose `results.json` is
not there yet is listed as such, not left out.
"""

import collections
from collections.abc import Mapping, Sequence
import json
import os
from typing import Any

from tff_nlp import errors
from tff_nlp.experiments import fcl
from tff_nlp.experiments import fcl_report
from tff_nlp.metrics import fcl_seeds
from tff_nlp.metrics import intervals
from tff_nlp.training import run_cache

MAIN = 'main'
# The methods shown, in the report's order.
METHODS = ('fedweit', 'fedseit', 'fedseit_sit', fcl_report.NO_FOREIGN)
COMPARISONS = tuple(f'{a} - {b}' for a, b in fcl.COMPARISONS)
MARKDOWN_FILE = 'variants.md'
JSON_FILE = 'variants.json'


def _setting(report: Mapping[str, Any]) -> dict[str, Any]:
  """What a variant changes: read from its report's configuration."""
  data, training = report['data'], report['training']
  return collections.OrderedDict(
      clients=data['num_clients'], tasks_per_client=data['tasks_per_client'],
      construction=data['construction'],
      word_vectors=training['word_vectors'] or 'learned on task 1',
      learning_rate=training['learning_rate'], lambda1=training['sparsity'],
      seeds=report['seeds'])


def summarize(bench_dir: str, variants: Sequence[str]) -> dict[str, Any]:
  """Reads the main setting's and every variant's `results.json`.

  Args:
    bench_dir: The main setting's output folder; variant `v`'s is
      `bench_dir/v`.
    variants: The variants' names, in the order to show them.

  Returns:
    {'settings': {name: setting or None if not run yet}, 'rows': [...]}: a
    row per (setting, dataset) with the ACC (mean over seeds, %) and its
    seed interval per method, the seconds per run (mean over seeds) and the
    comparisons as in `results.json` (`differences`), in points.
  """
  settings = collections.OrderedDict()
  rows = []
  for name in (MAIN, *variants):
    path = os.path.join(bench_dir, '' if name == MAIN else name,
                        run_cache.RESULTS_FILE)
    if not os.path.exists(path):
      settings[name] = None
      continue
    try:
      with open(path) as f:
        report = json.load(f)
      settings[name] = _setting(report)
      rows += _rows(name, report)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
      raise errors.InputError(
          f'{path}: not a results.json of train_fcl ({type(e).__name__}: '
          f'{e}).') from e
  return {'settings': settings, 'rows': rows}


def _rows(name: str, report: Mapping[str, Any]) -> list[dict[str, Any]]:
  rows = []
  for dataset, by_method in report['results'].items():
    differences = report.get('differences', {}).get(dataset, {})
    rows.append(collections.OrderedDict(
        setting=name, dataset=dataset,
        acc=collections.OrderedDict(
            (m, 100 * by_method[m]['acc']) for m in METHODS
            if m in by_method),
        acc_ci95=collections.OrderedDict(
            (m, None if by_method[m]['acc_ci95'] is None
             else [100 * v for v in by_method[m]['acc_ci95']])
            for m in METHODS if m in by_method),
        seconds=collections.OrderedDict(
            (m, by_method[m]['seconds']) for m in METHODS
            if m in by_method),
        comparisons=collections.OrderedDict(
            (key, _in_points(differences[key], key)) for key in COMPARISONS
            if key in differences)))
  return rows


def _in_points(difference: Mapping[str, Any], key: str) -> dict[str, Any]:
  """A comparison in points, with its verdict from its intervals (reports
  written before the one rule had a verdict per interval instead)."""
  names = tuple(fcl_report.METHOD_LABELS[m] for m in key.split(' - '))
  scaled = {k: v for k, v in difference.items()
            if k not in ('seed_verdict', 'pair_bootstrap_verdict')}
  scaled['verdict'] = fcl_seeds.verdict(difference, names)
  for key in ('difference', 'seed_ci95', 'pair_bootstrap_ci95', 'per_seed'):
    value = difference.get(key)
    if value is not None:
      scaled[key] = ([100 * v for v in value] if isinstance(value, list)
                     else 100 * value)
  return scaled


def markdown(summary: Mapping[str, Any]) -> str:
  """The settings table and the results table of `summary`."""
  lines = [
      '# FCL: every setting of the benchmark side by side', '',
      'Which setting, if any, lets FedSeIT\'s foreign knowledge or SIT\'s '
      'selection help: the ACC of the methods that transfer (mean over '
      'seeds, %) and the paired differences in points, with the Student-t '
      'interval over seeds and the paired bootstrap over (client, task) '
      'pairs, and one verdict from both.', '',
      f'{intervals.VERDICT_RULE} What each setting\'s model saw (training '
      'documents, truncation, test sets, protocol) opens its report, '
      '`results.md` in the folder of its name (the main setting\'s in this '
      'folder).', '',
      '## Settings', '',
      '| setting | clients × tasks | tasks | word vectors | learning rate '
      '| λ1 | seeds |', '|---|---|---|---|---:|---:|---|']
  for name, setting in summary['settings'].items():
    if setting is None:
      lines.append(f'| {name} | not run yet | | | | | |')
      continue
    lines.append(
        f'| {name} | {setting["clients"]} × {setting["tasks_per_client"]} '
        f'| {setting["construction"]} | {setting["word_vectors"]} '
        f'| {setting["learning_rate"]:g} | {setting["lambda1"]:g} '
        f'| {", ".join(str(s) for s in setting["seeds"])} |')
  labels = fcl_report.METHOD_LABELS
  lines += ['', '## ACC (%)', '',
            '| setting | dataset | ' + ' | '.join(labels[m] for m in METHODS)
            + ' | FedSeIT seconds per run |',
            '|---|---|' + '---:|' * (len(METHODS) + 1)]
  for row in summary['rows']:
    cells = [f'{row["acc"][m]:.2f}' if m in row['acc'] else '–'
             for m in METHODS]
    seconds = row['seconds'].get('fedseit')
    lines.append(f'| {row["setting"]} | {row["dataset"]} | '
                 + ' | '.join(cells)
                 + f' | {"–" if seconds is None else f"{seconds:.0f}"} |')
  lines += ['', '## Paired differences (points)', '',
            '| setting | dataset | A − B | difference | 95% over seeds | '
            '95% over (client, task) pairs | verdict |',
            '|---|---|---|---:|---:|---:|---|']
  for row in summary['rows']:
    for key, c in row['comparisons'].items():
      a, b = key.split(' - ')
      lines.append(
          f'| {row["setting"]} | {row["dataset"]} | {labels[a]} − '
          f'{labels[b]} | '
          + ' | '.join(fcl_report.difference_cells(c, scale=1.0)) + ' |')
  return '\n'.join(lines) + '\n'


def write(summary: Mapping[str, Any], output_dir: str) -> None:
  """Writes `variants.md` and `variants.json` into `output_dir`."""
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, MARKDOWN_FILE), 'w') as f:
    f.write(markdown(summary))
  with open(os.path.join(output_dir, JSON_FILE), 'w') as f:
    json.dump(summary, f, indent=1)
    f.write('\n')
