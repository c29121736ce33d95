"""The warning of an experiment binary started without a preset.

The experiment binaries' defaults are the papers' settings, sized for GPUs:
a bare `python -m apps.text2sql.bin.train_text2sql` trains the Lorar paper's 60
rounds, days on a CPU. Started without `--flagfile`, such a binary says,
before any work, what its defaults will run and which presets
(`apps/<application>/flags/<binary>.<preset>.flags`) there are. Not a binary.
"""

import os
import re
import sys
from typing import Optional, Sequence

from absl import logging

# apps/: each application's presets are in apps/<application>/flags/.
APPS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def binaries() -> dict[str, str]:
  """Every binary's name -> its application (`apps/<application>/bin/`)."""
  found = {}
  for application in sorted(os.listdir(APPS_DIR)):
    folder = os.path.join(APPS_DIR, application, 'bin')
    if os.path.isdir(folder):
      found.update({name[:-len('.py')]: application
                    for name in os.listdir(folder)
                    if name.endswith('.py') and not name.startswith('_')})
  return found


def application_of(binary: str) -> str:
  """The application whose `bin/` holds `binary`, e.g. 'text2sql'.

  Raises:
    ValueError: no application has a binary of that name.
  """
  application = binaries().get(binary)
  if application is None:
    raise ValueError(f'No application under {APPS_DIR} has a binary '
                     f'{binary!r} (apps/<application>/bin/{binary}.py).')
  return application


def binary_module(binary: str) -> str:
  """What `python -m` runs for `binary`, e.g. 'apps.nmt.bin.train_nmt'."""
  return f'apps.{application_of(binary)}.bin.{binary}'


def flags_dir(binary: str) -> str:
  """The folder of `binary`'s presets, `apps/<application>/flags`."""
  return os.path.join(APPS_DIR, application_of(binary), 'flags')


def preset_path(binary: str, preset: str) -> str:
  """The path of `binary`'s preset `preset`, relative to the checkout."""
  return os.path.relpath(
      os.path.join(flags_dir(binary), f'{binary}.{preset}.flags'),
      os.path.dirname(APPS_DIR))


def flagfile_given(argv: Optional[Sequence[str]] = None) -> bool:
  """Whether the command line (default: `sys.argv`) has a `--flagfile`."""
  argv = sys.argv[1:] if argv is None else argv
  for arg in argv:
    if arg == '--':
      break
    if re.match(r'--?flagfile(=|$)', arg):
      return True
  return False


def preset_names(binary: str) -> list[str]:
  """The presets of `binary`: `<name>` of `flags/<binary>.<name>.flags`."""
  prefix, suffix = f'{binary}.', '.flags'
  return sorted(name[len(prefix):-len(suffix)]
                for name in os.listdir(flags_dir(binary))
                if name.startswith(prefix) and name.endswith(suffix))


def warn_without_preset(binary: str, runs: str, *,
                        presets_of: Optional[str] = None) -> bool:
  """Logs a warning naming what `binary` runs and its presets, if no preset.

  Args:
    binary: The binary's name, e.g. 'train_text2sql'.
    runs: What its flags will run (rounds, model, data, ...), a phrase.
    presets_of: The binary whose presets this one takes (default: itself).

  Returns:
    Whether it warned (no `--flagfile` on the command line).
  """
  if flagfile_given():
    return False
  presets_of = presets_of or binary
  names = preset_names(presets_of)
  logging.warning(
      'No --flagfile: %s runs its defaults and flags: %s. A preset sets a '
      'scale for the machine: --flagfile=%s with <preset> one of %s%s.',
      binary, runs, preset_path(presets_of, '<preset>'),
      ', '.join(names),
      ' (smoke checks the set-up in minutes)' if 'smoke' in names else '')
  return True
