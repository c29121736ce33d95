"""A tiny keras-nlp BART preset, written as `save_to_preset` writes one.

keras-nlp 0.10's `save_to_preset` needs Keras 3, so tests that need a local
preset directory (`keras_nlp_preset.load_preset`, text-to-SQL's
`init_from_keras_nlp`) write one with `write_preset`: the files and contents
that `save_to_preset` writes and `from_preset` reads.
"""

import datetime
import json
import os

import numpy as np
import tensorflow as tf

from tff_nlp.models._keras_nlp import keras_nlp

# A byte-level BPE vocabulary for 'select a from t', BART's specials at 0-3.
TOKENS = (['<s>', '<pad>', '</s>', '<unk>']
          + list('selctafromĠ')
          + ['se', 'sel', 'sele', 'selec', 'select', 'Ġa', 'Ġf', 'Ġfr',
             'Ġfro', 'Ġfrom', 'Ġt'])
VOCABULARY = {token: i for i, token in enumerate(TOKENS)}
MERGES = ['s e', 'se l', 'sel e', 'sele c', 'selec t', 'Ġ a', 'Ġ f', 'Ġf r',
          'Ġfr o', 'Ġfro m', 'Ġ t']
V = len(TOKENS)  # 26
# 1 encoder and 1 decoder layer, d = 8, 2 heads of 4, d_ff 16.
BACKBONE_ARGS = dict(vocabulary_size=V, num_layers=1, num_heads=2,
                     hidden_dim=8, intermediate_dim=16, dropout=0.1,
                     max_sequence_length=12)


def recursive_pop(config, key):
  config.pop(key, None)
  for value in config.values():
    if isinstance(value, dict):
      recursive_pop(value, key)


def serialize(layer):
  """What keras-nlp's `save_serialized_object` writes to a config file."""
  config = tf.keras.saving.serialize_keras_object(layer)
  for key in ('compile_config', 'build_config'):
    recursive_pop(config, key)
  return config


def write_json(path, value):
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=4)


def write_preset(directory, backbone, tokenizer):
  """A preset as keras-nlp's `Backbone/Tokenizer.save_to_preset` write it."""
  os.makedirs(directory, exist_ok=True)
  write_json(os.path.join(directory, 'config.json'), serialize(backbone))
  backbone.save_weights(os.path.join(directory, 'model.weights.h5'))
  import keras  # pylint: disable=g-import-not-at-top
  write_json(os.path.join(directory, 'metadata.json'), {
      'keras_version': keras.__version__,
      'keras_nlp_version': keras_nlp.__version__,
      'parameter_count': backbone.count_params(),
      'date_saved': datetime.datetime.now().strftime('%Y-%m-%d@%H:%M:%S'),
  })
  write_json(os.path.join(directory, 'tokenizer.json'), serialize(tokenizer))
  asset_dir = os.path.join(directory, 'assets', 'tokenizer')
  os.makedirs(asset_dir, exist_ok=True)
  tokenizer.save_assets(asset_dir)


def tiny_preset(directory, seed=3):
  """Writes a tiny BART preset with random weights; returns its parts.

  Returns:
    (the `BartBackbone`, the `BartTokenizer`) written to `directory`.
  """
  backbone = keras_nlp.models.BartBackbone(**BACKBONE_ARGS)
  rng = np.random.default_rng(seed)
  # Random weights everywhere, large enough that outputs differ.
  backbone.set_weights([(rng.normal(size=w.shape) * 0.5).astype(np.float32)
                        for w in backbone.get_weights()])
  tokenizer = keras_nlp.models.BartTokenizer(vocabulary=VOCABULARY,
                                             merges=MERGES)
  write_preset(directory, backbone, tokenizer)
  return backbone, tokenizer
