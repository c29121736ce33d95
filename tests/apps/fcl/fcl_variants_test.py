"""fcl_variants: the benchmark's settings side by side, from their reports."""

import json
import os
import subprocess
import sys

import tensorflow as tf

from tff_nlp import errors
from apps.fcl import report as fcl_report
from apps.fcl import variants as fcl_variants
from tff_nlp.metrics import intervals

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _method(acc, ci=None, seconds=100.0):
  return {'acc': acc, 'acc_ci95': ci, 'seconds': seconds, 'seeds': {}}


def _report(num_clients, construction, results, differences):
  return {
      'command': 'cmd',
      'data': {'num_clients': num_clients, 'tasks_per_client': 5,
               'construction': construction},
      'training': {'word_vectors': 'glove.txt', 'learning_rate': 1e-3,
                   'sparsity': 1e-4},
      'seeds': [0, 1, 2], 'results': results, 'differences': differences}


def _write(path, report):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(report, f)


# FedSeIT − no foreign on R8 of the main setting, as a report before the one
# verdict rule wrote it: a verdict per interval, the pairs' calling it.
_DIFFERENCE = {
    'seeds': [0, 1, 2], 'difference': -0.0111,
    'seed_ci95': [-0.0245, 0.0024], 'seed_verdict': 'no difference',
    'pair_bootstrap_ci95': [-0.02, -0.003],
    'pair_bootstrap_verdict': 'FedSeIT, no foreign branch (ablation) higher',
    'per_seed': [-0.0145, -0.0048, -0.0138]}


class FclVariantsExecutionTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.bench = self.create_tempdir().full_path
    main_results = {
        'r8': {'fedweit': _method(0.8804), 'fedseit': _method(
            0.8921, [0.8218, 0.9624], seconds=395.0),
               'fedseit_no_foreign': _method(0.9031), 'local': _method(0.5)},
        'tmn': {'fedseit': _method(0.8588)}}
    _write(os.path.join(self.bench, 'results.json'), _report(
        5, 'shared_labels', main_results,
        {'r8': {'fedseit - fedseit_no_foreign': _DIFFERENCE}}))
    _write(os.path.join(self.bench, 'clients10', 'results.json'), _report(
        10, 'shared_labels', {'trec6': {'fedseit': _method(0.7)}}, {}))

  def test_rows_in_percent_and_points_and_a_missing_variant_listed(self):
    summary = fcl_variants.summarize(self.bench, ['clients10', 'random'])
    self.assertEqual(list(summary['settings']),
                     ['main', 'clients10', 'random'])
    self.assertIsNone(summary['settings']['random'])
    self.assertEqual(summary['settings']['clients10']['clients'], 10)
    self.assertEqual([(r['setting'], r['dataset']) for r in summary['rows']],
                     [('main', 'r8'), ('main', 'tmn'), ('clients10', 'trec6')])
    r8 = summary['rows'][0]
    # Only the methods that transfer, in the report's order; Local is not.
    self.assertEqual(list(r8['acc']),
                     ['fedweit', 'fedseit', 'fedseit_no_foreign'])
    self.assertAllClose(r8['acc']['fedseit'], 89.21)
    self.assertAllClose(r8['acc_ci95']['fedseit'], [82.18, 96.24])
    self.assertIsNone(r8['acc_ci95']['fedweit'])
    comparison = r8['comparisons']['fedseit - fedseit_no_foreign']
    self.assertAllClose(comparison['difference'], -1.11)
    self.assertAllClose(comparison['seed_ci95'], [-2.45, 0.24])
    self.assertAllClose(comparison['per_seed'], [-1.45, -0.48, -1.38])
    # One verdict by the one rule: the seeds' interval holds 0. The old
    # per-interval verdicts are dropped, not shown.
    self.assertEqual(comparison['verdict'], 'no difference')
    self.assertNotIn('seed_verdict', comparison)
    self.assertNotIn('pair_bootstrap_verdict', comparison)

    table = fcl_variants.markdown(summary)
    self.assertIn('| main | 5 × 5 | shared_labels | glove.txt | 0.001 | '
                  '0.0001 | 0, 1, 2 |', table)
    self.assertIn('| random | not run yet |', table)
    self.assertIn('| main | r8 | 88.04 | 89.21 | – | 90.31 | 395 |', table)
    self.assertIn('| main | r8 | FedSeIT − FedSeIT, no foreign branch '
                  '(ablation) | -1.11 | [-2.45, 0.24] | [-2.00, -0.30] | '
                  'no difference |', table)
    self.assertNotIn('(ablation) higher', table)
    self.assertEqual(table.count(intervals.VERDICT_RULE), 1)
    # The page opens with what the model saw; these reports record no
    # inputs or caps, so the page says so rather than guessing.
    self.assertLess(table.index('## What the model saw'),
                    table.index('## Settings'))
    self.assertIn('[The verdict rule](../README.md#the-verdict-rule)', table)
    self.assertIn('(cap: not recorded)', table)
    self.assertIn('| main | r8 | not recorded | not recorded | not recorded |',
                  table)

  def test_what_the_model_saw_from_the_reports_inputs(self):
    path = os.path.join(self.bench, 'results.json')
    with open(path) as f:
      report = json.load(f)
    report['data'].update(max_train_per_task=400, max_test_per_task=300,
                          max_length=64)
    report['training'].update(rounds_per_task=5, local_epochs=3)
    seed = {'train_documents': [[33, 351]], 'test_documents': [[200, 300]],
            'labels': [[4, 4]], 'train_documents_cut': 100,
            'test_documents_cut': 250, 'test_documents_no_known_word': 0}
    report['inputs'] = {'r8': {'0': seed, '1': seed}}
    _write(path, report)
    summary = fcl_variants.summarize(self.bench, ['clients10'])
    self.assertEqual(summary['rows'][0]['inputs']['test_documents'], 1000)
    self.assertIsNone(summary['rows'][1]['inputs'])  # tmn: not recorded
    table = fcl_variants.markdown(summary)
    self.assertIn('(cap: 400 (main), not recorded (clients10))', table)
    self.assertIn('every document is cut at a length per setting, in '
                  'tokens: 64 (main), not recorded (clients10) (it keeps',
                  table)
    self.assertIn('| main | r8 | 33–351 (mean 192) | 500 of 1,000 (50.0 %) | '
                  '200 of 768 (26.0 %) |', table)

  def test_difference_cells_in_points_and_with_one_seed(self):
    # In fractions: -0.0111 -> -1.11 points, and so on; one verdict.
    comparison = dict(_DIFFERENCE, verdict='no difference')
    self.assertEqual(fcl_report.difference_cells(comparison), [
        '-1.11', '[-2.45, 0.24]', '[-2.00, -0.30]', 'no difference'])
    one_seed = dict(comparison, seed_ci95=None, difference=0.006)
    self.assertEqual(fcl_report.difference_cells(one_seed)[:2],
                     ['+0.60', 'n=1'])

  def test_a_report_that_is_not_train_fcls_names_its_file(self):
    path = os.path.join(self.bench, 'random', 'results.json')
    _write(path, {'results': {}})
    with self.assertRaisesRegex(errors.InputError,
                                f'{path}: not a results.json of train_fcl'):
      fcl_variants.summarize(self.bench, ['random'])

  def test_binary_writes_both_files(self):
    output_dir = self.create_tempdir().full_path
    subprocess.run(
        [sys.executable, '-m', 'apps.fcl.bin.fcl_variants',
         f'--bench_dir={self.bench}', '--variants=clients10',
         f'--report_dir={output_dir}'], cwd=_REPO, check=True,
        capture_output=True, timeout=600)
    summary = fcl_variants.summarize(self.bench, ['clients10'])
    with open(os.path.join(output_dir, fcl_variants.MARKDOWN_FILE)) as f:
      self.assertEqual(f.read(), fcl_variants.markdown(summary))
    with open(os.path.join(output_dir, fcl_variants.JSON_FILE)) as f:
      self.assertEqual(json.load(f), json.loads(json.dumps(summary)))


if __name__ == '__main__':
  tf.test.main()
