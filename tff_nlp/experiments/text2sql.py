"""Federated text-to-SQL: one run of finetuning, centralized or federated.

Reproduces the protocol of Zhang et al., "Federated Learning for Semantic
Parsing: Task Formulation, Evaluation Setup, New Algorithms", ACL 2023
(arXiv 2305.17221; `shared/docs/lorar.md`) on the task of
`tff_nlp.tasks.text2sql` (data and configurations) and
`tff_nlp.tasks.text2sql_process` (parsers, processes, client data). Three
paradigms:

*   `finetune`: one model per client, trained on its own data, selected on
    its own dev set;
*   `centralized`: one model trained on the union of the training sets,
    selected on the merged dev set;
*   `federated`: FedAvg / FedOPT / FedProx with a client weighting
    (`num_examples`, `uniform`, `loss_reduction`, `lorar`), every client in
    every round with its own local epochs, learning rate and batch size;
    the global model is evaluated on the merged dev set every `eval_every`
    rounds.

In every paradigm the model with the best dev exact match is evaluated on
every client's test set (exact match, and execution accuracy where a SQLite
database exists). Teacher-forced token loss and accuracy
(`seq2seq_examples.make_token_metrics_fn`) are recorded beside them, on dev
at every evaluation and on test at the end: they separate models whose exact
match is still 0.

All three paradigms run through the same resumable loop
(`tff_nlp.training.run_training`) and the same TFF learning process
(`text2sql_process.build_process`), which gives them checkpoints, resume and
metrics for free.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import json
import os
import shutil
import time
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import errors
from tff_nlp import plots
from tff_nlp import training as training_lib
from tff_nlp.algorithms import aggregation as aggregation_lib
from tff_nlp.algorithms import vocab_sliced
from tff_nlp.data import text2sql
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql as text2sql_metrics
from tff_nlp.metrics import text2sql_report
from tff_nlp.models import copy_tokenizer
from tff_nlp.models import keras_nlp_preset
from tff_nlp.models import lora as lora_lib
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_model_fn
from tff_nlp.models import subword_tokenizer
from tff_nlp.tasks import text2sql as text2sql_task
from tff_nlp.tasks import text2sql_process
from tff_nlp.tasks import text2sql_templates
from tff_nlp.training import run_dir as run_dir_lib

TOKENIZER_DIR = 'tokenizer'
BEST_MODEL_FILE = 'best_model.npz'
# The selected model as a `seq2seq.save_checkpoint` checkpoint, per trained
# model (`federated`, `centralized` or the client): what `init_from` reads.
BEST_CHECKPOINT_DIR = 'best_checkpoint'
BEST_CHECKPOINT_PREFIX = 'ckpt'
BEST_MODEL_INFO_FILE = 'best_model.json'
RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
PREDICTIONS_DIR = 'predictions'
LOSS_PLOT_FILE = 'training_loss.png'
DEV_PLOT_FILE = 'dev_exact_match.png'
DEV_METRIC = 'dev_exact_match'
# The `Seq2SeqConfig` fields in which a run may differ from its `init_from`
# run: none changes what the loaded weights compute. `dropout` acts only in
# training; `seed` draws the initial weights, which the loaded ones replace,
# and keys dropout masks. `vocabulary_size` is the tokenizer's, and the
# tokenizer is copied from the `init_from` run, so the model has that run's
# vocabulary whatever `model` and `data.vocabulary_size` say. (The maximum
# lengths are `data`'s, not `model`'s, and they shape the learned position
# embeddings: `_check_init_model` compares `data`'s.)
INIT_FROM_FREE_FIELDS = ('dropout', 'seed', 'vocabulary_size')
_LENGTH_FIELDS = ('max_source_length', 'max_target_length')


class _DevEvaluator:
  """Dev exact match of global weights; keeps the best weights on disk.

  The best is the last evaluation with the highest dev EM: a tie goes to the
  more trained model (so a run whose dev EM stays 0 does not select its
  untrained initial model). The best EM and its weights survive a restart,
  so a resumed run selects the same model as an uninterrupted one.
  """

  def __init__(self, task, unit, parser, run_dir):
    self._task = task
    self._dev_clients = list(unit.dev_clients)
    self._dev_parts = [task.splits[c]['dev'] for c in unit.dev_clients]
    self._dev = text2sql_task.concatenate(self._dev_parts)
    self._parser = parser
    self._keras_model = self._predict = self._token_metrics_fn = None
    self._weights_path = os.path.join(run_dir, BEST_MODEL_FILE)
    self._info_path = os.path.join(run_dir, BEST_MODEL_INFO_FILE)
    self.best = -1.0
    if os.path.exists(self._info_path):
      with open(self._info_path) as f:
        self.best = json.load(f)[DEV_METRIC]

  def scorer(self):
    """(Keras model, predictor, token metrics fn) this evaluator scores with.

    Built on first use, after the learning process: a Keras model built
    before TFF traces `model_fn` fails when first called in a tf.function
    afterwards ("invalid state", a v1 layer). The unit's test scoring
    reuses them (every weight of either parser is trainable, so
    `load_best` sets the whole model): building and tracing them again
    costs more than a small run's rounds.
    """
    if self._keras_model is None:
      self._keras_model = self._parser.keras_model()
      self._predict = self._parser.predictor(self._keras_model)
      self._token_metrics_fn = self._parser.metrics_fn(self._keras_model)
    return self._keras_model, self._predict, self._token_metrics_fn

  def __call__(self, model_weights):
    self.scorer()
    self._parser.assign_weights(model_weights, self._keras_model)
    # Client by client: a batch then holds one client's SQL, of similar
    # lengths, and stops decoding when its longest output ends.
    predictions = [p for client, part in zip(self._dev_clients,
                                             self._dev_parts)
                   for p in self._predict(client, part)]
    correct = sum(text2sql_metrics.exact_match(p, g)
                  for p, g in zip(predictions, self._dev.gold_sql))
    em = correct / len(self._dev)
    tokens = self._token_metrics_fn(self._dev)
    if em >= self.best:
      self.best = em
      weights = [np.asarray(w) for w in
                 tf.nest.flatten(model_weights.trainable)]
      temp = self._weights_path + '.tmp.npz'
      np.savez(temp, *weights)
      os.replace(temp, self._weights_path)
      with open(self._info_path, 'w') as f:
        json.dump({DEV_METRIC: em}, f)
    return collections.OrderedDict(
        [(DEV_METRIC, em), ('dev_correct', correct),
         ('dev_examples', len(self._dev)),
         ('dev_token_loss', tokens['token_loss']),
         ('dev_token_accuracy', tokens['token_accuracy'])])

  def load_best(self, keras_model) -> None:
    with np.load(self._weights_path) as best:
      arrays = [best[f'arr_{i}'] for i in range(len(best.files))]
    for variable, value in zip(keras_model.trainable_weights, arrays):
      variable.assign(value)


def run_text2sql(
    *,
    data_dir: Optional[str],
    output_dir: str,
    data: text2sql_task.DataConfig,
    model: seq2seq.Seq2SeqConfig | text2sql_templates.TemplateParserConfig,
    training: text2sql_task.TrainingConfig,
    loop: training_lib.LoopConfig,
    init_from: Optional[str] = None,
    vocab_slice_keys: int = 0,
    num_examples_fallback: bool = True,
    aggregation: Optional[aggregation_lib.AggregationConfig] = None,
    lora: Optional[lora_lib.LoraConfig] = None,
    init_from_keras_nlp: Optional[str] = None,
    processes: Optional[training_lib.ProcessCache] = None,
    tokenizer_from: Optional[str] = None,
) -> dict[str, Any]:
  """Trains and evaluates one method of the paper's Table 2.

  Writes to `output_dir`: `config.json`, `tokenizer/`, one run directory per
  trained model (`federated/`, `centralized/` or `finetune/<client>/`, each
  with checkpoints, metrics, `best_model.npz`), `predictions/<client>.jsonl`
  (each test example's prediction, exact match and teacher-forced
  `correct_tokens` of its `tokens`), `results.json`, `results.md` (Table 2 layout, the
  paper's numbers beside ours), `dev_exact_match.png` and, for federated
  runs, `training_loss.png`. Running it again resumes.

  `results.json` holds the test exact match and execution accuracy per
  client with MacroAvg and MicroAvg (`test`), and
  `test_exact_match_bootstrap_ci95`: their 95 % percentile bootstrap
  intervals over the test examples (`intervals.bootstrap_accuracy`, as
  fractions). One run is one seed; `text2sql_benchmark` aggregates seeds.
  `seconds` is the run's wall time: this call's, plus, for a run resumed
  from a checkpoint, the recorded round and evaluation times of the rounds
  before it (`seconds_before_resume`; earlier processes' start-up is not
  recorded, so not counted).
  A differentially private run (`aggregation`) also records its ε: after
  each round in the round's record (`privacy`), and after the run under
  `privacy` (with δ, the noise multiplier, clients per round, population,
  rounds and the accountant).

  Args:
    data_dir: The `shared/data` (or text2sql) folder; None finds it.
    output_dir: The run directory.
    data: Data and tokenization.
    model: The parser. A `seq2seq.Seq2SeqConfig`: the seq2seq model; its
      `vocabulary_size` is replaced by the tokenizer's and its maximum
      lengths by `data`'s. A `text2sql_templates.TemplateParserConfig`: the
      template classifier (`data`'s `with_values`, tokenizer, merges and
      lengths do not apply to it; `retrieved_sql` and `init_from` are
      refused), whose records' token loss and accuracy are those of the
      gold template.
    training: Paradigm, algorithm, weighting and local training.
    loop: Rounds (epochs outside federated runs), evaluation cadence,
      checkpoints, seed.
    init_from: The output directory of an earlier centralized or federated
      run: its tokenizer and selected model (`best_checkpoint/`) are the
      starting point (e.g. pre-train centrally, then fine-tune federatedly).
      `model` and `data`'s maximum lengths must be that run's, except for
      `INIT_FROM_FREE_FIELDS`; the data may otherwise differ.
    vocab_slice_keys: If > 0, train with vocabulary-sliced FedAvg
      (`algorithms.vocab_sliced`): each client downloads and uploads only
      the token-embedding rows of its `vocab_slice_keys` most frequent ids.
      Needs the federated paradigm, 'fedavg' and 'uniform' weighting.
    num_examples_fallback: See `algorithms.build_fl_process`. False gives
      Lorar rounds a single aggregation stage, so that they are split across
      several TFF workers (`tff_nlp.runtime.multi_worker`).
    aggregation: How the federated paradigm aggregates client updates
      (`algorithms.aggregation`: weight cap, robust aggregation, DP with
      ε); None or the default: the weighted mean. DP needs 'uniform'
      weighting; not for `vocab_slice_keys` or the other paradigms.
    lora: If set, fine-tune the seq2seq parser with these LoRA adapters
      (`algorithms.build_lora_process`: clients train and send only the
      adapters) from `init_from`'s model (or, without `init_from`, from the
      freshly initialised one). The selected checkpoint has the adapters
      merged. `results.json` then records the adapter and model sizes
      under `lora` (the frozen model reaches each client once, with the
      computation; the rounds' bytes count the adapters only).
    init_from_keras_nlp: A local keras-nlp BART preset directory
      (`models.keras_nlp_preset`; read offline): its tokenizer replaces the
      subword one and its model (architecture and weights) is the
      starting point, fully or, with `lora`, as the frozen base. `model`
      then gives only the seed; `data`'s maximum lengths must fit the
      preset. Not with `init_from`.
    processes: Learning processes built by earlier calls, reused by a call
      with the same configuration (seed included) and data folder, and
      kept for later ones (e.g. a timing that runs each setting twice:
      building a process traces the model, which costs more than a few
      rounds). None: built for this call only.
    tokenizer_from: The output directory of an earlier run (e.g. a
      `pretrain_seq2seq` run) whose tokenizer this run uses instead of
      training its own; the model starts from fresh weights. With the
      `init_from` run's tokenizer, a model from scratch differs from one
      fine-tuned from that run only in its starting weights. Not with
      `init_from` or `init_from_keras_nlp`, which bring their tokenizers.

  Returns:
    The content of `results.json`.

  Raises:
    CheckpointError: If `init_from` holds no single selected model, or one
      of another configuration (checked before `output_dir` is written).
    InputError: An `aggregation` that does not fit the run (checked before
      `output_dir` is written).
  """
  if aggregation is not None and aggregation.is_default:
    aggregation = None
  templates = isinstance(model, text2sql_templates.TemplateParserConfig)
  if templates and (init_from or vocab_slice_keys or data.retrieved_sql
                    or data.sql_merges or lora or data.lowercase_sql):
    raise errors.InputError(
        'The template parser (--parser=template) takes no --init_from, '
        '--vocab_slice_keys, --retrieved_sql, --sql_merges, --lora_rank or '
        '--lowercase_sql: they are the seq2seq parser\'s.')
  if tokenizer_from and (init_from or init_from_keras_nlp or templates):
    raise errors.InputError(
        '--tokenizer_from gives a model from scratch another run\'s '
        'tokenizer: it takes no --init_from or --init_from_keras_nlp (they '
        'bring their own tokenizers) and no --parser=template.')
  if init_from_keras_nlp and (init_from or templates or vocab_slice_keys
                              or data.tokenizer == 'copy_words'):
    raise errors.InputError(
        '--init_from_keras_nlp starts from a keras-nlp preset (its model '
        'and tokenizer): it takes no --init_from, --parser=template, '
        '--vocab_slice_keys or --tokenizer=copy_words.')
  if lora and vocab_slice_keys:
    raise errors.InputError(
        '--lora_rank and --vocab_slice_keys are two ways of sending part of '
        'the model; use one.')
  if vocab_slice_keys and (training.paradigm, training.algorithm,
                           training.weighting) != ('federated', 'fedavg',
                                                   'uniform'):
    raise ValueError(
        'vocab_slice_keys needs the federated paradigm with algorithm '
        "'fedavg' and weighting 'uniform' (the sliced embedding is averaged "
        f'uniformly), got {training.method}.')
  if aggregation is not None:
    if training.paradigm != 'federated' or vocab_slice_keys:
      raise errors.InputError(
          'The aggregation options (--max_weight_share, --robust_aggregation,'
          ' --dp_noise_multiplier, --target_epsilon) apply to the federated '
          'paradigm without --vocab_slice_keys, got '
          + (f'--vocab_slice_keys={vocab_slice_keys}.' if vocab_slice_keys
             else f'--paradigm={training.paradigm}.'))
    _model_aggregator(aggregation, training, loop, len(data.clients))
  experiment = collections.OrderedDict(
      seed=loop.seed, data=data, model=model, training=training,
      init_from=init_from and os.path.abspath(init_from))
  if vocab_slice_keys:
    # Only when set, so that the configurations of dense runs (and the
    # benchmark's cache keys) stay as they were.
    experiment['vocab_slice_keys'] = vocab_slice_keys
  if not num_examples_fallback:
    experiment['num_examples_fallback'] = False
  if lora is not None:
    experiment['lora'] = lora
  if init_from_keras_nlp:
    experiment['init_from_keras_nlp'] = os.path.abspath(init_from_keras_nlp)
  if tokenizer_from:
    experiment['tokenizer_from'] = os.path.abspath(tokenizer_from)
  if aggregation is not None:
    # Only when set, as the two above.
    experiment['aggregation'] = aggregation
  config = collections.OrderedDict(
      experiment=experiment,
      loop=loop,
      data_dir=data_dir,
      versions=collections.OrderedDict(
          tensorflow=tf.__version__, tensorflow_federated=tff.__version__,
          numpy=np.__version__),
  )
  init_checkpoint = preset = preset_tokenizer = None
  if init_from_keras_nlp:
    # Before `output_dir` records this run's config, as `init_from`.
    preset, preset_tokenizer = keras_nlp_preset.load_preset(
        init_from_keras_nlp, seed=loop.seed)
  if init_from is not None:
    # Before `output_dir` records this run's config: a refused `init_from`
    # leaves nothing that would refuse the corrected call.
    init_checkpoint = _selected_checkpoint(init_from)
    _check_init_model(init_from, data, model)
  tokenizer_source = init_from or tokenizer_from
  if tokenizer_source is not None:
    tokenizer_file = _tokenizer_file(
        tokenizer_source, data.tokenizer,
        '--init_from' if init_from else '--tokenizer_from')
  training_lib.prepare_run_dir(output_dir, config)
  start = time.perf_counter()
  if tokenizer_source is not None:
    _copy_tokenizer(tokenizer_file, os.path.join(output_dir, TOKENIZER_DIR))
  if templates:
    task = text2sql_task.prepare_template_task(
        data, data_dir=data_dir, seed=loop.seed, ngrams=model.ngrams)
  else:
    task = text2sql_task.prepare_task(
        data, data_dir=data_dir, seed=loop.seed,
        tokenizer_dir=os.path.join(output_dir, TOKENIZER_DIR),
        tokenizer=preset_tokenizer)
  parser = text2sql_process.build_parser(
      task, model, training.decode_batch_size, lora_config=lora,
      checkpoint=init_checkpoint, preset=preset)
  model = parser.config
  logging.info('text2sql: %s, vocabulary %d, train sizes %s',
               training.method, task.tokenizer.vocabulary_size(),
               {c: len(task.splits[c]['train']) for c in task.clients})

  slices = {}
  if vocab_slice_keys:
    for client in task.clients:
      train = task.splits[client]['train']
      vocabulary, local_x, local_y, unknown = vocab_sliced.local_examples(
          train.x, train.y, max_keys=vocab_slice_keys)
      slices[client] = (vocabulary, dataclasses.replace(
          train, x=local_x, y=local_y), unknown)
      logging.info('text2sql: %s keeps %d of its %d distinct ids (%d ids '
                   'became UNK)', client, vocabulary.num_keys,
                   vocabulary.distinct_ids, unknown)

  initial_weights = None
  # A LoRA parser's model starts from the checkpoint by itself.
  if init_checkpoint is not None and lora is None:
    initial_weights = tf.nest.map_structure(
        lambda v: v.numpy(),
        seq2seq_model_fn.load_model_weights(model, init_checkpoint))
  if preset is not None and lora is None:
    initial_weights = tf.nest.map_structure(
        lambda v: v.numpy(), tff.learning.models.ModelWeights.from_model(
            preset))
  predictions, unit_records, test_tokens, unit_privacy = {}, {}, {}, {}
  example_tokens = {}
  seconds_before_resume = 0.0
  # Building a process traces the model (most of a small run's time); the
  # finetuning units of one learning rate share one, and so do calls with
  # this configuration given the same `processes`.
  if processes is None:
    processes = training_lib.ProcessCache()
  process_key = training_lib.config_digest(
      [experiment, loop, data_dir and os.path.abspath(data_dir)])
  for unit in text2sql_process.training_units(training, task.clients):
    run_dir = (os.path.join(output_dir, 'finetune', unit.name)
               if training.paradigm == 'finetune'
               else os.path.join(output_dir, unit.name))
    os.makedirs(run_dir, exist_ok=True)
    evaluator = _DevEvaluator(task, unit, parser, run_dir)
    num_clients = (1 if training.paradigm == 'centralized'
                   else len(unit.train_clients))
    aggregator, accounting = (
        _model_aggregator(aggregation, training, loop, num_clients)
        if aggregation is not None else (None, None))
    # Only the finetuning paradigm has several units, each of one client
    # and without `aggregation` (refused above outside the federated
    # paradigm, so `aggregator` is None): they differ in their learning rate
    # only, the other inputs of `build_process` being this call's.
    process = processes.get(
        (process_key, text2sql_process.unit_learning_rate(training, unit)),
        lambda: text2sql_process.build_process(
            training, parser, unit, vocab_slice_keys, num_examples_fallback,
            model_aggregator=aggregator))
    run = training_lib.run_training(
        process,
        client_data_fn=text2sql_process.build_client_data_fn(
            task, unit, training, loop.seed, parser, slices),
        num_clients=num_clients,
        # Sampling is for federated rounds; a centralized or finetuning unit
        # trains its one client whatever --clients_per_round says.
        config=(loop if training.paradigm == 'federated'
                else dataclasses.replace(loop, clients_per_round=0)),
        output_dir=run_dir,
        evaluate_fn=evaluator,
        tensorboard_dir=os.path.join(output_dir, training_lib.TENSORBOARD_DIR,
                                     unit.name),
        description=unit.name,
        initial_model_weights=initial_weights,
        round_metrics_fn=accounting and accounting.round_metrics,
    )
    unit_records[unit.name] = run.records
    if run.resumed_from:
      seconds_before_resume += sum(
          r.get('round_seconds', 0.0) + r.get('eval_seconds', 0.0)
          for r in run.records if r['round'] <= run.resumed_from)
    if accounting is not None:
      unit_privacy[unit.name] = accounting.to_json(loop.rounds)
    keras_model, predict, token_metrics_fn = evaluator.scorer()
    evaluator.load_best(keras_model)
    # Either parser's weights: `save_checkpoint` is not seq2seq-specific.
    seq2seq.save_checkpoint(parser.export_model(keras_model), os.path.join(
        output_dir, BEST_CHECKPOINT_DIR, unit.name, BEST_CHECKPOINT_PREFIX))
    for client in unit.test_clients:
      test = task.splits[client]['test']
      predictions[client] = (test, predict(client, test))
      test_tokens[client] = token_metrics_fn(test)
      # Per example into the predictions file, not into results.json.
      example_tokens[client] = (
          test_tokens[client].pop('example_correct_tokens'),
          test_tokens[client].pop('example_tokens'))

  evaluation = text2sql_metrics.evaluate(
      {c: list(zip(predictions[c][1], predictions[c][0].gold_sql))
       for c in task.clients},
      db_paths=task.databases)
  os.makedirs(os.path.join(output_dir, PREDICTIONS_DIR), exist_ok=True)
  for client, (test, predicted) in predictions.items():
    with open(os.path.join(output_dir, PREDICTIONS_DIR, f'{client}.jsonl'),
              'w', encoding='utf-8') as f:
      for source, gold, prediction, correct_tokens, tokens in zip(
          test.sources, test.gold_sql, predicted, *example_tokens[client]):
        f.write(json.dumps(collections.OrderedDict(
            input=source, gold=gold, prediction=prediction,
            exact_match=text2sql_metrics.exact_match(prediction, gold),
            correct_tokens=correct_tokens, tokens=tokens)) + '\n')

  best_rounds = {
      name: _best_round(records) for name, records in unit_records.items()}
  # One seed: the interval covers test-set sampling only; the benchmark
  # (`text2sql_summary`) adds seed variation over several runs.
  bootstrap = intervals.bootstrap_accuracy(
      {c: [[text2sql_metrics.exact_match(p, g)
            for p, g in zip(predictions[c][1], predictions[c][0].gold_sql)]]
       for c in task.clients})
  results = collections.OrderedDict(
      config=config,
      method=list(training.method),
      method_label=text2sql_report.method_label(training.method),
      vocabulary_size=task.tokenizer.vocabulary_size(),
      **({'lora': _lora_sizes(parser.lora_model_fn)} if lora else {}),
      examples={c: {s: len(task.splits[c][s]) for s in text2sql.SPLITS}
                for c in task.clients},
      truncated={c: {s: {'sources': task.splits[c][s].truncated_sources,
                         'targets': task.splits[c][s].truncated_targets}
                     for s in text2sql.SPLITS} for c in task.clients},
      best_rounds=best_rounds,
      test=evaluation.to_json(),
      test_exact_match_bootstrap_ci95=bootstrap.to_json(),
      test_tokens={c: test_tokens[c] for c in task.clients},
      vocab_slices={c: collections.OrderedDict(
          keys=int(v.num_keys), distinct_ids=int(v.distinct_ids),
          ids_to_unk=int(unknown)) for c, (v, _, unknown) in slices.items()},
      rounds=unit_records,
      # A DP run's ε (one unit: the federated model).
      **({'privacy': unit_privacy[training.paradigm]} if unit_privacy
         else {}),
      **({'template_coverage': {
          c: dict(zip(('covered', 'total'), text2sql_templates.coverage(
              task.splits[c]['test'].y))) for c in task.clients}}
         if templates else {}),
      seconds=time.perf_counter() - start + seconds_before_resume,
      seconds_before_resume=seconds_before_resume,
  )
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE), results)
  report = text2sql_report.run_markdown(
      training.method, evaluation, bootstrap=bootstrap,
      token_accuracy={c: v['token_accuracy'] for c, v in test_tokens.items()},
      best_rounds=best_rounds,
      token_accuracy_of=('the gold template (template accuracy)'
                         if templates else 'the gold SQL, teacher-forced'))
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write(report)
  write_plots(unit_records, output_dir, federated=training.paradigm ==
              'federated', clients=task.clients)
  # The Table 2 rows only: the benchmark and the demo print one per run.
  print(text2sql_report.table2_markdown(
      {training.method: evaluation.exact_match}, methods=[training.method]))
  return results


def _model_aggregator(aggregation: aggregation_lib.AggregationConfig,
                      training: text2sql_task.TrainingConfig,
                      loop: training_lib.LoopConfig, num_clients: int):
  """The federated run's model aggregator and DP accounting (InputError)."""
  return aggregation_lib.build_model_aggregator(
      aggregation, weighting=training.weighting,
      # More than the clients is refused by the loop, in its words.
      clients_per_round=min(loop.clients_per_round, num_clients),
      population=num_clients, rounds=loop.rounds)


def _selected_checkpoint(run_dir: str) -> str:
  """The checkpoint path of the one model `run_dir` selected."""
  folder = os.path.join(run_dir, BEST_CHECKPOINT_DIR)
  units = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
  if len(units) != 1:
    raise errors.CheckpointError(
        f'{folder}: expected the selected model of one finished centralized '
        f'or federated run, found {units or "nothing"}.')
  return os.path.join(folder, units[0], BEST_CHECKPOINT_PREFIX)


def _check_init_model(run_dir: str, data: text2sql_task.DataConfig,
                      model: seq2seq.Seq2SeqConfig) -> None:
  """Refuses an `init_from` run whose model is not this run's.

  `seq2seq.load_checkpoint` refuses variables of other shapes, but weights
  trained with, say, another `activation` or `layer_norm_epsilon` would load
  silently into a model that computes something else. So the model recorded
  in the run's `config.json` (with its `data`'s maximum lengths, which the
  run built it with) is compared with this one, field by field, except for
  `INIT_FROM_FREE_FIELDS`.

  Args:
    run_dir: The `init_from` run directory.
    data: This run's data config (its maximum lengths).
    model: This run's model config.

  Raises:
    InputError: If `data` fits a maximum length to the data (0): the model's
      shape is then not known before the data is read.
    CheckpointError: If the run's `config.json` cannot be read or records no
      text2sql model, or a field differs, or the run fitted its maximum
      lengths to its data.
  """
  fitted = [name for name in _LENGTH_FIELDS if not getattr(data, name)]
  if fitted:
    raise errors.InputError(
        f'--init_from={run_dir}: '
        + ', '.join(f'--{name}=0' for name in fitted)
        + ' fits the maximum length to this run\'s data, so the model may '
        'not have the shape of the one it starts from. Give the maximum '
        'lengths that run was built with.')
  path = os.path.join(run_dir, run_dir_lib.CONFIG_FILE)
  try:
    with open(path, encoding='utf-8') as f:
      earlier = json.load(f)[run_dir_lib.EXPERIMENT_KEY]
    earlier_model = dict(earlier['model'])
    earlier_model.update({name: earlier['data'][name]
                          for name in _LENGTH_FIELDS})
  except (OSError, ValueError, LookupError, TypeError) as e:
    raise errors.CheckpointError(
        f'{path}: cannot read the model configuration of the run in '
        f'{run_dir!r} ({type(e).__name__}: {e}); init_from needs the output '
        'directory of a text2sql run.') from e
  earlier_fitted = [name for name in _LENGTH_FIELDS
                    if not earlier_model[name]]
  if earlier_fitted:
    raise errors.CheckpointError(
        f'{path}: the run in {run_dir!r} fitted '
        f'{" and ".join(earlier_fitted)} to its data (0 in its '
        'configuration), so the shape of its model is not recorded; start '
        'from a run with explicit maximum lengths.')
  current = training_lib.to_json_value(dataclasses.replace(
      model, **{name: getattr(data, name) for name in _LENGTH_FIELDS}))
  diffs = []
  for field in dataclasses.fields(seq2seq.Seq2SeqConfig):
    if field.name in INIT_FROM_FREE_FIELDS:
      continue
    # A field added since the run was recorded had its default then.
    old = earlier_model.get(
        field.name,
        None if field.default is dataclasses.MISSING else field.default)
    if old != current[field.name]:
      diffs.append(f'{field.name}: {old!r} -> {current[field.name]!r}')
  if diffs:
    raise errors.CheckpointError(
        f'{path}: the run in {run_dir!r} trained a different model (its '
        f'value -> this run\'s: {"; ".join(diffs)}), so its weights cannot '
        'start this run. Use its model configuration and maximum lengths '
        f'(only {", ".join(INIT_FROM_FREE_FIELDS)} may differ), or start '
        'from another run.')


def _lora_sizes(model_fn) -> collections.OrderedDict:
  count = model_fn.parameter_count
  return collections.OrderedDict(
      adapter_parameters=count.adapters,
      trained_parameters=count.trainable,
      model_parameters=count.total - count.adapters,
      # Reaches each client once, with the computation (never in a round).
      base_bytes_once=model_fn.base_bytes)


# The file that holds a run's tokenizer, by `DataConfig.tokenizer`.
_TOKENIZER_FILES = {'subword': subword_tokenizer.PROTO_FILENAME,
                    'copy_words': copy_tokenizer.VOCABULARY_FILE}


def _tokenizer_file(run_dir: str, kind: str, flag: str) -> str:
  """The `kind` tokenizer file of `run_dir`; a `CheckpointError` naming
  `flag` if it has none (e.g. a copy_words run for a subword one)."""
  path = os.path.join(run_dir, TOKENIZER_DIR, _TOKENIZER_FILES[kind])
  if not os.path.isfile(path):
    raise errors.CheckpointError(
        f'{flag}={run_dir}: no {kind} tokenizer ({path} is missing); '
        f'--tokenizer={kind} needs a run that tokenized its data that way.')
  return path


def _copy_tokenizer(tokenizer_file: str, tokenizer_dir: str) -> None:
  """Copies a `_tokenizer_file` into this run's `tokenizer_dir`."""
  os.makedirs(tokenizer_dir, exist_ok=True)
  shutil.copyfile(tokenizer_file, os.path.join(
      tokenizer_dir, os.path.basename(tokenizer_file)))


def _best_round(records: Sequence[Mapping[str, Any]]) -> Optional[int]:
  rounds, values = plots.metric_series(records, f'eval/{DEV_METRIC}')
  if not values:
    return None
  # The last of the best, as `_DevEvaluator` selects.
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
