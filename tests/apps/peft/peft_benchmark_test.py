"""Tests of the fine-tuning variants' report on hand-written runs.

Two variants of one method with three seeds each, written without training
(`text2sql_fake_runs`), with per-round traffic records, and the side-by-side
round timing on runs a fake `run_text2sql` writes: the numbers of the report
are derived in the comments.
"""

import glob
import json
import math
import os
from unittest import mock

from absl.testing import parameterized
import tensorflow as tf

from tests.apps.text2sql import text2sql_fake_runs
from tests.apps.text2sql import tiny_text2sql
from tff_nlp import errors
from tff_nlp import training
from apps.peft import benchmark as peft_benchmark
from apps.peft import report as peft_report
from apps.peft import setting as peft_setting
from apps.text2sql import benchmark as text2sql_benchmark
from apps.text2sql import experiment as text2sql
from apps.text2sql import summary as text2sql_summary
from tff_nlp.metrics import intervals
from tff_nlp.models import lora as lora_lib
from apps.text2sql import task as text2sql_task

_FEDAVG = ('federated', 'fedavg', 'num_examples')
_FEDAVG_LORAR = ('federated', 'fedavg', 'lorar')
_SIZES = {'imdb': 10, 'yelp': 20}
_EXAMPLES = {c: [(f'question {i} of {c}', f'SELECT {i} ;') for i in range(n)]
             for c, n in _SIZES.items()}
# Student-t 0.975 quantile with 2 degrees of freedom (see
# text2sql_summary_test).
_T_2 = 0.95 / math.sqrt(0.04875)


def _settings(lora=None):
  return text2sql_benchmark.RunSettings(
      data=tiny_text2sql.DATA, model=tiny_text2sql.MODEL,
      training=text2sql_task.TrainingConfig(),
      loop=training.LoopConfig(rounds=12, seed=5), lora=lora)


def _first(k, n):
  return [1] * k + [0] * (n - k)


# Full fine-tuning: MacroAvg per seed 0.3, 0.5, 0.7 (imdb 2, 4, 6 of 10;
# yelp 8, 12, 16 of 20), mean 0.5. LoRA: imdb 1 of 10 and yelp 4 of 20 for
# every seed, MacroAvg 0.15. Differences per seed -0.15, -0.35, -0.55: mean
# -0.35, sd 0.2, 95 % t interval -0.35 ± t_2 · 0.2 / sqrt(3).
_FULL = [{'imdb': _first(2 + 2 * s, 10), 'yelp': _first(8 + 4 * s, 20)}
         for s in range(3)]
_LORA = [{'imdb': _first(1, 10), 'yelp': _first(4, 20)}] * 3
# Bytes per client and round: full 4,000 down and 4,100 up (two rounds
# each); LoRA 100 / 110 in round 1 and 100 / 130 in round 2, means 100 and
# 120. Full / LoRA = 8,100 / 220 = 36.8181...
_TRAFFIC = {'pretrained_full': [(4000, 4100), (4000, 4100)],
            'lora_r4': [(100, 110), (100, 130)],
            'lora_r4_embedding': [(300, 310), (300, 330)]}
# Teacher-forced test tokens (correct, total) per example, the same every
# seed. imdb: 10 examples of 10 tokens, full 6 right each (0.6), LoRA 3
# (0.3); yelp: 20 of 5 tokens, full 4, 3, 4, 3, ... (70 of 100), LoRA 3, 2,
# 3, 2, ... (0.5). MacroAvg full 0.65, LoRA 0.40. LoRA - full on any
# resample of the examples: imdb -3 k / 10 k = -0.3, yelp -k / 5 k = -0.2,
# MacroAvg -0.25; equal seeds: every interval is the point itself.
_TOKENS = {
    ('pretrained_full', 'num_examples'): {
        'imdb': [(6, 10)] * 10, 'yelp': [(4 - i % 2, 5) for i in range(20)]},
    ('lora_r4', 'num_examples'): {
        'imdb': [(3, 10)] * 10, 'yelp': [(3 - i % 2, 5) for i in range(20)]},
    # Full fine-tuning with Lorar: the same exact matches as with
    # num_examples (`_FULL`), one more token right in each imdb example
    # (0.7), yelp's the same: MacroAvg 0.70. Lorar - num_examples on any
    # resample: imdb +k / 10 k = +0.1, yelp 0, MacroAvg +0.05; EM 0.
    # LoRA with the embedding: full fine-tuning's tokens (0.65), so
    # embedding - LoRA is +0.25 on any resample.
    ('lora_r4_embedding', 'num_examples'): {
        'imdb': [(6, 10)] * 10, 'yelp': [(4 - i % 2, 5) for i in range(20)]},
    ('pretrained_full', 'lorar'): {
        'imdb': [(7, 10)] * 10, 'yelp': [(4 - i % 2, 5) for i in range(20)]},
}


def _write_variant(root, name, per_seed, lorar=None):
  """Writes a variant's runs (FedAvg; with Lorar too if `lorar`, its
  outcomes per seed) and returns its seed summary."""
  runs = {}
  for method, outcomes_per_seed in ((_FEDAVG, per_seed),
                                    (_FEDAVG_LORAR, lorar)):
    for seed, outcomes in enumerate(outcomes_per_seed or ()):
      run_dir = os.path.join(root, name, 'runs', f'fedavg-{method[2]}-{seed}')
      text2sql_fake_runs.write_run(run_dir, seed, outcomes, _EXAMPLES,
                                   example_tokens=_TOKENS[name, method[2]])
      os.makedirs(os.path.join(run_dir, 'federated'))
      with open(os.path.join(run_dir, 'federated', 'metrics.jsonl'),
                'w') as f:
        f.write(json.dumps({'round': 0}) + '\n')
        for round_num, (down, up) in enumerate(_TRAFFIC[name], start=1):
          f.write(json.dumps({
              'round': round_num, 'round_seconds': 2.0 * round_num,
              'communication': {'bytes_down_per_client': down,
                                'bytes_up_per_client': up}}) + '\n')
      runs.setdefault(method, []).append((seed, run_dir))
  return text2sql_summary.summarize_runs(
      runs, output_dir=os.path.join(root, name), num_replicates=200)


class ParseVariantsTest(tf.test.TestCase, parameterized.TestCase):

  def test_known_and_any_rank(self):
    variants = peft_benchmark.parse_variants(
        ['scratch_full', 'pretrained_full', 'lora_r32',
         'scratch_full_own_tokenizer'])
    self.assertEqual(
        [(v.pretrained, v.lora_rank, v.pretrained_tokenizer)
         for v in variants],
        [(False, 0, True), (True, 0, False), (True, 32, False),
         (False, 0, False)])
    self.assertEqual([v.label for v in variants], [
        'full, from scratch (pre-trained tokenizer)', 'full, pre-trained',
        'LoRA r = 32, pre-trained', 'full, from scratch (own tokenizer)'])

  def test_lora_with_the_embedding(self):
    (variant,) = peft_benchmark.parse_variants(['lora_r8_embedding'])
    self.assertEqual((variant.lora_rank, variant.lora_embedding,
                      variant.pretrained), (8, True, True))
    self.assertEqual(variant.label, 'LoRA r = 8 + embedding, pre-trained')
    # The report compares it with LoRA r = 8 alone.
    self.assertEqual(variant.without_embedding, 'lora_r8')
    self.assertIsNone(
        peft_benchmark.parse_variants(['lora_r8'])[0].without_embedding)
    base = _settings(lora_lib.LoraConfig(rank=1, alpha=32.0))
    adapters = variant.settings(base, 'pre').lora
    self.assertEqual((adapters.rank, adapters.alpha, adapters.targets),
                     (8, 32.0, ('attention', 'feedforward', 'embedding')))
    # Its runs are named apart from those without the embedding's.
    self.assertEqual(
        text2sql_benchmark.run_variant(None, None, adapters)['lora_targets'],
        'attention+feedforward+embedding')
    with self.assertRaisesRegex(ValueError, 'lora_embedding needs a'):
      peft_benchmark.Variant('x', pretrained=True, lora_embedding=True)

  def test_pretrained_start_has_the_pretrained_tokenizer_anyway(self):
    with self.assertRaisesRegex(ValueError, 'for variants from scratch'):
      peft_benchmark.Variant('x', pretrained=True, pretrained_tokenizer=True)

  def test_variant_settings(self):
    base = _settings(lora_lib.LoraConfig(rank=1, alpha=32.0))
    scratch, full, lora = peft_benchmark.parse_variants(
        ['scratch_full', 'pretrained_full', 'lora_r8'])
    # From scratch: fresh weights, the pre-trained run's tokenizer.
    self.assertIsNone(scratch.settings(base, 'pre').init_from)
    self.assertEqual(scratch.settings(base, 'pre').tokenizer_from, 'pre')
    self.assertIsNone(scratch.settings(base, 'pre').lora)
    (own,) = peft_benchmark.parse_variants(['scratch_full_own_tokenizer'])
    self.assertIsNone(own.settings(base, 'pre').tokenizer_from)
    self.assertEqual(full.settings(base, 'pre').init_from, 'pre')
    self.assertIsNone(full.settings(base, 'pre').tokenizer_from)
    self.assertIsNone(full.settings(base, 'pre').lora)
    # The variant's rank, the base's other adapter settings; each run then
    # its seed.
    adapters = lora.settings(base, 'pre').for_run(_FEDAVG, 3).lora
    self.assertEqual((adapters.rank, adapters.alpha, adapters.seed),
                     (8, 32.0, 3))

  @parameterized.parameters(
      (['lora_r0'], 'unknown variant'), (['lora'], 'unknown variant'),
      (['full'], 'unknown variant'), (['lora_r8_emb'], 'unknown variant'),
      (['lora_r0_embedding'], 'unknown variant'),
      (['lora_r8', 'lora_r8'], 'repeated variants'))
  def test_bad_variants(self, names, message):
    with self.assertRaisesRegex(errors.InputError, message):
      peft_benchmark.parse_variants(names)

  # From scratch with the pre-trained tokenizer needs the run as well.
  @parameterized.parameters('lora_r4', 'scratch_full')
  def test_variant_needs_the_pretrained_run(self, name):
    with self.assertRaisesRegex(errors.InputError,
                                rf'\[{name!r}\] need --pretrained_dir'):
      peft_benchmark.PeftBenchmarkSpec(
          _settings(), pretrained_dir=None,
          variants=peft_benchmark.parse_variants([name]),
          methods=[_FEDAVG], seeds=[0])


class PeftBenchmarkSpecTest(tf.test.TestCase, parameterized.TestCase):

  # Each refusal names the flag it refuses.
  @parameterized.parameters(
      (dict(variants=[]), '--variants: no variant given'),
      (dict(variants=['lora_r4', 'lora_r4']), '--variants: repeated'),
      (dict(methods=[]), '--methods: no method given'),
      (dict(methods=[_FEDAVG, _FEDAVG]), '--methods: repeated'),
      (dict(seeds=[]), '--seeds: no seed given'),
      (dict(seeds=[1, 1]), '--seeds: repeated'))
  def test_refuses(self, fields, message):
    # Variants by name; a repeated one as `parse_variants` would not give.
    names = fields.pop('variants', ['lora_r4'])
    fields = dict(dict(methods=[_FEDAVG], seeds=[0]), **fields)
    with self.assertRaisesRegex(errors.InputError, message):
      peft_benchmark.PeftBenchmarkSpec(
          _settings(), pretrained_dir='pre',
          variants=[peft_benchmark.parse_variants([n])[0] for n in names],
          **fields)

  def test_frozen_tuples_and_variant_settings(self):
    (variant,) = peft_benchmark.parse_variants(['lora_r4'])
    spec = peft_benchmark.PeftBenchmarkSpec(
        _settings(), variants=[variant], methods=[list(_FEDAVG)],
        seeds=[0, 1], pretrained_dir='pre')
    self.assertEqual((spec.variants, spec.methods, spec.seeds),
                     ((variant,), (_FEDAVG,), (0, 1)))
    self.assertEqual(spec.variant_settings(variant),
                     variant.settings(_settings(), 'pre'))


class RunPeftBenchmarkTest(tf.test.TestCase):
  """The orchestration, on runs a fake `run_text2sql` writes."""

  # Correct test examples of 3 per client, every seed: from scratch 0,
  # pre-trained full 2, LoRA 1; MacroAvg 0, 2/3 and 1/3.
  _CORRECT = {'scratch_full': 0, 'pretrained_full': 2, 'lora_r4': 1}

  def setUp(self):
    super().setUp()
    self.root = self.create_tempdir().full_path
    self.bench = os.path.join(self.root, 'bench')
    self.pretrained = os.path.join(self.root, 'pre')
    os.makedirs(self.pretrained)
    training.write_json(os.path.join(self.pretrained, 'config.json'),
                        {'experiment': {}})
    self.calls = []

  def _fake_run(self, spec, *, output_dir, **kwargs):
    del kwargs
    data, loop, lora = spec.data, spec.loop, spec.lora
    init_from, tokenizer_from = spec.init_from, spec.tokenizer_from
    variant = os.path.relpath(output_dir, self.bench).split(os.sep)[0]
    self.calls.append((loop.seed, variant, init_from or tokenizer_from,
                       lora and (lora.rank, lora.alpha, lora.seed)))
    real = text2sql_fake_runs.real_test_examples(
        data.clients, schema_columns=data.schema_columns)
    text2sql_fake_runs.write_run(
        output_dir, loop.seed,
        {c: _first(self._CORRECT[variant], 3) for c in data.clients},
        {c: real[c][:3] for c in data.clients})
    # Bytes per client and round: the whole model 4,000 each way, the
    # adapters 100: 8,000 / 200 = 40 times fewer.
    size = 100 if lora else 4000
    os.makedirs(os.path.join(output_dir, 'federated'))
    with open(os.path.join(output_dir, 'federated', 'metrics.jsonl'),
              'w') as f:
      f.write(json.dumps({'round': 1, 'round_seconds': 2.0, 'communication': {
          'bytes_down_per_client': size, 'bytes_up_per_client': size}}))

  def _run(self, names, **kwargs):
    settings = text2sql_benchmark.RunSettings(
        data=tiny_text2sql.DATA, model=tiny_text2sql.MODEL,
        training=text2sql_task.TrainingConfig(),
        # write_run records 3 rounds: a finished run of this loop.
        loop=training.LoopConfig(rounds=3),
        lora=lora_lib.LoraConfig(rank=1, alpha=16.0))
    with mock.patch.object(text2sql, 'run_text2sql',
                           side_effect=self._fake_run):
      spec = peft_benchmark.PeftBenchmarkSpec(
          settings, pretrained_dir=self.pretrained,
          variants=peft_benchmark.parse_variants(names), methods=[_FEDAVG],
          seeds=[0, 1])
      return peft_benchmark.run_peft_benchmark(
          spec, data_dir=None, output_dir=self.bench, **kwargs)

  def test_seed_by_seed_across_variants_then_one_report(self):
    content = self._run(['scratch_full', 'pretrained_full', 'lora_r4'])
    self.assertEqual(self.calls, [
        (seed, variant, start, adapters)
        for seed in (0, 1)
        for variant, start, adapters in (
            # Its tokenizer from the pre-trained run.
            ('scratch_full', self.pretrained, None),
            ('pretrained_full', self.pretrained, None),
            # The variant's rank, the flags' alpha, the run's seed.
            ('lora_r4', self.pretrained, (4, 16.0, seed)))])
    methods = {name: variant['methods']['fedavg-num_examples']
               for name, variant in content['variants'].items()}
    self.assertEqual({n: m['num_seeds'] for n, m in methods.items()},
                     {'scratch_full': 2, 'pretrained_full': 2, 'lora_r4': 2})
    self.assertAllClose([methods[n]['macro_avg'] for n in self._CORRECT],
                        [0.0, 2 / 3, 1 / 3])
    self.assertAllClose(methods['lora_r4']['bytes_fewer_than_full'], 40.0)
    self.assertAllClose(methods['scratch_full']['bytes_fewer_than_full'], 1.0)
    self.assertAllClose(
        [content['differences'][f'{n}-fedavg-num_examples']['exact_match'][
            'macro_avg']['difference'] for n in ('scratch_full', 'lora_r4')],
        [-2 / 3, -1 / 3])
    self.assertIsNotNone(content['baseline'])
    # "What the model saw": every run's record, the data's split sizes.
    (setting,) = content['what_the_model_saw']
    self.assertEqual(setting['runs'], 6)
    sizes = peft_setting.split_sizes(tiny_text2sql.DATA.clients,
                                     data_dir=None)
    self.assertEqual(
        {c: e['train_split'] for c, e in setting['per_client'].items()},
        {c: s['train'] for c, s in sizes.items()})
    # Reporting again trains nothing; a variant without a run is left out.
    self.calls.clear()
    with self.assertLogs(level='WARNING') as logs:
      content = self._run(['pretrained_full', 'lora_r4', 'lora_r8'],
                          train=False)
    self.assertEqual(self.calls, [])
    self.assertEqual(list(content['variants']), ['pretrained_full', 'lora_r4'])
    self.assertTrue(any('lora_r8: no finished run yet' in line
                        for line in logs.output), logs.output)


class SummarizeTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.create_tempdir().full_path
    summaries = {'pretrained_full': _write_variant(
        self.root, 'pretrained_full', _FULL, lorar=_FULL),
                 'lora_r4': _write_variant(self.root, 'lora_r4', _LORA)}
    self.variants = peft_benchmark.parse_variants(
        ['pretrained_full', 'lora_r4'])
    self.content = peft_report.summarize(
        self.variants, summaries, output_dir=self.root, command='cmd')

  def test_exact_match_and_traffic(self):
    full = self.content['variants']['pretrained_full']['methods'][
        'fedavg-num_examples']
    lora = self.content['variants']['lora_r4']['methods'][
        'fedavg-num_examples']
    self.assertAllClose(full['macro_avg'], 0.5)
    self.assertAllClose(lora['macro_avg'], 0.15)
    self.assertAllClose(full['macro_avg_ci95'],
                        [0.5 - _T_2 * 0.2 / math.sqrt(3),
                         0.5 + _T_2 * 0.2 / math.sqrt(3)])
    self.assertEqual(full['bytes_down_per_client'], 4000)
    self.assertEqual(lora['bytes_up_per_client'], 120)
    self.assertAllClose(lora['round_seconds'], 3.0)  # rounds of 2 and 4 s
    self.assertAllClose(lora['bytes_fewer_than_full'], 8100 / 220)
    self.assertAllClose(full['bytes_fewer_than_full'], 1.0)
    self.assertAllClose(full['token_accuracy']['macro_avg'], 0.65)
    self.assertAllClose(lora['token_accuracy']['macro_avg'], 0.40)
    self.assertAllClose(lora['token_accuracy']['macro_avg_ci95'],
                        [0.40, 0.40])

  def test_difference_from_full(self):
    difference = self.content['differences'][
        'lora_r4-fedavg-num_examples']['exact_match']['macro_avg']
    self.assertAllClose(difference['difference'], -0.35)
    half = _T_2 * 0.2 / math.sqrt(3)
    self.assertAllClose(difference['seed_ci95'], [-0.35 - half, -0.35 + half])
    low, high = difference['bootstrap_ci95']
    self.assertLess(high, 0.0)  # The same examples: LoRA is below.
    self.assertLess(low, -0.35)

  def test_token_accuracy_difference_from_full(self):
    # MacroAvg token accuracy 0.40 - 0.65 in every seed: -0.25, an interval
    # of zero width over the 3 paired seeds.
    tokens = self.content['differences']['lora_r4-fedavg-num_examples'][
        'token_accuracy']
    self.assertAllClose(tokens['difference'], -0.25)
    self.assertEqual(tokens['paired_seeds'], 3)
    for key in ('seed', 'bootstrap', 'bootstrap_seeds'):
      self.assertAllClose(tokens[f'{key}_ci95'], [-0.25, -0.25])
      self.assertEqual(tokens[f'{key}_verdict'], 'pretrained_full higher')

  def test_lorar_against_num_examples_within_a_variant(self):
    # Only full fine-tuning ran both weightings. The same exact matches:
    # EM +0 with every interval [0, 0]; tokens +0.05 on every resample.
    self.assertEqual(list(self.content['lorar_vs_num_examples']),
                     ['pretrained_full-fedavg'])
    difference = self.content['lorar_vs_num_examples'][
        'pretrained_full-fedavg']
    self.assertEqual((difference['a'], difference['b']),
                     ('Lorar', 'num_examples'))
    em = difference['exact_match']['macro_avg']
    self.assertAllClose(em['difference'], 0.0)
    self.assertAllClose(em['seed_ci95'], [0.0, 0.0])
    tokens = difference['token_accuracy']
    self.assertAllClose(tokens['difference'], 0.05)
    for key in ('seed', 'bootstrap', 'bootstrap_seeds'):
      self.assertAllClose(tokens[f'{key}_ci95'], [0.05, 0.05])
      self.assertEqual(tokens[f'{key}_verdict'], 'Lorar higher')
    # Lorar is compared with the reference's Lorar runs only: LoRA has none.
    self.assertEqual(list(self.content['differences']),
                     ['lora_r4-fedavg-num_examples'])

  def test_token_accuracy_figure(self):
    self.assertEqual(self.content['figures'],
                     [peft_report.TOKEN_PLOT_FILE])
    with open(os.path.join(self.root, peft_report.TOKEN_PLOT_FILE),
              'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')
    # Per seed 0.65, 0.65, 0.65 (full) and 0.70 (full, Lorar).
    methods = self.content['variants']['pretrained_full']['methods']
    self.assertAllClose(methods['fedavg-num_examples'][
        'token_accuracy_per_seed'], [0.65] * 3)
    self.assertAllClose(methods['fedavg-lorar'][
        'token_accuracy_per_seed'], [0.70] * 3)

  def test_files(self):
    with open(os.path.join(self.root, peft_report.RESULTS_FILE)) as f:
      self.assertEqual(json.load(f)['reference'], 'pretrained_full')
    with open(os.path.join(self.root, peft_report.TABLE_FILE)) as f:
      table = f.read()
    self.assertIn('| LoRA r = 4, pre-trained | FedAvg | 3 | 15.0', table)
    self.assertIn('| 40.0 [40.0, 40.0] | 100 / 120 | 36.8× | 3.0 |', table)
    # EM: seeds [-35 ± 49.7] (no difference), bootstrap below 0: not called.
    self.assertRegex(
        table, r'\| lora_r4-fedavg-num_examples \| -35\.0 \| \[-84\.7, '
        r'\+14\.7\] \| \[-[0-9.]+, -[0-9.]+\] \| no difference \| -25\.0 \| '
        r'\[-25\.0, -25\.0\] \| \[-25\.0, -25\.0\] \| pretrained_full '
        r'higher \|')
    self.assertIn('| pretrained_full-fedavg | +0.0 | [+0.0, +0.0] | '
                  '[+0.0, +0.0] | no difference | +5.0 | [+5.0, +5.0] | '
                  '[+5.0, +5.0] | Lorar higher |', table)
    self.assertIn(f'![{peft_report.TOKEN_PLOT_FILE}]', table)
    # The claims, on exact match (above 0 here): LoRA's EM intervals
    # disagree (above), so no difference, which is what LoRA's paper
    # claims; full fine-tuning's Lorar EM equals its num_examples EM.
    self.assertIn('| LoRA r = 4, pre-trained, FedAvg − full | 3 | EM -35.0 '
                  '(seeds [-84.7, +14.7], bootstrap', table)
    self.assertIn('Verdicts: reproduced (1).', table)
    self.assertIn('Verdicts: not reproduced (1).', table)
    # It opens with what the model saw (`peft_setting`; these hand-written
    # records say no data configuration) and quotes the one verdict rule
    # once.
    self.assertTrue(table.startswith(
        '# Federated LoRA vs full fine-tuning on the text-to-SQL clients\n\n'
        '## What the model saw\n\n9 runs (pretrained_full, lora_r4): their '
        'records do not say what data they used.'), table[:300])
    self.assertEqual(table.count(intervals.VERDICT_RULE), 1)


class EmbeddingAgainstLoraTest(tf.test.TestCase):

  def test_embedding_variant_minus_the_same_lora_without_it(self):
    root = self.create_tempdir().full_path
    # LoRA r = 4 with the embedding: full fine-tuning's outcomes (`_FULL`,
    # MacroAvg EM 0.3, 0.5, 0.7) against LoRA's 0.15 in every seed:
    # +0.15, +0.35, +0.55, mean +0.35, sd 0.2 (the mirror of
    # `test_difference_from_full`); tokens 0.65 - 0.40 = +0.25 on any
    # resample. No full fine-tuning ran: no `differences`.
    summaries = {'lora_r4': _write_variant(root, 'lora_r4', _LORA),
                 'lora_r4_embedding': _write_variant(
                     root, 'lora_r4_embedding', _FULL)}
    content = peft_report.summarize(
        peft_benchmark.parse_variants(['lora_r4', 'lora_r4_embedding']),
        summaries, output_dir=root)
    self.assertEqual(list(content['embedding_vs_lora']),
                     ['lora_r4_embedding-fedavg-num_examples'])
    self.assertEqual(content['differences'], {})
    difference = content['embedding_vs_lora'][
        'lora_r4_embedding-fedavg-num_examples']
    self.assertEqual((difference['a'], difference['b']),
                     ('lora_r4_embedding', 'lora_r4'))
    em = difference['exact_match']['macro_avg']
    half = _T_2 * 0.2 / math.sqrt(3)
    self.assertAllClose(em['difference'], 0.35)
    self.assertAllClose(em['seed_ci95'], [0.35 - half, 0.35 + half])
    tokens = difference['token_accuracy']
    self.assertAllClose(tokens['difference'], 0.25)
    for key in ('seed', 'bootstrap', 'bootstrap_seeds'):
      self.assertAllClose(tokens[f'{key}_ci95'], [0.25, 0.25])
      self.assertEqual(tokens[f'{key}_verdict'], 'lora_r4_embedding higher')
    with open(os.path.join(root, peft_report.TABLE_FILE)) as f:
      table = f.read()
    self.assertIn('| Variant − LoRA without the embedding |', table)
    self.assertIn('| lora_r4_embedding-fedavg-num_examples | +35.0 | '
                  '[-14.7, +84.7] |', table)

  def test_not_compared_without_the_plain_lora(self):
    root = self.create_tempdir().full_path
    content = peft_report.summarize(
        peft_benchmark.parse_variants(['lora_r4_embedding']),
        {'lora_r4_embedding': _write_variant(root, 'lora_r4_embedding',
                                             _FULL)}, output_dir=root)
    self.assertEqual(content['embedding_vs_lora'], {})


def _table(entry):
  """The difference table of one EM entry of a - b (no token accuracy)."""
  # pylint: disable-next=protected-access
  rows = peft_report._difference_table(
      'a − b', {'x': {'a': 'a', 'b': 'b', 'exact_match': {
          'macro_avg': entry}, 'token_accuracy': None}})
  return '\n'.join(rows)


class VerdictTest(tf.test.TestCase, parameterized.TestCase):
  """Every verdict of the report is `intervals.comparison_verdict`'s."""

  @parameterized.parameters(
      # Both intervals exclude 0 on one side: called.
      ([0.1, 0.2], [0.05, 0.3], 'a higher'),
      ([-0.2, -0.1], {'low': -0.3, 'high': -0.05}, 'b higher'),
      # One contains 0, or they disagree: not called.
      ([-0.1, 0.2], [0.05, 0.3], 'no difference'),
      ([-0.2, -0.1], [0.05, 0.3], 'no difference'),
      # One seed (no seed interval): never called. The rule the report
      # followed before took the bootstrap's verdict here ('b higher').
      (None, [-0.3, -0.05], 'undetermined'),
      (None, [-0.3, 0.05], 'no difference'),
      (None, None, 'undetermined'),
  )
  def test_the_one_rule(self, seed, bootstrap, expected):
    # The intervals' own recorded verdicts disagree on purpose: only the
    # intervals count.
    entry = {'difference': 0.1, 'seed_ci95': seed,
             'seed_verdict': None if seed is None else 'undetermined',
             'bootstrap_ci95': bootstrap, 'bootstrap_verdict': 'a higher'}
    self.assertEqual(peft_report._verdict(  # pylint: disable=protected-access
        entry, 'a', 'b'), expected)
    self.assertIn(f'| {expected} | – | – | – | – |', _table(entry))

  def test_no_second_implementation(self):
    with mock.patch.object(intervals, 'comparison_verdict',
                           return_value='the rule') as rule:
      table = _table(_entry(-0.1, 'b higher'))
    rule.assert_called_once_with((-0.2, -0.1), (-0.2, -0.1), 'a', 'b')
    self.assertIn('| the rule |', table)


def _claims_content(em, em_entry, token_entry, *, seeds=3):
  """A report's content for `paper_claims`: from scratch, full fine-tuning
  and LoRA r = 4 (FedAvg), and full fine-tuning's Lorar against
  num_examples. Every method has MacroAvg EM `em`, and every comparison
  the same entries, so a negative difference is full fine-tuning (or
  num_examples) higher."""

  def variant(label, lora_rank, methods):
    return {'label': label, 'lora_rank': lora_rank,
            'methods': {slug: {'label': method, 'macro_avg': em}
                        for slug, method in methods}}

  difference = {'paired_seeds': list(range(seeds)),
                'exact_match': {'macro_avg': em_entry},
                'token_accuracy': token_entry}
  return {
      'variants': {
          'scratch_full': variant('from scratch', None,
                                  [('fedavg-num_examples', 'FedAvg')]),
          'pretrained_full': variant(
              'full', None, [('fedavg-num_examples', 'FedAvg'),
                             ('fedavg-lorar', 'FedAvg + Lorar')]),
          'lora_r4': variant('LoRA r = 4', 4,
                             [('fedavg-num_examples', 'FedAvg')])},
      'differences': {'scratch_full-fedavg-num_examples': difference,
                      'lora_r4-fedavg-num_examples': difference},
      'lorar_vs_num_examples': {'pretrained_full-fedavg': difference}}


def _entry(difference, verdict, seed_ci=(-0.2, -0.1), bootstrap_ci=None):
  return {'difference': difference, 'seed_ci95': list(seed_ci),
          'seed_verdict': verdict,
          'bootstrap_ci95': list(bootstrap_ci or seed_ci),
          'bootstrap_verdict': verdict}


class PaperClaimsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # Exact match 0.0 on both sides: token accuracy decides, and says so.
      ('tokens_lower', 0.0, None, _entry(-0.109, 'pretrained_full higher'),
       'token_accuracy',
       'contradicted: full fine-tuning higher (token accuracy; EM not '
       'measurable)',
       'contradicted: num_examples higher (token accuracy; EM not '
       'measurable)'),
      ('tokens_level', 0.0, None, _entry(0.001, 'no difference', (-0.1, 0.1)),
       'token_accuracy',
       'reproduced: no difference (token accuracy; EM not measurable)',
       'not reproduced: no difference (token accuracy; EM not measurable)'),
      ('tokens_higher', 0.0, None, _entry(0.05, 'a higher', (0.01, 0.09)),
       'token_accuracy',
       'reproduced: LoRA higher (token accuracy; EM not measurable)',
       'reproduced in direction: Lorar higher (token accuracy; EM not '
       'measurable)'),
      # Exact match above 0: it decides (the token entry is ignored).
      ('em_lower', 0.3, _entry(-0.1, 'b higher'), None, 'exact_match',
       'contradicted: full fine-tuning higher',
       'contradicted: num_examples higher'),
      ('em_intervals_disagree', 0.3,
       {**_entry(-0.1, 'no difference', (-0.3, 0.1)),
        'bootstrap_ci95': [-0.2, -0.05], 'bootstrap_verdict': 'b higher'},
       None, 'exact_match', 'reproduced: no difference',
       'not reproduced: no difference'),
  )
  def test_verdicts(self, em, em_entry, token_entry, metric, lora_verdict,
                    lorar_verdict):
    em_entry = em_entry or _entry(0.0, 'no difference', (0.0, 0.0))
    lora, lorar = peft_report.paper_claims(
        _claims_content(em, em_entry, token_entry))
    self.assertEqual(
        [c.key for c in peft_report.PAPER_CLAIMS], [lora['key'], lorar['key']])
    # Only LoRA variants speak to the LoRA claim: from scratch is left out.
    (lora_row,), (lorar_row,) = lora['ours'], lorar['ours']
    self.assertEqual(lora_row['comparison'], 'LoRA r = 4, FedAvg − full')
    self.assertEqual(lorar_row['comparison'], 'full: Lorar − num_examples')
    self.assertEqual((lora_row['metric'], lora_row['seeds']), (metric, 3))
    self.assertEqual(lora_row['verdict'], lora_verdict)
    self.assertEqual(lorar_row['verdict'], lorar_verdict)

  def test_row_text(self):
    (lora, _) = peft_report.paper_claims(_claims_content(
        0.0, _entry(0.0, 'no difference', (0.0, 0.0)),
        _entry(-0.109, 'pretrained_full higher', (-0.195, -0.022),
               (-0.112, -0.106))))
    self.assertEqual(lora['ours'][0]['text'],
                     'EM 0.0 on both sides; token accuracy -10.9 (seeds '
                     '[-19.5, -2.2], bootstrap [-11.2, -10.6])')

  @parameterized.parameters(1, 2)
  def test_fewer_than_three_seeds_are_not_judged(self, seeds):
    claims = peft_report.paper_claims(_claims_content(
        0.0, _entry(0.0, 'no difference', (0.0, 0.0)),
        _entry(-0.109, 'pretrained_full higher'), seeds=seeds))
    for claim in claims:
      self.assertEqual(claim['ours'][0]['verdict'],
                       f'not measurable yet: {seeds} of 3 seeds')


# Round times the fake runs record, per variant and pass: round 1 (which
# compiles) 100 s, then these. Full: 6, 8 | 10, 4 -> median of 4, 6, 8, 10
# = 7. LoRA r = 4: 2, 3 | 5, 1 -> median of 1, 2, 3, 5 = 2.5. Full / LoRA
# = 7 / 2.5 = 2.8.
_ROUND_SECONDS = {('pretrained_full', 0): [6.0, 8.0],
                  ('pretrained_full', 1): [10.0, 4.0],
                  ('lora_r4', 0): [2.0, 3.0], ('lora_r4', 1): [5.0, 1.0]}


# Bytes per client and round of the timing runs: full 4,000 down and 4,100
# up, LoRA 100 and 170: 8,100 / 270 = 30 times fewer.
_TIMING_BYTES = {
    'pretrained_full': {'bytes_down_per_client': 4000,
                        'bytes_up_per_client': 4100},
    'lora_r4': {'bytes_down_per_client': 100, 'bytes_up_per_client': 170}}


class TimeRoundsTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.create_tempdir().full_path
    self.calls = []
    self.process_caches = set()
    self.variants = peft_benchmark.parse_variants(
        ['pretrained_full', 'lora_r4'])
    self.pretrained = self._pretrained_run('pre')

  def _pretrained_run(self, name, lengths=48):
    """A run directory as `init_from` takes it: a config.json."""
    path = os.path.join(self.root, name)
    os.makedirs(path)
    training.write_json(os.path.join(path, 'config.json'),
                        {'experiment': {'lengths': lengths}})
    return path

  def _fake_run(self, spec, *, output_dir, **kwargs):
    """Writes what `run_text2sql` would: metrics, then results last."""
    data, loop, init_from, lora = (spec.data, spec.loop, spec.init_from,
                                   spec.lora)
    weighting = spec.training.weighting
    variant = 'lora_r4' if lora else 'pretrained_full'
    # <root>/timing/pass<i>/<variant>/runs/<name>-<digest>
    parts = os.path.relpath(output_dir, self.root).split(os.sep)
    self.assertEqual((parts[0], parts[2], parts[3]),
                     ('timing', variant, 'runs'))
    repeat = int(parts[1][4:])
    self.calls.append((variant, repeat, data.max_eval_examples, loop.rounds,
                       init_from, lora and lora.rank, weighting))
    self.process_caches.add(id(kwargs['processes']))
    os.makedirs(os.path.join(output_dir, 'federated'))
    with open(os.path.join(output_dir, 'federated', 'metrics.jsonl'),
              'w') as f:
      for round_num, seconds in enumerate(
          [100.0] + _ROUND_SECONDS[variant, repeat], start=1):
        f.write(json.dumps({
            'round': round_num, 'round_seconds': seconds,
            'communication': _TIMING_BYTES[variant]}) + '\n')
      f.write(json.dumps({'round': 3, 'eval': {}}) + '\n')
    training.write_json(os.path.join(output_dir, 'results.json'),
                        {'config': {'loop': {'rounds': loop.rounds}}})

  def _spec(self, pretrained_dir=None):
    # The timed method is the first; the second is not timed.
    return peft_benchmark.PeftBenchmarkSpec(
        _settings(), pretrained_dir=pretrained_dir or self.pretrained,
        variants=self.variants, methods=[_FEDAVG, _FEDAVG_LORAR], seeds=[0])

  def _time(self, pretrained_dir=None):
    with mock.patch.object(text2sql, 'run_text2sql',
                           side_effect=self._fake_run):
      return peft_benchmark.time_rounds(
          self._spec(pretrained_dir), data_dir=None, output_dir=self.root,
          rounds=3, repeats=2)

  def test_interleaved_passes_and_medians(self):
    content = self._time()
    # Pass 0 in order, pass 1 reversed; one example decoded, 3 rounds.
    self.assertEqual(self.calls, [
        ('pretrained_full', 0, 1, 3, self.pretrained, None, 'num_examples'),
        ('lora_r4', 0, 1, 3, self.pretrained, 4, 'num_examples'),
        ('lora_r4', 1, 1, 3, self.pretrained, 4, 'num_examples'),
        ('pretrained_full', 1, 1, 3, self.pretrained, None, 'num_examples')])
    # One process cache for the timing: a variant's second pass reuses the
    # process its first built (`run_text2sql` keys it by configuration).
    self.assertLen(self.process_caches, 1)
    full = content['variants']['pretrained_full']
    lora = content['variants']['lora_r4']
    self.assertEqual(full['round_seconds'], [6.0, 8.0, 10.0, 4.0])
    self.assertEqual(full['median'], 7.0)
    self.assertEqual(lora['median'], 2.5)
    self.assertAllClose(lora['speedup_over_full'], 2.8)
    self.assertEqual((lora['bytes_down_per_client'],
                      lora['bytes_up_per_client']), (100, 170))
    with open(os.path.join(self.root, peft_report.TIMING_FILE)) as f:
      self.assertEqual(json.load(f), content)

  def test_finished_runs_are_read_back_unfinished_ones_rerun(self):
    self._time()
    # An interrupted run: its results file gone (it is written last).
    [interrupted] = glob.glob(os.path.join(
        self.root, 'timing', 'pass1', 'lora_r4', 'runs', '*', 'results.json'))
    os.remove(interrupted)
    self.calls.clear()
    content = self._time()
    self.assertEqual([c[:2] for c in self.calls], [('lora_r4', 1)])
    self.assertEqual(content['variants']['lora_r4']['median'], 2.5)

  def test_timings_of_other_settings_are_not_read_back(self):
    self._time()
    self.calls.clear()
    # Another pre-trained model: every run is timed again.
    self._time(self._pretrained_run('other', lengths=64))
    self.assertLen(self.calls, 4)

  def test_needs_two_rounds(self):
    with self.assertRaisesRegex(errors.InputError, 'at least 2 rounds'):
      peft_benchmark.time_rounds(
          self._spec(), data_dir=None, output_dir=self.root,
          method=_FEDAVG, rounds=1)

  def test_reported_beside_the_runs(self):
    self._time()
    summaries = {'pretrained_full': _write_variant(
        self.root, 'pretrained_full', _FULL),
                 'lora_r4': _write_variant(self.root, 'lora_r4', _LORA)}
    content = peft_report.summarize(self.variants, summaries,
                                       output_dir=self.root)
    self.assertEqual(content['round_time']['variants']['lora_r4']['median'],
                     2.5)
    table = peft_report.markdown(content)
    self.assertIn('| lora_r4 | 100 / 170 | 30.0× | 4 | 2.5 | 1.0–5.0 | 2.80 |',
                  table)
    self.assertIn('| pretrained_full | 4,000 / 4,100 | 1.0× | 4 | 7.0 | '
                  '4.0–10.0 | 1.00 |', table)


if __name__ == '__main__':
  tf.test.main()
