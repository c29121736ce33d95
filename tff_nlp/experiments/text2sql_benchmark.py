"""Several methods of the Lorar paper's Table 2, run and reported together.

`run_benchmark` runs each method with `text2sql.run_text2sql` in a directory
named by the method and a hash of its configuration
(`runs/<method>-<hash>/`), so a benchmark interrupted at any point continues
where it stopped when run again (finished methods are read back, the
unfinished one resumes from its checkpoint), and a changed configuration
starts new runs instead of mixing results. It then writes, next to the runs:

*   `results.md`: test EM in the layout of the paper's Table 2 (clients as
    columns, MacroAvg, MicroAvg; the paper's numbers in the row below ours),
    teacher-forced test token accuracy in the same layout, Lorar minus
    `num_examples` weighting per algorithm and client (`lorar_gain_markdown`),
    execution accuracy on the clients with a database, and the runs;
*   `results.json`: the same numbers and every run's directory;
*   `training_loss_<algorithm>.png`: per-client training loss against local
    steps, `<algorithm>` vs `<algorithm>` + Lorar (the paper's Figures 3-5);
*   `dev_exact_match.png`, `dev_token_accuracy.png`: merged-dev EM and
    teacher-forced token accuracy against rounds, every federated method
    (with and without Lorar).
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import json
import os
from typing import Any, Optional

from absl import logging

from tff_nlp import errors
from tff_nlp import plots
from tff_nlp import training as training_lib
from tff_nlp.experiments import text2sql
from tff_nlp.metrics import text2sql as text2sql_metrics
from tff_nlp.metrics import text2sql_report
from tff_nlp.models import seq2seq

RUNS_DIR = 'runs'
RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
DEV_PLOT_FILE = 'dev_exact_match.png'
DEV_TOKEN_PLOT_FILE = 'dev_token_accuracy.png'


def parse_method(spec: str) -> text2sql_report.MethodKey:
  """'finetune', 'centralized' or '<algorithm>/<weighting>' to a method key."""
  spec = spec.strip()
  if spec in ('finetune', 'centralized'):
    return (spec,)
  algorithm, sep, weighting = spec.partition('/')
  method = ('federated', algorithm, weighting)
  if not sep or algorithm not in text2sql_report.ALGORITHMS or (
      weighting not in text2sql_report.WEIGHTINGS):
    raise errors.InputError(
        f'--methods: {spec!r} is not a method; expected finetune, '
        f'centralized or <algorithm>/<weighting> with an algorithm from '
        f'{sorted(text2sql_report.ALGORITHMS)} and a weighting from '
        f'{sorted(text2sql_report.WEIGHTINGS)}, e.g. fedopt/lorar.')
  return method


def method_slug(method: text2sql_report.MethodKey) -> str:
  return '-'.join(method[1:] if method[0] == 'federated' else method)


def training_for(base: text2sql.TrainingConfig,
                 method: text2sql_report.MethodKey) -> text2sql.TrainingConfig:
  """`base` with the paradigm (and algorithm, weighting) of `method`."""
  if method[0] == 'federated':
    return dataclasses.replace(base, paradigm='federated',
                               algorithm=method[1], weighting=method[2])
  return dataclasses.replace(base, paradigm=method[0])


def run_dir_for(output_dir: str, method, *, data, model, training,
                seed, variant: Optional[Mapping[str, Any]] = None) -> str:
  """`output_dir/runs/<method>[-<variant>]-<hash of what defines the run>`.

  Args:
    output_dir: The benchmark directory.
    method: The method key.
    data: The run's `DataConfig`.
    model: The run's `Seq2SeqConfig`.
    training: The run's `TrainingConfig`.
    seed: The run's seed.
    variant: Further settings that define the run (e.g.
      `{'vocab_slice_keys': 1000}`), in the name and the hash; without one,
      the directory is that of the plain method.
  """
  experiment = collections.OrderedDict(
      seed=seed, data=data, model=model, training=training)
  slug = method_slug(method)
  if variant:
    experiment.update(variant)
    slug += ''.join(f'-{k}{v}' for k, v in variant.items())
  digest = training_lib.config_digest(experiment)
  return os.path.join(output_dir, RUNS_DIR, f'{slug}-{digest}')


def finished_results(run_dir: str, rounds: int) -> Optional[dict[str, Any]]:
  """The `results.json` of a run finished with `rounds` rounds, else None."""
  path = os.path.join(run_dir, text2sql.RESULTS_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    results = json.load(f)
  return results if results['config']['loop']['rounds'] == rounds else None


def _client_accuracies(per_client: dict[str, dict[str, Any]], *,
                       correct_key: str,
                       total_key: str) -> text2sql_metrics.ClientAccuracies:
  """`{client: {correct_key: n, total_key: m}}` as `ClientAccuracies`."""
  return text2sql_metrics.ClientAccuracies(
      clients=tuple(per_client),
      correct=tuple(v[correct_key] for v in per_client.values()),
      totals=tuple(v[total_key] for v in per_client.values()))


def lorar_gain_markdown(
    accuracies: dict[str, dict[text2sql_report.MethodKey,
                               text2sql_metrics.ClientAccuracies]],
) -> str:
  """Lorar minus `num_examples` weighting, per algorithm, in points.

  Args:
    accuracies: `{metric name: {method: accuracies}}`, e.g. test EM and
      token accuracy.

  Returns:
    A Markdown table with a row per algorithm run with both weightings and
    per metric (clients, MacroAvg, MicroAvg as columns), or '' if no
    algorithm has both.
  """
  lines = []
  for algorithm, label in text2sql_report.ALGORITHMS.items():
    base = ('federated', algorithm, 'num_examples')
    lorar = ('federated', algorithm, 'lorar')
    for metric, results in accuracies.items():
      if base not in results or lorar not in results:
        continue
      b, l = results[base], results[lorar]
      cells = [100 * (l.per_client[c] - b.per_client[c])
               if c in l.per_client and c in b.per_client else None
               for c in text2sql_report.CLIENTS]
      cells += [100 * (l.macro - b.macro), 100 * (l.micro - b.micro)]
      lines.append(f'| {label} | {metric} | ' + ' | '.join(
          text2sql_report.MISSING if v is None else f'{v:+.2f}'
          for v in cells) + ' |')
  if not lines:
    return ''
  header = ['Algorithm', 'Metric', *text2sql_report.CLIENTS, 'MacroAvg',
            'MicroAvg']
  return '\n'.join(['| ' + ' | '.join(header) + ' |',
                    '|---|---|' + '---:|' * (len(header) - 2), *lines])


def run_benchmark(
    *,
    data_dir: Optional[str],
    output_dir: str,
    methods: Sequence[text2sql_report.MethodKey],
    data: text2sql.DataConfig,
    model: seq2seq.Seq2SeqConfig,
    training: text2sql.TrainingConfig,
    loop: training_lib.LoopConfig,
    command: str = '',
) -> dict[str, Any]:
  """Runs (or reads back) every method, then writes the combined report.

  Args:
    data_dir: The `shared/data` folder; None finds it.
    output_dir: The benchmark directory.
    methods: The methods, e.g. `[('finetune',), ('federated', 'fedopt',
      'lorar')]`.
    data: Data and tokenization, the same for every method.
    model: The model, the same for every method.
    training: Local training; its paradigm, algorithm and weighting are
      replaced by each method's.
    loop: Rounds (epochs outside federated runs) and evaluation cadence.
    command: The command line, recorded in `results.md`.

  Returns:
    The content of `results.json`.
  """
  if not methods:
    raise errors.InputError('--methods: no method given.')
  if len(set(methods)) != len(methods):
    raise errors.InputError(f'--methods: repeated methods in {methods}.')
  runs = collections.OrderedDict()
  for method in methods:
    method_training = training_for(training, method)
    run_dir = run_dir_for(output_dir, method, data=data, model=model,
                          training=method_training, seed=loop.seed)
    results = finished_results(run_dir, loop.rounds)
    if results is None:
      logging.info('%s: running in %s', method_slug(method), run_dir)
      results = text2sql.run_text2sql(
          data_dir=data_dir, output_dir=run_dir, data=data, model=model,
          training=method_training, loop=loop)
      results = training_lib.to_json_value(results)
    else:
      logging.info('%s: done before, read from %s', method_slug(method),
                   run_dir)
    runs[method] = (run_dir, results)

  exact = {m: _client_accuracies(r['test']['exact_match']['per_client'],
                                 correct_key='correct', total_key='total')
           for m, (_, r) in runs.items()}
  rows = [m for m in text2sql_report.TABLE2_METHODS if m in exact]
  rows += [m for m in methods if m not in rows]
  table = text2sql_report.table2_markdown(exact, methods=rows)
  # Runs from before token metrics existed have no 'test_tokens'.
  tokens = {m: _client_accuracies(r['test_tokens'],
                                  correct_key='correct_tokens',
                                  total_key='tokens')
            for m, (_, r) in runs.items() if 'test_tokens' in r}
  token_rows = [m for m in rows if m in tokens]
  token_table = text2sql_report.table2_markdown(tokens, methods=token_rows,
                                                paper={})
  execution_lines = []
  for method, (_, results) in runs.items():
    execution = results['test'].get('execution')
    if execution:
      cells = ', '.join(
          f'{c} {100 * v["accuracy"]:.2f}'
          for c, v in execution['per_client'].items())
      execution_lines.append(
          f'| {text2sql_report.method_label(method)} | {cells} |')
  figures = write_figures(runs, output_dir, clients=data.clients)

  report = collections.OrderedDict(
      methods=collections.OrderedDict(
          (method_slug(m), collections.OrderedDict(
              run_dir=os.path.relpath(run_dir, output_dir),
              method=list(m),
              label=text2sql_report.method_label(m),
              test=results['test'],
              best_rounds=results['best_rounds'],
              seconds=results['seconds']))
          for m, (run_dir, results) in runs.items()),
      table2=text2sql_report.table2_json(exact, methods=rows),
      test_token_accuracy=text2sql_report.table2_json(
          tokens, methods=token_rows, paper={}),
      figures=figures,
  )
  with open(os.path.join(output_dir, RESULTS_FILE), 'w',
            encoding='utf-8') as f:
    json.dump(training_lib.to_json_value(report), f, indent=1)
    f.write('\n')
  first = next(iter(runs.values()))[1]
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write('# Federated text-to-SQL: test exact match (%)\n\n')
    if command:
      f.write(f'Command:\n\n```sh\n{command}\n```\n\n')
    f.write(
        f'Clients: {", ".join(data.clients)}; examples per client '
        f'(train/dev/test): '
        + ', '.join(f'{c} {v["train"]}/{v["dev"]}/{v["test"]}'
                    for c, v in first['examples'].items())
        + '.\n\nEach model is the one with the best dev exact match; '
        "the paper's numbers (T5-base, full data, 60 rounds) are in the "
        '"paper" rows.\n\n' + table + '\n')
    if tokens:
      f.write('\nTeacher-forced test token accuracy (%) of the same models '
              '(the gold prefix in, each next SQL token scored; MacroAvg over '
              'clients, MicroAvg over tokens). It separates models whose '
              'exact match is still 0:\n\n'
              + token_table + '\n')
    gains = lorar_gain_markdown({'exact match': exact,
                                 'token accuracy': tokens})
    if gains:
      f.write('\nLorar minus `num_examples` weighting with the same '
              'algorithm (points; positive: Lorar is better):\n\n'
              + gains + '\n')
    if execution_lines:
      f.write('\nExecution accuracy (%) on the clients with a SQLite '
              'database:\n\n| Method | per client |\n|---|---|\n'
              + '\n'.join(execution_lines) + '\n')
    f.write('\nRuns (wall time of the whole run: training, evaluations and '
            'the test decoding):\n\n| Method | selected round | minutes | '
            'directory |\n|---|---|---:|---|\n')
    for method, (run_dir, results) in runs.items():
      selected = ', '.join(f'{unit} {r}' if len(results['best_rounds']) > 1
                           else str(r)
                           for unit, r in results['best_rounds'].items())
      f.write(f'| {text2sql_report.method_label(method)} | {selected} | '
              f'{results["seconds"] / 60:.1f} | '
              f'`{os.path.relpath(run_dir, output_dir)}` |\n')
    f.write('\nFigures: ' + ', '.join(f'`{p}`' for p in figures) + '.\n')
  print(f'Test exact match (%):\n\n{table}\n')
  if tokens:
    print(f'Teacher-forced test token accuracy (%):\n\n{token_table}\n')
  if gains:
    print(f'Lorar minus num_examples weighting (points):\n\n{gains}\n')
  print(f'Written to {os.path.join(output_dir, TABLE_FILE)}.')
  return report


def write_figures(runs, output_dir: str, *, clients: Sequence[str]
                  ) -> list[str]:
  """The paper's Figures 3-5 and the dev-EM curves; returns the file names."""
  records = {}
  for method, (run_dir, _) in runs.items():
    if method[0] == 'federated':
      records[method] = training_lib.read_json_lines(
          os.path.join(run_dir, 'federated', 'metrics.jsonl'))
  written = []
  if records:
    plots.plot_metric_by_round(
        {text2sql_report.method_label(m): plots.metric_series(
            r, f'eval/{text2sql.DEV_METRIC}') for m, r in records.items()},
        os.path.join(output_dir, DEV_PLOT_FILE),
        y_label='merged dev exact match', title='Global model on merged dev')
    written.append(DEV_PLOT_FILE)
    plots.plot_metric_by_round(
        {text2sql_report.method_label(m): plots.metric_series(
            r, 'eval/dev_token_accuracy') for m, r in records.items()},
        os.path.join(output_dir, DEV_TOKEN_PLOT_FILE),
        y_label='merged dev token accuracy (teacher-forced)',
        title='Global model on merged dev')
    written.append(DEV_TOKEN_PLOT_FILE)
  for algorithm in text2sql_report.ALGORITHMS:
    pair = [('federated', algorithm, w) for w in ('num_examples', 'lorar')]
    if all(m in records for m in pair):
      name = f'training_loss_{algorithm}.png'
      plots.plot_client_training_loss(
          {text2sql_report.method_label(m): {
              clients[i]: series for i, series in
              plots.client_loss_series(records[m]).items()} for m in pair},
          os.path.join(output_dir, name),
          y_label='mean training loss of the round')
      written.append(name)
  return written


def default_methods() -> list[text2sql_report.MethodKey]:
  """The CPU benchmark's methods: both baselines, {FedAvg, FedOPT, FedProx}
  x {num_examples, lorar}, and FedOPT with uniform and loss_reduction."""
  methods = [('finetune',), ('centralized',)]
  for algorithm in ('fedopt', 'fedavg', 'fedprox'):
    methods += [('federated', algorithm, 'num_examples'),
                ('federated', algorithm, 'lorar')]
  methods += [('federated', 'fedopt', 'uniform'),
              ('federated', 'fedopt', 'loss_reduction')]
  return methods
