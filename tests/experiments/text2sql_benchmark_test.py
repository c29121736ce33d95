"""The benchmark's orchestration: method parsing, caching by config, report.

Training itself is covered by text2sql_test.py; here `run_text2sql` is
replaced by a recorder writing a `results.json` of the same shape, so the
test checks which runs happen and what the report says, in seconds.
"""

import json
import os

import pytest

from tff_nlp import errors
from tff_nlp import training
from tff_nlp.experiments import text2sql
from tff_nlp.experiments import text2sql_benchmark
from tff_nlp.models import seq2seq

_DATA = text2sql.DataConfig(clients=('geography', 'imdb'))
_MODEL = seq2seq.Seq2SeqConfig.from_preset('small')
_TRAINING = text2sql.TrainingConfig()
_LOOP = training.LoopConfig(rounds=3)
# Correct test predictions per method and client (of 4 examples each).
_CORRECT = {('federated', 'fedavg', 'num_examples'): {'geography': 1,
                                                      'imdb': 0},
            ('federated', 'fedavg', 'lorar'): {'geography': 2, 'imdb': 1}}


@pytest.fixture
def calls(monkeypatch):
  calls = []

  def fake_run(*, data_dir, output_dir, data, model, training, loop):
    del data_dir, model
    calls.append(training.method)
    correct = _CORRECT[training.method]
    os.makedirs(os.path.join(output_dir, 'federated'), exist_ok=True)
    with open(os.path.join(output_dir, 'federated', 'metrics.jsonl'),
              'w') as f:
      for r in range(loop.rounds + 1):
        f.write(json.dumps({'round': r, 'eval': {
            'dev_exact_match': r / 10, 'dev_token_accuracy': r / 5},
                            'client_ids': [0, 1], 'client_outputs': [
                                {'mean_batch_loss': 1.0 / (r + 1),
                                 'num_batches': 2}] * 2}) + '\n')
    results = {
        'config': {'loop': {'rounds': loop.rounds}},
        'examples': {c: {'train': 8, 'dev': 4, 'test': 4}
                     for c in data.clients},
        'test': {'exact_match': {'per_client': {
            c: {'correct': correct[c], 'total': 4,
                'accuracy': correct[c] / 4} for c in data.clients}},
                 'execution': None},
        # Token accuracy: 10 * correct EM examples of 20 (geography) and
        # of 40 (imdb) tokens.
        'test_tokens': {c: {'correct_tokens': 10 * correct[c],
                            'tokens': 20 if c == 'geography' else 40}
                        for c in data.clients},
        'best_rounds': {'federated': loop.rounds},
        'seconds': 1.0,
    }
    with open(os.path.join(output_dir, 'results.json'), 'w') as f:
      json.dump(results, f)
    return results

  monkeypatch.setattr(text2sql, 'run_text2sql', fake_run)
  return calls


def _run(output_dir, methods, loop=_LOOP, training_config=_TRAINING):
  return text2sql_benchmark.run_benchmark(
      data_dir=None, output_dir=str(output_dir), methods=methods, data=_DATA,
      model=_MODEL, training=training_config, loop=loop, command='cmd')


_METHODS = list(_CORRECT)


def test_runs_each_method_once_and_reads_finished_ones_back(tmp_path, calls):
  report = _run(tmp_path, _METHODS)
  assert calls == _METHODS
  table = (tmp_path / 'results.md').read_text()
  _run(tmp_path, _METHODS)  # Nothing left to do.
  assert calls == _METHODS
  _run(tmp_path, _METHODS, loop=training.LoopConfig(rounds=5))  # More rounds.
  assert calls == _METHODS * 2
  # Another configuration is another run, in its own directory.
  _run(tmp_path, _METHODS[:1], training_config=text2sql.TrainingConfig(
      client_optimizer='sgd'))
  assert calls == _METHODS * 2 + _METHODS[:1]
  assert len(os.listdir(tmp_path / 'runs')) == 3

  lorar = report['methods']['fedavg-lorar']
  assert lorar['run_dir'].startswith('runs/fedavg-lorar-')
  assert lorar['label'] == 'FedAvg + Lorar'
  # geography 2/4, imdb 1/4: macro (50 + 25) / 2 = 37.5, micro 3/8 = 37.5;
  # '*': averages over the two clients present, not all eight.
  assert '| FedAvg + Lorar | ours | – | – | 50.00 | – | – | – | 25.00 | – ' \
         '| 37.50* | 37.50* |' in table
  assert '| FedAvg | ours | – | – | 25.00 | – | – | – | 0.00 | – ' \
         '| 12.50* | 12.50* |' in table
  assert '| FedAvg + Lorar | paper |' in table
  # Lorar: geography 20/20, imdb 10/40 → MacroAvg (100 + 25) / 2 = 62.5,
  # MicroAvg 30/60 = 50; FedAvg: 10/20 and 0/40 → 25 and 10/60 = 16.67.
  tokens = table.split('token accuracy')[1]
  assert '| FedAvg + Lorar | ours | – | – | 100.00 | – | – | – | 25.00 | – ' \
         '| 62.50* | 50.00* |' in tokens
  assert '| FedAvg | ours | – | – | 50.00 | – | – | – | 0.00 | – ' \
         '| 25.00* | 16.67* |' in tokens
  assert '| paper |' not in tokens
  # Lorar minus FedAvg: EM geography 50 - 25, imdb 25 - 0, MacroAvg
  # 37.5 - 12.5; tokens 100 - 50, 25 - 0, 62.5 - 25, MicroAvg 50 - 16.67.
  assert '| FedAvg | exact match | – | – | +25.00 | – | – | – | +25.00 | – ' \
         '| +25.00 | +25.00 |' in table
  assert '| FedAvg | token accuracy | – | – | +50.00 | – | – | – | +25.00 ' \
         '| – | +37.50 | +33.33 |' in table
  assert '| FedAvg + Lorar | 3 | 0.0 | `runs/fedavg-lorar-' in table
  assert report['figures'] == ['dev_exact_match.png', 'dev_token_accuracy.png',
                               'training_loss_fedavg.png']
  for name in report['figures']:
    assert (tmp_path / name).stat().st_size > 0


@pytest.mark.parametrize('spec, method', [
    ('finetune', ('finetune',)),
    ('centralized', ('centralized',)),
    ('fedopt/lorar', ('federated', 'fedopt', 'lorar')),
    (' fedprox/uniform ', ('federated', 'fedprox', 'uniform')),
])
def test_parse_method(spec, method):
  assert text2sql_benchmark.parse_method(spec) == method
  assert text2sql_benchmark.parse_method(
      text2sql_benchmark.method_slug(method).replace('-', '/', 1)) == method


@pytest.mark.parametrize('spec', ['fedopt', 'fedsgd/lorar', 'fedopt/median',
                                  'local', ''])
def test_parse_method_rejects(spec):
  with pytest.raises(errors.InputError, match='--methods: .* is not a method'):
    text2sql_benchmark.parse_method(spec)


def test_default_methods_are_the_benchmark_set():
  methods = text2sql_benchmark.default_methods()
  assert len(methods) == len(set(methods)) == 10
  assert ('federated', 'fedopt', 'loss_reduction') in methods
