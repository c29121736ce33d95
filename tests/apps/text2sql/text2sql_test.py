"""Smoke tests of the text-to-SQL experiment on real data, tiny scale.

Two rounds of every algorithm (and the two non-federated paradigms) on a
few examples of two clients with a tiny model: the pipeline runs, its
outputs agree with each other, and the numbers are recomputable from the
written predictions. Learning is not asserted here (see the overfitting test
of the model); EM is near 0 at this scale.
"""

import dataclasses
import functools
import json
import os
import pathlib
import shutil
from unittest import mock

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tests import shared_runs
from tests.apps.text2sql import tiny_text2sql
from tff_nlp import errors
from tff_nlp import metrics
from tff_nlp import runtime
from tff_nlp import training
from tff_nlp.aggregators import factory as aggregation
from tff_nlp.analysis import privacy
from apps.text2sql import template_retrieval
from apps.text2sql import benchmark as text2sql_benchmark
from tff_nlp.data import text2sql as text2sql_data
from tff_nlp.data import text2sql_source
from apps.text2sql import experiment
from tff_nlp.metrics import bootstrap as bootstrap_lib
from apps.text2sql import report as text2sql_report
from tff_nlp.models import copy_tokenizer
from tff_nlp.models import seq2seq
from tff_nlp.models import seq2seq_inputs
from tff_nlp.models import seq2seq_loss
from tff_nlp.models import seq2seq_model_fn
from apps.common import seq2seq_examples
from apps.text2sql import task as text2sql_task
from apps.text2sql import task_data as text2sql_task_data
from apps.text2sql import process as text2sql_process
from apps.text2sql import template_parser as text2sql_templates

_CLIENTS = tiny_text2sql.CLIENTS
_DATA = tiny_text2sql.DATA
_MODEL = tiny_text2sql.MODEL
_LOOP = training.LoopConfig(rounds=2, eval_every=1, progress=False)


def _run(output_dir, **training_kwargs):
  training_kwargs.setdefault('local_epochs', text2sql_task.PerClient(1))
  training_kwargs.setdefault('batch_sizes', text2sql_task.PerClient(4))
  return experiment.run_text2sql(
      experiment.Text2SqlSpec(
          data=_DATA, model=_MODEL,
          training=text2sql_task.TrainingConfig(**training_kwargs), loop=_LOOP),
      data_dir=None, output_dir=str(output_dir))


@functools.cache
def _shared_run(**training_kwargs):
  """`_run` of one configuration, once per session: (its dir, its results).

  For the tests that only read a run, so that tests asserting different
  things about the same configuration train it once.
  """
  output_dir = pathlib.Path(shared_runs.temp_dir('run'))
  return output_dir, _run(output_dir, **training_kwargs)


def _pretrained():
  """A finished centralized run: what `init_from` starts from."""
  return _shared_run(paradigm='centralized')[0]


def _assert_same_tokenizer(run_dir, results, earlier):
  """`run_dir` (with its `results`) tokenizes with the `earlier` run's
  tokenizer: the same file, the same vocabulary size."""
  assert ((run_dir / 'tokenizer' / 'vocabulary.spm').read_bytes()
          == (earlier / 'tokenizer' / 'vocabulary.spm').read_bytes())
  with open(earlier / 'results.json') as f:
    assert results['vocabulary_size'] == json.load(f)['vocabulary_size']


def _round_0_and_selected(run_dir, earlier):
  """(round-0 global weight of federated `run_dir`, the `earlier` run's
  selected weight) per trainable variable."""
  reader = tf.train.load_checkpoint(str(
      run_dir / 'federated' / 'checkpoints' / 'round_0' / 'variables' /
      'variables'))
  with np.load(earlier / 'centralized' / 'best_model.npz') as best:
    return [(reader.get_tensor(f'_value/global_model_weights/trainable/{i}/'
                               '.ATTRIBUTES/VARIABLE_VALUE'), best[f'arr_{i}'])
            for i in range(len(best.files))]


class Text2SqlExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('fedavg_lorar',
       dict(paradigm='federated', algorithm='fedavg', weighting='lorar'),
       ['federated']),
      ('fedopt',
       dict(paradigm='federated', algorithm='fedopt',
            weighting='num_examples'),
       ['federated']),
      ('fedprox_uniform',
       dict(paradigm='federated', algorithm='fedprox', weighting='uniform',
            proximal_strength=0.01), ['federated']),
      ('centralized', dict(paradigm='centralized'), ['centralized']),
      ('finetune', dict(paradigm='finetune'),
       ['finetune/geography', 'finetune/imdb']),
  )
  def test_runs_two_rounds_and_reports_consistently(
      self, training_kwargs, unit_dirs):
    tmp_path, results = _shared_run(**training_kwargs)

    for unit_dir in unit_dirs:
      records = training.read_json_lines(
          os.path.join(tmp_path, unit_dir, 'metrics.jsonl'))
      assert [r['round'] for r in records] == [0, 1, 2]
      for r in records:
        assert 0.0 <= r['eval']['dev_exact_match'] <= 1.0
      for r in records[1:]:
        assert np.isfinite(r['train']['client_work']['train']['loss'])
      assert os.path.exists(os.path.join(tmp_path, unit_dir, 'best_model.npz'))
      # The selected round: the last with the highest dev EM (ties go to the
      # more trained model, so an all-zero run does not select round 0).
      ems = [r['eval']['dev_exact_match'] for r in records]
      expected_round = max(r for r, em in enumerate(ems) if em == max(ems))
      assert (results['best_rounds'][os.path.basename(unit_dir)]
              == expected_round)

    assert results['examples'] == {c: {'train': 6, 'dev': 3, 'test': 3}
                                   for c in _CLIENTS}
    # The reported EM is recomputable from the written predictions.
    outcomes = {}
    for client in _CLIENTS:
      with open(os.path.join(tmp_path, 'predictions', f'{client}.jsonl')) as f:
        lines = [json.loads(line) for line in f]
      assert len(lines) == 3
      for line in lines:
        assert line['exact_match'] == metrics.exact_match(
            line['prediction'], line['gold'])
        assert 0 <= line['correct_tokens'] <= line['tokens']
      outcomes[client] = [line['exact_match'] for line in lines]
      # The per-example token counts add up to the client's.
      assert ([sum(line[k] for line in lines) for k in ('correct_tokens',
                                                        'tokens')]
              == [results['test_tokens'][client][k] for k in (
                  'correct_tokens', 'tokens')])
      assert 'example_tokens' not in results['test_tokens'][client]
    expected = metrics.ClientAccuracies.from_outcomes(outcomes)
    assert results['test']['exact_match']['macro_avg'] == pytest.approx(
        expected.macro)
    assert results['test']['exact_match']['micro_avg'] == pytest.approx(
        expected.micro)
    # The bootstrap intervals are those of the written outcomes.
    bootstrap = bootstrap_lib.bootstrap_accuracy(
        {c: [outcomes[c]] for c in _CLIENTS}).to_json()
    assert json.loads(json.dumps(
        results['test_exact_match_bootstrap_ci95'])) == json.loads(
            json.dumps(bootstrap))
    low, high = (bootstrap['macro_avg'][k] for k in ('low', 'high'))
    assert low <= expected.macro <= high
    # geography has a database: execution accuracy is reported for it only.
    assert list(results['test']['execution']['per_client']) == ['geography']
    for name in ('results.json', 'results.md', 'dev_exact_match.png',
                 'config.json', 'tokenizer/vocabulary.spm'):
      assert os.path.exists(os.path.join(tmp_path, name)), name
    with open(os.path.join(tmp_path, 'results.md')) as f:
      table = f.read()
    # The paper's row where the paper has the method (not FedProx + uniform).
    method = tuple(results['method'])
    assert ('| paper |' in table) == (method in text2sql_report.PAPER_RESULTS)
    # The README's promise: execution and token accuracy, the selected rounds
    # in words (once a Python dict).
    assert '| geography | 3 | ' in table and '| imdb | 3 | ' in table
    assert 'token accuracy (%)' in table and 'execution accuracy (%)' in table
    assert 'Selected models (best merged-dev exact match): ' in table
    assert '{' not in table

  @parameterized.named_parameters(('values', True), ('anonymised', False))
  def test_copy_words_run(self, with_values):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    data = dataclasses.replace(
        _DATA, tokenizer='copy_words', sql_merges=20, max_source_length=0,
        max_target_length=0, with_values=with_values, vocabulary_size=300)
    results = experiment.run_text2sql(
        experiment.Text2SqlSpec(
            data=data, model=_MODEL,
            training=text2sql_task.TrainingConfig(
                paradigm='centralized', batch_sizes=text2sql_task.PerClient(4)),
            loop=dataclasses.replace(_LOOP, evaluate_initial=False)),
        data_dir=None, output_dir=str(tmp_path))
    # Lengths fit the longest example: nothing is truncated.
    assert all(v == {'sources': 0, 'targets': 0}
               for splits in results['truncated'].values()
               for v in splits.values())
    with open(os.path.join(tmp_path, 'tokenizer',
                           'copy_vocabulary.json')) as f:
      vocabulary = json.load(f)
    assert len(vocabulary['merges']) <= 20
    records = training.read_json_lines(
        os.path.join(tmp_path, 'centralized', 'metrics.jsonl'))
    assert [r['round'] for r in records if 'eval' in r] == [1, 2]
    # Gold SQL is scored with values on both protocols: the anonymised
    # run's predictions have the variables' values filled in.
    gold = {c: [e.sql for e in text2sql_data.load_clients(
        [c], with_values=True)[c].test] for c in _CLIENTS}
    for client in _CLIENTS:
      with open(os.path.join(tmp_path, 'predictions', f'{client}.jsonl')) as f:
        lines = [json.loads(line) for line in f]
      assert all(line['gold'] in gold[client] for line in lines)
      for line in lines:
        assert text2sql_data.VARIABLE_PATTERN.search(line['gold']) is None

  @parameterized.parameters(*[
      (['12', 'advising=6', 'atis=6'], int, (12, {'advising': 6, 'atis': 6})),
      (['1e-3', 'yelp=1e-4'], float, (1e-3, {'yelp': 1e-4})),
      ([' 4 '], int, (4, {})),
  ])
  def test_per_client_parse(self, spec, kind, expected):
    value = text2sql_task.PerClient.parse(spec, name='x', kind=kind)
    default, overrides = expected
    assert value.default == default
    for client in ('advising', 'atis', 'yelp', 'imdb'):
      assert value[client] == overrides.get(client, default)

  def test_per_client_parse_allows_zero_only_when_asked(self):
    value = text2sql_task.PerClient.parse(['0', 'atis=400'], name='x', kind=int,
                                          allow_zero=True)
    assert (value['imdb'], value['atis']) == (0, 400)
    with self.assertRaisesRegex(errors.InputError, "--x: '0' must be positive"):
      text2sql_task.PerClient.parse(['0'], name='x', kind=int)
    with self.assertRaisesRegex(errors.InputError,
                                "--x: 'atis=-1' must be >= 0"):
      text2sql_task.PerClient.parse(['0', 'atis=-1'], name='x', kind=int,
                                    allow_zero=True)

  def test_per_client_training_caps(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    data = text2sql_task.DataConfig(
        clients=('geography', 'imdb', 'yelp'), schema_columns=False,
        vocabulary_size=400, max_source_length=48, max_target_length=96,
        max_train_examples=text2sql_task.PerClient(
            5, (('imdb', 9), ('yelp', 0))),
        max_eval_examples=2)
    task = text2sql_task_data.prepare_task(data, data_dir=None, seed=0,
                                      tokenizer_dir=str(tmp_path))
    sizes = {c: len(task.splits[c]['train']) for c in task.clients}
    # yelp=0 keeps all 78 training questions of the paper's split.
    assert sizes == {'geography': 5, 'imdb': 9, 'yelp': 78}
    assert text2sql_task.DataConfig(
        max_train_examples=7).max_train_examples == text2sql_task.PerClient(7)

  def test_decode_lengths_bound_every_gold_sql_of_the_client(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    data = text2sql_task.DataConfig(
        clients=('geography', 'yelp'), schema_columns=False,
        tokenizer='copy_words', sql_merges=50, vocabulary_size=400,
        max_source_length=0, max_target_length=0, max_train_examples=20,
        max_eval_examples=0)
    task = text2sql_task_data.prepare_task(data, data_dir=None, seed=0,
                                      tokenizer_dir=str(tmp_path))
    for client in task.clients:
      # The longest gold SQL of the client, in words, plus END; every
      # encoded target (tokens: words or merged words, plus END) fits.
      words = [len(copy_tokenizer.split_words(sql))
               for split in task.splits[client].values()
               for sql in split.gold_sql]
      assert task.decode_length(client) == min(max(words) + 1,
                                               task.target_length)
      longest_encoded = max(int(np.max(np.sum(split.y != 0, axis=1)))
                            for split in task.splits[client].values())
      assert longest_encoded <= task.decode_length(client)
    # The client with the longest encoded SQL decodes to the shared length.
    assert max(task.decode_length(c) for c in task.clients) == (
        task.target_length)

  @parameterized.named_parameters(('values', True), ('anonymised', False))
  def test_retrieved_sql_hints_are_the_baselines_predictions(self, with_values):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    clients = ('geography', 'yelp')
    data = text2sql_task.DataConfig(
        clients=clients, schema_columns=False, tokenizer='copy_words',
        sql_merges=50, vocabulary_size=400, max_source_length=0,
        max_target_length=0, retrieved_sql=True, with_values=with_values)
    task = text2sql_task_data.prepare_task(data, data_dir=None, seed=0,
                                      tokenizer_dir=str(tmp_path))
    raw = text2sql_data.load_clients(clients, with_values=True)
    baseline = template_retrieval.predict_clients(raw, split='test')
    for client in clients:
      test = task.splits[client]['test']
      questions = [text2sql_data.model_input(
          e.question, raw[client].schema, columns=False)
                   for e in text2sql_data.load_clients(
                       [client], with_values=with_values)[client].test]
      hints = []
      for source, question in zip(test.sources, questions):
        assert source.startswith(question + ' <sql> ')
        hints.append(source[len(question) + len(' <sql> '):])
      if with_values:
        # The same SQL as the baseline, which predicts from the full pool.
        assert hints == [prediction for prediction, _ in baseline[client]]
      else:
        # Anonymised hints with the oracle values are right wherever the
        # baseline is (they can be right more often: a variable only in the
        # SQL gets the question's own value, not the retrieved example's).
        filled = [text2sql_data.fill_variables(hint, variables)
                  for hint, variables in zip(hints, test.variables)]
        for hint, (prediction, gold) in zip(filled, baseline[client]):
          assert hint == gold or prediction != gold
    # The baseline's test exact match (geography 137/279, yelp 5/24: the
    # template_retrieval module docstring) is what copying the hint scores.
    assert [sum(prediction == gold for prediction, gold in baseline[c])
            for c in clients] == [137, 5]
    # Training hints come from the other training questions (leave one
    # out), yet most geography hints match (paraphrases of one query):
    # 323/549 with the full pool (58.8%).
    train = task.splits['geography']['train']
    hints = [source.split(' <sql> ', 1)[1] for source in train.sources]
    if not with_values:
      hints = [text2sql_data.fill_variables(hint, variables)
               for hint, variables in zip(hints, train.variables)]
    assert sum(h == gold for h, gold in zip(hints, train.gold_sql)) == 323

  @parameterized.parameters(*[
      (['advising=6'], 'needs a default value'),
      (['6', '7'], 'two default values'),
      (['6', 'nowhere=3'], "unknown client 'nowhere'"),
      (['six'], "'six' is not a int"),
      (['6', 'atis=0'], "'atis=0' must be positive"),
  ])
  def test_per_client_parse_errors_name_the_flag(self, spec, message):
    with self.assertRaisesRegex(errors.InputError,
                                f'--local_epochs: .*{message}'):
      text2sql_task.PerClient.parse(spec, name='local_epochs', kind=int)

  @parameterized.parameters(*[
      (dict(clients=()), 'at least one client'),
      (dict(clients=('imdb', 'imdb')), 'repeated'),
      (dict(clients=('nowhere',)), 'nowhere'),
      (dict(max_source_length=0), 'max_source_length must be positive'),
      (dict(max_train_examples=-1), 'max_train_examples must be >= 0'),
      (dict(max_train_examples=text2sql_task.PerClient(5, (('atis', -2),))),
       'max_train_examples must be >= 0'),
      (dict(max_eval_examples=-1), 'max_eval_examples must be >= 0'),
      (dict(retrieved_sql=True), 'retrieved_sql needs the copy_words'),
  ])
  def test_data_config_rejects(self, kwargs, message):
    with self.assertRaisesRegex(ValueError, message):
      text2sql_task.DataConfig(**kwargs)

  def test_init_from_starts_from_the_selected_model(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    pretrained = _pretrained()
    # Same tokenizer, and round 0 is the earlier run's selected model. The
    # model differs only where it may (experiment.INIT_FROM_FREE_FIELDS), the
    # data other than in its maximum lengths.
    results = experiment.run_text2sql(
        experiment.Text2SqlSpec(
            data=dataclasses.replace(_DATA, vocabulary_size=300,
                                     max_train_examples=4),
            model=dataclasses.replace(_MODEL, dropout=0.0, seed=5,
                                      vocabulary_size=1000),
            loop=_LOOP, init_from=str(pretrained),
            training=text2sql_task.TrainingConfig(
                paradigm='federated', algorithm='fedavg', weighting='lorar',
                local_epochs=text2sql_task.PerClient(1),
                batch_sizes=text2sql_task.PerClient(4))),
        data_dir=None, output_dir=str(tmp_path / 'finetuned'))
    _assert_same_tokenizer(tmp_path / 'finetuned', results, pretrained)
    for start, selected in _round_0_and_selected(tmp_path / 'finetuned',
                                                 pretrained):
      np.testing.assert_array_equal(start, selected)
    assert results['config']['experiment']['init_from'] == str(pretrained)

  def test_tokenizer_from_trains_fresh_weights_with_that_runs_tokenizer(
      self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    pretrained = _pretrained()
    results = experiment.run_text2sql(
        experiment.Text2SqlSpec(
            # Its own vocabulary would be 300: the copied one is the run's.
            data=dataclasses.replace(_DATA, vocabulary_size=300), model=_MODEL,
            loop=dataclasses.replace(_LOOP, rounds=1),
            tokenizer_from=str(pretrained),
            training=text2sql_task.TrainingConfig(
                paradigm='federated', local_epochs=text2sql_task.PerClient(1),
                batch_sizes=text2sql_task.PerClient(4))),
        data_dir=None, output_dir=str(tmp_path / 'scratch'))
    _assert_same_tokenizer(tmp_path / 'scratch', results, pretrained)
    assert results['config']['experiment']['tokenizer_from'] == str(
        pretrained)
    # Round 0 is a fresh model of the seed, not the run's trained one.
    assert any(not np.array_equal(start, selected) for start, selected in
               _round_0_and_selected(tmp_path / 'scratch', pretrained))

  @parameterized.named_parameters(
      ('with_init_from', True, False, errors.InputError,
       "--tokenizer_from gives a model from scratch another run's tokenizer:"
       ' it takes no --init_from or --init_from_keras_nlp (they bring their '
       'own tokenizers) and no --parser=template.'),
      ('another_kind_of_tokenizer', False, True, errors.CheckpointError,
       '--tokenizer_from={earlier}: no subword tokenizer '
       '({earlier}/tokenizer/vocabulary.spm is missing); --tokenizer=subword '
       'needs a run that tokenized its data that way.'),
  )
  def test_tokenizer_from_refused(self, with_init_from, copy_words_run,
                                  error, message):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    earlier = tmp_path / 'earlier'
    (earlier / 'tokenizer').mkdir(parents=True)
    if copy_words_run:
      (earlier / 'tokenizer' / copy_tokenizer.VOCABULARY_FILE).write_text('')
    with self.assertRaises(error) as e:
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_DATA, model=_MODEL, loop=_LOOP, tokenizer_from=str(earlier),
              init_from=str(earlier) if with_init_from else None,
              training=text2sql_task.TrainingConfig()),
          data_dir=None, output_dir=str(tmp_path / 'run'))
    self.assertEqual(str(e.exception), message.format(earlier=earlier))
    self.assertFalse((tmp_path / 'run').exists())

  def test_template_parser_refuses_lowercase_sql(self):
    with self.assertRaisesRegex(errors.InputError, '--lowercase_sql'):
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=dataclasses.replace(_DATA, lowercase_sql=True),
              model=text2sql_templates.TemplateParserConfig(), loop=_LOOP,
              training=text2sql_task.TrainingConfig()),
          data_dir=None, output_dir=self.create_tempdir().full_path)

  @parameterized.named_parameters(
      # Other shapes: the checkpoint would not load either.
      ('num_heads', dict(num_heads=4), {}, False, 'num_heads: 2 -> 4'),
      ('intermediate_dim', dict(intermediate_dim=64), {}, False,
       'intermediate_dim: 32 -> 64'),
      ('max_source_length', {}, dict(max_source_length=64), False,
       'max_source_length: 48 -> 64'),
      # The same shapes: the weights would load into a different model.
      ('activation', dict(activation='gelu'), {}, True,
       "activation: 'relu' -> 'gelu'"),
      ('activation_and_epsilon',
       dict(activation='gelu', layer_norm_epsilon=1e-5, dropout=0.0), {},
       True,
       "activation: 'relu' -> 'gelu'; layer_norm_epsilon: 1e-06 -> 1e-05"),
  )
  def test_init_from_a_run_of_another_model_is_refused(
      self, model_changes, data_changes, loads, differences):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    pretrained = _pretrained()
    model = dataclasses.replace(_MODEL, **model_changes)
    data = dataclasses.replace(_DATA, **data_changes)
    checkpoint = str(pretrained / 'best_checkpoint' / 'centralized' / 'ckpt')
    with open(pretrained / 'results.json') as f:
      built = dataclasses.replace(
          model, vocabulary_size=json.load(f)['vocabulary_size'],
          max_source_length=data.max_source_length,
          max_target_length=data.max_target_length)
    if loads:  # What the check is for: nothing else would notice.
      seq2seq_model_fn.load_model_weights(built, checkpoint)
    else:
      with self.assertRaisesRegex(errors.CheckpointError,
                                  'another configuration'):
        seq2seq_model_fn.load_model_weights(built, checkpoint)
    with self.assertRaises(errors.CheckpointError) as e:
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=data, model=model, loop=_LOOP, init_from=str(pretrained),
              training=text2sql_task.TrainingConfig()),
          data_dir=None, output_dir=str(tmp_path / 'run'))
    assert str(e.exception) == (
        f"{pretrained / 'config.json'}: the run in '{pretrained}' trained a "
        f"different model (its value -> this run's: {differences}), so its "
        'weights cannot start this run. Use its model configuration and '
        'maximum lengths (only dropout, seed, vocabulary_size may differ), or '
        'start from another run.')
    assert not (tmp_path / 'run').exists()  # Refused before writing anything.

  def test_init_from_a_directory_without_a_selected_model(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    with self.assertRaisesRegex(errors.CheckpointError,
                                'best_checkpoint: expected'):
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_DATA, model=_MODEL, loop=_LOOP, init_from=str(tmp_path),
              training=text2sql_task.TrainingConfig()),
          data_dir=None, output_dir=str(tmp_path / 'run'))

  @parameterized.named_parameters(
      ('missing', None,
       "FileNotFoundError: [Errno 2] No such file or directory: '{path}'"),
      ('unreadable', '{"experiment": ',
       'JSONDecodeError: Expecting value: line 1 column 16 (char 15)'),
      ('another_experiment', '{"experiment": {"seed": 0, "data": {}}}',
       "KeyError: 'model'"),
  )
  def test_init_from_a_run_without_its_model_config(self, recorded, problem):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    earlier = tmp_path / 'earlier'
    (earlier / 'best_checkpoint' / 'centralized').mkdir(parents=True)
    path = earlier / 'config.json'
    if recorded is not None:
      path.write_text(recorded)
    with self.assertRaises(errors.CheckpointError) as e:
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_DATA, model=_MODEL, loop=_LOOP, init_from=str(earlier),
              training=text2sql_task.TrainingConfig()),
          data_dir=None, output_dir=str(tmp_path / 'run'))
    assert str(e.exception) == (
        f'{path}: cannot read the model configuration of the run in '
        f"'{earlier}' ({problem.format(path=path)}); init_from needs the "
        'output directory of a text2sql run.')

  # --max_source_length=0 (copy_words) fits the length to a run's data:
  # two runs on other data build models of other shapes. This run's data
  # fitted, or the run it starts from's.
  @parameterized.named_parameters(
      ('this_run', True, errors.InputError,
       "--init_from={earlier}: --max_source_length=0 fits the maximum length "
       "to this run's data, so the model may not have the shape of the one "
       'it starts from. Give the maximum lengths that run was built with.'),
      ('the_earlier_run', False, errors.CheckpointError,
       "{config}: the run in '{earlier}' fitted max_source_length to its "
       'data (0 in its configuration), so the shape of its model is not '
       'recorded; start from a run with explicit maximum lengths.'),
  )
  def test_init_from_with_lengths_fitted_to_the_data_is_refused(
      self, this_run_fitted, error, message):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    earlier = tmp_path / 'earlier'
    (earlier / 'best_checkpoint' / 'centralized').mkdir(parents=True)
    fitted = dataclasses.replace(_DATA, tokenizer='copy_words',
                                 max_source_length=0)
    training.write_json(earlier / 'config.json', {'experiment': {
        'model': _MODEL, 'data': fitted}})
    with self.assertRaises(error) as e:
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=fitted if this_run_fitted else _DATA, model=_MODEL,
              loop=_LOOP, init_from=str(earlier),
              training=text2sql_task.TrainingConfig()),
          data_dir=None, output_dir=str(tmp_path / 'run'))
    self.assertEqual(str(e.exception), message.format(
        earlier=earlier, config=earlier / 'config.json'))
    self.assertFalse((tmp_path / 'run').exists())

  @parameterized.parameters(*[(0, 4), (3, 4), (64, 4), (1000, 8),
                              (257, 16)])
  def test_length_grouped_order(self, n, batch_size):
    rng = np.random.default_rng(n)
    source = rng.integers(1, 50, n)
    target = rng.integers(1, 200, n)
    order = seq2seq_examples.length_grouped_order(
        source, target, batch_size=batch_size, rng=np.random.default_rng(7))
    assert sorted(order) == list(range(n))  # A permutation: nothing dropped.
    again = seq2seq_examples.length_grouped_order(
        source, target, batch_size=batch_size, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(order, again)
    window = batch_size * seq2seq_examples.LENGTH_GROUPING_WINDOW
    full = n // batch_size
    batches = [order[i * batch_size:(i + 1) * batch_size] for i in range(full)]
    for batch in batches:  # Each full batch is target-sorted within a window.
      assert list(target[batch]) == sorted(target[batch])
    if n >= 2 * window:
      # Length spread within batches is far below the spread of random
      # batches (for uniform lengths on 1..199 and a window of 32 batches,
      # about 1/32 of it).
      spread = np.mean([np.ptp(target[b]) for b in batches])
      random_spread = np.mean([np.ptp(target[b]) for b in
                               np.split(np.arange(full * batch_size), full)])
      assert spread < random_spread / 8

  @parameterized.parameters(*[1, 3, 16])
  def test_token_metrics_match_one_padded_batch(self, batch_size):
    config = seq2seq.Seq2SeqConfig(
        vocabulary_size=13, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=8, intermediate_dim=16, dropout=0.0,
        max_source_length=6, max_target_length=5, seed=1)
    model = seq2seq.build_keras_model(config)
    sources = tf.ragged.constant([[5, 6, 7], [8], [9, 10, 11, 12], [4, 4]])
    targets = tf.ragged.constant([[7, 8], [9, 10, 11], [4], [5, 6, 7, 8]])
    x, y = seq2seq_inputs.pack_inputs(sources, targets, source_length=6,
                               target_length=5)
    data = text2sql_task.EncodedSplit(
        x={k: v.numpy() for k, v in x.items()}, y=y.numpy(),
        sources=['a'] * 4, gold_sql=['b'] * 4, truncated_sources=0,
        truncated_targets=0)
    # Reference: all four examples in one padded batch, the loss averaged over
    # the 14 real tokens (2+3+1+4 SQL tokens plus one END each).
    logits = model(x).numpy()
    mask = y.numpy() != seq2seq.PAD_ID
    assert mask.sum() == 14
    expected_loss = float(seq2seq_loss.masked_loss()(y, logits))
    expected_correct = int(((logits.argmax(-1) == y.numpy()) & mask).sum())
    token_metrics = seq2seq_examples.make_token_metrics_fn(
        model, batch_size=batch_size)
    metrics = token_metrics(data)
    assert metrics['tokens'] == 14
    assert metrics['correct_tokens'] == expected_correct
    # Per example, in the data's order (batches go by length): 3, 4, 2, 5
    # target tokens.
    assert metrics['example_tokens'] == [3, 4, 2, 5]
    assert metrics['example_correct_tokens'] == (
        ((logits.argmax(-1) == y.numpy()) & mask).sum(axis=1).tolist())
    assert metrics['token_accuracy'] == pytest.approx(expected_correct / 14)
    assert metrics['token_loss'] == pytest.approx(expected_loss, abs=1e-5)
    # New weights and another split reuse the one trace (batches of every
    # length share the shape-relaxed signature).
    model.set_weights([w * 0.5 for w in model.get_weights()])
    token_metrics(data)
    assert token_metrics.forward.experimental_get_tracing_count() == 1

  def test_vocab_sliced_run_moves_fewer_bytes(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    # Vocabulary 400; each client keeps its 60 most frequent ids. The round's
    # download is the rest of the model plus 60 embedding rows, not 400.
    results = experiment.run_text2sql(
        experiment.Text2SqlSpec(
            data=_DATA, model=_MODEL,
            training=text2sql_task.TrainingConfig(
                paradigm='federated', algorithm='fedavg', weighting='uniform',
                local_epochs=text2sql_task.PerClient(1),
                batch_sizes=text2sql_task.PerClient(4)),
            loop=_LOOP, vocab_slice_keys=60),
        data_dir=None, output_dir=str(tmp_path))
    slices = results['vocab_slices']
    assert set(slices) == set(_CLIENTS)
    for client in _CLIENTS:
      assert slices[client]['keys'] == min(60, slices[client]['distinct_ids'])
    records = training.read_json_lines(
        os.path.join(tmp_path, 'federated', 'metrics.jsonl'))
    down = records[1]['communication']['bytes_down_per_client']
    model_bytes = 4 * sum(np.prod(w.shape) for w in seq2seq.build_keras_model(
        dataclasses.replace(_MODEL, vocabulary_size=results['vocabulary_size'],
                            max_source_length=48, max_target_length=96))
                          .trainable_weights)
    embedding_bytes = 4 * results['vocabulary_size'] * _MODEL.hidden_dim
    # + the client optimizer's hyperparameters broadcast (Adam: learning rate,
    # beta_1, beta_2, epsilon: 16 bytes).
    assert down == model_bytes - embedding_bytes + 4 * 60 * 16 + 16
    assert results['config']['experiment']['vocab_slice_keys'] == 60

  def test_lorar_without_fallback_is_split_across_two_workers(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    context = runtime.multi_worker_context(num_workers=2)
    with context:
      results = experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_DATA, model=_MODEL,
              training=text2sql_task.TrainingConfig(
                  paradigm='federated', algorithm='fedavg', weighting='lorar',
                  local_epochs=text2sql_task.PerClient(1),
                  batch_sizes=text2sql_task.PerClient(4)),
              loop=_LOOP, num_examples_fallback=False),
          data_dir=None, output_dir=str(tmp_path))
    # Every round ran split (none fell back to one worker) and was recorded.
    assert context.tff_context.unsplit_computations == []
    assert results['config']['experiment']['num_examples_fallback'] is False
    records = training.read_json_lines(
        os.path.join(tmp_path, 'federated', 'metrics.jsonl'))
    assert [r['round'] for r in records if 'train' in r] == [1, 2]

  def test_dp_run_records_its_epsilon(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    # Two clients, both in each of the 2 rounds; delta = 1/2. The cap is a
    # no-op under uniform weights but is composed (outermost).
    results = experiment.run_text2sql(
        experiment.Text2SqlSpec(
            data=_DATA, model=_MODEL,
            training=text2sql_task.TrainingConfig(
                paradigm='federated', algorithm='fedavg', weighting='uniform',
                local_epochs=text2sql_task.PerClient(1),
                batch_sizes=text2sql_task.PerClient(4)),
            loop=_LOOP, aggregation=aggregation.AggregationConfig(
                max_weight_share=0.75, dp_noise_multiplier=0.15)),
        data_dir=None, output_dir=str(tmp_path))
    expected = [privacy.epsilon(0.15, 2, 2, r, 0.5) for r in (1, 2)]
    assert results['privacy'] == dict(
        epsilon=expected[1], delta=0.5, noise_multiplier=0.15,
        clients_per_round=2, population=2, rounds=2,
        sampling='full_participation',
        accountant='dp_accounting.rdp.RdpAccountant')
    records = results['rounds']['federated']
    assert [r['privacy']['epsilon'] for r in records if 'train' in r] == (
        expected)
    aggregator = records[1]['train']['aggregator']
    assert set(aggregator) == {'weight_cap', 'inner'}
    with open(tmp_path / 'config.json', encoding='utf-8') as f:
      assert json.load(f)['experiment']['aggregation'] == dict(
          max_weight_share=0.75, robust=False, dp_noise_multiplier=0.15,
          target_epsilon=None, dp_delta=None, dp_clip=None,
          trim_fraction=None)

  @parameterized.named_parameters(
      ('lorar', dict(paradigm='federated', weighting='lorar'),
       aggregation.AggregationConfig(target_epsilon=50.0),
       "needs weighting='uniform', got weighting='lorar'"),
      ('finetune', dict(paradigm='finetune'),
       aggregation.AggregationConfig(robust=True),
       'apply to the federated paradigm'),
  )
  def test_aggregation_that_does_not_fit_is_refused_before_any_output(
      self, training_kwargs, config, message):
    tmp_path = pathlib.Path(self.create_tempdir().full_path) / 'run'
    with self.assertRaisesRegex(errors.InputError, message):
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_DATA, model=_MODEL,
              training=text2sql_task.TrainingConfig(**training_kwargs),
              loop=_LOOP, aggregation=config),
          data_dir=None, output_dir=str(tmp_path))
    assert not tmp_path.exists()

  def test_spec_records_only_the_options_set(self):
    # The config's `experiment` (and so run folders and cache keys) of a
    # run without options is the one recorded before they existed; a
    # default aggregation is no aggregation.
    spec = experiment.Text2SqlSpec(
        data=_DATA, model=_MODEL, training=text2sql_task.TrainingConfig(),
        loop=_LOOP, aggregation=aggregation.AggregationConfig())
    self.assertIsNone(spec.aggregation)
    self.assertEqual(list(spec.experiment()),
                     ['seed', 'data', 'model', 'training', 'init_from'])
    capped = dataclasses.replace(
        spec, training=text2sql_task.TrainingConfig(paradigm='federated'),
        num_examples_fallback=False, tokenizer_from='earlier',
        aggregation=aggregation.AggregationConfig(max_weight_share=0.5))
    self.assertEqual(
        dict(capped.experiment()), dict(
            seed=_LOOP.seed, data=_DATA, model=_MODEL,
            training=capped.training, init_from=None,
            num_examples_fallback=False,
            tokenizer_from=os.path.abspath('earlier'),
            aggregation=capped.aggregation))

  def test_benchmark_run_refused_for_its_data_leaves_no_run_behind(self):
    # A data file the benchmark's run cannot read: refused before it
    # starts, leaving no run directory (no config.json that a corrected
    # call would find), then the corrected data is read and recorded.
    root = pathlib.Path(self.create_tempdir().full_path)
    data_dir = root / 'data'
    shutil.copytree(
        pathlib.Path(text2sql_source.find_text2sql_dir()),
        data_dir / 'text2sql')
    good = (data_dir / 'text2sql' / 'imdb.json').read_bytes()
    (data_dir / 'text2sql' / 'imdb.json').write_text('[{')
    output_dir = root / 'bench'
    settings = text2sql_benchmark.RunSettings(
        data=_DATA, model=_MODEL, loop=_LOOP,
        training=text2sql_task.TrainingConfig(
            local_epochs=text2sql_task.PerClient(1),
            batch_sizes=text2sql_task.PerClient(4)))
    method = ('federated', 'fedavg', 'uniform')
    with self.assertRaisesRegex(errors.InputError, 'imdb.json'):
      text2sql_benchmark.collect_runs(
          settings, data_dir=str(data_dir), output_dir=str(output_dir),
          methods=[method])
    assert not output_dir.exists()
    # The corrected data: the run starts (stopped here once it has, after
    # recording the files it read).
    (data_dir / 'text2sql' / 'imdb.json').write_bytes(good)

    class Started(Exception):
      pass

    with mock.patch.object(training, 'run_training',
                           side_effect=Started), self.assertRaises(Started):
      text2sql_benchmark.collect_runs(
          settings, data_dir=str(data_dir), output_dir=str(output_dir),
          methods=[method])
    run_dir, = (output_dir / 'runs').iterdir()
    with open(run_dir / 'data_fingerprint.json') as f:
      assert sorted(json.load(f)['files']) == [
          f'text2sql/{c}{suffix}' for c in sorted(_CLIENTS)
          for suffix in ('-schema.csv', '.json')]

  def test_vocab_slicing_needs_fedavg_uniform(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    with self.assertRaisesRegex(ValueError, "algorithm 'fedavg' and weighting"):
      experiment.run_text2sql(
          experiment.Text2SqlSpec(
              data=_DATA, model=_MODEL,
              training=text2sql_task.TrainingConfig(paradigm='federated',
                                                    algorithm='fedavg',
                                                    weighting='lorar'),
              loop=_LOOP, vocab_slice_keys=60),
          data_dir=None, output_dir=str(tmp_path))

  def test_a_finished_run_scored_again_gives_its_scores(self):
    # A copy of a finished run as recorded before per-example token counts
    # (and with a wall time to keep): scoring it again from its checkpoints
    # trains no round and gives the recorded scores, with the counts.
    shared, _ = _shared_run(paradigm='federated', algorithm='fedavg',
                            weighting='lorar')
    run_dir = pathlib.Path(self.create_tempdir().full_path) / 'run'
    shutil.copytree(shared, run_dir)
    expected = {}
    for path in (run_dir / 'predictions').iterdir():
      lines = [json.loads(line) for line in path.read_text().splitlines()]
      expected[path.name] = lines
      path.write_text(''.join(json.dumps(
          {k: v for k, v in line.items() if k not in ('correct_tokens',
                                                      'tokens')}) + '\n'
                              for line in lines))
    with open(run_dir / 'results.json') as f:
      before = json.load(f)
    before['seconds'] = 1234.5
    training.write_json(str(run_dir / 'results.json'), before)
    metrics_before = (run_dir / 'federated' / 'metrics.jsonl').read_text()
    settings = text2sql_benchmark.RunSettings(
        data=_DATA, model=_MODEL, loop=_LOOP,
        training=text2sql_task.TrainingConfig(
            paradigm='federated', algorithm='fedavg', weighting='lorar',
            local_epochs=text2sql_task.PerClient(1),
            batch_sizes=text2sql_task.PerClient(4)))
    after = text2sql_benchmark.rescore_run(settings, str(run_dir),
                                           data_dir=None)
    for name, lines in expected.items():
      assert [json.loads(line) for line in (
          run_dir / 'predictions' / name).read_text().splitlines()] == lines
    assert (run_dir / 'federated' / 'metrics.jsonl').read_text() == (
        metrics_before)
    assert after['seconds'] == 1234.5 and after['rescore_seconds'] > 0
    assert not (run_dir / 'results.json.before_rescore').exists()
    assert after['test'] == json.loads(json.dumps(before['test']))

  def test_a_resumed_run_counts_the_recorded_time_before_it(self):
    # A finished run without its results resumes after its last round: its
    # `seconds` add the recorded round and evaluation times of rounds 0-2.
    kwargs = dict(paradigm='federated', algorithm='fedavg', weighting='lorar')
    shared, _ = _shared_run(**kwargs)
    run_dir = pathlib.Path(self.create_tempdir().full_path) / 'run'
    shutil.copytree(shared, run_dir)
    os.remove(run_dir / 'results.json')
    records = training.read_json_lines(
        str(run_dir / 'federated' / 'metrics.jsonl'))
    expected = sum(r.get('round_seconds', 0.0) + r.get('eval_seconds', 0.0)
                   for r in records)
    assert len(records) == 3 and expected > 0
    results = _run(run_dir, **kwargs)
    assert results['seconds_before_resume'] == pytest.approx(expected)
    assert results['seconds'] > expected
    assert len(training.read_json_lines(
        str(run_dir / 'federated' / 'metrics.jsonl'))) == 3

  def test_same_config_and_seed_give_identical_weights_and_metrics(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    # With dropout on: masks are keyed by (seed, global model, batch, step),
    # not drawn from stateful random ops (models/dropout_seeds.py).
    assert _MODEL.dropout > 0.0
    lorar = dict(paradigm='federated', algorithm='fedavg', weighting='lorar')
    # Run 'a' is the smoke test's run of the same configuration.
    run_dirs = {'a': _shared_run(**lorar)[0]}
    # 'b_again' reuses the process 'b' built (one cache, the same
    # configuration); 'no_dropout', of another configuration, builds its own.
    processes = training.ProcessCache()
    with mock.patch.object(text2sql_process, 'build_process',
                           wraps=text2sql_process.build_process) as build:
      for name, model in (
          ('b', _MODEL), ('b_again', _MODEL),
          ('no_dropout', dataclasses.replace(_MODEL, dropout=0.0))):
        run_dirs[name] = tmp_path / name
        experiment.run_text2sql(
            experiment.Text2SqlSpec(
                data=_DATA, model=model, loop=_LOOP,
                training=text2sql_task.TrainingConfig(
                    local_epochs=text2sql_task.PerClient(1),
                    batch_sizes=text2sql_task.PerClient(4), **lorar)),
            data_dir=None, output_dir=str(run_dirs[name]), processes=processes)
    self.assertEqual(build.call_count, 2)
    runs = {}
    for name, run_dir in run_dirs.items():
      with np.load(run_dir / 'federated' / 'best_model.npz') as f:
        weights = {k: f[k] for k in f.files}
      with open(run_dir / 'federated' / 'metrics.jsonl') as f:
        rounds = [json.loads(line) for line in f]
      # Everything but wall-clock times.
      metrics = [{k: v for k, v in r.items() if not k.endswith('_seconds')}
                 for r in rounds]
      runs[name] = (weights, metrics)
    weights_a, metrics_a = runs['a']
    for name in ('b', 'b_again'):
      weights_b, metrics_b = runs[name]
      assert weights_a.keys() == weights_b.keys() and weights_a
      for key in weights_a:
        np.testing.assert_array_equal(weights_a[key], weights_b[key],
                                      err_msg=f'{name}: {key}')
      assert metrics_a == metrics_b, name
    # Dropout was active: without it training ends elsewhere.
    weights_off = runs['no_dropout'][0]
    assert any(not np.array_equal(weights_a[k], weights_off[k])
               for k in weights_a)
    assert len(metrics_a) == _LOOP.rounds + 1  # Round 0's evaluation, then 2.


if __name__ == '__main__':
  tf.test.main()
