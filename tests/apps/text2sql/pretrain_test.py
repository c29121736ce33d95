"""Tests of `experiments.pretrain`: a tiny span-corruption pre-training.

References: hand-derived numbers (examples seen = steps x batch, the
initial loss of a near-uniform model = ln V, perplexity = e^loss, the
corpus line counts read here directly), the uninterrupted run for a resumed
one, and text-to-SQL's own `init_from` checks (`text2sql_start`'s
`selected_checkpoint`, `check_init_model`, `tokenizer_file` and
`copy_tokenizer_file`, `prepare_task`, `load_model_weights`) for the run
directory.
"""

import dataclasses
import functools
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp.data import data_root
from apps.text2sql import pretrain
from apps.text2sql import pretrain_corpus
from apps.text2sql import start as text2sql_start
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_model_fn
from tff_nlp.models import span_corruption
from apps.text2sql import task as text2sql_task
from apps.text2sql import task_data as text2sql_task_data

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
_CORPORA = ('nmt_de_en_large/multi30k_captions/train.en',
            'text_classification/trec6/train.tsv')
_DATA = pretrain.DataConfig(
    corpora=_CORPORA, max_texts_per_corpus=200, heldout_texts=40,
    vocabulary_size=500, tokenizer_texts=0, num_sentinels=20,
    max_source_length=32, max_target_length=24)
_MODEL = seq2seq.Seq2SeqConfig.from_preset(
    'small', num_encoder_layers=1, num_decoder_layers=1, hidden_dim=32,
    num_heads=2, intermediate_dim=64)
_TRAINING = pretrain.TrainingConfig(batch_size=16, learning_rate=3e-3,
                                    warmup_steps=5)
_BUDGET = pretrain.BudgetConfig(train_steps=30, eval_every=10,
                                checkpoint_every=10)
_SEED = 3


def _run(output_dir, **budget):
  return pretrain.run_pretrain(
      data_dir=None, output_dir=output_dir, data=_DATA, model=_MODEL,
      training=_TRAINING, budget=dataclasses.replace(_BUDGET, **budget),
      seed=_SEED)


@functools.cache
def _finished_run() -> str:
  output_dir = tempfile.mkdtemp(prefix='pretrain_test_')
  _run(output_dir)
  return output_dir


def _weights(output_dir):
  reader = tf.train.load_checkpoint(os.path.join(
      output_dir, 'best_checkpoint', 'pretrain', 'ckpt'))
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          if 'OBJECT_GRAPH' not in name}


def _read_json(output_dir, name):
  with open(os.path.join(output_dir, name), encoding='utf-8') as f:
    return json.load(f)


class PretrainExecutionTest(tf.test.TestCase):

  def test_layout_names_are_text2sql_init_from_names(self):
    self.assertEqual(pretrain.TOKENIZER_DIR, text2sql_start.TOKENIZER_DIR)
    self.assertEqual(pretrain.BEST_CHECKPOINT_DIR,
                     text2sql_start.BEST_CHECKPOINT_DIR)
    self.assertEqual(pretrain.BEST_CHECKPOINT_PREFIX,
                     text2sql_start.BEST_CHECKPOINT_PREFIX)

  def test_text_length_hand_derived(self):
    # S = 32: L = 31, noise round(4.65) = 5, target <= 11 <= 24.
    self.assertEqual(_DATA.text_length(), 31)
    # T = 5: noise <= 2, so L * 0.15 < 2.5: L = 16 (17 * 0.15 = 2.55 -> 3).
    self.assertEqual(dataclasses.replace(_DATA, max_target_length=5)
                     .text_length(), 16)

  def test_results_hand_derived(self):
    output_dir = _finished_run()
    results = _read_json(output_dir, 'results.json')
    self.assertEqual(results['steps'], 30)
    self.assertEqual(results['stopped_by'], 'steps')
    self.assertEqual(results['examples_seen'], 30 * 16)
    corpus = results['corpus']
    # Whole batches of 16 make an epoch.
    self.assertAllClose(results['epochs'],
                        30 / (corpus['train_examples'] // 16))
    self.assertAllClose(results['heldout_perplexity'],
                        math.exp(results['heldout_loss']))
    # Random tied embeddings of std 0.02: nearly uniform over V = 500.
    self.assertAllClose(math.log(results['initial_heldout_perplexity']),
                        math.log(500), atol=0.1)
    self.assertLess(results['heldout_loss'], math.log(500) - 1.5)
    self.assertEqual(results['vocabulary_size'], 500)
    root = data_root.find_data_dir()
    for count, name in zip(corpus['corpora'], _CORPORA):
      with open(os.path.join(root, name), encoding='utf-8') as f:
        lines = sum(1 for line in f if line.strip())
      self.assertEqual((count['corpus'], count['lines'], count['texts']),
                       (name, lines, 200))
    self.assertEqual(corpus['texts'], 400)
    self.assertEqual(corpus['heldout_texts'], 40)
    history = _read_json(output_dir, 'history.json')
    self.assertEqual([r['step'] for r in history], [0, 10, 20, 30])
    self.assertGreater(history[1]['train_loss'], history[-1]['train_loss'])
    self.assertTrue(os.path.getsize(os.path.join(output_dir,
                                                 'pretrain_loss.png')))

  def test_run_dir_is_accepted_by_text2sql_init_from(self):
    output_dir = _finished_run()
    checkpoint = text2sql_start.selected_checkpoint(output_dir)
    data = text2sql_task.DataConfig(
        clients=('geography',), tokenizer='subword', vocabulary_size=4000,
        max_source_length=32, max_target_length=24, max_train_examples=8,
        max_eval_examples=4)
    # Another seed, dropout and vocabulary_size are free (as in text2sql).
    model = dataclasses.replace(_MODEL, seed=9, dropout=0.3)
    text2sql_start.check_init_model(output_dir, data, model)
    with self.assertRaisesRegex(errors.CheckpointError,
                                r'hidden_dim: 32 -> 64'):
      text2sql_start.check_init_model(output_dir, data, dataclasses.replace(
          model, hidden_dim=64))
    with self.assertRaisesRegex(errors.CheckpointError,
                                r'max_source_length: 32 -> 64'):
      text2sql_start.check_init_model(output_dir, dataclasses.replace(
          data, max_source_length=64), model)
    tokenizer_dir = os.path.join(self.create_tempdir().full_path,
                                 'tokenizer')
    text2sql_start.copy_tokenizer_file(
        text2sql_start.tokenizer_file(output_dir, 'subword', '--init_from'),
        tokenizer_dir)
    task = text2sql_task_data.prepare_task(data, data_dir=None, seed=0,
                                      tokenizer_dir=tokenizer_dir)
    self.assertEqual(task.tokenizer.vocabulary_size(), 500)
    self.assertEqual(task.tokenizer.id_to_token(499), '<extra_id_0>')
    weights = seq2seq_model_fn.load_model_weights(task.model_config(model),
                                                  checkpoint)
    embedding = [w for w in weights.trainable if w.shape == (500, 32)]
    self.assertLen(embedding, 1)
    saved = [v for k, v in _weights(output_dir).items()
             if 'token_embedding' in k and v.shape == (500, 32)]
    self.assertAllEqual(embedding[0], saved[0])

  def test_resume_gives_the_uninterrupted_run(self):
    output_dir = self.create_tempdir().full_path
    first = _run(output_dir, train_steps=20)
    self.assertEqual(first['steps'], 20)
    # A checkpoint write killed half-way leaves a temporary folder.
    os.makedirs(os.path.join(output_dir, 'checkpoints', 'step-30.tmp'))
    resumed = _run(output_dir)
    reference = _finished_run()
    self.assertEqual(resumed['steps'], 30)
    expected, got = _weights(reference), _weights(output_dir)
    self.assertCountEqual(got, expected)
    for name, value in expected.items():
      self.assertAllEqual(got[name], value, msg=name)
    strip = lambda h: [{k: v for k, v in r.items() if k != 'seconds'}
                       for r in h]
    self.assertEqual(strip(_read_json(output_dir, 'history.json')),
                     strip(_read_json(reference, 'history.json')))

  def test_finished_run_is_read_back(self):
    output_dir = _finished_run()
    path = os.path.join(output_dir, 'results.json')
    before = (os.path.getmtime(path), _read_json(output_dir, 'results.json'))
    self.assertEqual(_run(output_dir), before[1])
    self.assertEqual(os.path.getmtime(path), before[0])

  def test_batches_cover_an_epoch_by_length_and_repeat(self):
    rng = np.random.default_rng(1)
    examples = [np.arange(4, 4 + n) for n in rng.integers(2, 40, size=100)]
    batches = pretrain_corpus.Batches(examples, _DATA, 8, _SEED, 500)
    self.assertEqual(batches.batches_per_epoch, 12)  # 100 // 8
    def lengths(step):
      return tuple(np.sum(batches(step)[1] != 0, axis=1))
    epoch = [batches._epoch_batches(0)[i] for i in range(12)]
    seen = np.concatenate(epoch)
    self.assertLen(set(seen.tolist()), 96)  # Each example at most once.
    # One window of 50 batches holds the epoch: sorted by length, so the
    # batches do not overlap in length.
    spans = sorted((min(len(examples[i]) for i in b),
                    max(len(examples[i]) for i in b)) for b in epoch)
    for (_, high), (low, _) in zip(spans, spans[1:]):
      self.assertLessEqual(high, low)
    again = pretrain_corpus.Batches(examples, _DATA, 8, _SEED, 500)
    for step in (0, 13, 30):
      x, y = batches(step)
      x2, y2 = again(step)
      self.assertAllEqual(y, y2)
      self.assertAllEqual(x[seq2seq.ENCODER_TOKEN_IDS],
                          x2[seq2seq.ENCODER_TOKEN_IDS])
    self.assertNotEqual(lengths(0), lengths(12))

  def test_loss_decreases_on_a_repeated_batch(self):
    rng = np.random.default_rng(0)
    sentinels = span_corruption.sentinel_ids(60, 5)
    x, y = span_corruption.pack([span_corruption.corrupt(
        rng.integers(4, 50, size=12), rng, sentinels) for _ in range(8)])
    config = seq2seq.Seq2SeqConfig(
        vocabulary_size=60, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=32, intermediate_dim=64, dropout=0.0,
        max_source_length=16, max_target_length=16)
    trainer = pretrain._Trainer(config, pretrain.TrainingConfig(
        learning_rate=1e-2, warmup_steps=1))
    args = (x[seq2seq.ENCODER_TOKEN_IDS], x[seq2seq.DECODER_TOKEN_IDS], y)
    losses = [float(trainer.train_step(*args, tf.constant(s, tf.int64)))
              for s in range(60)]
    self.assertAllClose(losses[0], math.log(60), atol=0.1)
    self.assertLess(losses[-1], 0.25 * losses[0])

  def test_missing_corpus_names_the_file(self):
    data = dataclasses.replace(_DATA, corpora=('/no/such/corpus.en',))
    with self.assertRaisesRegex(errors.InputError,
                                '/no/such/corpus.en: file not found'):
      pretrain.run_pretrain(
          data_dir=None, output_dir=self.create_tempdir().full_path,
          data=data, model=_MODEL, training=_TRAINING, budget=_BUDGET)

  def test_empty_corpus_names_the_file(self):
    path = self.create_tempfile('empty.en', content='\n  \n').full_path
    data = dataclasses.replace(_DATA, corpora=(path,))
    with self.assertRaisesRegex(errors.InputError,
                                f'{path}: empty corpus'):
      pretrain.run_pretrain(
          data_dir=None, output_dir=self.create_tempdir().full_path,
          data=data, model=_MODEL, training=_TRAINING, budget=_BUDGET)

  def test_too_few_ids_for_the_sentinels_names_the_flag(self):
    # 400 ids: 4 special and 256 bytes leave 140 learned pieces.
    data = dataclasses.replace(_DATA, vocabulary_size=400, num_sentinels=150)
    with self.assertRaisesRegex(
        errors.InputError, r'400 ids of which 140 are learned pieces: too '
        r'few for 150 sentinels.*--vocabulary_size'):
      pretrain.run_pretrain(
          data_dir=None, output_dir=self.create_tempdir().full_path,
          data=data, model=_MODEL, training=_TRAINING, budget=_BUDGET)

  def test_vocabulary_below_the_characters_names_the_flag(self):
    # The texts have more distinct characters than 300 - 260 ids.
    data = dataclasses.replace(_DATA, vocabulary_size=300)
    with self.assertRaisesRegex(
        errors.InputError, r'--vocabulary_size=300: no tokenizer of this '
        r'size .*smaller than required_chars'):
      pretrain.run_pretrain(
          data_dir=None, output_dir=self.create_tempdir().full_path,
          data=data, model=_MODEL, training=_TRAINING, budget=_BUDGET)

  def test_bad_config_names_the_flag(self):
    with self.assertRaisesRegex(errors.InputError, '--max_target_length=2'):
      dataclasses.replace(_DATA, max_target_length=2)
    with self.assertRaisesRegex(errors.InputError, '--noise_density'):
      dataclasses.replace(_DATA, noise_density=1.0)

  def test_binary_bad_input_exits_2_naming_the_file(self):
    done = subprocess.run(
        [sys.executable, '-m', 'apps.text2sql.bin.pretrain_seq2seq',
         '--flagfile=' + os.path.join(
             _REPO, 'apps', 'text2sql', 'flags',
             'pretrain_seq2seq.smoke.flags'),
         '--output_dir=' + self.create_tempdir().full_path,
         '--corpora=/no/such/corpus.en'],
        cwd=_REPO, capture_output=True, text=True, check=False,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
    self.assertEqual(done.returncode, 2, done.stderr)
    self.assertRegex(done.stderr.strip().splitlines()[-1],
                     r'pretrain_seq2seq.*error: /no/such/corpus.en: file '
                     'not found')


if __name__ == '__main__':
  tf.test.main()
