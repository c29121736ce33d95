"""Full fine-tuning vs LoRA adapters on the federated text-to-SQL clients.

Issue 30's comparison: each `Variant` says where the parser starts (the
pre-trained model of a `pretrain_seq2seq` run, or from scratch; by default
with that run's tokenizer, so that the two starts differ in their weights
only) and what the clients train (the whole model, or LoRA adapters of
rank r). Every variant
runs every method (e.g. FedAvg with num_examples and with Lorar weighting)
with every seed through `text2sql_benchmark.collect_runs`, in
`<output_dir>/<variant>/` (each run cached under its configuration, so an
interrupted benchmark resumes). Runs go seed by seed across the variants, so
an interrupted benchmark has its first seeds' comparisons complete.

`summarize` then writes `results.json` and `results.md`: per variant and
method, test exact match (MacroAvg and MicroAvg; means over seeds with their
t intervals), the bytes each client downloads and uploads per round (from
the runs' own `communication` records) and how many times fewer than full
fine-tuning from the pre-trained model, the mean round time of the runs
(and, from `time_rounds`, round times measured side by side); and the paired
differences of each variant from full fine-tuning from the pre-trained model
(`text2sql_summary.difference_json`: seeds, and the paired bootstrap over
test examples), with the template-retrieval baseline beside them.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import json
import os
import shutil
from typing import Any, Optional

from absl import logging
import numpy as np

from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.benchmarks import text2sql_benchmark
from tff_nlp.experiments import text2sql
from tff_nlp.experiments import text2sql_seed_runs
from tff_nlp.experiments import text2sql_summary
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql_report
from tff_nlp.models import lora as lora_lib

RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
# `time_rounds`' measurement, which `summarize` reports when present.
TIMING_FILE = 'round_times.json'
# The reference the differences and byte ratios are taken against.
REFERENCE = 'pretrained_full'


@dataclasses.dataclass(frozen=True)
class Variant:
  """Where the parser starts and what the clients train.

  Attributes:
    name: The variant's name (its folder and its row in the report).
    pretrained: Whether the runs start from the pre-trained model (and its
      tokenizer).
    lora_rank: 0: the whole model is trained and sent; r > 0: LoRA
      adapters of rank r (on attention and feed-forward).
    pretrained_tokenizer: From scratch only: the model starts from fresh
      weights but tokenizes with the pre-trained model's tokenizer
      (`run_text2sql`'s `tokenizer_from`), so that it differs from the
      pre-trained start in its weights only: same pieces, same cut
      sequences, token accuracy in the same units. False: a tokenizer
      trained on the clients' own text (shorter SQL, another vocabulary).
  """

  name: str
  pretrained: bool
  lora_rank: int = 0
  pretrained_tokenizer: bool = False

  def __post_init__(self):
    if self.pretrained and self.pretrained_tokenizer:
      raise ValueError(
          f'Variant {self.name!r}: pretrained_tokenizer is for variants from '
          'scratch; a pre-trained start always has the pre-trained '
          'tokenizer.')

  @property
  def needs_pretrained_run(self) -> bool:
    return self.pretrained or self.pretrained_tokenizer

  @property
  def label(self) -> str:
    start = 'pre-trained' if self.pretrained else 'from scratch'
    what = f'LoRA r = {self.lora_rank}' if self.lora_rank else 'full'
    tokenizer = ''
    if not self.pretrained:
      tokenizer = (' (pre-trained tokenizer)' if self.pretrained_tokenizer
                   else ' (own tokenizer)')
    return f'{what}, {start}{tokenizer}'

  def settings(self, base: text2sql_benchmark.RunSettings,
               pretrained_dir: Optional[str]
               ) -> text2sql_benchmark.RunSettings:
    """`base` starting where this variant starts, training what it trains.

    Args:
      base: The settings every variant shares; its `lora` gives the
        adapters' other settings (alpha, targets; `LoraConfig()` if None),
        its `init_from` is replaced.
      pretrained_dir: The pre-trained model's run (`init_from` of the
        pre-trained variants, `tokenizer_from` of `pretrained_tokenizer`).
    """
    lora = None
    if self.lora_rank:
      lora = dataclasses.replace(base.lora or lora_lib.LoraConfig(),
                                 rank=self.lora_rank)
    return dataclasses.replace(
        base, init_from=pretrained_dir if self.pretrained else None,
        tokenizer_from=pretrained_dir if self.pretrained_tokenizer else None,
        lora=lora)


DEFAULT_VARIANTS = (
    # The control of the pre-trained start: its tokenizer, fresh weights.
    Variant('scratch_full', pretrained=False, pretrained_tokenizer=True),
    Variant(REFERENCE, pretrained=True),
    Variant('lora_r4', pretrained=True, lora_rank=4),
    Variant('lora_r8', pretrained=True, lora_rank=8),
    Variant('lora_r16', pretrained=True, lora_rank=16),
)


# The methods each variant runs unless told otherwise: FedAvg with the
# paper's baseline weighting and with Lorar.
DEFAULT_METHODS = ('fedavg/num_examples', 'fedavg/lorar')


# Known by name, not run by default.
OTHER_VARIANTS = (
    # From scratch with a tokenizer of the clients' own text.
    Variant('scratch_full_own_tokenizer', pretrained=False),
)


def parse_variants(names: Sequence[str]) -> list[Variant]:
  """Variants by name: those of `DEFAULT_VARIANTS` and `OTHER_VARIANTS`,
  or 'lora_r<rank>'."""
  known = {v.name: v for v in DEFAULT_VARIANTS + OTHER_VARIANTS}
  variants = []
  for name in names:
    name = name.strip()
    if name in known:
      variants.append(known[name])
    elif name.startswith('lora_r') and name[6:].isdigit() and int(name[6:]):
      variants.append(Variant(name, pretrained=True, lora_rank=int(name[6:])))
    else:
      raise errors.InputError(
          f'--variants: unknown variant {name!r}; expected one of '
          f'{sorted(known)} or lora_r<rank>.')
  if len({v.name for v in variants}) != len(variants):
    raise errors.InputError(f'--variants: repeated variants in {names}.')
  return variants


def run_peft_benchmark(
    settings: text2sql_benchmark.RunSettings,
    *,
    data_dir: Optional[str],
    output_dir: str,
    pretrained_dir: Optional[str],
    variants: Sequence[Variant],
    methods: Sequence[text2sql_report.MethodKey],
    seeds: Sequence[int],
    archive_dir: Optional[str] = None,
    train: bool = True,
    command: str = '',
) -> dict[str, Any]:
  """Runs (or reads back) every variant, method and seed; reports them.

  Args:
    settings: What every run shares (`text2sql_benchmark.RunSettings`);
      each variant replaces its start and adapters (`Variant.settings`).
    data_dir: The `shared/data` folder; None finds it.
    output_dir: The benchmark directory.
    pretrained_dir: A finished `pretrain_seq2seq` (or text-to-SQL) run, the
      start of the pre-trained variants; None only if no variant needs it.
    variants: The variants (`parse_variants`).
    methods: The federated methods (`text2sql_benchmark.parse_method`).
    seeds: The training seeds.
    archive_dir: Finished runs' records are archived to, and read back
      from, `<archive_dir>/<variant>/`.
    train: False: report the finished runs only; a variant with none is
      left out (logged).
    command: The command line, recorded in `results.md`.

  Returns:
    The content of `results.json` (`summarize`).

  Raises:
    InputError: A pre-trained variant without `pretrained_dir`, or no
      variant, method or seed.
  """
  _check_variants(variants, pretrained_dir)
  variant_settings = {v: v.settings(settings, pretrained_dir)
                      for v in variants}

  def collect(variant, variant_seeds, variant_train):
    return text2sql_benchmark.collect_runs(
        variant_settings[variant], data_dir=data_dir,
        output_dir=os.path.join(output_dir, variant.name), methods=methods,
        seeds=variant_seeds, train=variant_train,
        archive_dir=archive_dir and os.path.join(archive_dir, variant.name))

  if train:
    # Seed by seed across the variants: a stopped benchmark has every
    # variant at the same number of seeds.
    for seed in seeds:
      for variant in variants:
        collect(variant, [seed], True)
  # A benchmark still accumulating its seeds reports the variants that have
  # a finished run (a stopped benchmark may not have reached them all).
  runs = collections.OrderedDict(
      (v, collect(v, list(seeds), False)) for v in variants)
  finished = [v for v in variants if runs[v]]
  for variant in variants:
    if not runs[variant]:
      logging.warning('%s: no finished run yet, left out of the report.',
                      variant.name)
  if not finished:
    raise errors.InputError(
        f'{output_dir}: no finished run of any variant to report.')
  summaries = collections.OrderedDict(
      (v.name, text2sql_benchmark.report_runs(
          runs[v], variant_settings[v], data_dir=data_dir,
          output_dir=os.path.join(output_dir, v.name), command=command))
      for v in finished)
  return summarize(finished, summaries, output_dir=output_dir,
                   command=command)


def _check_variants(variants: Sequence[Variant],
                    pretrained_dir: Optional[str]) -> None:
  if not variants:
    raise errors.InputError('--variants: no variant given.')
  needing = [v.name for v in variants if v.needs_pretrained_run]
  if needing and not pretrained_dir:
    raise errors.InputError(
        f'The variants {needing} need --pretrained_dir (a finished '
        'pretrain_seq2seq run, e.g. make pretrain: runs/pretrain_cpu): its '
        'model or its tokenizer.')


def time_rounds(settings: text2sql_benchmark.RunSettings, *,
                data_dir: Optional[str], output_dir: str,
                pretrained_dir: Optional[str], variants: Sequence[Variant],
                method: text2sql_report.MethodKey, rounds: int = 3,
                repeats: int = 2) -> dict[str, Any]:
  """Each variant's round time, measured side by side; writes `TIMING_FILE`.

  The runs' own round times are only comparable if the machine was equally
  loaded during each (not so on a shared machine, or when a run resumes
  elsewhere). Here every variant runs `rounds` rounds of `method`, then the
  next variant, `repeats` times, every other pass in reverse order, so that
  each variant sees the same load on average. A round's time is that of
  `process.next` (`training.run_training`'s `round_seconds`); the first
  round of each run compiles the computation and is left out. Only one
  example per client is decoded at the end (`max_eval_examples=1`). Each
  variant's process is built (traced) once, for its first pass. A
  finished timing run is read back; an unfinished one (interrupted) is
  timed again from its start, so that no round after a restart counts.

  Args:
    settings, data_dir, output_dir, pretrained_dir, variants: As
      `run_peft_benchmark`'s; the runs are in
      `<output_dir>/timing/pass<i>/<variant>/runs/`, named by their
      settings as the benchmark's (`text2sql_benchmark.run_dir_for`), with
      `settings.loop.seed`.
    method: The method timed (e.g. `('federated', 'fedavg',
      'num_examples')`).
    rounds: Rounds per run (>= 2).
    repeats: Runs per variant.

  Returns:
    The content of `TIMING_FILE`: per variant its steady round times
    (`round_seconds`), their median, `REFERENCE`'s median over it
    (`speedup_over_full`; absent without `REFERENCE`), and the bytes each
    client downloads and uploads per round (`bytes_down_per_client`,
    `bytes_up_per_client`: the runs' `communication` records, the same in
    every round and pass).
  """
  if rounds < 2 or repeats < 1:
    raise errors.InputError(
        f'--time_rounds={rounds} and --timing_repeats={repeats}: timing '
        'needs at least 2 rounds (the first compiles) and 1 repeat.')
  _check_variants(variants, pretrained_dir)
  timing = dataclasses.replace(
      settings, data=dataclasses.replace(settings.data, max_eval_examples=1),
      loop=dataclasses.replace(settings.loop, rounds=rounds,
                               eval_every=rounds, evaluate_initial=False))
  processes = training_lib.ProcessCache()
  times = collections.OrderedDict((v.name, []) for v in variants)
  traffic = {}
  for repeat in range(repeats):
    order = variants if repeat % 2 == 0 else list(reversed(variants))
    for variant in order:
      run = variant.settings(timing, pretrained_dir).for_run(
          method, settings.loop.seed)
      # Named by what defines the run, as the benchmark's runs: a timing
      # of other settings is not read back.
      run_dir = run.run_dir(
          os.path.join(output_dir, 'timing', f'pass{repeat}', variant.name),
          method)
      if text2sql_benchmark.finished_results(run_dir, rounds) is None:
        shutil.rmtree(run_dir, ignore_errors=True)
        logging.info('Timing %s, pass %d, in %s', variant.name, repeat,
                     run_dir)
        run.run(data_dir=data_dir, output_dir=run_dir, processes=processes)
      records = training_lib.read_json_lines(
          os.path.join(run_dir, 'federated', 'metrics.jsonl'))
      times[variant.name] += [r['round_seconds'] for r in records
                              if 'round_seconds' in r and r['round'] > 1]
      if variant.name not in traffic:  # The same bytes in every pass.
        traffic[variant.name] = _run_traffic(run_dir)
  content = collections.OrderedDict(
      method=text2sql_report.method_slug(method), rounds=rounds,
      repeats=repeats, variants=collections.OrderedDict())
  for name, seconds in times.items():
    content['variants'][name] = collections.OrderedDict(
        round_seconds=seconds, median=float(np.median(seconds)),
        bytes_down_per_client=traffic[name]['bytes_down_per_client'],
        bytes_up_per_client=traffic[name]['bytes_up_per_client'])
  if REFERENCE in times:
    reference = content['variants'][REFERENCE]['median']
    for entry in content['variants'].values():
      entry['speedup_over_full'] = reference / entry['median']
  os.makedirs(output_dir, exist_ok=True)
  training_lib.write_json(os.path.join(output_dir, TIMING_FILE), content)
  return content


def _run_traffic(run_dir: str, unit: str = 'federated') -> dict[str, float]:
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


def summarize(variants: Sequence[Variant],
              summaries: Mapping[str, Mapping[str, Any]], *,
              output_dir: str, command: str = '') -> dict[str, Any]:
  """The report of finished variants (each a `text2sql_benchmark.report_runs`
  summary)."""
  reference = summaries.get(REFERENCE)
  content = collections.OrderedDict(
      units='fraction', command=command, reference=REFERENCE,
      variants=collections.OrderedDict(), differences=collections.OrderedDict())
  for variant in variants:
    summary = summaries[variant.name]
    variant_dir = os.path.join(output_dir, variant.name)
    methods = collections.OrderedDict()
    for slug, method in summary['methods'].items():
      exact_match = method['test']['exact_match']
      seeds = [os.path.normpath(os.path.join(variant_dir, s['run_dir']))
               for s in method['seeds']]
      traffic = [_run_traffic(run_dir) for run_dir in seeds]
      entry = collections.OrderedDict(
          label=method['label'], num_seeds=method['num_seeds'],
          macro_avg=exact_match['macro_avg'],
          macro_avg_ci95=exact_match['macro_avg_ci95'],
          micro_avg=exact_match['micro_avg'],
          micro_avg_ci95=exact_match['micro_avg_ci95'],
          # Teacher-forced test token accuracy: it separates models whose
          # exact match is still 0 (small models trained for few rounds).
          token_accuracy=_macro(method.get('test_token_accuracy')),
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
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE), content)
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write(markdown(content))
  return content


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
  """`results.md`: the variants' table and the differences from full."""
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
              '| Variant − full | EM difference | Seeds 95% CI | Bootstrap '
              '95% CI | Verdict | Token accuracy difference | Seeds 95% CI | '
              'Bootstrap 95% CI | Verdict |',
              '|---|---:|---|---|---|---:|---|---|---|']
    for name, difference in content['differences'].items():
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
  return '\n'.join(lines) + '\n'


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
