"""absl flags defined from configuration dataclasses, and the dataclasses back.

Every tff_nlp binary and benchmark takes its settings as a configuration
dataclass (`training.LoopConfig`, an experiment's `DataConfig`, ...). Their
flags are defined here from those dataclasses, so a setting has one name,
one type and one default, the dataclass field's:

  _DATA = config_flags.define_config(fcl.DataConfig, specs={
      'num_clients': config_flags.Spec('Clients, C.', lower_bound=1), ...})
  ...
  data = _DATA.build()  # The fcl.DataConfig of the parsed flags.

A flag's type follows its field's annotation: `int`, `float`, `str`, `bool`,
`Optional[...]` of one of them, a `tuple`/`Sequence` of them (a
comma-separated list flag), or an `enum.Enum` class; `Spec.enum_values`
makes a `str` field an enum flag. Whatever the annotation cannot tell (a
list flag parsed into a custom type, a flag default other than the field's)
is given by the `kinds`, `defaults` and `parsers` arguments.

Help texts and bounds are written once: in `SHARED` for the names that mean
the same in every binary and benchmark (`data_dir`, `output_dir`, `seed`,
`batch_size`, the training loop's flags, ...), and in the `specs` a module
passes to `define_config` for the rest; a name cannot be in both. A
benchmark that wants another default than a binary's calls
`flags.set_default` on the same flag instead of defining a second one.

This module defines no flag itself; the flags it defines belong to the
module calling it (`--helpshort`, `flags.adopt_module_key_flags`).
"""

import dataclasses
import enum
import typing
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from absl import app
from absl import flags


@dataclasses.dataclass(frozen=True)
class Spec:
  """What a flag's name does not tell: its help text, bounds, choices."""

  help: str
  lower_bound: Optional[float] = None
  upper_bound: Optional[float] = None
  enum_values: Optional[Sequence[str]] = None


_DATA_HELP = (
    'The data folder, the same for every binary: the one holding '
    'text_classification/, text2sql/, nmt_de_en/, nmt_de_en_large/, '
    'word_vectors/ (../shared/data), not one of those (train_nmt picks its '
    'corpus in it with --corpus). Unset: $TFF_NLP_DATA_DIR, else '
    '<repository>/../shared/data (text-to-SQL: else a verified download of '
    'the upstream files into ~/.cache/tff_nlp).')

# The flags that mean the same wherever they are defined.
SHARED: Mapping[str, Spec] = {
    'data_dir': Spec(_DATA_HELP),
    'output_dir': Spec(
        'Run directory: config, checkpoints, metrics, reports. Running the '
        'same command again resumes the run in it.'),
    'seed': Spec(
        'Seed of every random choice (data split, initial model, sampling, '
        'example order).'),
    'rounds': Spec(
        'Training rounds (a resumed run continues up to this).',
        lower_bound=1),
    'clients_per_round': Spec(
        'Clients sampled per round, seeded by (seed, round); 0: every '
        'client.', lower_bound=0),
    'checkpoint_every': Spec(
        'Save the training state every this many rounds (and at the last).',
        lower_bound=1),
    'eval_every': Spec(
        'Evaluate the global model every this many rounds; 0: only the '
        'initial and the final model.', lower_bound=0),
    'evaluate_initial': Spec(
        'Evaluate the initial (untrained) model at round 0.'),
    'progress': Spec(
        'Progress bar on stderr; auto: only when stderr is a terminal.',
        enum_values=('auto', 'on', 'off')),
    'batch_size': Spec('Examples per training batch.', lower_bound=1),
    'decode_batch_size': Spec(
        'Examples decoded at once in evaluation.', lower_bound=1),
    'max_eval_examples': Spec(
        'Dev and test examples per client (seeded subset); 0: all.',
        lower_bound=0),
    'dataset': Spec('A folder of shared/data/text_classification.'),
    'dirichlet_alpha': Spec(
        'Label-skew concentration of the client split; smaller is more '
        'skewed.', lower_bound=0.0),
    'min_train_examples': Spec(
        'Minimum training examples of a label-skew client.', lower_bound=0),
    'client_learning_rate': Spec(
        'Client learning rate (SGD step size).', lower_bound=0.0),
    'proximal_strength': Spec(
        "FedProx's mu, the weight of its proximal term; only FedProx uses it "
        '(the other algorithms ignore it).', lower_bound=0.0),
    'embedding_dim': Spec('Word-embedding size.', lower_bound=1),
    'dropout': Spec('Dropout rate.', lower_bound=0.0, upper_bound=1.0),
    'output_json': Spec('If set, also write the measurements there.'),
}

_SCALARS = (bool, int, float, str)

# The flags `define` defines belong to the module calling it.
flags.disclaim_key_flags()


def _spec(name: str, specs: Mapping[str, Spec]) -> Spec:
  if name in specs and name in SHARED:
    raise ValueError(
        f'Flag {name!r} is shared (config_flags.SHARED); its help is not '
        'given again.')
  try:
    return specs[name] if name in specs else SHARED[name]
  except KeyError:
    raise ValueError(f'No help for flag {name!r}: give a Spec.') from None


def _unoptional(annotation):
  if typing.get_origin(annotation) is Union:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(args) == 1:
      return args[0]
  return annotation


def _kind(annotation) -> tuple[type, Optional[type]]:
  """(flag kind, element type of a list flag) of a field annotation."""
  annotation = _unoptional(annotation)
  origin = typing.get_origin(annotation)
  if origin in (tuple, list, Sequence, typing.Sequence):
    (element, *rest) = typing.get_args(annotation) or (str,)
    if rest not in ([], [Ellipsis]) or element not in (int, float, str):
      raise TypeError(f'No flag for a field of type {annotation}.')
    return list, element
  if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
    return annotation, None
  if annotation in _SCALARS:
    return annotation, None
  raise TypeError(f'No flag for a field of type {annotation}: give its kind.')


def define(name: str, default: Any, kind: Any = None, *,
           spec: Optional[Spec] = None,
           flag_values: flags.FlagValues = flags.FLAGS) -> flags.FlagHolder:
  """Defines flag `name` of `kind` (default: `type(default)`).

  Args:
    name: The flag's name.
    default: Its default.
    kind: `bool`, `int`, `float`, `str`, `list` (of strings) or an
      `enum.Enum` class; a `str` flag with `enum_values` is an enum flag.
    spec: Help, bounds, choices; default: `SHARED[name]`.
    flag_values: Where to define it.

  Returns:
    The flag's holder, registered to the module calling this function.
  """
  spec = spec or _spec(name, {})
  kind = kind or type(default)
  bounds = dict(lower_bound=spec.lower_bound, upper_bound=spec.upper_bound)
  where = dict(flag_values=flag_values)
  if spec.enum_values is not None:
    return flags.DEFINE_enum(name, default, list(spec.enum_values), spec.help,
                             **where)
  if kind is bool:
    return flags.DEFINE_bool(name, default, spec.help, **where)
  if kind is int:
    return flags.DEFINE_integer(name, default, spec.help, **bounds, **where)
  if kind is float:
    return flags.DEFINE_float(name, default, spec.help, **bounds, **where)
  if kind is str:
    return flags.DEFINE_string(name, default, spec.help, **where)
  if kind is list:
    return flags.DEFINE_list(
        name, None if default is None else [str(v) for v in default],
        spec.help, **where)
  if isinstance(kind, type) and issubclass(kind, enum.Enum):
    return flags.DEFINE_enum_class(name, default, kind, spec.help,
                                   case_sensitive=False, **where)
  raise TypeError(f'No flag of kind {kind!r} ({name!r}).')


_PLURALS = {int: 'integers', float: 'numbers', str: 'strings'}


def _list_parser(name: str, element: type) -> Callable[[list[str]], tuple]:
  """A list flag's value -> a tuple of `element`s; bad input names the flag."""

  def parse(values: list[str]) -> tuple:
    try:
      return tuple(element(v) for v in values)
    except ValueError:
      raise app.UsageError(
          f'--{name}: expected {_PLURALS[element]}, got {values}.') from None

  return parse


def _same(value):
  return value


@dataclasses.dataclass(frozen=True)
class ConfigFlags:
  """The flags of (some of) a configuration dataclass's fields.

  Attributes:
    config_class: The dataclass.
    holders: Field name -> the holder of its flag.
    parsers: Field name -> flag value -> field value.
  """

  config_class: type
  holders: Mapping[str, flags.FlagHolder]
  parsers: Mapping[str, Callable[[Any], Any]]

  def __getitem__(self, field_name: str) -> flags.FlagHolder:
    return self.holders[field_name]

  def values(self) -> dict[str, Any]:
    """Field name -> its value given by the parsed flags."""
    return {field: self.parsers[field](holder.value)
            for field, holder in self.holders.items()}

  def build(self, **fields):
    """The dataclass of the parsed flags, `fields` given or overriding."""
    values = {field: self.parsers[field](holder.value)
              for field, holder in self.holders.items()
              if field not in fields}
    return self.config_class(**values, **fields)


def define_config(
    config_class: type,
    *,
    specs: Mapping[str, Spec] = None,
    only: Optional[Iterable[str]] = None,
    exclude: Iterable[str] = (),
    names: Mapping[str, str] = None,
    defaults: Mapping[str, Any] = None,
    kinds: Mapping[str, Any] = None,
    parsers: Mapping[str, Callable[[Any], Any]] = None,
    flag_values: flags.FlagValues = flags.FLAGS,
) -> ConfigFlags:
  """Defines a flag per field of `config_class`.

  Args:
    config_class: A dataclass.
    specs: Flag name -> its `Spec`, for the names not in `SHARED`.
    only: The fields to define (default: every field but `exclude`).
    exclude: Fields not to define (set by the caller of `build`).
    names: Field -> flag name, where they differ.
    defaults: Field -> flag default, where it is not the field's default.
    kinds: Field -> flag kind (see `define`), where the annotation does not
      give it; `list` values are then passed to the field's parser as given.
    parsers: Field -> flag value -> field value, where the flag's value is
      not the field's (a list flag of a tuple of ints is parsed by default).
    flag_values: Where to define them.

  Returns:
    The `ConfigFlags` of the fields.
  """
  specs, names = specs or {}, names or {}
  defaults, kinds, parsers = defaults or {}, kinds or {}, parsers or {}
  hints = typing.get_type_hints(config_class)
  fields = {f.name: f for f in dataclasses.fields(config_class)}
  chosen = list(fields) if only is None else list(only)
  unknown = (set(chosen) | set(exclude) | set(names) | set(defaults)
             | set(kinds) | set(parsers)) - set(fields)
  if unknown:
    raise ValueError(f'{config_class.__name__} has no field {sorted(unknown)}.')
  holders, field_parsers = {}, {}
  for field_name in chosen:
    if field_name in exclude:
      continue
    field = fields[field_name]
    name = names.get(field_name, field_name)
    if field_name in kinds:
      kind, element = kinds[field_name], None
    else:
      kind, element = _kind(hints[field_name])
    if field_name in defaults:
      default = defaults[field_name]
    elif field.default is not dataclasses.MISSING:
      default = field.default
    elif field.default_factory is not dataclasses.MISSING:
      default = field.default_factory()
    else:
      raise ValueError(f'{config_class.__name__}.{field_name} has no '
                       'default: give one in `defaults`.')
    holders[field_name] = define(name, default, kind, spec=_spec(name, specs),
                                 flag_values=flag_values)
    if field_name in parsers:
      field_parsers[field_name] = parsers[field_name]
    elif element is not None:
      field_parsers[field_name] = _list_parser(name, element)
    else:
      field_parsers[field_name] = _same
  return ConfigFlags(config_class, holders, field_parsers)
