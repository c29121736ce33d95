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

The intervals come from each run's `predictions/<client>.jsonl`, one line
per test example with its `exact_match` (and its tokens): a run's `records`
are its numbers and its test examples, clients the units. Per method: the
mean over seeds with its Student-t interval (training randomness, fixed
test sets; `text2sql_report.summarize_seeds`, as in Table 2), and from the
one report engine (`apps.common.report_engine`) a bootstrap over test
examples stratified by client (test-set sampling, these runs fixed) and
the same resampling seeds too (both). Per algorithm, the engine's
`compare` of the declared `comparisons` of Lorar minus
`num_examples` weighting (`difference_json`), every seed scoring the same
test set (`engine.SHARED`). Every client must be scored on its whole test
split as the run recorded it, and all runs of one seed on the same examples
(checked, `text2sql_seed_runs.read_runs`); the bootstrap needs the same
examples for every seed too, which seed-dependent subsets
(`max_eval_examples` > 0) break: it is then left out, and said so.

The runs, the baseline and the figures are read and drawn by
`text2sql_seed_runs`; `results.md` is laid out by
`text2sql_summary_markdown`; what is the paper's (Table 2) by
`text2sql_report`.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import os
from typing import Any, Optional

import numpy as np

from tff_nlp import errors
from apps.common import report_engine as engine
from tff_nlp import training as training_lib
from apps.text2sql import reference as text2sql_reference
from apps.text2sql import seed_runs as text2sql_seed_runs
from apps.text2sql import summary_markdown as text2sql_summary_markdown
from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import report as text2sql_report

RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'


# The metrics of a run's tidy records (`records`): exact match twice, so
# each average of its test examples is checked against the run's own number,
# and token accuracy (each example weighing its tokens).
EM_MACRO = 'exact_match_macro'
EM_MICRO = 'exact_match_micro'
TOKENS = 'token_accuracy_macro'
# The comparisons of `difference_json`, by their key in it: every seed scores
# the same test examples, clients are the units.
_PARTS = collections.OrderedDict(macro_avg=(EM_MACRO, engine.MACRO),
                                 micro_avg=(EM_MICRO, engine.MICRO),
                                 token_accuracy=(TOKENS, engine.MACRO))


def comparisons(a: str, b: str, names: tuple[str, str]
                ) -> collections.OrderedDict:
  """A - B of MacroAvg and MicroAvg exact match and MacroAvg token accuracy,
  by their key in `difference_json`."""
  return collections.OrderedDict(
      (key, engine.Comparison(a, b, metric, average=average,
                              examples=engine.SHARED, names=names))
      for key, (metric, average) in _PARTS.items())


def records(method: str, run: text2sql_seed_runs.SeedRun, *,
            examples: bool, token_examples: bool) -> list[engine.Record]:
  """A run's tidy records: the MacroAvg and MicroAvg exact match and MacroAvg
  token accuracy it recorded, with (if `examples`) each test example's 0/1
  exact match and (if `token_examples`) its correct tokens of its tokens,
  in its client."""
  found = []
  for metric, value in ((EM_MACRO, run.exact_match.macro),
                        (EM_MICRO, run.exact_match.micro)):
    found.append(engine.Record(method, run.seed, metric, value))
    if examples:
      found += [engine.Record(method, run.seed, metric, float(y), unit=c,
                              example=i)
                for c, outcomes in run.outcomes.items()
                for i, y in enumerate(outcomes)]
  if run.tokens:
    found.append(engine.Record(method, run.seed, TOKENS, run.tokens.macro))
  if token_examples:
    found += [engine.Record(method, run.seed, TOKENS, float(y), unit=c,
                            example=i, size=float(n))
              for c, (correct, total) in run.token_outcomes.items()
              for i, (y, n) in enumerate(zip(correct, total))]
  return found


def _table(runs: Mapping[str, Sequence[text2sql_seed_runs.SeedRun]], *,
           bootstrap: Optional['Bootstrap']) -> engine.Table:
  """The runs' records, with their examples if there is a bootstrap and
  every run has the same ones (and their token examples if also the same
  tokens: `_token_units`), as the `SHARED` bootstrap needs."""
  everything = [r for method_runs in runs.values() for r in method_runs]
  examples = bootstrap is not None and _same_examples(everything)
  tokens = examples and _token_units(everything) is not None
  return engine.Table(
      record for method, method_runs in runs.items() for run in method_runs
      for record in records(method, run, examples=examples,
                            token_examples=tokens))


def _same_examples(runs: Sequence[text2sql_seed_runs.SeedRun]) -> bool:
  return all(r.examples == runs[0].examples for r in runs[1:])


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

  def _kwargs(self) -> dict[str, Any]:
    return dict(num_replicates=self.num_replicates,
                confidence=self.confidence, seed=self.seed)

  def accuracy(self, table: engine.Table, method: str,
               resample_seeds: bool) -> Optional[bootstrap_lib.AccuracyIntervals]:
    """A method's exact match (`engine.bootstrap_method`)."""
    return engine.bootstrap_method(table, method, EM_MACRO,
                                   resample_seeds=resample_seeds,
                                   **self._kwargs())

  def compare(self, table: engine.Table, comparison: engine.Comparison,
              resample_seeds: bool) -> engine.Difference:
    """`engine.compare`, resampling the seeds too if `resample_seeds`."""
    return engine.compare(
        table, comparison._replace(resample_seeds=resample_seeds),
        **self._kwargs())

  def to_json(self) -> dict[str, Any]:
    return collections.OrderedDict(
        num_replicates=self.num_replicates, confidence=self.confidence,
        seed=self.seed, stratified_by='client', paired=True)


def _exact_match_json(runs: Sequence[text2sql_seed_runs.SeedRun],
                      bootstrap: Optional[Bootstrap]) -> dict[str, Any]:
  """A method's test EM over seeds: means, t and bootstrap intervals."""
  summary = text2sql_report.summarize_seeds([r.exact_match for r in runs])
  plain = with_seeds = None
  table = _table({'': runs}, bootstrap=bootstrap)
  if bootstrap is not None:
    plain, with_seeds = (bootstrap.accuracy(table, '', resample_seeds)
                         for resample_seeds in (False, True))

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

  The `comparisons` of A's and B's `records` on `apps.common.report_engine`.
  Each entry has the `difference` (A's mean over its seeds minus B's), the
  t interval of the per-seed differences on the seeds both have
  (`seed_ci95`, None with one), the paired bootstrap over test examples
  (`bootstrap_ci95`) and over examples and seeds (`bootstrap_seeds_ci95`),
  each with its own reading (`intervals.verdict`, `*_verdict`), and the
  entry's `verdict` by the one rule of every page
  (`intervals.comparison_verdict` of the seed interval and the bootstrap
  over test examples). A client's entry reads its interval off the same
  bootstrap draws.

  `token_accuracy` is A - B of MacroAvg teacher-forced test token accuracy,
  what separates models whose exact match is still 0: the same fields and
  `paired_seeds`, the bootstraps resampling test examples each weighing its
  tokens; those are None unless every run recorded its per-example token
  counts and all have the same ones (they tokenize alike), and a bootstrap
  some replicates cannot draw says why (`*_undefined`). The entry is None
  when a run has no token counts at all.
  """
  table = _table({'A': a, 'B': b}, bootstrap=bootstrap)
  declared = comparisons('A', 'B', (a_name, b_name))
  b_by_seed = {r.seed: r for r in b}
  common = [(r, b_by_seed[r.seed]) for r in a if r.seed in b_by_seed]
  if not common:
    raise errors.InputError(f'{a_name} and {b_name} share no seed.')
  # The bootstrap over examples, then over examples and seeds.
  found = collections.OrderedDict(
      (key, [bootstrap.compare(table, c, resample_seeds)
             if bootstrap is not None else engine.compare(table, c)
             for resample_seeds in (False, True)])
      for key, c in declared.items()
      if key != 'token_accuracy' or all(r.tokens for r in [*a, *b]))
  mean_a = text2sql_report.summarize_seeds([r.exact_match for r in a])
  mean_b = text2sql_report.summarize_seeds([r.exact_match for r in b])
  names = dict(a_name=a_name, b_name=b_name)
  content = collections.OrderedDict(
      (key, _entry(getattr(mean_a, part).estimate
                   - getattr(mean_b, part).estimate, found[key], **names))
      for key, part in (('macro_avg', 'macro'), ('micro_avg', 'micro')))
  content['per_client'] = collections.OrderedDict(
      (client, _entry(
          mean_a.per_client[client].estimate
          - mean_b.per_client[client].estimate, found['macro_avg'],
          client=client, per_seed=[
              x.exact_match.per_client[client]
              - y.exact_match.per_client[client] for x, y in common],
          **names))
      for client in mean_a.clients)
  tokens = None
  if 'token_accuracy' in found:
    tokens = _entry(
        float(np.mean([run.tokens.macro for run in a])
              - np.mean([run.tokens.macro for run in b])),
        found['token_accuracy'], paired_seeds=len(common), **names)
  drawn = found['macro_avg'][0].bootstrap is not None
  return collections.OrderedDict(
      a=a_name, b=b_name, num_seeds=[len(a), len(b)],
      paired_seeds=[x.seed for x, _ in common],
      exact_match=content, token_accuracy=tokens,
      bootstrap=bootstrap.to_json() if drawn else None)


def _entry(difference: float, found: Sequence[engine.Difference], *,
           a_name: str, b_name: str, client: Optional[str] = None,
           per_seed: Optional[Sequence[float]] = None,
           **extra: Any) -> dict[str, Any]:
  """One entry of `difference_json` from `found`, the comparison's
  `engine.Difference`s with the bootstrap over examples and over examples
  and seeds; with `client`, that client's (`per_seed`: its per-seed
  differences). `extra` entries go between `difference` and the intervals.
  """
  seed = (found[0].seed if client is None
          else intervals.seed_interval(per_seed))
  content = collections.OrderedDict(
      difference=difference, **extra,
      seed_ci95=text2sql_report.interval_json(seed),
      seed_verdict=intervals.verdict(seed, a_name, b_name))
  average = (bootstrap_lib.MACRO_AVG
             if found[0].comparison.average == engine.MACRO
             else bootstrap_lib.MICRO_AVG)
  for key, result in zip(('bootstrap', 'bootstrap_seeds'), found):
    interval = result.bootstrap
    if client is not None and interval is not None:
      interval = result.drawn.per_client[client]
    # A client with few examples that have tokens (the template parser's
    # gold templates outside its classes score none) can make a
    # replicate's MacroAvg undefined: the interval is then missing and
    # says why, and the rest of the report stands.
    bounds = interval.bounds() if interval is not None else None
    content[f'{key}_ci95'] = bounds
    content[f'{key}_verdict'] = (
        intervals.verdict(interval, a_name, b_name) if bounds else None)
    undefined = (result.drawn.undefined.get(client or average)
                 if result.drawn else None)
    if undefined:
      content[f'{key}_undefined'] = 'cannot be drawn: ' + undefined
  # The page's verdict: the one rule of every results page.
  content['verdict'] = (found[0].verdict if client is None else
                        intervals.comparison_verdict(
                            seed, content['bootstrap_ci95'], a_name, b_name))
  return content


def summarize_runs(
    runs: Mapping[text2sql_report.MethodKey, Sequence[tuple[int, str]]],
    *,
    output_dir: str,
    baseline: Optional[text2sql_seed_runs.BaselinePredictions] = None,
    command: str = '',
    expect_full_splits: bool = False,
    num_replicates: int = bootstrap_lib.DEFAULT_NUM_REPLICATES,
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
  read, by_seed = text2sql_seed_runs.read_runs(runs)
  first = next(iter(read.values()))[0]
  clients = first.exact_match.clients
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
  figures = text2sql_seed_runs.write_figures(first_runs, output_dir,
                                             clients=clients)

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
