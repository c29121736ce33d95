"""The weighting demo: the four client weightings of Lorar on real text data.

A short federated training of the fastText-style classifier on a
`shared/data/text_classification` dataset split into label-skewed clients of
very different sizes, once per weighting mechanism (`num_examples`, `uniform`,
`loss_reduction`, `lorar`; see `tff_nlp.algorithms.Weighting`). As in the
Lorar paper (Zhang et al., ACL 2023), every client takes part in every round
(unless `clients_per_round` says otherwise) and the final global model is
evaluated on each client's own test set, with MacroAvg (mean of the
per-client accuracies) and MicroAvg (accuracy over all test examples pooled).

All weightings start from the same initial model and see the same client
batches in the same order, so their results differ only by the weighting.
Every random choice (client split, initial weights, client sampling, example
order) is seeded from the loop's `seed`, so the same arguments give the same
numbers, also when a killed run is resumed by running it again.

It is a small stand-in for the paper's text-to-SQL pipeline, which `make demo`
runs itself (`apps.text2sql.experiment`, with the template parser);
`apps.common.text_classification_task` holds the reusable set-up.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import os
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms

from tff_nlp import templates

from tff_nlp import aggregators
from tff_nlp import data
from tff_nlp import models
from apps.common import plots
from tff_nlp import training as training_lib
from tff_nlp.aggregators import factory as aggregation_lib
from apps.common import text_classification_task as text_classification

WEIGHTINGS = tuple(w.value for w in aggregators.Weighting)
RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
LOSS_PLOT_FILE = 'training_loss.png'
ACCURACY_PLOT_FILE = 'macro_accuracy.png'


@dataclasses.dataclass(frozen=True)
class WeightingTrainingConfig:
  """The federated training, the same for every weighting.

  Attributes:
    algorithm: 'fedavg', 'fedopt' or 'fedprox' (server optimizers as in the
      Lorar paper; see `tff_nlp.algorithms.build_fl_process`).
    local_epochs: Passes of every client over its data per round.
    batch_size: Client batch size.
    client_optimizer: A key of `templates.CLIENT_OPTIMIZERS`.
    client_learning_rate: The client optimizer's learning rate.
    proximal_strength: FedProx's mu (only for 'fedprox').
    embedding_dim: Word-embedding size of the classifier.
  """

  algorithm: str = 'fedavg'
  local_epochs: int = 2
  batch_size: int = 16
  client_optimizer: str = 'sgd'
  client_learning_rate: float = 1.0
  proximal_strength: float = 0.0
  embedding_dim: int = 64

  def __post_init__(self):
    for name in ('local_epochs', 'batch_size', 'embedding_dim'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got {getattr(self, name)}.')
    if self.client_optimizer not in templates.CLIENT_OPTIMIZERS:
      raise ValueError(
          f'Unknown client_optimizer {self.client_optimizer!r}; expected one '
          f'of {sorted(templates.CLIENT_OPTIMIZERS)}.'
      )


@dataclasses.dataclass(frozen=True)
class WeightingResult:
  """The outcome of training with one weighting.

  Attributes:
    weighting: The weighting's name.
    accuracies: The final global model's accuracy on every client.
    records: Every round's record (`metrics.jsonl` of its run): training
      metrics, evaluations when due, the clients and their outputs (and a
      DP run's ε after the round, under `privacy`).
    privacy: A DP run's ε after its rounds and what it rests on
      (`analysis.privacy.DpAccounting.to_json`); None without DP.
  """

  weighting: str
  accuracies: text_classification.Accuracies
  records: list[dict[str, Any]]
  privacy: Optional[dict[str, Any]] = None


def _evaluation_fn(task, spec) -> training_lib.EvaluateFn:
  """Accuracies of global weights on every client's test set, as metrics."""
  keras_model = models.build_keras_model(spec)

  def evaluate(model_weights):
    model_weights.assign_weights_to(keras_model)
    return _accuracies_json(
        text_classification.evaluate_classifier(keras_model, task.clients))

  return evaluate


def _client_data_fn(task, training, seed) -> training_lib.ClientDataFn:
  def client_data_fn(round_num, client_ids):
    return [
        templates.with_client_config(
            text_classification.train_dataset(
                task.clients[client_id],
                batch_size=training.batch_size,
                shuffle_seed=(seed, round_num, client_id),
            ),
            learning_rate=training.client_learning_rate,
            num_epochs=training.local_epochs,
        )
        for client_id in client_ids
    ]

  return client_data_fn


def train_with_weighting(
    task: text_classification.FederatedTextClassification,
    *,
    weighting: str,
    training: WeightingTrainingConfig,
    loop: training_lib.LoopConfig,
    output_dir: str,
    tensorboard_dir: Optional[str] = None,
    aggregation: Optional[aggregation_lib.AggregationConfig] = None,
) -> WeightingResult:
  """Trains the classifier on the clients with one weighting, resumably.

  Executes TFF computations in the current context (e.g. inside `with
  tff_nlp.runtime.local_cpp_context():`). Checkpoints and per-round records
  go to `output_dir` (see `tff_nlp.training.run_training`); running it again
  with the same arguments resumes after the latest checkpoint.

  Args:
    task: The clients' data.
    weighting: The client weighting mechanism.
    training: The federated training.
    loop: Rounds, sampling, checkpoint and evaluation cadence; its seed also
      seeds the initial model and the clients' example order.
    output_dir: The run directory of this weighting.
    tensorboard_dir: TensorBoard log directory (default: in `output_dir`).
    aggregation: How client updates are aggregated (weight cap, robust,
      DP); None: the weighted mean. A DP run records its ε every round and
      in the result.

  Returns:
    The `WeightingResult`, with the accuracies of the final global model.

  Raises:
    InputError: An `aggregation` that does not fit the run.
  """
  aggregator, accounting = None, None
  if aggregation is not None:
    aggregator, accounting = aggregation_lib.build_model_aggregator(
        aggregation, weighting=weighting,
        # More than the clients is refused by the loop, in its words.
        clients_per_round=min(loop.clients_per_round, len(task.clients)),
        population=len(task.clients), rounds=loop.rounds)
  spec = task.model_spec(embedding_dim=training.embedding_dim, seed=loop.seed)

  def build():
    return algorithms.build_fl_process(
        models.build_model_fn(spec),
        algorithm=training.algorithm,
        weighting=weighting,
        client_optimizer_fn=templates.CLIENT_OPTIMIZERS[
            training.client_optimizer](
                learning_rate=training.client_learning_rate),
        proximal_strength=training.proximal_strength,
        model_aggregator=aggregator,
        with_client_config=True,
        # Each client's weight, losses and fallback, in metrics.jsonl.
        client_outputs=True,
    )

  # Built once per configuration in this Python process (the weightings of
  # a comparison on one task, seeds of equal shapes): a function of the
  # model spec (vocabulary, lengths, classes, seed), the weighting and the
  # client training. Runs with an aggregator (robust or DP) build their own.
  process = build() if aggregator is not None else (
      training_lib.shared_processes().get(
          ('weighting_demo', training_lib.config_digest(
              [spec, training, weighting]), weighting), build))
  run = training_lib.run_training(
      process,
      client_data_fn=_client_data_fn(task, training, loop.seed),
      num_clients=len(task.clients),
      config=loop,
      output_dir=output_dir,
      evaluate_fn=_evaluation_fn(task, spec),
      tensorboard_dir=tensorboard_dir,
      description=weighting,
      round_metrics_fn=accounting and accounting.round_metrics,
  )
  final = run.records[-1]['eval']
  return WeightingResult(
      weighting=weighting,
      accuracies=text_classification.Accuracies(
          correct=tuple(final['correct']),
          totals=tuple(final['test_examples']),
      ),
      records=run.records,
      privacy=accounting and accounting.to_json(loop.rounds),
  )


def _accuracies_json(accuracies: text_classification.Accuracies
                     ) -> dict[str, Any]:
  return collections.OrderedDict(
      per_client_accuracy=accuracies.per_client,
      macro_avg=accuracies.macro,
      micro_avg=accuracies.micro,
      correct=list(accuracies.correct),
      test_examples=list(accuracies.totals),
  )


def _percent(value: float) -> str:
  return f'{100 * value:.2f}'


def results_table(
    results: Sequence[WeightingResult], train_sizes: Sequence[int]
) -> str:
  """The Markdown table of test accuracies (%), one row per weighting.

  Args:
    results: The results to tabulate, in row order.
    train_sizes: Training examples of each client, shown in the header.

  Returns:
    The table, one line per row, without a trailing newline.
  """
  header = (['Weighting']
            + [f'C{i + 1} ({n})' for i, n in enumerate(train_sizes)]
            + ['MacroAvg', 'MicroAvg'])
  lines = [
      '| ' + ' | '.join(header) + ' |',
      '|---|' + '---:|' * (len(header) - 1),
  ]
  for result in results:
    cells = ([result.weighting]
             + [_percent(a) for a in result.accuracies.per_client]
             + [_percent(result.accuracies.macro),
                _percent(result.accuracies.micro)])
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def _privacy_line(result: WeightingResult) -> str:
  p = result.privacy
  return (f'\n{result.weighting}: differentially private, epsilon '
          f'{p["epsilon"]:.4g} at delta {p["delta"]:.3g} (noise multiplier '
          f'{p["noise_multiplier"]:.4g}, {p["clients_per_round"]} of '
          f'{p["population"]} clients per round, {p["rounds"]} rounds, '
          f'{p["accountant"]}).\n')


def what_the_model_saw(*, train_examples: Sequence[int],
                       test_examples: Sequence[int],
                       truncated: Mapping[str, Any], local_epochs: int,
                       rounds: int, dataset: str) -> str:
  """Markdown: the report's data, truncation, test set and protocol.

  From the prepared task itself, so the report says what this run saw; a
  cut text is still classified, so truncation makes no test example
  impossible, and the section says so with the count.
  """
  return '\n'.join([
      '## What the model saw', '',
      f'- **Training data.** Every training example of each client, '
      f'{local_epochs} local epoch(s) a round for {rounds} rounds: '
      + ' / '.join(f'{n:,}' for n in train_examples)
      + f' ({sum(train_examples):,} {dataset} training texts).',
      f'- **Truncation.** Texts longer than {truncated["max_length"]} tokens '
      f'are cut to {truncated["max_length"]}: {truncated["train"]:,} training '
      f'and {truncated["test"]:,} test texts. A cut text is still classified,'
      f' so no test example is impossible because of it.',
      f'- **Test set.** Each client\'s own test split: '
      + ' / '.join(f'{n:,}' for n in test_examples)
      + f' ({sum(test_examples):,} in all), the same for every weighting.',
      '- **Protocol.** Accuracy of the global model after the last round; '
      'nothing is selected on the test set.',
      '- **Verdicts.** One seed and no interval: by the verdict rule '
      '(docs/results/README.md) no difference between weightings is '
      'called; the table describes this run.'])


def write_plots(
    results: Sequence[WeightingResult], train_sizes: Sequence[int],
    output_dir: str
) -> None:
  """Writes `training_loss.png` and `macro_accuracy.png` to `output_dir`.

  Args:
    results: The weightings' results.
    train_sizes: Training examples of each client, for the legend.
    output_dir: Where to write.
  """
  plots.plot_client_training_loss(
      {
          f'{r.weighting}: MacroAvg {_percent(r.accuracies.macro)}%': {
              f'C{client_id + 1} ({train_sizes[client_id]})': series
              for client_id, series in plots.client_loss_series(
                  r.records).items()
          }
          for r in results
      },
      os.path.join(output_dir, LOSS_PLOT_FILE),
      y_label='mean training loss of the round',
      legend_title='client (train size)',
  )
  plots.plot_metric_by_round(
      {r.weighting: plots.metric_series(r.records, 'eval/macro_avg')
       for r in results},
      os.path.join(output_dir, ACCURACY_PLOT_FILE),
      y_label='MacroAvg test accuracy',
      title='Global model, per weighting',
  )


def run_weighting_demo(
    *,
    data_dir: Optional[str],
    output_dir: str,
    client_data: text_classification.ClientDataConfig,
    training: WeightingTrainingConfig,
    loop: training_lib.LoopConfig,
    weightings: Sequence[str] = WEIGHTINGS,
    aggregation: Optional[aggregation_lib.AggregationConfig] = None,
    restart: bool = False,
) -> list[WeightingResult]:
  """Trains with each weighting, evaluates, writes the reports.

  Executes TFF computations in the current context (e.g. inside `with
  tff_nlp.runtime.local_cpp_context():`). Writes to `output_dir`:

  *   `config.json`: the arguments, the data folder used, the clients' sizes
      and label counts, library versions;
  *   per weighting `<weighting>/` (checkpoints, `metrics.csv`,
      `metrics.jsonl`) and `tensorboard/<weighting>/`;
  *   `results.json` (per weighting: final accuracies, every round's
      record and, for a DP run, `privacy`: ε after the rounds with δ, the
      noise multiplier, clients per round, population, rounds and the
      accountant), `results.md` (the accuracy table, also printed to stdout),
      `training_loss.png` and `macro_accuracy.png`.

  Running it again with the same arguments resumes each weighting after its
  latest checkpoint (finished ones are not retrained); a different
  experiment in the same `output_dir`, or changed data files (the dataset's
  `*.tsv`, recorded in `data_fingerprint.json`), is refused. `config.json`
  and `data_fingerprint.json` are written once the data is read and checked,
  so a call refused before leaves nothing that would refuse the next.

  Args:
    data_dir: The `shared/data` folder, or None to locate it (see
      `tff_nlp.data.find_data_dir`).
    output_dir: Where to write the reports (created if missing).
    client_data: The dataset and its split into clients.
    training: The federated training.
    loop: Rounds, clients per round, seed, checkpoint and evaluation cadence.
    weightings: The weightings to compare, in table order.
    aggregation: How client updates are aggregated (see
      `train_with_weighting`); DP needs `weightings=['uniform']`.
    restart: Remove the run `output_dir` holds and start over.

  Returns:
    The results, in the order of `weightings`.

  Raises:
    ValueError: For an unknown or repeated weighting.
    InputError: An `aggregation` that does not fit a weighting (checked
      before anything is written).
    InputError: For bad data (see `text_classification.prepare_clients`) or an
      output directory that cannot be used (see
      `tff_nlp.training.prepare_run_dir`).
  """
  unknown = [w for w in weightings if w not in WEIGHTINGS]
  if unknown or not weightings or len(set(weightings)) != len(weightings):
    raise ValueError(
        f'weightings must be distinct names from {list(WEIGHTINGS)}, got '
        f'{list(weightings)}.'
    )
  if aggregation is not None:
    # Before anything is written: an aggregation that does not fit.
    for weighting in weightings:
      aggregation_lib.build_model_aggregator(
          aggregation, weighting=weighting,
          clients_per_round=min(loop.clients_per_round,
                                client_data.num_clients),
          population=client_data.num_clients, rounds=loop.rounds)
  data_dir = data.find_data_dir(data_dir)
  # What defines the experiment: a run directory can only be resumed with
  # these unchanged. Rounds, cadences and the weightings may change.
  experiment = collections.OrderedDict(
      seed=loop.seed,
      clients_per_round=loop.clients_per_round,
      client_data=dataclasses.asdict(client_data),
      training=dataclasses.asdict(training),
  )
  if aggregation is not None and not aggregation.is_default:
    # Only when set, so that the run directories of the plain weighted mean
    # (and their resumption) stay as they were.
    experiment['aggregation'] = dataclasses.asdict(aggregation)
  config = collections.OrderedDict(
      experiment=experiment,
      loop=dataclasses.asdict(loop),
      weightings=list(weightings),
      data_dir=data_dir,
      versions=collections.OrderedDict(
          tensorflow=tf.__version__,
          tensorflow_federated=tff.__version__,
          numpy=np.__version__,
      ),
  )
  with training_lib.prepare_run_dir(output_dir, config, restart=restart,
                                    data_root=data_dir):
    task = text_classification.prepare_clients(
        client_data, data_dir=data_dir, seed=loop.seed
    )
    training_lib.check_clients_per_round(loop, len(task.clients))
  # The run has started: its config and data fingerprint are recorded.
  train_sizes = [c.num_train for c in task.clients]
  num_classes = len(task.label_names)
  logging.info('%s clients: train sizes %s, test sizes %s', client_data.dataset,
               train_sizes, [c.num_test for c in task.clients])

  results = []
  for weighting in weightings:
    result = train_with_weighting(
        task,
        weighting=weighting,
        training=training,
        loop=loop,
        output_dir=os.path.join(output_dir, weighting),
        tensorboard_dir=os.path.join(
            output_dir, training_lib.TENSORBOARD_DIR, weighting),
        aggregation=aggregation,
    )
    results.append(result)
    logging.info('%s: MacroAvg %.4f, MicroAvg %.4f', weighting,
                 result.accuracies.macro, result.accuracies.micro)

  initial = results[0].records[0]['eval']
  training_lib.write_json(
      os.path.join(output_dir, RESULTS_FILE),
      collections.OrderedDict(
          config=config,
          label_names=list(task.label_names),
          vocabulary_size=task.vocabulary.size,
          # Texts longer than the model's maximum, cut (not dropped).
          truncated=task.truncated(),
          clients=[
              collections.OrderedDict(
                  train_examples=c.num_train,
                  test_examples=c.num_test,
                  train_label_counts=np.bincount(
                      c.train_y, minlength=num_classes).tolist(),
                  test_label_counts=np.bincount(
                      c.test_y, minlength=num_classes).tolist(),
              )
              for c in task.clients
          ],
          initial_model=initial,
          weightings=collections.OrderedDict(
              (r.weighting, collections.OrderedDict(
                  **_accuracies_json(r.accuracies), rounds=r.records,
                  **({'privacy': r.privacy} if r.privacy else {})))
              for r in results
          ),
      ),
  )
  table = results_table(results, train_sizes)
  with open(os.path.join(output_dir, TABLE_FILE), 'w') as f:
    f.write(
        f'# Client weightings: {client_data.dataset}, '
        f'{client_data.num_clients} clients, {training.algorithm}, '
        f'{loop.rounds} rounds\n\n'
        'Test accuracy (%) of the final global model on each client\'s own '
        'test set. Header: client (training examples). MacroAvg: mean of the '
        'client accuracies; MicroAvg: accuracy over all test examples.\n\n'
        + what_the_model_saw(
            train_examples=[c.num_train for c in task.clients],
            test_examples=[c.num_test for c in task.clients],
            truncated=task.truncated(), local_epochs=training.local_epochs,
            rounds=loop.rounds, dataset=client_data.dataset)
        + f'\n\n{table}\n\n'
        f'Initial model: MacroAvg {_percent(initial["macro_avg"])}, MicroAvg '
        f'{_percent(initial["micro_avg"])}.\n'
        + ''.join(_privacy_line(r) for r in results if r.privacy)
    )
  write_plots(results, train_sizes, output_dir)
  print(table)
  return results
