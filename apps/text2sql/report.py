"""The Lorar paper's Table 2: test EM per client and method, beside the paper.

Zhang et al., ACL 2023 (see `shared/docs/lorar.md`) report test exact match
(%) of every training paradigm on the eight text-to-SQL clients with MacroAvg
and MicroAvg. `table2_markdown` lays out our numbers the same way, with the
paper's under each of our rows; `table2_json` gives the same content for a
`results.json`. A method's numbers are either one run's (`ClientAccuracies`)
or one per training seed (a sequence of them): then each cell is the mean
over seeds ± the half-width of its 95 % Student-t interval
(`tff_nlp.metrics.intervals.seed_interval`), and the Source column says how
many seeds ("ours (n=3)").

Methods are keyed by tuples:

*   `('finetune',)`: one model per client trained on its own data;
*   `('centralized',)`: one model on the union of the clients' data;
*   `('federated', algorithm, weighting)`: `algorithm` one of 'fedavg',
    'fedopt', 'fedprox' and `weighting` one of the client weightings of
    `tff_nlp.algorithms.Weighting` ('num_examples', 'uniform',
    'loss_reduction', 'lorar'). The paper's plain "FedOPT" is
    `('federated', 'fedopt', 'num_examples')` and "FedOPT + Lorar" is
    `('federated', 'fedopt', 'lorar')`;
*   `('baseline', name)`: a method that learns nothing, `name` one of
    `BASELINES`, e.g. `TEMPLATE_RETRIEVAL` (`apps.text2sql.
    template_retrieval`). Not in the paper, so it has no paper row.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import math
import types
from typing import Any, Optional, Union

from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql

MethodKey = tuple[str, ...]

# The table's columns, in the paper's order (large, medium, small clients).
CLIENTS = ('advising', 'atis', 'geography', 'restaurants', 'scholar',
           'academic', 'imdb', 'yelp')
ALGORITHMS = {'fedopt': 'FedOPT', 'fedavg': 'FedAvg', 'fedprox': 'FedProx'}
# The weighting's suffix in a row label; `num_examples` is the paper's
# baseline weighting, so the algorithm's name alone stands for it.
WEIGHTINGS = {
    'num_examples': '',
    'lorar': ' + Lorar',
    'uniform': ' + uniform',
    'loss_reduction': ' + loss_reduction',
}
# Methods that learn nothing: name -> row label.
BASELINES = {'template_retrieval': 'Template retrieval (no learning)'}
TEMPLATE_RETRIEVAL: MethodKey = ('baseline', 'template_retrieval')
MISSING = '–'
# Marks an average over fewer than all `CLIENTS`.
PARTIAL_MARK = '*'


@dataclasses.dataclass(frozen=True)
class PaperResult:
  """Numbers reported in the paper for one method, in percent.

  Attributes:
    macro_avg: MacroAvg test EM (%).
    micro_avg: MicroAvg test EM (%).
    per_client: Test EM (%) by client name, where known for certain.
  """

  macro_avg: float
  micro_avg: float
  per_client: Mapping[str, float] = dataclasses.field(default_factory=dict)


def _federated(algorithm: str, weighting: str) -> MethodKey:
  return ('federated', algorithm, weighting)


# The paper's headline numbers as restated in `shared/docs/lorar.md`. That
# note has no per-client numbers, so none are given here.
PAPER_RESULTS: Mapping[MethodKey, PaperResult] = types.MappingProxyType({
    ('finetune',): PaperResult(62.78, 71.47),
    ('centralized',): PaperResult(70.32, 74.21),
    _federated('fedopt', 'num_examples'): PaperResult(58.32, 68.49),
    _federated('fedopt', 'lorar'): PaperResult(62.55, 69.39),
    _federated('fedavg', 'num_examples'): PaperResult(40.03, 57.89),
    _federated('fedavg', 'lorar'): PaperResult(60.16, 63.91),
    _federated('fedprox', 'num_examples'): PaperResult(41.67, 58.84),
    _federated('fedprox', 'lorar'): PaperResult(58.39, 62.42),
    _federated('fedopt', 'uniform'): PaperResult(61.04, 68.13),
    _federated('fedopt', 'loss_reduction'): PaperResult(60.67, 67.12),
})

# The table's rows: Table 2's order, then FedOPT's other two weightings.
TABLE2_METHODS: tuple[MethodKey, ...] = (
    ('finetune',),
    ('centralized',),
    _federated('fedopt', 'num_examples'),
    _federated('fedopt', 'lorar'),
    _federated('fedavg', 'num_examples'),
    _federated('fedavg', 'lorar'),
    _federated('fedprox', 'num_examples'),
    _federated('fedprox', 'lorar'),
    _federated('fedopt', 'uniform'),
    _federated('fedopt', 'loss_reduction'),
)


def method_label(method: MethodKey) -> str:
  """The row label of a method key, e.g. 'FedAvg + Lorar'.

  Args:
    method: A method key (see the module docstring).

  Returns:
    The label.

  Raises:
    ValueError: If `method` is not a valid key.
  """
  method = tuple(method)
  if method == ('finetune',):
    return 'Finetuning'
  if method == ('centralized',):
    return 'Centralized'
  if (len(method) == 3 and method[0] == 'federated'
      and method[1] in ALGORITHMS and method[2] in WEIGHTINGS):
    return ALGORITHMS[method[1]] + WEIGHTINGS[method[2]]
  if len(method) == 2 and method[0] == 'baseline' and method[1] in BASELINES:
    return BASELINES[method[1]]
  raise ValueError(
      f'Unknown method {method!r}; expected (\'finetune\',), '
      f'(\'centralized\',), (\'federated\', algorithm, weighting) with '
      f'algorithm in {list(ALGORITHMS)} and weighting in '
      f'{list(WEIGHTINGS)}, or (\'baseline\', name) with name in '
      f'{list(BASELINES)}.')


def method_slug(method: MethodKey) -> str:
  """A method key in file names and `results.json` keys, e.g. 'fedavg-lorar'.

  Federated methods drop the leading 'federated' ('fedavg-num_examples'),
  others join their parts ('finetune', 'baseline-template_retrieval').
  """
  return '-'.join(method[1:] if method[0] == 'federated' else method)


# One run's accuracies, or one per training seed.
Accuracies = Union[text2sql.ClientAccuracies,
                   Sequence[text2sql.ClientAccuracies]]


@dataclasses.dataclass(frozen=True)
class SeedSummary:
  """A method's accuracies over training seeds: means with t intervals.

  Every interval is `intervals.seed_interval` of the per-seed values: the
  mean over seeds and its 95 % Student-t interval (NaN bounds with one
  seed).

  Attributes:
    per_client: Client name -> interval of its accuracy, in the seeds'
      client order.
    macro: Interval of MacroAvg (the mean over seeds of each seed's
      MacroAvg).
    micro: Interval of MicroAvg (the mean over seeds of each seed's
      MicroAvg).
    seeds: The per-seed accuracies.
  """

  per_client: Mapping[str, intervals.Interval]
  macro: intervals.Interval
  micro: intervals.Interval
  seeds: tuple[text2sql.ClientAccuracies, ...]

  @property
  def num_seeds(self) -> int:
    return len(self.seeds)

  @property
  def clients(self) -> tuple[str, ...]:
    return self.seeds[0].clients

  def to_json(self) -> dict[str, Any]:
    """Means, their [low, high] intervals (None with one seed), the seeds.

    Fractions, as `ClientAccuracies.to_json`: `per_client` maps each client
    to its `accuracy` (mean over seeds) and `ci95`; then `macro_avg`,
    `macro_avg_ci95`, `micro_avg`, `micro_avg_ci95`, `num_seeds` and
    `seeds` (each seed's `ClientAccuracies.to_json`).
    """
    return collections.OrderedDict(
        per_client=collections.OrderedDict(
            (c, collections.OrderedDict(accuracy=v.estimate,
                                        ci95=interval_json(v)))
            for c, v in self.per_client.items()),
        macro_avg=self.macro.estimate,
        macro_avg_ci95=interval_json(self.macro),
        micro_avg=self.micro.estimate,
        micro_avg_ci95=interval_json(self.micro),
        num_seeds=self.num_seeds,
        seeds=[s.to_json() for s in self.seeds],
    )


def interval_json(interval: intervals.Interval) -> Optional[list[float]]:
  """[low, high] of an interval, or None if undefined (one seed)."""
  _, low, high = interval
  if math.isnan(low) or math.isnan(high):
    return None
  return [low, high]


def summarize_seeds(
    seeds: Sequence[text2sql.ClientAccuracies],
    confidence: float = intervals.DEFAULT_CONFIDENCE) -> SeedSummary:
  """Means over seeds with their t intervals, per client and averaged.

  Args:
    seeds: One method's accuracies, one per training seed, each on the same
      clients in the same order.
    confidence: Coverage of the intervals.

  Returns:
    The `SeedSummary`.

  Raises:
    ValueError: If `seeds` is empty or the seeds' clients differ.
  """
  seeds = tuple(seeds)
  if not seeds:
    raise ValueError('Need the accuracies of at least one seed.')
  clients = seeds[0].clients
  for accuracies in seeds[1:]:
    if accuracies.clients != clients:
      raise ValueError(
          f'Every seed needs the same clients, got {list(clients)} and '
          f'{list(accuracies.clients)}.')
  return SeedSummary(
      per_client=collections.OrderedDict(
          (c, intervals.seed_interval([a.per_client[c] for a in seeds],
                                      confidence)) for c in clients),
      macro=intervals.seed_interval([a.macro for a in seeds], confidence),
      micro=intervals.seed_interval([a.micro for a in seeds], confidence),
      seeds=seeds)


def _as_summary(accuracies: Accuracies
                ) -> Union[text2sql.ClientAccuracies, SeedSummary]:
  if isinstance(accuracies, text2sql.ClientAccuracies):
    return accuracies
  return summarize_seeds(accuracies)


def _check_results(results: Mapping[MethodKey, Any],
                   methods: Sequence[MethodKey]) -> None:
  """Refuses results the table would silently leave out."""
  for method in [*methods, *results]:
    method_label(method)
  rows = {tuple(m) for m in methods}
  extra = [m for m in results if tuple(m) not in rows]
  if extra:
    raise ValueError(f'Results of methods not in the table: {extra}.')
  for method, accuracies in results.items():
    unknown = sorted(set(accuracies.clients) - set(CLIENTS))
    if unknown:
      raise ValueError(
          f'{method_label(method)}: unknown clients {unknown}; expected some '
          f'of {list(CLIENTS)}.')


def _percent(fraction: float) -> str:
  return f'{100 * fraction:.2f}'


def format_interval(interval: intervals.Interval) -> str:
  """'mean ± half-width' in percent of a symmetric (t) interval of a
  fraction, e.g. '50.00 ± 49.68'; only the mean with one seed."""
  estimate, low, high = interval
  if math.isnan(low) or math.isnan(high):
    return _percent(estimate)
  return f'{_percent(estimate)} ± {100 * (high - low) / 2:.2f}'


def _our_cells(
    accuracies: Union[None, text2sql.ClientAccuracies, SeedSummary]
) -> list[str]:
  if accuracies is None:
    return [MISSING] * (len(CLIENTS) + 2)
  mark = '' if set(accuracies.clients) == set(CLIENTS) else PARTIAL_MARK
  if isinstance(accuracies, SeedSummary):
    per_client = accuracies.per_client
    return ([format_interval(per_client[c]) if c in per_client else MISSING
             for c in CLIENTS]
            + [format_interval(accuracies.macro) + mark,
               format_interval(accuracies.micro) + mark])
  per_client = accuracies.per_client
  return ([_percent(per_client[c]) if c in per_client else MISSING
           for c in CLIENTS]
          + [_percent(accuracies.macro) + mark,
             _percent(accuracies.micro) + mark])


def _source(accuracies: Union[None, text2sql.ClientAccuracies, SeedSummary]
            ) -> str:
  if isinstance(accuracies, SeedSummary):
    return f'ours (n={accuracies.num_seeds})'
  return 'ours'


def _paper_cells(paper: PaperResult) -> list[str]:
  return ([f'{paper.per_client[c]:.2f}' if c in paper.per_client else MISSING
           for c in CLIENTS]
          + [f'{paper.macro_avg:.2f}', f'{paper.micro_avg:.2f}'])


def table2_markdown(
    results: Mapping[MethodKey, Accuracies],
    *,
    methods: Sequence[MethodKey] = TABLE2_METHODS,
    paper: Mapping[MethodKey, PaperResult] = PAPER_RESULTS,
) -> str:
  """The Markdown table of test EM (%) in the layout of the paper's Table 2.

  One row of ours per method (all cells `MISSING` if the method has no
  results), followed by a row of the paper's numbers if `paper` has the
  method; the Source column says which. Columns: the `CLIENTS` in order,
  then MacroAvg and MicroAvg. A client missing from our results shows
  `MISSING`, and our averages are then over the clients present, marked
  with `PARTIAL_MARK`.

  A method given one `ClientAccuracies` per seed shows, in every cell, the
  mean over seeds ± the half-width of its 95 % t interval
  (`summarize_seeds`, `format_interval`; the mean alone with one seed), and
  "ours (n=<seeds>)" as its Source.

  Args:
    results: Our EM per method (e.g. `Text2SqlEvaluation.exact_match`), or
      a sequence of them, one per training seed.
    methods: The rows, in order.
    paper: The paper's numbers per method.

  Returns:
    The table, one line per row, without a trailing newline.

  Raises:
    ValueError: For an invalid method key, results of a method not in
      `methods` or of a client not in `CLIENTS`, or seeds of one method on
      different clients.
  """
  results = {tuple(k): _as_summary(v) for k, v in results.items()}
  _check_results(results, methods)
  header = ['Method', 'Source', *CLIENTS, 'MacroAvg', 'MicroAvg']
  lines = [
      '| ' + ' | '.join(header) + ' |',
      '|---|---|' + '---:|' * (len(header) - 2),
  ]
  for method in methods:
    method = tuple(method)
    label = method_label(method)
    ours = results.get(method)
    rows = [[label, _source(ours), *_our_cells(ours)]]
    if method in paper:
      rows.append([label, 'paper', *_paper_cells(paper[method])])
    lines.extend('| ' + ' | '.join(cells) + ' |' for cells in rows)
  return '\n'.join(lines)


def table2_json(
    results: Mapping[MethodKey, Accuracies],
    *,
    methods: Sequence[MethodKey] = TABLE2_METHODS,
    paper: Mapping[MethodKey, PaperResult] = PAPER_RESULTS,
) -> dict[str, Any]:
  """The content of `table2_markdown` as a JSON-ready dict.

  Our numbers are fractions with their counts (`ClientAccuracies.to_json`),
  or for a method with one result per seed the means over seeds with their
  t intervals and the seeds (`SeedSummary.to_json`); the paper's are
  percentages as printed, under keys ending in `_percent`.

  Args:
    results: Our EM per method, or a sequence of them per seed.
    methods: The methods, in order.
    paper: The paper's numbers per method.

  Returns:
    `{'clients': CLIENTS, 'methods': [...]}`, one entry per method with its
    `key` (a list), `label`, `ours` and `paper` (each None if absent).

  Raises:
    ValueError: As `table2_markdown`.
  """
  results = {tuple(k): _as_summary(v) for k, v in results.items()}
  _check_results(results, methods)
  entries = []
  for method in methods:
    method = tuple(method)
    ours = results.get(method)
    theirs = paper.get(method)
    entries.append(collections.OrderedDict(
        key=list(method),
        label=method_label(method),
        ours=ours.to_json() if ours else None,
        paper=collections.OrderedDict(
            macro_avg_percent=theirs.macro_avg,
            micro_avg_percent=theirs.micro_avg,
            per_client_percent=dict(theirs.per_client),
        ) if theirs else None,
    ))
  return collections.OrderedDict(clients=list(CLIENTS), methods=entries)


def _interval_percent(interval: intervals.Interval) -> str:
  return (f'{_percent(interval.estimate)} [{_percent(interval.low)}, '
          f'{_percent(interval.high)}]')


def run_markdown(
    method: MethodKey,
    evaluation: text2sql.Text2SqlEvaluation,
    *,
    bootstrap: bootstrap_lib.AccuracyIntervals,
    token_accuracy: Mapping[str, float],
    best_rounds: Mapping[str, Optional[int]],
    token_accuracy_of: str = 'the gold SQL, teacher-forced',
) -> str:
  """The report of one run (one method, one seed) in Markdown.

  The paper's Table 2 layout with the paper's numbers beside ours, the
  MacroAvg and MicroAvg bootstrap intervals over the test examples, a table
  per client (test examples, exact match with its interval, execution
  accuracy and the gold queries that fail, token accuracy) and the selected
  model of each trained unit.

  Args:
    method: The run's method.
    evaluation: Its test evaluation.
    bootstrap: `bootstrap_lib.bootstrap_accuracy` of its exact-match outcomes.
    token_accuracy: Client -> test token accuracy (a fraction).
    best_rounds: Trained unit ('federated', 'centralized' or a client) ->
      the round (epoch) of its selected model; None if it never evaluated.
    token_accuracy_of: What the token accuracy measures, for the heading.

  Returns:
    The Markdown, ending with a newline.
  """
  execution = evaluation.execution
  executed = (dict(zip(execution.clients, zip(execution.correct,
                                              execution.totals)))
              if execution else {})
  rows = []
  for i, client in enumerate(evaluation.exact_match.clients):
    total = evaluation.exact_match.totals[i]
    if client in executed:
      correct, n = executed[client]
      failing = evaluation.gold_errors.get(client, 0)
      execution_cells = (f'{_percent(correct / n)} | '
                         f'{n - failing} of {n}')
    else:
      execution_cells = f'{MISSING} (no database) | {MISSING}'
    tokens = token_accuracy.get(client)
    rows.append(
        f'| {client} | {total} | '
        f'{_interval_percent(bootstrap.per_client[client])} | '
        f'{execution_cells} | '
        f'{MISSING if tokens is None else _percent(tokens)} |')
  selected = ', '.join(
      f'{unit}: {"none (never evaluated)" if r is None else f"round {r}"}'
      for unit, r in best_rounds.items())
  table = table2_markdown({method: evaluation.exact_match}, methods=[method])
  return (
      f'# Text-to-SQL: {method_label(method)}\n\n'
      'Test exact match (%) of the model with the best merged-dev exact '
      'match; the paper\'s numbers (T5-base, pre-trained, full data) beside '
      f'ours.\n\n{table}\n\n'
      '95 % bootstrap intervals over the test examples (one seed): MacroAvg '
      f'{_interval_percent(bootstrap.macro)}, MicroAvg '
      f'{_interval_percent(bootstrap.micro)}.\n\n'
      '## Per client\n\n'
      '| client | test examples | exact match (%) [95% CI] | execution '
      'accuracy (%) | gold queries that execute | token accuracy (%) of '
      f'{token_accuracy_of} |\n'
      '|---|---:|---|---:|---:|---:|\n'
      + '\n'.join(rows) +
      f'\n\nSelected models (best merged-dev exact match): {selected}.\n')
