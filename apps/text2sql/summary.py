"""The text-to-SQL benchmark's report: seeds, intervals and the baseline.

`summarize_runs` reads finished run directories back (it trains nothing,
and can be called on any finished runs, e.g. those of
`text2sql_benchmark.collect_runs`) and writes, next to them:

*   `results.md`: test EM in the layout of the paper's Table 2 (clients as
    columns, MacroAvg, MicroAvg; our rows "mean ± half-width of the 95 %
    t interval over seeds", the paper's numbers in the row below ours, and
    a row for the template-retrieval baseline, which learns nothing);
    MacroAvg/MicroAvg with every interval; Lorar minus `num_examples`
    weighting per algorithm and client with paired bootstrap intervals and
    verdicts; teacher-forced test token accuracy; execution accuracy on the
    clients with a database; and every run with its time;
*   `results.json`: the same numbers, per seed and aggregated, with every
    run's directory (accuracies and intervals as fractions: `units`);
*   `client_weights.png`: each client's share of every round's weight under
    Lorar (and loss_reduction) beside its num_examples share |D_i|/Σ|D_j|;
*   `training_loss_<algorithm>.png`: per-client training loss against local
    steps, `<algorithm>` vs `<algorithm>` + Lorar (the paper's Figures 3-5),
    for each method's first seed;
*   `dev_exact_match.png`, `dev_token_accuracy.png`: merged-dev EM and
    teacher-forced token accuracy against rounds, every federated method
    (with and without Lorar), first seed.

The intervals (`tff_nlp.metrics.intervals`) come from each run's
`predictions/<client>.jsonl`, one line per test example with its
`exact_match`: per method, the mean over seeds with its Student-t interval
(training randomness, fixed test sets), a bootstrap over test examples
stratified by client (test-set sampling, these runs fixed) and the same
bootstrap resampling seeds too (both). Every client must be scored on its
whole test split as the run recorded it, and all runs of one seed on the
same examples (checked, `text2sql_seed_runs.read_run` and
`summarize_runs`); the bootstrap needs the same examples for every seed
too, which seed-dependent subsets (`max_eval_examples` > 0) break: it is
then left out, and said so.

The runs and the baseline are read by `text2sql_seed_runs`; `results.md` is
laid out by `text2sql_summary_markdown`.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import os
from typing import Any, Optional

import numpy as np

from tff_nlp import errors
from apps.common import plots
from tff_nlp import training as training_lib
from apps.text2sql import experiment as text2sql
from apps.text2sql import reference as text2sql_reference
from apps.text2sql import seed_runs as text2sql_seed_runs
from apps.text2sql import summary_markdown as text2sql_summary_markdown
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import report as text2sql_report

RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
DEV_PLOT_FILE = 'dev_exact_match.png'
DEV_TOKEN_PLOT_FILE = 'dev_token_accuracy.png'
WEIGHTS_PLOT_FILE = 'client_weights.png'


def _same_examples(runs: Sequence[text2sql_seed_runs.SeedRun]) -> bool:
  return all(r.examples == runs[0].examples for r in runs[1:])


def _stacked(runs: Sequence[text2sql_seed_runs.SeedRun]
             ) -> dict[str, np.ndarray]:
  """Client -> [num_seeds, num_examples] outcomes (same examples)."""
  return collections.OrderedDict(
      (c, np.stack([r.outcomes[c] for r in runs]).astype(np.float64))
      for c in runs[0].outcomes)


def _stacked_tokens(runs: Sequence[text2sql_seed_runs.SeedRun]
                    ) -> dict[str, np.ndarray]:
  """Client -> [num_seeds, num_examples] correct tokens per example."""
  return collections.OrderedDict(
      (c, np.stack([r.token_outcomes[c][0] for r in runs]).astype(np.float64))
      for c in runs[0].token_outcomes)


def _token_units(runs: Sequence[text2sql_seed_runs.SeedRun]
                 ) -> Optional[dict[str, np.ndarray]]:
  """Client -> each test example's tokens, if every run has them and they
  are the same in every run (the runs tokenize alike); else None."""
  if any(r.token_outcomes is None for r in runs):
    return None
  units = {c: total for c, (_, total) in runs[0].token_outcomes.items()}
  for run in runs[1:]:
    if (list(run.token_outcomes) != list(units) or not all(
        np.array_equal(run.token_outcomes[c][1], units[c]) for c in units)):
      return None
  return units


@dataclasses.dataclass(frozen=True)
class Bootstrap:
  """The paired bootstrap of the report's intervals (`intervals`)."""

  num_replicates: int
  confidence: float
  seed: int

  def accuracy(self, runs: Sequence[text2sql_seed_runs.SeedRun],
               resample_seeds: bool):
    return intervals.bootstrap_accuracy(
        _stacked(runs), num_replicates=self.num_replicates,
        confidence=self.confidence, seed=self.seed,
        resample_seeds=resample_seeds)

  def difference(self, a: Sequence[text2sql_seed_runs.SeedRun],
                 b: Sequence[text2sql_seed_runs.SeedRun],
                 resample_seeds: bool):
    return intervals.bootstrap_difference(
        _stacked(a), _stacked(b), num_replicates=self.num_replicates,
        confidence=self.confidence, seed=self.seed,
        resample_seeds=resample_seeds)

  def token_difference(self, a: Sequence[text2sql_seed_runs.SeedRun],
                       b: Sequence[text2sql_seed_runs.SeedRun],
                       units: Mapping[str, np.ndarray],
                       resample_seeds: bool):
    """`difference` of teacher-forced token accuracy: the same examples
    resampled, each weighing its tokens (`units`, from `_token_units`)."""
    return intervals.bootstrap_difference(
        _stacked_tokens(a), _stacked_tokens(b),
        num_replicates=self.num_replicates, confidence=self.confidence,
        seed=self.seed, resample_seeds=resample_seeds, units=units)

  def to_json(self) -> dict[str, Any]:
    return collections.OrderedDict(
        num_replicates=self.num_replicates, confidence=self.confidence,
        seed=self.seed, stratified_by='client', paired=True)


def _exact_match_json(runs: Sequence[text2sql_seed_runs.SeedRun],
                      bootstrap: Optional[Bootstrap]) -> dict[str, Any]:
  """A method's test EM over seeds: means, t and bootstrap intervals."""
  summary = text2sql_report.summarize_seeds([r.exact_match for r in runs])
  plain = with_seeds = None
  if bootstrap is not None and _same_examples(runs):
    plain = bootstrap.accuracy(runs, resample_seeds=False)
    with_seeds = bootstrap.accuracy(runs, resample_seeds=True)

  def bounds(result, part, client=None):
    if result is None:
      return None
    interval = getattr(result, part)
    if client is not None:
      interval = interval[client]
    return [interval.low, interval.high]

  content = collections.OrderedDict(per_client=collections.OrderedDict(
      (client, collections.OrderedDict(
          correct=[r.exact_match.correct[i] for r in runs],
          total=runs[0].exact_match.totals[i],
          accuracy=interval.estimate,
          ci95=text2sql_report.interval_json(interval),
          bootstrap_ci95=bounds(plain, 'per_client', client),
          bootstrap_seeds_ci95=bounds(with_seeds, 'per_client', client)))
      for i, (client, interval) in enumerate(summary.per_client.items())))
  for name, part in (('macro_avg', 'macro'), ('micro_avg', 'micro')):
    interval = getattr(summary, part)
    content[name] = interval.estimate
    content[f'{name}_ci95'] = text2sql_report.interval_json(interval)
    content[f'{name}_bootstrap_ci95'] = bounds(plain, part)
    content[f'{name}_bootstrap_seeds_ci95'] = bounds(with_seeds, part)
  content['num_seeds'] = len(runs)
  content['bootstrap'] = (
      bootstrap.to_json() if plain is not None else None)
  return content


def _seed_summary_json(accuracies: Sequence[text2sql_metrics.ClientAccuracies]
                       ) -> Optional[dict[str, Any]]:
  if not accuracies:
    return None
  content = text2sql_report.summarize_seeds(accuracies).to_json()
  del content['seeds']
  return content


def _seed_json(run: text2sql_seed_runs.SeedRun,
               output_dir: str) -> dict[str, Any]:
  return collections.OrderedDict(
      seed=run.seed,
      run_dir=(os.path.relpath(run.run_dir, output_dir)
               if run.run_dir else None),
      test=collections.OrderedDict(
          exact_match=run.exact_match.to_json(),
          execution=run.execution.to_json() if run.execution else None),
      test_tokens=run.tokens.to_json() if run.tokens else None,
      best_rounds=run.best_rounds,
      seconds=run.seconds)


def _method_json(method: text2sql_report.MethodKey,
                 runs: Sequence[text2sql_seed_runs.SeedRun], output_dir: str,
                 bootstrap: Optional[Bootstrap]) -> dict[str, Any]:
  """A method's entry of `results.json`: its seeds and their aggregate."""
  executions = [r.execution for r in runs if r.execution]
  tokens = [r.tokens for r in runs if r.tokens]
  seconds = [r.seconds for r in runs if r.seconds is not None]
  return collections.OrderedDict(
      method=list(method),
      label=text2sql_report.method_label(method),
      num_seeds=len(runs),
      run_dir=(os.path.relpath(runs[0].run_dir, output_dir)
               if runs[0].run_dir else None),
      test=collections.OrderedDict(
          exact_match=_exact_match_json(runs, bootstrap),
          execution=(_seed_summary_json(executions)
                     if len(executions) == len(runs) else None)),
      test_token_accuracy=(_seed_summary_json(tokens)
                           if len(tokens) == len(runs) else None),
      seconds=sum(seconds) / len(seconds) if seconds else None,
      seeds=[_seed_json(r, output_dir) for r in runs],
  )


def _baseline_json(
    runs: Sequence[tuple[text2sql_seed_runs.SeedRun,
                         text2sql_metrics.Text2SqlEvaluation]],
    by_seed: Mapping[int, text2sql_seed_runs.SeedRun],
    bootstrap: Optional[Bootstrap]) -> dict[str, Any]:
  """The baseline's entry of `results.json`, like a method's.

  Its "seeds" are the distinct test sets of the runs' seeds (one when every
  seed has the same test examples): it has no training randomness.
  """
  seed_runs = [run for run, _ in runs]
  executions = [run.execution for run in seed_runs if run.execution]
  return collections.OrderedDict(
      method=list(text2sql_report.TEMPLATE_RETRIEVAL),
      label=text2sql_report.method_label(text2sql_report.TEMPLATE_RETRIEVAL),
      num_test_sets=len(runs),
      test=collections.OrderedDict(
          exact_match=_exact_match_json(seed_runs, bootstrap),
          execution=(_seed_summary_json(executions)
                     if len(executions) == len(runs) else None)),
      test_sets=[collections.OrderedDict(
          seeds=[s for s, r in by_seed.items() if r.examples == run.examples],
          test=evaluation.to_json()) for run, evaluation in runs],
  )


def difference_json(a: Sequence[text2sql_seed_runs.SeedRun],
                     b: Sequence[text2sql_seed_runs.SeedRun],
                     bootstrap: Optional[Bootstrap], *, a_name: str,
                     b_name: str) -> dict[str, Any]:
  """A - B of test EM: MacroAvg, MicroAvg and per client, with intervals.

  Each entry has the `difference` (A's mean over its seeds minus B's), the
  t interval of the per-seed differences on the seeds both have
  (`seed_ci95`, None with one), the paired bootstrap over test examples
  (`bootstrap_ci95`) and over examples and seeds (`bootstrap_seeds_ci95`),
  each with its own reading (`intervals.verdict`, `*_verdict`), and the
  entry's `verdict` by the one rule of every page
  (`intervals.comparison_verdict` of the seed interval and the bootstrap
  over test examples).

  `token_accuracy` is A - B of MacroAvg teacher-forced test token accuracy,
  what separates models whose exact match is still 0: the `difference`,
  `paired_seeds`, the t interval of the per-seed differences with its
  verdict, and the same two bootstraps over test examples (each example
  weighing its tokens, `Bootstrap.token_difference`); those are None unless
  every run recorded its per-example token counts and all have the same
  ones (they tokenize alike). The entry is None when a run has no token
  counts at all.
  """
  b_by_seed = {r.seed: r for r in b}
  common = [(r, b_by_seed[r.seed]) for r in a if r.seed in b_by_seed]
  plain = with_seeds = None
  if bootstrap is not None and _same_examples([*a, *b]):
    plain = bootstrap.difference(a, b, resample_seeds=False)
    with_seeds = bootstrap.difference(a, b, resample_seeds=True)
  mean_a = text2sql_report.summarize_seeds([r.exact_match for r in a])
  mean_b = text2sql_report.summarize_seeds([r.exact_match for r in b])

  def entry(estimate_a, estimate_b, per_seed, part, client=None):
    content = _seed_entry(estimate_a - estimate_b, per_seed, a_name, b_name)
    for key, result in (('bootstrap', plain), ('bootstrap_seeds', with_seeds)):
      interval = None
      if result is not None:
        interval = getattr(result, part)
        if client is not None:
          interval = interval[client]
      content[f'{key}_ci95'] = (
          [interval.low, interval.high] if interval else None)
      content[f'{key}_verdict'] = (
          intervals.verdict(interval, a_name, b_name) if interval else None)
    # The page's verdict: the one rule of every results page.
    content['verdict'] = intervals.comparison_verdict(
        content['seed_ci95'], content['bootstrap_ci95'], a_name, b_name)
    return content

  content = collections.OrderedDict()
  for name, part in (('macro_avg', 'macro'), ('micro_avg', 'micro')):
    content[name] = entry(
        getattr(mean_a, part).estimate, getattr(mean_b, part).estimate,
        [getattr(x.exact_match, part) - getattr(y.exact_match, part)
         for x, y in common], part)
  content['per_client'] = collections.OrderedDict(
      (client, entry(
          mean_a.per_client[client].estimate,
          mean_b.per_client[client].estimate,
          [x.exact_match.per_client[client] - y.exact_match.per_client[client]
           for x, y in common], 'per_client', client))
      for client in mean_a.clients)
  return collections.OrderedDict(
      a=a_name, b=b_name, num_seeds=[len(a), len(b)],
      paired_seeds=[x.seed for x, _ in common],
      exact_match=content,
      token_accuracy=_token_difference(a, b, common, a_name, b_name,
                                       bootstrap),
      bootstrap=bootstrap.to_json() if plain is not None else None)


def _token_difference(a, b, common, a_name: str, b_name: str,
                      bootstrap: Optional[Bootstrap]
                      ) -> Optional[dict[str, Any]]:
  """`difference_json`'s `token_accuracy` entry (MacroAvg), or None."""
  if any(run.tokens is None for run in [*a, *b]):
    return None
  per_seed = [x.tokens.macro - y.tokens.macro for x, y in common]
  content = _seed_entry(
      float(np.mean([run.tokens.macro for run in a])
            - np.mean([run.tokens.macro for run in b])),
      per_seed, a_name, b_name, paired_seeds=len(per_seed))
  units = (_token_units([*a, *b])
           if bootstrap is not None and _same_examples([*a, *b]) else None)
  for key, resample_seeds in (('bootstrap', False), ('bootstrap_seeds', True)):
    drawn = (bootstrap.token_difference(a, b, units, resample_seeds)
             if units is not None else None)
    # A client with few examples that have tokens (the template parser's
    # gold templates outside its classes score none) can make a replicate's
    # MacroAvg undefined: the interval is then missing and says why, and
    # the rest of the report stands.
    interval = drawn.macro.bounds() if drawn else None
    content[f'{key}_ci95'] = interval
    content[f'{key}_verdict'] = (
        intervals.verdict(drawn.macro, a_name, b_name) if interval else None)
    if drawn and intervals.MACRO_AVG in drawn.undefined:
      content[f'{key}_undefined'] = (
          'cannot be drawn: ' + drawn.undefined[intervals.MACRO_AVG])
  content['verdict'] = intervals.comparison_verdict(
      content['seed_ci95'], content['bootstrap_ci95'], a_name, b_name)
  return content


def _seed_entry(difference: float, per_seed: Sequence[float], a_name: str,
                b_name: str, **extra: Any) -> dict[str, Any]:
  """A difference with the t interval of its per-seed differences.

  `seed_ci95` and `seed_verdict` are None without paired seeds; `extra`
  entries go between `difference` and the interval.
  """
  interval = intervals.seed_interval(per_seed) if per_seed else None
  return collections.OrderedDict(
      difference=difference,
      **extra,
      seed_ci95=(text2sql_report.interval_json(interval)
                 if interval else None),
      seed_verdict=(intervals.verdict(interval, a_name, b_name)
                    if interval else None))


def summarize_runs(
    runs: Mapping[text2sql_report.MethodKey, Sequence[tuple[int, str]]],
    *,
    output_dir: str,
    baseline: Optional[text2sql_seed_runs.BaselinePredictions] = None,
    command: str = '',
    expect_full_splits: bool = False,
    num_replicates: int = intervals.DEFAULT_NUM_REPLICATES,
    confidence: float = intervals.DEFAULT_CONFIDENCE,
    bootstrap_seed: int = 0,
    federated_aggregation: Optional[Mapping[str, Any]] = None,
    reference_results: Optional[str] = None,
) -> dict[str, Any]:
  """Reads finished runs back, aggregates them over seeds, writes the report.

  Trains nothing: every run directory must hold a finished run
  (`text2sql_seed_runs.read_run`). Writes `results.json`, `results.md` and
  the figures to `output_dir` (see the module docstring).

  `results.json` holds (accuracies and intervals as fractions, `units`):

  *   `methods`: per method slug, `seeds` (each seed's run directory, test
      EM per client with MacroAvg/MicroAvg, execution, token accuracy,
      selected rounds, seconds) and `test.exact_match`: per client the
      `correct` count of each seed, the `total` (the client's whole test
      split) and the `accuracy` (mean over seeds) with `ci95` (Student-t
      over seeds; None with one seed), `bootstrap_ci95` (over test
      examples) and `bootstrap_seeds_ci95` (over examples and seeds); then
      `macro_avg`, `macro_avg_ci95`, `macro_avg_bootstrap_ci95`,
      `macro_avg_bootstrap_seeds_ci95` and the same for `micro_avg`;
      `test.execution` and `test_token_accuracy` as means with t
      intervals.
  *   `baseline`: template retrieval (no learning) scored on the same test
      examples (exact match, execution), with bootstrap intervals; one
      entry in `test_sets` per distinct test set of the seeds.
  *   `lorar_vs_num_examples`: per algorithm with both weightings,
      `difference_json` of Lorar minus `num_examples`.
  *   `test_sets`, `table2`, `test_token_accuracy`, `figures`, `seeds`.
  *   `federated_aggregation`: how the federated methods aggregated where
      it is not the plain weighted mean (e.g. `{"max_weight_share": 0.25}`),
      or None. `results.md` says it above its tables, so a capped run's row
      "FedAvg + Lorar" is not read as the paper's plain Lorar.

  Args:
    runs: Method -> its (seed, run directory) pairs, in order.
    output_dir: The benchmark directory (run directories are recorded
      relative to it).
    baseline: Template retrieval's predictions on the full test splits, to
      score on the runs' test examples; None leaves the baseline out.
    command: The command line, recorded in `results.md`.
    expect_full_splits: Refuse runs scored on fewer than all test examples
      of a client (its full split: the baseline's); needs `baseline`.
    num_replicates: Bootstrap replicates.
    confidence: Coverage of every interval.
    bootstrap_seed: Seed of the bootstrap's generator (the same for every
      method, so results are reproducible).
    federated_aggregation: The `aggregators.factory.AggregationConfig`
      fields that differ from the default in the federated runs, or None.
    reference_results: A committed benchmark's `results.json` with FedAvg
      and FedAvg + Lorar (e.g. `docs/results/text2sql_templates/`): if set
      and these runs have both, its figures and a sentence relating them to
      these runs' are printed after the tables and appended to the report
      (`text2sql_reference`; `results.json`'s `reference`). A reference
      that cannot be read is said so, never an error.

  Returns:
    The content of `results.json`.

  Raises:
    InputError: If a run is missing, unfinished or fails a
      `text2sql_seed_runs.read_run` check, runs of one seed were tested on
      different examples, runs have different clients, the baseline's test
      examples do not align, or (`expect_full_splits`) a client was tested
      on a subset of its split.
  """
  runs = collections.OrderedDict(
      (tuple(m), list(pairs)) for m, pairs in runs.items() if pairs)
  if not runs:
    raise errors.InputError('No finished runs to summarize.')
  if confidence != intervals.DEFAULT_CONFIDENCE:
    # The report's keys and headings say 95 %.
    raise ValueError(f'Only 95 % intervals are reported, got {confidence}.')
  read = collections.OrderedDict()
  for method, pairs in runs.items():
    seeds = [seed for seed, _ in pairs]
    if len(set(seeds)) != len(seeds):
      raise errors.InputError(
          f'{text2sql_report.method_slug(method)}: repeated seeds {seeds}.')
    read[method] = [text2sql_seed_runs.read_run(run_dir, seed)
                    for seed, run_dir in pairs]
  everything = [r for method_runs in read.values() for r in method_runs]
  first = everything[0]
  clients = first.exact_match.clients
  by_seed = collections.OrderedDict()
  for run in everything:
    if run.exact_match.clients != clients:
      raise errors.InputError(
          f'{run.run_dir} has clients {list(run.exact_match.clients)}, '
          f'{first.run_dir} {list(clients)}: a benchmark needs the same '
          'clients in every run.')
    reference = by_seed.setdefault(run.seed, run)
    for client in clients:
      if run.examples[client] != reference.examples[client]:
        raise errors.InputError(
            f'{run.run_dir} and {reference.run_dir} (both seed {run.seed}) '
            f'were tested on different examples of client {client!r}; runs '
            'of one seed must share their test examples.')
  by_seed = collections.OrderedDict(sorted(by_seed.items()))
  full_sizes = ({c: len(baseline.pairs[c]) for c in clients}
                if baseline else None)
  if expect_full_splits:
    if full_sizes is None:
      raise ValueError('expect_full_splits needs the baseline, which knows '
                       'the full test splits.')
    subsets = {c: f'{len(first.examples[c])} of {full_sizes[c]}'
               for c in clients if len(first.examples[c]) != full_sizes[c]}
    if subsets:
      raise errors.InputError(
          f'The runs (e.g. {first.run_dir}) were scored on a subset of the '
          f'test split of {subsets}; with max_eval_examples=0 every client '
          'must be scored on its full test split.')
  same_test_sets = _same_examples(list(by_seed.values()))
  bootstrap = Bootstrap(num_replicates, confidence, bootstrap_seed)

  methods_json = collections.OrderedDict(
      (text2sql_report.method_slug(m),
       _method_json(m, r, output_dir, bootstrap))
      for m, r in read.items())
  baseline_runs, baseline_json = [], None
  if baseline:
    baseline_runs = text2sql_seed_runs.baseline_runs(baseline, by_seed)
    baseline_json = _baseline_json(baseline_runs, by_seed, bootstrap)
    baseline_runs = [run for run, _ in baseline_runs]

  differences = collections.OrderedDict()
  for algorithm, label in text2sql_report.ALGORITHMS.items():
    base = ('federated', algorithm, 'num_examples')
    lorar = ('federated', algorithm, 'lorar')
    if base in read and lorar in read:
      differences[algorithm] = difference_json(
          read[lorar], read[base], bootstrap, a_name='Lorar',
          b_name='num_examples')
      differences[algorithm]['label'] = label

  # Table 2: one ClientAccuracies per seed; the deterministic baseline is
  # one row of counts when every seed has the same test examples.
  exact = collections.OrderedDict(
      (m, [r.exact_match for r in runs_]) for m, runs_ in read.items())
  rows = [m for m in text2sql_report.TABLE2_METHODS if m in exact]
  rows += [m for m in read if m not in rows]
  if baseline_runs:
    exact[text2sql_report.TEMPLATE_RETRIEVAL] = (
        baseline_runs[0].exact_match if len(baseline_runs) == 1
        else [r.exact_match for r in baseline_runs])
    rows.append(text2sql_report.TEMPLATE_RETRIEVAL)
  table = text2sql_report.table2_markdown(exact, methods=rows)
  tokens = collections.OrderedDict(
      (m, [r.tokens for r in runs_]) for m, runs_ in read.items()
      if all(r.tokens for r in runs_))
  token_rows = [m for m in rows if m in tokens]
  token_table = text2sql_report.table2_markdown(tokens, methods=token_rows,
                                                paper={})
  first_runs = collections.OrderedDict(
      (m, (r[0].run_dir, None)) for m, r in read.items())
  figures = write_figures(first_runs, output_dir, clients=clients)

  test_sets = collections.OrderedDict(
      same_for_every_seed=same_test_sets,
      full_splits=(None if full_sizes is None else all(
          len(first.examples[c]) == full_sizes[c] for c in clients)),
      per_client=collections.OrderedDict(
          (c, collections.OrderedDict(
              examples=len(first.examples[c]),
              full_split=full_sizes[c] if full_sizes else None))
          for c in clients))
  reference = None
  if reference_results and all(
      ('federated', text2sql_reference.ALGORITHM, w) in read
      for w in ('num_examples', 'lorar')):
    reference = text2sql_reference.compare(
        {'methods': methods_json, 'lorar_vs_num_examples': differences},
        output_dir=output_dir, reference_path=reference_results)
  report = collections.OrderedDict(
      units='fraction',
      seeds=list(by_seed),
      test_sets=test_sets,
      methods=methods_json,
      baseline=baseline_json,
      lorar_vs_num_examples=differences,
      table2=text2sql_report.table2_json(exact, methods=rows),
      test_token_accuracy=text2sql_report.table2_json(
          tokens, methods=token_rows, paper={}),
      figures=figures,
      federated_aggregation=(dict(federated_aggregation)
                             if federated_aggregation else None),
  )
  if reference:
    report['reference'] = reference.record
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE), report)
  markdown = text2sql_summary_markdown.report_markdown(
      report, read, table=table, token_table=token_table,
      tokens=tokens, clients=clients, first=first, command=command,
      output_dir=output_dir)
  if reference:
    markdown += '\n' + reference.markdown
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write(markdown)
  print(f'Test exact match (%):\n\n{table}\n')
  for difference in differences.values():
    difference_table = text2sql_summary_markdown.difference_markdown(
        difference)
    print(f'{difference["label"]} + Lorar minus {difference["label"]} '
          f'(points):\n\n{difference_table}\n')
  if reference:
    print(reference.markdown)
  return training_lib.to_json_value(report)


def write_figures(runs, output_dir: str, *, clients: Sequence[str]
                  ) -> list[str]:
  """The paper's Figures 3-5 and the dev-EM curves; returns the file names.

  Args:
    runs: Method -> (run directory, anything), one run per method.
    output_dir: Where the figures go.
    clients: The clients, in the runs' order.
  """
  records = {}
  for method, (run_dir, _) in runs.items():
    if method[0] == 'federated':
      method_records = training_lib.read_json_lines(
          os.path.join(run_dir, 'federated', 'metrics.jsonl'))
      if method_records:  # Runs copied without their metrics have none.
        records[method] = method_records
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
      per_batch = {m: plots.client_batch_loss_series(records[m])
                   for m in pair}
      if all(per_batch.values()):  # The paper's figures: every batch.
        series, y_label, marker = per_batch, 'training loss of the batch', None
      else:  # Runs recorded before batch losses were: round means.
        series = {m: plots.client_loss_series(records[m]) for m in pair}
        y_label, marker = 'mean training loss of the round', '.'
      plots.plot_client_training_loss(
          {text2sql_report.method_label(m): {
              clients[i]: s for i, s in series[m].items()} for m in pair},
          os.path.join(output_dir, name), y_label=y_label, marker=marker)
      written.append(name)
  weighted = {m: r for m, r in records.items()
              if m[2] in ('lorar', 'loss_reduction')}
  if weighted:
    panels = {}
    for method, method_records in weighted.items():
      shares, sizes = plots.client_weight_shares(method_records)
      panels[text2sql_report.method_label(method)] = (
          {clients[i]: series for i, series in shares.items()},
          {clients[i]: share for i, share in sizes.items()})
    plots.plot_client_weight_shares(
        panels, os.path.join(output_dir, WEIGHTS_PLOT_FILE))
    written.append(WEIGHTS_PLOT_FILE)
  return written
