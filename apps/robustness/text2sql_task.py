"""The text-to-SQL task of the attack benchmark (`robustness`).

The template parser (`apps.text2sql.template_parser`) on the paper's
eight databases, one client each, in the setting of
`apps/text2sql/flags/train_text2sql.templates.flags` (every training example,
128-d embeddings over words and bigrams, Adam at 1e-2, batches of 64, 6
local epochs, 3 for advising and atis) but FedAvg (the benchmark's process)
and fewer rounds. The metric is test exact match of the final global model
(no dev selection) on every client's full test split: MacroAvg (mean of the
clients') and MicroAvg (pooled).

Data attacks: 'label_flip' moves each training question to the next
template class of its own database (the parser's softmax is restricted to
the database, so a class of another would only saturate the loss);
'inflate_loss' is `robustness_tasks.loss_inflating_examples` over those
classes.
"""

import dataclasses
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


from tff_nlp import templates
from apps.robustness import tasks as robustness_tasks
from tff_nlp.data import text2sql
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import task as text2sql_task
from apps.text2sql import task_data as text2sql_task_data
from apps.text2sql import process as text2sql_process
from apps.text2sql import template_parser as text2sql_templates


@dataclasses.dataclass(frozen=True)
class Text2SqlTask:
  """Text-to-SQL with the template parser, eight database clients."""

  name: str = 'text2sql'
  data: text2sql_task.DataConfig = text2sql_task.DataConfig(
      with_values=True, vocabulary_size=20000, max_train_examples=0,
      max_eval_examples=0)
  data_dir: Optional[str] = dataclasses.field(default=None, compare=False)
  rounds: int = 8
  embedding_dim: int = 128
  ngrams: int = 2
  learning_rate: float = 1e-2
  batch_size: int = 64
  local_epochs: text2sql_task.PerClient = text2sql_task.PerClient(
      6, (('advising', 3), ('atis', 3)))
  decode_batch_size: int = 512
  # How predicted templates are filled (`text2sql.VALUE_SOURCES`). The
  # archived attack benchmark was measured with every annotated value
  # ("oracle entities", the only filling before issue 65); it stays so, and
  # docs/results/robustness.md names it. 'stated' is the headline protocol.
  values: str = text2sql.ANNOTATED
  # Attackers are mid-sized databases (geography, then scholar, then
  # restaurants), not advising and atis, which hold most of the examples:
  # under num_examples either already has more than 2/N of the weight.
  attacker_order: tuple[int, ...] = (2, 4, 3)

  with_client_config = True
  metric_name = 'macro_exact_match'
  metric_higher_is_better = True

  @property
  def num_clients(self) -> int:
    return len(self.data.clients)

  def config(self) -> dict[str, Any]:
    config = dataclasses.asdict(self)
    del config['data_dir']  # Where the data is does not change a result.
    if config['values'] == text2sql.ANNOTATED:
      # The filling of every run cached before the field existed: their
      # cache keys stay valid.
      del config['values']
    return config

  def _prepared(self, seed: int):
    key = (self, seed)
    if key not in _PREPARED:
      task = text2sql_task_data.prepare_template_task(
          self.data, data_dir=self.data_dir, seed=seed, ngrams=self.ngrams,
          values=self.values)
      parser = text2sql_process.build_parser(
          task, text2sql_templates.TemplateParserConfig(
              embedding_dim=self.embedding_dim, ngrams=self.ngrams,
              seed=seed, values=self.values),
          self.decode_batch_size)
      _PREPARED[key] = (task, parser)
    return _PREPARED[key]

  def model_fn(self, seed: int):
    return self._prepared(seed)[1].model_fn()

  def client_optimizer(self) -> tff.learning.optimizers.Optimizer:
    return templates.CLIENT_OPTIMIZERS['adam'](
        learning_rate=self.learning_rate)

  def truth(self) -> None:
    return None

  def client_data(self, seed: int, round_num: int, client_id: int,
                  data_attack: str):
    task, parser = self._prepared(seed)
    name = task.clients[client_id]
    train = task.splits[name]['train']
    epochs = int(self.local_epochs[name])
    if data_attack == 'inflate_loss':
      x, y = robustness_tasks.loss_inflating_examples(
          train.x, train.y, batch_size=self.batch_size,
          label_set=np.unique(train.y))
      # In this order: the attacker does not shuffle.
      dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(
          self.batch_size)
    else:
      if data_attack == 'label_flip':
        train = dataclasses.replace(train, y=robustness_tasks.flip_labels(
            train.y, np.unique(train.y)))
      dataset = parser.train_dataset(
          train, batch_size=self.batch_size,
          shuffle_seed=(seed, round_num, client_id))
    return templates.with_client_config(
        dataset, learning_rate=self.learning_rate, num_epochs=epochs)

  def evaluate(self, seed: int, weights: np.ndarray) -> dict[str, float]:
    task, parser = self._prepared(seed)
    keras_model = parser.keras_model()
    robustness_tasks.assign_flat_weights(keras_model.trainable_weights,
                                         weights)
    predict = parser.predictor(keras_model)
    per_client, correct, total = {}, 0, 0
    for client in task.clients:
      test = task.splits[client]['test']
      matches = [text2sql_metrics.exact_match(p, g)
                 for p, g in zip(predict(client, test), test.gold_sql)]
      per_client[client] = float(np.mean(matches))
      correct += int(np.sum(matches))
      total += len(matches)
    return {'macro_exact_match': float(np.mean(list(per_client.values()))),
            'micro_exact_match': correct / total,
            **{f'exact_match/{c}': v for c, v in per_client.items()}}


_PREPARED = {}
