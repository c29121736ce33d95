"""The `results.md` of the text-to-SQL benchmark, from its `results.json`.

`report_markdown` lays out what `text2sql_summary.summarize_runs` computed:
Table 2 with the baseline row, MacroAvg/MicroAvg with every interval
(`_intervals_markdown`), Lorar minus `num_examples` weighting per algorithm
with paired intervals and verdicts (`difference_markdown`) and as means over
seeds (`lorar_gain_markdown`), token accuracy, execution accuracy and every
run with its time. Percentages and points are formatted here; the numbers
come in as fractions.
"""

from collections.abc import Mapping, Sequence
import json
import os
from typing import Any, Optional

from apps.common import report_engine as engine
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import report as text2sql_report


# The one rule every verdict of every results page follows.
VERDICT_RULE = intervals.VERDICT_RULE


# How the template parser filled its templates, by `template_values` (runs
# recorded before the field filled annotated values).
_TEMPLATE_PROTOCOL = {
    'stated': (
        '; the template parser reads the anonymised question (entity spans '
        'replaced by variable names, as annotated) and fills its template '
        'with the values the question states only; a variable it does not '
        'state keeps the value of the training example the template was '
        'learned from (`--template_values=stated`, the headline)'),
    'annotated': (
        '; **oracle entities**: the template parser fills its template with '
        'every value annotated on the question, including values the '
        'question never states (`--template_values=annotated`); not the '
        'headline protocol'),
}


# How a retrieve-and-edit run filled its hints, by `retrieved_sql_values`
# (runs recorded before the field filled annotated values).
_HINT_PROTOCOL = {
    'stated': ('; each input ends with the SQL template retrieval predicts '
               'from the client\'s own training data, filled with the values '
               'the question states (`--retrieved_sql_values=stated`)'),
    'annotated': ('; each input ends with the SQL template retrieval predicts '
                  'from the client\'s own training data, filled with every '
                  'value annotated on the question, including values it '
                  'never states: **oracle entities in the hint** '
                  '(`--retrieved_sql_values=annotated`)'),
}


def what_the_model_saw(run_dir: Optional[str]) -> str:
  """The section `results.md` opens with: data used, truncation, test set,
  protocol and the verdict rule, read from a run's `results.json`."""
  lines = ['## What the model saw\n']
  try:
    with open(os.path.join(run_dir, 'results.json'), encoding='utf-8') as f:
      run = json.load(f)
    data = run['config']['experiment']['data']
    examples = run['examples']
    run['truncated']  # pylint: disable=pointless-statement
  except (OSError, TypeError, ValueError, KeyError):
    # E.g. a run recorded by an older version: only the rule can be said.
    run = None
    lines.append('* The run\'s record does not say what data it used.')
  if run:
    lines.append(
        '* **Training data:** ' + ', '.join(
            f'{c} {v["train"]}' for c, v in examples.items())
        + ' examples per client'
        + ('' if not data['max_train_examples']['default']
           and not data['max_train_examples']['overrides']
           else ' (capped by `max_train_examples`)') + '.')
    cut = [f'{c} {split} {v["sources"]} inputs / {v["targets"]} targets'
           for c, splits in run['truncated'].items()
           for split, v in splits.items() if v['sources'] or v['targets']]
    lines.append('* **Truncation:** ' + (
        '; '.join(cut) if cut else
        'none: no input or target of any split was cut') + '.')
    coverage = run.get('template_coverage')
    if coverage:
      lines.append(
          '* **Test questions that can never be right** (gold SQL template '
          'not among the template parser\'s classes): ' + ', '.join(
              f'{c} {v["total"] - v["covered"]} of {v["total"]}'
              for c, v in coverage.items()) + '.')
    unstated = run.get('unstated_values')
    if unstated:
      lines.append(
          '* **Test questions whose gold SQL needs a value the question does '
          'not state** (e.g. ATIS "on monday" annotated day_number0 = 21): '
          + ', '.join(f'{c} {v["questions"]} of {v["total"]}'
                      for c, v in unstated.items())
          + '. With stated values such a question is right only if the '
          'training example of its template holds the same value.')
    lines.append(
        '* **Test set:** every client\'s test split as the run scored it '
        '(counts above; `max_eval_examples` '
        f'{data["max_eval_examples"] or "0: the whole split"}).')
    lines.append(
        '* **Protocol:** question ' + ('with values -> SQL with values'
                                       if data['with_values'] else
                                       'with anonymised variables -> SQL '
                                       'with variables, values filled in '
                                       'before scoring')
        + (_TEMPLATE_PROTOCOL[run.get('template_values', 'annotated')]
           if coverage else '')
        + (_HINT_PROTOCOL[data.get('retrieved_sql_values', 'annotated')]
           if data.get('retrieved_sql') else '') + '.')
    if coverage:
      lines.append(
          '* **Shared before training:** the template parser\'s classes are '
          'the union of every client\'s training SQL templates, and its '
          'n-gram vocabulary comes from every client\'s training questions, '
          'both built in one place before training: in a deployment every '
          'client\'s query structures would be known to the server and to '
          'every other client (docs/algorithms.md, "What leaves a client").')
  lines.append(f'* {VERDICT_RULE}\n')
  return '\n'.join(lines) + '\n'


def report_markdown(report, read, *, table, token_table, tokens, clients,
                    first, command, output_dir) -> str:
  """The content of `results.md`.

  Args:
    report: The content of `results.json`
      (`text2sql_summary.summarize_runs`).
    read: Method -> its `text2sql_seed_runs.SeedRun`s, one per seed.
    table: Table 2 of test exact match, in Markdown.
    token_table: The same for teacher-forced token accuracy.
    tokens: Method -> its token accuracies per seed (methods with them).
    clients: The clients, in the runs' order.
    first: A run, for the split sizes.
    command: The command line; '' leaves it out.
    output_dir: The benchmark directory (run directories are shown relative
      to it).
  """
  parts = ['# Federated text-to-SQL: test exact match (%)\n',
           what_the_model_saw(first.run_dir)]
  if report.get('federated_aggregation'):
    settings = ', '.join(f'`{k}={v}`'
                         for k, v in report['federated_aggregation'].items())
    parts.append(
        f'**Aggregation:** every federated method here aggregates with '
        f'{settings} (`aggregators.factory`), not the paper\'s plain '
        'weighted mean: a row "FedAvg + Lorar" is Lorar with these '
        'settings.\n')
  if command:
    parts.append(f'Command:\n\n```sh\n{command}\n```\n')
  seeds = ', '.join(str(s) for s in report['seeds'])
  counts = ', '.join(
      f'{text2sql_report.method_label(m)} {len(r)}' for m, r in read.items())
  parts.append(
      f'Clients: {", ".join(clients)}; examples per client '
      '(train/dev/test): '
      + ', '.join(f'{c} {v["train"]}/{v["dev"]}/{v["test"]}'
                  for c, v in first.split_sizes.items())
      + f'.\n\nSeeds: {seeds}; seeds per method: {counts}.\n')
  test_sets = report['test_sets']
  if test_sets['full_splits']:
    coverage = ('Every client is scored on its whole test split, the same '
                'examples for every seed and method.')
  elif test_sets['same_for_every_seed']:
    coverage = ('Every client is scored on the same test examples for every '
                'seed and method' + (
                    '' if test_sets['full_splits'] is None else
                    ' (a subset of its test split: `max_eval_examples`)')
                + '.')
  else:
    coverage = (
        'Every client is scored on a seeded subset of its test split '
        '(`max_eval_examples`) that differs between seeds (the same for '
        'every method of a seed): the bootstrap intervals, which need the '
        'same examples for every seed, are left out, and the t intervals '
        'over seeds cover the subset draw as well as training.')
  parts.append(coverage + '\n')
  parts.append(
      'Each model is the one with the best dev exact match. Our rows: the '
      'mean over seeds ± the half-width of its 95 % Student-t interval '
      '(n = seeds; no interval with n=1); the paper\'s numbers (T5-base, '
      'full data, 60 rounds) are in the "paper" rows. Template retrieval '
      'learns nothing: each test question takes the SQL template of its '
      'most similar training question (TF-IDF) with its own values.\n\n'
      + table + '\n')
  parts.append(_intervals_markdown(report) + '\n')
  differences = report['lorar_vs_num_examples']
  if differences:
    parts.append(
        'Lorar minus `num_examples` weighting with the same algorithm, test '
        'exact match in points (positive: Lorar is better), with 95 % '
        'intervals: the paired bootstrap over test examples (stratified by '
        'client; the runs fixed, so it covers test-set sampling), the same '
        'resampling each method\'s seeds too (both sources, rough with few '
        'seeds), and the Student-t interval of the per-seed differences. '
        f'{VERDICT_RULE} The bootstrap over examples and seeds is shown for '
        'information.\n')
    for difference in differences.values():
      a, b = difference['num_seeds']
      parts.append(f'{difference["label"]} + Lorar (n={a}) minus '
                   f'{difference["label"]} (n={b}):\n\n'
                   + difference_markdown(difference) + '\n')
  if tokens:
    parts.append(
        'Teacher-forced test token accuracy (%) of the same models (the gold '
        'prefix in, each next SQL token scored; MacroAvg over clients, '
        'MicroAvg over tokens; mean over seeds ± t half-width). It separates '
        'models whose exact match is still 0. (For the template parser, '
        '`--parser=template`, a "token" is a test question whose template '
        'has a class, scored right when the gold template is chosen.)\n\n'
        + token_table + '\n')
  gains = lorar_gain_markdown(
      {'exact match': {m: [r.exact_match for r in v] for m, v in read.items()},
       'token accuracy': tokens})
  if gains:
    parts.append('Lorar minus `num_examples` weighting, means over seeds '
                 '(points; positive: Lorar is better):\n\n' + gains + '\n')
  execution = _execution_markdown(report)
  if execution:
    parts.append('Execution accuracy (%) on the clients with a SQLite '
                 'database (mean over seeds ± t half-width):\n\n'
                 + execution + '\n')
  lines = ['Runs (wall time of the whole run: training, evaluations and the '
           'test decoding):\n', '| Method | seed | selected round | minutes '
           '| directory |', '|---|---:|---|---:|---|']
  for method, runs_ in read.items():
    for run in runs_:
      selected = ', '.join(
          f'{unit} {r}' if len(run.best_rounds) > 1 else str(r)
          for unit, r in run.best_rounds.items())
      minutes = ('–' if run.seconds is None
                 else f'{run.seconds / 60:.1f}')
      lines.append(
          f'| {text2sql_report.method_label(method)} | {run.seed} | '
          f'{selected} | {minutes} | '
          f'`{os.path.relpath(run.run_dir, output_dir)}` |')
  parts.append('\n'.join(lines) + '\n')
  if report['figures']:
    parts.append('Figures (each method\'s first seed): '
                 + ', '.join(f'`{p}`' for p in report['figures']) + '.\n')
  return '\n'.join(parts)


def _intervals_markdown(report) -> str:
  """MacroAvg and MicroAvg of every method with all three intervals."""
  lines = [
      'MacroAvg and MicroAvg test exact match (%) with 95 % intervals: t '
      'over seeds (training randomness on these test sets), bootstrap over '
      'test examples (test-set sampling, the runs fixed), bootstrap over '
      'examples and seeds (both). The t intervals are not clipped to '
      '[0, 100]; with 3 seeds t is 4.30, so they are wide:\n',
      '| Method | seeds | MacroAvg | t (seeds) | bootstrap (examples) '
      '| bootstrap (examples, seeds) | MicroAvg | t (seeds) '
      '| bootstrap (examples) | bootstrap (examples, seeds) |',
      '|---|---:|---:|---|---|---|---:|---|---|---|']
  # The baseline has no seeds: its "seeds" are the distinct test sets.
  entries = [(e, str(e['num_seeds'])) for e in report['methods'].values()]
  if report['baseline']:
    entries.append((report['baseline'], text2sql_report.MISSING))
  for entry, seeds in entries:
    exact = entry['test']['exact_match']
    cells = [entry['label'], seeds]
    for name in ('macro_avg', 'micro_avg'):
      t_interval = exact[f'{name}_ci95']
      if t_interval:
        t_cell = _percent_interval(t_interval)
      elif seeds == text2sql_report.MISSING:  # The baseline.
        t_cell = text2sql_report.MISSING
      else:
        t_cell = f'n={exact["num_seeds"]}'
      cells += [f'{100 * exact[name]:.2f}', t_cell,
                _percent_interval(exact[f'{name}_bootstrap_ci95']),
                _percent_interval(exact[f'{name}_bootstrap_seeds_ci95'])]
    lines.append(engine.markdown_row(cells))
  return '\n'.join(lines)


def _execution_markdown(report) -> str:
  entries = list(report['methods'].values())
  if report['baseline']:
    entries.append(report['baseline'])
  lines = []
  for entry in entries:
    execution = entry['test']['execution']
    if not execution:
      continue
    cells = []
    for client, value in execution['per_client'].items():
      bounds = value['ci95']
      cells.append(f'{client} {100 * value["accuracy"]:.2f}' + (
          f' ± {100 * (bounds[1] - bounds[0]) / 2:.2f}' if bounds else ''))
    lines.append(f'| {entry["label"]} | {", ".join(cells)} |')
  if not lines:
    return ''
  return '\n'.join(['| Method | per client |', '|---|---|', *lines])


def _points(value: Optional[float]) -> str:
  return text2sql_report.MISSING if value is None else f'{100 * value:+.2f}'


def _percent_interval(bounds: Optional[Sequence[float]]) -> str:
  return engine.interval_cell(bounds, missing=text2sql_report.MISSING)


def difference_markdown(difference: Mapping[str, Any]) -> str:
  """One algorithm's Lorar - num_examples table.

  Rows: the clients, MacroAvg, MicroAvg of exact match, then MacroAvg
  token accuracy if every run recorded it (it has only the seed interval);
  columns: the difference in points and each interval (`[low, high]`,
  points) with its verdict.
  """
  header = ['', 'Lorar − num_examples', 't 95% CI (paired seeds)',
            'bootstrap 95% CI (test examples)',
            'bootstrap 95% CI (examples and seeds; information)', 'verdict']
  lines = [engine.markdown_row(header),
           '|---|---:|---|---|---|---|']
  exact = difference['exact_match']
  rows = [*exact['per_client'].items(), ('MacroAvg', exact['macro_avg']),
          ('MicroAvg', exact['micro_avg'])]
  tokens = difference.get('token_accuracy')
  if tokens:
    rows.append(('token accuracy, MacroAvg', tokens))
  for name, entry in rows:
    # Runs recorded before per-example token counts have no bootstraps.
    cells = [name, _points(entry['difference'])] + [
        engine.interval_cell(entry.get(f'{key}_ci95'), signed=True,
                             missing=text2sql_report.MISSING)
        for key in ('seed', 'bootstrap', 'bootstrap_seeds')]
    cells.append(intervals.comparison_verdict(
        entry.get('seed_ci95'), entry.get('bootstrap_ci95'),
        difference.get('a', 'A'), difference.get('b', 'B')))
    lines.append(engine.markdown_row(cells))
  if tokens:
    notes = [f'{label}: {tokens[f"{key}_undefined"]}.' for key, label in (
        ('bootstrap', 'Token accuracy, bootstrap over test examples'),
        ('bootstrap_seeds', 'Token accuracy, bootstrap over examples and '
         'seeds')) if tokens.get(f'{key}_undefined')]
    if notes:
      lines += ['', *notes]
  return '\n'.join(lines)


def lorar_gain_markdown(
    accuracies: Mapping[str, Mapping[text2sql_report.MethodKey,
                                     text2sql_report.Accuracies]],
) -> str:
  """Lorar minus `num_examples` weighting, per algorithm, in points.

  Args:
    accuracies: `{metric name: {method: accuracies}}`, e.g. test EM and
      token accuracy; a method's accuracies are one run's or a sequence of
      one per seed, whose means over seeds are compared (per client,
      MacroAvg and MicroAvg each the mean of the seeds' values).

  Returns:
    A Markdown table with a row per algorithm run with both weightings and
    per metric (clients, MacroAvg, MicroAvg as columns), or '' if no
    algorithm has both.
  """

  def means(value):
    if isinstance(value, text2sql_metrics.ClientAccuracies):
      value = [value]
    summary = text2sql_report.summarize_seeds(value)
    return ({c: v.estimate for c, v in summary.per_client.items()},
            summary.macro.estimate, summary.micro.estimate)

  lines = []
  for algorithm, label in text2sql_report.ALGORITHMS.items():
    base = ('federated', algorithm, 'num_examples')
    lorar = ('federated', algorithm, 'lorar')
    for metric, results in accuracies.items():
      if base not in results or lorar not in results:
        continue
      (b, b_macro, b_micro), (l, l_macro, l_micro) = (
          means(results[base]), means(results[lorar]))
      cells = [100 * (l[c] - b[c]) if c in l and c in b else None
               for c in text2sql_report.CLIENTS]
      cells += [100 * (l_macro - b_macro), 100 * (l_micro - b_micro)]
      lines.append(f'| {label} | {metric} | ' + ' | '.join(
          text2sql_report.MISSING if v is None else f'{v:+.2f}'
          for v in cells) + ' |')
  if not lines:
    return ''
  header = ['Algorithm', 'Metric', *text2sql_report.CLIENTS, 'MacroAvg',
            'MicroAvg']
  return '\n'.join([engine.markdown_row(header),
                    '|---|---|' + '---:|' * (len(header) - 2), *lines])
