"""Tests of the scale benchmarks' library on tiny settings of real TREC data.

Times are never bounded here; what is checked is the structure and every
number that has an independent reference (sample counts, hand-computed
growth, fits of synthetic data with a known slope).
"""

import json
import os
import pathlib
import sys

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tff_nlp import runtime
from apps.scaling import client_scaling
from apps.scaling import scaling
from tff_nlp.data import population as population_lib
from apps.partial_models import tag_experiment as sparse_tags
from tff_nlp.runtime import memory

# TREC-6 questions as one-example clients, a small model: fast rounds.
_DATA = sparse_tags.TagDataConfig(dataset='trec6', partition='document',
                                  max_words=100, max_tags=20)
_TRAINING = sparse_tags.TagTrainingConfig(max_keys=8, client_learning_rate=1,
                                          batch_size=1)


def _percent(before, after):
  return 100 * (after - before) / before


def _setting(clients, python_peak, workers_peak):
  """A `measure_clients_per_round` record of the given sizes (bytes)."""
  return dict(method='sparse', clients_per_round=clients, num_clients=5452,
              round_seconds_median=clients / 100,
              seconds_per_client=0.01, data_seconds_median=0.001,
              sample_seconds_median=0.0001,
              memory_before_rounds=dict(python=dict(rss_bytes=700 * 2**20)),
              python_peak_bytes=python_peak, workers_peak_bytes=workers_peak,
              num_workers=1)


class ReportUnitsTest(tf.test.TestCase):
  """Memory is reported in MiB (1,024² bytes), from the stored bytes."""

  def test_format_mib_divides_by_1024_squared(self):
    # The committed 10-client run (scaling/clients_1worker): 714,461,184
    # bytes / 1,048,576 = 681.4 MiB (714 MB would be the decimal reading).
    self.assertEqual(scaling.format_mib(714_461_184), '681')
    # 2,522 MiB exactly, and one byte short of 1 GiB.
    self.assertEqual(scaling.format_mib(2_522 * 1024**2), '2,522')
    self.assertEqual(scaling.format_mib(1024**3 - 1), '1,024')
    self.assertEqual(scaling.format_mib(None), '–')

  def test_client_scaling_report_is_rewritten_from_its_json(self):
    output_dir = self.create_tempdir().full_path
    summary = dict(
        config=dict(dataset='trec50', partition='document', max_keys=32,
                    batch_size=1),
        settings=[_setting(10, 714_461_184, 216_625_152),
                  _setting(1000, 788_529_152, 2_644_508_672)],
        fits={}, machine={})
    with open(os.path.join(output_dir, client_scaling.CLIENT_SCALING_JSON),
              'w') as f:
      json.dump(summary, f)
    client_scaling.rewrite_client_scaling_report(output_dir)
    report = pathlib.Path(
        output_dir, client_scaling.CLIENT_SCALING_TABLE).read_text()
    self.assertIn('| Python peak MiB | Python MiB before rounds | '
                  'worker peak MiB |', report)
    self.assertNotIn(' MB', report)
    # 216,625,152 / 1,048,576 = 206.6; 788,529,152 / 1,048,576 = 752.0;
    # 2,644,508,672 / 1,048,576 = 2,522.0; 700 MiB before rounds.
    self.assertIn('| 681 | 700 | 207 | 1 |', report)
    self.assertIn('| 752 | 700 | 2,522 | 1 |', report)
    self.assertIn('## What the model saw', report)
    self.assertIn('- **Test set.** None', report)
    self.assertIn('every trec50 training question its own client (5,452 '
                  'clients of one example)', report)
    self.assertIn('M = 32 rows per sparse client', report)
    self.assertIn('no accuracy is measured or claimed', report)
    self.assertTrue(pathlib.Path(
        output_dir, client_scaling.CLIENT_SCALING_PLOT).exists())

  def test_memory_growth_report_is_rewritten_from_its_json(self):
    output_dir = self.create_tempdir().full_path
    samples = [dict(round=r, python_rss_bytes=b,
                    workers=[dict(pid=7, rss_bytes=w)], workers_rss_bytes=w)
               for r, b, w in ((0, 687 * 2**20, 290 * 2**20),
                               (20, 687 * 2**20, 290 * 2**20),
                               (200, 687 * 2**20 + 2**19, 298 * 2**20))]
    summary = dict(
        config=dict(method='dense', clients_per_round=20, dataset='trec50',
                    partition='document', batch_size=1),
        num_clients=5452, target_percent=5.0,
        growth=scaling.growth_after(samples, 20), passed=True,
        samples=samples, round_seconds=[0.3] * 200, data_seconds=[0.01] * 200)
    with open(os.path.join(output_dir, scaling.MEMORY_GROWTH_JSON), 'w') as f:
      json.dump(summary, f)
    scaling.rewrite_memory_growth_report(output_dir)
    report = pathlib.Path(output_dir, scaling.MEMORY_GROWTH_TABLE).read_text()
    self.assertIn('# Resident memory over 200 rounds', report)
    self.assertIn('| round | Python RSS MiB | worker 7 RSS MiB |', report)
    # 687.5 MiB rounds to 688 (half to even); 298 MiB; growth 290 -> 298 MiB
    # is +2.8 %.
    self.assertIn('| 200 | 688 | 298 |', report)
    self.assertIn('worker 7 +2.8%', report)
    self.assertIn('dense process', report)
    self.assertNotIn('M = ', report)


class MemoryGrowthSpecTest(parameterized.TestCase):

  # Each refusal names the field it refuses.
  @parameterized.parameters(
      (dict(method='dens'), 'method: unknown'),
      (dict(clients_per_round=-1), 'clients_per_round must be >= 0'),
      (dict(rounds=0, baseline_round=0), 'rounds must be >= 1'),
      (dict(sample_every=0), 'sample_every must be >= 1'),
      (dict(baseline_round=-1), r'baseline_round must be in 0..rounds'),
      (dict(rounds=10, baseline_round=11),
       r'baseline_round must be in 0..rounds \(10\), got 11'))
  def test_refuses_values_out_of_range(self, fields, message):
    with self.assertRaisesRegex(ValueError, message):
      scaling.MemoryGrowthSpec(data=_DATA, training=_TRAINING, **fields)

  def test_defaults_are_the_benchmarks(self):
    spec = scaling.MemoryGrowthSpec(data=_DATA, training=_TRAINING)
    self.assertEqual(
        (spec.method, spec.clients_per_round, spec.rounds, spec.sample_every,
         spec.baseline_round, spec.seed, spec.target_percent),
        ('dense', 20, 200, 10, 20, 0, 5.0))


class FitScalingExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_power_law_slope_and_ratio(self):
    clients = [10, 100, 1000]
    seconds = [0.3 * n ** 0.8 for n in clients]
    fit = client_scaling.fit_scaling(clients, seconds)
    assert fit['log_log_slope'] == pytest.approx(0.8)
    assert fit['time_ratio'] == pytest.approx(100 ** 0.8)
    assert fit['clients_ratio'] == 100
    assert fit['no_worse_than_linear']

  def test_line_gives_cost_per_client_and_fixed_cost(self):
    clients = [10, 100, 1000, 30]  # Any order.
    fit = client_scaling.fit_scaling(clients, [2 + 0.01 * n for n in clients])
    assert fit['seconds_per_client'] == pytest.approx(0.01)
    assert fit['intercept_seconds'] == pytest.approx(2)
    # A fixed cost makes the growth sublinear: 12 s / 2.1 s for 100x.
    assert fit['time_ratio'] == pytest.approx(12 / 2.1)
    assert fit['log_log_slope'] < 1

  def test_superlinear_growth_fails_the_check(self):
    fit = client_scaling.fit_scaling([10, 1000], [1.0, 1000.0])
    assert fit['log_log_slope'] == pytest.approx(1.5)
    assert not fit['no_worse_than_linear']

  @parameterized.parameters(
      ([10, 10], [1.0, 2.0]), ([10], [1.0]), ([10, 100], [1.0, 0.0]),
      ([10, 100], [1.0]))
  def test_rejects_unfittable_input(self, clients, seconds):
    with self.assertRaisesRegex(ValueError, 'Need'):
      client_scaling.fit_scaling(clients, seconds)


def _sample(round_num, python_mb, workers):
  workers = [dict(pid=p, rss_bytes=mb * 2 ** 20) for p, mb in workers]
  return dict(round=round_num, python_rss_bytes=python_mb * 2 ** 20,
              workers=workers,
              workers_rss_bytes=sum(w['rss_bytes'] for w in workers))


class ScalingExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_growth_after_compares_baseline_with_last_sample(self):
    samples = [_sample(0, 500, [(7, 50), (9, 60)]),
               _sample(10, 700, [(7, 300), (9, 200)]),
               _sample(20, 700, [(7, 320), (9, 200)]),
               _sample(30, 714, [(7, 336), (9, 190)])]
    # Round 15 is not sampled: the first sample after it (20) is the baseline.
    growth = scaling.growth_after(samples, baseline_round=15)
    assert growth['baseline_round'] == 20
    assert growth['last_round'] == 30
    assert growth['python_percent'] == pytest.approx(2.0)
    assert growth['per_worker_percent'] == pytest.approx(
        {'7': 5.0, '9': -5.0})
    assert growth['workers_percent'] == pytest.approx(
        _percent(520, 526))
    assert growth['max_percent'] == pytest.approx(5.0)
    with self.assertRaisesRegex(ValueError, 'after round 31'):
      scaling.growth_after(samples, baseline_round=31)

  def test_memory_growth_samples_every_n_rounds(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    spec = scaling.MemoryGrowthSpec(
        data=_DATA, training=_TRAINING, method='dense', clients_per_round=3,
        rounds=12, sample_every=4, baseline_round=4, seed=1)
    summary = scaling.run_memory_growth(
        spec, data_dir=None, output_dir=str(tmp_path),
        context={'test': True})
    # The binary's record: the run's, the task's, the context's settings.
    self.assertEqual(list(summary['config'].items()), [
        ('method', 'dense'), ('clients_per_round', 3), ('dataset', 'trec6'),
        ('partition', 'document'), ('num_clients', 50), ('max_words', 100),
        ('max_tags', 20), ('max_keys', 8), ('client_learning_rate', 1),
        ('batch_size', 1), ('test', True), ('seed', 1)])
    samples = summary['samples']
    assert [s['round'] for s in samples] == [0, 4, 8, 12]
    assert len(summary['round_seconds']) == len(summary['data_seconds']) == 12
    assert summary['num_clients'] == 5452
    pids = sorted(runtime.owned_worker_pids())
    for s in samples:
      assert [w['pid'] for w in s['workers']] == pids
      assert s['workers_rss_bytes'] == sum(w['rss_bytes'] for w in s['workers'])
      assert s['python_rss_bytes'] > 0
    growth = summary['growth']
    assert (growth['baseline_round'], growth['last_round']) == (4, 12)
    assert growth['python_percent'] == pytest.approx(_percent(
        samples[1]['python_rss_bytes'], samples[3]['python_rss_bytes']))
    for before, after in zip(samples[1]['workers'], samples[3]['workers']):
      assert growth['per_worker_percent'][str(before['pid'])] == (
          pytest.approx(_percent(before['rss_bytes'], after['rss_bytes'])))
    assert summary['passed'] == (growth['max_percent'] < 5.0)
    with open(tmp_path / scaling.MEMORY_GROWTH_JSON) as f:
      assert json.load(f)['samples'] == samples
    table = (tmp_path / scaling.MEMORY_GROWTH_TABLE).read_text()
    assert table.count('\n| ') == 5  # Header and four samples.
    assert 'from round 4 to round 12' in table
    assert (tmp_path / scaling.MEMORY_GROWTH_PLOT).stat().st_size > 0

  def test_client_scaling_in_process(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    def measure(method, clients_per_round):
      return client_scaling.measure_clients_per_round(
          data_dir=None, data=_DATA, training=_TRAINING, method=method,
          clients_per_round=clients_per_round, rounds=2, warmup_rounds=1,
          seed=0)

    summary = client_scaling.run_client_scaling(
        measure=measure, methods=['sparse'], clients_per_round_values=[4, 2],
        output_dir=str(tmp_path))
    settings = summary['settings']
    assert [s['clients_per_round'] for s in settings] == [2, 4]
    num_workers = len(runtime.owned_worker_pids())
    for s in settings:
      assert len(s['round_seconds']) == len(s['data_seconds']) == 2
      assert len(s['warmup_round_seconds']) == 1
      assert s['round_seconds_median'] == pytest.approx(
          np.median(s['round_seconds']))
      assert s['seconds_per_client'] == pytest.approx(
          s['round_seconds_median'] / s['clients_per_round'])
      assert s['num_workers'] == num_workers
      after = s['memory_after_rounds']
      assert s['python_peak_bytes'] == after['python']['peak_bytes']
      assert s['python_peak_bytes'] >= after['python']['rss_bytes']
      assert s['workers_peak_bytes'] == sum(
          w['peak_bytes'] for w in after['workers'])
    fit = summary['fits']['sparse']
    assert fit['clients_ratio'] == 2
    assert fit['time_ratio'] == pytest.approx(
        settings[1]['round_seconds_median']
        / settings[0]['round_seconds_median'])
    for name in (client_scaling.CLIENT_SCALING_JSON,
                 client_scaling.CLIENT_SCALING_TABLE,
                 client_scaling.CLIENT_SCALING_PLOT):
      assert (tmp_path / name).stat().st_size > 0
    table = (tmp_path / client_scaling.CLIENT_SCALING_TABLE).read_text()
    assert '| sparse | 2 |' in table and '| sparse | 4 |' in table
    assert 'sparse: round time grew' in table

  def test_client_scaling_on_a_simulated_population(self):
    population = population_lib.PopulationConfig(num_users=100_000,
                                                 examples_per_user=2)
    s = client_scaling.measure_clients_per_round(
        data_dir=None, data=_DATA, training=_TRAINING, method='sparse',
        clients_per_round=3, rounds=2, warmup_rounds=0, seed=0,
        population=population)
    assert s['num_clients'] == 100_000
    assert s['population'] == dict(num_users=100_000, examples_per_user=2,
                                   dirichlet_alpha=0.5, seed=0)
    assert len(s['round_seconds']) == 2
    assert s['sample_seconds_median'] >= 0
    # Three users of two examples each, built in the worker and counted.
    assert s['pipeline_examples'] == 6
    assert s['pipeline_seconds_per_client'] == pytest.approx(
        s['pipeline_seconds'] / 3)
    table = client_scaling.client_scaling_table([s])
    assert table.count('\n| sparse | 3 |') == 1

  def test_measure_rejects_more_clients_than_the_task_has(self):
    with self.assertRaisesRegex(ValueError, 'clients_per_round must be in'):
      client_scaling.measure_clients_per_round(
          data_dir=None, data=_DATA, training=_TRAINING, method='sparse',
          clients_per_round=6000, rounds=1, warmup_rounds=0, seed=0)

  def test_subprocess_measure_reads_the_childs_json(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    measure = client_scaling.subprocess_measure(_fake_child({'x': 1}),
                                                str(tmp_path))
    assert measure('dense', 10) == {'x': 1, 'method': 'dense',
                                    'clients_per_round': 10}
    assert os.path.exists(
        tmp_path / client_scaling.SETTINGS_DIR / 'dense_10.json')

  def test_failed_child_is_reported_and_the_rest_still_written(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    ok = _fake_child(dict(
        round_seconds_median=2.0, seconds_per_client=0.2,
        data_seconds_median=0.1, python_peak_bytes=2 ** 30,
        memory_before_rounds={'python': {'rss_bytes': 2 ** 29}},
        workers_peak_bytes=2 ** 28, num_workers=1))

    def command(method, clients_per_round, path):
      if clients_per_round == 1000:  # E.g. out of memory.
        return [sys.executable, '-c', 'raise SystemExit(3)']
      return ok(method, clients_per_round, path)

    summary = client_scaling.run_client_scaling(
        measure=client_scaling.subprocess_measure(command, str(tmp_path)),
        methods=['dense'], clients_per_round_values=[10, 1000],
        output_dir=str(tmp_path))
    assert summary['settings'][1] == {
        'method': 'dense', 'clients_per_round': 1000,
        'error': 'child exited with status 3'}
    assert summary['fits'] == {}  # One measured setting: nothing to fit.
    table = (tmp_path / client_scaling.CLIENT_SCALING_TABLE).read_text()
    assert ('| dense | 10 | 2.000 | 200.00 | 0.100 | – | – | 1,024 | 512 '
            '| 256 | 1 |' in table)
    assert 'failed: child exited with status 3' in table

  def test_dense_client_data_is_the_sparse_batches_as_keras_pairs(self):
    task = sparse_tags.prepare_task(None, _DATA, seed=0)
    training = sparse_tags.TagTrainingConfig(batch_size=2)
    dense = sparse_tags.client_data_fn('dense', task, training, seed=4)
    sparse = sparse_tags.client_data_fn('sparse', task, training, seed=4)
    for got, want in zip(dense(3, [0, 2]), sparse(3, [0, 2])):
      for (x, y), batch in zip(got, want):
        tf.nest.map_structure(np.testing.assert_array_equal,
                              (x, y), (batch['tokens'], batch['tags']))

  def test_client_data_leaves_no_memory_behind(self):
    task = sparse_tags.prepare_task(None, _DATA, seed=0)
    training = sparse_tags.TagTrainingConfig(batch_size=1)
    client_data = sparse_tags.client_data_fn('dense', task, training, seed=0)
    client_data(0, range(50))  # Trace, and let the allocator settle.
    before = memory.process_memory().rss_bytes
    for round_num in range(1, 11):
      client_data(round_num, range(50))
    # Built eagerly (before tags.BatchBuilder), 500 datasets left ~200 MB
    # (0.4 MB each) behind.
    assert memory.process_memory().rss_bytes - before < 20 * 2 ** 20


def _fake_child(record):
  """A child command writing `record` (with the setting) as its JSON."""
  def command(method, clients_per_round, path):
    payload = dict(record, method=method,
                   clients_per_round=clients_per_round)
    return [sys.executable, '-c',
            'import json, sys; json.dump(json.loads(sys.argv[1]), '
            'open(sys.argv[2], "w"))', json.dumps(payload), path]
  return command


if __name__ == '__main__':
  tf.test.main()
