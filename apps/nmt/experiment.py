"""Federated mixed-domain NMT with dynamic pulling: engines and their BLEU.

Reproduces the protocol of Passban, Roosta, Gupta, Chadha and Chung,
"Training Mixed-Domain Translation Models via Federated Learning", NAACL 2022
(`shared/docs/dynamic_pulling.md`): German→English domains
(`tff_nlp.data.nmt`) are clients, a Transformer encoder-decoder
(`tff_nlp.models.seq2seq`) shares one subword vocabulary for both languages,
and every engine is scored with SacreBLEU on every domain's test set.

An *engine* is one trained model (or, federated, a server model and one
model per client). `run_engine` trains one; its kinds:

*   `generic`: trained from scratch on the generic domain alone (news on
    `nmt_de_en`, as in the paper; `generic/`, Tatoeba + Europarl and no
    client, on `nmt_de_en_large`); it initialises every other engine except
    the single-domain ones (the paper's generic engine). With several seeds
    it is trained once, with the first;
*   `single`: trained from scratch on one domain (the paper's Table 2); the
    single-domain engine of the generic domain is the generic engine;
*   `finetuned`: the generic engine fine-tuned on one domain alone (a
    single-domain engine that starts from the generic engine, as every
    engine but `single` does; the first step of chained fine-tuning);
*   `combined`: the generic engine fine-tuned on the union of all domains'
    training data (centralised data combination, Table 3);
*   `chained`: the generic engine fine-tuned on each other domain in turn,
    in the order of `DataConfig.domains` (`apps.nmt.task`; chained
    fine-tuning, Table 3);
*   `federated`: the generic engine given to every client; rounds of local
    fine-tuning (`local_steps` steps per client) and aggregation weighted by
    data size (each domain's share at most `max_weight_share` if set), with
    the dynamic-pulling `mode` of `tff_nlp.algorithms.dynamic_pulling`
    deciding which tensors each client sends (Tables 4 and 6), and
    optionally a server optimizer stepping towards the average
    (`nmt_task.SERVER_OPTIMIZERS`; not the paper's); the server
    model and every client's model (its weights after its last local
    fine-tuning) are scored.

The task (data, model configuration, processes and client data) is
`apps.nmt.task`; the report (means over seeds, intervals, paired
differences) is `apps.nmt.results`. Centralised training runs through the same resumable
loop as the federated one (`tff_nlp.training.run_training`): a one-client
FedAvg whose round is one epoch, as in `experiments.text2sql`.
"""

import collections
from collections.abc import Sequence
import dataclasses
import json
import os
import time
from typing import Any, Optional

from absl import logging
import numpy as np

from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.data import nmt as nmt_data
from tff_nlp.metrics import bleu
from apps.nmt import engines as nmt_engines
from apps.nmt import results as nmt_results
from apps.nmt import seeds as nmt_seeds
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_decoding
from apps.nmt import task as nmt_task
from apps.common import seq2seq_examples
from tff_nlp.training import run_cache

# The engines and their cache keys (`nmt_engines`), part of this module's API.
ENGINE_KINDS = nmt_engines.ENGINE_KINDS
EngineSpec = nmt_engines.EngineSpec
engine_dir = nmt_engines.engine_dir
engine_key = nmt_engines.engine_key

TOKENIZER_DIR = 'tokenizer'
MODEL_FILE = 'model.npz'
GENERIC_DIGEST_FILE = 'generic_sha256.txt'
RESULTS_FILE = nmt_results.RESULTS_FILE
PREDICTIONS_DIR = nmt_results.PREDICTIONS_DIR
SERVER = nmt_seeds.SERVER


# Keras models and their traced decode functions, by model configuration
# and beam size: tracing the decoder costs seconds, more than scoring a
# small test set, and it depends on neither the weights (assigned before
# every translation) nor the data, so every `BleuEvaluator` of this Python
# process (each `run_nmt` call has its own: a sweep, a resumed experiment,
# the tests of one pytest worker) shares them.
_DECODERS = training_lib.ProcessCache(max_size=8)


def _build_decoder(config: seq2seq.Seq2SeqConfig, beam_size: int):
  keras_model = seq2seq.build_keras_model(config)
  return keras_model, seq2seq_decoding.make_decode_fn(
      keras_model, max_length=config.max_target_length, beam_size=beam_size)


class BleuEvaluator:
  """SacreBLEU of model weights on a split of several domains.

  Takes its Keras model and decode function from `_DECODERS` on first use
  (lazily: a Keras model built before TFF traces a `model_fn` fails inside
  a `tf.function` afterwards; see `experiments.text2sql`; one that has
  traced its decoder keeps working).
  """

  def __init__(self, task: nmt_task.NmtTask, config: seq2seq.Seq2SeqConfig,
               training: nmt_task.TrainingConfig):
    self._task = task
    self._config = config
    self._training = training
    self._keras_model = self._decode_fn = None

  def translate(self, weights: Sequence[np.ndarray],
                data: nmt_task.EncodedCorpus) -> list[str]:
    """The detokenized translations of `data`'s sources by `weights`."""
    if self._keras_model is None:
      beam_size = self._training.beam_size
      self._keras_model, self._decode_fn = _DECODERS.get(
          (self._config, beam_size),
          lambda: _build_decoder(self._config, beam_size))
    for variable, value in zip(self._keras_model.trainable_weights, weights):
      variable.assign(value)
    return seq2seq_examples.decode(
        self._decode_fn, self._task.tokenizer, data,
        batch_size=self._training.decode_batch_size)

  def bleu(self, weights: Sequence[np.ndarray], *, split: str = 'test',
           domains: Optional[Sequence[str]] = None
           ) -> tuple[dict[str, bleu.BleuResult], dict[str, list[str]]]:
    """BLEU per domain and the translations."""
    results, translations = {}, {}
    for domain in domains or self._task.domains:
      data = self._task.splits[domain][split]
      translations[domain] = self.translate(weights, data)
      results[domain] = bleu.corpus_bleu(translations[domain],
                                         data.corpus.targets)
    return results, translations


def _trainable(model_weights) -> list[np.ndarray]:
  return [np.asarray(w) for w in model_weights.trainable]


def _save_weights(path: str, weights: Sequence[np.ndarray]) -> None:
  temp = path + '.tmp.npz'
  np.savez(temp, *weights)
  os.replace(temp, path)


def load_weights(path: str) -> list[np.ndarray]:
  """Trainable weights saved by an engine run (`model.npz`)."""
  if not os.path.exists(path):
    raise errors.CheckpointError(f'{path}: no trained model there.')
  with np.load(path) as saved:
    return [saved[f'arr_{i}'] for i in range(len(saved.files))]


def _check_started_from(run_dir: str, initial: Sequence[np.ndarray]) -> str:
  """The digest of the generic weights an engine starts from, written to
  `run_dir` before its first checkpoint; resuming from checkpoints that
  started from other generic weights (the generic engine trained again, on
  another machine) raises CheckpointError."""
  digest = training_lib.weights_digest(initial)
  path = os.path.join(run_dir, GENERIC_DIGEST_FILE)
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      recorded = f.read().strip()
    if recorded != digest:
      raise errors.CheckpointError(
          f'{run_dir}: its checkpoints started from generic weights '
          f'{recorded[:12]}, but the generic engine now has {digest[:12]} '
          '(trained again, e.g. on another machine): delete the folder to '
          'train the engine again from the current generic engine.')
  else:
    with open(path, 'w', encoding='utf-8') as f:
      f.write(digest + '\n')
  return digest


def _check_generic_weights(run_dir: str, results: dict[str, Any]) -> None:
  """Checks the generic engine's weights (if there) against its results.

  The weights may come from an archive (`run_cache.restore`) beside results
  of another training; an engine started from them would then record
  generic weights its report does not know. Fills in the digest of a
  generic engine trained before digests were recorded.

  Raises:
    errors.CheckpointError: `model.npz` is not the model the results
      describe.
  """
  path = os.path.join(run_dir, MODEL_FILE)
  if not os.path.exists(path):
    return
  digest = training_lib.weights_digest(load_weights(path))
  recorded = results.setdefault(nmt_results.WEIGHTS_DIGEST, digest)
  if recorded != digest:
    raise errors.CheckpointError(
        f'{path}: weights {digest[:12]}, but its {RESULTS_FILE} describes '
        f'weights {recorded[:12]} (restored from another run?): delete '
        f'{path} to train the generic engine again.')


def _train_centralized(data: nmt_task.EncodedCorpus, *, epochs: int,
                       initial: Optional[Sequence[np.ndarray]],
                       model: seq2seq.Seq2SeqConfig,
                       training: nmt_task.TrainingConfig,
                       loop: training_lib.LoopConfig,
                       run_dir: str, seed: int,
                       built: training_lib.ProcessCache
                       ) -> tuple[list[np.ndarray], list[dict]]:
  """`epochs` epochs on `data` (a one-client FedAvg round per epoch)."""
  del built  # Processes go to the shared cache; `built` keeps evaluators.
  # A function of the model (vocabulary, lengths, seed) and training
  # configurations only: shared by every run of this Python process.
  process = training_lib.shared_processes().get(
      ('nmt.centralized', model, training),
      lambda: nmt_task.build_centralized_process(model, training))
  rounds = nmt_task.centralized_rounds(data, training, epochs)
  initial_weights = None
  if initial is not None:
    template = process.get_model_weights(process.initialize())
    initial_weights = template._replace(trainable=list(initial))
  run = training_lib.run_training(
      process,
      client_data_fn=nmt_task.centralized_client_data_fn(
          data, training, seed, epochs=epochs),
      num_clients=1,
      config=dataclasses.replace(loop, rounds=rounds, clients_per_round=0,
                                 eval_every=0),
      output_dir=run_dir, description=os.path.basename(run_dir),
      initial_model_weights=initial_weights)
  return _trainable(process.get_model_weights(run.state)), run.records


def _train_federated(task: nmt_task.NmtTask, spec: EngineSpec, *,
                     initial: Sequence[np.ndarray],
                     model: seq2seq.Seq2SeqConfig,
                     training: nmt_task.TrainingConfig,
                     loop: training_lib.LoopConfig, run_dir: str, seed: int,
                     built: training_lib.ProcessCache, evaluate_fn=None):
  """Rounds of `spec.mode` dynamic pulling from the generic engine."""
  del built  # Processes go to the shared cache; `built` keeps evaluators.
  key = ('nmt.federated', model, training, len(task.domains), spec.mode,
         spec.change_norm, spec.server_optimizer)
  process = training_lib.shared_processes().get(
      key, lambda: nmt_task.build_federated_process(
      model, training, num_clients=len(task.domains), mode=spec.mode,
      change_norm=spec.change_norm, server_optimizer=spec.server_optimizer))
  template = process.get_model_weights(process.initialize())
  run = training_lib.run_training(
      process,
      client_data_fn=nmt_task.federated_client_data_fn(
          task, training, seed, rounds=spec.rounds),
      num_clients=len(task.domains),
      config=dataclasses.replace(loop, rounds=spec.rounds,
                                 clients_per_round=0),
      output_dir=run_dir, description=spec.name,
      initial_model_weights=template._replace(trainable=list(initial)),
      evaluate_fn=evaluate_fn)
  server = _trainable(process.get_model_weights(run.state))
  clients = {d: _trainable(w) for d, w in zip(
      task.domains, process.client_model_weights(run.state))}
  return server, clients, run.records



def run_engine(
    spec: EngineSpec,
    *,
    task: nmt_task.NmtTask,
    model: seq2seq.Seq2SeqConfig,
    training: nmt_task.TrainingConfig,
    loop: training_lib.LoopConfig,
    run_dir: str,
    generic_dir: Optional[str] = None,
    built: Optional[training_lib.ProcessCache] = None,
) -> dict[str, Any]:
  """Trains one engine (resuming), scores it on every domain's test set.

  Args:
    spec: The engine.
    task: The tokenized domains.
    model: The model (vocabulary and lengths of the task).
    training: Training and decoding settings.
    loop: Seed, checkpoint cadence and progress (rounds come from `spec`
      and `training`).
    run_dir: The engine's directory: checkpoints, metrics, `model.npz` (the
      trained weights; `clients/<domain>.npz` for a federated engine's
      client models), `predictions/`, `results.json`.
    generic_dir: The generic engine's directory (needed by every kind but
      `generic` and `single`).
    built: Processes and evaluators built by earlier engines of the same
      `run_nmt` call, reused when their configuration is this engine's.

  Returns:
    The content of `results.json`: BLEU per scored model and domain, the
    SacreBLEU signature, the rounds' records and the time.
  """
  os.makedirs(run_dir, exist_ok=True)
  start = time.perf_counter()
  seed = loop.seed
  if spec.kind in nmt_engines.FROM_SCRATCH:
    model, training = nmt_task.pretraining_configs(model, training)
  initial = None
  if spec.kind in nmt_engines.FROM_GENERIC:
    if generic_dir is None:
      raise ValueError(f'{spec.name} starts from the generic engine: pass '
                       'generic_dir.')
    initial = load_weights(os.path.join(generic_dir, MODEL_FILE))
    started_from = _check_started_from(run_dir, initial)
  built = built or training_lib.ProcessCache()
  # Its task is the same for every engine of a `run_nmt` call.
  evaluator = built.get(('evaluator', model, training),
                        lambda: BleuEvaluator(task, model, training))
  records = {}
  clients = {}
  if spec.kind in nmt_engines.FROM_SCRATCH:
    domain = task.splits[spec.domain or task.generic_domain]
    weights, records['train'] = _train_centralized(
        domain['train'], epochs=training.pretrain_epochs, initial=None,
        model=model, training=training, loop=loop, run_dir=run_dir,
        seed=seed, built=built)
  elif spec.kind == 'finetuned':
    weights, records['train'] = _train_centralized(
        task.splits[spec.domain]['train'], epochs=training.finetune_epochs,
        initial=initial, model=model, training=training, loop=loop,
        run_dir=run_dir, seed=seed, built=built)
  elif spec.kind == 'combined':
    weights, records['train'] = _train_centralized(
        nmt_task.union([task.splits[d]['train'] for d in task.domains]),
        epochs=training.finetune_epochs, initial=initial, model=model,
        training=training, loop=loop, run_dir=run_dir, seed=seed,
        built=built)
  elif spec.kind == 'chained':
    weights = initial
    for domain in [d for d in task.domains if d != task.generic_domain]:
      weights, records[domain] = _train_centralized(
          task.splits[domain]['train'], epochs=training.finetune_epochs,
          initial=weights, model=model, training=training, loop=loop,
          run_dir=os.path.join(run_dir, domain), seed=seed, built=built)
  else:
    def dev_bleu(model_weights):
      scores, _ = evaluator.bleu(_trainable(model_weights), split='dev')
      values = {f'dev_bleu/{d}': r.score for d, r in scores.items()}
      values['dev_bleu/avg'] = float(np.mean(list(values.values())))
      return values

    weights, clients, records['federated'] = _train_federated(
        task, spec, initial=initial, model=model, training=training,
        loop=loop, run_dir=run_dir, seed=seed, built=built,
        evaluate_fn=dev_bleu)
  _save_weights(os.path.join(run_dir, MODEL_FILE), weights)

  scored = {SERVER if spec.kind == 'federated' else spec.name: weights}
  for domain, client_weights in clients.items():
    os.makedirs(os.path.join(run_dir, 'clients'), exist_ok=True)
    _save_weights(os.path.join(run_dir, 'clients', f'{domain}.npz'),
                  client_weights)
    if training.score_client_models:
      scored[f'client {domain}'] = client_weights
  scores, signature = {}, None
  scoring_start = time.perf_counter()
  os.makedirs(os.path.join(run_dir, PREDICTIONS_DIR), exist_ok=True)
  for name, model_weights in scored.items():
    results, translations = evaluator.bleu(model_weights)
    scores[name] = {d: r.score for d, r in results.items()}
    signature = next(iter(results.values())).signature
    with open(os.path.join(run_dir, PREDICTIONS_DIR,
                           name.replace(' ', '_') + '.jsonl'), 'w',
              encoding='utf-8') as f:
      for domain, lines in translations.items():
        test = task.splits[domain]['test'].corpus
        for source, reference, hypothesis in zip(test.sources, test.targets,
                                                 lines):
          f.write(json.dumps(collections.OrderedDict(
              domain=domain, source=source, reference=reference,
              hypothesis=hypothesis), ensure_ascii=False) + '\n')
  results = collections.OrderedDict(
      engine=spec.name, spec=spec, bleu=scores, sacrebleu=signature,
      test_sentences={d: len(task.splits[d]['test']) for d in task.domains},
      client_weights=task.client_weights() if spec.kind == 'federated'
      else None,
      records=records, seconds=time.perf_counter() - start,
      # Which generic engine it started from (`nmt_results` refuses a
      # report whose engines started from different ones), or its own.
      **({nmt_results.GENERIC_DIGEST: started_from}
         if spec.kind in nmt_engines.FROM_GENERIC
         else {nmt_results.WEIGHTS_DIGEST: training_lib.weights_digest(
             weights)}),
      # The whole engine's cost, over every invocation that trained it:
      # its rounds' times (kept across resumes) and this scoring.
      train_seconds=sum(r.get('round_seconds', 0.0)
                        for rounds in records.values() for r in rounds),
      score_seconds=time.perf_counter() - scoring_start)
  training_lib.write_json(os.path.join(run_dir, RESULTS_FILE), results)
  logging.info('%s: BLEU %s', spec.name, scores)
  return training_lib.to_json_value(results)


def _restored_engines(output_dir: str) -> bool:
  """Whether `output_dir/engines` holds any engine folder."""
  engines = os.path.join(output_dir, nmt_engines.ENGINES_DIR)
  return os.path.isdir(engines) and bool(os.listdir(engines))


def run_nmt(
    *,
    engines: Sequence[EngineSpec],
    data_dir: Optional[str],
    output_dir: str,
    data: nmt_task.DataConfig,
    model: seq2seq.Seq2SeqConfig,
    training: nmt_task.TrainingConfig,
    loop: training_lib.LoopConfig,
    seeds: Sequence[int] = (),
    report_only: bool = False,
    command: str = '',
    restart: bool = False,
) -> dict[int, dict[str, dict[str, Any]]]:
  """Runs (or reads back) each engine per seed, and the generic engine once.

  Every engine runs in `output_dir/engines/<name>-<hash>` (`engine_dir`), so
  an interrupted experiment continues where it stopped and a changed
  configuration starts new engines. The first seed also seeds the data
  subsets, the tokenizer (trained once, in `output_dir/tokenizer`) and the
  one generic engine every other engine of every seed starts from, as in
  the paper; the other seeds vary what the engines do from there (batch
  order, dropout, dynamic pulling's random draws). The report is rewritten
  after every engine trained, so it always shows the engines finished; its
  tables are printed once, at the end. A
  generic engine whose results were restored without its weights
  (`run_cache.restore`) is trained again only while an engine that starts
  from it is still to train.

  Args:
    engines: The engines to train.
    data_dir: The folder of domains (train_nmt: `--corpus` in the data
      folder `--data_dir`, `nmt.find_corpus_dir`), or anything
      `nmt.find_nmt_dir` takes.
    output_dir: The experiment's directory.
    data: Domains, vocabulary and subsets.
    model: The model (its vocabulary and lengths are the task's).
    training: Training and decoding.
    loop: Checkpoint cadence and progress; its seed is the only seed when
      `seeds` is empty.
    seeds: Training seeds; empty for `[loop.seed]`.
    report_only: Train nothing: report the engines finished so far (e.g.
      from another process while a long benchmark runs) and skip the rest.
    command: The command line, for the report.
    restart: Remove what `output_dir` holds (tokenizer, every engine) and
      start over.

  `output_dir/config.json` and `data_fingerprint.json` (the corpus files
  read) are written once the data is read and checked; a later call with
  another experiment or changed corpus files is refused.

  Returns:
    `{seed: {engine name: its results}}`, the generic engine (under the
    first seed only) first when needed.
  """
  if not engines:
    raise errors.InputError('--engines: no engine given.')
  seeds = list(seeds) or [loop.seed]
  if len(set(seeds)) != len(seeds):
    raise errors.InputError(f'--seeds: {seeds} repeats a seed.')
  first = seeds[0]
  folder = nmt_data.find_nmt_dir(data_dir)
  corpus = os.path.basename(folder)
  experiment = collections.OrderedDict(data=data, seed=first)
  if corpus != nmt_data.NMT_SUBDIR:
    experiment['corpus'] = corpus
  with training_lib.prepare_run_dir(
      output_dir, collections.OrderedDict(experiment=experiment),
      restart=restart, data_root=os.path.dirname(folder)) as run:
    # Engines restored from an archive (`run_cache.restore`: results and
    # translations, no config) are a run to report, so a report can be
    # regenerated from `records/` alone without training.
    if report_only and not run.resumed and not _restored_engines(output_dir):
      raise errors.InputError(
          f'--report_only: {output_dir} holds no run of this experiment.')
    task = nmt_task.prepare_task(
        data, data_dir=folder, seed=first,
        tokenizer_dir=os.path.join(output_dir, TOKENIZER_DIR))
    for spec in engines:
      if (spec.kind in nmt_engines.ONE_DOMAIN
          and spec.domain not in data.domains):
        raise errors.InputError(
            f'--engines: {spec.kind}:{spec.domain}: not one of the domains '
            f'{list(data.domains)}.')
  # The run has started: its config and data fingerprint are recorded.
  model = nmt_task.model_config(model, task, data)
  generic = EngineSpec('generic')
  needed = []
  for spec in engines:
    # The generic domain's single-domain engine is the generic engine.
    if spec.kind == 'single' and spec.domain == data.generic_domain:
      spec = generic
    if spec not in needed:
      needed.append(spec)
  if any(e.kind in nmt_engines.FROM_GENERIC for e in needed) and (
      generic not in needed):
    needed.insert(0, generic)
  needed = [generic] * (generic in needed) + [e for e in needed
                                              if e != generic]
  def dir_of(spec, seed):
    return engine_dir(output_dir, spec, data=data, model=model,
                      training=training, seed=seed, generic_seed=first,
                      corpus=corpus)

  # Engines still to train that start from the generic engine's weights.
  pending = [(spec, seed) for seed in seeds for spec in needed
             if spec != generic and run_cache.finished_results(
                 dir_of(spec, seed), results_file=RESULTS_FILE) is None]
  runs = collections.OrderedDict()
  generic_dir = None
  # What engines of this call share: building a process traces the model
  # into TFF computations (most of a small engine's time), and the BLEU
  # evaluator builds and traces its decoder; neither depends on the seed,
  # the data or the starting weights, so engines of the same configuration
  # (every seed's, and e.g. a single-domain engine and the generic one)
  # build them once.
  built = training_lib.ProcessCache()
  for seed in seeds:
    results = runs[seed] = collections.OrderedDict()
    for spec in needed:
      if spec == generic and seed != first:
        continue
      run_dir = dir_of(spec, seed)
      done = run_cache.finished_results(run_dir, results_file=RESULTS_FILE)
      if (spec == generic and done is not None and pending
          and not report_only
          and not os.path.exists(os.path.join(run_dir, MODEL_FILE))):
        # Its results were restored from an archive
        # (`run_cache.restore`: results and translations, not weights),
        # and engines still to train start from its weights: train it
        # again (the same configuration and seed give the same weights).
        logging.info('%s: no %s in %s (restored results only); the %d '
                     'engines still to train start from it, so it trains '
                     'again.', spec.name, MODEL_FILE, run_dir, len(pending))
        done = None
      trained = done is None
      if trained and report_only:
        logging.info('%s, seed %d: not finished, left out of the report.',
                     spec.name, seed)
        if spec == generic:
          generic_dir = run_dir
        continue
      if trained:
        logging.info('%s, seed %d: training in %s', spec.name, seed, run_dir)
        done = run_engine(spec, task=task, model=model, training=training,
                          loop=dataclasses.replace(loop, seed=seed),
                          run_dir=run_dir, generic_dir=generic_dir,
                          built=built)
      else:
        logging.info('%s, seed %d: done before, read from %s', spec.name,
                     seed, run_dir)
      if spec == generic:
        generic_dir = run_dir
        _check_generic_weights(run_dir, done)
      done['run_dir'] = os.path.relpath(run_dir, output_dir)
      results[spec.name] = done
      if trained:
        nmt_results.write_report(runs, output_dir, task=task, data=data,
                                 command=command, echo=False,
                                 training=training)
  if not any(runs.values()):
    raise errors.InputError(
        f'--report_only: no engine of --engines has finished in {output_dir}.')
  nmt_results.write_report(runs, output_dir, task=task, data=data,
                           command=command, training=training)
  return runs
