"""The benchmark's report beside the template-retrieval baseline.

`summarize_runs` with `baseline=`, on run directories written by hand
(`text2sql_fake_runs`) over the real test examples of two clients: the
baseline row, its alignment to the runs' examples (subsets, order,
lower-cased and anonymised questions) and what it refuses. The seeds,
intervals and differences of the report are `text2sql_summary_test`'s.
"""

import functools
import pathlib

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tff_nlp import data as data_lib
from tff_nlp import errors
from apps.text2sql import template_retrieval
from apps.text2sql import seed_runs as text2sql_seed_runs
from tff_nlp.metrics import text2sql as text2sql_metrics
from apps.text2sql import task as text2sql_task
from tests.apps.text2sql import text2sql_fake_runs

_FEDAVG_LORAR = ('federated', 'fedavg', 'lorar')
_first = text2sql_fake_runs.first_correct  # k correct of n: the first k


# --- The template-retrieval baseline on the runs' test examples. ---

_BASELINE_CLIENTS = ('restaurants', 'imdb')


@functools.cache
def _baseline():
  """The baseline's predictions, computed once per test process."""
  return text2sql_seed_runs.template_retrieval_predictions(
      text2sql_task.DataConfig(clients=_BASELINE_CLIENTS), data_dir=None)


# Seeded subsets in file order, as max_eval_examples draws them: one per
# seed, the same or different.
_SUBSET_0 = {'restaurants': [0, 5, 6, 40, 73], 'imdb': [1, 2, 25]}
_SUBSET_1 = {'restaurants': [1, 2, 3, 50, 60], 'imdb': [0, 10, 11]}


class Text2SqlSummaryBaselineExecutionTest(tf.test.TestCase,
                                           parameterized.TestCase):

  def test_baseline_row_on_full_splits(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    baseline = _baseline()
    real = text2sql_fake_runs.real_test_examples(_BASELINE_CLIENTS)
    sizes = {c: len(v) for c, v in real.items()}
    # The full splits: restaurants 74, imdb 26 (data/text2sql's PAPER_FOLDS).
    assert sizes == {'restaurants': 74, 'imdb': 26}
    per_seed = [{c: _first(s + 1, n) for c, n in sizes.items()}
                for s in range(2)]
    report = text2sql_fake_runs.summarize(tmp_path, {
        _FEDAVG_LORAR: text2sql_fake_runs.write_method(tmp_path, 'lorar', per_seed, real,
                                     execution={'restaurants': (3, 74)})},
                        baseline=baseline, expect_full_splits=True)
    # Template retrieval gets restaurants 72/74 and imdb 6/26 right
    # (apps/text2sql/template_retrieval.py, template_retrieval_test.py): MacroAvg
    # (72/74 + 6/26) / 2 = 60.19 %, MicroAvg 78/100; one test set for both
    # seeds, so no t interval.
    entry = report['baseline']
    assert entry['label'] == 'Template retrieval (no learning)'
    assert entry['num_test_sets'] == 1
    assert entry['test_sets'][0]['seeds'] == [0, 1]
    exact = entry['test']['exact_match']
    assert exact['per_client']['restaurants']['correct'] == [72]
    assert exact['per_client']['restaurants']['total'] == 74
    assert exact['per_client']['imdb']['correct'] == [6]
    assert exact['macro_avg'] == pytest.approx((72 / 74 + 6 / 26) / 2)
    assert exact['micro_avg'] == pytest.approx(0.78)
    assert exact['macro_avg_ci95'] is None
    assert exact['macro_avg_bootstrap_ci95'] is not None
    assert entry['test']['execution']['per_client']['restaurants'][
        'accuracy'] > 0
    assert report['test_sets']['full_splits'] is True
    for client, total in sizes.items():
      method_exact = report['methods']['fedavg-lorar']['test']['exact_match']
      assert method_exact['per_client'][client]['total'] == total
    table = (tmp_path / 'results.md').read_text()
    assert ('| Template retrieval (no learning) | ours | – | – | – | 97.30 | – '
            '| – | 23.08 | – | 60.19* | 78.00* |') in table
    assert 'whole test split' in table
    assert '| Template retrieval (no learning) | restaurants ' in table
    assert [m['label'] for m in report['table2']['methods']][-1] == (
        'Template retrieval (no learning)')

  # Each case one argument, a list of subsets (a bare list would be unpacked
  # into several arguments).
  @parameterized.parameters(([_SUBSET_0],), ([_SUBSET_0, _SUBSET_0],),
                            ([_SUBSET_0, _SUBSET_1],))
  def test_baseline_on_subsets(self, subsets):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    baseline = _baseline()
    real = text2sql_fake_runs.real_test_examples(_BASELINE_CLIENTS)
    runs = []
    for seed, keep in enumerate(subsets):
      examples = {c: [real[c][i] for i in keep[c]] for c in keep}
      run_dir = str(tmp_path / f'run-{seed}')
      text2sql_fake_runs.write_run(
          run_dir, seed, {c: _first(1, len(v)) for c, v in examples.items()},
          examples)
      runs.append((seed, run_dir))
    report = text2sql_fake_runs.summarize(tmp_path, {_FEDAVG_LORAR: runs}, baseline=baseline)
    pairs = template_retrieval.predict_clients(
        data_lib.load_clients(_BASELINE_CLIENTS))
    distinct = [k for i, k in enumerate(subsets) if k not in subsets[:i]]
    entry = report['baseline']
    assert entry['num_test_sets'] == len(distinct)
    for test_set, keep in zip(entry['test_sets'], distinct):
      assert test_set['seeds'] == [s for s, k in enumerate(subsets)
                                   if k == keep]
      for client, indices in keep.items():
        counts = test_set['test']['exact_match']['per_client'][client]
        assert counts['correct'] == sum(
            pairs[client][i][0] == pairs[client][i][1] for i in indices)
        assert counts['total'] == len(indices)
    exact = entry['test']['exact_match']
    # Bootstrap intervals need the same examples for every seed.
    assert (exact['macro_avg_bootstrap_ci95'] is None) == (len(distinct) > 1)
    assert (report['methods']['fedavg-lorar']['test']['exact_match'][
        'macro_avg_bootstrap_ci95'] is None) == (len(distinct) > 1)
    assert report['test_sets']['same_for_every_seed'] == (len(distinct) == 1)
    assert report['test_sets']['full_splits'] is False
    source = 'ours' if len(distinct) == 1 else f'ours (n={len(distinct)})'
    assert (f'| Template retrieval (no learning) | {source} |'
            in (tmp_path / 'results.md').read_text())

  def test_expect_full_splits_refuses_a_subset(self):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    baseline = _baseline()
    real = text2sql_fake_runs.real_test_examples(_BASELINE_CLIENTS)
    examples = dict(real, imdb=real['imdb'][:20])  # 20 of imdb's 26.
    runs = text2sql_fake_runs.write_method(
        tmp_path, 'lorar',
        [{c: _first(0, len(v)) for c, v in examples.items()}], examples)
    with self.assertRaisesRegex(
        errors.InputError,
        r"subset of the test split of \{'imdb': '20 of 26'\}"):
      text2sql_fake_runs.summarize(tmp_path, {_FEDAVG_LORAR: runs}, baseline=baseline,
                 expect_full_splits=True)
    # Not refused without expect_full_splits (max_eval_examples > 0).
    text2sql_fake_runs.summarize(tmp_path, {_FEDAVG_LORAR: runs}, baseline=baseline)

  @parameterized.parameters(*[
      lambda v: v[::-1],  # Full split, out of order.
      lambda v: [v[3], v[1]],  # Subset, out of order.
      lambda v: v[:2] + [('another question | x', 'SELECT 1 ;')],
  ])
  def test_baseline_refuses_other_examples(self, reorder):
    tmp_path = pathlib.Path(self.create_tempdir().full_path)
    baseline = _baseline()
    real = text2sql_fake_runs.real_test_examples(_BASELINE_CLIENTS)
    examples = dict(real, imdb=reorder(real['imdb']))
    runs = text2sql_fake_runs.write_method(
        tmp_path, 'lorar',
        [{c: _first(0, len(v)) for c, v in examples.items()}], examples)
    with self.assertRaisesRegex(errors.InputError,
                                "client 'imdb'.*do not align"):
      text2sql_fake_runs.summarize(tmp_path, {_FEDAVG_LORAR: runs}, baseline=baseline)

  def test_baseline_of_lower_cased_runs(self):
    # Runs with lowercase_sql are scored against lower-cased gold SQL: the
    # baseline's gold and predictions are lower-cased with it, which
    # changes none of its exact matches (restaurants 72 of 74 and imdb 6 of
    # 26 either way, the template_retrieval module docstring).
    plain = _baseline()
    lowered = text2sql_seed_runs.template_retrieval_predictions(
        text2sql_task.DataConfig(clients=_BASELINE_CLIENTS,
                                 lowercase_sql=True), data_dir=None)
    self.assertEqual(lowered.questions, plain.questions)
    for client in _BASELINE_CLIENTS:
      self.assertEqual(lowered.pairs[client], [
          (text2sql_metrics.lowercase_sql(p),
           text2sql_metrics.lowercase_sql(g))
          for p, g in plain.pairs[client]])
      self.assertEqual(sum(p == g for p, g in lowered.pairs[client]),
                       sum(p == g for p, g in plain.pairs[client]))
    self.assertEqual(
        [sum(p == g for p, g in lowered.pairs[c]) for c in _BASELINE_CLIENTS],
        [72, 6])
    # A lower-cased run's test examples align with it, in full or a subset.
    real = text2sql_fake_runs.real_test_examples(
        ('imdb',), schema_columns=False)['imdb']
    golds = [g for _, g in lowered.pairs['imdb']]
    examples = []
    for source, gold in real:
      question, separator, schema = source.partition(' | ')
      examples.append((question + separator + schema.lower(),
                       text2sql_metrics.lowercase_sql(gold)))
    for subset, expected in ((slice(None), list(range(len(golds)))),
                             (slice(3, 9, 2), [3, 5, 7])):
      self.assertEqual(text2sql_seed_runs.align_to_baseline(
          examples[subset], lowered.questions['imdb'], golds, where='imdb'),
                       expected)

  def test_align_to_baseline_anonymised_questions(self):
    # Without values, questions keep their variable names; gold SQL has
    # values either way (what predictions are scored against).
    real = text2sql_fake_runs.real_test_examples(
        ('imdb',), with_values=False, schema_columns=False)['imdb']
    anonymised = text2sql_seed_runs.template_retrieval_predictions(
        text2sql_task.DataConfig(clients=('imdb',), with_values=False),
        data_dir=None)
    golds = [g for _, g in anonymised.pairs['imdb']]
    examples = [(s, g) for (s, _), g in zip(real, golds)]
    assert text2sql_seed_runs.align_to_baseline(
        examples[3:9:2], anonymised.questions['imdb'], golds,
        where='imdb') == [3, 5, 7]
    assert np.all(np.diff(text2sql_seed_runs.align_to_baseline(
        examples, anonymised.questions['imdb'], golds, where='imdb')) == 1)


if __name__ == '__main__':
  tf.test.main()
