r"""Runs several methods of the Lorar paper's Table 2 and reports them together.

  python -m apps.text2sql.bin.text2sql_benchmark \
      --flagfile=apps/text2sql/flags/train_text2sql.smoke.flags \
      --methods=fedavg/num_examples,fedavg/lorar

Without `--methods` it runs every method of
`benchmarks.text2sql_benchmark.default_methods()`, each with every seed of
`--seeds` (default 0,1,2), except the `--single_seed_methods` (default
finetune,centralized), which run with the first seed only. Runs go seed by
seed (every method with the first seed, then the second, ...). Each run has
its own directory keyed by its configuration and seed, so running the
command again continues an interrupted benchmark; see `apps.text2sql.
benchmark`. The report (`apps.text2sql.summary`)
gives means over seeds with 95 % intervals and the template-retrieval
baseline. Data, model and local-training flags are those of
`train_text2sql`; its `--seed` is replaced by `--seeds` here.

With `--variants`, it compares fine-tuning variants instead (issue 30;
`apps.peft.benchmark`): each of the --methods runs from
scratch with the `--pretrained_dir` model's tokenizer (`scratch_full`; with
a tokenizer of the clients' text: `scratch_full_own_tokenizer`) or from the
`--pretrained_dir` model, training the whole model (`pretrained_full`) or
LoRA adapters (`lora_r4`, `lora_r8`, `lora_r16`, any `lora_r<rank>`;
`--lora_alpha`, `--lora_targets`), each variant in
`<output_dir>/<variant>/`, and the report gives exact match, bytes per
client and round and the differences from `pretrained_full`.
"""

import dataclasses
import os
import shlex
import sys
from typing import Optional

from absl import app
from absl import flags
from absl import logging

import tff_nlp
from apps.common import aggregation_flags
from apps.common import presets
from apps.text2sql.bin import _text2sql_flags as text2sql_flags
from tff_nlp import errors
from apps.common import binary as common
from apps.peft import benchmark as peft_benchmark
from apps.peft import report as peft_report
from apps.text2sql import benchmark as text2sql_benchmark
from apps.text2sql import summary as text2sql_summary
from apps.text2sql import report as text2sql_report
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(common)
flags.adopt_module_key_flags(text2sql_flags)
flags.adopt_module_key_flags(aggregation_flags)
flags.set_default(common.OUTPUT_DIR, 'runs/text2sql_benchmark')
flags.set_default(common.ROUNDS, 60)
flags.set_default(common.EVAL_EVERY, 5)

_METHODS = flags.DEFINE_list(
    'methods',
    [text2sql_report.method_slug(m).replace('-', '/', 1)
     for m in text2sql_benchmark.default_methods()],
    'Methods to run: finetune, centralized, <algorithm>/<weighting>.')
_SEEDS = flags.DEFINE_list(
    'seeds', ['0', '1', '2'],
    'Training seeds: every method runs once per seed (seed by seed), and '
    'the report gives means over seeds with 95 % intervals. Replaces '
    '--seed, which must be left unset or be one of these.')
# train_text2sql's one-method flag, so that its presets serve both binaries
# (train_text2sql.demo.flags gives --algorithm to train_text2sql and
# --methods to this benchmark).
_ALGORITHM = flags.DEFINE_enum(
    'algorithm', None, list(text2sql_report.ALGORITHMS),
    'train_text2sql\'s algorithm, accepted so that its presets run here: '
    'text2sql_benchmark runs the algorithms of --methods, and a warning names '
    'an --algorithm that none of them uses.')
_SINGLE_SEED_METHODS = flags.DEFINE_list(
    'single_seed_methods', ['finetune', 'centralized'],
    'Methods (as in --methods) that run with the first of --seeds only; '
    'methods not in --methods are ignored. Empty: every method with every '
    'seed.')


_ARCHIVE_DIR = flags.DEFINE_string(
    'archive_dir', None,
    'If set, each finished run\'s records (results, metrics, figures, '
    'gzipped test predictions; no weights) are copied to '
    '<archive_dir>/<run name>/, and runs found there are read back instead '
    'of trained again (`make bench-text2sql`: records/text2sql/runs, '
    'committed, so the benchmark accumulates across machines).')


_REPORT_ONLY = flags.DEFINE_bool(
    'report_only', False,
    'Train nothing: report the finished runs of --methods and --seeds (a '
    'benchmark still accumulating its seeds); missing runs are logged and '
    'left out.')


_REFERENCE_RESULTS = flags.DEFINE_string(
    'reference_results', None,
    'A committed benchmark report (results.json) of the same comparison, '
    'e.g. docs/results/text2sql_templates/results.json (make demo): its '
    'FedAvg and FedAvg + Lorar figures, with seeds and intervals, are '
    'printed after this run\'s tables with a sentence relating the two. '
    'A relative path that does not exist is looked up in the checkout '
    'tff_nlp was imported from.')


_VARIANTS = flags.DEFINE_list(
    'variants', [],
    'If set: compare these fine-tuning variants of every method '
    '(scratch_full, scratch_full_own_tokenizer, pretrained_full, '
    'lora_r<rank>) instead of the methods alone; see '
    'apps.peft.benchmark.')
_PRETRAINED_DIR = flags.DEFINE_string(
    'pretrained_dir', None,
    'With --variants: the pre-trained model\'s run (a pretrain_seq2seq run, '
    'e.g. runs/pretrain_cpu from make pretrain): the start of the '
    'pre-trained variants and the tokenizer of scratch_full.')


_TIME_ROUNDS = flags.DEFINE_integer(
    'time_rounds', 0,
    'With --variants: first time this many rounds of each variant side by '
    'side (the first method, interleaved passes; peft_benchmark.time_rounds)'
    ' and report the round times beside the runs\' own. 0: do not.')
_TIMING_REPEATS = flags.DEFINE_integer(
    'timing_repeats', 2, 'With --time_rounds: passes over the variants.')
_TIMING_ONLY = flags.DEFINE_bool(
    'timing_only', False,
    'With --time_rounds: time the rounds, then report; train none of the '
    'comparison\'s runs (e.g. to time again on a quiet machine while the '
    'comparison runs elsewhere).')


def _parse_seeds(values: list[str]) -> list[int]:
  seeds = []
  for value in values:
    try:
      seeds.append(int(value))
    except ValueError:
      raise errors.InputError(
          f'--seeds: {value!r} is not an integer.') from None
  if not seeds:
    raise errors.InputError('--seeds: no seed given.')
  if len(set(seeds)) != len(seeds):
    raise errors.InputError(f'--seeds: repeated seeds in {seeds}.')
  if common.SEED.present and common.SEED.value not in seeds:
    raise errors.InputError(
        f'--seed={common.SEED.value} is not among --seeds={seeds}: '
        'text2sql_benchmark runs the seeds of --seeds (for one seed, pass '
        '--seeds=<seed>).')
  return seeds


def _reference_path(path: Optional[str]) -> Optional[str]:
  """`path`, or that relative path in the workspace of `bazel run` (which
  starts in its runfiles, where docs/ is not) or in tff_nlp's checkout."""
  if not path or os.path.isabs(path) or os.path.exists(path):
    return path
  for root in (os.environ.get('BUILD_WORKSPACE_DIRECTORY'),
               os.path.dirname(os.path.dirname(os.path.abspath(
                   tff_nlp.__file__)))):
    if root and os.path.exists(os.path.join(root, path)):
      return os.path.join(root, path)
  return path


def _warn_if_algorithm_unused(methods) -> None:
  """Names an --algorithm (train_text2sql's) that no federated method has."""
  algorithms = sorted({m[1] for m in methods if m[0] == 'federated'})
  if _ALGORITHM.value is not None and _ALGORITHM.value not in algorithms:
    logging.warning(
        '--algorithm=%s is train_text2sql\'s (one method); '
        'text2sql_benchmark runs --methods=%s and ignores it.',
        _ALGORITHM.value, ','.join(_METHODS.value))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  methods = [text2sql_benchmark.parse_method(m) for m in _METHODS.value]
  _warn_if_algorithm_unused(methods)
  seeds = _parse_seeds(_SEEDS.value)
  try:
    single_seed_methods = [text2sql_benchmark.parse_method(m)
                           for m in _SINGLE_SEED_METHODS.value]
  except errors.InputError as e:
    raise errors.InputError(
        str(e).replace('--methods:', '--single_seed_methods:', 1)) from None
  aggregation = aggregation_flags.aggregation_config()
  needs_variants = [name for name, present in (
      ('--pretrained_dir', _PRETRAINED_DIR.value),
      ('--time_rounds', _TIME_ROUNDS.value),
      ('--timing_only', _TIMING_ONLY.value)) if present]
  if needs_variants and not _VARIANTS.value:
    raise errors.InputError(
        f'{", ".join(needs_variants)}: only with --variants (the fine-tuning '
        'comparison).')
  if _TIMING_ONLY.value and not _TIME_ROUNDS.value:
    raise errors.InputError('--timing_only needs --time_rounds > 0.')
  # Flag errors before any training.
  schedule = text2sql_benchmark.run_schedule(methods, seeds,
                                             single_seed_methods)
  presets.warn_without_preset(
      'text2sql_benchmark',
      f'{len(schedule)} runs ({len(methods)} methods, seeds '
      f'{",".join(map(str, seeds))}), each {text2sql_flags.schedule_summary()}',
      presets_of='train_text2sql')
  command = shlex.join(['python', '-m', 'apps.text2sql.bin.text2sql_benchmark']
                      + sys.argv[1:])
  settings = text2sql_benchmark.RunSettings(
      data=text2sql_flags.data_config(),
      model=text2sql_flags.model_config(),
      training=text2sql_flags.training_config(paradigm='federated'),
      loop=common.loop_config_from_flags(),
      aggregation=aggregation)
  place = dict(data_dir=common.DATA_DIR.value,
               output_dir=common.OUTPUT_DIR.value)
  if _VARIANTS.value:
    variants = peft_benchmark.parse_variants(_VARIANTS.value)
    if not _METHODS.present:
      methods = [text2sql_benchmark.parse_method(m)
                 for m in peft_benchmark.DEFAULT_METHODS]
    # The adapters' settings but their rank, which each variant sets.
    settings = dataclasses.replace(
        settings, lora=text2sql_flags.lora_config(rank=1))
    spec = peft_benchmark.PeftBenchmarkSpec(
        settings, variants=variants, methods=methods, seeds=seeds,
        pretrained_dir=_PRETRAINED_DIR.value)
    with runtime_flags.context_from_flags():
      if _TIME_ROUNDS.value and not _REPORT_ONLY.value:
        # Times the first of the methods (`time_rounds`' default).
        peft_benchmark.time_rounds(
            spec, rounds=_TIME_ROUNDS.value, repeats=_TIMING_REPEATS.value,
            **place)
      peft_benchmark.run_peft_benchmark(
          spec, archive_dir=_ARCHIVE_DIR.value,
          train=not (_REPORT_ONLY.value or _TIMING_ONLY.value),
          command=command, restart=common.RESTART.value, **place)
    return os.path.join(common.OUTPUT_DIR.value, peft_report.TABLE_FILE)
  with runtime_flags.context_from_flags():
    runs = text2sql_benchmark.collect_runs(
        settings, methods=methods, seeds=seeds,
        single_seed_methods=single_seed_methods,
        archive_dir=_ARCHIVE_DIR.value, train=not _REPORT_ONLY.value,
        restart=common.RESTART.value, **place)
    text2sql_benchmark.report_runs(
        runs, settings, command=command,
        reference_results=_reference_path(_REFERENCE_RESULTS.value), **place)
  return os.path.join(common.OUTPUT_DIR.value, text2sql_summary.TABLE_FILE)


if __name__ == '__main__':
  common.run(main)
