"""Tests of the Table 2 report: method keys, paper numbers, layout."""

import json
import math
import os
import re

from absl.testing import parameterized
import tensorflow as tf


from tff_nlp import aggregators
from tff_nlp import data
from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals
from tff_nlp.metrics import text2sql
from apps.text2sql import report

_FINETUNE = ('finetune',)
_BASELINE = report.TEMPLATE_RETRIEVAL
_FEDOPT_LORAR = ('federated', 'fedopt', 'lorar')
_FEDAVG_UNIFORM = ('federated', 'fedavg', 'uniform')

# Finetuning on all eight clients, correct/total in `CLIENTS` order:
# 1/2, 1/4, 3/4, 1/1, 0/1, 1/3, 2/3, 1/5 = 50, 25, 75, 100, 0, 33.33, 66.67,
# 20 %. MacroAvg (0.5 + 0.25 + 0.75 + 1 + 0 + 1/3 + 2/3 + 0.2) / 8 = 3.7 / 8
# = 46.25 %; MicroAvg 10/23 = 43.48 %.
_ALL_CLIENTS = text2sql.ClientAccuracies(
    clients=report.CLIENTS, correct=(1, 1, 3, 1, 0, 1, 2, 1),
    totals=(2, 4, 4, 1, 1, 3, 3, 5))
# FedOPT + Lorar on two clients only (atis 1/2, advising 3/4): MacroAvg
# 62.50 %, MicroAvg 4/6 = 66.67 %, both marked partial.
_TWO_CLIENTS = text2sql.ClientAccuracies(
    clients=('atis', 'advising'), correct=(1, 3), totals=(2, 4))
_HEADER = (
    '| Method | Source | advising | atis | geography | restaurants | scholar '
    '| academic | imdb | yelp | MacroAvg | MicroAvg |\n'
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n')


class MethodKeyExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_table2_labels(self):
    self.assertEqual(
        [report.method_label(m) for m in report.TABLE2_METHODS],
        ['Finetuning', 'Centralized', 'FedOPT', 'FedOPT + Lorar', 'FedAvg',
         'FedAvg + Lorar', 'FedProx', 'FedProx + Lorar', 'FedOPT + uniform',
         'FedOPT + loss_reduction'])

  def test_baseline_label(self):
    self.assertEqual(report.method_label(_BASELINE),
                     'Template retrieval (no learning)')
    self.assertNotIn(_BASELINE, report.PAPER_RESULTS)

  def test_slugs(self):
    self.assertEqual(
        [report.method_slug(m) for m in (_FINETUNE, _FEDOPT_LORAR,
                                         _BASELINE)],
        ['finetune', 'fedopt-lorar', 'baseline-template_retrieval'])

  def test_weightings_are_the_library_ones(self):
    self.assertCountEqual(report.WEIGHTINGS,
                          [w.value for w in aggregators.Weighting])

  @parameterized.named_parameters(
      ('unknown_paradigm', ('local',)),
      ('extra_part', ('finetune', 'lorar')),
      ('unknown_algorithm', ('federated', 'fedsgd', 'lorar')),
      ('unknown_weighting', ('federated', 'fedavg', 'equal')),
      ('no_weighting', ('federated', 'fedavg')),
      ('unknown_baseline', ('baseline', 'oracle')),
      ('baseline_without_name', ('baseline',)),
  )
  def test_invalid_key(self, method):
    with self.assertRaisesRegex(ValueError, 'Unknown method'):
      report.method_label(method)


class PaperResultsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_one_entry_per_table_row(self):
    self.assertCountEqual(report.PAPER_RESULTS, report.TABLE2_METHODS)
    for paper in report.PAPER_RESULTS.values():
      self.assertEqual(paper.per_client, {})

  def test_numbers_match_lorar_md(self):
    path = os.path.join(data.find_data_dir(), os.pardir, 'docs', 'lorar.md')
    if not os.path.exists(path):
      self.skipTest(f'{path} not found.')
    with open(path) as f:
      text = f.read()
    # "| FedOPT + Lorar | 62.55 | 69.39 |" rows of the headline table, and
    # "`uniform` 61.04 / 68.13" for FedOPT's other weightings.
    numbers = {
        label: (float(macro), float(micro)) for label, macro, micro in
        re.findall(r'^\| ([A-Za-z +]+) \| (\d+\.\d+) \| (\d+\.\d+) \|$', text,
                   re.MULTILINE)}
    numbers.update(
        (f'FedOPT + {weighting}', (float(macro), float(micro)))
        for weighting, macro, micro in
        re.findall(r'`(\w+)` (\d+\.\d+) / (\d+\.\d+)', text))
    self.assertEqual(
        numbers,
        {report.method_label(m): (p.macro_avg, p.micro_avg)
         for m, p in report.PAPER_RESULTS.items()})


class Table2MarkdownExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_crafted_table(self):
    table = report.table2_markdown(
        {_FINETUNE: _ALL_CLIENTS, _FEDOPT_LORAR: _TWO_CLIENTS},
        methods=[_FINETUNE, _FEDOPT_LORAR, _FEDAVG_UNIFORM])
    # FedAvg + uniform: no run and no paper numbers, so one empty row.
    self.assertEqual(
        table,
        _HEADER
        + '| Finetuning | ours | 50.00 | 25.00 | 75.00 | 100.00 | 0.00 | '
        '33.33 | 66.67 | 20.00 | 46.25 | 43.48 |\n'
        '| Finetuning | paper | – | – | – | – | – | – | – | – | 62.78 | '
        '71.47 |\n'
        '| FedOPT + Lorar | ours | 75.00 | 50.00 | – | – | – | – | – | – | '
        '62.50* | 66.67* |\n'
        '| FedOPT + Lorar | paper | – | – | – | – | – | – | – | – | 62.55 | '
        '69.39 |\n'
        '| FedAvg + uniform | ours | – | – | – | – | – | – | – | – | – | – |')

  def test_paper_per_client_numbers(self):
    # Made-up paper numbers, to show where per-client ones would go.
    paper = {_FINETUNE: report.PaperResult(
        macro_avg=1.0, micro_avg=2.5, per_client={'imdb': 3.456})}
    self.assertEqual(
        report.table2_markdown({}, methods=[_FINETUNE], paper=paper),
        _HEADER
        + '| Finetuning | ours | – | – | – | – | – | – | – | – | – | – |\n'
        '| Finetuning | paper | – | – | – | – | – | – | 3.46 | – | 1.00 | '
        '2.50 |')

  def test_default_rows(self):
    table = report.table2_markdown({})
    rows = [line.split(' | ')[:2] for line in table.splitlines()[2:]]
    # Every method of Table 2 has the paper's row under ours.
    self.assertEqual(
        rows,
        [[f'| {report.method_label(m)}', source]
         for m in report.TABLE2_METHODS for source in ('ours', 'paper')])

  @parameterized.named_parameters(
      ('method_not_in_table', {_FEDAVG_UNIFORM: _TWO_CLIENTS},
       'not in the table'),
      ('unknown_client', {_FINETUNE: text2sql.ClientAccuracies(
          clients=('spider',), correct=(1,), totals=(1,))},
       r"unknown clients \['spider'\]"),
      ('invalid_key', {('federated', 'fedavg'): _TWO_CLIENTS},
       'Unknown method'),
      ('seeds_on_other_clients', {_FINETUNE: [_TWO_CLIENTS, _ALL_CLIENTS]},
       'Every seed needs the same clients'),
      ('no_seed', {_FINETUNE: []}, 'at least one seed'),
  )
  def test_invalid_results(self, results, message):
    for function in (report.table2_markdown, report.table2_json):
      with self.assertRaisesRegex(ValueError, message):
        function(results)


# FedOPT + Lorar with three seeds on atis (of 4) and advising (of 2):
# atis 1/4, 2/4, 3/4 = 0.25, 0.5, 0.75 (mean 0.5, sample sd 0.25);
# advising 1/2, 1/2, 1/2 (mean 0.5, sd 0); MacroAvg 0.375, 0.5, 0.625
# (mean 0.5, sd 0.125); MicroAvg 2/6, 3/6, 4/6 (mean 0.5, sd 1/6).
# t_{2,0.975} = 0.95 / sqrt(0.04875) = 4.302653, and the half-widths
# t sd / sqrt(3): atis 0.621034 (62.10 points), MacroAvg 0.310517 (31.05),
# MicroAvg 0.414023 (41.40), advising 0.
_THREE_SEEDS = [text2sql.ClientAccuracies(
    clients=('atis', 'advising'), correct=(k, 1), totals=(4, 2))
                for k in (1, 2, 3)]
_T_2 = 0.95 / math.sqrt(0.04875)


class SeedsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_summarize_seeds(self):
    summary = report.summarize_seeds(_THREE_SEEDS)
    self.assertEqual(summary.num_seeds, 3)
    self.assertEqual(summary.clients, ('atis', 'advising'))
    for interval, mean, sd in (
        (summary.per_client['atis'], 0.5, 0.25),
        (summary.per_client['advising'], 0.5, 0.0),
        (summary.macro, 0.5, 0.125),
        (summary.micro, 0.5, 1 / 6)):
      half = _T_2 * sd / math.sqrt(3)
      self.assertAlmostEqual(interval.estimate, mean)
      self.assertAlmostEqual(interval.low, mean - half)
      self.assertAlmostEqual(interval.high, mean + half)

  def test_markdown_with_seeds(self):
    table = report.table2_markdown(
        {_FEDOPT_LORAR: _THREE_SEEDS, _FINETUNE: [_ALL_CLIENTS],
         _BASELINE: _TWO_CLIENTS},
        methods=[_FINETUNE, _FEDOPT_LORAR, _BASELINE])
    lines = table.splitlines()
    # One seed: the means alone (those of `test_crafted_table`).
    self.assertEqual(
        lines[2],
        '| Finetuning | ours (n=1) | 50.00 | 25.00 | 75.00 | 100.00 | 0.00 | '
        '33.33 | 66.67 | 20.00 | 46.25 | 43.48 |')
    self.assertEqual(
        lines[4],
        '| FedOPT + Lorar | ours (n=3) | 50.00 ± 0.00 | 50.00 ± 62.10 | – | '
        '– | – | – | – | – | 50.00 ± 31.05* | 50.00 ± 41.40* |')
    self.assertEqual(lines[5].split(' | ')[:2], ['| FedOPT + Lorar', 'paper'])
    # The baseline: one result, no paper row, the last line.
    self.assertEqual(
        lines[6:],
        ['| Template retrieval (no learning) | ours | 75.00 | 50.00 | – | – '
         '| – | – | – | – | 62.50* | 66.67* |'])

  def test_json_with_seeds(self):
    content = report.table2_json({_FEDOPT_LORAR: _THREE_SEEDS},
                                 methods=[_FEDOPT_LORAR])
    ours = json.loads(json.dumps(content))['methods'][0]['ours']
    self.assertEqual(ours['num_seeds'], 3)
    self.assertLen(ours['seeds'], 3)
    self.assertEqual(ours['seeds'][0]['per_client']['atis'],
                     {'correct': 1, 'total': 4, 'accuracy': 0.25})
    half = _T_2 * 0.125 / math.sqrt(3)
    self.assertAlmostEqual(ours['macro_avg'], 0.5)
    self.assertSequenceAlmostEqual(ours['macro_avg_ci95'],
                                   [0.5 - half, 0.5 + half])
    self.assertEqual(ours['per_client']['advising'],
                     {'accuracy': 0.5, 'ci95': [0.5, 0.5]})
    one = report.table2_json({_FEDOPT_LORAR: _THREE_SEEDS[:1]},
                             methods=[_FEDOPT_LORAR])['methods'][0]['ours']
    self.assertIsNone(one['macro_avg_ci95'])
    self.assertIsNone(one['per_client']['atis']['ci95'])

  @parameterized.named_parameters(
      ('one_seed', (0.25, math.nan, math.nan), '25.00'),
      ('interval', (0.5, 0.25, 0.75), '50.00 ± 25.00'),
  )
  def test_format_interval(self, interval, text):
    self.assertEqual(report.format_interval(intervals.Interval(*interval)),
                     text)


class Table2JsonExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_crafted_json(self):
    content = report.table2_json({_FEDOPT_LORAR: _TWO_CLIENTS},
                                 methods=[_FEDOPT_LORAR, _FEDAVG_UNIFORM])
    self.assertEqual(json.loads(json.dumps(content)), {
        'clients': list(report.CLIENTS),
        'methods': [
            {'key': ['federated', 'fedopt', 'lorar'],
             'label': 'FedOPT + Lorar',
             'ours': {
                 'per_client': {
                     'atis': {'correct': 1, 'total': 2, 'accuracy': 0.5},
                     'advising': {'correct': 3, 'total': 4, 'accuracy': 0.75},
                 },
                 'macro_avg': 0.625,
                 'micro_avg': 4 / 6,
             },
             'paper': {'macro_avg_percent': 62.55, 'micro_avg_percent': 69.39,
                       'per_client_percent': {}}},
            {'key': ['federated', 'fedavg', 'uniform'],
             'label': 'FedAvg + uniform', 'ours': None, 'paper': None},
        ],
    })


class RunMarkdownExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_one_run(self):
    # geography: 2 of 4 right, a database, 1 of its 4 gold queries fails,
    # 3 of 4 execute to the gold result; imdb: 1 of 2, no database.
    outcomes = {'geography': [[1, 0, 1, 0]], 'imdb': [[0, 1]]}
    evaluation = text2sql.Text2SqlEvaluation(
        exact_match=text2sql.ClientAccuracies(('geography', 'imdb'), (2, 1),
                                              (4, 2)),
        execution=text2sql.ClientAccuracies(('geography',), (3,), (4,)),
        gold_errors={'geography': 1})
    bootstrap = bootstrap_lib.bootstrap_accuracy(outcomes, num_replicates=200)
    text = report.run_markdown(
        ('federated', 'fedavg', 'lorar'), evaluation, bootstrap=bootstrap,
        token_accuracy={'geography': 0.875, 'imdb': 0.5},
        best_rounds={'federated': 7})
    self.assertStartsWith(text, '# Text-to-SQL: FedAvg + Lorar\n')
    geography = bootstrap.per_client['geography']
    self.assertIn(
        f'| geography | 4 | 50.00 [{100 * geography.low:.2f}, '
        f'{100 * geography.high:.2f}] | 75.00 | 3 of 4 | 87.50 |', text)
    self.assertIn('| imdb | 2 | 50.00 [', text)
    self.assertIn('| – (no database) | – | 50.00 |', text)
    # MacroAvg (50 + 50) / 2, MicroAvg 3 / 6.
    self.assertIn('MacroAvg 50.00 [', text)
    self.assertIn('MicroAvg 50.00 [', text)
    self.assertIn('| FedAvg + Lorar | ours |', text)
    self.assertIn('| FedAvg + Lorar | paper |', text)
    self.assertEndsWith(
        text, 'Selected models (best merged-dev exact match): federated: '
        'round 7.\n')

  def test_units_without_evaluation(self):
    text = report.run_markdown(
        ('finetune',),
        text2sql.Text2SqlEvaluation(
            exact_match=text2sql.ClientAccuracies(('yelp',), (0,), (2,)),
            execution=None, gold_errors={}),
        bootstrap=bootstrap_lib.bootstrap_accuracy({'yelp': [[0, 0]]},
                                               num_replicates=50),
        token_accuracy={}, best_rounds={'yelp': None})
    self.assertIn('| yelp | 2 | 0.00 [0.00, 0.00] | – (no database) | – | – |',
                  text)
    self.assertIn('yelp: none (never evaluated).', text)


if __name__ == '__main__':
  tf.test.main()
