"""The warning of an experiment binary started without a preset.

The experiment binaries' defaults are the papers' settings, sized for GPUs:
a bare `python -m tff_nlp.bin.train_text2sql` trains the Lorar paper's 60
rounds, days on a CPU. Started without `--flagfile`, such a binary says,
before any work, what its defaults will run and which presets
(`tff_nlp/bin/flags/<binary>.<preset>.flags`) there are. Not a binary.
"""

import os
import re
import sys
from typing import Optional, Sequence

from absl import logging

FLAGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'flags')


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
                for name in os.listdir(FLAGS_DIR)
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
      'scale for the machine: --flagfile=tff_nlp/bin/flags/%s.<preset>.flags '
      'with <preset> one of %s%s.', binary, runs, presets_of,
      ', '.join(names),
      ' (smoke checks the set-up in minutes)' if 'smoke' in names else '')
  return True
