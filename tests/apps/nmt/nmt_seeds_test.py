"""NMT results over seeds: report keys, summaries and the paired bootstrap.

The bootstrap is checked against SacreBLEU's own corpus BLEU of the
resampled sentences (the same index draws made here with numpy), the
summaries against hand-derived means and t intervals.
"""

import math

from absl.testing import parameterized
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from tff_nlp.metrics import bleu
from tff_nlp.metrics import intervals
from apps.nmt import report as nmt_report
from apps.nmt import seeds as nmt_seeds

_REFS = {'news': ['the cat sat on the mat today', 'a dog barked at night',
                  'it rained all day long here', 'we went home early then'],
         'php': ['returns the length of a string', 'the array is sorted',
                 'this function is deprecated now']}
_A = {'news': ['the cat sat on a mat today', 'a dog barked at night',
               'it rained all day here', 'we went home then'],
      'php': ['returns the length of the string', 'the array is sorted',
              'this function is now deprecated']}
_B = {'news': ['cat on mat', 'the dog barked', 'rain all day long here',
               'we went home early then'],
      'php': ['returns a string length', 'array is sorted',
              'this function deprecated now']}


def _stats(system):
  return {d: bleu.sentence_statistics(system[d], _REFS[d]) for d in _REFS}


def _two_engines():
  """Engines x (BLEU 30, 31, 32 on seeds 0-2) and y (10, 12, 11)."""
  a = nmt_seeds.summarize_engine(
      {s: _result('x', 'combined', {'news': v, 'php': v})
       for s, v in ((0, 30.0), (1, 31.0), (2, 32.0))}, ['news', 'php'])
  b = nmt_seeds.summarize_engine(
      {s: _result('y', 'combined', {'news': v, 'php': v})
       for s, v in ((0, 10.0), (1, 12.0), (2, 11.0))}, ['news', 'php'])
  return a, b


class ReportKeyTest(parameterized.TestCase):

  @parameterized.parameters(
      ({'kind': 'generic'}, 'generic'),
      ({'kind': 'single', 'domain': 'php_docs'}, 'single_php_docs'),
      ({'kind': 'combined'}, 'data_combination'),
      ({'kind': 'chained'}, 'chained'),
      ({'kind': 'federated', 'mode': 'default', 'rounds': 5},
       'fedavg_default'),
      ({'kind': 'federated', 'mode': 'dp_l', 'rounds': 5,
        'change_norm': 'rms'}, 'dp_l_rms'),
      ({'kind': 'federated', 'mode': 'random', 'rounds': 2}, 'random_r2'),
      ({'kind': 'federated', 'mode': 'default', 'rounds': 5,
        'server_optimizer': 'momentum'}, 'fedavg_default_momentum'),
      ({'kind': 'federated', 'mode': 'default', 'rounds': 5,
        'server_optimizer': 'none'}, 'fedavg_default'),
  )
  def test_report_key(self, spec, key):
    self.assertEqual(nmt_seeds.report_key(spec), key)

  def test_comparison_pairs_at_equal_rounds(self):
    keys = ['generic', 'data_combination', 'fedavg_default', 'dp_l',
            'dp_g', 'fedavg_default_r2', 'dp_l_r2', 'random_r2']
    self.assertEqual(nmt_seeds.comparison_pairs(keys), [
        ('fedavg_default', 'data_combination'), ('fedavg_default', 'dp_l'),
        ('dp_l', 'dp_g'), ('fedavg_default_r2', 'data_combination'),
        ('fedavg_default_r2', 'dp_l_r2'), ('dp_l_r2', 'random_r2')])

  def test_a_variant_of_the_default_is_compared_with_both(self):
    keys = ['data_combination', 'fedavg_default', 'fedavg_default_momentum',
            'fedavg_default_r2', 'fedavg_default_momentum_r2']
    self.assertEqual(nmt_seeds.comparison_pairs(keys), [
        ('fedavg_default', 'data_combination'),
        ('fedavg_default_r2', 'data_combination'),
        ('fedavg_default_momentum', 'data_combination'),
        ('fedavg_default_momentum', 'fedavg_default')])


class StatisticsTest(tf.test.TestCase):

  def test_summed_statistics_give_sacrebleus_corpus_bleu(self):
    for d in _REFS:
      stats = bleu.sentence_statistics(_A[d], _REFS[d])
      self.assertEqual(stats.shape, (len(_REFS[d]), 10))
      self.assertAlmostEqual(
          bleu.score_from_statistics(stats.sum(axis=0)),
          sacrebleu.corpus_bleu(_A[d], [_REFS[d]]).score, places=9)

  def test_bootstrap_matches_sacrebleu_on_the_resampled_sentences(self):
    # Replicate r draws, domain by domain, rng.integers(0, n, n); the
    # difference is the average over domains of corpus BLEU of the drawn
    # sentences, A's minus B's (one seed each).
    replicates = 5
    got = nmt_seeds.bootstrap_average_difference(
        [_stats(_A)], [_stats(_B)], num_replicates=replicates, seed=3,
        confidence=0.5)
    rng = np.random.default_rng(3)
    want = []
    for _ in range(replicates):
      diff = []
      for d in _REFS:
        idx = rng.integers(0, len(_REFS[d]), len(_REFS[d]))
        refs = [[_REFS[d][i] for i in idx]]
        diff.append(
            sacrebleu.corpus_bleu([_A[d][i] for i in idx], refs).score
            - sacrebleu.corpus_bleu([_B[d][i] for i in idx], refs).score)
      want.append(np.mean(diff))
    point = np.mean([sacrebleu.corpus_bleu(_A[d], [_REFS[d]]).score
                     - sacrebleu.corpus_bleu(_B[d], [_REFS[d]]).score
                     for d in _REFS])
    self.assertAlmostEqual(got.estimate, point, places=9)
    self.assertAlmostEqual(got.low, np.quantile(want, 0.25), places=9)
    self.assertAlmostEqual(got.high, np.quantile(want, 0.75), places=9)

  def test_an_engine_against_itself_is_zero(self):
    interval = nmt_seeds.bootstrap_average_difference(
        [_stats(_A), _stats(_B)], [_stats(_A), _stats(_B)],
        num_replicates=50)
    self.assertEqual(tuple(interval), (0.0, 0.0, 0.0))

  def test_different_sentences_are_refused(self):
    short = _stats(_A)
    short['php'] = short['php'][:2]
    with self.assertRaisesRegex(ValueError, 'same sentences'):
      nmt_seeds.bootstrap_average_difference([_stats(_A)], [short])


def _result(engine, kind, scores_by_domain, seconds=60.0, pulled=None):
  spec = {'kind': kind, 'mode': 'dp_l' if pulled else 'default',
          'rounds': 5, 'domain': None}
  model = 'server' if kind == 'federated' else engine
  result = {'engine': engine, 'spec': spec, 'bleu': {model: scores_by_domain},
            'seconds': seconds, 'run_dir': f'engines/{engine}'}
  if pulled is not None:
    result['records'] = {'federated': [
        {'round': 0}, *({'round': i + 1,
                         'train': {'parameters_pulled_per_client': p}}
                        for i, p in enumerate(pulled))]}
  return result


class SummaryTest(tf.test.TestCase):

  def test_means_intervals_and_pulled_fraction(self):
    # Seeds 0, 1, 2 with averages (10+20)/2 = 15, 17, 19: mean 17, s = 2,
    # 95 % interval 17 ± 4.3027 · 2 / sqrt(3) = 17 ± 4.9683. Pulled: seed 0
    # (300 + 500) / 2 = 400 of the default's 1000, seeds 1 and 2 500 of
    # 1000: fraction (0.4 + 0.5 + 0.5) / 3.
    per_seed = {
        0: _result('f', 'federated', {'a': 10.0, 'b': 20.0}, 30,
                   pulled=(300, 500)),
        1: _result('f', 'federated', {'a': 12.0, 'b': 22.0}, 60,
                   pulled=(500, 500)),
        2: _result('f', 'federated', {'a': 14.0, 'b': 24.0}, 90,
                   pulled=(500, 500)),
    }
    summary = nmt_seeds.summarize_engine(per_seed, ['a', 'b'],
                                         {0: 1000, 1: 1000, 2: 1000})
    self.assertEqual([s['bleu_avg'] for s in summary['seeds'].values()],
                     [15, 17, 19])
    self.assertEqual(summary['bleu'], {'a': 12.0, 'b': 22.0})
    self.assertEqual(summary['bleu_avg'], 17)
    self.assertEqual(summary['bleu_avg_ci95'],
                     pytest.approx([17 - 4.9683, 17 + 4.9683], abs=1e-4))
    self.assertEqual(summary['pulled_fraction'], pytest.approx(1.4 / 3))
    self.assertEqual(summary['seconds_mean'], 60)
    table = nmt_report.seeds_table({'dp_l': summary}, ['a', 'b'])
    # Neither test set is one of the paper's: no shared-domain average.
    self.assertIn('| dp_l | 3 | 12.00 | 22.00 | – | 17.00 [12.03, 21.97] | '
                  '0.467× | 1.0 |', table)

  def test_engine_seconds(self):
    self.assertEqual(nmt_seeds.engine_seconds(
        {'seconds': 5.0, 'train_seconds': 100.0, 'score_seconds': 7.0}), 107)
    # Older results: a resumed run's last invocation only scored (5 s);
    # its rounds took 60 + 40 s. A run never resumed: all in `seconds`.
    rounds = {'train': [{'round': 0}, {'round': 1, 'round_seconds': 60.0},
                        {'round': 2, 'round_seconds': 40.0}]}
    self.assertEqual(nmt_seeds.engine_seconds(
        {'seconds': 5.0, 'records': rounds}), 100)
    self.assertEqual(nmt_seeds.engine_seconds(
        {'seconds': 130.0, 'records': rounds}), 130)
    self.assertIsNone(nmt_seeds.engine_seconds({'records': {}}))

  def test_one_seed_has_no_interval(self):
    summary = nmt_seeds.summarize_engine(
        {0: _result('combined', 'combined', {'a': 3.0})}, ['a'])
    self.assertIsNone(summary['bleu_avg_ci95'])
    self.assertNotIn('pulled_fraction', summary)
    self.assertIn('3.00 (n=1)',
                  nmt_report.seeds_table({'data_combination': summary},
                                         ['a']))

  def test_compare_calls_a_difference_only_when_both_intervals_agree(self):
    a, b = _two_engines()
    # Per-seed differences 20, 19, 21: mean 20, s = 1, 20 ± 2.4841. On the
    # test sentences, A translates every one exactly (BLEU 100 on any
    # resample) and B does not: the bootstrap interval is above 0 too.
    result = nmt_seeds.compare(a, b, a_statistics=[_stats(_REFS)] * 3,
                               b_statistics=[_stats(_B)] * 3,
                               names=('x', 'y'))
    self.assertEqual(result['difference'], 20)
    self.assertEqual(result['seed_ci95'],
                     pytest.approx([20 - 2.4841, 20 + 2.4841], abs=1e-4))
    self.assertEqual(result['verdict'], 'x higher')
    # The same seeds against a test-set bootstrap that straddles 0.
    tie = nmt_seeds.compare(a, b, a_statistics=[_stats(_A)] * 3,
                            b_statistics=[_stats(_A)] * 3, names=('x', 'y'))
    self.assertEqual(tie['bootstrap_ci95'], [0.0, 0.0])
    self.assertEqual(tie['verdict'], 'no difference')
    self.assertIn('| x − y | +20.00 | [+17.52, +22.48] | [+0.00, +0.00] | '
                  'no difference |', nmt_report.comparisons_table([tie]))
    self.assertFalse(math.isnan(result['bootstrap_ci95'][0]))

  def test_compare_applies_the_one_verdict_rule(self):
    a, b = _two_engines()
    # Seeds: A higher, [+17.52, +22.48]. Test sentences: A's translations
    # are _B's and B's are the references, so the bootstrap is below 0.
    # Intervals that exclude 0 on opposite sides call nothing.
    result = nmt_seeds.compare(a, b, a_statistics=[_stats(_B)] * 3,
                               b_statistics=[_stats(_REFS)] * 3,
                               names=('x', 'y'))
    self.assertLess(result['bootstrap_ci95'][1], 0)
    self.assertEqual(result['verdict'], 'no difference')
    self.assertEqual(result['verdict'], intervals.comparison_verdict(
        result['seed_ci95'], result['bootstrap_ci95'], 'x', 'y'))
    # One paired seed: no seed interval, so the bootstrap alone calls
    # nothing ("undetermined").
    one = nmt_seeds.summarize_engine(
        {0: _result('x', 'combined', {'news': 30.0, 'php': 30.0})},
        ['news', 'php'])
    result = nmt_seeds.compare(one, b, a_statistics=[_stats(_REFS)],
                               b_statistics=[_stats(_B)] * 3,
                               names=('x', 'y'))
    self.assertIsNone(result['seed_ci95'])
    self.assertGreater(result['bootstrap_ci95'][0], 0)
    self.assertEqual(result['verdict'], 'undetermined')

  def test_shared_domain_average_and_its_comparison(self):
    # Test sets news (shared with the paper) and captions (ours only).
    # A: news 4, 6, 8 -> shared average 6, s = 2, 6 ± 4.9683; over both
    # (news + 20) / 2 = 12, 13, 14. B: news 1, 2, 3 -> differences on the
    # shared average 3, 4, 5: 4 ± 2.4841.
    a = nmt_seeds.summarize_engine(
        {s: _result('x', 'combined', {'news': v, 'captions': 20.0})
         for s, v in ((0, 4.0), (1, 6.0), (2, 8.0))}, ['news', 'captions'],
        shared_domains=['news'])
    b = nmt_seeds.summarize_engine(
        {s: _result('y', 'combined', {'news': v, 'captions': 20.0})
         for s, v in ((0, 1.0), (1, 2.0), (2, 3.0))}, ['news', 'captions'],
        shared_domains=['news'])
    self.assertEqual(
        [s['bleu_shared_avg'] for s in a['seeds'].values()], [4, 6, 8])
    self.assertEqual(a['bleu_shared_avg'], 6)
    self.assertEqual(a['bleu_shared_avg_ci95'],
                     pytest.approx([6 - 4.9683, 6 + 4.9683], abs=1e-4))
    self.assertEqual(a['bleu_avg'], 13)
    self.assertEqual(a['shared_domains'], ['news'])
    news = [{'news': _stats(_REFS)['news']}]
    result = nmt_seeds.compare(
        a, b, a_statistics=news * 3,
        b_statistics=[{'news': _stats(_B)['news']}] * 3, names=('x', 'y'),
        average=nmt_seeds.SHARED_AVG)
    self.assertEqual(result['average'], 'bleu_shared_avg')
    self.assertEqual(result['difference'], 4)
    self.assertEqual(result['seed_ci95'],
                     pytest.approx([4 - 2.4841, 4 + 2.4841], abs=1e-4))
    self.assertEqual(result['verdict'], 'x higher')
    table = nmt_report.seeds_table({'x': a}, ['news', 'captions'])
    self.assertIn('| x | 3 | 6.00 | 20.00 | 6.00 [1.03, 10.97] | '
                  '13.00 [10.52, 15.48] | – | 1.0 |', table)


class PaperAverageTest(tf.test.TestCase):

  def test_the_papers_shared_domain_average(self):
    domains = ['wmt_news', 'ted_iwslt14', 'php_docs', 'ubuntu_l10n',
               'multi30k_captions']
    self.assertEqual(nmt_report.shared_domains(domains), domains[:4])
    # (33.97 + 30.80 + 37.32 + 47.90) / 4 = 149.99 / 4.
    self.assertAlmostEqual(nmt_report.paper_shared_average(
        nmt_report.PAPER_SERVER['default'], domains), 37.4975)
    # DP_l: (29.28 + 30.88 + 36.33 + 45.74) / 4 = 142.23 / 4.
    self.assertAlmostEqual(nmt_report.paper_shared_average(
        nmt_report.PAPER_SERVER['dp_l'], domains), 35.5575)
    # Table 3 gives no cells: no shared average.
    self.assertIsNone(nmt_report.paper_shared_average(
        nmt_report.PAPER_CENTRALIZED['combined'], domains))
    # The paper's own averages are over its five cells, OpenSubtitles in,
    # to within its rounding (DP_g: 122.48 / 5 = 24.496, printed 24.49;
    # random: 152.14 / 5 = 30.428, printed 30.43).
    for mode, row in nmt_report.PAPER_SERVER.items():
      five = (row['WMT'] + row['OS'] + row['TED'] + row['PHP']
              + row['UB']) / 5
      self.assertAlmostEqual(five, row['avg'], delta=0.0061, msg=mode)
    summaries = {
        'fedavg_default': {'spec': {'kind': 'federated', 'mode': 'default',
                                    'rounds': 5}},
        'data_combination': {'spec': {'kind': 'combined'}}}
    self.assertEqual(nmt_report.paper_averages(summaries, domains),
                     {'fedavg_default': pytest.approx(37.4975)})


class OutputHealthTest(tf.test.TestCase):

  def test_loops_lengths_and_examples(self):
    self.assertTrue(nmt_report.has_loop('after 20000000000000 years'))
    self.assertTrue(nmt_report.has_loop('SkixtTETETETETE'))
    # Five repeats but 5 characters only; a number; plain text.
    self.assertFalse(nmt_report.has_loop('aaaaa'))
    self.assertFalse(nmt_report.has_loop('1,000,000 people'))
    self.assertFalse(nmt_report.has_loop('the cat sat on the mat'))
    rows = [
        # 10 characters against 10: fine.
        {'domain': 'news', 'source': 's1', 'reference': 'abcdefghij',
         'hypothesis': 'abcdefghij'},
        # 4 against 10 < 0.5: short.
        {'domain': 'news', 'source': 's2', 'reference': 'abcdefghij',
         'hypothesis': 'abcd'},
        # A loop of 12 zeros, 14 against 10: loop only.
        {'domain': 'news', 'source': 's3', 'reference': 'abcdefghij',
         'hypothesis': 'x 000000000000'},
        # 21 against 10 > 2: long.
        {'domain': 'php', 'source': 's4', 'reference': 'abcdefghij',
         'hypothesis': 'abcdefghij abcdefghij'},
    ]
    health = nmt_report.output_health(rows)
    self.assertEqual(health['sentences'], 4)
    self.assertEqual(health['loops'], 0.25)
    self.assertEqual(health['short'], 0.25)
    self.assertEqual(health['long'], 0.25)
    self.assertEqual(health['degenerate'], 0.75)
    # (10 + 4 + 14 + 21) / 40.
    self.assertEqual(health['length_ratio'], 49 / 40)
    self.assertEqual(nmt_report.reference_loops(rows), 0)
    # News: its loop (line 3) rather than its first short output (line 2).
    examples = nmt_report.degenerate_examples(rows)
    self.assertEqual([(e['domain'], e['line'], e['why']) for e in examples],
                     [('news', 3, ['loop']), ('php', 4, ['long'])])
    markdown = nmt_report.examples_markdown('x', 0, examples[:1])
    self.assertEqual(markdown, '- x, seed 0, news (predictions line 3; '
                     'loop):\n  source `s3`\n  reference `abcdefghij`\n'
                     '  ours `x 000000000000`')
