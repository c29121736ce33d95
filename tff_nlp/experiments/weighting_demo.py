"""The main demo: the four client weightings of Lorar on real text data.

A short federated training of the fastText-style classifier on a
`shared/data/text_classification` dataset split into label-skewed clients of
very different sizes, once per weighting mechanism (`num_examples`, `uniform`,
`loss_reduction`, `lorar`; see `tff_nlp.algorithms.Weighting`). As in the
Lorar paper (Zhang et al., ACL 2023), every client takes part in every round
and the final global model is evaluated on each client's own test set, with
MacroAvg (mean of the per-client accuracies) and MicroAvg (accuracy over all
test examples pooled).

All weightings start from the same initial model and see the same client
batches in the same order, so their results differ only by the weighting.
Every random choice (client split, initial weights, example order) is seeded
from `seed`, so the same arguments give the same numbers.

It stands in for the text-to-SQL pipeline of the paper and is the job run by
`make demo`; `federated_text` holds the reusable set-up.
"""

import collections
from collections.abc import Sequence
import dataclasses
import json
import os
from typing import Any, Optional

from absl import logging
from matplotlib import figure
from matplotlib import ticker
from matplotlib.backends import backend_agg
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms
from tff_nlp import data
from tff_nlp import models
from tff_nlp.experiments import federated_text

WEIGHTINGS = tuple(w.value for w in algorithms.Weighting)
CLIENT_OPTIMIZERS = {
    'sgd': tff.learning.optimizers.build_sgdm,
    'adam': tff.learning.optimizers.build_adam,
}
CONFIG_FILE = 'config.json'
RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
LOSS_PLOT_FILE = 'training_loss.png'


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """The federated training, the same for every weighting.

  Attributes:
    algorithm: 'fedavg', 'fedopt' or 'fedprox' (server optimizers as in the
      Lorar paper; see `tff_nlp.algorithms.build_fl_process`).
    rounds: Training rounds; every client takes part in each.
    local_epochs: Passes of every client over its data per round.
    batch_size: Client batch size.
    client_optimizer: A key of `CLIENT_OPTIMIZERS`.
    client_learning_rate: The client optimizer's learning rate.
    proximal_strength: FedProx's mu (only for 'fedprox').
    embedding_dim: Word-embedding size of the classifier.
  """

  algorithm: str = 'fedavg'
  rounds: int = 20
  local_epochs: int = 2
  batch_size: int = 16
  client_optimizer: str = 'sgd'
  client_learning_rate: float = 1.0
  proximal_strength: float = 0.0
  embedding_dim: int = 64

  def __post_init__(self):
    for name in ('rounds', 'local_epochs', 'batch_size', 'embedding_dim'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got {getattr(self, name)}.')
    if self.client_optimizer not in CLIENT_OPTIMIZERS:
      raise ValueError(
          f'Unknown client_optimizer {self.client_optimizer!r}; expected one '
          f'of {sorted(CLIENT_OPTIMIZERS)}.'
      )


@dataclasses.dataclass(frozen=True)
class WeightingResult:
  """The outcome of training with one weighting.

  Attributes:
    weighting: The weighting's name.
    accuracies: The final global model's accuracy on every client.
    round_metrics: Per round, the process's metrics as plain Python values.
    client_outputs: Per client statistic (`tff_nlp.algorithms.CLIENT_STAT_KEYS`
      and 'weight'), per client, its value in each round.
  """

  weighting: str
  accuracies: federated_text.Accuracies
  round_metrics: list[Any]
  client_outputs: dict[str, list[list[float]]]


def _to_python(structure):
  """Metrics of a TFF round (numpy leaves, OrderedDicts) as JSON values."""
  return tf.nest.map_structure(lambda x: np.asarray(x).item(), structure)


def train_with_weighting(
    task: federated_text.FederatedTextClassification,
    *,
    weighting: str,
    training: TrainingConfig,
    seed: int,
) -> WeightingResult:
  """Trains the classifier on all clients with one weighting.

  Executes TFF computations in the current context (e.g. inside `with
  tff_nlp.runtime.local_cpp_context():`).

  Args:
    task: The clients' data.
    weighting: The client weighting mechanism.
    training: The training configuration.
    seed: Seed of the initial model and the clients' example order.

  Returns:
    The `WeightingResult`, with the accuracies of the final global model.
  """
  spec = task.model_spec(embedding_dim=training.embedding_dim, seed=seed)
  process = algorithms.build_fl_process(
      models.build_model_fn(spec),
      algorithm=training.algorithm,
      weighting=weighting,
      client_optimizer_fn=CLIENT_OPTIMIZERS[training.client_optimizer](
          learning_rate=training.client_learning_rate
      ),
      proximal_strength=training.proximal_strength,
      with_client_config=True,
  )
  state = process.initialize()
  round_metrics = []
  stat_keys = algorithms.CLIENT_STAT_KEYS + ('weight',)
  client_outputs = {k: [[] for _ in task.clients] for k in stat_keys}
  for round_num in range(1, training.rounds + 1):
    client_data = [
        algorithms.with_client_config(
            federated_text.train_dataset(
                client,
                batch_size=training.batch_size,
                # Per round and client, shared by all weightings.
                shuffle_seed=(seed, round_num, client_id),
            ),
            learning_rate=training.client_learning_rate,
            num_epochs=training.local_epochs,
        )
        for client_id, client in enumerate(task.clients)
    ]
    result = process.next_with_client_outputs(state, client_data)
    state = result['output'].state
    metrics = _to_python(result['output'].metrics)
    round_metrics.append(metrics)
    for client_id, outputs in enumerate(result['client_outputs']):
      for key in stat_keys:
        client_outputs[key][client_id].append(float(outputs[key]))
    logging.info(
        '%s round %d/%d: training loss %.4f, accuracy %.4f, weight std %.4g',
        weighting, round_num, training.rounds,
        metrics['client_work']['train']['loss'],
        metrics['client_work']['train']['sparse_categorical_accuracy'],
        metrics['client_work']['weighting']['weight_std'],
    )
  keras_model = models.build_keras_model(spec)
  process.get_model_weights(state).assign_weights_to(keras_model)
  return WeightingResult(
      weighting=weighting,
      accuracies=federated_text.evaluate(keras_model, task.clients),
      round_metrics=round_metrics,
      client_outputs=client_outputs,
  )


def _accuracies_json(accuracies: federated_text.Accuracies) -> dict[str, Any]:
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


def plot_training_loss(
    results: Sequence[WeightingResult], train_sizes: Sequence[int], path: str
) -> None:
  """Saves each client's mean training loss per round, a panel per weighting.

  Args:
    results: One panel each.
    train_sizes: Training examples of each client, for the legend.
    path: The PNG file to write.
  """
  ncols = min(2, len(results))
  nrows = -(-len(results) // ncols)
  # An Agg canvas of our own, not pyplot: no global backend is chosen or
  # changed, and no display is needed.
  fig = figure.Figure(figsize=(5.5 * ncols, 3.8 * nrows), layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
  for ax, result in zip(axes.flat, results):
    for client_id, losses in enumerate(
        result.client_outputs['mean_batch_loss']
    ):
      ax.plot(
          range(1, len(losses) + 1),
          losses,
          marker='.',
          label=f'C{client_id + 1} ({train_sizes[client_id]})',
      )
    ax.set_title(
        f'{result.weighting}: MacroAvg {_percent(result.accuracies.macro)}%'
    )
    ax.set_xlabel('round')
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_ylabel('mean training loss')
    ax.grid(alpha=0.3)
  for ax in axes.flat[len(results):]:
    ax.set_visible(False)
  axes.flat[0].legend(title='client (train size)', fontsize='small')
  fig.savefig(path, dpi=110)


def _write_json(path: str, value: Any) -> None:
  with open(path, 'w') as f:
    json.dump(value, f, indent=1)
    f.write('\n')


def run_weighting_demo(
    *,
    data_dir: Optional[str],
    output_dir: str,
    client_data: federated_text.ClientDataConfig,
    training: TrainingConfig,
    weightings: Sequence[str] = WEIGHTINGS,
    seed: int = 0,
) -> list[WeightingResult]:
  """Trains with each weighting, evaluates, writes the reports.

  Executes TFF computations in the current context (e.g. inside `with
  tff_nlp.runtime.local_cpp_context():`). Writes to `output_dir`
  `config.json` (the arguments, the data folder used and the clients' sizes
  and label counts),
  `results.json` (per weighting: accuracies, per-round metrics, per-client
  statistics of every round), `results.md` (the accuracy table, also printed
  to stdout) and `training_loss.png`.

  Args:
    data_dir: The `shared/data` folder, or None to locate it (see
      `tff_nlp.data.find_data_dir`).
    output_dir: Where to write the reports (created if missing).
    client_data: The dataset and its split into clients.
    training: The federated training.
    weightings: The weightings to compare, in table order.
    seed: Seed of the client split, initial model and example order.

  Returns:
    The results, in the order of `weightings`.

  Raises:
    ValueError: For an unknown or repeated weighting, or bad data (see
      `federated_text.prepare_clients`).
  """
  unknown = [w for w in weightings if w not in WEIGHTINGS]
  if unknown or not weightings or len(set(weightings)) != len(weightings):
    raise ValueError(
        f'weightings must be distinct names from {list(WEIGHTINGS)}, got '
        f'{list(weightings)}.'
    )
  data_dir = data.find_data_dir(data_dir)
  task = federated_text.prepare_clients(
      client_data, data_dir=data_dir, seed=seed
  )
  train_sizes = [c.num_train for c in task.clients]
  num_classes = len(task.label_names)
  os.makedirs(output_dir, exist_ok=True)
  _write_json(
      os.path.join(output_dir, CONFIG_FILE),
      collections.OrderedDict(
          data_dir=data_dir,
          seed=seed,
          weightings=list(weightings),
          client_data=dataclasses.asdict(client_data),
          training=dataclasses.asdict(training),
          label_names=list(task.label_names),
          vocabulary_size=task.vocabulary.size,
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
          versions=collections.OrderedDict(
              tensorflow=tf.__version__,
              tensorflow_federated=tff.__version__,
              numpy=np.__version__,
          ),
      ),
  )
  logging.info('%s clients: train sizes %s, test sizes %s', client_data.dataset,
               train_sizes, [c.num_test for c in task.clients])

  spec = task.model_spec(embedding_dim=training.embedding_dim, seed=seed)
  initial = federated_text.evaluate(
      models.build_keras_model(spec), task.clients
  )
  results = []
  for weighting in weightings:
    result = train_with_weighting(
        task, weighting=weighting, training=training, seed=seed
    )
    results.append(result)
    logging.info('%s: MacroAvg %.4f, MicroAvg %.4f', weighting,
                 result.accuracies.macro, result.accuracies.micro)

  _write_json(
      os.path.join(output_dir, RESULTS_FILE),
      collections.OrderedDict(
          initial_model=_accuracies_json(initial),
          weightings=collections.OrderedDict(
              (
                  r.weighting,
                  collections.OrderedDict(
                      **_accuracies_json(r.accuracies),
                      round_metrics=r.round_metrics,
                      client_outputs=r.client_outputs,
                  ),
              )
              for r in results
          ),
      ),
  )
  table = results_table(results, train_sizes)
  with open(os.path.join(output_dir, TABLE_FILE), 'w') as f:
    f.write(
        f'# Client weightings: {client_data.dataset}, '
        f'{client_data.num_clients} clients, {training.algorithm}, '
        f'{training.rounds} rounds\n\n'
        'Test accuracy (%) of the final global model on each client\'s own '
        'test set. Header: client (training examples). MacroAvg: mean of the '
        'client accuracies; MicroAvg: accuracy over all test examples.\n\n'
        f'{table}\n\n'
        f'Initial model: MacroAvg {_percent(initial.macro)}, MicroAvg '
        f'{_percent(initial.micro)}.\n'
    )
  plot_training_loss(
      results, train_sizes, os.path.join(output_dir, LOSS_PLOT_FILE)
  )
  print(table)
  return results
