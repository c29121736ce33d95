"""The NMT task's federated process: the training config reaches the process.

A 1+1-layer Transformer of a 20-id vocabulary on hand-made token ids (no
tokenizer, no data files): what is checked is that
`TrainingConfig.max_weight_share` caps the domains' weights, against shares
derived by hand, and that `TrainingConfig.split_by` decides what dp_l
pulls.
"""

import collections
import dataclasses
import pathlib
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.algorithms import tensor_selection
from tff_nlp.data import nmt
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_layout
from apps.nmt import task as nmt_task
from apps.common import seq2seq_examples

_MODEL = seq2seq.Seq2SeqConfig.from_preset(
    'small', vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
    hidden_dim=8, num_heads=2, intermediate_dim=8, max_source_length=6,
    max_target_length=6)
_LENGTH = 6


def _corpus(num_pairs: int, seed: int) -> nmt_task.EncodedCorpus:
  """`num_pairs` pairs of 4 random word ids then END, padded to 6."""
  rng = np.random.default_rng(seed)
  words = rng.integers(seq2seq.END_ID + 1, _MODEL.vocabulary_size,
                       size=(2, num_pairs, 4), dtype=np.int32)
  end = np.full((num_pairs, 1), seq2seq.END_ID, np.int32)
  pad = np.zeros((num_pairs, 1), np.int32)
  start = np.full((num_pairs, 1), seq2seq.START_ID, np.int32)
  source = np.concatenate([words[0], end, pad], axis=1)
  target = np.concatenate([words[1], end, pad], axis=1)
  decoder = np.concatenate([start, words[1], end], axis=1)
  return nmt_task.EncodedCorpus(
      nmt.ParallelCorpus(('s',) * num_pairs, ('t',) * num_pairs),
      seq2seq_examples.EncodedPairs(
          x=collections.OrderedDict([(seq2seq.ENCODER_TOKEN_IDS, source),
                                     (seq2seq.DECODER_TOKEN_IDS, decoder)]),
          y=target, truncated_sources=0, truncated_targets=0))


def _trainable(weights):
  return [np.asarray(w) for w in weights.trainable]


class FederatedProcessExecutionTest(tf.test.TestCase):

  def test_max_weight_share_caps_the_domains_weights(self):
    # Three domains of 6, 1 and 1 training pairs: dynamic pulling weighs
    # them by size, shares (0.75, 0.125, 0.125). With the cap c = 0.5 the
    # capped shares s_i = min(c, λ·n_i) sum to 1: 0.5 + λ·(1 + 1) = 1, so
    # λ = 0.25 and the shares are (0.5, 0.25, 0.25). In mode 'default' every
    # domain sends every tensor, so the new server model is
    # 0.5·w_0 + 0.25·w_1 + 0.25·w_2 of the domains' trained models.
    task = nmt_task.NmtTask(
        domains=('a', 'b', 'c'), tokenizer=None, generic_domain='a',
        splits={d: {'train': _corpus(n, seed)}
                for seed, (d, n) in enumerate((('a', 6), ('b', 1),
                                               ('c', 1)))})
    training = nmt_task.TrainingConfig(batch_size=2, local_steps=1,
                                       max_weight_share=0.5)
    process = nmt_task.build_federated_process(
        _MODEL, training, num_clients=3, mode='default', change_norm='l2')
    client_data = nmt_task.federated_client_data_fn(task, training, seed=0,
                                                   rounds=1)
    output = process.next(process.initialize(), client_data(1, [0, 1, 2]))
    self.assertAllClose(output.metrics['weight_cap'], collections.OrderedDict(
        max_share_before=0.75, max_share_after=0.5, num_capped=1,
        cap_infeasible=0))
    trained = [_trainable(w)
               for w in process.client_model_weights(output.state)]
    want = [0.5 * a + 0.25 * b + 0.25 * c for a, b, c in zip(*trained)]
    self.assertAllClose(_trainable(process.get_model_weights(output.state)),
                        want, atol=1e-6, rtol=1e-6)
    # The domains trained apart: the capped mean is not the uncapped one.
    uncapped = [0.75 * a + 0.125 * b + 0.125 * c
                for a, b, c in zip(*trained)]
    self.assertNotAllClose(want, uncapped, atol=1e-6, rtol=1e-6)

  def test_split_by_parameters_reaches_the_selection(self):
    # dp_l: each domain pulls the tensors `select_tensors` picks from its
    # change norms (trained minus the initial model, which every domain
    # starts from); by parameters that is at most half of each group's
    # parameters, by tensor count another set (the small tensors).
    task = nmt_task.NmtTask(
        domains=('a', 'b'), tokenizer=None, generic_domain='a',
        splits={d: {'train': _corpus(4, seed)}
                for seed, d in enumerate(('a', 'b'))})
    layout = seq2seq_layout.tensor_layout(_MODEL)
    groups = [t.group for t in layout]
    sizes = [t.num_parameters for t in layout]
    pulled = {}
    for split_by in ('tensors', 'parameters'):
      training = nmt_task.TrainingConfig(batch_size=2, local_steps=1,
                                         split_by=split_by)
      process = nmt_task.build_federated_process(
          _MODEL, training, num_clients=2, mode='dp_l', change_norm='l2')
      state = process.initialize()
      initial = _trainable(process.get_model_weights(state))
      output = process.next(
          state, nmt_task.federated_client_data_fn(
              task, training, 0, rounds=1)(1, [0, 1]))
      expected = 0
      for weights in process.client_model_weights(output.state):
        norms = [np.linalg.norm(w - p)
                 for w, p in zip(_trainable(weights), initial)]
        mask = tensor_selection.select_tensors(
            tf.constant(norms, tf.float32), tf.constant([0, 0], tf.int64),
            mode='dp_l', tensor_groups=groups, split_by=split_by,
            sizes=sizes).numpy()
        expected += int(np.sum(np.array(sizes)[mask]))
      pulled[split_by] = int(output.metrics['parameters_pulled'])
      self.assertEqual(pulled[split_by], expected, msg=split_by)
    budget = sum(sum(s for s, g in zip(sizes, groups) if g == group) // 2
                 for group in set(groups))
    self.assertLessEqual(pulled['parameters'], 2 * budget)
    self.assertGreater(pulled['parameters'], pulled['tensors'])

  def test_split_by_unknown_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'split_by must be one of'):
      nmt_task.TrainingConfig(split_by='bytes')

  def test_max_weight_share_out_of_range_is_refused(self):
    for value in (0.0, 1.5):
      with self.assertRaisesRegex(
          ValueError, r'max_weight_share must be a number in \(0, 1\]'):
        nmt_task.TrainingConfig(max_weight_share=value)


if __name__ == '__main__':
  tf.test.main()


def _batches(client_data):
  return [x[seq2seq.ENCODER_TOKEN_IDS].numpy().tolist()
          for x, _ in client_data['examples']]


class CentralizedRoundsTest(tf.test.TestCase):

  def test_steps_per_round_cuts_the_same_stream_of_epochs(self):
    # 10 pairs in batches of 3: 4 batches an epoch (3+3+3+1), 8 in 2
    # epochs. Rounds of 3 batches: ceil(8/3) = 3 rounds of 3, 3 and 2, and
    # together they are epoch 1 then epoch 2 batch for batch.
    data = _corpus(10, seed=0)
    whole = nmt_task.TrainingConfig(batch_size=3)
    cut = nmt_task.TrainingConfig(batch_size=3, steps_per_round=3)
    self.assertEqual(nmt_task.centralized_rounds(data, whole, epochs=2), 2)
    self.assertEqual(nmt_task.centralized_rounds(data, cut, epochs=2), 3)
    epochs = nmt_task.centralized_client_data_fn(data, whole, seed=7)
    rounds = nmt_task.centralized_client_data_fn(data, cut, seed=7, epochs=2)
    stream = [b for r in (1, 2) for b in _batches(epochs(r, [0])[0])]
    self.assertLen(stream, 8)
    cut_rounds = [_batches(rounds(r, [0])[0]) for r in (1, 2, 3)]
    self.assertEqual([len(r) for r in cut_rounds], [3, 3, 2])
    self.assertEqual([b for r in cut_rounds for b in r], stream)
    with self.assertRaisesRegex(ValueError, 'past the 2 epochs'):
      rounds(4, [0])

  def test_negative_steps_per_round_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'steps_per_round'):
      nmt_task.TrainingConfig(steps_per_round=-1)


def _learning_rate(client_data):
  return float(next(iter(client_data['config']))['learning_rate'])


class LearningRateScheduleTest(parameterized.TestCase):

  @parameterized.parameters(
      # (R - r + 1) / R of 0.01 for R = 4: 0.01, 0.0075, 0.005, 0.0025.
      ('linear', 4, [0.01, 0.0075, 0.005, 0.0025]),
      ('linear', 1, [0.01]),
      ('constant', 3, [0.01, 0.01, 0.01]),
  )
  def test_round_learning_rate(self, schedule, rounds, expected):
    training = nmt_task.TrainingConfig(learning_rate=0.01,
                                       learning_rate_schedule=schedule)
    np.testing.assert_allclose(
        [nmt_task.round_learning_rate(training, r, rounds)
         for r in range(1, rounds + 1)], expected)

  def test_linear_refuses_a_round_outside_the_schedule(self):
    training = nmt_task.TrainingConfig(learning_rate_schedule='linear')
    for round_num in (0, 3):
      with self.assertRaisesRegex(ValueError, 'rounds 1 .. 2'):
        nmt_task.round_learning_rate(training, round_num, 2)

  def test_unknown_schedule_is_refused(self):
    with self.assertRaisesRegex(ValueError, "'cosine'.*constant"):
      nmt_task.TrainingConfig(learning_rate_schedule='cosine')

  def test_centralized_rounds_carry_the_decayed_rate(self):
    # 10 pairs in batches of 3, 2 epochs: 8 batches in rounds of 3, so 3
    # rounds at 0.03 · (3, 2, 1) / 3.
    training = nmt_task.TrainingConfig(
        batch_size=3, steps_per_round=3, learning_rate=0.03,
        learning_rate_schedule='linear')
    rounds = nmt_task.centralized_client_data_fn(
        _corpus(10, seed=0), training, seed=7, epochs=2)
    np.testing.assert_allclose(
        [_learning_rate(rounds(r, [0])[0]) for r in (1, 2, 3)],
        [0.03, 0.02, 0.01], rtol=1e-6)

  def test_federated_rounds_carry_the_decayed_rate(self):
    # 2 rounds at 0.02 · (2, 1) / 2, the same for every client.
    task = nmt_task.NmtTask(
        domains=('a', 'b'), tokenizer=None, generic_domain='a',
        splits={'a': {'train': _corpus(4, 0)}, 'b': {'train': _corpus(3, 1)}})
    training = nmt_task.TrainingConfig(batch_size=2, local_steps=1,
                                       learning_rate=0.02,
                                       learning_rate_schedule='linear')
    client_data = nmt_task.federated_client_data_fn(task, training, seed=0,
                                                    rounds=2)
    for round_num, rate in ((1, 0.02), (2, 0.01)):
      for data in client_data(round_num, [0, 1]):
        self.assertAlmostEqual(
            _learning_rate(data[dynamic_pulling.TRAINING_DATA]), rate, places=6)


class PretrainingConfigsTest(parameterized.TestCase):

  def test_set_settings_replace_the_fine_tuning_ones(self):
    model = seq2seq.Seq2SeqConfig.from_preset('small', dropout=0.0)
    training = nmt_task.TrainingConfig(
        learning_rate=2e-3, learning_rate_schedule='linear',
        pretrain_learning_rate=1e-3,
        pretrain_learning_rate_schedule='constant', pretrain_dropout=0.1)
    pre_model, pre_training = nmt_task.pretraining_configs(model, training)
    self.assertEqual(pre_model, dataclasses.replace(model, dropout=0.1))
    self.assertEqual(pre_training, nmt_task.TrainingConfig(
        learning_rate=1e-3, learning_rate_schedule='constant'))

  def test_unset_settings_keep_the_fine_tuning_ones(self):
    model = seq2seq.Seq2SeqConfig.from_preset('small', dropout=0.0)
    training = nmt_task.TrainingConfig(learning_rate=2e-3,
                                       learning_rate_schedule='linear',
                                       pretrain_learning_rate=1e-3)
    pre_model, pre_training = nmt_task.pretraining_configs(model, training)
    self.assertEqual(pre_model, model)
    self.assertEqual(pre_training.learning_rate, 1e-3)
    self.assertEqual(pre_training.learning_rate_schedule, 'linear')

  @parameterized.parameters(
      ({'pretrain_learning_rate_schedule': 'cosine'},
       "pretrain_learning_rate_schedule 'cosine'"),
      ({'pretrain_learning_rate': 0.0}, 'pretrain_learning_rate must be'),
      ({'pretrain_dropout': 1.0}, r'pretrain_dropout must be in \[0, 1\)'),
      ({'learning_rate': -1.0}, 'learning_rate must be positive'),
  )
  def test_bad_settings_are_refused(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      nmt_task.TrainingConfig(**kwargs)


class ClientWeightsTest(tf.test.TestCase):

  def test_shares_are_training_set_sizes(self):
    # 6, 1 and 1 pairs: shares 6/8, 1/8, 1/8; the generic corpus 'g' (no
    # client) does not count.
    task = nmt_task.NmtTask(
        domains=('a', 'b', 'c'), tokenizer=None, generic_domain='g',
        splits={d: {'train': _corpus(n, 0)}
                for d, n in (('a', 6), ('b', 1), ('c', 1), ('g', 5))})
    self.assertEqual(task.client_weights(), collections.OrderedDict(
        a={'examples': 6, 'share': 0.75}, b={'examples': 1, 'share': 0.125},
        c={'examples': 1, 'share': 0.125}))


def _write_domain(folder, name, pairs=3):
  path = folder / name
  path.mkdir()
  for split in nmt.SPLITS:
    (path / f'{split}.de').write_text(
        ''.join(f'{name} satz {split} {i}\n' for i in range(pairs)))
    (path / f'{split}.en').write_text(
        ''.join(f'{name} sentence {split} {i}\n' for i in range(pairs)))


class GenericCorpusTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.folder = pathlib.Path(self.create_tempdir().full_path)
    for name in ('wmt_news', 'generic', 'mine'):
      _write_domain(self.folder, name)

  def test_a_generic_folder_outside_the_papers_five_is_no_client(self):
    self.assertEqual(
        nmt_task.select_domains(str(self.folder), generic_domain='generic'),
        ('wmt_news', 'mine'))
    # News is the paper's generic domain and one of its clients.
    self.assertEqual(
        nmt_task.select_domains(str(self.folder), generic_domain='wmt_news'),
        ('wmt_news', 'generic', 'mine'))

  def test_prepare_task_loads_the_generic_corpus_beside_the_clients(self):
    data = nmt_task.DataConfig(domains=('wmt_news', 'mine'),
                               generic_domain='generic', vocabulary_size=300,
                               max_length=8)
    task = nmt_task.prepare_task(
        data, data_dir=str(self.folder), seed=0,
        tokenizer_dir=self.create_tempdir().full_path)
    self.assertEqual(task.domains, ('wmt_news', 'mine'))
    self.assertEqual(task.generic_domain, 'generic')
    self.assertCountEqual(task.splits, ['wmt_news', 'mine', 'generic'])
    self.assertEqual(list(task.client_weights()), ['wmt_news', 'mine'])
    self.assertEqual(task.folder, str(self.folder))
    # The tokenizer is trained on the clients' and the generic corpus's
    # training text, both sides: 3 domains x 3 pairs x 2 sides.
    seen = []
    real = nmt_task.subword_tokenizer.load_or_train

    def spy(directory, texts_fn, vocabulary_size, **kwargs):
      seen.extend(texts_fn())
      return real(directory, texts_fn, vocabulary_size, **kwargs)

    with mock.patch.object(nmt_task.subword_tokenizer, 'load_or_train', spy):
      nmt_task.prepare_task(data, data_dir=str(self.folder), seed=0,
                            tokenizer_dir=self.create_tempdir().full_path)
    self.assertLen(seen, 18)
    self.assertIn('generic satz train 0', seen)
    self.assertIn('generic sentence train 2', seen)
    self.assertNotIn('generic satz test 0', seen)


class TrainDatasetSliceTest(tf.test.TestCase):

  def test_a_slice_is_the_repeated_epoch_batch_for_batch(self):
    # 10 pairs in batches of 3: an epoch is 4 batches (the partial one
    # last). Batches 2..8 of the repeated epoch are b2 b3 b0 b1 b2 b3 b0.
    data = _corpus(10, seed=1)
    whole = _batches({'examples': seq2seq_examples.train_dataset(
        data, batch_size=3, shuffle_seed=(5,))})
    self.assertEqual([len(b) for b in whole], [3, 3, 3, 1])
    part = _batches({'examples': seq2seq_examples.train_dataset(
        data, batch_size=3, shuffle_seed=(5,), first_batch=2,
        num_batches=7)})
    self.assertEqual(part, [whole[i % 4] for i in range(2, 9)])
    repeated = _batches({'examples': seq2seq_examples.train_dataset(
        data, batch_size=3, shuffle_seed=(5,)).repeat().take(7)})
    self.assertEqual(_batches({'examples': seq2seq_examples.train_dataset(
        data, batch_size=3, shuffle_seed=(5,), num_batches=7)}), repeated)

  def test_a_corpus_too_large_for_one_round_names_steps_per_round(self):
    data = _corpus(10, seed=1)
    with mock.patch.object(nmt_task, 'MAX_ROUND_BYTES', 100):
      with self.assertRaisesRegex(ValueError, '--steps_per_round'):
        nmt_task.centralized_client_data_fn(
            data, nmt_task.TrainingConfig(batch_size=3), seed=0)
      nmt_task.centralized_client_data_fn(
          data, nmt_task.TrainingConfig(batch_size=3, steps_per_round=2),
          seed=0, epochs=1)
