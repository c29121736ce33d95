"""Tests of `experiments.text2sql_start` on run directories written here.

A real run directory is read by `pretrain_test` (a finished pre-training
accepted as `init_from`) and by `text2sql_test` (every refusal, through
`run_text2sql`); these cover what a run never writes: no or several
selected models, a missing tokenizer, and a start from scratch.
"""

import os

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import errors
from apps.text2sql import start as text2sql_start
from tff_nlp.models import copy_tokenizer
from tff_nlp.models import subword_tokenizer
from tests.apps.text2sql import tiny_text2sql


class SelectedCheckpointTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('no_folder', None, 'found nothing'),
      ('empty_folder', (), 'found nothing'),
      ('two_models', ('geography', 'imdb'), r"found \['geography', 'imdb'\]"),
  )
  def test_refuses_anything_but_one_selected_model(self, units, message):
    run_dir = self.create_tempdir().full_path
    folder = os.path.join(run_dir, text2sql_start.BEST_CHECKPOINT_DIR)
    if units is not None:
      for unit in units:
        os.makedirs(os.path.join(folder, unit))
      os.makedirs(folder, exist_ok=True)
    with self.assertRaisesRegex(errors.CheckpointError,
                                f'{folder}: expected the selected model of '
                                f'one .*{message}'):
      text2sql_start.selected_checkpoint(run_dir)

  def test_one_selected_model_gives_its_checkpoint_prefix(self):
    run_dir = self.create_tempdir().full_path
    os.makedirs(os.path.join(run_dir, 'best_checkpoint', 'federated'))
    self.assertEqual(text2sql_start.selected_checkpoint(run_dir),
                     os.path.join(run_dir, 'best_checkpoint', 'federated',
                                  'ckpt'))


class TokenizerFileTest(parameterized.TestCase):

  def test_missing_tokenizer_names_the_flag_and_the_file(self):
    run_dir = self.create_tempdir().full_path
    path = os.path.join(run_dir, 'tokenizer', copy_tokenizer.VOCABULARY_FILE)
    with self.assertRaisesRegex(
        errors.CheckpointError,
        f'--tokenizer_from={run_dir}: no copy_words tokenizer '
        fr'\({path} is missing\)'):
      text2sql_start.tokenizer_file(run_dir, 'copy_words', '--tokenizer_from')

  def test_copy_puts_the_file_into_the_tokenizer_folder(self):
    run_dir = self.create_tempdir().full_path
    source = os.path.join(run_dir, 'tokenizer',
                          subword_tokenizer.PROTO_FILENAME)
    os.makedirs(os.path.dirname(source))
    with open(source, 'wb') as f:
      f.write(b'\x00proto bytes')
    found = text2sql_start.tokenizer_file(run_dir, 'subword', '--init_from')
    self.assertEqual(found, source)
    target_dir = os.path.join(self.create_tempdir().full_path, 'tokenizer')
    text2sql_start.copy_tokenizer_file(found, target_dir)
    with open(os.path.join(target_dir, subword_tokenizer.PROTO_FILENAME),
              'rb') as f:
      self.assertEqual(f.read(), b'\x00proto bytes')


class StartingPointTest(tf.test.TestCase, parameterized.TestCase):

  def test_from_scratch_reads_nothing_and_has_no_weights(self):
    start = text2sql_start.starting_point(tiny_text2sql.DATA,
                                          tiny_text2sql.MODEL, seed=0)
    self.assertEqual(start, text2sql_start.StartingPoint())
    self.assertIsNone(start.initial_weights(tiny_text2sql.MODEL, lora=False))

  def test_a_lora_run_takes_no_initial_weights(self):
    # The LoRA parser's model loads the checkpoint by itself; the path is
    # never opened here, so a missing one does not matter.
    start = text2sql_start.StartingPoint(checkpoint='/nowhere/ckpt')
    self.assertIsNone(start.initial_weights(tiny_text2sql.MODEL, lora=True))

  def test_tokenizer_from_a_run_without_one_is_refused_before_anything(self):
    run_dir = self.create_tempdir().full_path
    with self.assertRaisesRegex(errors.CheckpointError,
                                f'--tokenizer_from={run_dir}: no subword'):
      text2sql_start.starting_point(tiny_text2sql.DATA, tiny_text2sql.MODEL,
                                    seed=0, tokenizer_from=run_dir)


if __name__ == '__main__':
  tf.test.main()
