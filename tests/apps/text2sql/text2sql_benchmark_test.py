"""The benchmark's orchestration: method parsing, caching by config, seeds.

Training itself is covered by text2sql_test.py; here `run_text2sql` is
replaced by a recorder writing a `results.json` and test predictions of the
same shape (`text2sql_fake_runs.write_run`), so the test checks which runs
happen and what the report says, in seconds. The report itself
(`text2sql_summary.summarize_runs`) is tested in text2sql_summary_test.py.
"""

import json
import os
import pathlib
from unittest import mock

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import errors
from tff_nlp import training
from tff_nlp.aggregators import factory as aggregation
from apps.text2sql import benchmark as text2sql_benchmark
from apps.text2sql import experiment as text2sql
from apps.text2sql import task as text2sql_task
from apps.text2sql import report as text2sql_report
from tff_nlp.models import lora as lora_lib
from tff_nlp.models import seq2seq
from tests.apps.text2sql import text2sql_fake_runs

_NUM_TEST = 4  # Test examples per client of the fake runs.
_DATA = text2sql_task.DataConfig(clients=('geography', 'imdb'),
                                 max_eval_examples=_NUM_TEST)
_MODEL = seq2seq.Seq2SeqConfig.from_preset('small')
_TRAINING = text2sql_task.TrainingConfig()
_LOOP = training.LoopConfig(rounds=3)
_CENTRALIZED = ('centralized',)
_FEDAVG = ('federated', 'fedavg', 'num_examples')
_FEDAVG_LORAR = ('federated', 'fedavg', 'lorar')
# Correct test predictions per method and client (of 4 examples each).
_CORRECT = {_FEDAVG: {'geography': 1, 'imdb': 0},
            _FEDAVG_LORAR: {'geography': 2, 'imdb': 1},
            _CENTRALIZED: {'geography': 2, 'imdb': 2}}


def _fill(correct, tokens):
  """(correct, tokens) of `_NUM_TEST` examples of `tokens` tokens each, the
  `correct` ones in the first examples: _fill(10, 5) = (5, 5), (5, 5),
  (0, 5), (0, 5)."""
  return [(min(tokens, max(0, correct - i * tokens)), tokens)
          for i in range(_NUM_TEST)]


def _fake_runs(test_case, options=None):
  """Replaces `run_text2sql` in `test_case`; returns the (method, seed) runs.

  `options`, read at each call and changeable between them:
  `example_tokens` (write per-example token counts, as runs do since
  2026-11-29), `checkpoints` (leave a checkpoint folder), `seconds` (the
  recorded wall time), `extra_correct` (added to `_CORRECT`).
  """
  calls = []
  options = {} if options is None else options

  def fake_run(spec, *, data_dir, output_dir, processes=None):
    del data_dir, processes
    data, training, loop = spec.data, spec.training, spec.loop
    aggregation, init_from, lora = spec.aggregation, spec.init_from, spec.lora
    tokenizer_from = spec.tokenizer_from
    calls.append((training.method, loop.seed) if aggregation is None
                 else (training.method, loop.seed, aggregation))
    if init_from is not None or lora is not None:
      calls.append(('finetuning', init_from, lora))
    if tokenizer_from is not None:
      calls.append(('tokenizer', tokenizer_from))
    correct = {c: k + options.get('extra_correct', 0)
               for c, k in _CORRECT[training.method].items()}
    os.makedirs(os.path.join(output_dir, 'federated'), exist_ok=True)
    if options.get('checkpoints'):
      os.makedirs(os.path.join(output_dir, 'federated', 'checkpoints',
                               f'round_{loop.rounds}'), exist_ok=True)
    with open(os.path.join(output_dir, 'federated', 'metrics.jsonl'),
              'w') as f:
      for r in range(loop.rounds + 1):
        # Two clients of 8 and 4 examples, weighted 1 and 3 (a Lorar run's
        # |D_i|·ΔL_i; the weight figure reads them).
        f.write(json.dumps({'round': r, 'eval': {
            'dev_exact_match': r / 10, 'dev_token_accuracy': r / 5},
                            'client_ids': [0, 1], 'client_outputs': [
                                {'mean_batch_loss': 1.0 / (r + 1),
                                 'num_batches': 2, 'dataset_size': size,
                                 'candidate_weight': weight,
                                 'fallback_weight': size}
                                for size, weight in ((8.0, 1.0),
                                                     (4.0, 3.0))]}) + '\n')
    # The first 4 test examples of the real data (a subset, as with
    # max_eval_examples=4, here the same for every seed), the first
    # `correct` of them right.
    real = text2sql_fake_runs.real_test_examples(
        data.clients, schema_columns=data.schema_columns)
    text2sql_fake_runs.write_run(
        output_dir, loop.seed,
        {c: [i < correct[c] for i in range(_NUM_TEST)] for c in data.clients},
        {c: real[c][:_NUM_TEST] for c in data.clients},
        # Token accuracy: 10 * correct EM examples of 20 (geography) and
        # of 40 (imdb) tokens; per example (of 5 or 10 tokens), the correct
        # tokens fill the first examples.
        tokens={c: (10 * correct[c], 20 if c == 'geography' else 40)
                for c in data.clients},
        example_tokens=options.get('example_tokens') and {
            c: _fill(10 * correct[c], 5 if c == 'geography' else 10)
            for c in data.clients},
        seconds=options.get('seconds', 1.0))
    with open(os.path.join(output_dir, 'results.json')) as f:
      return json.load(f)

  test_case.enter_context(
      mock.patch.object(text2sql, 'run_text2sql', fake_run))
  return calls


def _run(output_dir, methods, loop=_LOOP, training_config=_TRAINING,
         aggregation=None, init_from=None, lora=None, tokenizer_from=None,
         **kwargs):
  """`collect_runs`, then `report_runs`, as the binary does."""
  settings = text2sql_benchmark.RunSettings(
      data=_DATA, model=_MODEL, training=training_config, loop=loop,
      aggregation=aggregation, init_from=init_from, lora=lora,
      tokenizer_from=tokenizer_from)
  runs = text2sql_benchmark.collect_runs(
      settings, data_dir=None, output_dir=str(output_dir), methods=methods,
      **kwargs)
  return text2sql_benchmark.report_runs(
      runs, settings, data_dir=None, output_dir=str(output_dir),
      command='cmd', num_replicates=200)


_METHODS = [_FEDAVG, _FEDAVG_LORAR]


class Text2SqlBenchmarkExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_an_aggregation_is_a_variant_of_the_federated_runs(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    calls = _fake_runs(self)
    capped = aggregation.AggregationConfig(max_weight_share=0.25)
    report = _run(tmp_path, _METHODS, aggregation=capped)
    self.assertEqual(calls, [(m, 0, capped) for m in _METHODS])
    self.assertStartsWith(report['methods']['fedavg-lorar']['run_dir'],
                          'runs/fedavg-lorar-max_weight_share0.25-')
    # The report says what the rows are: Lorar under the cap.
    self.assertEqual(report['federated_aggregation'],
                     {'max_weight_share': 0.25})
    self.assertIn('every federated method here aggregates with '
                  '`max_weight_share=0.25`',
                  (tmp_path / 'results.md').read_text())
    # The plain runs are other runs; the capped ones are read back.
    plain = _run(tmp_path, _METHODS)
    self.assertIsNone(plain['federated_aggregation'])
    self.assertNotIn('**Aggregation:**', (tmp_path / 'results.md').read_text())
    _run(tmp_path, _METHODS, aggregation=capped)
    self.assertEqual(calls[2:], [(m, 0) for m in _METHODS])
    self.assertLen(os.listdir(tmp_path / 'runs'), 4)

  def test_a_start_and_adapters_are_a_variant_of_the_runs(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    pretrained = tmp_path / 'pretrain_cpu'
    pretrained.mkdir()
    (pretrained / 'config.json').write_text(json.dumps(
        {'experiment': {'seed': 0, 'objective': 't5_span_corruption'}}))
    calls = _fake_runs(self)
    adapters = lora_lib.LoraConfig(rank=8, alpha=16.0, seed=5)
    report = _run(tmp_path, _METHODS[:1], init_from=str(pretrained),
                  lora=adapters)
    # The run's seed replaces the adapters' (seed 0 here).
    self.assertEqual(calls, [(_FEDAVG, 0), (
        'finetuning', str(pretrained),
        lora_lib.LoraConfig(rank=8, alpha=16.0, seed=0))])
    digest = training.config_digest(
        {'seed': 0, 'objective': 't5_span_corruption'})[:6]
    self.assertStartsWith(
        report['methods']['fedavg-num_examples']['run_dir'],
        f'runs/fedavg-num_examples-initpretrain_cpu.{digest}-lora_r8-'
        'lora_alpha16.0-')
    # Full fine-tuning of the same start is another run.
    _run(tmp_path, _METHODS[:1], init_from=str(pretrained))
    self.assertEqual(calls[2:], [(_FEDAVG, 0),
                                 ('finetuning', str(pretrained), None)])
    self.assertLen(os.listdir(tmp_path / 'runs'), 2)
    # From scratch with its tokenizer: a third run, named after it.
    report = _run(tmp_path, _METHODS[:1], tokenizer_from=str(pretrained))
    self.assertEqual(calls[4:], [(_FEDAVG, 0),
                                 ('tokenizer', str(pretrained))])
    self.assertStartsWith(
        report['methods']['fedavg-num_examples']['run_dir'],
        f'runs/fedavg-num_examples-tokenizerpretrain_cpu.{digest}-')
    self.assertLen(os.listdir(tmp_path / 'runs'), 3)

  def test_runs_each_method_once_and_reads_finished_ones_back(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    calls = _fake_runs(self)
    report = _run(tmp_path, _METHODS)
    assert calls == [(m, 0) for m in _METHODS]
    table = (tmp_path / 'results.md').read_text()
    _run(tmp_path, _METHODS)  # Nothing left to do.
    assert len(calls) == 2
    _run(tmp_path, _METHODS, loop=training.LoopConfig(rounds=5))  # More rounds.
    assert len(calls) == 4
    # Another configuration is another run, in its own directory.
    _run(tmp_path, _METHODS[:1], training_config=text2sql_task.TrainingConfig(
        client_optimizer='sgd'))
    assert len(calls) == 5
    assert len(os.listdir(tmp_path / 'runs')) == 3

    lorar = report['methods']['fedavg-lorar']
    assert lorar['run_dir'].startswith('runs/fedavg-lorar-')
    assert lorar['label'] == 'FedAvg + Lorar'
    assert [s['seed'] for s in lorar['seeds']] == [0]
    # geography 2/4, imdb 1/4: macro (50 + 25) / 2 = 37.5, micro 3/8 = 37.5;
    # '*': averages over the two clients present, not all eight.
    assert ('| FedAvg + Lorar | ours (n=1) | – | – | 50.00 | – | – | – | 25.00 '
            '| – | 37.50* | 37.50* |') in table
    assert ('| FedAvg | ours (n=1) | – | – | 25.00 | – | – | – | 0.00 | – '
            '| 12.50* | 12.50* |') in table
    assert '| FedAvg + Lorar | paper |' in table
    # Lorar: geography 20/20, imdb 10/40 → MacroAvg (100 + 25) / 2 = 62.5,
    # MicroAvg 30/60 = 50; FedAvg: 10/20 and 0/40 → 25 and 10/60 = 16.67.
    tokens = table.split('token accuracy (%)')[1]
    assert '| FedAvg + Lorar | ours (n=1) | – | – | 100.00 | – | – | – ' \
           '| 25.00 | – | 62.50* | 50.00* |' in tokens
    assert '| FedAvg | ours (n=1) | – | – | 50.00 | – | – | – | 0.00 | – ' \
           '| 25.00* | 16.67* |' in tokens
    assert '| paper |' not in tokens
    # Lorar minus FedAvg: EM geography 50 - 25, imdb 25 - 0, MacroAvg
    # 37.5 - 12.5; tokens 100 - 50, 25 - 0, 62.5 - 25, MicroAvg 50 - 16.67.
    assert '| FedAvg | exact match | – | – | +25.00 | – | – | – | +25.00 | – ' \
           '| +25.00 | +25.00 |' in table
    assert '| FedAvg | token accuracy | – | – | +50.00 | – | – | – | +25.00 ' \
           '| – | +37.50 | +33.33 |' in table
    assert '| FedAvg + Lorar | 0 | 3 | 0.0 | `runs/fedavg-lorar-' in table
    # The baseline on the same 4 test examples of each client.
    assert '| Template retrieval (no learning) | ours |' in table
    assert report['baseline']['test']['exact_match']['per_client'][
        'geography']['total'] == _NUM_TEST
    assert report['test_sets']['full_splits'] is False
    assert report['figures'] == [
        'dev_exact_match.png', 'dev_token_accuracy.png',
        'training_loss_fedavg.png', 'client_weights.png']
    for name in report['figures']:
      assert (tmp_path / name).stat().st_size > 0

  def test_runs_seed_by_seed_and_resumes(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    calls = _fake_runs(self)
    methods = [_CENTRALIZED, _FEDAVG, _FEDAVG_LORAR]
    report = _run(tmp_path, methods, seeds=[0, 1],
                  single_seed_methods=[_CENTRALIZED])
    # Every method with seed 0 first; centralized with the first seed only.
    assert calls == [(_CENTRALIZED, 0), (_FEDAVG, 0), (_FEDAVG_LORAR, 0),
                     (_FEDAVG, 1), (_FEDAVG_LORAR, 1)]
    assert [report['methods'][s]['num_seeds'] for s in
            ('centralized', 'fedavg-num_examples', 'fedavg-lorar')] == [1, 2, 2]
    # A third seed runs only the new runs; the others are read back.
    report = _run(tmp_path, methods, seeds=[0, 1, 2],
                  single_seed_methods=[_CENTRALIZED])
    assert calls[5:] == [(_FEDAVG, 2), (_FEDAVG_LORAR, 2)]
    assert len(os.listdir(tmp_path / 'runs')) == 7
    assert report['seeds'] == [0, 1, 2]
    runs = [s['run_dir'] for s in report['methods']['fedavg-lorar']['seeds']]
    assert len(set(runs)) == 3

  def test_archived_runs_are_read_back_on_a_fresh_checkout(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    calls = _fake_runs(self)
    archive = tmp_path / 'archive'
    first = _run(tmp_path / 'machine_a', _METHODS, archive_dir=str(archive))
    assert len(calls) == 2
    names = sorted(os.listdir(archive))
    assert [n.split('-')[:2] for n in names] == [['fedavg', 'lorar'],
                                                 ['fedavg', 'num_examples']]
    lorar = archive / names[0]
    kept = sorted(str(p.relative_to(lorar)) for p in lorar.rglob('*')
                  if p.is_file())
    # Records only, predictions gzipped (no weights, no tokenizer).
    assert kept == ['federated/metrics.jsonl', 'predictions/geography.jsonl.gz',
                    'predictions/imdb.jsonl.gz', 'results.json']
    # Another machine, nothing under its own runs/: no training, same report.
    second = _run(tmp_path / 'machine_b', _METHODS, archive_dir=str(archive))
    assert len(calls) == 2
    assert not (tmp_path / 'machine_b' / 'runs').exists()
    for slug in ('fedavg-lorar', 'fedavg-num_examples'):
      assert (second['methods'][slug]['test'] == first['methods'][slug]['test'])
    # Archiving again gives the same bytes (gzip without a time stamp).
    before = (lorar / 'predictions' / 'imdb.jsonl.gz').read_bytes()
    run_dir = tmp_path / 'machine_a' / 'runs' / names[0]
    text2sql_benchmark.archive_run(str(run_dir), str(archive))
    assert (lorar / 'predictions' / 'imdb.jsonl.gz').read_bytes() == before
    assert not any(n.endswith('.partial') for n in os.listdir(archive))

  def test_runs_without_example_tokens_are_scored_again_once(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    options = {'checkpoints': True}
    calls = _fake_runs(self, options)
    archive = tmp_path / 'archive'
    _run(tmp_path, _METHODS, archive_dir=str(archive))
    assert len(calls) == 2
    # The code now records per-example token counts: each run is scored
    # again (a call of `run_text2sql` in its directory), once; its wall
    # time stays, the rescoring's is recorded beside it; the archive has
    # the new predictions.
    options.update(example_tokens=True, seconds=7.0)
    report = _run(tmp_path, _METHODS, archive_dir=str(archive))
    assert calls == [(m, 0) for m in _METHODS] * 2
    for name in os.listdir(archive):
      with open(archive / name / 'results.json') as f:
        results = json.load(f)
      assert (results['seconds'], results['rescore_seconds']) == (1.0, 7.0)
    difference = report['lorar_vs_num_examples']['fedavg']['token_accuracy']
    assert difference['bootstrap_ci95'] is not None
    _run(tmp_path, _METHODS, archive_dir=str(archive))
    assert len(calls) == 4
    assert not list(tmp_path.rglob('*.before_rescore'))

  def test_archived_runs_without_checkpoints_are_not_scored_again(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    options = {}
    calls = _fake_runs(self, options)
    _run(tmp_path, _METHODS)
    options.update(example_tokens=True)
    report = _run(tmp_path, _METHODS)
    assert len(calls) == 2
    difference = report['lorar_vs_num_examples']['fedavg']['token_accuracy']
    assert difference['bootstrap_ci95'] is None
    assert difference['seed_ci95'] is None  # One seed.

  def test_a_rescore_with_other_scores_is_refused(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    options = {'checkpoints': True}
    _fake_runs(self, options)
    _run(tmp_path, _METHODS[:1])
    options.update(example_tokens=True, extra_correct=1)
    with self.assertRaisesRegex(
        errors.InputError, r"its \['exact_match', 'tokens'\] differ from the "
        r'recorded ones \(kept in .*results.json.before_rescore\)'):
      _run(tmp_path, _METHODS[:1])

  def test_report_only_reports_the_finished_runs(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    calls = _fake_runs(self)
    methods = [_CENTRALIZED, _FEDAVG, _FEDAVG_LORAR]
    with self.assertRaisesRegex(errors.InputError, 'no finished run'):
      _run(tmp_path, methods, train=False)
    _run(tmp_path, methods, seeds=[0])
    assert len(calls) == 3
    # Seeds 1 and 2 are not run: the report has seed 0 of each method.
    report = _run(tmp_path, methods, seeds=[0, 1, 2], train=False)
    assert len(calls) == 3
    assert [report['methods'][s]['num_seeds'] for s in
            ('centralized', 'fedavg-num_examples', 'fedavg-lorar')] == [1, 1, 1]
    # A method without any finished run is left out.
    report = _run(tmp_path, [_FEDAVG, ('federated', 'fedprox', 'lorar')],
                  seeds=[0], train=False)
    assert len(calls) == 3
    assert list(report['methods']) == ['fedavg-num_examples']

  @parameterized.parameters(*[
      ([0], [], [(0, 'a'), (0, 'b')]),
      ([3, 1], [], [(3, 'a'), (3, 'b'), (1, 'a'), (1, 'b')]),
      ([0, 1, 2], [('a',), ('z',)], [(0, 'a'), (0, 'b'), (1, 'b'), (2, 'b')]),
  ])
  def test_run_schedule(self, seeds, single, expected):
    schedule = text2sql_benchmark.run_schedule([('a',), ('b',)], seeds, single)
    assert [(s, m[0]) for s, m in schedule] == expected

  @parameterized.parameters(*[
      ([], [0], '--methods: no method'),
      ([('a',), ('a',)], [0], '--methods: repeated'),
      ([('a',)], [], '--seeds: no seed'),
      ([('a',)], [1, 1], '--seeds: repeated'),
  ])
  def test_run_schedule_rejects(self, methods, seeds, message):
    with self.assertRaisesRegex(errors.InputError, message):
      text2sql_benchmark.run_schedule(methods, seeds)

  @parameterized.parameters(*[
      ('finetune', ('finetune',)),
      ('centralized', ('centralized',)),
      ('fedopt/lorar', ('federated', 'fedopt', 'lorar')),
      (' fedprox/uniform ', ('federated', 'fedprox', 'uniform')),
  ])
  def test_parse_method(self, spec, method):
    assert text2sql_benchmark.parse_method(spec) == method
    assert text2sql_benchmark.parse_method(
        text2sql_report.method_slug(method).replace('-', '/', 1)) == method

  @parameterized.parameters(*['fedopt', 'fedsgd/lorar', 'fedopt/median',
                              'local', ''])
  def test_parse_method_rejects(self, spec):
    with self.assertRaisesRegex(errors.InputError,
                                '--methods: .* is not a method'):
      text2sql_benchmark.parse_method(spec)

  def test_default_methods_are_the_benchmark_set(self):
    methods = text2sql_benchmark.default_methods()
    assert len(methods) == len(set(methods)) == 10
    assert ('federated', 'fedopt', 'loss_reduction') in methods


if __name__ == '__main__':
  tf.test.main()
