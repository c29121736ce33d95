"""Tests of `seq2seq_layout.tensor_layout` and `controller_mask`."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_layout
from tff_nlp.models import seq2seq_model_fn

# 4 + 3 layers: of the Controllers' layers (0, 3), layer 3 exists in the
# encoder only.
_CONFIG = seq2seq.Seq2SeqConfig(
    vocabulary_size=23, num_encoder_layers=4, num_decoder_layers=3,
    num_heads=2, hidden_dim=8, intermediate_dim=16, dropout=0.0,
    max_source_length=9, max_target_length=7, seed=3)
# Trainable tensors of one layer (pre-LayerNorm keras-nlp layers): an
# encoder layer has q, k, v, output projections (kernel + bias each), two
# LayerNorms (gamma + beta) and two feed-forward Dense layers (kernel + bias);
# a decoder layer has a second (cross-) attention block and a third
# LayerNorm.
_ENCODER_LAYER_TENSORS = 8 + 4 + 4
_DECODER_LAYER_TENSORS = 8 + 8 + 6 + 4


class TensorLayoutExecutionTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.layout = seq2seq_layout.tensor_layout(_CONFIG)
    cls.model = seq2seq.build_keras_model(_CONFIG)

  def test_order_names_and_sizes_follow_the_model(self):
    variables = self.model.trainable_variables
    self.assertEqual([t.name for t in self.layout], [v.name for v in variables])
    self.assertEqual([t.num_parameters for t in self.layout],
                     [int(np.prod(v.shape)) for v in variables])
    self.assertEqual(sum(t.num_parameters for t in self.layout),
                     self.model.count_params())
    # The order of the tff.learning model's trainable weights, too.
    weights = tff.learning.models.ModelWeights.from_model(
        seq2seq_model_fn.build_model_fn(_CONFIG)())
    self.assertEqual([int(np.prod(w.shape)) for w in weights.trainable],
                     [t.num_parameters for t in self.layout])

  def test_groups_and_layers(self):
    counts = collections.Counter((t.group, t.layer) for t in self.layout)
    expected = collections.Counter({
        # token embedding, position embedding, output LayerNorm (2).
        ('encoder', None): 1 + 1 + 2,
        # position embedding, output LayerNorm (2).
        ('decoder', None): 1 + 2,
    })
    for i in range(4):
      expected['encoder', i] = _ENCODER_LAYER_TENSORS
    for i in range(3):
      expected['decoder', i] = _DECODER_LAYER_TENSORS
    self.assertEqual(counts, expected)
    self.assertEqual(
        self.layout[0],
        seq2seq_layout.TensorInfo(
            name=self.model.token_embedding.embeddings.name, group='encoder',
            layer=None, num_parameters=23 * 8))
    # Decoder sublayer variables without the layer's name still belong to it.
    unprefixed = [t for t in self.layout
                  if t.group == 'decoder' and t.layer is not None
                  and 'decoder_layer' not in t.name]
    self.assertNotEmpty(unprefixed)

  def test_token_embedding_group_can_be_chosen(self):
    layout = seq2seq_layout.tensor_layout(_CONFIG,
                                          token_embedding_group='shared')
    self.assertEqual([t.group for t in layout].count('shared'), 1)
    self.assertEqual(layout[0].group, 'shared')
    self.assertEqual(layout[1:], self.layout[1:])

  def test_controller_mask(self):
    mask = seq2seq_layout.controller_mask(self.layout, layers=(0, 3))
    chosen = collections.Counter(
        (t.group, t.layer) for t, m in zip(self.layout, mask) if m)
    # Encoder layers 0 and 3, decoder layer 0 (it has no layer 3).
    self.assertEqual(chosen, collections.Counter({
        ('encoder', 0): _ENCODER_LAYER_TENSORS,
        ('encoder', 3): _ENCODER_LAYER_TENSORS,
        ('decoder', 0): _DECODER_LAYER_TENSORS,
    }))
    self.assertLen(mask, len(self.layout))

  def test_controller_mask_of_missing_layer_raises(self):
    with self.assertRaisesRegex(ValueError, r'layers \[4\] do not exist'):
      seq2seq_layout.controller_mask(self.layout, layers=(0, 4))


if __name__ == '__main__':
  tf.test.main()
