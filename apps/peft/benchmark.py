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

A `PeftBenchmarkSpec` says what a comparison is (the shared settings, the
variants, methods and seeds, the pre-trained run), refusing options that do
not fit together; `run_peft_benchmark(spec, data_dir=..., output_dir=...)`
runs it there.

`peft_report.summarize` then writes the report, opening with what the
model saw (`peft_setting`: training subsets, cuts, test set, protocol, the
verdict rule), then each variant's exact match, token accuracy, bytes per
client and round and round time, its paired differences from full
fine-tuning of the pre-trained model, and Lorar against num_examples within
each variant, with the template-retrieval baseline beside them.
`time_rounds` measures the variants' round times side by side, which the
report shows when present.
"""

import collections
from collections.abc import Sequence
import dataclasses
import os
import re
import shutil
from typing import Any, Optional

from absl import logging
import numpy as np

from tff_nlp import errors
from tff_nlp import training as training_lib
from apps.peft import report as peft_report
from apps.peft import setting as peft_setting
from apps.text2sql import benchmark as text2sql_benchmark
from apps.text2sql import report as text2sql_report
from tff_nlp.models import lora as lora_lib

REFERENCE = peft_report.REFERENCE


@dataclasses.dataclass(frozen=True)
class Variant:
  """Where the parser starts and what the clients train.

  Attributes:
    name: The variant's name (its folder and its row in the report).
    pretrained: Whether the runs start from the pre-trained model (and its
      tokenizer).
    lora_rank: 0: the whole model is trained and sent; r > 0: LoRA
      adapters of rank r (on the settings' `lora.targets`: by default
      attention and feed-forward).
    lora_embedding: With LoRA: the token embedding table (tied: the output
      projection too) gets an adapter as well (`lora.EMBEDDING`).
    pretrained_tokenizer: From scratch only: the model starts from fresh
      weights but tokenizes with the pre-trained model's tokenizer
      (`Text2SqlSpec`'s `tokenizer_from`), so that it differs from the
      pre-trained start in its weights only: same pieces, same cut
      sequences, token accuracy in the same units. False: a tokenizer
      trained on the clients' own text (shorter SQL, another vocabulary).
  """

  name: str
  pretrained: bool
  lora_rank: int = 0
  pretrained_tokenizer: bool = False
  lora_embedding: bool = False

  def __post_init__(self):
    if self.pretrained and self.pretrained_tokenizer:
      raise ValueError(
          f'Variant {self.name!r}: pretrained_tokenizer is for variants from '
          'scratch; a pre-trained start always has the pre-trained '
          'tokenizer.')
    if self.lora_embedding and not self.lora_rank:
      raise ValueError(f'Variant {self.name!r}: lora_embedding needs a '
                       'lora_rank.')

  @property
  def needs_pretrained_run(self) -> bool:
    return self.pretrained or self.pretrained_tokenizer

  @property
  def without_embedding(self) -> Optional[str]:
    """With `lora_embedding`: the name of the same LoRA without it, which
    the report compares this variant with (`peft_report.summarize`'s
    `embedding_vs_lora`); otherwise None."""
    return f'lora_r{self.lora_rank}' if self.lora_embedding else None

  @property
  def label(self) -> str:
    start = 'pre-trained' if self.pretrained else 'from scratch'
    what = f'LoRA r = {self.lora_rank}' if self.lora_rank else 'full'
    if self.lora_embedding:
      what += ' + embedding'
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
      if self.lora_embedding and lora_lib.EMBEDDING not in lora.targets:
        lora = dataclasses.replace(
            lora, targets=lora.targets + (lora_lib.EMBEDDING,))
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


# 'lora_r<rank>' or 'lora_r<rank>_embedding'.
_LORA_NAME = re.compile(r'lora_r([0-9]+)(_embedding)?')


def parse_variants(names: Sequence[str]) -> list[Variant]:
  """Variants by name: those of `DEFAULT_VARIANTS` and `OTHER_VARIANTS`,
  or 'lora_r<rank>' (and 'lora_r<rank>_embedding': the token embedding
  adapted too)."""
  known = {v.name: v for v in DEFAULT_VARIANTS + OTHER_VARIANTS}
  variants = []
  for name in names:
    name = name.strip()
    lora_name = _LORA_NAME.fullmatch(name)
    if name in known:
      variants.append(known[name])
    elif lora_name and int(lora_name[1]):
      variants.append(Variant(name, pretrained=True,
                              lora_rank=int(lora_name[1]),
                              lora_embedding=bool(lora_name[2])))
    else:
      raise errors.InputError(
          f'--variants: unknown variant {name!r}; expected one of '
          f'{sorted(known)}, lora_r<rank> or lora_r<rank>_embedding.')
  if len({v.name for v in variants}) != len(variants):
    raise errors.InputError(f'--variants: repeated variants in {names}.')
  return variants


@dataclasses.dataclass(frozen=True)
class PeftBenchmarkSpec:
  """What defines one fine-tuning comparison (`run_peft_benchmark`).

  Where it reads and writes, its archive, and whether it trains or only
  reports are the call's, not the spec's. A spec refuses options that do
  not fit together when it is built, naming the flag.

  Attributes:
    settings: What every run shares (`text2sql_benchmark.RunSettings`);
      each variant replaces its start and adapters (`Variant.settings`):
      `settings.lora` gives the adapters' settings but their rank, and
      `settings.init_from` and `settings.tokenizer_from` are replaced.
    variants: The variants (`parse_variants`), distinct by name; at least
      one.
    methods: The federated methods (`text2sql_benchmark.parse_method`),
      distinct; at least one.
    seeds: The training seeds, distinct; at least one.
    pretrained_dir: A finished `pretrain_seq2seq` (or text-to-SQL) run, the
      start of the pre-trained variants (and the tokenizer of
      `pretrained_tokenizer` ones); None only if no variant needs it.

  Raises (when built):
    InputError: No variant, method or seed, repeated ones, or a variant
      that needs `pretrained_dir` without it.
  """

  settings: text2sql_benchmark.RunSettings
  variants: tuple[Variant, ...]
  methods: tuple[text2sql_report.MethodKey, ...]
  seeds: tuple[int, ...]
  pretrained_dir: Optional[str] = None

  def __post_init__(self):
    # Tuples, so that a spec built from lists is still immutable.
    object.__setattr__(self, 'variants', tuple(self.variants))
    object.__setattr__(self, 'methods', tuple(tuple(m) for m in self.methods))
    object.__setattr__(self, 'seeds', tuple(self.seeds))
    _check_variants(self.variants, self.pretrained_dir)
    names = [v.name for v in self.variants]
    if len(set(names)) != len(names):
      raise errors.InputError(f'--variants: repeated variants in {names}.')
    # No, or repeated, methods or seeds (the benchmark's own check).
    text2sql_benchmark.run_schedule(self.methods, self.seeds)

  def variant_settings(self, variant: Variant
                       ) -> text2sql_benchmark.RunSettings:
    """`settings` starting where `variant` starts, training what it
    trains."""
    return variant.settings(self.settings, self.pretrained_dir)


def run_peft_benchmark(
    spec: PeftBenchmarkSpec,
    *,
    data_dir: Optional[str],
    output_dir: str,
    archive_dir: Optional[str] = None,
    train: bool = True,
    command: str = '',
    restart: bool = False,
) -> dict[str, Any]:
  """Runs (or reads back) every variant, method and seed; reports them.

  Args:
    spec: The comparison (`PeftBenchmarkSpec`, which refuses options that
      do not fit together): the shared `settings`, the `variants`, the
      federated `methods`, the `seeds` and the `pretrained_dir` run the
      pre-trained variants start from. Each variant's runs are in
      `<output_dir>/<variant>/`.
    data_dir: The `shared/data` folder; None finds it.
    output_dir: The benchmark directory.
    archive_dir: Finished runs' records are archived to, and read back
      from, `<archive_dir>/<variant>/`.
    train: False: report the finished runs only; a variant with none is
      left out (logged).
    command: The command line, recorded in `results.md`.
    restart: Unfinished runs start over (`text2sql_benchmark.collect_runs`).

  Returns:
    The content of `results.json` (`summarize`).

  Raises:
    InputError: No variant has a finished run to report.
  """
  variants, methods, seeds = spec.variants, spec.methods, spec.seeds
  variant_settings = {v: spec.variant_settings(v) for v in variants}

  def collect(variant, variant_seeds, variant_train):
    return text2sql_benchmark.collect_runs(
        variant_settings[variant], data_dir=data_dir,
        output_dir=os.path.join(output_dir, variant.name), methods=methods,
        seeds=variant_seeds, train=variant_train,
        archive_dir=archive_dir and os.path.join(archive_dir, variant.name),
        restart=restart)

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
  # The data's full split sizes: "What the model saw" gives the training
  # questions used of how many.
  data = spec.settings.data
  sizes = peft_setting.split_sizes(data.clients, data_dir=data_dir,
                                   with_values=data.with_values)
  return peft_report.summarize(finished, summaries, output_dir=output_dir,
                               command=command, split_sizes=sizes)


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


def time_rounds(spec: PeftBenchmarkSpec, *, data_dir: Optional[str],
                output_dir: str,
                method: Optional[text2sql_report.MethodKey] = None,
                rounds: int = 3, repeats: int = 2) -> dict[str, Any]:
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
    spec, data_dir, output_dir: As `run_peft_benchmark`'s: its
      `variants`, their start (`pretrained_dir`) and shared `settings`
      are timed (its `seeds` are not used: the runs have
      `settings.loop.seed`); the runs are in
      `<output_dir>/timing/pass<i>/<variant>/runs/`, named by their
      settings as the benchmark's (`text2sql_benchmark.run_dir_for`).
    method: The method timed (e.g. `('federated', 'fedavg',
      'num_examples')`); None: the first of `spec.methods`.
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
  settings, variants = spec.settings, spec.variants
  method = spec.methods[0] if method is None else method
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
      run = variant.settings(timing, spec.pretrained_dir).for_run(
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
        traffic[variant.name] = peft_report.run_traffic(run_dir)
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
  training_lib.write_json(os.path.join(output_dir, peft_report.TIMING_FILE),
                          content)
  return content
