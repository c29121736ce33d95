"""Where a text-to-SQL run starts: fresh weights, another run, or a preset.

`experiments.text2sql.run_text2sql` starts from freshly initialised weights
unless it is given one of three starting points, all read before its output
directory is written (a refused one leaves nothing behind that would refuse
the corrected call):

*   `init_from`: an earlier centralized or federated run (or a
    `pretrain_seq2seq` run, which writes the same layout): its tokenizer and
    its selected model (`BEST_CHECKPOINT_DIR`), whose configuration must be
    this run's up to `INIT_FROM_FREE_FIELDS`;
*   `tokenizer_from`: an earlier run's tokenizer only, for a model from
    scratch that differs from one fine-tuned from that run only in its
    starting weights;
*   `init_from_keras_nlp`: a local keras-nlp BART preset (its tokenizer,
    architecture and weights).
"""

from collections.abc import Mapping
import dataclasses
import json
import os
import shutil
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.models import copy_tokenizer
from tff_nlp.models import keras_nlp_preset
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_model_fn
from tff_nlp.models import subword_tokenizer
from apps.text2sql import task as text2sql_task
from tff_nlp.training import run_dir as run_dir_lib

# The layout of a run directory that `init_from` and `tokenizer_from` read.
TOKENIZER_DIR = 'tokenizer'
# The selected model as a `seq2seq.save_checkpoint` checkpoint, per trained
# model (`federated`, `centralized` or the client).
BEST_CHECKPOINT_DIR = 'best_checkpoint'
BEST_CHECKPOINT_PREFIX = 'ckpt'
# The `Seq2SeqConfig` fields in which a run may differ from its `init_from`
# run: none changes what the loaded weights compute. `dropout` acts only in
# training; `seed` draws the initial weights, which the loaded ones replace,
# and keys dropout masks. `vocabulary_size` is the tokenizer's, and the
# tokenizer is copied from the `init_from` run, so the model has that run's
# vocabulary whatever `model` and `data.vocabulary_size` say. (The maximum
# lengths are `data`'s, not `model`'s, and they shape the learned position
# embeddings: `check_init_model` compares `data`'s.)
INIT_FROM_FREE_FIELDS = ('dropout', 'seed', 'vocabulary_size')
_LENGTH_FIELDS = ('max_source_length', 'max_target_length')
# The file that holds a run's tokenizer, by `DataConfig.tokenizer`.
_TOKENIZER_FILES = {'subword': subword_tokenizer.PROTO_FILENAME,
                    'copy_words': copy_tokenizer.VOCABULARY_FILE}


@dataclasses.dataclass(frozen=True)
class StartingPoint:
  """What a run starts from, read before its output directory is written.

  Attributes:
    checkpoint: The `init_from` run's selected checkpoint, or None.
    preset: The keras-nlp preset's model, or None.
    preset_tokenizer: The keras-nlp preset's tokenizer, or None.
    tokenizer_file: The tokenizer file to copy into the run
      (`copy_tokenizer_file`), from `init_from` or `tokenizer_from`, or
      None.
  """
  checkpoint: Optional[str] = None
  preset: Optional[tf.keras.Model] = None
  preset_tokenizer: Any = None
  tokenizer_file: Optional[str] = None

  def initial_weights(self, model: seq2seq.Seq2SeqConfig, lora: bool
                      ) -> Optional[tff.learning.models.ModelWeights]:
    """The full model's starting weights as numpy arrays, or None (fresh).

    Args:
      model: The parser's configuration (the checkpoint's model).
      lora: Whether the run trains LoRA adapters: a LoRA parser's model
        starts from the checkpoint or preset by itself.
    """
    if lora:
      return None
    if self.checkpoint is not None:
      weights = seq2seq_model_fn.load_model_weights(model, self.checkpoint)
    elif self.preset is not None:
      weights = tff.learning.models.ModelWeights.from_model(self.preset)
    else:
      return None
    return tf.nest.map_structure(lambda v: v.numpy(), weights)


def starting_point(data: text2sql_task.DataConfig, model: Any, *, seed: int,
                   init_from: Optional[str] = None,
                   tokenizer_from: Optional[str] = None,
                   init_from_keras_nlp: Optional[str] = None
                   ) -> StartingPoint:
  """Reads and checks the run's starting point (module docstring).

  Args:
    data: The run's data configuration (tokenizer kind, maximum lengths).
    model: The run's model configuration.
    seed: The run's seed (the preset model's dropout masks).
    init_from: See the module docstring; at most one of the three.
    tokenizer_from: See the module docstring.
    init_from_keras_nlp: See the module docstring.

  Returns:
    The `StartingPoint`; empty for a run from scratch.

  Raises:
    CheckpointError: If `init_from` holds no single selected model or one of
      another configuration, or a run has no tokenizer of `data`'s kind.
    InputError: As `check_init_model` and `keras_nlp_preset.load_preset`.
  """
  preset = preset_tokenizer = checkpoint = tokenizer = None
  if init_from_keras_nlp:
    preset, preset_tokenizer = keras_nlp_preset.load_preset(
        init_from_keras_nlp, seed=seed)
  if init_from is not None:
    checkpoint = selected_checkpoint(init_from)
    check_init_model(init_from, data, model)
  source = init_from or tokenizer_from
  if source is not None:
    tokenizer = tokenizer_file(
        source, data.tokenizer,
        '--init_from' if init_from else '--tokenizer_from')
  return StartingPoint(checkpoint=checkpoint, preset=preset,
                       preset_tokenizer=preset_tokenizer,
                       tokenizer_file=tokenizer)


def selected_checkpoint(run_dir: str) -> str:
  """The checkpoint path of the one model `run_dir` selected."""
  folder = os.path.join(run_dir, BEST_CHECKPOINT_DIR)
  units = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
  if len(units) != 1:
    raise errors.CheckpointError(
        f'{folder}: expected the selected model of one finished centralized '
        f'or federated run, found {units or "nothing"}.')
  return os.path.join(folder, units[0], BEST_CHECKPOINT_PREFIX)


def check_init_model(run_dir: str, data: text2sql_task.DataConfig,
                     model: seq2seq.Seq2SeqConfig) -> None:
  """Refuses an `init_from` run whose model is not this run's.

  `seq2seq.load_checkpoint` refuses variables of other shapes, but weights
  trained with, say, another `activation` or `layer_norm_epsilon` would load
  silently into a model that computes something else. So the model recorded
  in the run's `config.json` (with its `data`'s maximum lengths, which the
  run built it with) is compared with this one, field by field, except for
  `INIT_FROM_FREE_FIELDS`.

  Args:
    run_dir: The `init_from` run directory.
    data: This run's data config (its maximum lengths).
    model: This run's model config.

  Raises:
    InputError: If `data` fits a maximum length to the data (0): the model's
      shape is then not known before the data is read.
    CheckpointError: If the run's `config.json` cannot be read or records no
      text2sql model, or a field differs, or the run fitted its maximum
      lengths to its data.
  """
  fitted = [name for name in _LENGTH_FIELDS if not getattr(data, name)]
  if fitted:
    raise errors.InputError(
        f'--init_from={run_dir}: '
        + ', '.join(f'--{name}=0' for name in fitted)
        + ' fits the maximum length to this run\'s data, so the model may '
        'not have the shape of the one it starts from. Give the maximum '
        'lengths that run was built with.')
  path = os.path.join(run_dir, run_dir_lib.CONFIG_FILE)
  earlier_model = _recorded_model(path, run_dir)
  earlier_fitted = [name for name in _LENGTH_FIELDS
                    if not earlier_model[name]]
  if earlier_fitted:
    raise errors.CheckpointError(
        f'{path}: the run in {run_dir!r} fitted '
        f'{" and ".join(earlier_fitted)} to its data (0 in its '
        'configuration), so the shape of its model is not recorded; start '
        'from a run with explicit maximum lengths.')
  current = training_lib.to_json_value(dataclasses.replace(
      model, **{name: getattr(data, name) for name in _LENGTH_FIELDS}))
  diffs = []
  for field in dataclasses.fields(seq2seq.Seq2SeqConfig):
    if field.name in INIT_FROM_FREE_FIELDS:
      continue
    # A field added since the run was recorded had its default then.
    old = earlier_model.get(
        field.name,
        None if field.default is dataclasses.MISSING else field.default)
    if old != current[field.name]:
      diffs.append(f'{field.name}: {old!r} -> {current[field.name]!r}')
  if diffs:
    raise errors.CheckpointError(
        f'{path}: the run in {run_dir!r} trained a different model (its '
        f'value -> this run\'s: {"; ".join(diffs)}), so its weights cannot '
        'start this run. Use its model configuration and maximum lengths '
        f'(only {", ".join(INIT_FROM_FREE_FIELDS)} may differ), or start '
        'from another run.')


def _recorded_model(path: str, run_dir: str) -> Mapping[str, Any]:
  """The model of the run's `config.json`, with its data's lengths."""
  try:
    with open(path, encoding='utf-8') as f:
      earlier = json.load(f)[run_dir_lib.EXPERIMENT_KEY]
    earlier_model = dict(earlier['model'])
    earlier_model.update({name: earlier['data'][name]
                          for name in _LENGTH_FIELDS})
  except (OSError, ValueError, LookupError, TypeError) as e:
    raise errors.CheckpointError(
        f'{path}: cannot read the model configuration of the run in '
        f'{run_dir!r} ({type(e).__name__}: {e}); init_from needs the output '
        'directory of a text2sql run.') from e
  return earlier_model


def tokenizer_file(run_dir: str, kind: str, flag: str) -> str:
  """The `kind` tokenizer file of `run_dir`; a `CheckpointError` naming
  `flag` if it has none (e.g. a copy_words run for a subword one)."""
  path = os.path.join(run_dir, TOKENIZER_DIR, _TOKENIZER_FILES[kind])
  if not os.path.isfile(path):
    raise errors.CheckpointError(
        f'{flag}={run_dir}: no {kind} tokenizer ({path} is missing); '
        f'--tokenizer={kind} needs a run that tokenized its data that way.')
  return path


def copy_tokenizer_file(source_file: str, tokenizer_dir: str) -> None:
  """Copies a `tokenizer_file` into a run's `tokenizer_dir`."""
  os.makedirs(tokenizer_dir, exist_ok=True)
  shutil.copyfile(source_file, os.path.join(
      tokenizer_dir, os.path.basename(source_file)))
