"""Flags defined from a configuration dataclass, and the dataclass back."""

import dataclasses
import enum
from typing import Optional

from absl import app
from absl import flags
from absl.testing import parameterized
import tensorflow as tf

from apps.common import config_flags


class _Color(enum.Enum):
  RED = 'red'
  BLUE = 'blue'


@dataclasses.dataclass(frozen=True)
class _Config:
  seed: int = 3
  rate: float = 0.5
  name: str = 'x'
  on: bool = False
  limit: Optional[int] = None
  ks: tuple[int, ...] = (1, 3)
  names: tuple[str, ...] = ('a',)
  color: _Color = _Color.RED
  mode: str = 'a'


_SPECS = {
    'rate': config_flags.Spec('Rate.', lower_bound=0.0),
    'name': config_flags.Spec('Name.'),
    'on': config_flags.Spec('On.'),
    'limit': config_flags.Spec('Limit.'),
    'ks': config_flags.Spec('Ks.'),
    'names': config_flags.Spec('Names.'),
    'color': config_flags.Spec('Color.'),
    'mode': config_flags.Spec('Mode.', enum_values=['a', 'b']),
}


def _define(specs=None, **kwargs):
  flag_values = flags.FlagValues()
  config = config_flags.define_config(
      _Config, specs=specs or _SPECS, flag_values=flag_values, **kwargs)
  return flag_values, config


class ConfigFlagsExecutionTest(parameterized.TestCase, tf.test.TestCase):

  def test_defaults_build_the_dataclass_defaults(self):
    flag_values, config = _define()
    flag_values(['program'])
    self.assertEqual(config.build(), _Config())
    self.assertEqual(flag_values['ks'].default, ['1', '3'])
    # `seed` is shared: its help is SHARED's.
    self.assertEqual(flag_values['seed'].help,
                     config_flags.SHARED['seed'].help)

  def test_every_kind_of_field_is_parsed(self):
    flag_values, config = _define()
    flag_values(['program', '--seed=5', '--rate=2', '--on', '--limit=4',
                 '--ks=2,5', '--names=b,c', '--color=blue', '--mode=b'])
    self.assertEqual(
        config.build(),
        _Config(seed=5, rate=2.0, on=True, limit=4, ks=(2, 5),
                names=('b', 'c'), color=_Color.BLUE, mode='b'))

  def test_names_defaults_parsers_and_overrides(self):
    flag_values, config = _define(
        specs={**_SPECS, 'max_limit': config_flags.Spec('Limit.')},
        exclude=('name',), names={'limit': 'max_limit'},
        defaults={'limit': 0}, parsers={'limit': lambda v: v or None})
    self.assertNotIn('name', flag_values)
    flag_values(['program', '--max_limit=0'])
    self.assertIsNone(config.build().limit)
    self.assertEqual(config.build(seed=9).seed, 9)
    flag_values(['program', '--max_limit=7'])
    self.assertEqual(config.values()['limit'], 7)

  @parameterized.named_parameters(
      ('lower_bound', ['--rate=-1'], r'--rate=-1'),
      ('enum', ['--mode=c'], r'--mode'),
  )
  def test_bad_values_name_the_flag(self, args, message):
    flag_values, _ = _define()
    with self.assertRaisesRegex(flags.IllegalFlagValueError, message):
      flag_values(['program', *args])

  def test_bad_list_element_names_the_flag(self):
    flag_values, config = _define()
    flag_values(['program', '--ks=2,x'])
    with self.assertRaisesRegex(
        app.UsageError, r"^--ks: expected integers, got \['2', 'x'\]\.$"):
      config.build()

  def test_shared_help_is_not_given_again(self):
    with self.assertRaisesRegex(ValueError, 'seed.* is shared'):
      _define(specs={**_SPECS, 'seed': config_flags.Spec('Again.')})

  def test_missing_help_is_refused(self):
    with self.assertRaisesRegex(ValueError, "No help for flag 'rate'"):
      config_flags.define_config(_Config, only=('rate',),
                                 flag_values=flags.FlagValues())


if __name__ == '__main__':
  tf.test.main()
