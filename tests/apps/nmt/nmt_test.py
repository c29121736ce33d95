"""The federated NMT experiment: engines, caching, BLEU, the paper's tables.

A real run at tiny scale (two domains of real data, a 1+1-layer model, a few
steps) checks the pipeline end to end; BLEU is then recomputed from the
written translations with SacreBLEU directly. The report's arithmetic is
checked on hand-made results.
"""

import contextlib
import dataclasses
import functools
import io
import json
import os
import pathlib
import shutil

from absl.testing import parameterized
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from tests import shared_runs
from tff_nlp import errors
from tff_nlp import training
from tff_nlp.training import run_cache
from apps.nmt import experiment as nmt
from apps.nmt import task as nmt_task
from tff_nlp.metrics import intervals
from apps.nmt import report as nmt_report
from tff_nlp.models import seq2seq

_DATA = nmt_task.DataConfig(domains=('wmt_news', 'ubuntu_l10n'),
                            vocabulary_size=400, max_length=20,
                            max_train_examples=32, max_eval_examples=6)
_MODEL = seq2seq.Seq2SeqConfig.from_preset(
    'small', num_encoder_layers=1, num_decoder_layers=1, hidden_dim=16,
    num_heads=2, intermediate_dim=32)
_TRAINING = nmt_task.TrainingConfig(batch_size=16, pretrain_epochs=1,
                                    local_steps=2, decode_batch_size=16,
                                    controller_layers=(0,))
_LOOP = training.LoopConfig(rounds=1, progress=False)


class EngineSpecExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      ('generic', nmt.EngineSpec('generic')),
      (' chained ', nmt.EngineSpec('chained')),
      ('single:php_docs', nmt.EngineSpec('single', domain='php_docs')),
      ('finetuned:php_docs', nmt.EngineSpec('finetuned', domain='php_docs')),
      ('federated:dp_l', nmt.EngineSpec('federated', mode='dp_l', rounds=7)),
      ('federated:random:10', nmt.EngineSpec('federated', mode='random',
                                             rounds=10)),
      ('federated:dp_l:rms', nmt.EngineSpec('federated', mode='dp_l',
                                            rounds=7, change_norm='rms')),
      ('federated:dp_g:3:rms', nmt.EngineSpec('federated', mode='dp_g',
                                              rounds=3, change_norm='rms')),
      ('federated:default:momentum', nmt.EngineSpec(
          'federated', mode='default', rounds=7,
          server_optimizer='momentum')),
      ('federated:dp_l:momentum:2:rms', nmt.EngineSpec(
          'federated', mode='dp_l', rounds=2, change_norm='rms',
          server_optimizer='momentum')),
  )
  def test_engine_spec_parse(self, spec, expected):
    self.assertEqual(nmt.EngineSpec.parse(spec, default_rounds=7), expected)

  @parameterized.parameters('federated:dp_x', 'federated:dp_l:zero',
                            'federated:dp_l:0', 'single', 'local',
                            'generic:2', 'single:a:b',
                            'federated:dp_l:rms:l2', 'federated:dp_l:2:3',
                            'federated:dp_l:momentum:momentum',
                            'federated:default:adamw',
                            'finetuned', 'finetuned:a:b')
  def test_engine_spec_parse_rejects(self, spec):
    with self.assertRaisesRegex(errors.InputError, '--engines'):
      nmt.EngineSpec.parse(spec)

  def test_engine_names_and_keys(self):
    self.assertEqual(nmt.EngineSpec.parse('federated:dp_l:rms').name,
                     'federated-dp_l-rms-r5')
    self.assertEqual(
        nmt.EngineSpec.parse('federated:default:momentum').name,
        'federated-default-momentum-r5')
    dirs = {}
    for steps in (2, 3):
      training_config = nmt_task.TrainingConfig(local_steps=steps)
      dirs[steps] = {
          e: nmt.engine_dir('out', nmt.EngineSpec.parse(e), data=_DATA,
                            model=_MODEL, training=training_config, seed=0)
          for e in ('generic', 'single:php_docs', 'chained',
                    'federated:dp_l')}
    # Local steps define federated engines only; the others keep their runs.
    for engine in ('generic', 'single:php_docs', 'chained'):
      self.assertEqual(dirs[2][engine], dirs[3][engine])
    self.assertNotEqual(dirs[2]['federated:dp_l'], dirs[3]['federated:dp_l'])
    self.assertStartsWith(dirs[2]['federated:dp_l'],
                          'out/engines/federated-dp_l-r5-')
    # A new generic engine (other epochs) means new engines built on it.
    longer = nmt_task.TrainingConfig(local_steps=2, pretrain_epochs=3)
    self.assertNotEqual(
        nmt.engine_dir('out', nmt.EngineSpec('chained'), data=_DATA,
                       model=_MODEL, training=longer, seed=0),
        dirs[2]['chained'])

  def test_server_optimizer_keys_only_its_engine(self):
    def key(engine):
      return nmt.engine_key(nmt.EngineSpec.parse(engine), data=_DATA,
                            model=_MODEL, training=nmt_task.TrainingConfig(),
                            seed=0)

    plain, momentum = key('federated:default'), key(
        'federated:default:momentum')
    # Without one the spec is keyed by the fields it had before (so cached
    # engines keep their directories); with one it is the only change.
    self.assertNotIn('server_optimizer', plain['spec'])
    self.assertEqual(momentum['spec']['server_optimizer'], 'momentum')
    self.assertEqual(
        {k: v for k, v in momentum['spec'].items() if k != 'server_optimizer'},
        plain['spec'])
    self.assertEqual({k: v for k, v in momentum.items() if k != 'spec'},
                     {k: v for k, v in plain.items() if k != 'spec'})
    # The directories of engines cached before the field existed, as the
    # code of that time named them.
    for engine, directory in (
        ('federated:default', 'federated-default-r5-cc41681752'),
        ('federated:dp_l', 'federated-dp_l-r5-ab03313d8a'),
        ('combined', 'combined-d9ad3ab316'),
        ('generic', 'generic-fc9861e41f')):
      self.assertEqual(
          nmt.engine_dir('out', nmt.EngineSpec.parse(engine), data=_DATA,
                         model=_MODEL, seed=1,
                         training=nmt_task.TrainingConfig(
                             split_by='parameters')),
          os.path.join('out', 'engines', directory))

  def test_server_optimizer_needs_a_federated_engine(self):
    with self.assertRaisesRegex(ValueError, 'server optimizer'):
      nmt.EngineSpec('combined', server_optimizer='momentum')

  # An option a federated engine's key holds only when it is set away from
  # its default, and only for the engines it changes.
  @parameterized.named_parameters(
      ('max_weight_share', 'max_weight_share', None, 0.5,
       ('federated:default', 'federated:dp_l', 'federated:random',
        'federated:controllers')),
      # Modes that send every tensor or a fixed mask do not split.
      ('split_by', 'split_by', 'tensors', 'parameters',
       ('federated:dp_l', 'federated:random')),
  )
  def test_option_keys_only_the_engines_it_changes(self, field, default,
                                                   value, changed):
    engines = ('generic', 'single:php_docs', 'finetuned:php_docs',
               'combined', 'chained',
               'federated:default', 'federated:dp_l', 'federated:random',
               'federated:controllers')

    def keys(option):
      return {e: nmt.engine_key(
          nmt.EngineSpec.parse(e), data=_DATA, model=_MODEL,
          training=nmt_task.TrainingConfig(**{field: option}), seed=0)
              for e in engines}

    unset, plain = keys(default), {
        e: nmt.engine_key(nmt.EngineSpec.parse(e), data=_DATA, model=_MODEL,
                          training=nmt_task.TrainingConfig(), seed=0)
        for e in engines}
    # At its default no key has the field: every engine cached before the
    # option existed keeps its key.
    self.assertEqual(unset, plain)
    for engine in engines:
      self.assertNotIn(field, unset[engine])
    set_ = keys(value)
    for engine in engines:
      if engine not in changed:
        self.assertEqual(set_[engine], unset[engine], msg=engine)
        continue
      # It defines these engines, not the generic engine they start from.
      self.assertEqual(set_[engine][field], value)
      self.assertEqual({k: v for k, v in set_[engine].items() if k != field},
                       unset[engine])
      self.assertNotEqual(
          *(nmt.engine_dir('out', nmt.EngineSpec.parse(engine), data=_DATA,
                           model=_MODEL,
                           training=nmt_task.TrainingConfig(**{field: v}),
                           seed=0)
            for v in (value, default)))


class KeyOptionsTest(tf.test.TestCase):

  def _key(self, engine, seed=0, **kwargs):
    training = nmt_task.TrainingConfig(
        steps_per_round=kwargs.pop('steps_per_round', 0),
        learning_rate_schedule=kwargs.pop('learning_rate_schedule',
                                          'constant'))
    return nmt.engine_key(nmt.EngineSpec.parse(engine), data=_DATA,
                          model=_MODEL, training=training, seed=seed,
                          **kwargs)

  def test_steps_per_round_keys_the_centralised_engines(self):
    for engine in ('generic', 'single:php_docs', 'combined', 'chained'):
      self.assertNotIn('steps_per_round', self._key(engine))
      self.assertEqual(self._key(engine, steps_per_round=500)[
          'steps_per_round'], 500)
    # A federated engine changes through its generic engine only.
    cut = self._key('federated:dp_l', steps_per_round=500)
    self.assertNotIn('steps_per_round', cut)
    self.assertEqual(cut['generic'], self._key('generic',
                                               steps_per_round=500))

  def test_a_decaying_schedule_keys_every_engine(self):
    # 'constant' keeps the keys of the engines trained before the option.
    for engine in ('generic', 'combined', 'federated:dp_l'):
      self.assertNotIn('learning_rate_schedule', self._key(engine))
      self.assertEqual(self._key(engine, learning_rate_schedule='linear')[
          'learning_rate_schedule'], 'linear')
    self.assertEqual(
        self._key('federated:dp_l', learning_rate_schedule='linear')[
            'generic'], self._key('generic', learning_rate_schedule='linear'))

  def test_pretrain_settings_key_the_from_scratch_engines_by_value(self):
    pretrain = dict(pretrain_learning_rate=1e-3,
                    pretrain_learning_rate_schedule='constant',
                    pretrain_dropout=0.1)
    fine_tuning = nmt_task.TrainingConfig(
        learning_rate=2e-3, learning_rate_schedule='linear', **pretrain)
    no_dropout = dataclasses.replace(_MODEL, dropout=0.0)
    # The generic engine trained at 1e-3 with dropout 0.1 before the
    # pretrain_* settings existed keeps its key (and its cached run).
    before = nmt.engine_key(
        nmt.EngineSpec('generic'), data=_DATA,
        model=dataclasses.replace(_MODEL, dropout=0.1),
        training=nmt_task.TrainingConfig(learning_rate=1e-3), seed=0)
    for engine in ('generic', 'single:php_docs'):
      spec = nmt.EngineSpec.parse(engine)
      key = nmt.engine_key(spec, data=_DATA, model=no_dropout,
                           training=fine_tuning, seed=0)
      self.assertEqual(key['learning_rate'], 1e-3)
      self.assertNotIn('learning_rate_schedule', key)
      self.assertEqual(key['model'].dropout, 0.1)
    self.assertEqual(nmt.engine_key(nmt.EngineSpec('generic'), data=_DATA,
                                    model=no_dropout, training=fine_tuning,
                                    seed=0), before)
    # The fine-tuning engines keep their own rate and schedule, and see
    # the settings through their generic engine.
    combined = nmt.engine_key(nmt.EngineSpec('combined'), data=_DATA,
                              model=no_dropout, training=fine_tuning, seed=0)
    self.assertEqual(combined['learning_rate'], 2e-3)
    self.assertEqual(combined['learning_rate_schedule'], 'linear')
    self.assertEqual(combined['model'].dropout, 0.0)
    self.assertEqual(combined['generic'], before)

  def test_corpus_keys_every_engine_unless_the_default(self):
    self.assertEqual(self._key('federated:dp_l', corpus='nmt_de_en'),
                     self._key('federated:dp_l'))
    large = self._key('federated:dp_l', corpus='nmt_de_en_large')
    self.assertEqual(large['corpus'], 'nmt_de_en_large')
    self.assertEqual(large['generic']['corpus'], 'nmt_de_en_large')

  def test_later_seeds_start_from_the_first_seeds_generic_engine(self):
    later = self._key('federated:dp_l', seed=2, generic_seed=0)
    self.assertEqual(later['seed'], 2)
    self.assertEqual(later['generic'], self._key('generic', seed=0))
    # Without generic_seed (one seed), the seed is the generic's.
    self.assertEqual(self._key('combined', seed=2)['generic'],
                     self._key('generic', seed=2))


def _run(output_dir, engines, seeds=(0,), report_only=False):
  return nmt.run_nmt(
      engines=[nmt.EngineSpec.parse(e, default_rounds=1) for e in engines],
      data_dir=None, output_dir=str(output_dir), data=_DATA, model=_MODEL,
      training=_TRAINING, loop=_LOOP, seeds=seeds, report_only=report_only,
      command='cmd')


_TINY_ENGINES = ('single:ubuntu_l10n', 'finetuned:ubuntu_l10n', 'chained',
                 'federated:dp_l', 'federated:controllers')


# What `_tiny_run` printed.
_TINY_RUN_STDOUT = []
# What the call `_tiny_run` made first raised, and whether its output
# directory existed afterwards.
_TINY_RUN_REFUSED = []


@functools.cache
def _tiny_run():
  """`_run` of `_TINY_ENGINES` (seed 0), once: (its dir, its results).

  Its generic engine is also the reference of the pretrain settings' test.
  What it prints goes to `_TINY_RUN_STDOUT`. It is also the corrected run
  of `test_corrected_run_after_a_data_error_starts`: the same output
  directory was first given a domain that is not in the data, whose error
  (or None) and whether the directory then existed go to
  `_TINY_RUN_REFUSED`.
  """
  output_dir = pathlib.Path(shared_runs.temp_dir('tiny')) / 'run'
  try:
    nmt.run_nmt(
        engines=[nmt.EngineSpec('generic')], data_dir=None,
        output_dir=str(output_dir),
        data=dataclasses.replace(_DATA, domains=('wmt_news', 'legal')),
        model=_MODEL, training=_TRAINING, loop=_LOOP, command='cmd')
    refused = None
  except errors.InputError as e:
    refused = e
  _TINY_RUN_REFUSED.append((refused, output_dir.exists()))
  with contextlib.redirect_stdout(io.StringIO()) as stdout:
    results = _run(output_dir, _TINY_ENGINES)[0]
  _TINY_RUN_STDOUT.append(stdout.getvalue())
  return output_dir, results


class RunNmtExecutionTest(tf.test.TestCase):

  def test_tiny_run_trains_every_kind_and_reports(self):
    tmp_path, results = _tiny_run()
    engines = list(_TINY_ENGINES)
    # The generic engine is trained first: the others start from it.
    self.assertEqual(list(results), [
        'generic', 'single-ubuntu_l10n', 'finetuned-ubuntu_l10n', 'chained',
        'federated-dp_l-r1', 'federated-controllers-r1'])
    # Fine-tuned from the generic engine (its key holds the generic's).
    finetuned = results['finetuned-ubuntu_l10n']
    self.assertEqual(finetuned['records']['train'][-1]['round'], 1)
    key_args = dict(data=_DATA, model=_MODEL, training=_TRAINING, seed=0)
    generic_key = nmt.engine_key(nmt.EngineSpec('generic'), **key_args)
    self.assertEqual(generic_key['spec']['kind'], 'generic')
    self.assertEqual(
        nmt.engine_key(nmt.EngineSpec('finetuned', domain='ubuntu_l10n'),
                       **key_args)['generic'], generic_key)

    federated = results['federated-dp_l-r1']
    self.assertEqual(list(federated['bleu']), ['server', 'client wmt_news',
                                               'client ubuntu_l10n'])
    # BLEU recomputed from the written translations with SacreBLEU itself.
    run_dir = tmp_path / federated['run_dir']
    lines = [json.loads(l) for l in (
        run_dir / 'predictions' / 'server.jsonl').read_text().splitlines()]
    for domain in _DATA.domains:
      rows = [r for r in lines if r['domain'] == domain]
      self.assertLen(rows, 6)
      expected = sacrebleu.corpus_bleu([r['hypothesis'] for r in rows],
                                       [[r['reference'] for r in rows]]).score
      self.assertEqual(federated['bleu']['server'][domain],
                       pytest.approx(expected))
    self.assertIn('tok:13a', federated['sacrebleu'])

    # Per-round traffic: DP_l sends at most half of each group's tensors, so
    # fewer parameters than it is pushed (every tensor, push='all').
    (record,) = [r for r in federated['records']['federated'] if 'train' in r]
    traffic = record['train']
    self.assertTrue(0 < traffic['parameters_pulled_per_client'] < traffic[
        'parameters_pushed_per_client'])
    self.assertEqual(traffic['bytes_pulled_per_client'], pytest.approx(
        4 * traffic['parameters_pulled_per_client']))
    # The figure plots every evaluated round's mean dev BLEU (a lookup of the
    # flat key as nested keys once plotted nothing).
    evaluated = [r for r in federated['records']['federated'] if 'eval' in r]
    self.assertTrue(evaluated)
    report = json.loads((tmp_path / nmt.RESULTS_FILE).read_text())
    self.assertEqual(report['client_weights'], {
        'wmt_news': {'examples': 32, 'share': 0.5},
        'ubuntu_l10n': {'examples': 32, 'share': 0.5}})
    self.assertEqual(federated['client_weights'], report['client_weights'])
    self.assertEqual(report['dev_bleu_by_round']['federated-dp_l-r1'], {
        'rounds': [r['round'] for r in evaluated],
        'values': [r['eval']['dev_bleu/avg'] for r in evaluated]})
    self.assertTrue((run_dir / 'clients' / 'ubuntu_l10n.npz').exists())

    table = (tmp_path / 'results.md').read_text()
    self.assertIn('| ubuntu_l10n engine | ours |', table)
    # The report is rewritten after each of the 6 engines, but its tables
    # are printed once, at the end, as they are in results.md.
    (printed,) = _TINY_RUN_STDOUT
    self.assertEqual(printed.count('## Every engine over its seeds'), 1)
    self.assertIn('| ubuntu_l10n engine | ours |', printed)
    self.assertIn('\nSacreBLEU signature: ', printed)
    self.assertIn('| ubuntu_l10n engine, from the generic | ours |', table)
    # Table 3 gives the paper's five-domain average only: no shared one.
    self.assertIn('| chained | paper | – | – | – | – | 21.80 |', table)
    # The report opens with what the engines saw, the test pairs cut at
    # max_length counted as the task counts them.
    self.assertTrue(table.split('## ')[1].startswith('What the model saw'))
    truncated = report['truncated']
    for domain, cut in report['test_pairs_cut'].items():
      self.assertEqual(cut['sources'], truncated[domain]['test']['sources'])
      self.assertEqual(cut['targets'], truncated[domain]['test']['targets'])
      self.assertBetween(cut['either'], max(cut['sources'], cut['targets']),
                         cut['sources'] + cut['targets'])
    self.assertIn(intervals.VERDICT_RULE, table)
    self.assertIn('## What the translations look like', table)
    self.assertIn('| DP_l (less active half) | 1 | ours |', table)
    self.assertIn('output_health', report['engines']['dp_l_r1'])
    self.assertGreater((tmp_path / 'dev_bleu.png').stat().st_size, 0)

    # Finished engines are read back, not trained again.
    mtime = os.path.getmtime(run_dir / nmt.RESULTS_FILE)
    again = _run(tmp_path, engines)[0]
    self.assertEqual(os.path.getmtime(run_dir / nmt.RESULTS_FILE), mtime)
    self.assertEqual(again['federated-dp_l-r1']['bleu'], federated['bleu'])

    # On a new machine: the finished engines' results and translations come
    # back from an archive (`make bench-nmt`), without their weights.
    archive = self.create_tempdir().full_path
    run_cache.archive(str(tmp_path / 'engines'), archive,
                      files=['results.json', 'config.json',
                             'predictions/*.jsonl'])
    machine = pathlib.Path(self.create_tempdir().full_path)
    run_cache.restore(archive, str(machine / 'engines'))
    generic_dir = machine / results['generic']['run_dir']
    # The report alone regenerates from the restored engines (no config.json
    # there yet), training nothing.
    reported = _run(machine, engines, report_only=True)[0]
    self.assertFalse((generic_dir / nmt.MODEL_FILE).exists())
    self.assertEqual(reported['federated-dp_l-r1']['bleu'], federated['bleu'])
    self.assertIn('## What the model saw',
                  (machine / 'results.md').read_text())
    restored = _run(machine, engines)[0]
    # Nothing left to train: not even the generic engine.
    self.assertFalse((generic_dir / nmt.MODEL_FILE).exists())
    self.assertEqual(restored['federated-dp_l-r1']['bleu'], federated['bleu'])
    # An engine still to train starts from the generic engine, which is
    # trained again first, to the same weights.
    combined = _run(machine, engines + ['combined'])[0]['combined']
    generic_weights = nmt.load_weights(str(generic_dir / nmt.MODEL_FILE))
    for original, again in zip(
        nmt.load_weights(str(tmp_path / results['generic']['run_dir']
                             / nmt.MODEL_FILE)), generic_weights):
      self.assertAllEqual(original, again)
    # Every engine records the generic weights it started from: those of
    # the generic engine (its own digest, recomputed here).
    digest = training.weights_digest(generic_weights)
    self.assertEqual(results['generic']['weights_sha256'], digest)
    for name in ('finetuned-ubuntu_l10n', 'chained', 'federated-dp_l-r1'):
      self.assertEqual(results[name]['generic_sha256'], digest)
    self.assertEqual(combined['generic_sha256'], digest)
    self.assertNotIn('generic_sha256', results['single-ubuntu_l10n'])

    # Weights beside the generic engine's results that are not the ones its
    # results describe (e.g. a folder copied from another run) are refused
    # before any engine starts from them.
    good_weights = (generic_dir / nmt.MODEL_FILE).read_bytes()
    tampered = [np.asarray(w) for w in generic_weights]
    tampered[0] = tampered[0] + 1
    np.savez(generic_dir / nmt.MODEL_FILE, *tampered)
    with self.assertRaisesRegex(
        errors.CheckpointError,
        f'{generic_dir / nmt.MODEL_FILE}: weights .*its results.json '
        f'describes weights {digest[:12]}'):
      _run(machine, engines + ['combined'])
    (generic_dir / nmt.MODEL_FILE).write_bytes(good_weights)

    # A generic engine trained again elsewhere has other weights: an
    # engine whose checkpoints started from other ones does not resume...
    combined_dir = machine / combined['run_dir']
    (combined_dir / nmt.RESULTS_FILE).unlink()
    (combined_dir / nmt.GENERIC_DIGEST_FILE).write_text('f' * 64 + '\n')
    with self.assertRaisesRegex(errors.CheckpointError,
                                f'{combined_dir}.*ffffffffffff.*'
                                f'{digest[:12]}'):
      _run(machine, engines + ['combined'])
    # ... and a report of engines from different generic weights (one
    # restored from elsewhere) is refused, naming them.
    chained = machine / results['chained']['run_dir'] / nmt.RESULTS_FILE
    chained.write_text(chained.read_text().replace(digest, 'e' * 64))
    with self.assertRaisesRegex(
        errors.InputError,
        r'different generic weights.*eeeeeeeeeeee: chained \(seed 0, '):
      _run(machine, engines, report_only=True)

  def test_seeds_share_one_generic_engine_and_are_summarized(self):
    # In a copy of the tiny run (seed 0): its generic and dp_l engines are
    # the first seed's, read back; the rest of both seeds' engines train.
    tiny_dir, tiny_results = _tiny_run()
    tmp_path = pathlib.Path(self.create_tempdir().full_path) / 'run'
    shutil.copytree(tiny_dir, tmp_path)
    tiny_engines = set(os.listdir(tmp_path / 'engines'))
    runs = _run(tmp_path, ['combined', 'federated:default', 'federated:dp_l'],
                seeds=(0, 4))
    self.assertEqual(list(runs), [0, 4])
    # The generic engine is trained once, with the first seed, and both
    # seeds' engines start from it.
    self.assertEqual(list(runs[0]), ['generic', 'combined',
                                     'federated-default-r1',
                                     'federated-dp_l-r1'])
    self.assertEqual(list(runs[4]), ['combined', 'federated-default-r1',
                                     'federated-dp_l-r1'])
    self.assertEqual(runs[0]['generic']['run_dir'],
                     tiny_results['generic']['run_dir'])
    self.assertEqual(runs[0]['federated-dp_l-r1']['bleu'],
                     tiny_results['federated-dp_l-r1']['bleu'])
    # One new engine folder per engine trained: no second generic engine.
    new = sorted(set(os.listdir(tmp_path / 'engines')) - tiny_engines)
    self.assertEqual([name.rsplit('-', 1)[0] for name in new],
                     ['combined', 'combined', 'federated-default-r1',
                      'federated-default-r1', 'federated-dp_l-r1'])
    self.assertLen([n for n in os.listdir(tmp_path / 'engines')
                    if n.startswith('generic-')], 1)
    digest = runs[0]['generic']['weights_sha256']
    for seed in (0, 4):
      for name in ('combined', 'federated-default-r1', 'federated-dp_l-r1'):
        self.assertEqual(runs[seed][name]['generic_sha256'], digest)
    # An engine's time: its rounds' (kept across resumes) plus scoring.
    combined = runs[0]['combined']
    self.assertEqual(combined['train_seconds'], pytest.approx(sum(
        r.get('round_seconds', 0) for r in combined['records']['train'])))
    self.assertGreater(combined['score_seconds'], 0)
    report = json.loads((tmp_path / nmt.RESULTS_FILE).read_text())
    self.assertEqual(report['seeds'], [0, 4])
    self.assertEqual(
        report['engines']['data_combination']['seeds']['0']['seconds'],
        pytest.approx(combined['train_seconds'] + combined['score_seconds']))
    self.assertEqual(list(report['engines']), [
        'generic', 'data_combination', 'fedavg_default_r1', 'dp_l_r1'])
    dp_l = report['engines']['dp_l_r1']
    self.assertEqual(list(dp_l['seeds']), ['0', '4'])
    averages = []
    for seed in (0, 4):
      scores = runs[seed]['federated-dp_l-r1']['bleu']['server']
      entry = dp_l['seeds'][str(seed)]
      self.assertEqual(entry['bleu'], scores)
      averages.append((scores['wmt_news'] + scores['ubuntu_l10n']) / 2)
      self.assertEqual(entry['bleu_avg'], pytest.approx(averages[-1]))
    # Two seeds: mean ± t(1, 0.975) · s / sqrt(2), t = 12.7062, and
    # s / sqrt(2) = |a - b| / 2.
    mean, half = sum(averages) / 2, 12.7062 * abs(averages[0]
                                                  - averages[1]) / 2
    self.assertEqual(dp_l['bleu_avg'], pytest.approx(mean))
    self.assertEqual(dp_l['bleu_avg_ci95'], pytest.approx(
        [mean - half, mean + half], abs=1e-3))
    self.assertIsNone(report['engines']['generic']['bleu_avg_ci95'])
    # DP_l pulls less than the default mode, which pulls itself (1.0).
    self.assertEqual(
        report['engines']['fedavg_default_r1']['pulled_fraction'], 1.0)
    self.assertTrue(0 < dp_l['pulled_fraction'] < 1)
    # The paper's comparisons at the rounds run, with both intervals.
    self.assertEqual(
        [(c['a'], c['b']) for c in report['comparisons']],
        [('fedavg_default_r1', 'data_combination'),
         ('fedavg_default_r1', 'dp_l_r1')])
    comparison = report['comparisons'][1]
    self.assertEqual(comparison['difference'], pytest.approx(
        report['engines']['fedavg_default_r1']['bleu_avg'] - mean))
    self.assertEqual(comparison['paired_seeds'], [0, 4])
    low, high = comparison['bootstrap_ci95']
    self.assertLessEqual(low, high)
    table = (tmp_path / 'results.md').read_text()
    self.assertIn('| dp_l_r1 | 2 |', table)
    self.assertIn('| fedavg_default_r1 − dp_l_r1 |', table)
    self.assertIn('bleu_avg.png', report['figures'])
    # --report_only trains nothing: an engine not run yet (and a seed with
    # no finished engine) is left out of the report.
    partial = _run(tmp_path, ['combined', 'federated:random'],
                   seeds=(0, 4, 5), report_only=True)
    self.assertLen(os.listdir(tmp_path / 'engines'),
                   len(tiny_engines) + len(new))
    self.assertEqual(list(partial[4]), ['combined'])
    self.assertEqual(partial[5], {})
    report = json.loads((tmp_path / nmt.RESULTS_FILE).read_text())
    self.assertEqual(report['seeds'], [0, 4])
    self.assertEqual(list(report['engines']), ['generic', 'data_combination'])
    self.assertGreater((tmp_path / 'bleu_avg.png').stat().st_size, 0)

  def test_generic_engine_trains_with_the_pretrain_settings(self):
    # Learning rate 0.05 and no dropout overridden by the pretrain_*
    # settings train the same weights as 1e-3 and dropout 0.1 given
    # directly: the generic engine never sees the fine-tuning recipe.
    # 'direct': the tiny run's generic engine (seed 0, _MODEL and _TRAINING
    # set no pretrain_* option).
    self.assertEqual((_MODEL.dropout, _TRAINING.learning_rate), (0.1, 1e-3))
    self.assertEqual(nmt_task.pretraining_configs(_MODEL, _TRAINING),
                     (_MODEL, _TRAINING))
    tiny_dir, tiny_results = _tiny_run()
    weights = [nmt.load_weights(str(
        tiny_dir / tiny_results['generic']['run_dir'] / nmt.MODEL_FILE))]
    tmp_path = pathlib.Path(self.create_tempdir('override').full_path)
    nmt.run_nmt(engines=[nmt.EngineSpec('generic')], data_dir=None,
                output_dir=str(tmp_path), data=_DATA,
                model=dataclasses.replace(_MODEL, dropout=0.0),
                training=dataclasses.replace(
                    _TRAINING, learning_rate=0.05,
                    pretrain_learning_rate=1e-3, pretrain_dropout=0.1),
                loop=_LOOP, command='cmd')
    run_dir, = (tmp_path / 'engines').iterdir()
    weights.append(nmt.load_weights(str(run_dir / nmt.MODEL_FILE)))
    for direct, override in zip(*weights):
      self.assertAllClose(direct, override)

  def test_corrected_run_after_a_data_error_starts(self):
    # A domain that is not in the data (e.g. --domains=wmt_news,legal):
    # refused once the data is read, leaving nothing behind, so the
    # corrected call is not refused as another experiment. The corrected
    # call is the tiny run (its first engine the generic one), in the same
    # output directory: `_tiny_run` made the refused call there first.
    output_dir, results = _tiny_run()
    (refused, existed), = _TINY_RUN_REFUSED
    self.assertIsInstance(refused, errors.InputError)
    self.assertRegex(str(refused), r"Unknown domains \['legal'\]")
    self.assertFalse(existed)
    self.assertEqual(list(results)[0], 'generic')
    with open(os.path.join(output_dir, 'config.json')) as f:
      self.assertEqual(json.load(f)['experiment']['data']['domains'],
                       list(_DATA.domains))
    with open(os.path.join(output_dir, 'data_fingerprint.json')) as f:
      self.assertContainsSubset(
          [f'nmt_de_en/{d}/{s}.{l}' for d in _DATA.domains
           for s in ('train', 'dev', 'test') for l in ('de', 'en')],
          json.load(f)['files'])

  def test_report_only_without_finished_engines_is_refused(self):
    with self.assertRaisesRegex(errors.InputError, '--report_only'):
      _run(self.create_tempdir().full_path, ['combined'], report_only=True)

  def test_repeated_seed_is_refused(self):
    with self.assertRaisesRegex(errors.InputError, '--seeds'):
      _run(self.create_tempdir().full_path, ['generic'], seeds=(1, 1))

  def test_unknown_single_domain_is_refused(self):
    with self.assertRaisesRegex(errors.InputError, 'single:php_docs'):
      _run(self.create_tempdir().full_path, ['single:php_docs'])


def _result(kind, bleu, *, mode='default', rounds=5, pulled=(), pushed=()):
  spec = {'kind': kind, 'mode': mode, 'rounds': rounds, 'domain': None}
  records = [{'round': 0}] + [
      {'round': i + 1, 'train': {'parameters_pulled_per_client': a,
                                 'parameters_pushed_per_client': b}}
      for i, (a, b) in enumerate(zip(pulled, pushed))]
  return {'spec': spec, 'bleu': bleu, 'records': {'federated': records}}


class ModesTableExecutionTest(tf.test.TestCase):

  def test_modes_table_numbers(self):
    # News and TED the paper has too; captions is ours only.
    domains = ('wmt_news', 'ted_iwslt14', 'multi30k_captions')
    results = {
        'federated-default-r5': _result(
            'federated', {'server': {'wmt_news': 20.0, 'ted_iwslt14': 30.0,
                                     'multi30k_captions': 10.0}},
            pulled=(1000, 1000), pushed=(1000, 1000)),
        'federated-dp_l-r5': _result(
            'federated', {'server': {'wmt_news': 10.0, 'ted_iwslt14': 16.0,
                                     'multi30k_captions': 1.0}},
            mode='dp_l', pulled=(300, 500), pushed=(1000, 1000)),
    }
    results['federated-dp_l-rms-r5'] = _result(
        'federated', {'server': {'wmt_news': 9.0, 'ted_iwslt14': 15.0,
                                 'multi30k_captions': 3.0}},
        mode='dp_l', pulled=(100, 100), pushed=(1000, 1000))
    results['federated-dp_l-rms-r5']['spec']['change_norm'] = 'rms'
    results['federated-default-momentum-r5'] = _result(
        'federated', {'server': {'wmt_news': 24.0, 'ted_iwslt14': 31.0,
                                 'multi30k_captions': 2.0}},
        pulled=(1000, 1000), pushed=(1000, 1000))
    results['federated-default-momentum-r5']['spec'][
        'server_optimizer'] = 'momentum'
    table = nmt_report.modes_table(results, domains)
    # default: shared (news, TED) (20 + 30) / 2 = 25, all ours (20 + 30 +
    # 10) / 3 = 20; dp_l: 13 and 9, pulled (300 + 500) / 2 = 400 of 1,000 =
    # 0.400x. The paper's DP_l: news and TED cells, their mean (29.28 +
    # 30.88) / 2 = 30.08 beside our shared average, no average of ours, its
    # own 32.28 (with OpenSubtitles) apart; 22,863,104 of 45,724,160 =
    # 0.500x.
    self.assertIn('| FedAvg, all tensors (default) | 5 | ours | 20.00 | '
                  '30.00 | 10.00 | 25.00 | 20.00 | – | 1,000 | 1,000 | '
                  '1.000× |', table)
    self.assertIn('| DP_l (less active half) | 5 | ours | 10.00 | 16.00 | '
                  '1.00 | 13.00 | 9.00 | – | 400 | 1,000 | 0.400× |', table)
    self.assertIn('| DP_l (less active half) | 5 | paper | 29.28 | 30.88 | '
                  '– | 30.08 | – | 32.28 | 22,863,104 | – | 0.500× |', table)
    # The rms variant is ours alone: no second paper row.
    self.assertIn('| DP_l (less active half), rms | 5 | ours | 9.00 | 15.00 '
                  '| 3.00 | 12.00 | 9.00 | – | 100 | 1,000 | 0.100× |', table)
    # So is the default with server momentum.
    self.assertIn('| FedAvg, all tensors (default), server momentum | 5 | '
                  'ours | 24.00 | 31.00 | 2.00 | 27.50 | 19.00 | – | 1,000 | '
                  '1,000 | 1.000× |', table)
    self.assertEqual(table.count('| paper |'), 2)


def _domain_folders(root, names):
  for name in names:
    os.makedirs(root / name)
    for split in ('train', 'dev', 'test'):
      for lang in ('de', 'en'):
        (root / name / f'{split}.{lang}').write_text(f'{name} {lang}\n')
  (root / 'SHA256SUMS').write_text('not a domain\n')


class SelectDomainsExecutionTest(tf.test.TestCase):

  def test_select_domains_discovers_every_domain_folder(self):
    # A user's sixth domain ('legal') and another ('aaa') beside two of the
    # paper's: the paper's come first in their order, then the others by
    # name.
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    _domain_folders(tmp_path, ['legal', 'php_docs', 'aaa', 'wmt_news'])
    self.assertEqual(nmt_task.select_domains(str(tmp_path)),
                     ('wmt_news', 'php_docs', 'aaa', 'legal'))

  def test_select_domains_names_the_users_domains_left_out(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    _domain_folders(tmp_path, ['legal', 'php_docs', 'wmt_news'])
    with self.assertLogs(level='WARNING') as logs:
      self.assertEqual(nmt_task.select_domains(str(tmp_path), ['wmt_news']),
                       ('wmt_news',))
    (record,) = [r for r in logs.records if r.levelname == 'WARNING']
    # The paper's php_docs left out is a choice; the added 'legal' is named.
    self.assertIn('not used, as --domains does not list them: legal.',
                  record.getMessage())
    with self.assertNoLogs(level='WARNING'):
      nmt_task.select_domains(str(tmp_path), ['wmt_news', 'legal'])

  def test_select_domains_of_a_folder_without_domains(self):
    with self.assertRaisesRegex(errors.InputError, 'holds neither'):
      nmt_task.select_domains(self.create_tempdir().full_path)


if __name__ == '__main__':
  tf.test.main()
