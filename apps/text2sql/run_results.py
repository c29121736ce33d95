"""What a text-to-SQL run writes once its models are trained.

`experiment.run_text2sql` collects each trained unit's selected model's test
predictions and token metrics (`TestScores`) and records (`Trained`), then
`write_results` scores them and writes `predictions/<client>.jsonl`,
`results.json`, `results.md` and the figures of the run directory.
"""

import collections
from collections.abc import Mapping, Sequence
import json
import os
import time
from typing import Any, Optional

import numpy as np

from apps.common import plots
from apps.text2sql import report as text2sql_report
from apps.text2sql import spec as spec_lib
from apps.text2sql import summary_markdown as text2sql_summary_markdown
from apps.text2sql import template_parser as text2sql_templates
from tff_nlp import training as training_lib
from tff_nlp.data import text2sql
from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import text2sql as text2sql_metrics

RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
PREDICTIONS_DIR = 'predictions'
LOSS_PLOT_FILE = 'training_loss.png'
DEV_PLOT_FILE = 'dev_exact_match.png'
DEV_METRIC = 'dev_exact_match'


class TestScores:
  """The selected models' test predictions and token metrics, by client."""

  def __init__(self):
    self.predictions = {}  # client -> (test split, predicted SQL)
    self.test_tokens = {}  # client -> token loss and accuracy
    self._example_tokens = {}  # client -> (correct tokens, tokens) each

  def add(self, task, clients, predict, token_metrics_fn) -> None:
    for client in clients:
      test = task.splits[client]['test']
      self.predictions[client] = (test, predict(client, test))
      self.test_tokens[client] = token_metrics_fn(test)
      # Per example into the predictions file, not into results.json.
      self._example_tokens[client] = (
          self.test_tokens[client].pop('example_correct_tokens'),
          self.test_tokens[client].pop('example_tokens'))

  def pairs(self, client: str) -> list[tuple[str, str]]:
    """(predicted, gold) SQL of each of `client`'s test examples."""
    test, predicted = self.predictions[client]
    return list(zip(predicted, test.gold_sql))

  def write_predictions(self, folder: str) -> None:
    """`<client>.jsonl`: each test example's prediction and token counts."""
    os.makedirs(folder, exist_ok=True)
    for client, (test, predicted) in self.predictions.items():
      with open(os.path.join(folder, f'{client}.jsonl'), 'w',
                encoding='utf-8') as f:
        for source, gold, prediction, correct_tokens, tokens in zip(
            test.sources, test.gold_sql, predicted,
            *self._example_tokens[client]):
          f.write(json.dumps(collections.OrderedDict(
              input=source, gold=gold, prediction=prediction,
              exact_match=text2sql_metrics.exact_match(prediction, gold),
              correct_tokens=correct_tokens, tokens=tokens)) + '\n')


class Trained:
  """What the run's trained units leave for its results.

  Attributes:
    scores: Each test client's predictions and token metrics.
    records: Unit name -> its rounds' records.
    privacy: Unit name -> its DP accounting after the run (DP runs only).
    seconds_before_resume: The recorded round and evaluation times of the
      rounds before a resume, summed over units.
  """

  def __init__(self):
    self.scores = TestScores()
    self.records = {}
    self.privacy = {}
    self.seconds_before_resume = 0.0


def write_results(output_dir: str, *, spec: spec_lib.Text2SqlSpec,
                  config: Mapping[str, Any], task, parser,
                  slices: Mapping[str, tuple[Any, ...]], trained: Trained,
                  start: float) -> collections.OrderedDict:
  """Scores the test predictions and writes the run's results.

  Writes `predictions/`, `results.json`, `results.md` and the figures to
  `output_dir`, and prints the run's Table 2 row.

  Args:
    output_dir: The run directory.
    spec: The run.
    config: The run's recorded config (`config.json`).
    task: The prepared task (`task_data.prepare_task` or
      `prepare_template_task`).
    parser: The parser (`text2sql_process.build_parser`).
    slices: Per client: (its vocabulary, its sliced train split, ids made
      UNK); empty without vocabulary slicing.
    trained: What the trained units left.
    start: `time.perf_counter()` when the run started.

  Returns:
    The content of `results.json`.
  """
  scores = trained.scores
  evaluation = text2sql_metrics.evaluate(
      {c: scores.pairs(c) for c in task.clients},
      db_paths=task.databases)
  scores.write_predictions(os.path.join(output_dir, PREDICTIONS_DIR))
  best_rounds = {
      name: best_round(records) for name, records in trained.records.items()}
  # One seed: the interval covers test-set sampling only; the benchmark
  # (`text2sql_summary`) adds seed variation over several runs.
  bootstrap = bootstrap_lib.bootstrap_accuracy(
      {c: [[text2sql_metrics.exact_match(p, g) for p, g in scores.pairs(c)]]
       for c in task.clients})
  training = spec.training
  results = collections.OrderedDict(
      config=config,
      method=list(training.method),
      method_label=text2sql_report.method_label(training.method),
      vocabulary_size=task.tokenizer.vocabulary_size(),
      **({'lora': lora_sizes(parser.lora_model_fn)} if spec.lora else {}),
      examples={c: {s: len(task.splits[c][s]) for s in text2sql.SPLITS}
                for c in task.clients},
      truncated={c: {s: {'sources': task.splits[c][s].truncated_sources,
                         'targets': task.splits[c][s].truncated_targets}
                     for s in text2sql.SPLITS} for c in task.clients},
      best_rounds=best_rounds,
      test=evaluation.to_json(),
      test_exact_match_bootstrap_ci95=bootstrap.to_json(),
      test_tokens={c: scores.test_tokens[c] for c in task.clients},
      vocab_slices={c: collections.OrderedDict(
          keys=int(v.num_keys), distinct_ids=int(v.distinct_ids),
          ids_to_unk=int(unknown)) for c, (v, _, unknown) in slices.items()},
      rounds=trained.records,
      # A DP run's ε (one unit: the federated model).
      **({'privacy': trained.privacy[training.paradigm]} if trained.privacy
         else {}),
      **(_template_results(task, spec.model) if spec.templates else {}),
      seconds=time.perf_counter() - start + trained.seconds_before_resume,
      seconds_before_resume=trained.seconds_before_resume,
  )
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE), results)
  _write_table(output_dir, spec, evaluation, bootstrap=bootstrap,
               test_tokens=scores.test_tokens, best_rounds=best_rounds)
  write_plots(trained.records, output_dir,
              federated=training.paradigm == 'federated',
              clients=task.clients)
  # The Table 2 rows only: the benchmark and the demo print one per run.
  print(text2sql_report.table2_markdown(
      {training.method: evaluation.exact_match}, methods=[training.method]))
  return results


def _template_results(task, model) -> dict[str, Any]:
  """The template parser's coverage and stated values, per test client."""
  return {
      'template_coverage': {
          c: dict(zip(('covered', 'total'), text2sql_templates.coverage(
              task.splits[c]['test'].y))) for c in task.clients},
      'template_values': model.values,
      # Test questions whose gold SQL needs a value they do not state.
      'unstated_values': {
          c: dict(questions=sum(
              bool(text2sql.unstated_values(q, s))
              for q, s in task.splits[c]['test'].questions),
                  total=len(task.splits[c]['test']))
          for c in task.clients}}


def _write_table(output_dir: str, spec: spec_lib.Text2SqlSpec, evaluation, *,
                 bootstrap, test_tokens, best_rounds) -> None:
  """`results.md`: the run's Table 2 and what the model saw."""
  report = text2sql_report.run_markdown(
      spec.training.method, evaluation, bootstrap=bootstrap,
      token_accuracy={c: v['token_accuracy'] for c, v in test_tokens.items()},
      best_rounds=best_rounds,
      token_accuracy_of=('the gold template (template accuracy)'
                         if spec.templates
                         else 'the gold SQL, teacher-forced'))
  title, rest = report.split('\n', 1)
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write(f'{title}\n\n'
            + text2sql_summary_markdown.what_the_model_saw(output_dir) + rest)


def lora_sizes(model_fn) -> collections.OrderedDict:
  """A LoRA run's adapter and model sizes (`results.json`'s `lora`)."""
  count = model_fn.parameter_count
  return collections.OrderedDict(
      adapter_parameters=count.adapters,
      trained_parameters=count.trainable,
      model_parameters=count.total - count.adapters,
      # Reaches each client once, with the computation (never in a round).
      base_bytes_once=model_fn.base_bytes)


def best_round(records: Sequence[Mapping[str, Any]]) -> Optional[int]:
  """The round of the selected model: the last with the best dev EM."""
  rounds, values = plots.metric_series(records, f'eval/{DEV_METRIC}')
  if not values:
    return None
  # The last of the best, as `experiment._DevEvaluator` selects.
  return rounds[len(values) - 1 - int(np.argmax(values[::-1]))]


def write_plots(unit_records: Mapping[str, Sequence[Mapping[str, Any]]],
                output_dir: str, *, federated: bool,
                clients: Sequence[str]) -> None:
  """Dev EM against rounds per trained model; client losses if federated."""
  plots.plot_metric_by_round(
      {name: plots.metric_series(records, f'eval/{DEV_METRIC}')
       for name, records in unit_records.items()},
      os.path.join(output_dir, DEV_PLOT_FILE),
      y_label='dev exact match', title='Dev exact match')
  if federated:
    (records,) = unit_records.values()
    plots.plot_client_training_loss(
        {'federated': {clients[i]: series for i, series in
                       plots.client_loss_series(records).items()}},
        os.path.join(output_dir, LOSS_PLOT_FILE),
        y_label='mean training loss of the round')
