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
    in the order of `DataConfig.domains` (`tff_nlp.tasks.nmt`; chained
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
`tff_nlp.tasks.nmt`; the report (means over seeds, intervals, paired
differences) is `tff_nlp.experiments.nmt_results`. Centralised training runs through the same resumable
loop as the federated one (`tff_nlp.training.run_training`): a one-client
FedAvg whose round is one epoch, as in `experiments.text2sql`.
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

from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.algorithms import tensor_selection
from tff_nlp.data import nmt as nmt_data
from tff_nlp.metrics import bleu
from tff_nlp.experiments import nmt_results
from tff_nlp.metrics import nmt_seeds
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_decoding
from tff_nlp.tasks import nmt as nmt_task
from tff_nlp.tasks import seq2seq_examples
from tff_nlp.training import run_cache

ENGINE_KINDS = ('generic', 'single', 'finetuned', 'combined', 'chained',
                'federated')
# The kinds that start from the generic engine.
_FROM_GENERIC = ('finetuned', 'combined', 'chained', 'federated')
# The kinds trained from scratch (`nmt_task.pretraining_configs`).
_FROM_SCRATCH = ('generic', 'single')
# The kinds trained on one domain.
_ONE_DOMAIN = ('single', 'finetuned')
TOKENIZER_DIR = 'tokenizer'
MODEL_FILE = 'model.npz'
RESULTS_FILE = nmt_results.RESULTS_FILE
PREDICTIONS_DIR = nmt_results.PREDICTIONS_DIR
SERVER = nmt_seeds.SERVER
_MODES = tuple(m.value for m in tensor_selection.Mode)
# The modes whose median or quantile `split_by` decides.
_SPLIT_MODES = ('dp_g', 'dp_l', 'random', 'dp_l_33')
_SERVER_OPTIMIZERS = ('none',) + tuple(nmt_task.SERVER_OPTIMIZERS)


@dataclasses.dataclass(frozen=True)
class EngineSpec:
  """One engine to train.

  Attributes:
    kind: One of `ENGINE_KINDS`.
    domain: The domain of a `single` or `finetuned` engine.
    mode: The dynamic-pulling mode of a `federated` engine
      (`tensor_selection.Mode`).
    rounds: Federated rounds.
    change_norm: How a federated engine's clients measure a tensor's
      change: 'l2' (the paper) or 'rms' (per parameter); see
      `dynamic_pulling`.
    server_optimizer: A federated engine's server optimizer: 'none' (the
      average is the new model, as in the paper) or a name in
      `nmt_task.SERVER_OPTIMIZERS`.
  """

  kind: str
  domain: Optional[str] = None
  mode: str = 'default'
  rounds: int = 5
  change_norm: str = 'l2'
  server_optimizer: str = 'none'

  def __post_init__(self):
    if self.kind not in ENGINE_KINDS:
      raise ValueError(f'Unknown engine kind {self.kind!r}; expected one of '
                       f'{ENGINE_KINDS}.')
    if (self.kind in _ONE_DOMAIN) != (self.domain is not None):
      raise ValueError('A single-domain engine (single, finetuned), and only '
                       'it, names a domain.')
    if self.kind == 'federated':
      if self.mode not in _MODES:
        raise ValueError(f'Unknown mode {self.mode!r}; expected one of '
                         f'{_MODES}.')
      if self.rounds < 1:
        raise ValueError(f'rounds must be positive, got {self.rounds}.')
    if self.change_norm not in dynamic_pulling.CHANGE_NORMS:
      raise ValueError(f'change_norm must be one of '
                       f'{dynamic_pulling.CHANGE_NORMS}, got '
                       f'{self.change_norm!r}.')
    if self.change_norm != 'l2' and self.kind != 'federated':
      raise ValueError('Only a federated engine has a change_norm.')
    if self.server_optimizer not in _SERVER_OPTIMIZERS:
      raise ValueError(f'server_optimizer must be one of '
                       f'{_SERVER_OPTIMIZERS}, got {self.server_optimizer!r}.')
    if self.server_optimizer != 'none' and self.kind != 'federated':
      raise ValueError('Only a federated engine has a server optimizer.')

  @property
  def name(self) -> str:
    """'generic', 'single-php_docs', 'federated-dp_l-r5',
    'federated-dp_l-rms-r5', 'federated-default-momentum-r5', ..."""
    if self.kind in _ONE_DOMAIN:
      return f'{self.kind}-{self.domain}'
    if self.kind == 'federated':
      norm = '' if self.change_norm == 'l2' else f'-{self.change_norm}'
      server = ('' if self.server_optimizer == 'none'
                else f'-{self.server_optimizer}')
      return f'federated-{self.mode}{norm}{server}-r{self.rounds}'
    return self.kind

  @classmethod
  def parse(cls, spec: str, *, default_rounds: int = 5) -> 'EngineSpec':
    """'generic', 'combined', 'chained', 'single:<domain>',
    'finetuned:<domain>' or
    'federated:<mode>[:<rounds>][:<change_norm>][:<server_optimizer>]'
    (`default_rounds`, 'l2' and 'none' if not given), e.g.
    'federated:dp_l:10:rms', 'federated:default:momentum'.

    Raises:
      InputError: naming `--engines` and what is expected.
    """
    kind, *rest = spec.strip().split(':')
    try:
      if kind in _ONE_DOMAIN and len(rest) == 1:
        return cls(kind, domain=rest[0])
      if kind == 'federated' and 1 <= len(rest) <= 4:
        options = {}
        for item in rest[1:]:
          key = ('change_norm' if item in dynamic_pulling.CHANGE_NORMS
                 else 'server_optimizer' if item in _SERVER_OPTIMIZERS
                 else 'rounds')
          if key in options:
            raise ValueError(f'{key} given twice')
          options[key] = int(item) if key == 'rounds' else item
        return cls('federated', mode=rest[0],
                   rounds=options.get('rounds', default_rounds),
                   change_norm=options.get('change_norm', 'l2'),
                   server_optimizer=options.get('server_optimizer', 'none'))
      if not rest and kind in ('generic', 'combined', 'chained'):
        return cls(kind)
    except ValueError as e:
      raise errors.InputError(f'--engines: {spec!r}: {e}') from None
    raise errors.InputError(
        f'--engines: {spec!r} is not an engine; expected generic, combined, '
        f'chained, single:<domain>, finetuned:<domain> or '
        f'federated:<mode>[:<rounds>]'
        f'[:<change_norm>][:<server_optimizer>] with a mode from '
        f'{list(_MODES)}, a change norm from '
        f'{list(dynamic_pulling.CHANGE_NORMS)} and a server optimizer from '
        f'{list(_SERVER_OPTIMIZERS)}.')


class BleuEvaluator:
  """SacreBLEU of model weights on a split of several domains.

  Builds its Keras model and decode function once (lazily: a Keras model
  built before TFF traces a `model_fn` fails inside a `tf.function`
  afterwards; see `experiments.text2sql`).
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
      self._keras_model = seq2seq.build_keras_model(self._config)
      self._decode_fn = seq2seq_decoding.make_decode_fn(
          self._keras_model, max_length=self._config.max_target_length,
          beam_size=self._training.beam_size)
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


def _train_centralized(data: nmt_task.EncodedCorpus, *, epochs: int,
                       initial: Optional[Sequence[np.ndarray]],
                       model: seq2seq.Seq2SeqConfig,
                       training: nmt_task.TrainingConfig,
                       loop: training_lib.LoopConfig,
                       run_dir: str, seed: int) -> tuple[list[np.ndarray],
                                                         list[dict]]:
  """`epochs` epochs on `data` (a one-client FedAvg round per epoch)."""
  process = nmt_task.build_centralized_process(model, training)
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
                     evaluate_fn=None):
  """Rounds of `spec.mode` dynamic pulling from the generic engine."""
  process = nmt_task.build_federated_process(
      model, training, num_clients=len(task.domains), mode=spec.mode,
      change_norm=spec.change_norm, server_optimizer=spec.server_optimizer)
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

  Returns:
    The content of `results.json`: BLEU per scored model and domain, the
    SacreBLEU signature, the rounds' records and the time.
  """
  os.makedirs(run_dir, exist_ok=True)
  start = time.perf_counter()
  seed = loop.seed
  if spec.kind in _FROM_SCRATCH:
    model, training = nmt_task.pretraining_configs(model, training)
  initial = None
  if spec.kind in _FROM_GENERIC:
    if generic_dir is None:
      raise ValueError(f'{spec.name} starts from the generic engine: pass '
                       'generic_dir.')
    initial = load_weights(os.path.join(generic_dir, MODEL_FILE))
  evaluator = BleuEvaluator(task, model, training)
  records = {}
  clients = {}
  if spec.kind in _FROM_SCRATCH:
    domain = task.splits[spec.domain or task.generic_domain]
    weights, records['train'] = _train_centralized(
        domain['train'], epochs=training.pretrain_epochs, initial=None,
        model=model, training=training, loop=loop, run_dir=run_dir,
        seed=seed)
  elif spec.kind == 'finetuned':
    weights, records['train'] = _train_centralized(
        task.splits[spec.domain]['train'], epochs=training.finetune_epochs,
        initial=initial, model=model, training=training, loop=loop,
        run_dir=run_dir, seed=seed)
  elif spec.kind == 'combined':
    weights, records['train'] = _train_centralized(
        nmt_task.union([task.splits[d]['train'] for d in task.domains]),
        epochs=training.finetune_epochs, initial=initial, model=model,
        training=training, loop=loop, run_dir=run_dir, seed=seed)
  elif spec.kind == 'chained':
    weights = initial
    for domain in [d for d in task.domains if d != task.generic_domain]:
      weights, records[domain] = _train_centralized(
          task.splits[domain]['train'], epochs=training.finetune_epochs,
          initial=weights, model=model, training=training, loop=loop,
          run_dir=os.path.join(run_dir, domain), seed=seed)
  else:
    def dev_bleu(model_weights):
      scores, _ = evaluator.bleu(_trainable(model_weights), split='dev')
      values = {f'dev_bleu/{d}': r.score for d, r in scores.items()}
      values['dev_bleu/avg'] = float(np.mean(list(values.values())))
      return values

    weights, clients, records['federated'] = _train_federated(
        task, spec, initial=initial, model=model, training=training,
        loop=loop, run_dir=run_dir, seed=seed, evaluate_fn=dev_bleu)
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
      # The whole engine's cost, over every invocation that trained it:
      # its rounds' times (kept across resumes) and this scoring.
      train_seconds=sum(r.get('round_seconds', 0.0)
                        for rounds in records.values() for r in rounds),
      score_seconds=time.perf_counter() - scoring_start)
  training_lib.write_json(os.path.join(run_dir, RESULTS_FILE), results)
  logging.info('%s: BLEU %s', spec.name, scores)
  return training_lib.to_json_value(results)


def engine_key(spec: EngineSpec, *, data: nmt_task.DataConfig,
               model: seq2seq.Seq2SeqConfig, training: nmt_task.TrainingConfig,
               seed: int, generic_seed: Optional[int] = None,
               corpus: str = nmt_data.NMT_SUBDIR) -> collections.OrderedDict:
  """What defines an engine's result, and nothing else.

  The data (and the folder of domains, `corpus`, when it is not
  `nmt_de_en`), model, seed, optimizer, batch size and decoding; the epochs
  of what it trains (and `steps_per_round`, when set, as it sets how often
  the optimizer restarts); and for an engine that starts from the generic
  engine, the generic engine's key (trained with `generic_seed`, default
  `seed`). So changing, say, `local_steps` starts new federated engines but
  keeps the generic and single-domain ones. A federated engine's
  `max_weight_share` is in its key only when set, and `split_by` only when
  it is not 'tensors' and the mode splits, so the engines trained before
  those options existed keep their keys; so is a `learning_rate_schedule`
  other than 'constant'. An engine trained from scratch (generic or
  single-domain) is keyed by its `nmt_task.pretraining_configs`, so its
  key does not see which `pretrain_*` setting gave its learning rate or
  dropout.
  """
  if spec.kind in _FROM_SCRATCH:
    model, training = nmt_task.pretraining_configs(model, training)
  # A spec without a server optimizer is keyed as before that field existed.
  spec_key = collections.OrderedDict(
      (f.name, getattr(spec, f.name)) for f in dataclasses.fields(spec)
      if f.name != 'server_optimizer' or spec.server_optimizer != 'none')
  key = collections.OrderedDict(
      spec=spec_key, data=data, model=model, seed=seed,
      client_optimizer=training.client_optimizer,
      learning_rate=training.learning_rate, batch_size=training.batch_size,
      beam_size=training.beam_size)
  if corpus != nmt_data.NMT_SUBDIR:
    key['corpus'] = corpus
  if training.learning_rate_schedule != 'constant':
    key['learning_rate_schedule'] = training.learning_rate_schedule
  if spec.kind != 'federated' and training.steps_per_round:
    key['steps_per_round'] = training.steps_per_round
  if spec.kind in _FROM_SCRATCH:
    key['pretrain_epochs'] = training.pretrain_epochs
    return key
  key['generic'] = engine_key(
      EngineSpec('generic'), data=data, model=model, training=training,
      seed=seed if generic_seed is None else generic_seed, corpus=corpus)
  if spec.kind in ('finetuned', 'combined', 'chained'):
    key['finetune_epochs'] = training.finetune_epochs
  else:
    key['local_steps'] = training.local_steps
    if spec.mode == 'controllers':
      key['controller_layers'] = training.controller_layers
    if training.max_weight_share is not None:
      key['max_weight_share'] = training.max_weight_share
    if training.split_by != 'tensors' and spec.mode in _SPLIT_MODES:
      key['split_by'] = training.split_by
  return key


def engine_dir(output_dir: str, spec: EngineSpec, **key_args) -> str:
  """`output_dir/engines/<name>-<hash of engine_key(spec, **key_args)>`."""
  return run_cache.run_dir(os.path.join(output_dir, 'engines'), spec.name,
                           engine_key(spec, **key_args))


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
) -> dict[int, dict[str, dict[str, Any]]]:
  """Runs (or reads back) each engine per seed, and the generic engine once.

  Every engine runs in `output_dir/engines/<name>-<hash>` (`engine_dir`), so
  an interrupted experiment continues where it stopped and a changed
  configuration starts new engines. The first seed also seeds the data
  subsets, the tokenizer (trained once, in `output_dir/tokenizer`) and the
  one generic engine every other engine of every seed starts from, as in
  the paper; the other seeds vary what the engines do from there (batch
  order, dropout, dynamic pulling's random draws). The report is rewritten
  after every engine trained, so it always shows the engines finished. A
  generic engine whose results were restored without its weights
  (`run_cache.restore`) is trained again only while an engine that starts
  from it is still to train.

  Args:
    engines: The engines to train.
    data_dir: `--data_dir` (`nmt.find_nmt_dir`).
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
  training_lib.prepare_run_dir(output_dir, collections.OrderedDict(
      experiment=experiment))
  task = nmt_task.prepare_task(
      data, data_dir=folder, seed=first,
      tokenizer_dir=os.path.join(output_dir, TOKENIZER_DIR))
  model = nmt_task.model_config(model, task, data)
  generic = EngineSpec('generic')
  needed = []
  for spec in engines:
    if spec.kind in _ONE_DOMAIN and spec.domain not in data.domains:
      raise errors.InputError(
          f'--engines: {spec.kind}:{spec.domain}: not one of the domains '
          f'{list(data.domains)}.')
    # The generic domain's single-domain engine is the generic engine.
    if spec.kind == 'single' and spec.domain == data.generic_domain:
      spec = generic
    if spec not in needed:
      needed.append(spec)
  if any(e.kind in _FROM_GENERIC for e in needed) and (
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
                          run_dir=run_dir, generic_dir=generic_dir)
      else:
        logging.info('%s, seed %d: done before, read from %s', spec.name,
                     seed, run_dir)
      if spec == generic:
        generic_dir = run_dir
      done['run_dir'] = os.path.relpath(run_dir, output_dir)
      results[spec.name] = done
      if trained:
        nmt_results.write_report(runs, output_dir, task=task, data=data,
                                 command=command)
  if not any(runs.values()):
    raise errors.InputError(
        f'--report_only: no engine of --engines has finished in {output_dir}.')
  nmt_results.write_report(runs, output_dir, task=task, data=data,
                           command=command)
  return runs
