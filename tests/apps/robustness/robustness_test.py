"""The attack benchmark: the attacked client work, defences, shares, a run.

Numbers are checked against the unwrapped client work (the honest
computation) and hand-derived values; the end-to-end case runs a tiny grid
of the linear regression in seconds and checks the reports' fields.
"""

import collections
import json
import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tff_nlp import algorithms
from tff_nlp import templates
from tff_nlp import aggregators
from apps.robustness import attacks
from apps.robustness import benchmark as robustness
from apps.robustness import report as robustness_report
from apps.robustness import tasks as robustness_tasks

_LEARNING_RATE = 0.05


def _client_work(weighting, client_outputs=False):
  return templates.build_weighted_client_work(
      linear_model.model_fn,
      optimizer=tff.learning.optimizers.build_sgdm(_LEARNING_RATE),
      weighting=aggregators.Weighting(weighting),
      client_outputs=client_outputs)


def _initial_weights():
  model = linear_model.model_fn()
  return tff.learning.models.ModelWeights.from_model(model)


def _datasets():
  return [linear_model.to_dataset(c) for c in linear_model.three_clients()]


# Client 0 honest, client 1 sends -3 times its update, client 2 claims 5
# times its examples.
_ATTACKS = (attacks.HONEST,
            attacks.Attack('negated', update_scale=-3.0),
            attacks.Attack('count', weight_scale=5.0))


class AttackedClientWorkComputationTest(tf.test.TestCase,
                                        parameterized.TestCase):

  @parameterized.named_parameters(('plain', False),
                                  ('client_outputs', True))
  def test_type_signature(self, client_outputs):
    inner = _client_work('lorar', client_outputs)
    wrapped = attacks.build_attacked_client_work(inner, 'lorar')
    self.assertIsInstance(wrapped, tff.learning.templates.ClientWorkProcess)
    state_type, weights_type, data_type = wrapped.next.type_signature.parameter
    inner_parameter = inner.next.type_signature.parameter
    self.assertEqual(state_type, inner_parameter[0])
    self.assertEqual(weights_type, inner_parameter[1])
    self.assertEqual(
        str(data_type),
        '{<examples=<float32[?,3],float32[?,1]>*,'
        'attack=<update_scale=float32,weight_scale=float32>*>}@CLIENTS')
    self.assertEqual(wrapped.next.type_signature.result,
                     inner.next.type_signature.result)
    self.assertEqual(wrapped.initialize.type_signature,
                     inner.initialize.type_signature)

  def test_rejects_other_client_work(self):
    with self.assertRaisesRegex(TypeError, 'client_work'):
      attacks.build_attacked_client_work(object(), 'lorar')

  @parameterized.named_parameters(('plain', False),
                                  ('client_outputs', True))
  def test_process_type_matches_build_fl_process(self, client_outputs):
    process = attacks.build_attacked_process(
        linear_model.model_fn, weighting='num_examples',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(
            _LEARNING_RATE),
        model_aggregator=attacks.build_defence('none'),
        client_outputs=client_outputs)
    reference = algorithms.build_fl_process(
        linear_model.model_fn, algorithm='fedavg', weighting='num_examples',
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(
            _LEARNING_RATE),
        client_outputs=client_outputs)
    self.assertEqual(isinstance(process, algorithms.FLProcess),
                     client_outputs)
    self.assertEqual(process.initialize.type_signature,
                     reference.initialize.type_signature)
    self.assertEqual(process.next.type_signature.result,
                     reference.next.type_signature.result)


class AttackedClientWorkExecutionTest(tf.test.TestCase,
                                      parameterized.TestCase):

  @parameterized.named_parameters(
      ('num_examples', 'num_examples', 5.0),
      ('uniform', 'uniform', 1.0),  # |D_i| is not in a uniform weight.
      ('lorar', 'lorar', 5.0),
  )
  def test_scales_exactly_and_keeps_honest_clients(self, weighting,
                                                   count_factor):
    inner = _client_work(weighting)
    wrapped = attacks.build_attacked_client_work(inner, weighting)
    state = inner.initialize()
    weights = [_initial_weights()] * 3
    honest = inner.next(state, weights, _datasets()).result
    attacked = wrapped.next(
        state, weights,
        [attacks.attacked_client_data(d, a)
         for d, a in zip(_datasets(), _ATTACKS)]).result
    update_factors = (1.0, -3.0, 1.0)
    weight_factors = (1.0, 1.0, count_factor)
    for h, a, u, w in zip(honest, attacked, update_factors, weight_factors):
      for h_part, a_part in zip(tf.nest.flatten(h.update),
                                tf.nest.flatten(a.update)):
        self.assertAllClose(a_part, u * np.asarray(h_part), rtol=1e-6)
      self.assertAllClose(a.update_weight, w * h.update_weight, rtol=1e-6)
    # The honest client is bit-for-bit the unwrapped client work's.
    for a_part, h_part in zip(tf.nest.flatten(attacked[0].update),
                              tf.nest.flatten(honest[0].update)):
      self.assertAllEqual(a_part, h_part)
    self.assertEqual(attacked[0].update_weight, honest[0].update_weight)

  def test_client_outputs_report_the_weight_sent(self):
    wrapped = attacks.build_attacked_client_work(
        _client_work('num_examples', client_outputs=True), 'num_examples')
    outputs = wrapped.next(
        wrapped.initialize(), [_initial_weights()] * 3,
        [attacks.attacked_client_data(d, a)
         for d, a in zip(_datasets(), _ATTACKS)]).client_outputs
    # |D_i| = 7, 4, 10 examples; client 2 claims 5·10.
    self.assertAllClose([o['weight'] for o in outputs], [7.0, 4.0, 50.0])
    self.assertAllClose([o['dataset_size'] for o in outputs],
                        [7.0, 4.0, 10.0])

  def test_honest_process_equals_build_fl_process(self):
    optimizer = tff.learning.optimizers.build_sgdm(_LEARNING_RATE)
    # The benchmark's process (per-client outputs) against the default.
    process = attacks.build_attacked_process(
        linear_model.model_fn, weighting='lorar',
        client_optimizer_fn=optimizer,
        model_aggregator=attacks.build_defence('none'),
        client_outputs=True)
    reference = algorithms.build_fl_process(
        linear_model.model_fn, algorithm='fedavg', weighting='lorar',
        client_optimizer_fn=optimizer)
    state = process.next(
        process.initialize(),
        [attacks.attacked_client_data(d, attacks.HONEST)
         for d in _datasets()]).state
    reference_state = reference.next(reference.initialize(),
                                     _datasets()).state
    self.assertAllClose(
        process.get_model_weights(state).trainable,
        reference.get_model_weights(reference_state).trainable, rtol=1e-6)


class DefenceAndShareExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('none', 'none', tff.aggregators.MeanFactory),
      ('cap', 'cap', aggregators.WeightShareCapFactory),
      ('both', 'both', aggregators.WeightShareCapFactory),
      ('trimmed', 'trimmed', aggregators.TrimmedMeanFactory),
      ('cap_trimmed', 'cap_trimmed', aggregators.WeightShareCapFactory),
  )
  def test_defence_factories(self, defence, factory_type):
    self.assertIsInstance(attacks.build_defence(defence, max_share=0.25),
                          factory_type)

  def test_bad_defence_names_the_argument(self):
    with self.assertRaisesRegex(ValueError, 'defence'):
      attacks.build_defence('median')
    with self.assertRaisesRegex(ValueError, 'max_share'):
      attacks.build_defence('cap')

  def test_attacker_shares(self):
    # Weights 8, 1, 1: uncapped the attacker has 8/10. Capped at 1/2 (above
    # 1/3, so feasible): it keeps 1/2, the others 1/4 each.
    self.assertAlmostEqual(
        robustness.attacker_shares([8.0, 1.0, 1.0], [0], capped=False,
                                   max_share=0.5), 0.8, places=6)
    self.assertAlmostEqual(
        robustness.attacker_shares([8.0, 1.0, 1.0], [0], capped=True,
                                   max_share=0.5), 0.5, places=6)
    self.assertAlmostEqual(
        robustness.attacker_shares([8.0, 1.0, 1.0], [1, 2], capped=True,
                                   max_share=0.5), 0.5, places=6)
    self.assertEqual(
        robustness.attacker_shares([0.0, 0.0], [0], capped=False,
                                   max_share=0.5), 0.0)

  def test_data_attacks(self):
    labels = np.array([0, 2, 5, 2])
    # Next label of {0, 2, 5}, cyclic: 0->2, 2->5, 5->0.
    self.assertAllEqual(robustness_tasks.flip_labels(labels, [5, 0, 2]),
                        [2, 5, 0, 5])
    x = np.arange(5)[:, None] * 10
    y = np.array([0, 1, 2, 0, 1])
    new_x, new_y = robustness_tasks.loss_inflating_examples(
        x, y, batch_size=2, label_set=np.arange(3))
    # First batch: examples 0, 1 mislabelled; then example 0 three times.
    self.assertAllEqual(new_x[:, 0], [0, 10, 0, 0, 0])
    self.assertAllEqual(new_y, [1, 2, 0, 0, 0])


_TINY_TASK = robustness_tasks.LinearRegressionTask(
    num_clients=3, examples_per_client=8, batch_size=4, rounds=2,
    test_examples=50)
_TINY_GRID = robustness.Grid(
    weightings=('num_examples', 'lorar'), defences=('none', 'both'),
    attacks=('scaled', 'inflate_loss'), num_attackers=(1,), seeds=(0,))


class BenchmarkExecutionTest(tf.test.TestCase):

  def test_tiny_benchmark_writes_its_reports_and_caches(self):
    output_dir = self.create_tempdir().full_path
    built = []

    def build_task(name, data_dir):
      del data_dir
      built.append(name)
      return _TINY_TASK

    def run():
      return robustness.run_benchmark(
          ['linear_regression'], output_dir=output_dir,
          grids={'linear_regression': _TINY_GRID}, build_task_fn=build_task)

    rows = run()['linear_regression']
    # 2 weightings × 2 defences honest, and × 2 attacks.
    self.assertLen(rows, 12)
    with open(os.path.join(output_dir, 'results.json')) as f:
      results = json.load(f)
    task = results['tasks']['linear_regression']
    self.assertLen(task['summaries'], 12)
    # Each run is a seed of its configuration's summary (one seed here).
    runs = [dict(seed, **{k: s[k] for k in ('weighting', 'defence', 'attack',
                                            'num_attackers')})
            for s in task['summaries'] for seed in s['seeds']]
    self.assertLen(runs, 12)
    for summary in task['summaries']:
      self.assertEqual(summary['num_seeds'], 1)
      # One seed: the interval's bounds are unknown (None), the estimate not.
      self.assertEqual(summary['truth_ratio_ci95']['estimate'],
                       summary['truth_ratio'])
      self.assertIsNone(summary['truth_ratio_ci95']['low'])
    for row in runs:
      for field in ('weighting', 'defence', 'attack', 'num_attackers', 'seed',
                    'attacker_share_mean', 'attacker_share_max',
                    'distance_to_honest', 'distance_to_truth', 'truth_ratio',
                    'metric', 'seconds', 'meets_target', 'attack_spec'):
        self.assertIn(field, row)
    by_key = {(r['weighting'], r['defence'], r['attack']): r for r in runs}
    honest = by_key[('lorar', 'none', 'honest')]
    self.assertEqual(honest['distance_to_honest'], 0.0)
    self.assertEqual(honest['truth_ratio'], 1.0)
    # num_examples with equal clients: the attacker's share is 1/3 unless
    # it inflates nothing that counts; the cap (2/3) does not bind.
    self.assertAlmostEqual(
        by_key[('num_examples', 'none', 'scaled')]['attacker_share_max'],
        1 / 3, places=5)
    # Lorar: the loss-inflating attacker takes nearly all the weight; both
    # defences hold it at the cap 2/N = 2/3.
    self.assertGreater(
        by_key[('lorar', 'none', 'inflate_loss')]['attacker_share_max'], 0.9)
    self.assertLessEqual(
        by_key[('lorar', 'both', 'inflate_loss')]['attacker_share_max'],
        2 / 3 + 1e-5)
    for name in (robustness_report.TABLES_FILE,
                 'linear_regression_' + robustness_report.PLOT_FILE):
      self.assertTrue(os.path.exists(os.path.join(output_dir, name)), name)
    with open(os.path.join(output_dir, robustness_report.TABLES_FILE)) as f:
      self.assertIn('1 attacker(s) of 3', f.read())

    # Again: every run is read back from its cache, none is retrained.
    again = run()['linear_regression']
    self.assertEqual([r['seconds'] for r in again],
                     [r['seconds'] for r in rows])
    self.assertLen(os.listdir(os.path.join(
        output_dir, 'linear_regression', robustness.RUNS_DIR)), 12)


  def test_reports_keep_what_a_later_run_does_not_measure(self):
    output_dir = self.create_tempdir().full_path

    def run(defences, keep_reported=True):
      grid = robustness.Grid(weightings=('uniform',), defences=defences,
                             attacks=('scaled',), num_attackers=(1,),
                             seeds=(0,))
      robustness.run_benchmark(
          ['linear_regression'], output_dir=output_dir,
          grids={'linear_regression': grid}, keep_reported=keep_reported,
          build_task_fn=lambda name, data_dir: _TINY_TASK)
      with open(os.path.join(output_dir, 'results.json')) as f:
        task = json.load(f)['tasks']['linear_regression']
      return task, {(s['defence'], s['attack']) for s in task['summaries']}

    _, first = run(('none',))
    self.assertEqual(first, {('none', 'honest'), ('none', 'scaled')})
    # A second defence is added to the report, the first one's runs kept.
    task, merged = run(('cap',))
    self.assertEqual(merged, first | {('cap', 'honest'), ('cap', 'scaled')})
    self.assertEqual([g['defences'] for g in task['grids']],
                     [['none'], ['cap']])
    # Again (every run cached): the same grid is not listed twice.
    task, again = run(('cap',))
    self.assertEqual(again, merged)
    self.assertLen(task['grids'], 2)
    with open(os.path.join(output_dir, robustness_report.TABLES_FILE)) as f:
      tables = f.read()
    self.assertIn('| scaled | none |', tables)
    self.assertIn('| scaled | cap |', tables)
    # Without keep_reported the report holds this run's configurations (and
    # the honest run without defence, every distance's reference).
    _, alone = run(('cap',), keep_reported=False)
    self.assertEqual(alone, {('none', 'honest'), ('cap', 'honest'),
                             ('cap', 'scaled')})


class MergeTaskTest(tf.test.TestCase):

  def _entry(self, task, *configs):
    # A grid as the benchmark records it (tuples), or as read back (lists).
    return {'task': task, 'metric': 'test_mse',
            'grids': [{'seeds': tuple(task.values())}],
            'summaries': [dict(weighting='lorar', defence=d, attack='scaled',
                               num_attackers=1, truth_ratio=r)
                          for d, r in configs]}

  def test_same_settings_replace_and_add_configurations(self):
    reported = json.loads(json.dumps(
        self._entry({'rounds': 8}, ('none', 5.0), ('cap', 3.0))))
    merged = robustness_report.merge_task(
        reported, self._entry({'rounds': 8}, ('cap', 2.0), ('trimmed', 1.0)))
    self.assertEqual([(s['defence'], s['truth_ratio'])
                      for s in merged['summaries']],
                     [('none', 5.0), ('cap', 2.0), ('trimmed', 1.0)])
    # The same grid is listed once, whether tuples or lists.
    self.assertLen(merged['grids'], 1)

  def test_other_settings_replace_the_task(self):
    merged = robustness_report.merge_task(
        self._entry({'rounds': 8}, ('none', 5.0)),
        self._entry({'rounds': 4}, ('cap', 2.0)))
    self.assertEqual([s['defence'] for s in merged['summaries']], ['cap'])
    self.assertEqual(merged['grids'], [{'seeds': (4,)}])


class SummaryExecutionTest(tf.test.TestCase):

  def test_seeds_and_their_intervals(self):
    rows = [dict(weighting='lorar', defence='both', attack='sign_flip',
                 num_attackers=1, seed=seed, attacker_share_mean=0.1,
                 attacker_share_max=0.2, distance_to_honest=1.0,
                 distance_to_truth=0.5, truth_ratio=ratio,
                 metric={'test_mse': 0.01 * ratio}, seconds=2.0,
                 meets_target=ratio <= 2.0)
            for seed, ratio in enumerate([1.0, 2.0, 3.0])]
    (summary,) = robustness_report.summarize(rows)
    self.assertEqual(summary['num_seeds'], 3)
    self.assertEqual([s['seed'] for s in summary['seeds']], [0, 1, 2])
    self.assertFalse(summary['meets_target'])
    # Ratios 1, 2, 3: mean 2, sd 1, t(2, 0.975) = 4.3027:
    # 2 ± 4.3027 / sqrt(3) = 2 ± 2.4841.
    interval = summary['truth_ratio_ci95']
    self.assertAllClose([interval['low'], interval['estimate'],
                         interval['high']], [-0.4841, 2.0, 4.4841],
                        atol=1e-4)
    self.assertAllClose(summary['metric_ci95']['test_mse']['high'],
                        0.044841, atol=1e-6)


if __name__ == '__main__':
  tf.test.main()
