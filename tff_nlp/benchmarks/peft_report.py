"""The report of the fine-tuning variants: `results.json`, `results.md`, a PNG.

`summarize` reads each variant's seed summary (`text2sql_benchmark.report_runs`)
and writes, per variant and method: test exact match (MacroAvg and MicroAvg;
means over seeds with their t intervals) and teacher-forced token accuracy,
the bytes each client downloads and uploads per round (the runs' own
`communication` records) and how many times fewer than full fine-tuning of
the pre-trained model (`REFERENCE`), and the runs' mean round time (beside
the round times `peft_benchmark.time_rounds` measured side by side, when
present). Two sets of paired differences follow
(`text2sql_summary.difference_json`: the t interval over seeds and the paired
bootstrap over test examples, for exact match and token accuracy): each
variant against `REFERENCE` with the same method, and, within each variant,
Lorar against num_examples weighting. `TOKEN_PLOT_FILE` shows each variant's
token accuracy (mean, 95 % interval, seeds) with its bytes per round.
"""

import collections
from collections.abc import Mapping, Sequence
import json
import os
from typing import Any, Optional

import numpy as np

from tff_nlp import errors
from tff_nlp import plots
from tff_nlp import training as training_lib
from tff_nlp.experiments import text2sql
from tff_nlp.experiments import text2sql_seed_runs
from tff_nlp.experiments import text2sql_summary
from tff_nlp.metrics import intervals

RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
TOKEN_PLOT_FILE = 'token_accuracy.png'
# `peft_benchmark.time_rounds`' measurement, which `summarize` reports when
# present.
TIMING_FILE = 'round_times.json'
# The variant the differences and byte ratios are taken against: full
# fine-tuning of the pre-trained model.
REFERENCE = 'pretrained_full'


def run_traffic(run_dir: str, unit: str = 'federated') -> dict[str, float]:
  """Mean bytes per client and round, and mean round seconds, of a run."""
  records = training_lib.read_json_lines(
      os.path.join(run_dir, unit, 'metrics.jsonl'))
  trained = [r for r in records if 'communication' in r]
  if not trained:
    raise errors.InputError(f'{run_dir}: no trained round in its metrics.')
  return collections.OrderedDict(
      bytes_down_per_client=float(np.mean(
          [r['communication']['bytes_down_per_client'] for r in trained])),
      bytes_up_per_client=float(np.mean(
          [r['communication']['bytes_up_per_client'] for r in trained])),
      round_seconds=float(np.mean([r['round_seconds'] for r in trained])))


def _seed_runs(summary: Mapping[str, Any], slug: str, output_dir: str
               ) -> list[text2sql_seed_runs.SeedRun]:
  return [text2sql_seed_runs.read_run(
      os.path.normpath(os.path.join(output_dir, seed['run_dir'])),
      seed=seed['seed']) for seed in summary['methods'][slug]['seeds']]


def summarize(variants: Sequence[Any],
              summaries: Mapping[str, Mapping[str, Any]], *,
              output_dir: str, command: str = '') -> dict[str, Any]:
  """Writes the report of finished variants; returns `results.json`'s content.

  Args:
    variants: The finished variants (`peft_benchmark.Variant`s).
    summaries: Variant name -> its `text2sql_benchmark.report_runs` summary.
    output_dir: The benchmark directory: the variants' runs are in
      `<output_dir>/<variant>/`; the report is written there.
    command: The command line, recorded in `results.md`.

  Returns:
    `units`, `command`, `reference`; `variants`: per variant and method the
    exact match, token accuracy (MacroAvg, with seed intervals), traffic,
    round time and LoRA sizes; `differences`: each variant (and method) minus
    `REFERENCE` with the same method; `lorar_vs_num_examples`: per variant
    and algorithm, Lorar minus num_examples weighting (from the variant's
    summary); `baseline`; `round_time` (when timed); `figures`.
  """
  reference = summaries.get(REFERENCE)
  content = collections.OrderedDict(
      units='fraction', command=command, reference=REFERENCE,
      variants=collections.OrderedDict(), differences=collections.OrderedDict(),
      lorar_vs_num_examples=collections.OrderedDict())
  for variant in variants:
    summary = summaries[variant.name]
    variant_dir = os.path.join(output_dir, variant.name)
    methods = collections.OrderedDict()
    for slug, method in summary['methods'].items():
      exact_match = method['test']['exact_match']
      seeds = [os.path.normpath(os.path.join(variant_dir, s['run_dir']))
               for s in method['seeds']]
      traffic = [run_traffic(run_dir) for run_dir in seeds]
      entry = collections.OrderedDict(
          label=method['label'], num_seeds=method['num_seeds'],
          macro_avg=exact_match['macro_avg'],
          macro_avg_ci95=exact_match['macro_avg_ci95'],
          micro_avg=exact_match['micro_avg'],
          micro_avg_ci95=exact_match['micro_avg_ci95'],
          # Teacher-forced test token accuracy: it separates models whose
          # exact match is still 0 (small models trained for few rounds).
          token_accuracy=_macro(method.get('test_token_accuracy')),
          token_accuracy_per_seed=(
              None if any(not s['test_tokens'] for s in method['seeds'])
              else [s['test_tokens']['macro_avg'] for s in method['seeds']]),
          seconds=method['seconds'])
      for key in traffic[0]:
        entry[key] = float(np.mean([t[key] for t in traffic]))
      with open(os.path.join(seeds[0], text2sql.RESULTS_FILE)) as f:
        entry['lora'] = json.load(f).get('lora')
      methods[slug] = entry
    content['variants'][variant.name] = collections.OrderedDict(
        label=variant.label, pretrained=variant.pretrained,
        pretrained_tokenizer=variant.pretrained or variant.pretrained_tokenizer,
        lora_rank=variant.lora_rank, methods=methods)
    for algorithm, difference in summary.get(
        'lorar_vs_num_examples', {}).items():
      content['lorar_vs_num_examples'][f'{variant.name}-{algorithm}'] = (
          difference)
  if reference is not None:
    reference_methods = content['variants'][REFERENCE]['methods']
    for variant in variants:
      for slug, entry in content['variants'][variant.name]['methods'].items():
        if slug in reference_methods:
          entry['bytes_fewer_than_full'] = (
              reference_methods[slug]['bytes_down_per_client']
              + reference_methods[slug]['bytes_up_per_client']) / (
                  entry['bytes_down_per_client']
                  + entry['bytes_up_per_client'])
      if variant.name == REFERENCE:
        continue
      for slug in summaries[variant.name]['methods']:
        if slug not in reference['methods']:
          continue
        a = _seed_runs(summaries[variant.name], slug,
                       os.path.join(output_dir, variant.name))
        b = _seed_runs(reference, slug, os.path.join(output_dir, REFERENCE))
        difference = text2sql_summary.difference_json(
            a, b, text2sql_summary.Bootstrap(
                intervals.DEFAULT_NUM_REPLICATES,
                intervals.DEFAULT_CONFIDENCE, 0), a_name=variant.name,
            b_name=REFERENCE)
        content['differences'][f'{variant.name}-{slug}'] = difference
  first = next(iter(summaries.values()))
  content['baseline'] = first.get('baseline')
  timing_path = os.path.join(output_dir, TIMING_FILE)
  if os.path.exists(timing_path):
    with open(timing_path, encoding='utf-8') as f:
      content['round_time'] = json.load(f)
  os.makedirs(output_dir, exist_ok=True)
  content['figures'] = _write_token_plot(content, output_dir)
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE), content)
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write(markdown(content))
  return content


def _write_token_plot(content: Mapping[str, Any], output_dir: str
                      ) -> list[str]:
  """`TOKEN_PLOT_FILE`, one row per variant and method with token counts;
  returns the file names written."""
  rows = collections.OrderedDict()
  for variant in content['variants'].values():
    for entry in variant['methods'].values():
      if entry['token_accuracy_per_seed'] is None:
        continue
      accuracy = entry['token_accuracy']
      megabytes = (entry['bytes_down_per_client']
                   + entry['bytes_up_per_client']) / 1e6
      rows[f'{variant["label"]}, {entry["label"]} '
           f'({megabytes:.2f} MB per client-round)'] = (
          100 * accuracy['macro_avg'],
          (None if accuracy['macro_avg_ci95'] is None
           else [100 * x for x in accuracy['macro_avg_ci95']]),
          [100 * x for x in entry['token_accuracy_per_seed']])
  if not rows:
    return []
  plots.plot_intervals(
      rows, os.path.join(output_dir, TOKEN_PLOT_FILE),
      x_label='MacroAvg test token accuracy (%)',
      title='Teacher-forced: mean over seeds, 95% CI')
  return [TOKEN_PLOT_FILE]


def _macro(summary: Optional[Mapping[str, Any]]
           ) -> Optional[dict[str, Any]]:
  """{'macro_avg', 'macro_avg_ci95'} of a seed summary, or None."""
  if not summary:
    return None
  return collections.OrderedDict(macro_avg=summary['macro_avg'],
                                 macro_avg_ci95=summary['macro_avg_ci95'])


def _percent(value: float, interval=None) -> str:
  text = f'{100 * value:.1f}'
  if interval:
    text += f' [{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]'
  return text


def markdown(content: Mapping[str, Any]) -> str:
  """`results.md`: the variants' table, the differences from full and
  between the weightings, and the figure."""
  lines = [
      '# Federated LoRA vs full fine-tuning on the text-to-SQL clients', '',
      f'Command: `{content["command"]}`' if content['command'] else '', '',
      '| Variant | Method | Seeds | MacroAvg EM [95% CI] | MicroAvg EM | '
      'MacroAvg token accuracy [95% CI] | '
      'Bytes down / up per client-round | × fewer than full | '
      'Round (s), as run |',
      '|---|---|---:|---|---|---|---|---:|---:|']
  for variant in content['variants'].values():
    for entry in variant['methods'].values():
      ratio = entry.get('bytes_fewer_than_full')
      lines.append(
          f'| {variant["label"]} | {entry["label"]} | {entry["num_seeds"]} | '
          f'{_percent(entry["macro_avg"], entry["macro_avg_ci95"])} | '
          f'{_percent(entry["micro_avg"], entry["micro_avg_ci95"])} | '
          f'{_token_text(entry.get("token_accuracy"))} | '
          f'{entry["bytes_down_per_client"]:,.0f} / '
          f'{entry["bytes_up_per_client"]:,.0f} | '
          f'{"–" if ratio is None else f"{ratio:.1f}×"} | '
          f'{entry["round_seconds"]:.1f} |')
  baseline = content.get('baseline')
  if baseline:
    em = baseline['test']['exact_match']
    lines.append(f'| {baseline["label"]} | – | – | '
                 f'{_percent(em["macro_avg"])} | {_percent(em["micro_avg"])} '
                 '| – | 0 / 0 | – | – |')
  lines += _round_time_lines(content.get('round_time'))
  if content['differences']:
    lines += ['', 'Differences from full fine-tuning of the pre-trained '
              'model (MacroAvg, percentage points): the t interval over '
              'paired seeds and the paired bootstrap over test examples '
              '(token accuracy: each example weighing its tokens). A '
              'difference is called only where every interval shown excludes '
              '0 on the same side.', '',
              *_difference_table('Variant − full', content['differences'])]
  if content.get('lorar_vs_num_examples'):
    lines += ['', 'Lorar minus num_examples weighting within each variant '
              '(MacroAvg, percentage points; intervals and verdicts as '
              'above).', '',
              *_difference_table('Variant: Lorar − num_examples',
                                 content['lorar_vs_num_examples'])]
  for name in content.get('figures', ()):
    lines += ['', f'![{name}]({name})']
  return '\n'.join(lines) + '\n'


def _difference_table(title: str, differences: Mapping[str, Any]
                      ) -> list[str]:
  """Rows of A − B differences (`text2sql_summary.difference_json`): EM and
  token accuracy, each with both intervals and one verdict."""
  lines = [f'| {title} | EM difference | Seeds 95% CI | Bootstrap 95% CI | '
           'Verdict | Token accuracy difference | Seeds 95% CI | Bootstrap '
           '95% CI | Verdict |',
           '|---|---:|---|---|---|---:|---|---|---|']
  for name, difference in differences.items():
    cells = [name]
    for entry in (difference['exact_match']['macro_avg'],
                  difference.get('token_accuracy')):
      if not entry:
        cells += ['–'] * 4
        continue
      cells += [f'{100 * entry["difference"]:+.1f}',
                _ci_text(entry['seed_ci95']),
                _ci_text(entry.get('bootstrap_ci95')), _verdict(entry)]
    lines.append('| ' + ' | '.join(cells) + ' |')
  return lines


def _token_text(token_accuracy: Optional[Mapping[str, Any]]) -> str:
  if not token_accuracy:
    return '–'
  return _percent(token_accuracy['macro_avg'],
                  token_accuracy['macro_avg_ci95'])


def _round_time_lines(timing: Optional[Mapping[str, Any]]) -> list[str]:
  """The side-by-side round times (`time_rounds`), if measured."""
  lines = ['', '"Round (s), as run" is the mean `process.next` time of the '
           'runs above, each under whatever else the machine was running.']
  if not timing:
    return lines + ['Side by side (`--time_rounds`): not measured.']
  lines += [
      f'Side by side (`--time_rounds={timing["rounds"]}`, '
      f'{timing["repeats"]} interleaved passes of {timing["method"]}; the '
      'first round of each run, which compiles, left out):', '',
      '| Variant | Bytes down / up per client-round | × fewer than full | '
      'Rounds timed | Median round (s) | Range (s) | × faster than full |',
      '|---|---|---:|---:|---:|---|---:|']
  variants = timing['variants']
  reference = variants.get(REFERENCE)
  for name, entry in variants.items():
    seconds = entry['round_seconds']
    speedup = entry.get('speedup_over_full')
    # Timings written before the bytes were recorded have none.
    down, up = (entry.get('bytes_down_per_client'),
                entry.get('bytes_up_per_client'))
    fewer = None
    if down is not None and reference and 'bytes_down_per_client' in reference:
      fewer = (reference['bytes_down_per_client']
               + reference['bytes_up_per_client']) / (down + up)
    lines.append(
        f'| {name} | '
        f'{"–" if down is None else f"{down:,.0f} / {up:,.0f}"} | '
        f'{"–" if fewer is None else f"{fewer:.1f}×"} | '
        f'{len(seconds)} | {entry["median"]:.1f} | '
        f'{min(seconds):.1f}–{max(seconds):.1f} | '
        f'{"–" if speedup is None else f"{speedup:.2f}"} |')
  return lines


def _verdict(entry: Mapping[str, Any]) -> str:
  """One verdict from a difference's seed and bootstrap verdicts: theirs if
  they agree (or only one is determined: one seed leaves the seed interval
  undetermined), else 'no difference'."""
  verdicts = [entry.get(f'{key}_verdict') for key in ('seed', 'bootstrap')]
  determined = {v for v in verdicts
                if v is not None and v != intervals.UNDETERMINED}
  if not determined:
    return intervals.UNDETERMINED if intervals.UNDETERMINED in verdicts else '–'
  return (determined.pop() if len(determined) == 1
          else intervals.NO_DIFFERENCE)


def _ci_text(interval) -> str:
  if not interval:
    return '–'
  if isinstance(interval, Mapping):
    interval = (interval['low'], interval['high'])
  return f'[{100 * interval[0]:+.1f}, {100 * interval[1]:+.1f}]'
