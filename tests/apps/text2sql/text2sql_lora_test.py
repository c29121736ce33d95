"""The text-to-SQL experiment with LoRA adapters (`Text2SqlSpec(lora=...)`)
and from a keras-nlp preset (`Text2SqlSpec(init_from_keras_nlp=...)`).

Tiny scale on real data: a one-round centralized run is the "pre-trained"
model; a federated Lorar run fine-tunes rank-2 adapters from it. Checked:
the adapter sizes against a hand count, the per-round bytes (the adapters,
not the model), that the exported checkpoint is the pre-trained model with
only the adapted kernels changed, and the refusals. The same from a tiny
BART preset the test writes (`tests/tiny_bart_preset.py`).
"""

import dataclasses
import functools
import json
import os

import numpy as np
import tensorflow as tf

from tests import shared_runs
from tests import tiny_bart_preset
from tests.apps.text2sql import tiny_text2sql
from tff_nlp import errors
from tff_nlp import training
from apps.text2sql import experiment
from tff_nlp.models import keras_nlp_preset
from tff_nlp.models import lora
from tff_nlp.models import seq2seq
from apps.text2sql import task as text2sql_task
from apps.text2sql import template_parser as text2sql_templates

_DATA = tiny_text2sql.DATA
_MODEL = tiny_text2sql.MODEL
_LORA = lora.LoraConfig(rank=2, seed=0)
# Rank 2 on a d = 16, d_ff = 32 model. Attention: query, key and value
# [16, 2 heads, 8] and output [2, 8, 16] are 16 -> 16 each, r·(16 + 16) =
# 64; three attention layers (encoder self, decoder self and cross) x 4 =
# 768. Feed-forward: 16 -> 32 and 32 -> 16, r·48 = 96 each, 2 layers x 2 =
# 384. In all 1,152.
_ADAPTER_PARAMETERS = 1152


def _run(output_dir, *, rounds, lora_config=None, init_from=None,
         **training_kwargs):
  training_kwargs.setdefault('local_epochs', text2sql_task.PerClient(1))
  training_kwargs.setdefault('batch_sizes', text2sql_task.PerClient(4))
  training_kwargs.setdefault('learning_rates', text2sql_task.PerClient(1e-2))
  return experiment.run_text2sql(
      experiment.Text2SqlSpec(
          data=_DATA, model=_MODEL,
          training=text2sql_task.TrainingConfig(**training_kwargs),
          loop=training.LoopConfig(rounds=rounds, eval_every=rounds,
                                   progress=False),
          init_from=init_from, lora=lora_config),
      data_dir=None, output_dir=str(output_dir))


@functools.cache
def _runs():
  """(pre-trained dir, LoRA dir, LoRA results), once per session."""
  pretrained = shared_runs.temp_dir('pretrained')
  _run(pretrained, rounds=1, paradigm='centralized')
  adapted = shared_runs.temp_dir('lora')
  results = _run(adapted, rounds=2, lora_config=_LORA, init_from=pretrained,
                 paradigm='federated', algorithm='fedavg', weighting='lorar')
  return pretrained, adapted, results


def _checkpoint_weights(run_dir, unit):
  """The run's selected checkpoint, as a plain model's `get_weights()`."""
  return seq2seq.build_keras_model(
      experiment_model_config(run_dir),
      os.path.join(run_dir, experiment.BEST_CHECKPOINT_DIR, unit,
                   experiment.BEST_CHECKPOINT_PREFIX)).get_weights()


def _target_kernel_positions(config):
  """Positions in `get_weights()` of the kernels `_LORA` adapts."""
  model = seq2seq.build_keras_model(config)
  positions = {id(w): i for i, w in enumerate(model.weights)}
  lora.add_lora(model, _LORA)
  return {positions[id(layer.weights[0])]
          for layer, _ in lora.adapted_layers(model)}


def experiment_model_config(run_dir):
  """The run's model config as it trained it (the tokenizer's vocabulary)."""
  with open(os.path.join(run_dir, experiment.RESULTS_FILE)) as f:
    results = json.load(f)
  return seq2seq.Seq2SeqConfig(**{
      **_MODEL.__dict__, 'vocabulary_size': results['vocabulary_size'],
      'max_source_length': _DATA.max_source_length,
      'max_target_length': _DATA.max_target_length})


class Text2SqlLoraTest(tf.test.TestCase):

  def test_records_adapter_sizes(self):
    _, _, results = _runs()
    sizes = results['lora']
    self.assertEqual(sizes['adapter_parameters'], _ADAPTER_PARAMETERS)
    self.assertEqual(sizes['trained_parameters'], _ADAPTER_PARAMETERS)
    self.assertEqual(sizes['base_bytes_once'], 4 * sizes['model_parameters'])
    _, adapted, _ = _runs()
    with open(os.path.join(adapted, 'config.json')) as f:
      recorded = json.load(f)['experiment']['lora']
    self.assertEqual(recorded, {'rank': 2, 'alpha': None,
                                'targets': ['attention', 'feedforward'],
                                'train_layer_norms': False, 'seed': 0})

  def test_rounds_move_only_the_adapters(self):
    _, adapted, results = _runs()
    records = training.read_json_lines(
        os.path.join(adapted, 'federated', 'metrics.jsonl'))
    traffic = records[-1]['communication']
    # Down: the adapters, plus a few scalars (the learning rate, the
    # client configuration); up: their deltas plus round statistics.
    adapter_bytes = 4 * _ADAPTER_PARAMETERS
    self.assertBetween(traffic['bytes_down_per_client'], adapter_bytes,
                       adapter_bytes + 64)
    self.assertBetween(traffic['bytes_up_per_client'], adapter_bytes,
                       adapter_bytes + 256)
    self.assertLess(adapter_bytes * 10,
                    results['lora']['base_bytes_once'])

  def test_export_changes_only_the_adapted_kernels(self):
    pretrained, adapted, _ = _runs()
    before = _checkpoint_weights(pretrained, 'centralized')
    after = _checkpoint_weights(adapted, 'federated')
    self.assertEqual([w.shape for w in before], [w.shape for w in after])
    changed = {i for i, (b, a) in enumerate(zip(before, after))
               if not np.array_equal(b, a)}
    targets = _target_kernel_positions(experiment_model_config(adapted))
    self.assertLen(targets, 16)  # 12 attention + 4 feed-forward kernels
    # Every adapted kernel moved (B left zero after two rounds of Adam);
    # embeddings, biases, LayerNorms and other kernels are the pre-trained.
    self.assertEqual(changed, targets)

  def test_template_parser_refuses_lora(self):
    with self.assertRaisesRegex(errors.InputError, '--lora_rank'):
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_DATA, model=text2sql_templates.TemplateParserConfig(),
              training=text2sql_task.TrainingConfig(),
              loop=training.LoopConfig(rounds=1), lora=_LORA),
          data_dir=None, output_dir=self.create_tempdir().full_path)

  def test_vocab_slices_refuse_lora(self):
    with self.assertRaisesRegex(errors.InputError, 'use one'):
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_DATA, model=_MODEL,
              training=text2sql_task.TrainingConfig(
                  paradigm='federated', algorithm='fedavg',
                  weighting='uniform'),
              loop=training.LoopConfig(rounds=1), vocab_slice_keys=10,
              lora=_LORA),
          data_dir=None, output_dir=self.create_tempdir().full_path)


# The preset's positions hold 12 tokens: the inputs are cut to fit.
_PRESET_DATA = dataclasses.replace(_DATA, max_source_length=12,
                                   max_target_length=12)
# Rank 2 on BART d = 8, d_ff = 16: attention 3 layers x 4 projections x
# r·(8 + 8) = 384; feed-forward 2 layers x 2 x r·(8 + 16) = 192; 576.
_PRESET_ADAPTER_PARAMETERS = 576


@functools.cache
def _preset():
  """(preset dir, its backbone's weights), written once per session."""
  directory = shared_runs.temp_dir('bart_preset')
  backbone, _ = tiny_bart_preset.tiny_preset(directory)
  return directory, backbone


def _preset_run(lora_config, learning_rate):
  output_dir = shared_runs.temp_dir('preset_run')
  results = experiment.run_text2sql(
      experiment.Text2SqlSpec(
          data=_PRESET_DATA, model=_MODEL,
          training=text2sql_task.TrainingConfig(
              paradigm='federated', algorithm='fedavg', weighting='lorar',
              local_epochs=text2sql_task.PerClient(1),
              batch_sizes=text2sql_task.PerClient(4),
              learning_rates=text2sql_task.PerClient(learning_rate)),
          loop=training.LoopConfig(rounds=1, eval_every=1, progress=False),
          init_from_keras_nlp=_preset()[0], lora=lora_config),
      data_dir=None, output_dir=output_dir)
  exported = keras_nlp_preset.build_keras_model(
      _preset()[1].get_config())
  seq2seq.load_checkpoint(exported, os.path.join(
      output_dir, experiment.BEST_CHECKPOINT_DIR, 'federated',
      experiment.BEST_CHECKPOINT_PREFIX))
  return results, exported


class Text2SqlKerasNlpPresetTest(tf.test.TestCase):

  def test_lora_from_the_preset(self):
    results, exported = _preset_run(_LORA, 1e-2)
    self.assertEqual(results['lora']['adapter_parameters'],
                     _PRESET_ADAPTER_PARAMETERS)
    backbone = _preset()[1]
    self.assertEqual(results['lora']['model_parameters'],
                     backbone.count_params())
    self.assertEqual(results['vocabulary_size'], tiny_bart_preset.V)
    # The export: the preset's weights, the adapted kernels moved.
    before = backbone.get_weights()
    after = exported.backbone.get_weights()
    changed = [i for i, (b, a) in enumerate(zip(before, after))
               if not np.array_equal(b, a)]
    self.assertLen(changed, 16)
    for i in changed:
      self.assertGreater(before[i].ndim, 1)

  def test_full_fine_tuning_starts_from_the_preset(self):
    # Learning rate 1e-9: one round moves no weight by more than about
    # 1e-9 (Adam's steps are at most about the learning rate), so the
    # selected model is the start, the preset, not the seeded fresh model.
    _, exported = _preset_run(None, 1e-9)
    fresh = keras_nlp_preset.build_keras_model(_preset()[1].get_config())
    for got, want, other in zip(exported.backbone.get_weights(),
                                _preset()[1].get_weights(),
                                fresh.backbone.get_weights()):
      self.assertAllClose(got, want, atol=1e-6, rtol=0)
      if other.size > 1 and other.std() > 0:
        self.assertNotAllClose(got, other, atol=1e-2)

  def test_refuses_init_from_beside_it(self):
    with self.assertRaisesRegex(errors.InputError, 'takes no --init_from'):
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_PRESET_DATA, model=_MODEL,
              training=text2sql_task.TrainingConfig(),
              loop=training.LoopConfig(rounds=1), init_from='/some/run',
              init_from_keras_nlp=_preset()[0]),
          data_dir=None, output_dir=self.create_tempdir().full_path)


if __name__ == '__main__':
  tf.test.main()
