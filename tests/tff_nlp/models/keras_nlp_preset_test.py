"""Tests of `keras_nlp_preset`: a local BART preset in the project's ids.

The test writes a tiny keras-nlp BART preset itself (keras-nlp 0.10's
`save_to_preset` needs Keras 3), with the files and contents that
`save_to_preset` writes and `from_preset` reads. References: the weights
written, the plain keras-nlp `BartBackbone` call followed by a numpy tied
projection and the id permutation written out by hand, BPE tokenizations
derived by hand from the vocabulary and merges, and LoRA adapter counts
derived by hand.
"""

import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny_bart_preset
from tff_nlp import errors
from tff_nlp.models import keras_nlp_preset
from tff_nlp.models import lora
from tff_nlp.models import lora_model_fn
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_decoding
from tff_nlp.models import seq2seq_inputs
from tff_nlp.models import seq2seq_loss
from tff_nlp.models._keras_nlp import keras_nlp

_I32 = np.int32

def _inputs(encoder_ids, decoder_ids):
  return {seq2seq.ENCODER_TOKEN_IDS: np.asarray(encoder_ids, _I32),
          seq2seq.DECODER_TOKEN_IDS: np.asarray(decoder_ids, _I32)}


# Project ids (PAD 0, UNK 1, START 2, END 3): sources end with END, decoder
# inputs start with START, 0 pads.
_X = _inputs([[5, 6, 7, 3, 0, 0], [8, 9, 10, 11, 12, 3]],
             [[2, 13, 14, 0], [2, 15, 1, 17]])
# The same in BART ids (<s> 0, <pad> 1, </s> 2, <unk> 3), by hand.
_BART_ENCODER = np.array([[5, 6, 7, 2, 1, 1], [8, 9, 10, 11, 12, 2]], _I32)
_BART_DECODER = np.array([[0, 13, 14, 1], [0, 15, 3, 17]], _I32)


class KerasNlpPresetTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.backbone = keras_nlp.models.BartBackbone(**tiny_bart_preset.BACKBONE_ARGS)
    rng = np.random.default_rng(3)
    # Random weights everywhere, large enough that outputs differ.
    cls.backbone.set_weights(
        [(rng.normal(size=w.shape) * 0.5).astype(np.float32)
         for w in cls.backbone.get_weights()])
    # (name, value) in the backbone's order (names repeat across layers).
    cls.written = [(w.name, w.numpy()) for w in cls.backbone.weights]
    cls.tokenizer = keras_nlp.models.BartTokenizer(
        vocabulary=tiny_bart_preset.VOCABULARY, merges=tiny_bart_preset.MERGES)
    cls.preset_dir = os.path.join(
        tf.compat.v1.test.get_temp_dir(), 'bart_tiny')
    tiny_bart_preset.write_preset(cls.preset_dir, cls.backbone, cls.tokenizer)
    cls.model, cls.adapter = keras_nlp_preset.load_preset(cls.preset_dir)

  def _copy_preset(self):
    directory = os.path.join(self.create_tempdir().full_path, 'preset')
    tiny_bart_preset.write_preset(directory, self.backbone, self.tokenizer)
    return directory

  def _reference_logits(self, encoder_ids, decoder_ids):
    """Plain keras-nlp backbone + numpy tied projection, BART ids."""
    outputs = self.backbone({
        'encoder_token_ids': encoder_ids,
        'encoder_padding_mask': (encoder_ids != 1).astype(_I32),
        'decoder_token_ids': decoder_ids,
        'decoder_padding_mask': (decoder_ids != 1).astype(_I32),
    }, training=False)
    hidden = outputs['decoder_sequence_output'].numpy()
    embeddings = self.written[0][1]
    self.assertEqual(self.written[0][0], 'token_embedding/embeddings:0')
    return hidden @ embeddings.T

  def test_loads_bart_with_written_weights(self):
    self.assertIsInstance(self.model, keras_nlp_preset.BartSeq2Seq)
    self.assertIsInstance(self.model.backbone, keras_nlp.models.BartBackbone)
    self.assertIsNot(self.model.backbone, self.backbone)
    loaded = self.model.backbone.weights
    self.assertLen(loaded, len(self.written))
    for w, (name, value) in zip(loaded, self.written):
      self.assertEqual(w.name, name)
      self.assertAllEqual(w.numpy(), value, msg=name)
    # The wrapper owns no weights of its own: the head is tied.
    self.assertEqual([w.name for w in self.model.weights],
                     [w.name for w in loaded])
    self.assertEqual(self.model.config.vocabulary_size, tiny_bart_preset.V)
    self.assertEqual(self.model.config.max_target_length, 12)
    self.assertEqual(self.adapter.vocabulary_size(), tiny_bart_preset.V)

  def test_id_permutation_by_hand(self):
    self.assertAllEqual(
        keras_nlp_preset.to_bart_ids(_X[seq2seq.ENCODER_TOKEN_IDS]),
        _BART_ENCODER)
    self.assertAllEqual(
        keras_nlp_preset.to_bart_ids(_X[seq2seq.DECODER_TOKEN_IDS]),
        _BART_DECODER)
    self.assertAllEqual(keras_nlp_preset.to_project_ids(_BART_DECODER),
                        _X[seq2seq.DECODER_TOKEN_IDS])
    logits = np.arange(2 * 6, dtype=np.float32).reshape(2, 6)
    self.assertAllEqual(keras_nlp_preset.to_project_logits(logits),
                        [[1, 3, 0, 2, 4, 5], [7, 9, 6, 8, 10, 11]])

  def test_logits_equal_backbone_with_tied_projection(self):
    bart = self._reference_logits(_BART_ENCODER, _BART_DECODER)
    # Project id p scores BART id (1, 3, 0, 2)[p] for p < 4, else p.
    expected = np.concatenate(
        [bart[..., 1:2], bart[..., 3:4], bart[..., 0:1], bart[..., 2:3],
         bart[..., 4:]], axis=-1)
    logits = self.model(_X, training=False)
    self.assertEqual(logits.shape, (2, 4, tiny_bart_preset.V))
    self.assertAllClose(logits, expected, atol=1e-5, rtol=1e-5)
    # encode + decode is call.
    encoder_output, mask = self.model.encode(
        _X[seq2seq.ENCODER_TOKEN_IDS], training=False)
    self.assertAllEqual(mask, _X[seq2seq.ENCODER_TOKEN_IDS] != 0)
    self.assertAllClose(
        self.model.decode(_X[seq2seq.DECODER_TOKEN_IDS], encoder_output,
                          mask, training=False), logits, atol=1e-6)

  def test_graph_mode_and_masked_loss(self):
    logits = self.model(_X, training=False).numpy()
    graph_logits = tf.function(
        lambda x: self.model(x, training=False))(_X)
    self.assertAllClose(graph_logits, logits, atol=1e-5)
    # The project's loss masks label 0 (project PAD): the mean of -log p
    # over the labels != 0, by numpy.
    labels = np.array([[13, 14, 3, 0], [15, 1, 17, 3]], _I32)
    loss = seq2seq_loss.MaskedSparseCategoricalCrossentropy()(labels, logits)
    log_p = logits - np.log(np.sum(np.exp(logits), -1, keepdims=True))
    picked = np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    self.assertAllClose(loss, -np.mean(picked[labels != 0]), atol=1e-5)

  def test_padding_changes_no_token_position(self):
    logits = self.model(_X, training=False).numpy()
    padded = _inputs(np.pad(_X[seq2seq.ENCODER_TOKEN_IDS], [[0, 0], [0, 3]]),
                     np.pad(_X[seq2seq.DECODER_TOKEN_IDS], [[0, 0], [0, 2]]))
    padded_logits = self.model(padded, training=False).numpy()
    tokens = _X[seq2seq.DECODER_TOKEN_IDS] != 0
    self.assertAllClose(padded_logits[:, :4][tokens], logits[tokens],
                        atol=1e-5, rtol=1e-5)

  def test_decode_step_matches_teacher_forcing(self):
    logits = self.model(_X, training=False).numpy()
    encoder_ids = tf.constant(_X[seq2seq.ENCODER_TOKEN_IDS])
    encoder_output, mask = self.model.encode(encoder_ids, training=False)
    cache = self.model.initial_cache(2, 4, 6)
    decoder_ids = _X[seq2seq.DECODER_TOKEN_IDS]
    for index in range(4):
      step_logits, cache = self.model.decode_step(
          decoder_ids[:, index], index, encoder_output, mask, cache,
          fill_cross_attention_cache=index == 0)
      rows = decoder_ids[:, index] != 0
      self.assertAllClose(step_logits.numpy()[rows], logits[rows, index],
                          atol=1e-5, rtol=1e-5)
    # The project's greedy search runs on it: START is never generated.
    output = seq2seq_decoding.greedy_decode(self.model, encoder_ids,
                                            max_length=5)
    self.assertEqual(output.token_ids.shape[0], 2)
    self.assertNotIn(seq2seq.START_ID, output.token_ids.numpy())

  def test_tokenizer_round_trip_and_special_ids(self):
    ids = self.adapter.tokenize(['select a from t', 'select'])
    self.assertIsInstance(ids, tf.RaggedTensor)
    self.assertEqual(ids.dtype, tf.int32)
    # BPE by hand: 'select', 'Ġa', 'Ġfrom', 'Ġt'.
    self.assertAllEqual(ids.to_list(), [[19, 20, 24, 25], [19]])
    self.assertEqual(self.adapter.detokenize(ids).numpy().tolist(),
                     [b'select a from t', b'select'])
    # BART's specials come out as the project's; unknown bytes as UNK.
    # (keras-nlp 0.10 reads the text '</s>' as '<s>': not tested.)
    self.assertAllEqual(self.adapter.tokenize('<s>select<pad>'), [2, 19, 0])
    self.assertAllEqual(self.adapter.tokenize('select z'), [19, 14, 1])
    # detokenize drops the special ids and padding (dense input).
    self.assertEqual(
        self.adapter.detokenize([[2, 19, 20, 3, 0], [1, 19, 0, 0, 0]])
        .numpy().tolist(), [b'select a', b'select'])
    self.assertEqual(self.adapter.detokenize([19, 3]).numpy(), b'select')
    self.assertEqual(
        (self.adapter.pad_token_id, self.adapter.unk_token_id,
         self.adapter.start_token_id, self.adapter.end_token_id),
        (seq2seq.PAD_ID, seq2seq.UNK_ID, seq2seq.START_ID, seq2seq.END_ID))
    self.assertEqual(self.adapter.token_to_id('<pad>'), 0)
    self.assertEqual(self.adapter.token_to_id('<s>'), 2)
    self.assertEqual(self.adapter.id_to_token(3), '</s>')
    self.assertEqual(self.adapter.id_to_token(1), '<unk>')
    self.assertEqual(self.adapter.id_to_token(19), 'select')

  def test_lora_adapts_attention_and_feedforward(self):
    model, _ = keras_nlp_preset.load_preset(self.preset_dir)
    before = model(_X, training=False)
    adapters = lora.add_lora(model, lora.LoraConfig(rank=2))
    # Encoder layer: self-attention q, k, v, output + 2 feed-forward Dense;
    # decoder layer: self- and cross-attention (4 each) + 2 Dense.
    self.assertLen(adapters, 6 + 10)
    # Attention projections are 8 x 8: 2 * (8 + 8) = 32 each, 12 of them;
    # feed-forward 8 x 16 and 16 x 8: 2 * 24 = 48 each, 4 of them.
    count = lora.lora_parameter_count(model)
    self.assertEqual(count.adapters, 12 * 32 + 4 * 48)
    self.assertEqual(count.trainable, count.adapters)
    self.assertLen(model.trainable_weights, 2 * 16)
    self.assertEqual(count.total, model.backbone.count_params()
                     + count.adapters)
    # B starts at zero: the outputs are unchanged.
    self.assertAllClose(model(_X, training=False), before, atol=1e-6)
    # Gradients of the project's loss reach every factor B.
    labels = np.array([[13, 14, 3, 0], [15, 1, 17, 3]], _I32)
    with tf.GradientTape() as tape:
      loss = seq2seq_loss.MaskedSparseCategoricalCrossentropy()(
          labels, model(_X, training=False))
    gradients = tape.gradient(loss, model.trainable_weights)
    for b in gradients[1::2]:
      self.assertGreater(float(tf.reduce_max(tf.abs(b))), 0.0)

  def test_lora_model_fn_starts_from_the_preset(self):
    base = self.model.get_weights()
    model_fn = lora_model_fn.LoraModelFn(
        lambda: keras_nlp_preset.build_keras_model(
            self.model.backbone.get_config(), seed=1),
        lora.LoraConfig(rank=2), base,
        lambda m: tff.learning.models.from_keras_model(
            m, loss=seq2seq_loss.masked_loss(),
            input_spec=seq2seq_inputs.input_spec()))
    self.assertEqual(model_fn.parameter_count.adapters, 12 * 32 + 4 * 48)
    keras_model = model_fn.keras_model()
    self.assertAllClose(keras_model(_X, training=False),
                        self.model(_X, training=False), atol=1e-5)
    tff_model = model_fn()
    self.assertLen(tff_model.trainable_variables, 2 * 16)
    self.assertEmpty(tff_model.non_trainable_variables)
    # Without the base weights: the seeded initial weights, not the preset's.
    fresh = keras_nlp_preset.build_keras_model(
        self.model.backbone.get_config(), seed=1)
    again = keras_nlp_preset.build_keras_model(
        self.model.backbone.get_config(), seed=1)
    self.assertAllEqual(fresh.get_weights()[0], again.get_weights()[0])
    self.assertNotAllClose(fresh.get_weights()[0], base[0])

  def test_get_config_round_trip(self):
    config = self.model.get_config()
    clone = keras_nlp_preset.BartSeq2Seq.from_config(
        json.loads(json.dumps(config)))
    self.assertEqual(clone.backbone.get_config(),
                     self.model.backbone.get_config())

  def test_missing_config_names_the_file(self):
    directory = self._copy_preset()
    os.remove(os.path.join(directory, 'config.json'))
    with self.assertRaisesRegex(errors.InputError,
                                f'{directory}/config.json is missing'):
      keras_nlp_preset.load_preset(directory)

  def test_missing_merges_names_the_file(self):
    directory = self._copy_preset()
    os.remove(os.path.join(directory, 'assets', 'tokenizer', 'merges.txt'))
    with self.assertRaisesRegex(errors.InputError, 'merges.txt is missing'):
      keras_nlp_preset.load_preset(directory)

  def test_other_class_names_file_and_class(self):
    directory = self._copy_preset()
    path = os.path.join(directory, 'config.json')
    with open(path, encoding='utf-8') as f:
      config = json.load(f)
    config.update(class_name='GPT2Backbone',
                  registered_name='keras_nlp>GPT2Backbone')
    tiny_bart_preset.write_json(path, config)
    with self.assertRaisesRegex(
        errors.InputError, f"{path} describes a 'keras_nlp>GPT2Backbone'"):
      keras_nlp_preset.load_preset(directory)

  def test_weights_of_another_shape_name_the_file(self):
    directory = self._copy_preset()
    path = os.path.join(directory, 'config.json')
    with open(path, encoding='utf-8') as f:
      config = json.load(f)
    config['config']['hidden_dim'] = 16
    tiny_bart_preset.write_json(path, config)
    with self.assertRaisesRegex(
        errors.InputError, f'{directory}/model.weights.h5'):
      keras_nlp_preset.load_preset(directory)

  def test_bad_json_names_the_file(self):
    directory = self._copy_preset()
    path = os.path.join(directory, 'tokenizer.json')
    with open(path, 'w', encoding='utf-8') as f:
      f.write('{not json')
    with self.assertRaisesRegex(errors.InputError,
                                f'Cannot read the JSON file {path}'):
      keras_nlp_preset.load_preset(directory)

  def test_vocabulary_without_bart_specials_is_refused(self):
    tokenizer = keras_nlp.models.BartTokenizer(
        vocabulary={'<pad>': 0, '<s>': 1, '</s>': 2, '<unk>': 3, 'a': 4,
                    'b': 5, 'ab': 6},
        merges=['a b'])
    with self.assertRaisesRegex(errors.InputError, 'at ids 0-3'):
      keras_nlp_preset.BartTokenizerAdapter(tokenizer)


if __name__ == '__main__':
  tf.test.main()
