"""The federated mixed-domain NMT task: data, processes and client data.

The task of Passban, Roosta, Gupta, Chadha and Chung, "Training Mixed-Domain
Translation Models via Federated Learning", NAACL 2022
(`shared/docs/dynamic_pulling.md`): German→English domains
(`tff_nlp.data.nmt`) are clients, and a Transformer encoder-decoder
(`tff_nlp.models.seq2seq`) shares one subword vocabulary for both languages.

`prepare_task` loads, subsets and tokenizes the domains; `model_config`
sizes a model to them. Centralised training is a one-client FedAvg whose
round is one epoch (`build_centralized_process`,
`centralized_client_data_fn`); federated training is dynamic pulling
(`build_federated_process`, `federated_client_data_fn`). The engines built
from them, and their BLEU, are `apps.nmt.experiment`'s. The subword
vocabulary is trained on the training text of every domain, both languages
(the paper's joint BPE); it is a stand-in for a public vocabulary and never
enters a federated computation.
"""

import collections
from collections.abc import Callable, Sequence
import dataclasses
from typing import Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms

from tff_nlp import templates
from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.templates import stateful_clients
from tff_nlp.algorithms import tensor_selection
from tff_nlp.aggregators import weight_cap
from tff_nlp.data import nmt
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_layout
from tff_nlp.models import seq2seq_model_fn
from tff_nlp.models import subword_tokenizer
from apps.common import seq2seq_examples



@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Which sentence pairs, and how they become token ids.

  Attributes:
    domains: Domain (client) names of the folder of domains.
    generic_domain: The domain folder the generic engine is trained on:
      one of `domains` (the paper's setting on `nmt_de_en`: news is both
      the generic corpus and a client) or a folder that is no client
      (`nmt_de_en_large`'s `generic/`).
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
    if not self.domains:
      raise ValueError('domains: no domain (client) given.')
    if not self.generic_domain:
      raise ValueError('generic_domain: empty; name the domain folder of '
                       'the generic engine.')
    if len(set(self.domains)) != len(self.domains):
      raise ValueError(f'domains repeat: {list(self.domains)}.')
    for name in ('vocabulary_size', 'max_length'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)}.')
    for name in ('max_train_examples', 'max_eval_examples'):
      if getattr(self, name) < 0:
        raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}.')


LEARNING_RATE_SCHEDULES = ('constant', 'linear')
# Server optimizers a federated engine may step with instead of taking the
# average (`dynamic_pulling`'s `server_optimizer_fn`; the paper takes the
# average). 'momentum' is FedAvgM (Hsu, Qi and Brown 2019) with its usual
# server learning rate 1 and momentum 0.9: a round's step is the average's
# pull plus 0.9 of the last step, so consistent progress compounds when a
# budget allows only a few rounds.
SERVER_OPTIMIZERS = {
    'momentum': lambda: tff.learning.optimizers.build_sgdm(
        learning_rate=1.0, momentum=0.9),
}


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """How engines are trained and decoded.

  Attributes:
    client_optimizer: A key of `templates.CLIENT_OPTIMIZERS`.
    learning_rate: Learning rate of the training steps (of the first round
      with a decaying `learning_rate_schedule`).
    learning_rate_schedule: 'constant', or 'linear': round r of an engine's
      R rounds trains at learning_rate · (R − r + 1) / R, a linear decay
      in steps of rounds down to learning_rate / R in the last round
      (`round_learning_rate`). Rounds, not steps, because a round's client
      optimizer starts afresh and takes one learning rate (its client
      config).
    batch_size: Sentence pairs per batch.
    pretrain_epochs: Epochs of the generic and single-domain engines.
    finetune_epochs: Epochs of data combination, and of each domain in
      chained fine-tuning.
    local_steps: Batches per client per federated round (the paper: 10K).
    beam_size: 1 for greedy decoding, else beam search.
    decode_batch_size: Sentences decoded at once.
    controller_layers: The encoder and decoder layers the `controllers`
      baseline exchanges (the paper's 6E6D (0-3): layers 0 and 3).
    max_weight_share: If set, a cap c in (0, 1] on any domain's share of a
      federated round's weight (its training-set size), the excess going to
      the others in proportion to their sizes (`weight_cap`); None: no cap.
      Centralised engines have no round weights and ignore it.
    split_by: What dynamic pulling's median counts within a group:
      'tensors' (the paper's text: half the tensors) or 'parameters' (half
      the parameters, as the paper's Table 6 reports;
      `tensor_selection`). Centralised engines ignore it.
    steps_per_round: Centralised engines: 0 makes a round (a checkpoint)
      of each epoch; S > 0 cuts the same stream of epochs into rounds of S
      batches, so a long epoch is checkpointed (and resumable) every S
      steps. Each round starts a fresh optimizer state (a round is a
      one-client FedAvg round), so S also sets how often Adam's moments
      restart. Federated engines ignore it.
    score_client_models: Whether a federated engine's client models are
      scored on every test set beside its server model (six models' worth
      of decoding with five clients); False scores the server only.
    pretrain_learning_rate: If set, the learning rate of the engines
      trained from scratch (generic and single-domain) in place of
      `learning_rate`; None: `learning_rate`. From scratch and from the
      generic engine are different problems: a rate that fine-tunes well
      can be too high for a randomly initialised Transformer without
      warm-up (`pretraining_configs`).
    pretrain_learning_rate_schedule: If set, their schedule in place of
      `learning_rate_schedule`.
    pretrain_dropout: If set, their model's dropout in place of the
      model's (fine-tuning sees each pair about once, where dropout only
      slows learning; pre-training sees the generic corpus for epochs).
  """

  client_optimizer: str = 'adam'
  learning_rate: float = 1e-3
  learning_rate_schedule: str = 'constant'
  batch_size: int = 32
  pretrain_epochs: int = 10
  finetune_epochs: int = 1
  local_steps: int = 100
  beam_size: int = 1
  decode_batch_size: int = 64
  controller_layers: tuple[int, ...] = (0, 3)
  max_weight_share: Optional[float] = None
  split_by: str = 'tensors'
  steps_per_round: int = 0
  score_client_models: bool = True
  pretrain_learning_rate: Optional[float] = None
  pretrain_learning_rate_schedule: Optional[str] = None
  pretrain_dropout: Optional[float] = None

  def __post_init__(self):
    if self.client_optimizer not in templates.CLIENT_OPTIMIZERS:
      raise ValueError(
          f'Unknown client_optimizer {self.client_optimizer!r}; expected one '
          f'of {sorted(templates.CLIENT_OPTIMIZERS)}.')
    for name in ('batch_size', 'pretrain_epochs', 'finetune_epochs',
                 'local_steps', 'beam_size', 'decode_batch_size'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name} must be positive, got '
                         f'{getattr(self, name)}.')
    for name in ('learning_rate_schedule', 'pretrain_learning_rate_schedule'):
      value = getattr(self, name)
      if value is not None and value not in LEARNING_RATE_SCHEDULES:
        raise ValueError(f'Unknown {name} {value!r}; expected one of '
                         f'{list(LEARNING_RATE_SCHEDULES)}.')
    if self.learning_rate_schedule is None:
      raise ValueError('learning_rate_schedule: None; expected one of '
                       f'{list(LEARNING_RATE_SCHEDULES)}.')
    for name in ('learning_rate', 'pretrain_learning_rate'):
      value = getattr(self, name)
      if value is not None and not value > 0:
        raise ValueError(f'{name} must be positive, got {value}.')
    if self.pretrain_dropout is not None and not (
        0 <= self.pretrain_dropout < 1):
      raise ValueError('pretrain_dropout must be in [0, 1), got '
                       f'{self.pretrain_dropout}.')
    if self.steps_per_round < 0:
      raise ValueError(f'steps_per_round must be >= 0, got '
                       f'{self.steps_per_round}.')
    if self.max_weight_share is not None:
      weight_cap.check_max_share(self.max_weight_share)
    tensor_selection.check_split_by(self.split_by)


def pretraining_configs(
    model: seq2seq.Seq2SeqConfig, training: TrainingConfig
) -> tuple[seq2seq.Seq2SeqConfig, TrainingConfig]:
  """The model and training of the engines trained from scratch.

  `training`'s `pretrain_*` settings, those set, in place of the ones they
  override (and cleared, so the result is what a from-scratch engine's key
  holds); e.g. `pretrain_learning_rate=1e-3` with `learning_rate=2e-3`
  gives a training of `learning_rate=1e-3`.
  """
  if training.pretrain_dropout is not None:
    model = dataclasses.replace(model, dropout=training.pretrain_dropout)
  overrides = {}
  if training.pretrain_learning_rate is not None:
    overrides['learning_rate'] = training.pretrain_learning_rate
  if training.pretrain_learning_rate_schedule is not None:
    overrides['learning_rate_schedule'] = (
        training.pretrain_learning_rate_schedule)
  training = dataclasses.replace(
      training, pretrain_learning_rate=None,
      pretrain_learning_rate_schedule=None, pretrain_dropout=None,
      **overrides)
  return model, training


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
  """The domains' data, tokenized, and the joint tokenizer.

  Attributes:
    domains: The clients, in order (client `i` is `domains[i]`).
    tokenizer: The joint subword tokenizer.
    splits: domain -> split -> data, for every client and the generic
      domain.
    generic_domain: The generic engine's corpus (a client or not).
    folder: The folder of domains the data was read from.
  """

  domains: tuple[str, ...]
  tokenizer: subword_tokenizer.SubwordTokenizer
  splits: dict[str, dict[str, EncodedCorpus]]
  generic_domain: str
  folder: str = ''

  def client_weights(self) -> collections.OrderedDict:
    """Each client's training pairs and share of them (a federated round's
    weight before any cap): `{domain: {'examples': n_k, 'share': n_k/n}}`."""
    sizes = [len(self.splits[d]['train']) for d in self.domains]
    return collections.OrderedDict(
        (d, collections.OrderedDict(examples=n, share=n / sum(sizes)))
        for d, n in zip(self.domains, sizes))

  def truncated(self) -> dict[str, dict[str, dict[str, int]]]:
    return {d: {s: {'sources': v.encoded.truncated_sources,
                    'targets': v.encoded.truncated_targets}
                for s, v in splits.items()}
            for d, splits in self.splits.items()}


def select_domains(data_dir: Optional[str],
                   requested: Sequence[str] = (), *,
                   generic_domain: Optional[str] = None) -> tuple[str, ...]:
  """The domains (clients) of a run: `requested`, or every domain found.

  Args:
    data_dir: The `shared/data` folder or a folder of domains; None finds
      it (`nmt.find_nmt_dir`).
    requested: Domain names; empty for every domain folder of `data_dir`,
      in `nmt.list_domains` order (the paper's five first, then any other
      sorted by name), except `generic_domain` when it is none of the
      paper's five (`nmt_de_en_large`'s `generic/` is the generic engine's
      corpus, not a client).
    generic_domain: The generic engine's domain folder.

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
    clients = tuple(d for d in found
                    if d != generic_domain or d in nmt.DOMAINS)
    logging.info('Domains (clients) of %s: %s', folder, ', '.join(clients))
    return clients
  unused = [d for d in found if d not in requested and d not in nmt.DOMAINS
            and d != generic_domain]
  if unused:
    logging.warning(
        'Domain folders of %s not used, as --domains does not list them: '
        '%s. Leave --domains unset to use every domain folder.', folder,
        ', '.join(unused))
  return tuple(requested)


def prepare_task(config: DataConfig, *, data_dir: Optional[str], seed: int,
                 tokenizer_dir: str) -> NmtTask:
  """Loads, subsets and tokenizes the domains and the generic corpus.

  The tokenizer is read from `tokenizer_dir` when it holds one, else trained
  on both sides of the training pairs of every domain and of the generic
  corpus, and written there.

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
  loaded = tuple(config.domains) + (
      () if config.generic_domain in config.domains
      else (config.generic_domain,))
  corpora = nmt.load_domains(
      folder, loaded,
      max_train=config.max_train_examples or None,
      max_eval=config.max_eval_examples or None, seed=seed)
  tokenizer = subword_tokenizer.load_or_train(
      tokenizer_dir,
      lambda: [t for d in loaded
               for side in (corpora[d]['train'].sources,
                            corpora[d]['train'].targets) for t in side],
      config.vocabulary_size)
  splits = {
      d: {s: EncodedCorpus(c, seq2seq_examples.encode_pairs(
          tokenizer, c.sources, c.targets, source_length=config.max_length,
          target_length=config.max_length))
          for s, c in corpora[d].items()}
      for d in loaded}
  return NmtTask(tuple(config.domains), tokenizer, splits,
                 generic_domain=config.generic_domain, folder=folder)


def model_config(base: seq2seq.Seq2SeqConfig, task: NmtTask,
                 data: DataConfig) -> seq2seq.Seq2SeqConfig:
  """`base` with the task's vocabulary and the data's lengths."""
  return dataclasses.replace(
      base, vocabulary_size=task.tokenizer.vocabulary_size(),
      max_source_length=data.max_length, max_target_length=data.max_length)


def union(parts: Sequence[EncodedCorpus]) -> EncodedCorpus:
  """The sentence pairs of `parts`, in order, as one split."""
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



def build_centralized_process(model: seq2seq.Seq2SeqConfig,
                              training: TrainingConfig
                              ) -> tff.learning.templates.LearningProcess:
  """A one-client FedAvg (with client configs): a round is one epoch."""
  optimizer = templates.CLIENT_OPTIMIZERS[training.client_optimizer]
  return algorithms.build_fl_process(
      seq2seq_model_fn.build_model_fn(model), algorithm='fedavg',
      weighting='num_examples',
      client_optimizer_fn=optimizer(learning_rate=training.learning_rate),
      with_client_config=True, client_outputs=True)


# What TFF's runtime takes of a dataset argument (its limit is 100 MiB).
MAX_ROUND_BYTES = 90 * 2**20


def _batches_per_epoch(data: EncodedCorpus, training: TrainingConfig) -> int:
  return -(-len(data) // training.batch_size)


def centralized_rounds(data: EncodedCorpus, training: TrainingConfig,
                       epochs: int) -> int:
  """The rounds of `epochs` epochs on `data`: `epochs`, or, with
  `steps_per_round` S, ceil(epochs · batches per epoch / S)."""
  if not training.steps_per_round:
    return epochs
  total = epochs * _batches_per_epoch(data, training)
  return -(-total // training.steps_per_round)


def round_learning_rate(training: TrainingConfig, round_num: int,
                        rounds: int) -> float:
  """The learning rate of round `round_num` (1-based) of `rounds`.

  'constant': `learning_rate`; 'linear': learning_rate · (R − r + 1) / R,
  e.g. 1, 0.75, 0.5, 0.25 times it over 4 rounds (no round at 0: it would
  train nothing).
  """
  if training.learning_rate_schedule == 'constant':
    return training.learning_rate
  if not 1 <= round_num <= rounds:
    raise ValueError(f'Round {round_num} of {rounds}: the linear learning '
                     f'rate schedule has rounds 1 .. {rounds}.')
  return training.learning_rate * (rounds - round_num + 1) / rounds


def centralized_client_data_fn(
    data: EncodedCorpus, training: TrainingConfig, seed: int, *,
    epochs: int = 1,
) -> Callable[[int, Sequence[int]], list[tf.data.Dataset]]:
  """The one client's data of a `build_centralized_process` round.

  Epoch e (1-based) is `data` in the order seeded by `(seed, e)`. Without
  `steps_per_round`, round r is epoch r; with it (S), the epochs are one
  stream of batches and round r is its batches (r-1)·S to r·S - 1, the last
  round what is left (`centralized_rounds`).

  Args:
    data: The training pairs (e.g. `union` of several domains).
    training: Batch size, learning rate and `steps_per_round`.
    seed: Seeds the shuffling, with the epoch.
    epochs: The epochs of the stream (used with `steps_per_round`).

  Returns:
    `(round_num, client_ids) -> [dataset]`, as `training.run_training`
    takes it.
  """
  steps = training.steps_per_round
  per_epoch = _batches_per_epoch(data, training)
  if not steps:
    size = sum(v.nbytes for v in data.x.values()) + data.y.nbytes
    if size > MAX_ROUND_BYTES:
      raise ValueError(
          f'{len(data)} training pairs ({size / 2**20:.0f} MiB of token ids) '
          f'are too many for one round: TFF does not send a dataset over '
          f'{MAX_ROUND_BYTES / 2**20:.0f} MiB to its runtime. Set '
          f'steps_per_round (--steps_per_round), e.g. 500.')

  def client_data(round_num, client_ids):
    del client_ids
    if not steps:
      batches = seq2seq_examples.train_dataset(
          data, batch_size=training.batch_size,
          shuffle_seed=(seed, round_num))
    else:
      first = (round_num - 1) * steps
      count = min(steps, epochs * per_epoch - first)
      if count <= 0:
        raise ValueError(f'Round {round_num} is past the {epochs} epochs of '
                         f'{per_epoch} batches in rounds of {steps}.')
      batches = None
      while count:
        number, offset = divmod(first, per_epoch)
        taken = min(count, per_epoch - offset)
        piece = seq2seq_examples.train_dataset(
            data, batch_size=training.batch_size,
            shuffle_seed=(seed, number + 1), first_batch=offset,
            num_batches=taken)
        batches = piece if batches is None else batches.concatenate(piece)
        first, count = first + taken, count - taken
    return [templates.with_client_config(
        batches, num_epochs=1, learning_rate=round_learning_rate(
            training, round_num, centralized_rounds(data, training, epochs)))]

  return client_data


def build_federated_process(
    model: seq2seq.Seq2SeqConfig, training: TrainingConfig, *,
    num_clients: int, mode: str, change_norm: str,
    server_optimizer: str = 'none',
) -> stateful_clients.SimulationProcess:
  """Dynamic pulling (`dynamic_pulling.build_simulation_process`).

  Args:
    model: The model (vocabulary and lengths of the task).
    training: Client optimizer, learning rate, the cap on a domain's share
      of a round's weight and, for the `controllers` mode, the layers it
      exchanges.
    num_clients: The domains.
    mode: A `tensor_selection.Mode` value: which tensors a client sends.
    change_norm: One of `dynamic_pulling.CHANGE_NORMS`.
    server_optimizer: 'none' (the average is the new model) or a name in
      `SERVER_OPTIMIZERS`.

  Returns:
    The process; its `next` takes `federated_client_data_fn`'s data.
  """
  layout = seq2seq_layout.tensor_layout(model)
  optimizer = templates.CLIENT_OPTIMIZERS[training.client_optimizer]
  selection = dynamic_pulling.Selection(
      mode=mode, tensor_groups=[t.group for t in layout],
      exchanged=seq2seq_layout.controller_mask(
          layout, layers=training.controller_layers)
      if mode == 'controllers' else None,
      change_norm=change_norm, split_by=training.split_by)
  return dynamic_pulling.build_simulation_process(
      seq2seq_model_fn.build_model_fn(model), num_clients=num_clients,
      selection=selection,
      client_optimizer_fn=optimizer(learning_rate=training.learning_rate),
      with_client_config=True,
      max_weight_share=training.max_weight_share,
      server_optimizer_fn=(None if server_optimizer == 'none'
                           else SERVER_OPTIMIZERS[server_optimizer]()))


def federated_client_data_fn(
    task: NmtTask, training: TrainingConfig, seed: int, *, rounds: int,
) -> Callable[[int, Sequence[int]], list[tf.data.Dataset]]:
  """Each client's `local_steps` batches of a round, seeded by round.

  Args:
    task: The domains; client `i` is `task.domains[i]`.
    training: Batch size, learning rate (and its schedule) and
      `local_steps`.
    seed: Seeds the shuffling and the client's dynamic-pulling draws, with
      the round and the client.
    rounds: The engine's rounds (the learning rate schedule's length).

  Returns:
    `(round_num, client_ids) -> datasets` of `dynamic_pulling.client_data`,
    as `training.run_training` takes it.
  """
  domains = task.domains

  def client_data(round_num, client_ids):
    data = []
    for i in client_ids:
      train = task.splits[domains[i]]['train']
      batches = seq2seq_examples.train_dataset(
          train, batch_size=training.batch_size,
          shuffle_seed=(seed, round_num, i),
          num_batches=training.local_steps)
      data.append(dynamic_pulling.client_data(
          templates.with_client_config(
              batches, num_epochs=1, learning_rate=round_learning_rate(
                  training, round_num, rounds)),
          seed=(seed, round_num * len(domains) + i),
          data_size=float(len(train))))
    return data

  return client_data
