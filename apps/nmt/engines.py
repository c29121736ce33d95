"""What an NMT engine is, and the key it is cached under.

`EngineSpec` names one engine of `apps.nmt.experiment` (its kinds are
described there); `engine_key` is everything that defines its result, and
`engine_dir` the folder `run_nmt` caches it in.
"""

import collections
import dataclasses
import os
from typing import Optional

from tff_nlp import errors
from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.algorithms import tensor_selection
from tff_nlp.data import nmt as nmt_data
from tff_nlp.models import seq2seq
from apps.nmt import task as nmt_task
from tff_nlp.training import run_cache

ENGINE_KINDS = ('generic', 'single', 'finetuned', 'combined', 'chained',
                'federated')
# The kinds that start from the generic engine.
FROM_GENERIC = ('finetuned', 'combined', 'chained', 'federated')
# The kinds trained from scratch (`nmt_task.pretraining_configs`).
FROM_SCRATCH = ('generic', 'single')
# The kinds trained on one domain.
ONE_DOMAIN = ('single', 'finetuned')
_MODES = tuple(m.value for m in tensor_selection.Mode)
# The modes whose median or quantile `split_by` decides.
_SPLIT_MODES = ('dp_g', 'dp_l', 'random', 'dp_l_33')
_SERVER_OPTIMIZERS = ('none',) + tuple(nmt_task.SERVER_OPTIMIZERS)
# The folder of `run_nmt`'s output directory that holds the engines.
ENGINES_DIR = 'engines'


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
    if (self.kind in ONE_DOMAIN) != (self.domain is not None):
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
    if self.kind in ONE_DOMAIN:
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
      if kind in ONE_DOMAIN and len(rest) == 1:
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
  if spec.kind in FROM_SCRATCH:
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
  if spec.kind in FROM_SCRATCH:
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
  return run_cache.run_dir(os.path.join(output_dir, ENGINES_DIR), spec.name,
                           engine_key(spec, **key_args))
