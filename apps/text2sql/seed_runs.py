"""Finished text-to-SQL runs read back per seed, and the baseline beside them.

The benchmark's report (`text2sql_summary.summarize_runs`) is computed from
what this module reads:

*   `read_run`: a finished `text2sql.run_text2sql` directory as a `SeedRun`:
    test exact match per client from its `results.json` and each test
    example's outcome from `predictions/<client>.jsonl`, checked against
    each other and against the client's whole test split as the run
    recorded it;
*   `template_retrieval_predictions`: the template-retrieval baseline
    (`apps.text2sql.template_retrieval`, which learns nothing) on every
    client's full test split;
*   `baseline_runs`: that baseline scored on exactly the runs' test examples
    (`align_to_baseline` finds them in the full split), once per distinct
    test set of the seeds, as `SeedRun`s like the trained methods';
*   `write_figures`: the report's figures, from the runs' round records.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import gzip
import json
import os
from typing import Any, Optional

import numpy as np

from tff_nlp import errors
from tff_nlp import training as training_lib
from apps.common import plots
from apps.text2sql import template_retrieval
from tff_nlp.data import text2sql as text2sql_data
from tff_nlp.data import text2sql_source
from apps.text2sql import experiment as text2sql
from tff_nlp.metrics import sql_execution
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import task as text2sql_task
from apps.text2sql import report as text2sql_report

# The report's figures (`write_figures`).
DEV_PLOT_FILE = 'dev_exact_match.png'
DEV_TOKEN_PLOT_FILE = 'dev_token_accuracy.png'
WEIGHTS_PLOT_FILE = 'client_weights.png'


@dataclasses.dataclass(frozen=True)
class SeedRun:
  """One finished run's test results, as the benchmark's summary uses them.

  Attributes:
    seed: The training seed.
    run_dir: The run directory; None for the baseline.
    exact_match: Test EM per client, from `results.json`.
    outcomes: Client name -> [num_examples] bool exact match of each test
      example, from `predictions/<client>.jsonl`.
    examples: Client name -> (model input, gold SQL) of each test example.
    execution: Execution accuracy of the clients with a database, if any.
    tokens: Teacher-forced token accuracy, if recorded.
    token_outcomes: Client name -> ([num_examples] correct tokens,
      [num_examples] tokens) of each test example, from the predictions;
      None for runs recorded before they were (no bootstrap of token
      accuracy then).
    seconds: Wall time of the run.
    best_rounds: The selected round per trained model.
    split_sizes: Client name -> {'train', 'dev', 'test'} example counts.
    lowercase_sql: Whether the run trained on and was scored against
      lower-cased SQL (`DataConfig.lowercase_sql`; False for runs recorded
      before the option).
  """

  seed: int
  run_dir: Optional[str]
  exact_match: text2sql_metrics.ClientAccuracies
  outcomes: Mapping[str, np.ndarray]
  examples: Mapping[str, tuple[tuple[str, str], ...]]
  execution: Optional[text2sql_metrics.ClientAccuracies] = None
  tokens: Optional[text2sql_metrics.ClientAccuracies] = None
  token_outcomes: Optional[Mapping[str, tuple[np.ndarray, np.ndarray]]] = (
      None)
  seconds: Optional[float] = None
  best_rounds: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  split_sizes: Mapping[str, Mapping[str, int]] = dataclasses.field(
      default_factory=dict)
  lowercase_sql: bool = False


def _read_predictions(path: str) -> list[dict[str, Any]]:
  """The records of a `predictions/<client>.jsonl`, in order."""
  records = []
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rt', encoding='utf-8') as f:
    for line_num, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise errors.InputError(
            f'{path}:{line_num}: not a valid JSON line ({e}).') from None
      if not isinstance(record, dict) or not {
          'input', 'gold', 'exact_match'} <= set(record):
        raise errors.InputError(
            f'{path}:{line_num}: expected a JSON object with "input", '
            '"gold" and "exact_match".')
      records.append(record)
  return records


def has_example_tokens(run_dir: str) -> bool:
  """Whether a finished run's test predictions carry per-example token
  counts (runs before 2026-11-29 have per-client counts only)."""
  folder = os.path.join(run_dir, text2sql.PREDICTIONS_DIR)
  names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
  if not names:
    return False
  records = _read_predictions(os.path.join(folder, names[0]))
  return bool(records) and 'tokens' in records[0]


def _token_outcomes(path: str, records: Sequence[Mapping[str, Any]],
                    counts: Mapping[str, Any]
                    ) -> Optional[tuple[np.ndarray, np.ndarray]]:
  """A client's per-example (correct tokens, tokens), checked against its
  `test_tokens` `counts`; None if the predictions have none (older runs)."""
  if not all('tokens' in r for r in records):
    if any('tokens' in r for r in records):
      raise errors.InputError(
          f'{path}: some lines have "tokens" and others not.')
    return None
  correct = np.array([r['correct_tokens'] for r in records], np.int64)
  total = np.array([r['tokens'] for r in records], np.int64)
  if (int(correct.sum()), int(total.sum())) != (counts['correct_tokens'],
                                                counts['tokens']):
    raise errors.InputError(
        f'{path}: {int(correct.sum())} of {int(total.sum())} tokens correct '
        f'per example, but results.json counts {counts["correct_tokens"]} of '
        f'{counts["tokens"]}.')
  return correct, total


def _client_accuracies(per_client: dict[str, dict[str, Any]], *,
                       correct_key: str,
                       total_key: str) -> text2sql_metrics.ClientAccuracies:
  """`{client: {correct_key: n, total_key: m}}` as `ClientAccuracies`."""
  return text2sql_metrics.ClientAccuracies(
      clients=tuple(per_client),
      correct=tuple(v[correct_key] for v in per_client.values()),
      totals=tuple(v[total_key] for v in per_client.values()))


def read_run(run_dir: str, seed: int) -> SeedRun:
  """Reads a finished run's `results.json` and test predictions.

  Checks that every client was scored on its whole test split (the `total`
  of its exact match equals the split size recorded in `examples`), that
  `predictions/<client>.jsonl` has a line per scored example and the same
  number correct, that its per-example token counts (if any) add up to
  `test_tokens`' per client, and that the run's seed is `seed`.

  Args:
    run_dir: A finished `run_text2sql` directory.
    seed: Its training seed.

  Returns:
    The `SeedRun`.

  Raises:
    InputError: If a file is missing or a check fails.
  """
  path = os.path.join(run_dir, text2sql.RESULTS_FILE)
  if not os.path.exists(path):
    raise errors.InputError(f'{path}: no results; is the run finished?')
  with open(path, encoding='utf-8') as f:
    results = json.load(f)
  experiment = results.get('config', {}).get('experiment', {})
  recorded_seed = experiment.get('seed')
  if recorded_seed is not None and recorded_seed != seed:
    raise errors.InputError(
        f'{path}: a run of seed {recorded_seed}, expected seed {seed}.')
  per_client = results['test']['exact_match']['per_client']
  split_sizes = results['examples']
  if list(per_client) != list(split_sizes):
    raise errors.InputError(
        f'{path}: scored clients {list(per_client)}, but the run has '
        f'{list(split_sizes)}.')
  outcomes, examples = collections.OrderedDict(), collections.OrderedDict()
  tokens = results.get('test_tokens')
  token_outcomes = collections.OrderedDict()
  for client, counts in per_client.items():
    split = split_sizes[client]['test']
    if counts['total'] != split:
      raise errors.InputError(
          f'{path}: client {client!r} was scored on {counts["total"]} test '
          f'examples, but its test split has {split}; every client must be '
          'scored on its whole test split.')
    predictions = os.path.join(run_dir, text2sql.PREDICTIONS_DIR,
                               f'{client}.jsonl')
    if not os.path.exists(predictions) and os.path.exists(
        predictions + '.gz'):
      predictions += '.gz'  # An archived run (`text2sql_benchmark`).
    if not os.path.exists(predictions):
      raise errors.InputError(
          f'{predictions}: missing; the intervals need every test '
          'prediction.')
    records = _read_predictions(predictions)
    if len(records) != split:
      raise errors.InputError(
          f'{predictions}: {len(records)} predictions, but client '
          f'{client!r} has {split} test examples.')
    outcomes[client] = np.array([bool(r['exact_match']) for r in records])
    if int(np.sum(outcomes[client])) != counts['correct']:
      raise errors.InputError(
          f'{predictions}: {int(np.sum(outcomes[client]))} exact matches, '
          f'but {path} counts {counts["correct"]}.')
    examples[client] = tuple((r['input'], r['gold']) for r in records)
    if tokens and token_outcomes is not None:
      token_outcomes[client] = _token_outcomes(predictions, records,
                                               tokens[client])
      if token_outcomes[client] is None:
        token_outcomes = None
  execution = results['test'].get('execution')
  return SeedRun(
      seed=seed,
      run_dir=run_dir,
      exact_match=_client_accuracies(per_client, correct_key='correct',
                                     total_key='total'),
      outcomes=outcomes,
      examples=examples,
      execution=_client_accuracies(
          execution['per_client'], correct_key='correct',
          total_key='total') if execution else None,
      # Runs from before token metrics existed have no 'test_tokens'.
      tokens=_client_accuracies(tokens, correct_key='correct_tokens',
                                total_key='tokens') if tokens else None,
      token_outcomes=token_outcomes if tokens else None,
      seconds=results.get('seconds'),
      best_rounds=results.get('best_rounds', {}),
      split_sizes=split_sizes,
      lowercase_sql=bool(experiment.get('data', {}).get('lowercase_sql')))


def read_runs(runs: Mapping[Any, Sequence[tuple[int, str]]]
              ) -> tuple[collections.OrderedDict, collections.OrderedDict]:
  """`read_run` of every method's (seed, run directory) pairs, checked.

  Returns:
    Method -> its `SeedRun`s in order, and seed -> a run of it (the first),
    in seed order.

  Raises:
    InputError: If a method repeats a seed, a `read_run` check fails, runs
      have different clients or runs of one seed were tested on different
      examples.
  """
  read = collections.OrderedDict()
  for method, pairs in runs.items():
    seeds = [seed for seed, _ in pairs]
    if len(set(seeds)) != len(seeds):
      raise errors.InputError(
          f'{text2sql_report.method_slug(method)}: repeated seeds {seeds}.')
    read[method] = [read_run(run_dir, seed) for seed, run_dir in pairs]
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
  return read, by_seed


@dataclasses.dataclass(frozen=True)
class BaselinePredictions:
  """Template retrieval's predictions on every client's full test split.

  Attributes:
    questions: Client name -> each test example's question, as the runs'
      model inputs start with it (`text2sql_data.model_input`), in file
      order.
    pairs: Client name -> (prediction, gold SQL) of each test example, in
      the same order (`template_retrieval.predict_clients`).
    db_paths: Client name -> SQLite database, for execution accuracy.
  """

  questions: Mapping[str, Sequence[str]]
  pairs: Mapping[str, Sequence[tuple[str, str]]]
  db_paths: Mapping[str, str]


def template_retrieval_predictions(
    data: text2sql_task.DataConfig, *, data_dir: Optional[str],
    values: str = text2sql_data.STATED
) -> BaselinePredictions:
  """The template-retrieval baseline on the full test splits of `data`.

  Args:
    data: The runs' data: its clients, `with_values` for the questions (the
      gold SQL has values either way), and `lowercase_sql`: the runs' gold
      SQL is then lower-cased outside its values, and so are the baseline's
      gold and predictions (which changes none of its exact matches: no two
      gold queries differ only there, see `DataConfig.lowercase_sql`).
    data_dir: The `shared/data` folder; None finds it.
    values: How the retrieved templates are filled: 'stated' (the headline
      protocol) or 'annotated' (oracle entities), as the runs' parser
      (`TemplateParserConfig.values`).

  Returns:
    The `BaselinePredictions`.
  """
  clients = text2sql_data.load_clients(data.clients, data_dir=data_dir,
                                       with_values=data.with_values)
  folder = text2sql_source.find_text2sql_dir(data_dir)
  pairs = template_retrieval.predict_clients(clients, data_dir=data_dir,
                                             split='test', values=values)
  if data.lowercase_sql:
    lower = text2sql_metrics.lowercase_sql
    pairs = {c: [(lower(prediction), lower(gold))
                 for prediction, gold in client_pairs]
             for c, client_pairs in pairs.items()}
  return BaselinePredictions(
      questions={c: [e.question for e in clients[c].test]
                 for c in data.clients},
      pairs=pairs,
      db_paths={c: path for c, path in
                sql_execution.find_databases(folder).items()
                if c in data.clients})


def _starts_with_question(source: str, question: str) -> bool:
  return source == question or source.startswith(
      question + text2sql_data.SCHEMA_SEPARATOR)


def align_to_baseline(examples: Sequence[tuple[str, str]],
                      questions: Sequence[str],
                      golds: Sequence[str], *, where: str) -> list[int]:
  """Where each of a run's test examples is in the full test split.

  A run scored on the whole split has its examples in the split's file
  order, like the baseline's: example i must have the gold SQL of the
  split's example i. A run scored on a subset (`max_eval_examples`) keeps
  the file order too; its examples are found in order by question and gold
  SQL (equal ones are the same question, so interchangeable).

  Args:
    examples: The run's (model input, gold SQL) per test example, in order.
    questions: The full split's questions (`BaselinePredictions`).
    golds: The full split's gold SQL.
    where: Names the run and client in errors.

  Returns:
    Indices into the full split, increasing.

  Raises:
    InputError: If the examples are not the split's (in its order).
  """
  if len(examples) == len(golds):
    for i, ((_, gold), expected) in enumerate(zip(examples, golds)):
      if gold != expected:
        raise errors.InputError(
            f'{where}: the run\'s test examples and the template-retrieval '
            f'baseline\'s do not align: example {i} has gold SQL {gold!r}, '
            f'the data folder\'s test example {i} {expected!r}. Was the run '
            'evaluated on other data?')
    return list(range(len(examples)))
  indices, j = [], 0
  for i, (source, gold) in enumerate(examples):
    while j < len(golds) and not (
        golds[j] == gold and _starts_with_question(source, questions[j])):
      j += 1
    if j == len(golds):
      raise errors.InputError(
          f'{where}: the run\'s test examples and the template-retrieval '
          f'baseline\'s do not align: the run\'s example {i} (gold SQL '
          f'{gold!r}) is not among the data folder\'s {len(golds)} test '
          'examples in file order. Was the run evaluated on other data?')
    indices.append(j)
    j += 1
  return indices


def baseline_runs(
    baseline: BaselinePredictions, first_runs: Mapping[int, SeedRun]
) -> list[tuple[SeedRun, text2sql_metrics.Text2SqlEvaluation]]:
  """The baseline on each distinct test set of the runs, in seed order.

  Args:
    baseline: Its predictions on the full splits.
    first_runs: Seed -> a run of that seed (all runs of a seed have the
      same test examples).

  Returns:
    One `SeedRun` and its evaluation per distinct test set (its `seed` the
    first seed with that set): a single one when every seed has the same
    test examples.
  """
  runs, seen = [], set()
  for seed, run in first_runs.items():
    key = tuple(run.examples.items())
    if key in seen:
      continue
    seen.add(key)
    pairs = collections.OrderedDict()
    for client, examples in run.examples.items():
      if client not in baseline.pairs:
        raise errors.InputError(
            f'{run.run_dir}: client {client!r} has no template-retrieval '
            'predictions.')
      indices = align_to_baseline(
          examples, baseline.questions[client],
          [gold for _, gold in baseline.pairs[client]],
          where=f'{run.run_dir}, client {client!r}')
      pairs[client] = [baseline.pairs[client][i] for i in indices]
    evaluation = text2sql_metrics.evaluate(pairs, db_paths=baseline.db_paths)
    runs.append((SeedRun(
        seed=seed, run_dir=None, exact_match=evaluation.exact_match,
        outcomes=collections.OrderedDict(
            (c, np.array([text2sql_metrics.exact_match(p, g) for p, g in v]))
            for c, v in pairs.items()),
        examples=run.examples, execution=evaluation.execution,
        split_sizes=run.split_sizes), evaluation))
  return runs


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
