"""Federated text-to-SQL: one run of finetuning, centralized or federated.

Reproduces the protocol of Zhang et al., "Federated Learning for Semantic
Parsing: Task Formulation, Evaluation Setup, New Algorithms", ACL 2023
(arXiv 2305.17221; `shared/docs/lorar.md`) on the task of
`apps.text2sql.task` (data and configurations) and
`apps.text2sql.process` (parsers, processes, client data). Three
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
import time
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import errors
from apps.common import plots
from tff_nlp import training as training_lib
from tff_nlp.aggregators import factory as aggregation_lib
from apps.text2sql import vocab_sliced
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source
from apps.text2sql import start as text2sql_start
from apps.text2sql import summary_markdown as text2sql_summary_markdown
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import report as text2sql_report
from tff_nlp.models import lora as lora_lib
from tff_nlp.models import seq2seq
from apps.text2sql import task as text2sql_task
from apps.text2sql import process as text2sql_process
from apps.text2sql import template_parser as text2sql_templates

# The run layout that `init_from` reads (`text2sql_start`).
TOKENIZER_DIR = text2sql_start.TOKENIZER_DIR
BEST_CHECKPOINT_DIR = text2sql_start.BEST_CHECKPOINT_DIR
BEST_CHECKPOINT_PREFIX = text2sql_start.BEST_CHECKPOINT_PREFIX
INIT_FROM_FREE_FIELDS = text2sql_start.INIT_FROM_FREE_FIELDS
BEST_MODEL_FILE = 'best_model.npz'
BEST_MODEL_INFO_FILE = 'best_model.json'
RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
PREDICTIONS_DIR = 'predictions'
LOSS_PLOT_FILE = 'training_loss.png'
DEV_PLOT_FILE = 'dev_exact_match.png'
DEV_METRIC = 'dev_exact_match'


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
    restart: bool = False,
) -> dict[str, Any]:
  """Trains and evaluates one method of the paper's Table 2.

  Writes to `output_dir`: `config.json`, `tokenizer/`, one run directory per
  trained model (`federated/`, `centralized/` or `finetune/<client>/`, each
  with checkpoints, metrics, `best_model.npz`), `predictions/<client>.jsonl`
  (each test example's prediction, exact match and teacher-forced
  `correct_tokens` of its `tokens`), `results.json`, `results.md` (Table 2
  layout, the paper's numbers beside ours), `dev_exact_match.png` and, for
  federated runs, `training_loss.png`. Running it again resumes; another
  experiment, or changed data files (`data_fingerprint.json`: the clients'
  `<client>.json` and `<client>-schema.csv` read), is refused. `config.json`
  and `data_fingerprint.json` are written once the data is read and the
  parser built, so a call refused before leaves nothing behind.

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
      (`vocab_sliced`): each client downloads and uploads only
      the token-embedding rows of its `vocab_slice_keys` most frequent ids.
      Needs the federated paradigm, 'fedavg' and 'uniform' weighting.
    num_examples_fallback: See `algorithms.build_fl_process`. False gives
      Lorar rounds a single aggregation stage, so that they are split across
      several TFF workers (`tff_nlp.runtime.multi_worker`).
    aggregation: How the federated paradigm aggregates client updates
      (`aggregators.factory`: weight cap, robust aggregation, DP with
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
    restart: Remove the run `output_dir` holds and start over.

  Returns:
    The content of `results.json`.

  Raises:
    CheckpointError: If `init_from` holds no single selected model, or one
      of another configuration (checked before `output_dir` is written).
    InputError: An `aggregation` that does not fit the run (checked before
      `output_dir` is written).
  """
  options = _Options(
      init_from=init_from, vocab_slice_keys=vocab_slice_keys,
      num_examples_fallback=num_examples_fallback,
      aggregation=(None if aggregation is not None and aggregation.is_default
                   else aggregation),
      lora=lora, init_from_keras_nlp=init_from_keras_nlp,
      tokenizer_from=tokenizer_from)
  templates = isinstance(model, text2sql_templates.TemplateParserConfig)
  _check_options(options, data, training, loop, templates=templates)
  experiment = _experiment(options, data, model, training, loop)
  config = collections.OrderedDict(
      experiment=experiment,
      loop=loop,
      data_dir=data_dir,
      versions=collections.OrderedDict(
          tensorflow=tf.__version__, tensorflow_federated=tff.__version__,
          numpy=np.__version__),
  )
  # Before `output_dir` records this run's config: a refused starting point
  # leaves nothing that would refuse the corrected call.
  start_from = text2sql_start.starting_point(
      data, model, seed=loop.seed, init_from=init_from,
      tokenizer_from=tokenizer_from, init_from_keras_nlp=init_from_keras_nlp)
  start = time.perf_counter()
  with training_lib.prepare_run_dir(output_dir, config,
                                    restart=restart) as run:
    if start_from.tokenizer_file is not None:
      text2sql_start.copy_tokenizer_file(
          start_from.tokenizer_file, os.path.join(output_dir, TOKENIZER_DIR))
    if templates:
      task = text2sql_task.prepare_template_task(
          data, data_dir=data_dir, seed=loop.seed, ngrams=model.ngrams,
          values=model.values)
    else:
      task = text2sql_task.prepare_task(
          data, data_dir=data_dir, seed=loop.seed,
          tokenizer_dir=os.path.join(output_dir, TOKENIZER_DIR),
          tokenizer=start_from.preset_tokenizer)
    parser = text2sql_process.build_parser(
        task, model, training.decode_batch_size, lora_config=lora,
        checkpoint=start_from.checkpoint, preset=start_from.preset)
    slices = _vocab_slices(task, vocab_slice_keys)
    initial_weights = start_from.initial_weights(parser.config,
                                                 lora=lora is not None)
    # The fingerprint's names are relative to the folder holding the
    # text2sql folder, however `data_dir` named it.
    run.data_root = os.path.dirname(
        text2sql_source.find_text2sql_dir(data_dir))
  # The run has started: its config and data fingerprint are recorded.
  logging.info('text2sql: %s, vocabulary %d, train sizes %s',
               training.method, task.tokenizer.vocabulary_size(),
               {c: len(task.splits[c]['train']) for c in task.clients})

  scores = _TestScores()
  unit_records, unit_privacy = {}, {}
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
        _model_aggregator(options.aggregation, training, loop, num_clients)
        if options.aggregation is not None else (None, None))
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
    scores.add(task, unit.test_clients, predict, token_metrics_fn)

  evaluation = text2sql_metrics.evaluate(
      {c: scores.pairs(c) for c in task.clients},
      db_paths=task.databases)
  scores.write_predictions(os.path.join(output_dir, PREDICTIONS_DIR))
  best_rounds = {
      name: _best_round(records) for name, records in unit_records.items()}
  # One seed: the interval covers test-set sampling only; the benchmark
  # (`text2sql_summary`) adds seed variation over several runs.
  bootstrap = intervals.bootstrap_accuracy(
      {c: [[text2sql_metrics.exact_match(p, g) for p, g in scores.pairs(c)]]
       for c in task.clients})
  test_tokens = scores.test_tokens
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
              task.splits[c]['test'].y))) for c in task.clients},
          'template_values': model.values,
          # Test questions whose gold SQL needs a value they do not state.
          'unstated_values': {
              c: dict(questions=sum(
                  bool(text2sql.unstated_values(q, s))
                  for q, s in task.splits[c]['test'].questions),
                      total=len(task.splits[c]['test']))
              for c in task.clients}}
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
  title, rest = report.split('\n', 1)
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write(f'{title}\n\n'
            + text2sql_summary_markdown.what_the_model_saw(output_dir) + rest)
  write_plots(unit_records, output_dir, federated=training.paradigm ==
              'federated', clients=task.clients)
  # The Table 2 rows only: the benchmark and the demo print one per run.
  print(text2sql_report.table2_markdown(
      {training.method: evaluation.exact_match}, methods=[training.method]))
  return results


@dataclasses.dataclass(frozen=True)
class _Options:
  """`run_text2sql`'s optional arguments that shape the experiment."""
  init_from: Optional[str]
  vocab_slice_keys: int
  num_examples_fallback: bool
  aggregation: Optional[aggregation_lib.AggregationConfig]  # None: default.
  lora: Optional[lora_lib.LoraConfig]
  init_from_keras_nlp: Optional[str]
  tokenizer_from: Optional[str]


def _check_options(options: _Options, data: text2sql_task.DataConfig,
                   training: text2sql_task.TrainingConfig,
                   loop: training_lib.LoopConfig, *, templates: bool) -> None:
  """Refuses options that do not fit together (`run_text2sql`'s Raises)."""
  o = options
  if templates and (o.init_from or o.vocab_slice_keys or data.retrieved_sql
                    or data.sql_merges or o.lora or data.lowercase_sql):
    raise errors.InputError(
        'The template parser (--parser=template) takes no --init_from, '
        '--vocab_slice_keys, --retrieved_sql, --sql_merges, --lora_rank or '
        '--lowercase_sql: they are the seq2seq parser\'s.')
  if o.tokenizer_from and (o.init_from or o.init_from_keras_nlp or templates):
    raise errors.InputError(
        '--tokenizer_from gives a model from scratch another run\'s '
        'tokenizer: it takes no --init_from or --init_from_keras_nlp (they '
        'bring their own tokenizers) and no --parser=template.')
  if o.init_from_keras_nlp and (o.init_from or templates or o.vocab_slice_keys
                                or data.tokenizer == 'copy_words'):
    raise errors.InputError(
        '--init_from_keras_nlp starts from a keras-nlp preset (its model '
        'and tokenizer): it takes no --init_from, --parser=template, '
        '--vocab_slice_keys or --tokenizer=copy_words.')
  if o.lora and o.vocab_slice_keys:
    raise errors.InputError(
        '--lora_rank and --vocab_slice_keys are two ways of sending part of '
        'the model; use one.')
  if o.vocab_slice_keys and (training.paradigm, training.algorithm,
                             training.weighting) != ('federated', 'fedavg',
                                                     'uniform'):
    raise ValueError(
        'vocab_slice_keys needs the federated paradigm with algorithm '
        "'fedavg' and weighting 'uniform' (the sliced embedding is averaged "
        f'uniformly), got {training.method}.')
  if o.aggregation is not None:
    if training.paradigm != 'federated' or o.vocab_slice_keys:
      raise errors.InputError(
          'The aggregation options (--max_weight_share, --robust_aggregation,'
          ' --dp_noise_multiplier, --target_epsilon) apply to the federated '
          'paradigm without --vocab_slice_keys, got '
          + (f'--vocab_slice_keys={o.vocab_slice_keys}.' if o.vocab_slice_keys
             else f'--paradigm={training.paradigm}.'))
    _model_aggregator(o.aggregation, training, loop, len(data.clients))


def _experiment(options: _Options, data, model, training, loop
                ) -> collections.OrderedDict:
  """The `experiment` of the run's config: what a resumed run must match.

  An option enters only when set, so that the configurations of earlier
  runs without it (and the benchmark's cache keys) stay as they were.
  """
  o = options
  experiment = collections.OrderedDict(
      seed=loop.seed, data=data, model=model, training=training,
      init_from=o.init_from and os.path.abspath(o.init_from))
  if o.vocab_slice_keys:
    experiment['vocab_slice_keys'] = o.vocab_slice_keys
  if not o.num_examples_fallback:
    experiment['num_examples_fallback'] = False
  if o.lora is not None:
    experiment['lora'] = o.lora
  if o.init_from_keras_nlp:
    experiment['init_from_keras_nlp'] = os.path.abspath(o.init_from_keras_nlp)
  if o.tokenizer_from:
    experiment['tokenizer_from'] = os.path.abspath(o.tokenizer_from)
  if o.aggregation is not None:
    experiment['aggregation'] = o.aggregation
  return experiment


def _vocab_slices(task, vocab_slice_keys: int) -> dict[str, tuple[Any, ...]]:
  """Per client: (its vocabulary, its sliced train split, ids made UNK)."""
  slices = {}
  if not vocab_slice_keys:
    return slices
  for client in task.clients:
    train = task.splits[client]['train']
    vocabulary, local_x, local_y, unknown = vocab_sliced.local_examples(
        train.x, train.y, max_keys=vocab_slice_keys)
    slices[client] = (vocabulary, dataclasses.replace(
        train, x=local_x, y=local_y), unknown)
    logging.info('text2sql: %s keeps %d of its %d distinct ids (%d ids '
                 'became UNK)', client, vocabulary.num_keys,
                 vocabulary.distinct_ids, unknown)
  return slices


class _TestScores:
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


def _model_aggregator(aggregation: aggregation_lib.AggregationConfig,
                      training: text2sql_task.TrainingConfig,
                      loop: training_lib.LoopConfig, num_clients: int):
  """The federated run's model aggregator and DP accounting (InputError)."""
  return aggregation_lib.build_model_aggregator(
      aggregation, weighting=training.weighting,
      # More than the clients is refused by the loop, in its words.
      clients_per_round=min(loop.clients_per_round, num_clients),
      population=num_clients, rounds=loop.rounds)


def _lora_sizes(model_fn) -> collections.OrderedDict:
  count = model_fn.parameter_count
  return collections.OrderedDict(
      adapter_parameters=count.adapters,
      trained_parameters=count.trainable,
      model_parameters=count.total - count.adapters,
      # Reaches each client once, with the computation (never in a round).
      base_bytes_once=model_fn.base_bytes)


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
