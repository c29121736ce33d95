"""The dense vs vocabulary-sliced comparison: runs, caching, report numbers.

Training is covered by tests/apps/text2sql/vocab_sliced_test.py and
tests/apps/text2sql/text2sql_test.py; here `run_text2sql` is replaced by a
recorder writing `results.json` and round records of the real shape, so the
test checks which runs happen and the numbers of the report, in seconds.
"""

import json
import os
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from tff_nlp import training
from apps.partial_models import vocab_slice_benchmark
from apps.text2sql import experiment as text2sql
from apps.text2sql import task as text2sql_task
from tff_nlp.models import seq2seq

_DATA = text2sql_task.DataConfig(clients=('geography', 'imdb'))
_MODEL = seq2seq.Seq2SeqConfig.from_preset('small')
_LOOP = training.LoopConfig(rounds=2)
# Per M: bytes down and up per client in rounds 1 and 2, round seconds,
# correct test tokens (of 20 geography, 40 imdb), correct test EM (of 4).
_RUNS = {
    0: dict(down=(4000, 4000), up=(4100, 4100), seconds=(3.0, 5.0),
            tokens={'geography': 10, 'imdb': 20}, em={'geography': 1,
                                                      'imdb': 0}),
    100: dict(down=(1000, 1000), up=(1000, 1200), seconds=(2.0, 2.0),
              tokens={'geography': 12, 'imdb': 10}, em={'geography': 0,
                                                        'imdb': 0}),
}


def _fake_run_text2sql(calls):
  """A `run_text2sql` that records its M and writes a run of `_RUNS`."""

  def fake_run(spec, *, data_dir, output_dir):
    del data_dir
    data, training, loop = spec.data, spec.training, spec.loop
    vocab_slice_keys = spec.vocab_slice_keys
    assert training.method == ('federated', 'fedavg', 'uniform')
    calls.append(vocab_slice_keys)
    run = _RUNS[vocab_slice_keys]
    os.makedirs(os.path.join(output_dir, 'federated'), exist_ok=True)
    with open(os.path.join(output_dir, 'federated', 'metrics.jsonl'),
              'w') as f:
      f.write(json.dumps({'round': 0, 'eval': {
          'dev_token_accuracy': 0.0}}) + '\n')
      for r in range(1, loop.rounds + 1):
        f.write(json.dumps({
            'round': r, 'round_seconds': run['seconds'][r - 1],
            'communication': {'bytes_down_per_client': run['down'][r - 1],
                              'bytes_up_per_client': run['up'][r - 1]},
            'eval': {'dev_token_accuracy': r / 4 + vocab_slice_keys / 1000},
        }) + '\n')
    results = {
        'config': {'loop': {'rounds': loop.rounds}},
        'vocabulary_size': 500,
        'test': {'exact_match': {'per_client': {
            c: {'correct': run['em'][c], 'total': 4} for c in data.clients}}},
        'test_tokens': {c: {'correct_tokens': run['tokens'][c],
                            'tokens': 20 if c == 'geography' else 40}
                        for c in data.clients},
        'examples': {'geography': {'train': 549, 'dev': 49, 'test': 4},
                     'imdb': {'train': 79, 'dev': 26, 'test': 4}},
        'truncated': {c: {split: {'sources': 0,
                                  'targets': int(split == 'test')}
                          for split in ('train', 'dev', 'test')}
                      for c in data.clients},
        'vocab_slices': {} if not vocab_slice_keys else {
            'geography': {'keys': 90, 'distinct_ids': 90, 'ids_to_unk': 0},
            'imdb': {'keys': 100, 'distinct_ids': 130, 'ids_to_unk': 7}},
    }
    with open(os.path.join(output_dir, 'results.json'), 'w') as f:
      json.dump(results, f)
    return results

  return fake_run


def _run(output_dir, max_keys=(100,), loop=_LOOP):
  return vocab_slice_benchmark.run_vocab_slice_benchmark(
      data_dir=None, output_dir=str(output_dir), max_keys=max_keys,
      data=_DATA, model=_MODEL, training=text2sql_task.TrainingConfig(),
      loop=loop, command='cmd')


def _read(path):
  with open(path) as f:
    return f.read()


class VocabSliceBenchmarkExecutionTest(tf.test.TestCase,
                                       parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.calls = []
    patcher = mock.patch.object(text2sql, 'run_text2sql',
                                _fake_run_text2sql(self.calls))
    patcher.start()
    self.addCleanup(patcher.stop)

  def test_runs_dense_and_sliced_once_each_and_reports(self):
    tmp_path = self.create_tempdir().full_path
    calls = self.calls
    report = _run(tmp_path)
    self.assertEqual(calls, [0, 100])
    _run(tmp_path)  # Both finished: read back.
    self.assertEqual(calls, [0, 100])
    _run(tmp_path, max_keys=(0, 100))  # 0 is the dense run, always there.
    self.assertEqual(calls, [0, 100])

    dense = report['runs']['0']['summary']
    sliced = report['runs']['100']['summary']
    self.assertStartsWith(report['runs']['0']['run_dir'],
                          'runs/fedavg-uniform-')
    self.assertStartsWith(report['runs']['100']['run_dir'],
                          'runs/fedavg-uniform-vocab_slice_keys100-')
    # Means over the rounds: up (1000 + 1200) / 2; median seconds (3 + 5) / 2.
    self.assertEqual(sliced['bytes_up_per_client'], 1100)
    self.assertEqual(dense['round_seconds'], 4.0)
    self.assertEqual(dense['rows_per_client'], 500)  # The whole vocabulary.
    self.assertEqual(sliced['rows_per_client'], 95)  # (90 + 100) / 2
    self.assertEqual(sliced['ids_to_unk'], 7)
    # 2/4 + 0.1
    np.testing.assert_allclose(sliced['dev_token_accuracy'], 0.6, rtol=1e-6)

    table = _read(os.path.join(tmp_path, 'vocab_slice.md'))
    # KiB: dense 4,000 / 1,024 = 3.91 down, 4,100 / 1,024 = 4.00 up; sliced
    # 1,000 / 1,024 = 0.98 down, 1,100 / 1,024 = 1.07 up. Down 1,000 of
    # 4,000 bytes = 0.250x, up 1,100 of 4,100 = 0.268x. Tokens: dense
    # geography 10/20, imdb 20/40: MacroAvg 50, MicroAvg 30/60 = 50; sliced
    # 12/20 = 60 and 10/40 = 25: MacroAvg 42.5, MicroAvg 22/60 = 36.67. EM:
    # dense (25 + 0) / 2 = 12.5, sliced 0.
    self.assertIn('| KiB down / client / round | KiB up / client / round |',
                  table)
    self.assertNotIn('KB', table)
    self.assertIn('| Dense FedAvg | 500 | 0 | 3.9 | 4.0 | 1.000× | 1.000× | '
                  '50.00 | 50.00 | 12.50 | 50.00 | 4.0 |', table)
    self.assertIn('| Sliced, M = 100 | 95 | 7 | 1.0 | 1.1 | 0.250× | 0.268× | '
                  '42.50 | 36.67 | 0.00 | 60.00 | 2.0 |', table)
    tokens = table.split('Test token accuracy')[1].split('Test exact match')[0]
    self.assertIn('| Sliced, M = 100 − dense (points) | – | – | +10.00 | – | '
                  '– | – | -25.00 | – | -7.50 | -13.33 |', tokens)
    self.assertIn('| 100 | – | – | 90 of 90 | – | – | – | 100 of 130 (7 → UNK) '
                  '| – |', table)
    self.assertGreater(os.path.getsize(
        os.path.join(tmp_path, 'vocab_slice_dev_token_accuracy.png')), 0)
    self.assertEqual(json.loads(_read(os.path.join(
        tmp_path, 'vocab_slice.json')))['command'], 'cmd')
    # What the model saw, from the dense run's records: one test target cut
    # per client (2 in all), 4 test examples each.
    section = table.split('## What the model saw')[1].split('| Method')[0]
    self.assertIn('the examples used: geography 549, imdb 79.', section)
    self.assertIn('to the model\'s maximum: 0 and 2;', section)
    self.assertIn('Test examples per client: geography 4, imdb 4 (8 in all)',
                  section)
    self.assertIn('no difference is called', section)

    # The report again from its JSON alone, training nothing.
    os.remove(os.path.join(tmp_path, 'vocab_slice.md'))
    vocab_slice_benchmark.rewrite_report(tmp_path)
    self.assertEqual(_read(os.path.join(tmp_path, 'vocab_slice.md')), table)
    self.assertEqual(calls, [0, 100])

  def test_report_of_runs_that_recorded_no_examples(self):
    summaries = {0: dict(test_exact_match=dict(per_client=dict(
        imdb=dict(total=26), yelp=dict(total=24))))}
    section = vocab_slice_benchmark.what_the_model_saw(summaries)
    self.assertIn('were not recorded in this report', section)
    self.assertIn('Truncation.** Not recorded', section)
    self.assertIn('imdb 26, yelp 24 (50 in all)', section)


  @parameterized.named_parameters(('repeated', (100, 100)), ('negative', (-1,)))
  def test_refuses_repeated_or_negative_m(self, max_keys):
    with self.assertRaisesRegex(errors.InputError, '--vocab_slice_keys'):
      _run(self.create_tempdir().full_path, max_keys=max_keys)
    self.assertEmpty(self.calls)


if __name__ == '__main__':
  tf.test.main()
