"""The results and report of the federated continual-learning experiment.

`task_records` and `summarize` turn a run's round records into its results
(accuracy and macro-F1 matrices and their summaries, bytes, seconds);
`seed_results` summarizes every method's seeds and makes the paired
comparisons (`fcl_seeds`); `write_report` turns them into `results.md`,
opening with "What the model saw" (`fcl_inputs`), then the paper's layout
(ACC and macro-F1 tables, the paired differences with their one verdict,
the ablation, forgetting and backward transfer, communication,
accuracy-matrix heatmaps), and `results.json`.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import json
import os
from typing import Any, Optional

import numpy as np

from tff_nlp import training as training_lib
from apps.common import report_engine
from apps.fcl import inputs as fcl_inputs
from tff_nlp.metrics import continual as continual_metrics
from apps.fcl import seeds as fcl_seeds
from tff_nlp.metrics import intervals
from tff_nlp.training import run_cache

# The ablation's method name: FedSeIT without the foreign-knowledge branch.
NO_FOREIGN = 'fedseit_no_foreign'
# The report `write_report` writes in the output directory.
TABLE_FILE = 'results.md'

# Row labels of the results tables, in the paper's order.
METHOD_LABELS = collections.OrderedDict([
    ('local', 'Local'), ('fedavg', 'FedAvg'), ('fedprox', 'FedProx'),
    ('fedweit', 'FedWeIT'), ('fedseit', 'FedSeIT'),
    ('fedseit_sit', 'FedSeIT + SIT'),
    (NO_FOREIGN, 'FedSeIT, no foreign branch (ablation)'),
])
# The paper's one recovered number (abstract): FedSeIT's average gain over
# the baselines, in percent (spec §8; its tables were not recovered).
PAPER_AVERAGE_GAIN = 12.4


def results_matrix(values: Sequence[Any]) -> np.ndarray:
  """The float array of a matrix read from `results.json` (None -> NaN)."""
  return np.array(values, dtype=np.float64)


def _matrix(rows_by_task: Sequence[Sequence[Sequence[float]]],
            num_clients: int, num_tasks: int) -> np.ndarray:
  """[C, T, T] with NaN above the diagonal from per-task client rows."""
  matrix = np.full([num_clients, num_tasks, num_tasks], np.nan)
  for i, rows in enumerate(rows_by_task):
    for c, row in enumerate(rows):
      matrix[c, i, :len(row)] = row
  return matrix


def task_records(records: Sequence[Mapping[str, Any]], rounds_per_task: int
                  ) -> list[dict[str, Any]]:
  """Per task, from the training loop's round records: its `start` metrics,
  its `rounds`' training metrics, the `accuracy` and `macro_f1` of its
  `end` and its `seconds` (task start, rounds and evaluation)."""
  tasks = []
  for record in records:
    if 'task' not in record:
      continue  # No initial evaluation is recorded; never a round 0.
    if (record['round'] - 1) % rounds_per_task == 0:
      tasks.append({'task': record['task'], 'start': record['task_start'],
                    'rounds': [],
                    'seconds': record['task_start_seconds']})
    task = tasks[-1]
    task['rounds'].append(record['train'])
    task['seconds'] += record['round_seconds']
    if 'task_end' in record:
      task.update(record['task_end'])
      task['seconds'] += record['task_end_seconds']
  return tasks


def _json_matrix(matrix: np.ndarray) -> list[Any]:
  """Nested lists with None for NaN (tasks not learned yet)."""
  return np.where(np.isnan(matrix), None, matrix).tolist()


def summarize(progress: Sequence[Mapping[str, Any]], config: Any,
              *, seconds: float) -> dict[str, Any]:
  """A run's results from its per-task records (`task_records`); `config`
  is the run's `tff_nlp.algorithms.fcl.FclConfig`."""
  c, t = config.num_clients, config.tasks_per_client
  accuracy = _matrix([p['accuracy'] for p in progress], c, t)
  f1 = _matrix([p['macro_f1'] for p in progress], c, t)
  summary = continual_metrics.summary(accuracy)
  rounds = [r for p in progress for r in p['rounds']]
  starts = [p['start'] for p in progress]
  down = (sum(r['bytes_down_per_client'] for r in rounds)
          + sum(s['bytes_down_per_client'] for s in starts))
  up = (sum(r['bytes_up_per_client'] for r in rounds)
        + sum(s['bytes_up_per_client'] for s in starts))
  # Bytes per client over the run by what is sent (runs recorded before the
  # split was measured have only the totals).
  by_part = collections.OrderedDict()
  for record, direction in ([(s, 'down') for s in starts]
                            + [(s, 'up') for s in starts]
                            + [(r, 'up') for r in rounds]):
    for part, value in record.get(f'bytes_{direction}_by_part_per_client',
                                  {}).items():
      key = f'{direction}/{part}'
      by_part[key] = by_part.get(key, 0.0) + value
  if by_part:
    by_part['down/shared_weights'] = sum(r['bytes_down_per_client']
                                         for r in rounds)
  return collections.OrderedDict(
      accuracy=float(summary['average_accuracy']),
      bytes_per_client_by_part=by_part,
      macro_f1=float(np.mean(f1[:, -1, :])),
      forgetting=float(summary['forgetting']),
      backward_transfer=float(summary['backward_transfer']),
      accuracy_matrix=_json_matrix(accuracy),
      macro_f1_matrix=_json_matrix(f1),
      bytes_down_per_client=down, bytes_up_per_client=up,
      bytes_down_per_client_round=down / max(len(rounds), 1),
      bytes_up_per_client_round=up / max(len(rounds), 1),
      bytes_up_round_last_task=(
          progress[-1]['rounds'][-1]['bytes_up_per_client']
          if rounds else 0.0),
      adaptive_nonzero_per_client_round=float(np.mean(
          [r['adaptive_nonzero_per_client'] for r in rounds]) if rounds
          else 0.0),
      kb_entries_per_client=[s['kb_entries_per_client'] for s in starts],
      non_finite_clients=int(sum(r['non_finite_clients'] for r in rounds)),
      seconds=seconds)


def _percent_table(results, key: str, methods) -> dict[str, dict[str, float]]:
  return collections.OrderedDict(
      (METHOD_LABELS[m], collections.OrderedDict(
          (d, 100.0 * results[d][m][key]) for d in results
          if m in results[d]))
      for m in methods)


def seed_results(per_seed: Mapping[str, Mapping[str, Mapping[int, Any]]],
                 comparisons: Sequence[tuple[str, str]]):
  """Every method's seeds summarized, and the paired comparisons.

  Args:
    per_seed: per_seed[dataset][method][seed], a run's results.
    comparisons: (A, B) pairs for ACC(A) - ACC(B), each made where both
      methods ran (`fcl_seeds.comparison`, named by `METHOD_LABELS`).

  Returns:
    (results, differences): results[dataset][method],
    `fcl_seeds.summarize_method` of its seeds; differences[dataset]['A - B'],
    `fcl_seeds.compare`'s fields (`report_engine.compare_all` of the
    dataset's records, with the verdict of `intervals.VERDICT_RULE`).
  """
  declared = [fcl_seeds.comparison(a, b, (METHOD_LABELS[a], METHOD_LABELS[b]))
              for a, b in comparisons]
  results = collections.OrderedDict(
      (name, collections.OrderedDict(
          (m, fcl_seeds.summarize_method(runs))
          for m, runs in by_method.items()))
      for name, by_method in per_seed.items())
  differences = collections.OrderedDict()
  for name, by_method in per_seed.items():
    table = report_engine.Table(r for m, runs in by_method.items()
                                for r in fcl_seeds.records(m, runs))
    differences[name] = collections.OrderedDict(
        (key, difference.to_json(fcl_seeds.JSON_FIELDS,
                                 fcl_seeds.JSON_RENAME))
        for key, difference in report_engine.compare_all(
            table, declared).items())
  return results, differences


def difference_cells(comparison: Mapping[str, Any], *,
                     scale: float = 100.0) -> list[str]:
  """The table cells of one paired difference (`fcl_seeds.compare`'s).

  Args:
    comparison: Its `difference`, `seed_ci95` (None with one seed),
      `pair_bootstrap_ci95` and `verdict`.
    scale: What the fractions are multiplied by (100: points; 1: values
      already in points).

  Returns:
    [difference, 95% over seeds ('n=1' with one seed), 95% over (client,
    task) pairs, the verdict] (`report_engine.difference_cells`): one
    verdict from both intervals, none per interval.
  """
  return report_engine.difference_cells(
      comparison['difference'], comparison.get('seed_ci95'),
      comparison['pair_bootstrap_ci95'], comparison['verdict'], scale=scale,
      signed=False)


def _coverage(results) -> dict[str, float]:
  """Per dataset, the mean over methods of the vocabulary's share with a
  pre-trained vector (runs with word vectors only)."""
  coverage = collections.OrderedDict()
  for dataset, by_method in results.items():
    values = [r['word_vector_coverage'] for r in by_method.values()
              if 'word_vector_coverage' in r]
    if values:
      coverage[dataset] = float(np.mean(values))
  return coverage


def _header_lines(results, *, data, training, seeds, inputs, command,
                  trained_by) -> list[str]:
  """The title, the setting, "What the model saw" and the commands."""
  lines = [
      '# Federated continual text classification: FedWeIT, FedSeIT, SIT',
      '',
      f'{data.num_clients} clients × {data.tasks_per_client} tasks per '
      f'dataset, {training.rounds_per_task} rounds per task of '
      f'{training.local_epochs} local epoch(s); accuracy of every client on '
      'every task it has learned, each with its own head, at the end of the '
      'sequence (ACC: the mean over all clients and tasks, spec §8). '
      f'Every number is the mean over {len(seeds) or 1} seed(s) '
      f'({", ".join(map(str, seeds))}); a seed draws its own tasks and '
      'trains its own runs, and the methods of a seed share its tasks.',
      '',
  ]
  if inputs:
    lines += fcl_inputs.markdown(inputs, data=data, training=training,
                                 coverage=_coverage(results))
  if command:
    lines += ['Command:', '', '```', command, '```', '']
  if trained_by:
    lines += ['The runs were trained by:', '', '```', trained_by, '```', '']
  return lines


def _result_tables(results, methods, datasets) -> tuple[list[str], str]:
  """The ACC and macro-F1 tables, and the ACC table alone (printed)."""
  table_methods = [m for m in methods if m != NO_FOREIGN]
  proposed = [METHOD_LABELS[m] for m in table_methods
              if m in ('fedseit', 'fedseit_sit')]
  acc = _percent_table(results, 'accuracy', table_methods)
  acc_table = continual_metrics.results_table_markdown(
      acc, PAPER_AVERAGE_GAIN, datasets=datasets, proposed=proposed)
  lines = [
      '## Average final accuracy, ACC (%)', '',
      acc_table,
      '',
      'The paper reports only the average gain above in the recovered text '
      '(abstract); its per-dataset numbers were not recovered (spec §8), so '
      'no paper row is printed.', '',
      '## Macro-F1 at the end of the sequence (%)', '',
      continual_metrics.results_table_markdown(
          _percent_table(results, 'macro_f1', table_methods), None,
          datasets=datasets, proposed=proposed),
      '',
  ]
  return lines, acc_table


def _interval_lines(results, methods, datasets) -> list[str]:
  """ACC with its Student-t interval over seeds, per method and dataset."""
  lines = ['## ACC with 95% intervals over seeds (%)', '',
           'Student-t intervals of the per-seed ACC (n=1: one seed, no '
           'interval).', '',
           '| Model | ' + ' | '.join(datasets) + ' |',
           '|---|' + '---:|' * len(datasets)]
  for m in methods:
    cells = []
    for d in datasets:
      r = results[d].get(m)
      cells.append(continual_metrics.MISSING if not r else
                   f'{100 * r["acc"]:.2f} ' + report_engine.interval_cell(
                       r.get('acc_ci95'), missing='(n=1)'))
    lines.append(f'| {METHOD_LABELS[m]} | ' + ' | '.join(cells) + ' |')
  lines.append('')
  return lines


def _difference_lines(differences, *, inputs) -> list[str]:
  """The paired differences of ACC with their verdicts (none without)."""
  if not (differences and any(differences.values())):
    return []
  lines = ['## Paired differences of ACC (points)', '',
           'A - B on the same tasks in each seed: the mean over seeds, its '
           'Student-t interval over the per-seed differences, and a paired '
           'bootstrap over the (client, task) pairs of every seed (2,000 '
           'replicates). One verdict from both intervals: '
           + ('the rule under "What the model saw".' if inputs else
              intervals.VERDICT_RULE), '',
           '| Dataset | A - B | difference | 95% over seeds | '
           '95% over (client, task) pairs | verdict |',
           '|---|---|---:|---:|---:|---|']
  for d, comparisons in differences.items():
    for name, c in comparisons.items():
      a, b = name.split(' - ')
      lines.append(f'| {d} | {METHOD_LABELS[a]} − {METHOD_LABELS[b]} | '
                   + ' | '.join(difference_cells(c)) + ' |')
  lines.append('')
  return lines


def _ablation_and_forgetting_lines(results, methods, datasets) -> list[str]:
  """The ablation (if it ran), then forgetting and backward transfer."""
  lines = []
  if NO_FOREIGN in methods:
    lines += ['## Ablation: FedSeIT without the foreign-knowledge branch', '',
              '| Model | ' + ' | '.join(datasets) + ' |',
              '|---|' + '---:|' * len(datasets)]
    for m in ('fedseit', 'fedseit_sit', NO_FOREIGN):
      if m in methods:
        cells = [f'{100 * results[d][m]["accuracy"]:.2f}'
                 if m in results[d] else continual_metrics.MISSING
                 for d in datasets]
        lines.append(f'| {METHOD_LABELS[m]} | ' + ' | '.join(cells) + ' |')
    lines.append('')
  lines += ['## Forgetting and backward transfer (points)', '',
            '| Model | ' + ' | '.join(f'{d} F | {d} BWT' for d in datasets)
            + ' |', '|---|' + '---:|---:|' * len(datasets)]
  for m in methods:
    cells = []
    for d in datasets:
      r = results[d].get(m)
      cells += ([f'{100 * r["forgetting"]:.2f}',
                 f'{100 * r["backward_transfer"]:.2f}'] if r else
                [continual_metrics.MISSING] * 2)
    lines.append(f'| {METHOD_LABELS[m]} | ' + ' | '.join(cells) + ' |')
  return lines


def _communication_lines(results, methods, datasets) -> list[str]:
  """Bytes per client and round, and by what is sent."""
  lines = ['', '## Communication per client', '',
           'Mean over all rounds and task starts of the run, per client: '
           'bytes the server sends (B or the plain kernels, the embedding on '
           'the first task and at task starts, the knowledge base of A\'s) '
           'and the client sends (its shared weights, its pruned A_t, SIT\'s '
           'representations). A\'s are counted dense; "A non-zeros" is how '
           'many of a client\'s uploaded A entries survive pruning at λ1.',
           '',
           '| Dataset | Model | KiB down / round | KiB up / round | A non-zeros '
           '/ round | knowledge-base entries / task | seconds per seed |',
           '|---|---|---:|---:|---:|---:|---:|']
  for d in datasets:
    for m in methods:
      r = results[d].get(m)
      if not r:
        continue
      entries = np.mean(r['kb_entries_per_client'])
      lines.append(
          f'| {d} | {METHOD_LABELS[m]} | '
          f'{r["bytes_down_per_client_round"] / 1024:,.0f} | '
          f'{r["bytes_up_per_client_round"] / 1024:,.0f} | '
          f'{r["adaptive_nonzero_per_client_round"]:,.0f} | '
          f'{entries:.1f} | {r["seconds"]:.0f} |')
  parts = ('down/shared_weights', 'down/embedding', 'down/knowledge_base',
           'up/shared_weights', 'up/adaptive', 'up/representations')
  with_parts = [(d, m) for d in datasets for m in methods
                if results[d].get(m, {}).get('bytes_per_client_by_part')]
  if with_parts:
    lines += ['', 'By what is sent, MiB per client over the whole run (down: '
              'shared weights every round, the embedding and the knowledge '
              'base at task starts; up: shared weights and A_t every round, '
              'SIT\'s task representations at task starts):', '',
              '| Dataset | Model | ' + ' | '.join(parts) + ' |',
              '|---|---|' + '---:|' * len(parts)]
    for d, m in with_parts:
      split = results[d][m]['bytes_per_client_by_part']
      lines.append(f'| {d} | {METHOD_LABELS[m]} | ' + ' | '.join(
          f'{split.get(p, 0.0) / 2**20:,.2f}' for p in parts) + ' |')
  return lines


def _heatmap_lines(results, methods, datasets, output_dir) -> list[str]:
  """Writes `heatmaps/<dataset>-<method>.png`; the section that shows them."""
  heatmap_dir = os.path.join(output_dir, 'heatmaps')
  os.makedirs(heatmap_dir, exist_ok=True)
  lines = ['', '## Accuracy matrices', '',
           'Mean over clients and seeds of acc[i, j], the accuracy on task j '
           'after learning task i:', '']
  for d in datasets:
    for m in methods:
      r = results[d].get(m)
      if not r:
        continue
      name = f'{d}-{m}.png'
      # Every client has the same NaN cells (tasks not learned yet).
      matrix = results_matrix(r['accuracy_matrix']).mean(axis=0) * 100
      continual_metrics.heatmap_png(
          matrix, os.path.join(heatmap_dir, name),
          title=f'{d}: {METHOD_LABELS[m]} (accuracy %)', fmt='.0f',
          vmin=0.0, vmax=100.0)
      lines.append(f'![{d} {m}](heatmaps/{name})')
  lines.append('')
  return lines


def _task_and_settings_lines(task_summaries, *, data, training) -> list[str]:
  """Each dataset's task table, then the settings as JSON."""
  lines = []
  if task_summaries:
    lines += ['## Tasks', '']
    for d, table in task_summaries.items():
      lines += [f'### {d}', '', table, '']
  lines += ['## Settings', '', '```',
            json.dumps({'data': dataclasses.asdict(data),
                        'training': dataclasses.asdict(training)}, indent=1),
            '```', '']
  return lines


def write_report(results: Mapping[str, Mapping[str, Mapping[str, Any]]],
                 output_dir: str, *, data: Any, training: Any,
                 command: str = '',
                 task_summaries: Optional[Mapping[str, str]] = None,
                 seeds: Sequence[int] = (),
                 differences: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 inputs: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 seeds_are_replicates: bool = True,
                 trained_by: Optional[str] = None) -> str:
  """Writes `results.md`, `results.json` and `heatmaps/*.png`; prints the
  ACC table.

  Args:
    results: results[dataset][method], `fcl_seeds.summarize_method` of its
      seeds' runs (seed means, `acc`, `acc_ci95`, per-seed `seeds`).
    output_dir: Where to write.
    data: The data settings (`experiments.fcl.DataConfig`; printed).
    training: The training settings (`experiments.fcl.TrainingConfig`;
      printed).
    command: The command that produced the results.
    task_summaries: Per dataset, the task table (`summary_markdown`) of
      the first seed.
    seeds: The seeds the results are over.
    differences: differences[dataset]['A - B'], `fcl_seeds.compare`'s.
    inputs: inputs[dataset], `fcl_inputs.describe` of its seeds: the "What
      the model saw" section (left out without it).
    seeds_are_replicates: Whether seed s ran `experiments.fcl.replicate`'s
      settings (--seeds) rather than `data` and `training` as given; kept in
      `results.json` for `fcl_finished`.
    trained_by: The command that trained the runs, when it is not `command`
      (a report written with --report_only).

  Returns:
    The path of `results.md`.
  """
  methods = [m for m in METHOD_LABELS
             if any(m in by_method for by_method in results.values())]
  datasets = list(results)
  result_lines, acc_table = _result_tables(results, methods, datasets)
  lines = (
      _header_lines(results, data=data, training=training, seeds=seeds,
                    inputs=inputs, command=command, trained_by=trained_by)
      + result_lines
      + _interval_lines(results, methods, datasets)
      + _difference_lines(differences, inputs=inputs)
      + _ablation_and_forgetting_lines(results, methods, datasets)
      + _communication_lines(results, methods, datasets)
      + _heatmap_lines(results, methods, datasets, output_dir)
      + _task_and_settings_lines(task_summaries, data=data,
                                 training=training))
  path = os.path.join(output_dir, TABLE_FILE)
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines))
  training_lib.write_json(os.path.join(output_dir, run_cache.RESULTS_FILE), {
      'command': command, 'data': dataclasses.asdict(data),
      'training': dataclasses.asdict(training), 'seeds': list(seeds),
      'seeds_are_replicates': seeds_are_replicates,
      **({'trained_by': trained_by} if trained_by else {}),
      'inputs': inputs or {}, 'results': results,
      'differences': differences or {}})
  print(f'Average final accuracy, ACC (%):\n\n{acc_table}')
  return path
