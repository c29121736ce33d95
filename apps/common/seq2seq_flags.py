"""Flags of a seq2seq model: a preset and overrides of its fields.

Shared by the binaries that train `tff_nlp.models.seq2seq` models
(text-to-SQL, NMT). Not a binary.
"""

from absl import flags

from apps.common import binary as common
from apps.common import config_flags
from tff_nlp.models import seq2seq

MODEL = flags.DEFINE_enum(
    'model', 'small', sorted(seq2seq.PRESETS),
    'Model preset; the flags below override its fields.')
NUM_LAYERS = flags.DEFINE_integer(
    'num_layers', None, 'Encoder and decoder layers each.', lower_bound=1)
# Unset (None): the preset's value.
_OVERRIDES = config_flags.define_config(
    seq2seq.Seq2SeqConfig,
    only=('hidden_dim', 'num_heads', 'intermediate_dim', 'dropout'),
    defaults={'hidden_dim': None, 'num_heads': None,
              'intermediate_dim': None, 'dropout': None},
    specs={
        'hidden_dim': config_flags.Spec('d_model.', lower_bound=1),
        'num_heads': config_flags.Spec('Attention heads.', lower_bound=1),
        'intermediate_dim': config_flags.Spec(
            'Feed-forward width.', lower_bound=1),
    })


def model_config() -> seq2seq.Seq2SeqConfig:
  """The model preset with the flags' overrides."""
  overrides = {
      'num_encoder_layers': NUM_LAYERS.value,
      'num_decoder_layers': NUM_LAYERS.value,
      **_OVERRIDES.values(),
      'seed': common.SEED.value,
  }
  return seq2seq.Seq2SeqConfig.from_preset(
      MODEL.value, **{k: v for k, v in overrides.items() if v is not None})
