"""What every tff_nlp binary shares: loop flags, start-up and failure.

Importing this module defines the flags every experiment has (data and
output directories, and the fields of `training.LoopConfig`: rounds, clients
per round, seed, checkpoint and evaluation cadence, progress bar; from
`config_flags`) and, through `tff_nlp.runtime.flags`, the execution
context flags. A binary adopts them as key flags so `--helpshort` lists them
next to its own, sets its own defaults with `flags.set_default`, and starts
with `common.run(main)`.

`run` logs warnings and errors only unless `--verbosity` is given
(`--verbosity=0`: INFO lines too), so the default output is the progress
bar, warnings, errors, the final table and, when `main` returns the path of
the report it wrote, a last line `Report: <path>` on stdout. (TensorFlow's
C++ INFO lines and its known harmless errors are kept off the terminal
from before TensorFlow is imported: `apps._binary_stderr`.)

`run` makes bad input exit with status 2 and one line on stderr, naming what
is wrong: an unknown flag or flag value, an unreadable `--flagfile`, and any
`tff_nlp.errors.InputError` (a missing data directory, a malformed data file,
a checkpoint that cannot be resumed). Other exceptions are bugs and keep
their traceback.
"""

import logging
import os
import re
import sys

from absl import app
from absl import flags
from absl import logging as absl_logging

from tff_nlp import errors
from tff_nlp import training
from apps.common import config_flags
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(runtime_flags)

DATA_DIR = config_flags.define('data_dir', None, str)
OUTPUT_DIR = config_flags.define('output_dir', None, str)
RESTART = flags.DEFINE_bool(
    'restart', False,
    'Start over instead of resuming: remove the run in --output_dir (its '
    'config, checkpoints, metrics and reports) and train from the first '
    'round. Without it, running a command again resumes its run, and is '
    'refused if the experiment or a data file the run read has changed '
    'since it started. text2sql_benchmark and train_fcl keep each run in a '
    'folder of its own: they start over the runs they would resume (and '
    'train_fcl a finished run whose data changed) and read the other '
    'finished runs back.')

# The flag --progress=auto|on|off is LoopConfig.progress=None|True|False.
_PROGRESS = {'auto': None, 'on': True, 'off': False}
LOOP = config_flags.define_config(
    training.LoopConfig, defaults={'rounds': 10, 'progress': 'auto'},
    kinds={'progress': str}, parsers={'progress': _PROGRESS.get})
ROUNDS = LOOP['rounds']
CLIENTS_PER_ROUND = LOOP['clients_per_round']
SEED = LOOP['seed']
EVAL_EVERY = LOOP['eval_every']


def loop_config_from_flags() -> training.LoopConfig:
  """The `training.LoopConfig` given by this module's flags."""
  return LOOP.build()


def _exit_on_bad_input(program: str, message: str) -> None:
  one_line = ' '.join(str(message).split())
  print(f'{program}: error: {one_line}', file=sys.stderr)
  sys.exit(2)


def _parse_flags(argv: list[str]) -> list[str]:
  try:
    remaining = flags.FLAGS(argv)
  except flags.Error as e:
    # absl words some of its errors 'ERROR:: ...' (an unreadable --flagfile);
    # the line already starts with '<program>: error:'.
    _exit_on_bad_input(os.path.basename(argv[0]),
                       re.sub(r'^ERROR:+\s*', '', str(e)))
  if not flags.FLAGS['verbosity'].present:
    # absl turns an unset --verbosity into INFO; a run's per-round INFO lines
    # (checkpoints saved, rounds evaluated) would break the progress bar.
    # The default is the bar, warnings, errors and the final table;
    # --verbosity=0 brings the INFO lines back.
    flags.FLAGS.verbosity = absl_logging.WARNING
  return remaining


def run(main) -> None:
  """`absl.app.run(main)`, with bad input reported in one line, status 2.

  Args:
    main: The binary's main. It may return the path of the report it
      wrote (e.g. `<output_dir>/results.md`), printed last as
      `Report: <path>`; None prints nothing.
  """

  def main_reporting_bad_input(argv):
    try:
      report = main(argv)
    except (errors.InputError, app.UsageError) as e:
      _exit_on_bad_input(os.path.basename(argv[0]), e)
    if report is not None:
      print(f'Report: {os.fspath(report)}', flush=True)

  # TensorFlow logs an INFO line per SavedModel written, i.e. per
  # checkpoint, through absl's handler; TFF's own line ("Program state
  # saved") is enough.
  logging.getLogger('tensorflow').setLevel(logging.WARNING)
  absl_logging.get_absl_handler().addFilter(_DropTensorFlowInfo())
  app.run(main_reporting_bad_input, flags_parser=_parse_flags)


class _DropTensorFlowInfo(logging.Filter):
  """Drops INFO and DEBUG records logged from TensorFlow's own modules."""

  _TENSORFLOW_DIR = f'{os.sep}tensorflow{os.sep}'

  def filter(self, record: logging.LogRecord) -> bool:
    return (record.levelno >= logging.WARNING
            or self._TENSORFLOW_DIR not in record.pathname)
