"""What every tff_nlp binary shares: loop flags, start-up and failure.

Importing this module defines the flags every experiment has (rounds,
clients per round, seed, output directory, checkpoint and evaluation
cadence, progress bar) and, through `tff_nlp.runtime.flags`, the execution
context flags. A binary adopts them as key flags so `--helpshort` lists them
next to its own, sets its own defaults with `flags.set_default`, and starts
with `common.run(main)`.

`run` logs warnings and errors only unless `--verbosity` is given
(`--verbosity=0`: INFO lines too), so the default output is the progress
bar, warnings and the final table.

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
from tff_nlp.runtime import flags as runtime_flags

flags.adopt_module_key_flags(runtime_flags)

OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None,
    'Run directory: config, checkpoints, metrics, reports. Running the same '
    'command again resumes the run in it.')
ROUNDS = flags.DEFINE_integer(
    'rounds', 10, 'Training rounds (a resumed run continues up to this).',
    lower_bound=1)
CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round', 0,
    'Clients sampled per round, seeded by (seed, round); 0: every client.',
    lower_bound=0)
SEED = flags.DEFINE_integer(
    'seed', 0,
    'Seed of every random choice (data split, initial model, sampling, '
    'example order).')
CHECKPOINT_EVERY = flags.DEFINE_integer(
    'checkpoint_every', 1,
    'Save the training state every this many rounds (and at the last).',
    lower_bound=1)
EVAL_EVERY = flags.DEFINE_integer(
    'eval_every', 0,
    'Evaluate the global model every this many rounds; 0: only the initial '
    'and the final model.', lower_bound=0)
EVALUATE_INITIAL = flags.DEFINE_bool(
    'evaluate_initial', True,
    'Evaluate the initial (untrained) model at round 0.')
PROGRESS = flags.DEFINE_enum(
    'progress', 'auto', ['auto', 'on', 'off'],
    'Progress bar on stderr; auto: only when stderr is a terminal.')


def loop_config_from_flags() -> training.LoopConfig:
  """The `training.LoopConfig` given by this module's flags."""
  return training.LoopConfig(
      rounds=ROUNDS.value,
      clients_per_round=CLIENTS_PER_ROUND.value,
      seed=SEED.value,
      checkpoint_every=CHECKPOINT_EVERY.value,
      eval_every=EVAL_EVERY.value,
      progress={'auto': None, 'on': True, 'off': False}[PROGRESS.value],
      evaluate_initial=EVALUATE_INITIAL.value,
  )


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
  """`absl.app.run(main)`, with bad input reported in one line, status 2."""

  def main_reporting_bad_input(argv):
    try:
      return main(argv)
    except (errors.InputError, app.UsageError) as e:
      _exit_on_bad_input(os.path.basename(argv[0]), e)

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
