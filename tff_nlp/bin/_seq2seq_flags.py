"""Flags of a seq2seq model: a preset and overrides of its fields.

Shared by the binaries that train `tff_nlp.models.seq2seq` models
(text-to-SQL, NMT). Not a binary.
"""

from absl import flags

from tff_nlp.bin import common
from tff_nlp.models import seq2seq

MODEL = flags.DEFINE_enum(
    'model', 'small', sorted(seq2seq.PRESETS),
    'Model preset; the flags below override its fields.')
NUM_LAYERS = flags.DEFINE_integer(
    'num_layers', None, 'Encoder and decoder layers each.', lower_bound=1)
HIDDEN_DIM = flags.DEFINE_integer(
    'hidden_dim', None, 'd_model.', lower_bound=1)
NUM_HEADS = flags.DEFINE_integer(
    'num_heads', None, 'Attention heads.', lower_bound=1)
INTERMEDIATE_DIM = flags.DEFINE_integer(
    'intermediate_dim', None, 'Feed-forward width.', lower_bound=1)
DROPOUT = flags.DEFINE_float(
    'dropout', None, 'Dropout rate.', lower_bound=0.0, upper_bound=1.0)

def model_config() -> seq2seq.Seq2SeqConfig:
  """The model preset with the flags' overrides."""
  overrides = {
      'num_encoder_layers': NUM_LAYERS.value,
      'num_decoder_layers': NUM_LAYERS.value,
      'hidden_dim': HIDDEN_DIM.value,
      'num_heads': NUM_HEADS.value,
      'intermediate_dim': INTERMEDIATE_DIM.value,
      'dropout': DROPOUT.value,
      'seed': common.SEED.value,
  }
  return seq2seq.Seq2SeqConfig.from_preset(
      MODEL.value, **{k: v for k, v in overrides.items() if v is not None})
