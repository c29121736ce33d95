"""The FCL benchmark's settings side by side: does any make transfer help?

`make bench-fcl` runs the main setting into its output folder and every
variant (more clients, the paper's learning rate and λ1, the library's
skip-gram vectors, the authors' random task construction) into a subfolder
of it, each with its own `results.json` (`fcl_report.write_report`).
`summarize` reads them and puts, per setting and dataset, the ACC of the
methods that transfer knowledge and the paper's two paired comparisons
(FedSeIT − no foreign branch, FedSeIT + SIT − FedSeIT) with both intervals
and the one verdict of `intervals.VERDICT_RULE` in one table; `write` writes
it as `variants.md` and `variants.json`, opening with "What the model saw"
from every report's data and training configuration and its `inputs`
(`fcl_inputs.describe`; "not recorded" where a report has none). A setting
whose `results.json` is not there yet is listed as such, not left out.
"""

import collections
from collections.abc import Mapping, Sequence
import json
import os
from typing import Any, Optional

from tff_nlp import errors
from apps.fcl import experiment as fcl
from apps.fcl import report as fcl_report
from apps.fcl import seeds as fcl_seeds
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
      seeds=report['seeds'],
      # What the model saw (None: not recorded by the report).
      max_train_per_task=data.get('max_train_per_task'),
      max_test_per_task=data.get('max_test_per_task'),
      max_length=data.get('max_length'),
      rounds_per_task=training.get('rounds_per_task'),
      local_epochs=training.get('local_epochs'))


def _inputs(by_seed: Optional[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
  """A dataset's data over every (client, task) pair of every seed, from
  its report's `inputs` (`fcl_inputs.describe`); None if not recorded."""
  if not by_seed:
    return None
  train = [n for s in by_seed.values() for row in s['train_documents']
           for n in row]
  test = [n for s in by_seed.values() for row in s['test_documents']
          for n in row]
  return collections.OrderedDict(
      train_documents_min=min(train), train_documents_max=max(train),
      train_documents_mean=float(sum(train) / len(train)),
      train_documents=sum(train),
      train_documents_cut=sum(s['train_documents_cut']
                              for s in by_seed.values()),
      test_documents=sum(test),
      test_documents_cut=sum(s['test_documents_cut']
                             for s in by_seed.values()),
      test_documents_no_known_word=sum(
          s['test_documents_no_known_word'] for s in by_seed.values()))


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
        inputs=_inputs(report.get('inputs', {}).get(dataset)),
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


def _per_setting(summary: Mapping[str, Any], key: str) -> str:
  """A setting field's value, once if every setting that ran shares it,
  else per setting; "not recorded" where its report does not say."""
  values = collections.OrderedDict()
  for name, setting in summary['settings'].items():
    if setting is not None:
      value = setting.get(key)
      values.setdefault(
          'not recorded' if value is None else
          'none' if value == 0 and key.startswith('max_') else f'{value:,}',
          []).append(name)
  if len(values) == 1:
    return next(iter(values))
  return ', '.join(f'{v} ({", ".join(names)})' for v, names in values.items())


def _cut(count: int, total: int) -> str:
  return f'{count:,} of {total:,} ({100 * count / max(total, 1):.1f} %)'


def _what_the_model_saw(summary: Mapping[str, Any]) -> list[str]:
  """The section the page opens with, from every setting's report; each
  setting's own report (`fcl_inputs.markdown`) has the full one."""
  length = _per_setting(summary, 'max_length')
  common = length.replace(',', '').isdigit()
  cut_header = f'cut at {length} tokens' if common else 'cut'
  cut_at = (f'cut at {length} tokens' if common else
            f'cut at a length per setting, in tokens: {length}')
  lines = [
      '## What the model saw', '',
      '* **Training examples per client and task:** the training + '
      'validation documents of the task\'s labels, a stratified sample '
      f'(cap: {_per_setting(summary, "max_train_per_task")}), less a 1/8 '
      'validation split that is not used; each is seen in every one of the '
      f'{_per_setting(summary, "rounds_per_task")} rounds × '
      f'{_per_setting(summary, "local_epochs")} local epoch(s) of its task, '
      'never after. Per setting and dataset in the table below.',
      f'* **Truncation:** every document is {cut_at} (it keeps '
      'its first ones); the test documents cut are in the table below. '
      'Targets are one label a document and never cut, so truncation makes '
      'no test document impossible to get right (0 in every setting).',
      '* **Test set:** each (client, task) is scored on the dataset\'s test '
      'documents of its labels, a stratified sample (cap: '
      f'{_per_setting(summary, "max_test_per_task")}; with a cap, not the '
      'whole test split); '
      'the same documents for every method of a seed, and each seed draws '
      'its own tasks. ACC is the mean over the (client, task) pairs of the '
      'accuracy after the last task.',
      '* **Protocol:** task-incremental (the task is known at test time: '
      'its own head and weights), as on '
      '[fcl.md](../fcl.md#what-the-model-saw); '
      'the settings differ only as the Settings table below says. Each '
      'setting\'s report, `results.md` in the folder of its '
      'name (the main setting\'s in this folder), opens with its own '
      '"What the model saw".',
      '* [The verdict rule](../README.md#the-verdict-rule): '
      f'{intervals.VERDICT_RULE} Here the bootstrap over test examples '
      'resamples the (client, task) pairs of every seed.', '',
      'Over every (client, task) pair of every seed; a document is counted '
      'once per (client, task) set that holds it:', '',
      '| setting | dataset | training documents per (client, task) '
      f'| test documents {cut_header} | training documents {cut_header} |',
      '|---|---|---:|---:|---:|']
  for row in summary['rows']:
    inputs = row.get('inputs')
    if inputs is None:
      cells = ['not recorded'] * 3
    else:
      low, high = (inputs['train_documents_min'],
                   inputs['train_documents_max'])
      cells = [
          (f'{low:,}' if low == high else f'{low:,}–{high:,}')
          + f' (mean {inputs["train_documents_mean"]:,.0f})',
          _cut(inputs['test_documents_cut'], inputs['test_documents']),
          _cut(inputs['train_documents_cut'], inputs['train_documents'])]
    lines.append(f'| {row["setting"]} | {row["dataset"]} | '
                 + ' | '.join(cells) + ' |')
  return lines + ['']


def markdown(summary: Mapping[str, Any]) -> str:
  """The settings table and the results table of `summary`."""
  lines = [
      '# FCL: every setting of the benchmark side by side', '',
      'Which setting, if any, lets FedSeIT\'s foreign knowledge or SIT\'s '
      'selection help: the ACC of the methods that transfer (mean over '
      'seeds, %) and the paired differences in points, with the Student-t '
      'interval over seeds and the paired bootstrap over (client, task) '
      'pairs, and one verdict from both.', '',
      *_what_the_model_saw(summary),
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
