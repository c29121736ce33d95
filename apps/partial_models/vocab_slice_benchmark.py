"""Vocabulary-sliced vs dense FedAvg on the text-to-SQL clients.

The partial-model comparison for a seq2seq model: the same federated run
(FedAvg, uniform client weights, the text-to-SQL `cpu` preset) once with the
whole model broadcast and uploaded densely, and once per M with
`vocab_sliced.build_vocab_sliced_process`, where each client downloads and
uploads only the M token-embedding rows of its own sub-vocabulary. It
reports, side by side:

*   bytes per client per round, down and up, as the round loop recorded them
    (`tff_nlp.analysis.round_communication`, read from each process's round
    computation and the rows the clients uploaded);
*   the sub-vocabularies: rows kept per client, and how many training ids
    each client had to map to UNK because its M rows could not hold them;
*   test token accuracy (teacher-forced) and exact match per client in the
    layout of the Lorar paper's Table 2, and the sliced minus dense
    difference;
*   the merged-dev token accuracy by round (`dev_token_accuracy.png`) and
    the median round time.

Each run is cached under its configuration (`text2sql_benchmark.run_dir_for`),
so an interrupted comparison continues where it stopped.
"""

import collections
from collections.abc import Mapping, Sequence
import json
import os
import statistics
from typing import Any

from absl import logging

from tff_nlp import errors
from apps.common import plots
from tff_nlp import training as training_lib
from apps.text2sql import benchmark as text2sql_benchmark
from apps.text2sql import experiment as text2sql
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import report as text2sql_report
from tff_nlp.models import seq2seq
from apps.text2sql import task as text2sql_task

METHOD = ('federated', 'fedavg', 'uniform')
RESULTS_FILE = 'vocab_slice.json'
TABLE_FILE = 'vocab_slice.md'
DEV_TOKEN_PLOT_FILE = 'vocab_slice_dev_token_accuracy.png'
DENSE = 0
# Sizes are binary (docs/results/README.md): 1 KiB = 1,024 bytes.
KIB = 1024


def run_label(max_keys: int) -> str:
  """'Dense FedAvg' for 0, else 'Sliced, M = <max_keys>'."""
  return 'Dense FedAvg' if max_keys == DENSE else f'Sliced, M = {max_keys:,}'


def _accuracies(results: Mapping[str, Any], metric: str
                ) -> text2sql_metrics.ClientAccuracies:
  if metric == 'exact_match':
    per_client = results['test']['exact_match']['per_client']
    correct_key, total_key = 'correct', 'total'
  else:
    per_client = results['test_tokens']
    correct_key, total_key = 'correct_tokens', 'tokens'
  return text2sql_metrics.ClientAccuracies(
      clients=tuple(per_client),
      correct=tuple(v[correct_key] for v in per_client.values()),
      totals=tuple(v[total_key] for v in per_client.values()))


def summarize_run(results: Mapping[str, Any],
                  records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """The numbers of one run that the comparison reports.

  Args:
    results: The run's `results.json` content.
    records: Its federated round records (`federated/metrics.jsonl`).

  Returns:
    An OrderedDict with `bytes_down_per_client` and `bytes_up_per_client`
    (means over the rounds), `round_seconds` (median), `rows_per_client`
    (mean rows of the embedding a client holds: V when dense),
    `ids_to_unk` (training ids mapped to UNK, all clients), `test_tokens`
    and `test_exact_match` (`ClientAccuracies.to_json()`),
    `dev_token_accuracy` (the last evaluation's), and, for the report's
    "What the model saw", `examples` (client -> split -> examples used)
    and `truncated` (client -> split -> sources and targets cut), as the
    run recorded them (None if it did not).
  """
  rounds = [r for r in records if 'communication' in r]
  if not rounds:
    raise ValueError('No round records with communication metrics.')
  slices = results.get('vocab_slices') or {}
  dev_rounds, dev = plots.metric_series(records, 'eval/dev_token_accuracy')
  return collections.OrderedDict(
      bytes_down_per_client=statistics.fmean(
          r['communication']['bytes_down_per_client'] for r in rounds),
      bytes_up_per_client=statistics.fmean(
          r['communication']['bytes_up_per_client'] for r in rounds),
      round_seconds=statistics.median(r['round_seconds'] for r in rounds),
      rows_per_client=(statistics.fmean(v['keys'] for v in slices.values())
                       if slices else float(results['vocabulary_size'])),
      ids_to_unk=sum(v['ids_to_unk'] for v in slices.values()),
      test_tokens=_accuracies(results, 'tokens').to_json(),
      test_exact_match=_accuracies(results, 'exact_match').to_json(),
      dev_token_accuracy=dev[-1] if dev else None,
      dev_token_accuracy_round=dev_rounds[-1] if dev else None,
      examples=results.get('examples'),
      truncated=results.get('truncated'),
  )


def _client_row(label: str, accuracies: text2sql_metrics.ClientAccuracies
                ) -> str:
  cells = [f'{100 * accuracies.per_client[c]:.2f}'
           if c in accuracies.per_client else text2sql_report.MISSING
           for c in text2sql_report.CLIENTS]
  cells += [f'{100 * accuracies.macro:.2f}', f'{100 * accuracies.micro:.2f}']
  return f'| {label} | ' + ' | '.join(cells) + ' |'


def _difference_row(label: str, a: text2sql_metrics.ClientAccuracies,
                    b: text2sql_metrics.ClientAccuracies) -> str:
  """`a - b` in points, per client and on the averages."""
  cells = [f'{100 * (a.per_client[c] - b.per_client[c]):+.2f}'
           if c in a.per_client and c in b.per_client
           else text2sql_report.MISSING for c in text2sql_report.CLIENTS]
  cells += [f'{100 * (a.macro - b.macro):+.2f}',
            f'{100 * (a.micro - b.micro):+.2f}']
  return f'| {label} | ' + ' | '.join(cells) + ' |'


def comparison_markdown(summaries: Mapping[int, Mapping[str, Any]],
                        vocab_slices: Mapping[int, Mapping[str, Any]]) -> str:
  """The comparison's tables.

  Args:
    summaries: `{M: summarize_run(...)}`, with `DENSE` (0) for the dense
      run, which must be present.
    vocab_slices: `{M: results['vocab_slices']}` of the sliced runs.

  Returns:
    Markdown: the bytes/accuracy table, per-client test token accuracy and
    exact match (sliced minus dense rows under each), and the clients'
    sub-vocabularies.
  """
  if DENSE not in summaries:
    raise ValueError('The comparison needs the dense run (M = 0).')
  dense = summaries[DENSE]
  header = ('| Method | embedding rows / client | training ids → UNK | '
            'KiB down / client / round | KiB up / client / round | '
            'down vs dense | up vs dense | test token acc. MacroAvg | '
            'MicroAvg | test EM MacroAvg | merged-dev token acc. | '
            'round s (median) |')
  lines = [header, '|---|' + '---:|' * 11]
  for m, s in summaries.items():
    tokens = text2sql_metrics.ClientAccuracies(**_from_json(s['test_tokens']))
    exact = text2sql_metrics.ClientAccuracies(
        **_from_json(s['test_exact_match']))
    dev = ('–' if s['dev_token_accuracy'] is None
           else f'{100 * s["dev_token_accuracy"]:.2f}')
    lines.append(
        f'| {run_label(m)} | {s["rows_per_client"]:,.0f} | '
        f'{s["ids_to_unk"]:,} | {s["bytes_down_per_client"] / KIB:,.1f} | '
        f'{s["bytes_up_per_client"] / KIB:,.1f} | '
        f'{s["bytes_down_per_client"] / dense["bytes_down_per_client"]:.3f}× | '
        f'{s["bytes_up_per_client"] / dense["bytes_up_per_client"]:.3f}× | '
        f'{100 * tokens.macro:.2f} | {100 * tokens.micro:.2f} | '
        f'{100 * exact.macro:.2f} | {dev} | {s["round_seconds"]:.1f} |')
  out = ['\n'.join(lines)]
  columns = ('| Method | ' + ' | '.join(text2sql_report.CLIENTS)
             + ' | MacroAvg | MicroAvg |\n|---|'
             + '---:|' * (len(text2sql_report.CLIENTS) + 2))
  for metric, title in (('test_tokens', 'Test token accuracy (%)'),
                        ('test_exact_match', 'Test exact match (%)')):
    base = text2sql_metrics.ClientAccuracies(**_from_json(dense[metric]))
    rows = [columns]
    for m, s in summaries.items():
      accuracies = text2sql_metrics.ClientAccuracies(**_from_json(s[metric]))
      rows.append(_client_row(run_label(m), accuracies))
      if m != DENSE:
        rows.append(_difference_row(f'{run_label(m)} − dense (points)',
                                    accuracies, base))
    out.append(f'{title}, the Lorar paper\'s Table 2 layout:\n\n'
               + '\n'.join(rows))
  if vocab_slices:
    rows = ['| M | ' + ' | '.join(text2sql_report.CLIENTS) + ' |',
            '|---|' + '---|' * len(text2sql_report.CLIENTS)]
    for m, slices in vocab_slices.items():
      rows.append(f'| {m:,} | ' + ' | '.join(
          f'{slices[c]["keys"]} of {slices[c]["distinct_ids"]}'
          + (f' ({slices[c]["ids_to_unk"]} → UNK)'
             if slices[c]['ids_to_unk'] else '')
          if c in slices else text2sql_report.MISSING
          for c in text2sql_report.CLIENTS) + ' |')
    out.append('Rows kept of the distinct ids in each client\'s training '
               'data (and the id occurrences that became UNK):\n\n'
               + '\n'.join(rows))
  return '\n\n'.join(out)


def _from_json(value: Mapping[str, Any]) -> dict[str, Any]:
  """`ClientAccuracies` fields from its `to_json()`."""
  per_client = value['per_client']
  return dict(clients=tuple(per_client),
              correct=tuple(v['correct'] for v in per_client.values()),
              totals=tuple(v['total'] for v in per_client.values()))


def run_vocab_slice_benchmark(
    *,
    data_dir: str | None,
    output_dir: str,
    max_keys: Sequence[int],
    data: text2sql_task.DataConfig,
    model: seq2seq.Seq2SeqConfig,
    training: text2sql_task.TrainingConfig,
    loop: training_lib.LoopConfig,
    command: str = '',
) -> dict[str, Any]:
  """Runs (or reads back) dense and sliced FedAvg, then writes the report.

  Args:
    data_dir: The `shared/data` folder; None finds it.
    output_dir: The benchmark directory: runs under `runs/`, and
      `vocab_slice.json`, `vocab_slice.md` and
      `vocab_slice_dev_token_accuracy.png` beside them.
    max_keys: M per sliced run; 0 stands for the dense run (always run).
    data: Data and tokenization, the same for every run.
    model: The model, the same for every run.
    training: Local training; its paradigm, algorithm and weighting become
      federated FedAvg with uniform weights.
    loop: Rounds and evaluation cadence.
    command: The command line, recorded in the report.

  Returns:
    The content of `vocab_slice.json`.

  Raises:
    InputError: If an M repeats or is negative.
  """
  runs_m = [DENSE] + [m for m in max_keys if m != DENSE]
  if len(set(runs_m)) != len(runs_m) or min(runs_m) < 0:
    raise errors.InputError(
        f'--vocab_slice_keys: expected distinct non-negative M, got '
        f'{list(max_keys)}.')
  training = text2sql_benchmark.training_for(training, METHOD)
  summaries, slices, run_dirs, records = {}, {}, {}, {}
  for m in runs_m:
    run_dir = text2sql_benchmark.run_dir_for(
        output_dir, METHOD, data=data, model=model, training=training,
        seed=loop.seed, variant={'vocab_slice_keys': m} if m else None)
    results = text2sql_benchmark.finished_results(run_dir, loop.rounds)
    if results is None:
      logging.info('%s: running in %s', run_label(m), run_dir)
      results = training_lib.to_json_value(text2sql.run_text2sql(
          text2sql.Text2SqlSpec(data=data, model=model, training=training,
                                loop=loop, vocab_slice_keys=m),
          data_dir=data_dir, output_dir=run_dir))
    else:
      logging.info('%s: done before, read from %s', run_label(m), run_dir)
    records[m] = training_lib.read_json_lines(
        os.path.join(run_dir, 'federated', 'metrics.jsonl'))
    summaries[m] = summarize_run(results, records[m])
    if m:
      slices[m] = results['vocab_slices']
    run_dirs[m] = os.path.relpath(run_dir, output_dir)

  plots.plot_metric_by_round(
      {run_label(m): plots.metric_series(r, 'eval/dev_token_accuracy')
       for m, r in records.items()},
      os.path.join(output_dir, DEV_TOKEN_PLOT_FILE),
      y_label='merged dev token accuracy (teacher-forced)',
      title='Dense vs vocabulary-sliced FedAvg')
  report = collections.OrderedDict(
      command=command,
      runs=collections.OrderedDict(
          (str(m), collections.OrderedDict(
              label=run_label(m), run_dir=run_dirs[m], summary=summaries[m],
              vocab_slices=slices.get(m)))
          for m in runs_m),
  )
  tables = write_report(report, output_dir)
  print(tables)
  print(f'\nWritten to {os.path.join(output_dir, TABLE_FILE)}.')
  return training_lib.to_json_value(report)


def what_the_model_saw(summaries: Mapping[int, Mapping[str, Any]]) -> str:
  """Markdown: data, truncation, test set, protocol, as the runs recorded.

  The dense run's records speak for all: every run reads the same data with
  the same settings. What an older run did not record is said to be so.
  """
  dense = summaries[DENSE]
  examples, truncated = dense.get('examples'), dense.get('truncated')
  totals = dense['test_exact_match']['per_client']
  clients = list(totals)
  test = ', '.join(f'{c} {totals[c]["total"]}' for c in clients)
  lines = ['## What the model saw', '']
  if examples:
    train = ', '.join(f'{c} {examples[c]["train"]:,}' for c in clients
                      if c in examples)
    lines.append(f'- **Training data.** Each client\'s text-to-SQL training '
                 f'split, the examples used: {train}.')
  else:
    lines.append('- **Training data.** Each client\'s text-to-SQL training '
                 'split; the examples used per client were not recorded in '
                 'this report.')
  if truncated:
    cut = {s: sum(truncated[c]['test'][s] for c in clients
                  if c in truncated) for s in ('sources', 'targets')}
    lines.append(f'- **Truncation.** Test examples whose question (source) '
                 f'or SQL (target) was cut to the model\'s maximum: '
                 f'{cut["sources"]} and {cut["targets"]}; a cut target can '
                 f'never be an exact match. A sliced client also maps the '
                 f'training ids outside its M rows to UNK (table).')
  else:
    lines.append('- **Truncation.** Not recorded in this report (the runs\' '
                 '`results.json`, `truncated`, hold it). A sliced client maps '
                 'the training ids outside its M rows to UNK (table).')
  lines += [
      f'- **Test set.** Test examples per client: {test} '
      f'({sum(v["total"] for v in totals.values()):,} in all), the same for '
      f'every run.',
      '- **Protocol.** Teacher-forced token accuracy and greedy-decoded '
      'exact match of the global model after the last round, one seed; '
      'nothing is selected on the test set.',
      '- **Verdicts.** One seed and no interval: by the verdict rule '
      '(docs/results/README.md) no difference is called; the "− dense" '
      'rows describe these runs only.']
  return '\n'.join(lines)


def write_report(report: Mapping[str, Any], output_dir: str) -> str:
  """Writes `vocab_slice.json` and `vocab_slice.md`; returns the tables."""
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE), report)
  runs = report['runs']
  summaries = {int(m): r['summary'] for m, r in runs.items()}
  slices = {int(m): r['vocab_slices'] for m, r in runs.items()
            if r.get('vocab_slices')}
  tables = comparison_markdown(summaries, slices)
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write('# Vocabulary-sliced vs dense FedAvg on the text-to-SQL clients'
            '\n\n')
    if report.get('command'):
      f.write(f'Command:\n\n```sh\n{report["command"]}\n```\n\n')
    f.write(what_the_model_saw(summaries) + '\n\nSizes are binary (1 KiB '
            '= 1,024 bytes).\n\n' + tables + '\n\nRuns: ' + ', '.join(
                f'{r["label"]} `{r["run_dir"]}`' for r in runs.values())
            + f'.\n\nFigure: `{DEV_TOKEN_PLOT_FILE}`.\n')
  return tables


def rewrite_report(output_dir: str) -> str:
  """Writes the report again from its `vocab_slice.json`, training nothing."""
  with open(os.path.join(output_dir, RESULTS_FILE), encoding='utf-8') as f:
    report = json.load(f, object_pairs_hook=collections.OrderedDict)
  return write_report(report, output_dir)
