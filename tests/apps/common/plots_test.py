"""Tests of the figures of training runs (`apps.common.plots`)."""

from absl.testing import parameterized
import matplotlib.image
import numpy as np
import tensorflow as tf

from apps.common import plots

# Three rounds of two sampled clients out of three (client 2 skipped in
# round 2, client 0 empty in round 3), as `run_training` records them.
_RECORDS = [
    {'round': 0, 'eval': {'macro_avg': 0.1}},
    {'round': 1, 'client_ids': [0, 2],
     'client_outputs': [{'mean_batch_loss': 2.0, 'num_batches': 3},
                        {'mean_batch_loss': 1.5, 'num_batches': 5}],
     'eval': {'macro_avg': 0.4}},
    {'round': 2, 'client_ids': [0, 1],
     'client_outputs': [{'mean_batch_loss': 1.0, 'num_batches': 3},
                        {'mean_batch_loss': 'nan', 'num_batches': 2}]},
    {'round': 3, 'client_ids': [0, 2],
     'client_outputs': [{'mean_batch_loss': 0.0, 'num_batches': 0},
                        {'mean_batch_loss': 0.5, 'num_batches': 5}],
     'eval': {'macro_avg': 0.7}},
]


# Two Lorar rounds of clients of 30 and 10 examples: weights |D_i|·ΔL_i
# of 30 and 30 (shares 1/2, 1/2), then every ΔL 0, so the round fell back
# to the num_examples weights 30 and 10 (shares 3/4, 1/4).
_WEIGHT_RECORDS = [
    {'round': 1, 'client_ids': [0, 1],
     'client_outputs': [
         {'candidate_weight': 30.0, 'fallback_weight': 30.0,
          'dataset_size': 30.0},
         {'candidate_weight': 30.0, 'fallback_weight': 10.0,
          'dataset_size': 10.0}]},
    {'round': 2, 'client_ids': [0, 1],
     'client_outputs': [
         {'candidate_weight': 0.0, 'fallback_weight': 30.0,
          'dataset_size': 30.0},
         {'candidate_weight': 0.0, 'fallback_weight': 10.0,
          'dataset_size': 10.0}]},
]


class PlotsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_metric_series_takes_records_that_have_the_metric(self):
    self.assertEqual(plots.metric_series(_RECORDS, 'eval/macro_avg'),
                     ([0, 1, 3], [0.1, 0.4, 0.7]))
    self.assertEqual(plots.metric_series(_RECORDS, 'eval/missing'), ([], []))

  @parameterized.parameters([
      # A flat key holding '/' (as nmt's 'dev_bleu/avg'), found from the path.
      ({'eval': {'dev_bleu/avg': 0.31}}, 'eval/dev_bleu/avg', 0.31),
      # Nested keys, as before.
      ({'eval': {'dev_bleu': {'avg': 0.05}}}, 'eval/dev_bleu/avg', 0.05),
      # The longest key wins where both exist.
      ({'a': {'b/c': 1.0, 'b': {'c': 2.0}}}, 'a/b/c', 1.0),
      ({'a/b': {'c': 3.0}}, 'a/b/c', 3.0),
  ])
  def test_lookup_finds_flat_keys_with_slashes(self, record, metric, expected):
    self.assertEqual(plots.lookup(record, metric), expected)
    self.assertEqual(plots.metric_series([dict(record, round=4)], metric),
                     ([4], [expected]))

  @parameterized.parameters([
      ({'eval': {'dev_bleu/avg': 0.31}}, 'eval/dev_bleu'),
      ({'eval': {'dev_bleu/avg': 0.31}}, 'eval/dev_bleu/avg/x'),
      ({'eval': 0.3}, 'eval/x'),
      ({}, 'eval'),
  ])
  def test_lookup_of_an_absent_metric_is_a_key_error(self, record, metric):
    with self.assertRaises(KeyError):
      plots.lookup(record, metric)

  def test_client_loss_series_counts_each_clients_own_steps(self):
    series = plots.client_loss_series(_RECORDS)
    # Client 0: 3 steps, then 3 more (6); its empty round 3 adds no point.
    self.assertEqual(series[0], ([3.0, 6.0], [2.0, 1.0]))
    # Client 2 skipped round 2: its steps go 5, 10.
    self.assertEqual(series[2], ([5.0, 10.0], [1.5, 0.5]))
    steps, losses = series[1]
    self.assertEqual(steps, [2.0])
    self.assertTrue(np.isnan(losses[0]))  # Non-finite stays visible.

  def test_client_weight_shares_by_hand(self):
    shares, sizes = plots.client_weight_shares(_WEIGHT_RECORDS)
    self.assertEqual(shares,
                     {0: ([1, 2], [0.5, 0.75]), 1: ([1, 2], [0.5, 0.25])})
    self.assertEqual(sizes, {0: 0.75, 1: 0.25})

  def test_client_weight_shares_take_the_applied_weight(self):
    # With `weight` recorded (the weight the round applied), it decides:
    # 10 and 30 are shares 1/4 and 3/4 whatever the candidates say.
    records = [{'round': 1, 'client_ids': [0, 1], 'client_outputs': [
        dict(o, weight=w) for o, w in
        zip(_WEIGHT_RECORDS[0]['client_outputs'], (10.0, 30.0))]}]
    shares, _ = plots.client_weight_shares(records)
    self.assertEqual(shares, {0: ([1], [0.25]), 1: ([1], [0.75])})

  def test_client_batch_loss_series_numbers_every_local_step(self):
    records = [
        {'round': 1, 'client_ids': [0, 2], 'client_outputs': [
            {'num_batches': 2, 'batch_losses': [3.0, 2.5]},
            {'num_batches': 1, 'batch_losses': [4.0]}]},
        # Client 0 recorded without batch losses (an older run): its 3 steps
        # are counted, not drawn.
        {'round': 2, 'client_ids': [0, 1], 'client_outputs': [
            {'num_batches': 3},
            {'num_batches': 0, 'batch_losses': []}]},
        {'round': 3, 'client_ids': [0, 2], 'client_outputs': [
            {'num_batches': 2, 'batch_losses': [1.0, 'nan']},
            {'num_batches': 2, 'batch_losses': [2.0, 1.5]}]},
    ]
    series = plots.client_batch_loss_series(records)
    self.assertEqual(series[0][0], [1, 2, 6, 7])
    self.assertEqual(series[0][1][:3], [3.0, 2.5, 1.0])
    self.assertTrue(np.isnan(series[0][1][3]))
    self.assertEqual(series[1], ([], []))  # Took part, trained no step.
    self.assertEqual(series[2], ([1, 2, 3], [4.0, 2.0, 1.5]))

  @parameterized.named_parameters(
      ('client_weight_shares',
       lambda path: plots.plot_client_weight_shares(
           {'FedAvg + Lorar': plots.client_weight_shares(_WEIGHT_RECORDS)},
           path)),
      ('client_training_loss',
       lambda path: plots.plot_client_training_loss(
           {'lorar': plots.client_loss_series(_RECORDS),
            'uniform': plots.client_loss_series(_RECORDS[:2])}, path)),
      ('metric_by_round',
       lambda path: plots.plot_metric_by_round(
           {'lorar': plots.metric_series(_RECORDS, 'eval/macro_avg'),
            'uniform': ([0, 3], [0.1, 0.5])}, path, y_label='MacroAvg')),
  )
  def test_writes_a_png(self, draw):
    path = self.create_tempfile('figure.png').full_path
    draw(path)
    image = matplotlib.image.imread(path)
    self.assertEqual(image.ndim, 3)
    self.assertGreater(image.shape[0], 200)
    self.assertGreater(image.shape[1], 200)
    self.assertGreater(image[..., :3].std(), 0.01)  # Not a blank canvas.


if __name__ == '__main__':
  tf.test.main()
