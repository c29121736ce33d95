"""Reports of the attack benchmark (`robustness`): JSON, tables, a figure.

`summarize` averages the runs of a configuration over its seeds;
`write_reports` writes `results.json` (every configuration's summary with
its seeds' values, for machines), `tables.md` (for people) and
`<task>_distance_ratio.png` (one attacker: the final model's distance to the
truth over the honest run's, or, without a truth, the task metric; by
attack × defence, one panel per weighting).
"""

import collections
from collections.abc import Mapping, Sequence
import json
import os
from typing import Any

from matplotlib import figure
from matplotlib.backends import backend_agg
import numpy as np

from apps.common import report_engine as engine
from apps.robustness import attacks
from tff_nlp.training import release

RESULTS_FILE = 'results.json'
TABLES_FILE = 'tables.md'
PLOT_FILE = 'distance_ratio.png'
_GROUP_KEYS = ('weighting', 'defence', 'attack', 'num_attackers')


# What `summarize` keeps of each seed's run.
_SEED_KEYS = ('seed', 'attacker_share_mean', 'attacker_share_max',
              'distance_to_honest', 'distance_to_truth', 'truth_ratio',
              'metric', 'seconds', 'meets_target', 'attack_spec')


# A configuration's seeds as the report engine's records: one method, the
# truth ratio and each task metric (keyed (_METRIC, name), apart from it).
_METHOD = 'configuration'
_TRUTH_RATIO = 'truth_ratio'
_METRIC = 'metric'


def _records(group: Sequence[Mapping[str, Any]],
             has_truth: bool) -> list[engine.Record]:
  """The seeds' runs of one configuration as `engine.Record`s, each run's
  place in `group` its seed (so a seed run twice stays two runs)."""
  records = []
  for i, row in enumerate(group):
    if has_truth:
      records.append(engine.Record(_METHOD, i, _TRUTH_RATIO,
                                   row['truth_ratio']))
    records += [engine.Record(_METHOD, i, (_METRIC, m), value)
                for m, value in row['metric'].items()]
  return records


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """One row per configuration (all but the seed), averaged over seeds.

  Means over seeds of the attackers' mean share, distances, truth ratio,
  metric and seconds, with 95 % Student-t intervals over seeds
  (`truth_ratio_ci95`, `metric_ci95`: `engine.method_intervals`; bounds
  None with one seed); the largest share of any round of any seed;
  `meets_target` if every seed meets it; `num_seeds`, and `seeds`: each
  seed's own values (the runs' full records stay in their cached run
  directories).
  """
  groups = collections.OrderedDict()
  for row in rows:
    groups.setdefault(tuple(row[k] for k in _GROUP_KEYS), []).append(row)
  summaries = []
  for key, group in groups.items():

    def mean(name, group=group):
      values = [r[name] for r in group if r[name] is not None]
      return float(np.mean(values)) if values else None

    metric_names = list(group[0]['metric'])
    has_truth = group[0]['truth_ratio'] is not None
    means = engine.method_intervals(engine.Table(_records(group, has_truth)),
                                    _METHOD)
    summaries.append(collections.OrderedDict(
        zip(_GROUP_KEYS, key),
        num_seeds=len(group),
        attacker_share_mean=mean('attacker_share_mean'),
        attacker_share_max=max(r['attacker_share_max'] for r in group),
        distance_to_honest=mean('distance_to_honest'),
        distance_to_truth=mean('distance_to_truth'),
        truth_ratio=mean('truth_ratio'),
        truth_ratio_ci95=(means[_TRUTH_RATIO].to_json() if has_truth
                          else None),
        truth_ratio_max=(max(r['truth_ratio'] for r in group)
                         if group[0]['truth_ratio'] is not None else None),
        metric=collections.OrderedDict(
            (m, means[_METRIC, m].estimate) for m in metric_names),
        metric_ci95=collections.OrderedDict(
            (m, means[_METRIC, m].to_json()) for m in metric_names),
        seconds=mean('seconds'),
        meets_target=all(r['meets_target'] for r in group),
        seeds=[collections.OrderedDict((k, r[k]) for k in _SEED_KEYS if k in r)
               for r in group],
    ))
  return summaries


def _number(value, digits=2) -> str:
  if value is None:
    return '–'
  if abs(value) >= 1000:
    return f'{value:.0f}'
  return f'{value:.{digits}f}'


def _table(summaries, *, num_attackers: int, metric_name: str,
           has_truth: bool) -> str:
  weightings = list(dict.fromkeys(s['weighting'] for s in summaries))
  rows = [s for s in summaries if s['num_attackers'] == num_attackers]
  distance = '×truth' if has_truth else 'dist'
  header = ['attack', 'defence']
  for w in weightings:
    header += [f'{w} share mean/max', f'{w} {distance}', f'{w} {metric_name}',
               f'{w} target']
  lines = ['| ' + ' | '.join(header) + ' |',
           '|---|---|' + '---:|' * (len(header) - 2)]
  by_key = {(s['attack'], s['defence'], s['weighting']): s for s in rows}
  for attack in dict.fromkeys(s['attack'] for s in rows):
    for defence in dict.fromkeys(s['defence'] for s in rows):
      cells = [attack, defence]
      for w in weightings:
        s = by_key.get((attack, defence, w))
        if s is None:
          cells += ['', '', '', '']
          continue
        cells += [
            f'{s["attacker_share_mean"]:.3f} / {s["attacker_share_max"]:.3f}',
            _number(s['truth_ratio'] if has_truth else s['distance_to_honest']),
            _number(s['metric'][metric_name], 3),
            'yes' if s['meets_target'] else 'no',
        ]
      lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def _honest_table(summaries, *, metric_name: str, has_truth: bool) -> str:
  rows = [s for s in summaries if s['num_attackers'] == 0]
  weightings = list(dict.fromkeys(s['weighting'] for s in rows))
  header = ['defence'] + [
      f'{w} {"distance to truth" if has_truth else "dist to no defence"}'
      for w in weightings] + [f'{w} {metric_name}' for w in weightings]
  lines = ['| ' + ' | '.join(header) + ' |',
           '|---|' + '---:|' * (len(header) - 1)]
  by_key = {(s['defence'], s['weighting']): s for s in rows}
  for defence in dict.fromkeys(s['defence'] for s in rows):
    cells = [defence]
    # A report written while the runs go on may miss some cells.
    for w in weightings:
      s = by_key.get((defence, w))
      cells.append('' if s is None else _number(
          s['distance_to_truth'] if has_truth else s['distance_to_honest'], 4))
    for w in weightings:
      s = by_key.get((defence, w))
      cells.append('' if s is None else _number(s['metric'][metric_name], 4))
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def task_tables(task_name: str, summaries, *, metric_name: str,
                has_truth: bool, num_clients: int) -> str:
  """The Markdown section of one task: honest runs, then per attacker count."""
  counts = sorted({s['num_attackers'] for s in summaries} - {0})
  seeds = max(s['num_seeds'] for s in summaries)
  parts = [
      f'## {task_name}\n',
      f'{seeds} seed(s) per configuration (means over seeds; share max: the '
      'largest attackers\' share of any round of any seed). '
      + ('×truth: the final model\'s distance to the true parameters over '
         'the honest run\'s (same weighting and seed, no defence). '
         if has_truth else
         'dist: L2 distance of the final model to the honest run\'s (same '
         'weighting and seed, no defence). ')
      + f'target: share ≤ 2k/N (k attackers, N = {num_clients})'
      + (' and ×truth ≤ 2, in every seed.' if has_truth
         else ' in every seed (no truth to compare with).')
      + ' Wall time of a run\'s rounds: {:.1f} s on average, {:.1f} s at '
      'most (per configuration: `seconds` in results.json).\n'.format(
          np.mean([s['seconds'] for s in summaries]),
          max(s['seconds'] for s in summaries)),
      '### No attacker: what the defences cost\n',
      _honest_table(summaries, metric_name=metric_name, has_truth=has_truth)
      + '\n',
  ]
  for k in counts:
    parts.append(f'### {k} attacker(s) of {num_clients}\n')
    parts.append(_table(summaries, num_attackers=k, metric_name=metric_name,
                        has_truth=has_truth) + '\n')
  return '\n'.join(parts)


def write_plot(task_name: str, summaries, path: str, *,
               has_truth: bool, metric_name: str) -> None:
  """One attacker, by attack × defence, one panel per weighting.

  With a truth: the final model's distance to it over the honest run's (log
  scale, the 2× target dashed). Without one (R8, text-to-SQL), where the
  defences alone move the model far from the undefended one: the task
  metric, the honest undefended run's dashed.
  """
  rows = [s for s in summaries if s['num_attackers'] == 1]
  if not rows:
    return
  honest = {s['weighting']: s for s in summaries
            if s['num_attackers'] == 0 and s['defence'] == 'none'}
  weightings = list(dict.fromkeys(s['weighting'] for s in rows))
  attack_names = list(dict.fromkeys(s['attack'] for s in rows))
  defences = [d for d in attacks.DEFENCES
              if any(s['defence'] == d for s in rows)]
  fig = figure.Figure(figsize=(4.5 * len(weightings), 4),
                      layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  axes = fig.subplots(1, len(weightings), squeeze=False, sharey=True)[0]
  width = 0.8 / len(defences)
  for ax, weighting in zip(axes, weightings):
    by_key = {(s['attack'], s['defence']): s for s in rows
              if s['weighting'] == weighting}
    for j, defence in enumerate(defences):
      values = []
      for attack in attack_names:
        s = by_key.get((attack, defence))
        if s is None:
          values.append(np.nan)
        else:
          values.append(s['truth_ratio'] if has_truth
                        else s['metric'][metric_name])
      ax.bar(np.arange(len(attack_names)) + (j - (len(defences) - 1) / 2)
             * width, values, width, label=defence)
    if has_truth:
      ax.set_yscale('log')
      ax.axhline(2.0, color='black', linestyle='--', linewidth=1)
    elif weighting in honest:
      ax.axhline(honest[weighting]['metric'][metric_name], color='black',
                 linestyle='--', linewidth=1)
    ax.set_xticks(np.arange(len(attack_names)), attack_names, rotation=30)
    ax.set_title(f'{task_name}: {weighting}')
  axes[0].set_ylabel('distance to truth / honest run\'s' if has_truth
                     else f'{metric_name} (dashed: honest, no defence)')
  axes[-1].legend(title='defence', loc='upper left', bbox_to_anchor=(1.01, 1))
  fig.savefig(path, dpi=110)


def _summary_key(summary) -> tuple[Any, ...]:
  return tuple(summary[k] for k in _GROUP_KEYS)


def _as_json(value):
  """`value` as a report read back holds it (lists where it has tuples)."""
  return json.loads(json.dumps(release.to_json_value(value)))


def merge_task(previous: Mapping[str, Any], current: Mapping[str, Any]
               ) -> dict[str, Any]:
  """One task's report entry from an earlier report's and this run's.

  Same task settings (`task`, `metric`): the earlier summaries, each
  replaced by this run's of the same configuration (weighting, defence,
  attack, attackers), then this run's new configurations; `grids` lists
  both runs' grids. Other settings: this run's entry alone (the earlier
  runs measured something else).
  """
  settings = _as_json([current['task'], current['metric']])
  if [previous.get('task'), previous.get('metric')] != settings:
    return dict(current)
  new = collections.OrderedDict(
      (_summary_key(s), s) for s in current['summaries'])
  summaries = [new.pop(_summary_key(s), s) for s in previous['summaries']]
  merged = dict(current)
  merged['summaries'] = summaries + list(new.values())
  grids = list(previous.get('grids', []))
  merged['grids'] = grids + [g for g in _as_json(current['grids'])
                             if g not in grids]
  return merged


def write_reports(report_dir: str, tasks: Mapping[str, Any],
                  rows: Mapping[str, Sequence[Mapping[str, Any]]],
                  config: Mapping[str, Any], *,
                  keep_reported: bool = False) -> str:
  """Writes `results.json`, `tables.md` and a PNG per task to `report_dir`.

  Args:
    report_dir: Where to write (created if missing).
    tasks: Task name -> task (`robustness_tasks`).
    rows: Task name -> the rows of `robustness.run_grid`.
    config: The benchmark's arguments, recorded in `results.json`, but
      its `grids` (task name -> grid), which go to each task's entry as
      `grids` (the list of grids whose runs the entry summarises).
    keep_reported: If `report_dir` holds a `results.json` already, keep
      what it reports that this run does not measure: other tasks, and
      other configurations of a task run with the same settings
      (`merge_task`). So a defence or task can be added to a report
      without running the rest again.

  Returns:
    The Markdown tables.
  """
  os.makedirs(report_dir, exist_ok=True)
  results_path = os.path.join(report_dir, RESULTS_FILE)
  previous = {}
  if keep_reported and os.path.exists(results_path):
    with open(results_path, encoding='utf-8') as f:
      previous = json.load(f)['tasks']
  entries = collections.OrderedDict()
  for name, task_rows in rows.items():
    task = tasks[name]
    entries[name] = collections.OrderedDict(
        task=task.config(), metric=task.metric_name,
        num_clients=task.num_clients,
        grids=[config['grids'][name]] if name in config.get('grids', {})
        else [],
        summaries=summarize(task_rows))
    if name in previous:
      entries[name] = merge_task(previous[name], entries[name])
  # Earlier tasks first, in their order; this run's new ones after them.
  ordered = collections.OrderedDict(
      (name, entries.get(name, entry)) for name, entry in previous.items())
  ordered.update((name, e) for name, e in entries.items()
                 if name not in ordered)
  sections = []
  for name, entry in ordered.items():
    summaries = entry['summaries']
    has_truth = any(s['truth_ratio'] is not None for s in summaries)
    sections.append(task_tables(
        name, summaries, metric_name=entry['metric'], has_truth=has_truth,
        num_clients=entry['num_clients']))
    write_plot(name, summaries,
               os.path.join(report_dir, f'{name}_{PLOT_FILE}'),
               has_truth=has_truth, metric_name=entry['metric'])
  # Each task's entry holds the grids it summarises; the config the rest.
  results = collections.OrderedDict(
      config=collections.OrderedDict(
          (k, v) for k, v in dict(config, tasks=list(ordered)).items()
          if k != 'grids'),
      tasks=ordered)
  # Compact: the report of every task and seed is kept in the repository.
  release.write_json(results_path, results, compact=True)
  tables = '\n'.join(sections)
  with open(os.path.join(report_dir, TABLES_FILE), 'w', encoding='utf-8') as f:
    f.write('# Attack benchmark: measured tables\n\n'
            'Written by `apps.robustness.bin.robustness`; see '
            'docs/results/robustness.md.\n\n' + tables)
  return tables
