"""Federated mixed-domain NMT with dynamic pulling: engines and their BLEU.

Reproduces the protocol of Passban, Roosta, Gupta, Chadha and Chung,
"Training Mixed-Domain Translation Models via Federated Learning", NAACL 2022
(`shared/docs/dynamic_pulling.md`): German→English domains
(`tff_nlp.data.nmt`) are clients, a Transformer encoder-decoder
(`tff_nlp.models.seq2seq`) shares one subword vocabulary for both languages,
and every engine is scored with SacreBLEU on every domain's test set.

An *engine* is one trained model (or, federated, a server model and one
model per client). `run_engine` trains one; its kinds:

*   `generic`: trained from scratch on the generic domain (news) alone; it
    initialises every other engine except the single-domain ones (the paper's
    generic engine);
*   `single`: trained from scratch on one domain (the paper's Table 2); the
    single-domain engine of the generic domain is the generic engine;
*   `combined`: the generic engine fine-tuned on the union of all domains'
    training data (centralised data combination, Table 3);
*   `chained`: the generic engine fine-tuned on each other domain in turn,
    in the order of `DataConfig.domains` (chained fine-tuning, Table 3);
*   `federated`: the generic engine given to every client; rounds of local
    fine-tuning (`local_steps` steps per client) and aggregation weighted by
    data size, with the dynamic-pulling `mode` of
    `tff_nlp.algorithms.dynamic_pulling` deciding which tensors each client
    sends (Tables 4 and 6); the server model and every client's model (its
    weights after its last local fine-tuning) are scored.

Centralised training runs through the same resumable loop as the federated
one (`tff_nlp.training.run_training`): a one-client FedAvg whose round is
one epoch, as in `experiments.text2sql`. The subword vocabulary is trained on
the training text of every domain, both languages (the paper's joint BPE);
it is a stand-in for a public vocabulary and never enters a federated
computation.
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

from tff_nlp import algorithms
from tff_nlp import errors
from tff_nlp import plots
from tff_nlp import training as training_lib
from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.algorithms import tensor_selection
from tff_nlp.data import nmt
from tff_nlp.experiments import seq2seq_examples
from tff_nlp.metrics import bleu
from tff_nlp.metrics import nmt_report
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_decoding
from tff_nlp.models import subword_tokenizer

ENGINE_KINDS = ('generic', 'single', 'combined', 'chained', 'federated')
TOKENIZER_DIR = 'tokenizer'
MODEL_FILE = 'model.npz'
RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
DEV_PLOT_FILE = 'dev_bleu.png'
# What DEV_PLOT_FILE plots (and results.json's `dev_bleu_by_round` holds):
# the flat key 'dev_bleu/avg' of each round's 'eval' record.
DEV_PLOT_METRIC = 'eval/dev_bleu/avg'
PREDICTIONS_DIR = 'predictions'
SERVER = 'server'
_MODES = tuple(m.value for m in tensor_selection.Mode)


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Which sentence pairs, and how they become token ids.

  Attributes:
    domains: Domain (client) names of the folder of domains, the generic
      one included.
    generic_domain: The domain the generic engine is trained on.
    vocabulary_size: Upper bound of the joint subword vocabulary.
    max_length: Source and target tokens; longer sentences are truncated
      (counted in the results).
    max_train_examples: Training pairs per domain, a seeded subset; 0: all.
    max_eval_examples: Dev and test pairs per domain; 0: all.
  """

  domains: tuple[str, ...] = nmt.DOMAINS
  generic_domain: str = 'wmt_news'
  vocabulary_size: int = 8000
  max_length: int = 64
  max_train_examples: int = 0
  max_eval_examples: int = 0

  def __post_init__(self):
    if self.generic_domain not in self.domains:
      raise ValueError(f'generic_domain {self.generic_domain!r} is not one '
                       f'of the domains {list(self.domains)}.')
    if len(set(self.domains)) != len(self.domains):
      raise ValueError(f'domains repeat: {list(self.domains)}.')
    for name in ('vocabulary_size', 'max_length'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)}.')
    for name in ('max_train_examples', 'max_eval_examples'):
      if getattr(self, name) < 0:
        raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}.')


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """How engines are trained and decoded.

  Attributes:
    client_optimizer: A key of `algorithms.CLIENT_OPTIMIZERS`.
    learning_rate: Learning rate of every training step.
    batch_size: Sentence pairs per batch.
    pretrain_epochs: Epochs of the generic and single-domain engines.
    finetune_epochs: Epochs of data combination, and of each domain in
      chained fine-tuning.
    local_steps: Batches per client per federated round (the paper: 10K).
    beam_size: 1 for greedy decoding, else beam search.
    decode_batch_size: Sentences decoded at once.
    controller_layers: The encoder and decoder layers the `controllers`
      baseline exchanges (the paper's 6E6D (0-3): layers 0 and 3).
  """

  client_optimizer: str = 'adam'
  learning_rate: float = 1e-3
  batch_size: int = 32
  pretrain_epochs: int = 10
  finetune_epochs: int = 1
  local_steps: int = 100
  beam_size: int = 1
  decode_batch_size: int = 64
  controller_layers: tuple[int, ...] = (0, 3)

  def __post_init__(self):
    if self.client_optimizer not in algorithms.CLIENT_OPTIMIZERS:
      raise ValueError(
          f'Unknown client_optimizer {self.client_optimizer!r}; expected one '
          f'of {sorted(algorithms.CLIENT_OPTIMIZERS)}.')
    for name in ('batch_size', 'pretrain_epochs', 'finetune_epochs',
                 'local_steps', 'beam_size', 'decode_batch_size'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)}.')


@dataclasses.dataclass(frozen=True)
class EngineSpec:
  """One engine to train.

  Attributes:
    kind: One of `ENGINE_KINDS`.
    domain: The domain of a `single` engine.
    mode: The dynamic-pulling mode of a `federated` engine
      (`tensor_selection.Mode`).
    rounds: Federated rounds.
    change_norm: How a federated engine's clients measure a tensor's
      change: 'l2' (the paper) or 'rms' (per parameter); see
      `dynamic_pulling`.
  """

  kind: str
  domain: Optional[str] = None
  mode: str = 'default'
  rounds: int = 5
  change_norm: str = 'l2'

  def __post_init__(self):
    if self.kind not in ENGINE_KINDS:
      raise ValueError(f'Unknown engine kind {self.kind!r}; expected one of '
                       f'{ENGINE_KINDS}.')
    if (self.kind == 'single') != (self.domain is not None):
      raise ValueError('A single-domain engine, and only it, names a domain.')
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

  @property
  def name(self) -> str:
    """'generic', 'single-php_docs', 'federated-dp_l-r5',
    'federated-dp_l-rms-r5', ..."""
    if self.kind == 'single':
      return f'single-{self.domain}'
    if self.kind == 'federated':
      norm = '' if self.change_norm == 'l2' else f'-{self.change_norm}'
      return f'federated-{self.mode}{norm}-r{self.rounds}'
    return self.kind

  @classmethod
  def parse(cls, spec: str, *, default_rounds: int = 5) -> 'EngineSpec':
    """'generic', 'combined', 'chained', 'single:<domain>' or
    'federated:<mode>[:<rounds>][:<change_norm>]' (`default_rounds` and
    'l2' if not given), e.g. 'federated:dp_l:10:rms'.

    Raises:
      InputError: naming `--engines` and what is expected.
    """
    kind, *rest = spec.strip().split(':')
    try:
      if kind == 'single' and len(rest) == 1:
        return cls('single', domain=rest[0])
      if kind == 'federated' and 1 <= len(rest) <= 3:
        options = {}
        for item in rest[1:]:
          key = ('change_norm' if item in dynamic_pulling.CHANGE_NORMS
                 else 'rounds')
          if key in options:
            raise ValueError(f'{key} given twice')
          options[key] = item if key == 'change_norm' else int(item)
        return cls('federated', mode=rest[0],
                   rounds=options.get('rounds', default_rounds),
                   change_norm=options.get('change_norm', 'l2'))
      if not rest and kind in ('generic', 'combined', 'chained'):
        return cls(kind)
    except ValueError as e:
      raise errors.InputError(f'--engines: {spec!r}: {e}') from None
    raise errors.InputError(
        f'--engines: {spec!r} is not an engine; expected generic, combined, '
        f'chained, single:<domain> or federated:<mode>[:<rounds>]'
        f'[:<change_norm>] with a mode from {list(_MODES)} and a change '
        f'norm from {list(dynamic_pulling.CHANGE_NORMS)}.')


@dataclasses.dataclass
class EncodedCorpus:
  """One split of one domain: its text and its packed token ids."""

  corpus: nmt.ParallelCorpus
  encoded: seq2seq_examples.EncodedPairs

  @property
  def x(self):
    return self.encoded.x

  @property
  def y(self):
    return self.encoded.y

  def __len__(self) -> int:
    return len(self.corpus)


@dataclasses.dataclass
class NmtTask:
  """The domains' data, tokenized, and the joint tokenizer."""

  domains: tuple[str, ...]
  tokenizer: subword_tokenizer.SubwordTokenizer
  splits: dict[str, dict[str, EncodedCorpus]]  # domain -> split -> data

  def truncated(self) -> dict[str, dict[str, dict[str, int]]]:
    return {d: {s: {'sources': v.encoded.truncated_sources,
                    'targets': v.encoded.truncated_targets}
                for s, v in splits.items()}
            for d, splits in self.splits.items()}


def select_domains(data_dir: Optional[str],
                   requested: Sequence[str] = ()) -> tuple[str, ...]:
  """The domains (clients) of a run: `requested`, or every domain found.

  Args:
    data_dir: The `shared/data` folder or a folder of domains; None finds
      it (`nmt.find_nmt_dir`).
    requested: Domain names; empty for every domain folder of `data_dir`,
      in `nmt.list_domains` order (the paper's five first, then any other
      sorted by name).

  Returns:
    The domains. With `requested`, a domain folder found but not requested
    that is not one of the paper's five (a user's own) is named in a
    warning, so an added domain is never silently left out.

  Raises:
    InputError: If the folder holds no domain (`nmt.find_nmt_dir`).
  """
  folder = nmt.find_nmt_dir(data_dir)
  found = nmt.list_domains(folder)
  if not requested:
    logging.info('Domains of %s: %s', folder, ', '.join(found))
    return found
  unused = [d for d in found if d not in requested and d not in nmt.DOMAINS]
  if unused:
    logging.warning(
        'Domain folders of %s not used, as --domains does not list them: '
        '%s. Leave --domains unset to use every domain folder.', folder,
        ', '.join(unused))
  return tuple(requested)


def prepare_task(config: DataConfig, *, data_dir: Optional[str], seed: int,
                 tokenizer_dir: str) -> NmtTask:
  """Loads, subsets and tokenizes the domains.

  The tokenizer is read from `tokenizer_dir` when it holds one, else trained
  on both sides of every domain's training pairs and written there.

  Args:
    config: The data configuration.
    data_dir: The `shared/data` folder or a folder of domains; None finds it.
    seed: Seed of the subsets.
    tokenizer_dir: Where the tokenizer is kept (shared by the engines of an
      experiment, so that their ids agree).

  Returns:
    The `NmtTask`.
  """
  folder = nmt.find_nmt_dir(data_dir)
  corpora = nmt.load_domains(
      folder, config.domains,
      max_train=config.max_train_examples or None,
      max_eval=config.max_eval_examples or None, seed=seed)
  tokenizer = subword_tokenizer.load_or_train(
      tokenizer_dir,
      lambda: [t for d in config.domains
               for side in (corpora[d]['train'].sources,
                            corpora[d]['train'].targets) for t in side],
      config.vocabulary_size)
  splits = {
      d: {s: EncodedCorpus(c, seq2seq_examples.encode_pairs(
          tokenizer, c.sources, c.targets, source_length=config.max_length,
          target_length=config.max_length))
          for s, c in corpora[d].items()}
      for d in config.domains}
  return NmtTask(tuple(config.domains), tokenizer, splits)


def model_config(base: seq2seq.Seq2SeqConfig, task: NmtTask,
                 data: DataConfig) -> seq2seq.Seq2SeqConfig:
  """`base` with the task's vocabulary and the data's lengths."""
  return dataclasses.replace(
      base, vocabulary_size=task.tokenizer.vocabulary_size(),
      max_source_length=data.max_length, max_target_length=data.max_length)


def _union(parts: Sequence[EncodedCorpus]) -> EncodedCorpus:
  return EncodedCorpus(
      nmt.ParallelCorpus(
          tuple(s for p in parts for s in p.corpus.sources),
          tuple(t for p in parts for t in p.corpus.targets)),
      seq2seq_examples.EncodedPairs(
          x=collections.OrderedDict(
              (k, np.concatenate([p.x[k] for p in parts]))
              for k in parts[0].x),
          y=np.concatenate([p.y for p in parts]),
          truncated_sources=sum(p.encoded.truncated_sources for p in parts),
          truncated_targets=sum(p.encoded.truncated_targets for p in parts)))


class BleuEvaluator:
  """SacreBLEU of model weights on a split of several domains.

  Builds its Keras model and decode function once (lazily: a Keras model
  built before TFF traces a `model_fn` fails inside a `tf.function`
  afterwards; see `experiments.text2sql`).
  """

  def __init__(self, task: NmtTask, config: seq2seq.Seq2SeqConfig,
               training: TrainingConfig):
    self._task = task
    self._config = config
    self._training = training
    self._keras_model = self._decode_fn = None

  def translate(self, weights: Sequence[np.ndarray],
                data: EncodedCorpus) -> list[str]:
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


def _centralized_process(model: seq2seq.Seq2SeqConfig,
                         training: TrainingConfig):
  optimizer = algorithms.CLIENT_OPTIMIZERS[training.client_optimizer]
  return algorithms.build_fl_process(
      seq2seq.build_model_fn(model), algorithm='fedavg',
      weighting='num_examples',
      client_optimizer_fn=optimizer(learning_rate=training.learning_rate),
      with_client_config=True)


def _train_centralized(data: EncodedCorpus, *, epochs: int,
                       initial: Optional[Sequence[np.ndarray]],
                       model: seq2seq.Seq2SeqConfig,
                       training: TrainingConfig, loop: training_lib.LoopConfig,
                       run_dir: str, seed: int) -> tuple[list[np.ndarray],
                                                         list[dict]]:
  """`epochs` epochs on `data` (a one-client FedAvg round per epoch)."""
  process = _centralized_process(model, training)
  initial_weights = None
  if initial is not None:
    template = process.get_model_weights(process.initialize())
    initial_weights = template._replace(trainable=list(initial))

  def client_data(round_num, client_ids):
    del client_ids
    return [algorithms.with_client_config(
        seq2seq_examples.train_dataset(
            data, batch_size=training.batch_size,
            shuffle_seed=(seed, round_num)),
        learning_rate=training.learning_rate, num_epochs=1)]

  run = training_lib.run_training(
      process, client_data_fn=client_data, num_clients=1,
      config=dataclasses.replace(loop, rounds=epochs, clients_per_round=0,
                                 eval_every=0),
      output_dir=run_dir, description=os.path.basename(run_dir),
      initial_model_weights=initial_weights)
  return _trainable(process.get_model_weights(run.state)), run.records


def _federated_client_data(task: NmtTask, training: TrainingConfig,
                           seed: int):
  """Each client's `local_steps` batches of a round, seeded by round."""
  domains = task.domains

  def client_data(round_num, client_ids):
    data = []
    for i in client_ids:
      train = task.splits[domains[i]]['train']
      batches = seq2seq_examples.train_dataset(
          train, batch_size=training.batch_size,
          shuffle_seed=(seed, round_num, i)).repeat().take(
              training.local_steps)
      data.append(dynamic_pulling.client_data(
          algorithms.with_client_config(
              batches, learning_rate=training.learning_rate, num_epochs=1),
          seed=(seed, round_num * len(domains) + i),
          data_size=float(len(train))))
    return data

  return client_data


def _train_federated(task: NmtTask, spec: EngineSpec, *,
                     initial: Sequence[np.ndarray],
                     model: seq2seq.Seq2SeqConfig, training: TrainingConfig,
                     loop: training_lib.LoopConfig, run_dir: str, seed: int,
                     evaluate_fn=None):
  """Rounds of `spec.mode` dynamic pulling from the generic engine."""
  layout = seq2seq.tensor_layout(model)
  optimizer = algorithms.CLIENT_OPTIMIZERS[training.client_optimizer]
  process = dynamic_pulling.build_simulation_process(
      seq2seq.build_model_fn(model), num_clients=len(task.domains),
      mode=spec.mode, tensor_groups=[t.group for t in layout],
      exchanged=seq2seq.controller_mask(layout, layers=training.controller_layers)
      if spec.mode == 'controllers'
      else None,
      client_optimizer_fn=optimizer(learning_rate=training.learning_rate),
      with_client_config=True, change_norm=spec.change_norm)
  template = process.get_model_weights(process.initialize())
  run = training_lib.run_training(
      process,
      client_data_fn=_federated_client_data(task, training, seed),
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
    task: NmtTask,
    model: seq2seq.Seq2SeqConfig,
    training: TrainingConfig,
    loop: training_lib.LoopConfig,
    run_dir: str,
    generic_dir: Optional[str] = None,
    generic_domain: str = 'wmt_news',
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
    generic_domain: The domain the generic engine trains on.

  Returns:
    The content of `results.json`: BLEU per scored model and domain, the
    SacreBLEU signature, the rounds' records and the time.
  """
  os.makedirs(run_dir, exist_ok=True)
  start = time.perf_counter()
  seed = loop.seed
  initial = None
  if spec.kind in ('combined', 'chained', 'federated'):
    if generic_dir is None:
      raise ValueError(f'{spec.name} starts from the generic engine: pass '
                       'generic_dir.')
    initial = load_weights(os.path.join(generic_dir, MODEL_FILE))
  evaluator = BleuEvaluator(task, model, training)
  records = {}
  clients = {}
  if spec.kind in ('generic', 'single'):
    domain = task.splits[spec.domain or generic_domain]
    weights, records['train'] = _train_centralized(
        domain['train'], epochs=training.pretrain_epochs, initial=None,
        model=model, training=training, loop=loop, run_dir=run_dir,
        seed=seed)
  elif spec.kind == 'combined':
    weights, records['train'] = _train_centralized(
        _union([task.splits[d]['train'] for d in task.domains]),
        epochs=training.finetune_epochs, initial=initial, model=model,
        training=training, loop=loop, run_dir=run_dir, seed=seed)
  elif spec.kind == 'chained':
    weights = initial
    for domain in [d for d in task.domains if d != generic_domain]:
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
    scored[f'client {domain}'] = client_weights
  scores, signature = {}, None
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
      records=records, seconds=time.perf_counter() - start)
  training_lib.write_json(os.path.join(run_dir, RESULTS_FILE), results)
  logging.info('%s: BLEU %s', spec.name, scores)
  return training_lib.to_json_value(results)


def engine_key(spec: EngineSpec, *, data: DataConfig,
               model: seq2seq.Seq2SeqConfig, training: TrainingConfig,
               seed: int) -> collections.OrderedDict:
  """What defines an engine's result, and nothing else.

  The data, model, seed, optimizer, batch size and decoding; the epochs of
  what it trains; and for an engine that starts from the generic engine, the
  generic engine's key. So changing, say, `local_steps` starts new
  federated engines but keeps the generic and single-domain ones.
  """
  key = collections.OrderedDict(
      spec=spec, data=data, model=model, seed=seed,
      client_optimizer=training.client_optimizer,
      learning_rate=training.learning_rate, batch_size=training.batch_size,
      beam_size=training.beam_size)
  if spec.kind in ('generic', 'single'):
    key['pretrain_epochs'] = training.pretrain_epochs
    return key
  key['generic'] = engine_key(EngineSpec('generic'), data=data, model=model,
                              training=training, seed=seed)
  if spec.kind in ('combined', 'chained'):
    key['finetune_epochs'] = training.finetune_epochs
  else:
    key['local_steps'] = training.local_steps
    if spec.mode == 'controllers':
      key['controller_layers'] = training.controller_layers
  return key


def engine_dir(output_dir: str, spec: EngineSpec, *, data: DataConfig,
               model: seq2seq.Seq2SeqConfig, training: TrainingConfig,
               seed: int) -> str:
  """`output_dir/engines/<name>-<hash of engine_key>`."""
  digest = training_lib.config_digest(engine_key(
      spec, data=data, model=model, training=training, seed=seed))
  return os.path.join(output_dir, 'engines', f'{spec.name}-{digest}')


def finished(run_dir: str) -> Optional[dict[str, Any]]:
  """An engine's `results.json` if it finished, else None."""
  path = os.path.join(run_dir, RESULTS_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def run_nmt(
    *,
    engines: Sequence[EngineSpec],
    data_dir: Optional[str],
    output_dir: str,
    data: DataConfig,
    model: seq2seq.Seq2SeqConfig,
    training: TrainingConfig,
    loop: training_lib.LoopConfig,
    command: str = '',
) -> dict[str, dict[str, Any]]:
  """Runs (or reads back) each engine and the generic engine they need.

  Every engine runs in `output_dir/engines/<name>-<hash>` (`engine_dir`), so
  an interrupted experiment continues where it stopped and a changed
  configuration starts new engines. The tokenizer is trained once, in
  `output_dir/tokenizer` (all engines of one data configuration share it).

  Returns:
    `{engine name: its results}`, the generic engine first when needed.
  """
  if not engines:
    raise errors.InputError('--engines: no engine given.')
  training_lib.prepare_run_dir(output_dir, collections.OrderedDict(
      experiment=collections.OrderedDict(data=data, seed=loop.seed)))
  task = prepare_task(data, data_dir=data_dir, seed=loop.seed,
                      tokenizer_dir=os.path.join(output_dir, TOKENIZER_DIR))
  model = model_config(model, task, data)
  generic = EngineSpec('generic')
  needed = []
  for spec in engines:
    if spec.kind == 'single' and spec.domain not in data.domains:
      raise errors.InputError(
          f'--engines: single:{spec.domain}: not one of the domains '
          f'{list(data.domains)}.')
    # The generic domain's single-domain engine is the generic engine.
    if spec.kind == 'single' and spec.domain == data.generic_domain:
      spec = generic
    if spec not in needed:
      needed.append(spec)
  if any(e.kind in ('combined', 'chained', 'federated') for e in needed) and (
      generic not in needed):
    needed.insert(0, generic)
  needed = [generic] * (generic in needed) + [e for e in needed
                                              if e != generic]
  results = collections.OrderedDict()
  dirs = {}
  for spec in needed:
    run_dir = engine_dir(output_dir, spec, data=data, model=model,
                         training=training, seed=loop.seed)
    dirs[spec] = run_dir
    done = finished(run_dir)
    if done is None:
      logging.info('%s: training in %s', spec.name, run_dir)
      done = run_engine(spec, task=task, model=model, training=training,
                        loop=loop, run_dir=run_dir,
                        generic_dir=dirs.get(generic),
                        generic_domain=data.generic_domain)
    else:
      logging.info('%s: done before, read from %s', spec.name, run_dir)
    done['run_dir'] = os.path.relpath(run_dir, output_dir)
    results[spec.name] = done
  write_report(results, output_dir, data=data, command=command,
               truncated=task.truncated())
  return results


def write_report(results: Mapping[str, Mapping[str, Any]], output_dir: str, *,
                 data: DataConfig, command: str = '',
                 truncated: Optional[Mapping[str, Any]] = None) -> str:
  """Writes `results.md` (the paper's tables), `results.json` and the
  federated engines' merged-dev BLEU by round (`dev_bleu.png`; its points
  are `results.json`'s `dev_bleu_by_round`).

  Returns:
    The Markdown tables.
  """
  tables = nmt_report.nmt_tables_markdown(
      results, domains=data.domains, generic_domain=data.generic_domain)
  signatures = sorted({r['sacrebleu'] for r in results.values()
                       if r.get('sacrebleu')})
  federated = {name: r['records']['federated'] for name, r in results.items()
               if r['spec']['kind'] == 'federated'}
  figures = []
  dev_bleu = collections.OrderedDict(
      (name, plots.metric_series(records, DEV_PLOT_METRIC))
      for name, records in federated.items())
  if any(rounds for rounds, _ in dev_bleu.values()):
    plots.plot_metric_by_round(
        dev_bleu, os.path.join(output_dir, DEV_PLOT_FILE),
        y_label='dev BLEU, mean over domains', title='Federated server model')
    figures.append(DEV_PLOT_FILE)
  elif federated:
    logging.warning('No federated engine recorded %s (--eval_every?): %s is '
                    'not written.', DEV_PLOT_METRIC, DEV_PLOT_FILE)
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE),
                          collections.OrderedDict(
                              command=command, data=data,
                              sacrebleu=signatures, truncated=truncated,
                              engines={n: {k: v for k, v in r.items()
                                           if k != 'records'}
                                       for n, r in results.items()},
                              figures=figures,
                              dev_bleu_by_round=collections.OrderedDict(
                                  (name, collections.OrderedDict(
                                      rounds=rounds, values=values))
                                  for name, (rounds, values)
                                  in dev_bleu.items())))
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write('# Federated mixed-domain NMT: BLEU (SacreBLEU, detokenized)\n\n')
    if command:
      f.write(f'Command:\n\n```sh\n{command}\n```\n\n')
    f.write(f'SacreBLEU signature: {", ".join(signatures) or "–"}. Test '
            'sentences per domain: ' + ', '.join(
                f'{d} {n}' for d, n in next(iter(results.values()))[
                    'test_sentences'].items()) + '.\n\n' + tables + '\n')
    if figures:
      f.write('\nFigures: ' + ', '.join(f'`{p}`' for p in figures) + '.\n')
  print(tables)
  print(f'\nSacreBLEU signature: {", ".join(signatures) or "–"}')
  print(f'Written to {os.path.join(output_dir, TABLE_FILE)}.')
  return tables
