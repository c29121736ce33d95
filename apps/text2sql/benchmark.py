"""Several methods of the Lorar paper's Table 2, run with several seeds.

A benchmark is `collect_runs` then `report_runs`. `collect_runs` runs each
method with `text2sql.run_text2sql` once per training seed, with the
settings all runs share (`RunSettings`), each run in a directory named by
the method and a hash of its configuration, seed included
(`runs/<method>-<hash>/`, `run_dir_for`), so a benchmark interrupted at any
point continues where it stopped when run again (finished runs are read
back, the unfinished one resumes from its checkpoint), and a changed
configuration starts new runs instead of mixing results. Runs go seed by
seed (`run_schedule`: every method with the first seed, then every method
with the second, ...), so an interrupted benchmark already has complete
comparisons; methods in `single_seed_methods` (by default finetuning and
centralized training, the costly baselines the issue asks one seed of) run
with the first seed only.

Runs outlive the machine through `archive_dir` (`make bench-text2sql`:
`records/text2sql/runs/`, committed): each finished run's light files
(configuration, results, metrics, figures and gzipped test predictions; no
weights) are copied there under the run's name (`archive_run`), and a run
found there is read back instead of trained again. A benchmark longer than
one sitting so accumulates its runs across machines and checkouts.

A finished run recorded before per-example token counts existed
(`text2sql_seed_runs.has_example_tokens`), whose checkpoints are still on
this machine, is scored again from them when the benchmark trains
(`rescore_run`): the token-accuracy differences then get their bootstrap
over test examples. Its training, exact match and wall time stay as they
were.

`report_runs` summarizes the finished runs: means over seeds with 95 %
intervals, the template-retrieval baseline, `results.md`, `results.json`
and the figures (`apps.text2sql.summary.summarize_runs`).
"""

import collections
from collections.abc import Collection, Mapping, Sequence
import dataclasses
import glob
import gzip
import json
import os
import shutil
from typing import Any, Optional

from absl import logging

from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.aggregators import factory as aggregation_lib
from tff_nlp.data import text2sql as text2sql_data
from apps.text2sql import experiment as text2sql
from apps.text2sql import seed_runs as text2sql_seed_runs
from apps.text2sql import summary as text2sql_summary
from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals
from apps.text2sql import report as text2sql_report
from tff_nlp.models import lora as lora_lib
from tff_nlp.models import seq2seq
from apps.text2sql import task as text2sql_task
from tff_nlp.training import run_cache

RUNS_DIR = 'runs'
# What `archive_run` keeps of a run: its records, not its weights.
ARCHIVED_SUFFIXES = ('.json', '.jsonl', '.md', '.png', '.csv')
UNARCHIVED_DIRS = frozenset({'checkpoints', 'best_checkpoint', 'tensorboard',
                             'tokenizer'})


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


def training_for(base: text2sql_task.TrainingConfig,
                 method: text2sql_report.MethodKey
                 ) -> text2sql_task.TrainingConfig:
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
  slug = text2sql_report.method_slug(method)
  if variant:
    experiment.update(variant)
    slug += ''.join(f'-{k}{v}' for k, v in variant.items())
  return run_cache.run_dir(os.path.join(output_dir, RUNS_DIR), slug,
                           experiment)


def finished_results(run_dir: str, rounds: int) -> Optional[dict[str, Any]]:
  """The `results.json` of a run finished with `rounds` rounds, else None."""
  return run_cache.finished_results(
      run_dir, results_file=text2sql.RESULTS_FILE,
      is_complete=lambda results: results['config']['loop']['rounds']
      == rounds)


def archive_run(run_dir: str, archive_dir: str) -> str:
  """Copies a finished run's records to `archive_dir/<run name>/`.

  Keeps the files ending in `ARCHIVED_SUFFIXES` (configuration, results,
  metrics, figures), in the run's layout, outside `UNARCHIVED_DIRS`
  (weights, TensorBoard events, the tokenizer, which is rebuilt the same from
  the data); test predictions (`predictions/*.jsonl`) are gzipped, which
  `text2sql_seed_runs.read_run` reads. The copy is written next to its
  place and renamed into it, so an interrupted copy leaves no half archive.

  Args:
    run_dir: A finished `run_text2sql` directory.
    archive_dir: Where archived runs go.

  Returns:
    The archived run's directory.
  """
  target = os.path.join(archive_dir, os.path.basename(os.path.normpath(
      run_dir)))
  partial = target + '.partial'
  shutil.rmtree(partial, ignore_errors=True)
  for root, dirs, files in os.walk(run_dir):
    dirs[:] = sorted(d for d in dirs if d not in UNARCHIVED_DIRS)
    relative = os.path.relpath(root, run_dir)
    for name in sorted(files):
      if not name.endswith(ARCHIVED_SUFFIXES):
        continue
      source = os.path.join(root, name)
      os.makedirs(os.path.join(partial, relative), exist_ok=True)
      destination = os.path.normpath(os.path.join(partial, relative, name))
      if (os.path.basename(root) == text2sql.PREDICTIONS_DIR
          and name.endswith('.jsonl')):
        # mtime=0: the same predictions give the same bytes.
        with open(source, 'rb') as f, open(destination + '.gz', 'wb') as raw:
          with gzip.GzipFile(fileobj=raw, mode='wb', mtime=0) as out:
            shutil.copyfileobj(f, out)
      else:
        shutil.copyfile(source, destination)
  shutil.rmtree(target, ignore_errors=True)
  os.replace(partial, target)
  return target


def run_schedule(
    methods: Sequence[text2sql_report.MethodKey],
    seeds: Sequence[int],
    single_seed_methods: Collection[text2sql_report.MethodKey] = (),
) -> list[tuple[int, text2sql_report.MethodKey]]:
  """The (seed, method) runs of a benchmark, in the order they run.

  Seed by seed: every method with `seeds[0]`, then every method with
  `seeds[1]`, ..., so that an interrupted benchmark has every comparison
  of its first seeds complete.

  Args:
    methods: The methods, in order; distinct, at least one.
    seeds: The training seeds, in order; distinct, at least one.
    single_seed_methods: Methods that run with `seeds[0]` only (e.g.
      finetuning and centralized training); others than `methods` are
      ignored.

  Returns:
    The runs.

  Raises:
    InputError: If `methods` or `seeds` is empty or repeats itself.
  """
  if not methods:
    raise errors.InputError('--methods: no method given.')
  if len(set(methods)) != len(methods):
    raise errors.InputError(f'--methods: repeated methods in {methods}.')
  if not seeds:
    raise errors.InputError('--seeds: no seed given.')
  if len(set(seeds)) != len(seeds):
    raise errors.InputError(f'--seeds: repeated seeds in {list(seeds)}.')
  single = {tuple(m) for m in single_seed_methods}
  return [(seed, method) for i, seed in enumerate(seeds) for method in methods
          if i == 0 or tuple(method) not in single]


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """What a benchmark's runs share; each run adds its method and seed.

  Attributes:
    data: Data and tokenization.
    model: The model.
    training: Local training; its paradigm, algorithm and weighting are
      replaced by each method's (`training_for`).
    loop: Rounds (epochs outside federated runs) and evaluation cadence;
      its seed is replaced by each run's.
    aggregation: How the federated methods aggregate (weight cap, robust
      aggregation, DP; `aggregators.factory`); None: the weighted mean.
      Its fields that differ from the default name the federated runs'
      directories (`run_variant`), so capped and plain runs are cached
      apart; the other methods are unaffected.
    init_from: Every run starts from this run's model and tokenizer
      (`Text2SqlSpec`'s `init_from`, e.g. a `pretrain_seq2seq` run). Its
      name and a digest of its `config.json` name the runs' directories.
    lora: Every run fine-tunes these LoRA adapters (`Text2SqlSpec`'s
      `lora`; its seed is replaced by each run's). Its rank and alpha name
      the runs' directories.
    tokenizer_from: Every run trains a model from scratch with this run's
      tokenizer (`Text2SqlSpec`'s `tokenizer_from`); named as `init_from`.
  """

  data: text2sql_task.DataConfig
  model: seq2seq.Seq2SeqConfig
  training: text2sql_task.TrainingConfig
  loop: training_lib.LoopConfig
  aggregation: Optional[aggregation_lib.AggregationConfig] = None
  init_from: Optional[str] = None
  lora: Optional[lora_lib.LoraConfig] = None
  tokenizer_from: Optional[str] = None

  def for_run(self, method: text2sql_report.MethodKey,
              seed: int) -> 'RunSettings':
    """The settings of one run: `method`'s training, `seed` in the loop and
    the adapters, and the aggregation for federated methods only (None
    when it is the default)."""
    training = training_for(self.training, method)
    aggregation = self.aggregation
    if (training.paradigm != 'federated' or aggregation is None
        or aggregation.is_default):
      aggregation = None
    return dataclasses.replace(
        self, training=training, aggregation=aggregation,
        loop=dataclasses.replace(self.loop, seed=seed),
        lora=self.lora and dataclasses.replace(self.lora, seed=seed))

  def run_dir(self, output_dir: str, method: text2sql_report.MethodKey
              ) -> str:
    """Where the run of `method` with these (`for_run`) settings lives."""
    return run_dir_for(
        output_dir, method, data=self.data, model=self.model,
        training=self.training, seed=self.loop.seed,
        variant=run_variant(self.aggregation, self.init_from, self.lora,
                            tokenizer_from=self.tokenizer_from))

  def run(self, *, data_dir: Optional[str], output_dir: str,
          processes: Optional[training_lib.ProcessCache] = None,
          restart: bool = False) -> dict[str, Any]:
    """`text2sql.run_text2sql` with these (`for_run`) settings."""
    return text2sql.run_text2sql(
        self.spec(), data_dir=data_dir, output_dir=output_dir,
        processes=processes,
        # Only when asked: what stands in for `run_text2sql` in tests need
        # not know it.
        **({'restart': True} if restart else {}))

  def spec(self) -> text2sql.Text2SqlSpec:
    """The run these (`for_run`) settings describe."""
    return text2sql.Text2SqlSpec(
        data=self.data, model=self.model, training=self.training,
        loop=self.loop, aggregation=self.aggregation,
        init_from=self.init_from, lora=self.lora,
        tokenizer_from=self.tokenizer_from)


def collect_runs(
    settings: RunSettings,
    *,
    data_dir: Optional[str],
    output_dir: str,
    methods: Sequence[text2sql_report.MethodKey],
    seeds: Optional[Sequence[int]] = None,
    single_seed_methods: Collection[text2sql_report.MethodKey] = (),
    archive_dir: Optional[str] = None,
    train: bool = True,
    restart: bool = False,
) -> collections.OrderedDict:
  """Runs (or reads back) every method with every seed.

  A benchmark is `collect_runs`, then `report_runs` on what it found; a
  benchmark that interleaves several settings seed by seed (e.g.
  `peft_benchmark`) collects each, then reports once.

  Args:
    settings: What every run shares (`RunSettings`).
    data_dir: The `shared/data` folder; None finds it.
    output_dir: The benchmark directory; runs are in its `runs/`.
    methods: The methods, e.g. `[('finetune',), ('federated', 'fedopt',
      'lorar')]`.
    seeds: The training seeds, run in the order of `run_schedule`; None:
      `[settings.loop.seed]`.
    single_seed_methods: Methods run with the first seed only.
    archive_dir: If set, finished runs are archived there (`archive_run`)
      and runs archived there before are read back from there.
    train: False: train nothing; find the runs of the schedule that are
      finished (a benchmark still accumulating its seeds), and log the
      missing ones.
    restart: An unfinished run starts over instead of resuming
      (`run_text2sql`'s `restart`); finished ones are read back.

  A run refused before it started (a bad flag or data file) leaves no run
  directory behind (`training.prepare_run_dir`).

  Returns:
    {method: [(seed, run_dir), ...]} of the finished runs (archived ones in
    `archive_dir`), in schedule order; methods with none left out.
  """
  seeds = ([settings.loop.seed] if seeds is None
           else [int(s) for s in seeds])
  schedule = run_schedule(methods, seeds, single_seed_methods)
  runs = collections.OrderedDict((tuple(m), []) for m in methods)
  for seed, method in schedule:
    name = text2sql_report.method_slug(method)
    run = settings.for_run(method, seed)
    run_dir = run.run_dir(output_dir, method)
    archived = archive_dir and os.path.join(archive_dir,
                                            os.path.basename(run_dir))
    rounds = settings.loop.rounds
    is_archived = (archived is not None
                   and finished_results(archived, rounds) is not None)
    if (train and finished_results(run_dir, rounds) is not None
        and _can_rescore(archived if is_archived else run_dir, run_dir)):
      logging.info('%s, seed %d: recorded without per-example token '
                   'counts; scoring it again in %s', name, seed, run_dir)
      rescore_run(run, run_dir, data_dir=data_dir)
      is_archived = False  # Archived again below.
    if is_archived:
      logging.info('%s, seed %d: archived before, read from %s', name, seed,
                   archived)
      runs[tuple(method)].append((seed, archived))
      continue
    if finished_results(run_dir, rounds) is None and not train:
      logging.warning('%s, seed %d: not finished (%s), left out of the '
                      'report', name, seed, run_dir)
      continue
    if finished_results(run_dir, rounds) is None:
      logging.info('%s, seed %d: running in %s', name, seed, run_dir)
      run.run(data_dir=data_dir, output_dir=run_dir, restart=restart)
    else:
      logging.info('%s, seed %d: done before, read from %s', name, seed,
                   run_dir)
    if archive_dir:
      run_dir = archive_run(run_dir, archive_dir)
    runs[tuple(method)].append((seed, run_dir))
  os.makedirs(output_dir, exist_ok=True)  # Every run may be archived.
  return collections.OrderedDict((m, r) for m, r in runs.items() if r)


def _can_rescore(recorded_dir: str, run_dir: str) -> bool:
  """A run recorded (in `recorded_dir`) without per-example token counts,
  whose training checkpoints are in `run_dir`."""
  return (not text2sql_seed_runs.has_example_tokens(recorded_dir)
          and bool(glob.glob(os.path.join(
              run_dir, '**', training_lib.CHECKPOINT_DIR), recursive=True)))


def rescore_run(run: RunSettings, run_dir: str, *,
                data_dir: Optional[str]) -> dict[str, Any]:
  """Scores a finished run again from its checkpoints, keeping its record.

  `run.run` resumes the run at its last checkpoint, trains no round and
  scores the selected model on the test splits again, writing what the
  current code records (e.g. per-example token counts). The scores must be
  the ones recorded: every client's exact match and token counts; the
  recorded wall time (`seconds`) stays, the rescoring's goes to
  `rescore_seconds`.

  Args:
    run: The run's settings (`RunSettings.for_run`).
    run_dir: Its finished directory.
    data_dir: The `shared/data` folder; None finds it.

  Returns:
    The new `results.json` content.

  Raises:
    InputError: If a score changed (the old `results.json` is then kept as
      `results.json.before_rescore` beside the new one).
  """
  path = os.path.join(run_dir, text2sql.RESULTS_FILE)
  aside = path + '.before_rescore'
  with open(path, encoding='utf-8') as f:
    before = json.load(f)
  os.replace(path, aside)
  try:
    after = run.run(data_dir=data_dir, output_dir=run_dir)
  except BaseException:
    os.replace(aside, path)
    raise
  changed = [key for key, scores in (
      ('exact_match', lambda r: r['test']['exact_match']['per_client']),
      ('tokens', lambda r: {c: (v['correct_tokens'], v['tokens'])
                            for c, v in r['test_tokens'].items()}))
             if json.loads(json.dumps(scores(before)))
             != json.loads(json.dumps(scores(after)))]
  if changed:
    raise errors.InputError(
        f'{run_dir}: scored again from its checkpoints, its {changed} '
        f'differ from the recorded ones (kept in {aside}).')
  after['rescore_seconds'] = (after['seconds']
                             - after.get('seconds_before_resume', 0.0))
  # The training's time as recorded (older runs have no
  # `seconds_before_resume`).
  for key in ('seconds', 'seconds_before_resume'):
    after.pop(key, None)
    if key in before:
      after[key] = before[key]
  training_lib.write_json(path, after)
  os.remove(aside)
  return after


def report_runs(
    runs: Mapping[text2sql_report.MethodKey, Sequence[tuple[int, str]]],
    settings: RunSettings,
    *,
    data_dir: Optional[str],
    output_dir: str,
    command: str = '',
    baseline: bool = True,
    num_replicates: int = bootstrap_lib.DEFAULT_NUM_REPLICATES,
    reference_results: Optional[str] = None,
) -> dict[str, Any]:
  """Reports `collect_runs`' runs: `results.json`, `results.md`, figures.

  Args:
    runs: What `collect_runs` returned for `settings`.
    settings: The runs' settings.
    data_dir: The `shared/data` folder; None finds it.
    output_dir: The benchmark directory.
    command: The command line, recorded in `results.md`.
    baseline: Also score the template-retrieval baseline on the runs' test
      examples (`text2sql_seed_runs.template_retrieval_predictions`), and,
      with `data.max_eval_examples` 0, check that every run was scored on
      every client's full test split.
    num_replicates: Bootstrap replicates of the intervals.
    reference_results: A committed benchmark's `results.json` to show
      beside these runs (`text2sql_summary.summarize_runs`).

  Returns:
    The content of `results.json` (`text2sql_summary.summarize_runs`).

  Raises:
    InputError: If there is no run.
  """
  if not runs:
    raise errors.InputError(
        f'{output_dir}: no finished run of the benchmark to report.')
  data = settings.data
  return text2sql_summary.summarize_runs(
      runs, output_dir=output_dir, command=command,
      baseline=(text2sql_seed_runs.template_retrieval_predictions(
          # The template parser's filling; the seq2seq parser's headline
          # reads only what the question states.
          data, data_dir=data_dir,
          values=getattr(settings.model, 'values', text2sql_data.STATED))
                if baseline else None),
      expect_full_splits=baseline and not data.max_eval_examples,
      num_replicates=num_replicates,
      # The default aggregation differs in no field: an empty variant, None.
      federated_aggregation=_aggregation_variant(settings.aggregation)
      or None, reference_results=reference_results)


def run_variant(aggregation, init_from: Optional[str],
                lora: Optional[lora_lib.LoraConfig], *,
                tokenizer_from: Optional[str] = None
                ) -> Optional[dict[str, Any]]:
  """What besides the method defines a run: aggregation, start, adapters,
  another run's tokenizer."""
  variant = collections.OrderedDict(_aggregation_variant(aggregation) or {})
  if init_from is not None:
    variant['init'] = _run_reference(init_from, 'init_from')
  if tokenizer_from is not None:
    variant['tokenizer'] = _run_reference(tokenizer_from, 'tokenizer_from')
  if lora is not None:
    variant['lora_r'] = lora.rank
    if lora.alpha is not None:
      variant['lora_alpha'] = lora.alpha
    if lora.targets != lora_lib.LoraConfig().targets:
      variant['lora_targets'] = '+'.join(lora.targets)
    if lora.train_layer_norms:
      variant['lora_layer_norms'] = 1
  return variant or None


def _run_reference(run_dir: str, what: str) -> str:
  """`<run folder name>.<6 digits of its experiment's digest>`."""
  path = os.path.join(run_dir, 'config.json')
  if not os.path.isfile(path):
    raise errors.CheckpointError(
        f'{path}: no run configuration; {what} must be a finished run '
        'directory (e.g. of pretrain_seq2seq or train_text2sql).')
  with open(path) as f:
    config = json.load(f)
  return '{}.{}'.format(os.path.basename(os.path.normpath(run_dir)),
                        training_lib.config_digest(config['experiment'])[:6])


def _aggregation_variant(
    aggregation: Optional[aggregation_lib.AggregationConfig]
) -> Optional[dict[str, Any]]:
  """The fields of `aggregation` that differ from the default, or None."""
  if aggregation is None:
    return None
  default = aggregation_lib.AggregationConfig()
  return collections.OrderedDict(
      (field.name, getattr(aggregation, field.name))
      for field in dataclasses.fields(aggregation)
      if getattr(aggregation, field.name) != getattr(default, field.name))


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
