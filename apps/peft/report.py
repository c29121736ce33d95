"""The report of the fine-tuning variants: `results.json`, `results.md`, a PNG.

The report opens with "What the model saw" (`peft_setting`: the capped
training subsets, what the tokenizer cut and how many test queries can
therefore never match, the test set, the protocol and the verdict rule).
`summarize` reads each variant's seed summary (`text2sql_benchmark.report_runs`)
and writes, per variant and method: test exact match (MacroAvg and MicroAvg;
means over seeds with their t intervals) and teacher-forced token accuracy,
the bytes each client downloads and uploads per round (the runs' own
`communication` records) and how many times fewer than full fine-tuning of
the pre-trained model (`REFERENCE`), and the runs' mean round time (beside
the round times `peft_benchmark.time_rounds` measured side by side, when
present). Two sets of paired differences follow
(`text2sql_summary.difference_json`: the t interval over seeds and the paired
bootstrap over test examples, for exact match and token accuracy), each
with the one verdict `intervals.comparison_verdict` gives (the rule every
results page follows, `intervals.VERDICT_RULE`): each variant against
`REFERENCE` with the same method, and, within each variant, Lorar against
num_examples weighting. `TOKEN_PLOT_FILE` shows each variant's
token accuracy (mean, 95 % interval, seeds) with its bytes per round.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import dataclasses
import functools
import json
import os
from typing import Any, Optional

import numpy as np

from tff_nlp import errors
from apps.common import plots
from apps.common import report_engine as engine
from tff_nlp import training as training_lib
from apps.peft import setting as peft_setting
from apps.text2sql import experiment as text2sql
from apps.text2sql import seed_runs as text2sql_seed_runs
from apps.text2sql import summary as text2sql_summary
from tff_nlp.metrics import bootstrap as bootstrap_lib
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


@dataclasses.dataclass(frozen=True)
class PaperClaim:
  """A published claim this comparison speaks to, with its numbers.

  Attributes:
    key: Its name in `results.json`'s `claims`.
    claim: The claim, in a few words.
    source: Paper, table and setting.
    paper: The paper's numbers (percent).
    comparisons: Which of the report's differences measure it:
      'differences' (each LoRA variant minus `REFERENCE`) or
      'lorar_vs_num_examples'.
  """
  key: str
  claim: str
  source: str
  paper: str
  comparisons: str


PAPER_CLAIMS = (
    PaperClaim(
        key='lora_matches_full_fine_tuning',
        claim='LoRA matches full fine-tuning with far fewer trained '
        'parameters',
        source='Hu et al., LoRA, ICLR 2022: Table 4 (GPT-3 175B, WikiSQL '
        'text-to-SQL, accuracy) and Table 2 (RoBERTa-base, GLUE mean)',
        paper='WikiSQL: LoRA 73.4 (4.7M trained) vs full 73.8 (175,255.8M); '
        'GLUE: LoRA 87.2 (0.3M) vs full 86.4 (125.0M)',
        comparisons='differences'),
    PaperClaim(
        key='lorar_raises_fedavg',
        claim='Lorar weighting raises FedAvg\'s MacroAvg exact match',
        source='Zhang et al., ACL 2023: Table 2 (T5-base, the eight '
        'clients, 60 rounds)',
        paper='FedAvg 40.03 -> FedAvg + Lorar 60.16 (+20.13)',
        comparisons='lorar_vs_num_examples'),
)
# Seeds a verdict on a claim needs (DEVELOPERS.md: >= 3 per comparison).
CLAIM_SEEDS = 3


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


def _differences(summaries: Mapping[str, Mapping[str, Any]],
                 seed_runs: Callable[[str, str],
                                     list[text2sql_seed_runs.SeedRun]],
                 a_name: str, b_name: str) -> dict[str, Any]:
  """Variant `a_name` minus `b_name`, per method both ran, keyed
  '<a_name>-<method>': `text2sql_summary.difference_json` over paired
  seeds and the paired bootstrap over test examples. `seed_runs(variant,
  method)` reads a variant's runs of a method."""
  differences = collections.OrderedDict()
  for slug in summaries[a_name]['methods']:
    if slug not in summaries[b_name]['methods']:
      continue
    differences[f'{a_name}-{slug}'] = text2sql_summary.difference_json(
        seed_runs(a_name, slug), seed_runs(b_name, slug),
        text2sql_summary.Bootstrap(bootstrap_lib.DEFAULT_NUM_REPLICATES,
                                   intervals.DEFAULT_CONFIDENCE, 0),
        a_name=a_name, b_name=b_name)
  return differences


def summarize(variants: Sequence[Any],
              summaries: Mapping[str, Mapping[str, Any]], *,
              output_dir: str, command: str = '',
              split_sizes: Optional[Mapping[str, Mapping[str, int]]] = None
              ) -> dict[str, Any]:
  """Writes the report of finished variants; returns `results.json`'s content.

  Args:
    variants: The finished variants (`peft_benchmark.Variant`s).
    summaries: Variant name -> its `text2sql_benchmark.report_runs` summary.
    output_dir: The benchmark directory: the variants' runs are in
      `<output_dir>/<variant>/`; the report is written there.
    command: The command line, recorded in `results.md`.
    split_sizes: Client -> split -> examples in the data
      (`peft_setting.split_sizes`), so that "What the model saw" gives the
      training examples used of how many; None leaves that out.

  Returns:
    `units`, `command`, `reference`; `what_the_model_saw`
    (`peft_setting.setting_json` of every run reported); `variants`: per
    variant and method the exact match, token accuracy (MacroAvg, with seed
    intervals), traffic,
    round time and LoRA sizes; `differences`: each variant (and method) minus
    `REFERENCE` with the same method; `embedding_vs_lora`: each variant
    that adapts the token embedding too minus the same LoRA without it
    (`Variant.without_embedding`), where both ran; `lorar_vs_num_examples`:
    per variant and algorithm, Lorar minus num_examples weighting (from the
    variant's summary); `claims`: `paper_claims`; `baseline`; `round_time`
    (when timed); `figures`.
  """
  reference = summaries.get(REFERENCE)

  # A variant can enter several comparisons (the reference all of them, a
  # LoRA variant also its embedding variant's): its runs are read once.
  @functools.lru_cache(maxsize=None)
  def seed_runs(name: str, slug: str) -> list[text2sql_seed_runs.SeedRun]:
    return _seed_runs(summaries[name], slug, os.path.join(output_dir, name))

  content = collections.OrderedDict(
      units='fraction', command=command, reference=REFERENCE,
      what_the_model_saw=peft_setting.setting_json(
          collections.OrderedDict(
              (v.name, [peft_setting.read_run(run.run_dir)
                        for slug in summaries[v.name]['methods']
                        for run in seed_runs(v.name, slug)])
              for v in variants), split_sizes),
      variants=collections.OrderedDict(), differences=collections.OrderedDict(),
      embedding_vs_lora=collections.OrderedDict(),
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
      content['differences'].update(
          _differences(summaries, seed_runs, variant.name, REFERENCE))
  for variant in variants:
    plain = variant.without_embedding
    if plain in summaries:
      content['embedding_vs_lora'].update(
          _differences(summaries, seed_runs, variant.name, plain))
  first = next(iter(summaries.values()))
  content['baseline'] = first.get('baseline')
  timing_path = os.path.join(output_dir, TIMING_FILE)
  if os.path.exists(timing_path):
    with open(timing_path, encoding='utf-8') as f:
      content['round_time'] = json.load(f)
  content['claims'] = paper_claims(content)
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
    text += ' ' + engine.interval_cell(interval, digits=1)
  return text


def markdown(content: Mapping[str, Any]) -> str:
  """`results.md`: what the model saw (`peft_setting`), the variants'
  table, the differences from full and between the weightings, and the
  figure."""
  lines = [
      '# Federated LoRA vs full fine-tuning on the text-to-SQL clients', '',
      # Every results page opens with it (docs/results/README.md).
      *peft_setting.markdown_lines(content.get('what_the_model_saw') or ()),
      '## Results', '',
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
              '(token accuracy: each example weighing its tokens). Verdicts '
              'follow the rule under "What the model saw".', '',
              *_difference_table('Variant − full', content['differences'])]
  if content.get('embedding_vs_lora'):
    lines += ['', 'LoRA with the token embedding adapted too, minus the same '
              'LoRA without it (MacroAvg, percentage points; intervals and '
              'verdicts as above).', '',
              *_difference_table('Variant − LoRA without the embedding',
                                 content['embedding_vs_lora'])]
  if content.get('lorar_vs_num_examples'):
    lines += ['', 'Lorar minus num_examples weighting within each variant '
              '(MacroAvg, percentage points; intervals and verdicts as '
              'above).', '',
              *_difference_table('Variant: Lorar − num_examples',
                                 content['lorar_vs_num_examples'])]
  if content.get('claims'):
    lines += ['', '## The papers\' claims beside ours', '',
              'Ours: MacroAvg test differences in percentage points, with '
              'the intervals and verdicts of the tables above. Exact match is '
              'the papers\' metric; where it is 0.0 on both sides, only token '
              'accuracy can differ, and the verdict says so.']
    for claim in content['claims']:
      counts = collections.Counter(row['verdict'].split(':')[0]
                                   for row in claim['ours'])
      lines += ['', f'### {claim["claim"]}', '',
                f'{claim["source"]}. Paper: {claim["paper"]}.', '',
                '| Ours | Seeds | Difference | Verdict |', '|---|---:|---|---|',
                *(f'| {row["comparison"]} | {row["seeds"]} | {row["text"]} | '
                  f'{row["verdict"]} |' for row in claim['ours']),
                '', 'Verdicts: ' + '; '.join(
                    f'{verdict} ({count})' for verdict, count in
                    sorted(counts.items())) + '.']
  for name in content.get('figures', ()):
    lines += ['', f'![{name}]({name})']
  return '\n'.join(lines) + '\n'


def paper_claims(content: Mapping[str, Any]) -> list[dict[str, Any]]:
  """`PAPER_CLAIMS`, each with our measurements of it and a verdict.

  One row per comparison that measures the claim: every LoRA variant
  against full fine-tuning of the pre-trained model (same method), or
  Lorar against num_examples within every variant. A row's verdict:

  *   'not measurable yet' with fewer than `CLAIM_SEEDS` paired seeds;
  *   on exact match where either side's exact match is above 0;
      otherwise (0.0 in every run: nothing can differ) on token accuracy,
      and it says so;
  *   'reproduced' / 'contradicted' by the sign the claim expects, or
      'no difference' (`_verdict`: `intervals.comparison_verdict`, the one
      rule of every results page). For the LoRA claim, no difference
      reproduces it ("matches") and full fine-tuning higher contradicts it;
      for Lorar, only Lorar higher reproduces it.
  """
  claims = []
  for claim in PAPER_CLAIMS:
    rows = []
    for name, difference in content.get(claim.comparisons, {}).items():
      variant = name.split('-', 1)[0]
      if (claim.comparisons == 'differences'
          and not content['variants'][variant].get('lora_rank')):
        continue
      rows.append(_claim_row(claim, name, difference, content))
    claims.append(collections.OrderedDict(
        key=claim.key, claim=claim.claim, source=claim.source,
        paper=claim.paper, ours=rows))
  return claims


def _claim_row(claim: PaperClaim, name: str, difference: Mapping[str, Any],
               content: Mapping[str, Any]) -> dict[str, Any]:
  """One comparison's text and verdict for `paper_claims`."""
  variant, slug = name.split('-', 1)
  methods = content['variants'][variant]['methods']
  if claim.comparisons == 'differences':
    sides = [methods[slug], content['variants'][REFERENCE]['methods'][slug]]
  else:  # Lorar against num_examples within `variant`, `slug` an algorithm.
    sides = [methods[f'{slug}-lorar'], methods[f'{slug}-num_examples']]
  exact_match_zero = all(side['macro_avg'] == 0 for side in sides)
  metric = 'token_accuracy' if exact_match_zero else 'exact_match'
  entry = (difference.get('token_accuracy') if exact_match_zero
           else difference['exact_match']['macro_avg'])
  seeds = len(difference['paired_seeds'])
  text = (('EM 0.0 on both sides; token accuracy ' if exact_match_zero
           else 'EM ')
          + (f'{100 * entry["difference"]:+.1f} (seeds '
             f'{_ci_text(entry["seed_ci95"])}, bootstrap '
             f'{_ci_text(entry.get("bootstrap_ci95"))})' if entry else '–'))
  label = content['variants'][variant]['label']
  comparison = (f'{label}, {methods[slug]["label"]} − full'
                if claim.comparisons == 'differences'
                else f'{label}: Lorar − num_examples')
  return collections.OrderedDict(
      comparison=comparison, metric=metric, seeds=seeds, text=text,
      verdict=_claim_verdict(claim, entry, seeds, exact_match_zero))


def _claim_verdict(claim: PaperClaim, entry: Optional[Mapping[str, Any]],
                   seeds: int, exact_match_zero: bool) -> str:
  if entry is None or seeds < CLAIM_SEEDS:
    return f'not measurable yet: {seeds} of {CLAIM_SEEDS} seeds'
  verdict = _verdict(entry, 'A', 'B')
  if verdict == intervals.NO_DIFFERENCE:
    outcome = ('reproduced: no difference' if claim.comparisons ==
               'differences' else 'not reproduced: no difference')
  elif verdict in (intervals.UNDETERMINED, '–'):
    outcome = 'not measurable: no interval'
  elif entry['difference'] > 0:
    outcome = ('reproduced: LoRA higher' if claim.comparisons ==
               'differences' else 'reproduced in direction: Lorar higher')
  else:
    outcome = ('contradicted: full fine-tuning higher'
               if claim.comparisons == 'differences'
               else 'contradicted: num_examples higher')
  return outcome + (' (token accuracy; EM not measurable)'
                    if exact_match_zero else '')


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
      cells += engine.difference_cells(
          entry['difference'], engine.stored_bounds(entry['seed_ci95']),
          engine.stored_bounds(entry.get('bootstrap_ci95')),
          _verdict(entry, difference.get('a', 'A'), difference.get('b', 'B')),
          digits=1, missing='–')
    lines.append(engine.markdown_row(cells))
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


def _verdict(entry: Mapping[str, Any], a: str, b: str) -> str:
  """The verdict of a difference A - B (`text2sql_summary.difference_json`
  entry) by the one rule of every results page (`engine.stored_verdict`),
  from its seed and bootstrap intervals (the intervals' own verdicts in
  `entry` are not consulted)."""
  return engine.stored_verdict(entry.get('seed_ci95'),
                               entry.get('bootstrap_ci95'), a, b)


def _ci_text(interval) -> str:
  """A stored interval in signed percentage points, one decimal."""
  return engine.interval_cell(engine.stored_bounds(interval), signed=True,
                              digits=1, missing='–')
