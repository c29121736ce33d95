"""The partial-model comparison over seeds: means, intervals, paired differences.

`run_seeds` runs `sparse_tags.run_sparse_tags` once per seed, each in its own
`<output_dir>/seed_<s>` (so each resumes on its own); seed s both splits the
clients and orders their data. Then, in `seeds.json` and `seeds.md`, from
the seeds' tidy records (`records`) through `apps.common.report_engine`:
each method's mean over seeds of every final test metric with its Student-t
95% interval (`summarize_method`), and each of `COMPARISONS`, precision@1 of
A - B (`compare`): the t interval of the per-seed differences (seeds are
paired: the same split and client data per seed), the paired bootstrap over
the test examples' 0/1 top-1 outcomes, all seeds together (one test set),
and one verdict from both (`intervals.VERDICT_RULE`, quoted in the reports).

`compare_runs` makes the same comparison of one method between two such
runs that differ in their keys (e.g. 200 one-row keys against 50 keys of 4
rows), seed by seed; its report opens with what both runs saw
(`tag_inputs`, as `seeds.md` does). `rewrite_reports` writes both reports
again from their JSON (verdicts re-derived from the stored intervals),
without the seeds' run folders.
"""

import collections
from collections.abc import Mapping, Sequence
import dataclasses
import json
import os
from typing import Any, Optional

from absl import logging
import numpy as np

from tff_nlp import errors
from tff_nlp import training as training_lib
from apps.common import report_engine as engine
from apps.partial_models import tag_experiment as sparse_tags
from apps.partial_models import tag_inputs
from tff_nlp.metrics import bootstrap as bootstrap_lib
from tff_nlp.metrics import intervals

SUMMARY_FILE = 'seeds.json'
SUMMARY_TABLE_FILE = 'seeds.md'
SUMMARY_PLOT_FILE = 'seeds_precision_at_1.png'
COMPARISON_FILE = 'comparison.json'
COMPARISON_TABLE_FILE = 'comparison.md'
# Each test example's 0/1 top-1 outcome, whose mean is precision@1.
HITS = 'hits_at_1'
# The paper-style questions: does selecting rows cost accuracy against the
# whole model, and does dividing by the clients per row help? Precision@1
# from the outcomes, one test set for every seed.
COMPARISONS = tuple(engine.Comparison(a, b, HITS) for a, b in (
    (sparse_tags.SPARSE, sparse_tags.DENSE),
    (sparse_tags.SPARSE_PER_ROW, sparse_tags.DENSE),
    (sparse_tags.SPARSE_PER_ROW, sparse_tags.SPARSE)))
# Seed-averaged numbers of a method's results besides its final metrics.
MEAN_KEYS = ('bytes_down_per_client', 'bytes_up_per_client',
             'round_seconds_median', 'rounds_seconds',
             'dropped_tokens_per_round')

PerSeed = Mapping[int, Mapping[str, Any]]


def seed_dir(output_dir: str, seed: int) -> str:
  return os.path.join(output_dir, f'seed_{seed}')


def _hits(result: Mapping[str, Any], where: str) -> np.ndarray:
  """The 0/1 top-1 outcomes, checked against the recorded precision@1."""
  hits = np.asarray(result['test_hits_at_1'], np.float64)
  recorded = result['final'].get('precision_at_1')
  if recorded is not None and abs(hits.mean() - recorded) > 1e-9:
    raise errors.InputError(
        f'{where}: the test outcomes give precision@1 {hits.mean():.6f}, '
        f'the run recorded {recorded:.6f}; they are not of one model.')
  return hits


def records(method: str, per_seed: PerSeed) -> list[engine.Record]:
  """The tidy records of one method's seeds (`sparse_tags.run_method`'s
  results): its final metrics and `MEAN_KEYS` numbers, and each test
  example's top-1 outcome (`HITS`, when recorded)."""
  rows = []
  for seed, result in per_seed.items():
    rows += [engine.Record(method, seed, metric, value)
             for metric, value in result['final'].items()]
    rows += [engine.Record(method, seed, key, result[key])
             for key in MEAN_KEYS if key in result]
    if 'test_hits_at_1' in result:
      rows += [engine.Record(method, seed, HITS, hit, example=i)
               for i, hit in enumerate(_hits(result, f'{method}, seed {seed}'))]
  return rows


def summarize_method(per_seed: PerSeed) -> collections.OrderedDict:
  """One method over its seeds.

  Args:
    per_seed: seed -> the method's results in that seed's run
      (`sparse_tags.run_method`).

  Returns:
    `label`, `seeds` (the per-seed final metrics), `final` (metric -> mean
    over seeds), `final_ci95` (metric -> [low, high], None with one seed),
    the seed-mean of every `MEAN_KEYS` number, and `precision_at_1_curve`
    (per evaluated round: mean, low and high over seeds).
  """
  if not per_seed:
    raise ValueError('No seed to summarize.')
  runs = list(per_seed.values())
  means = engine.method_intervals(engine.Table(records('m', per_seed)), 'm')
  summary = collections.OrderedDict(
      label=runs[0]['label'],
      seeds=collections.OrderedDict(
          (str(s), r['final']) for s, r in per_seed.items()),
      final=collections.OrderedDict(
          (metric, means[metric].estimate) for metric in runs[0]['final']),
      final_ci95=collections.OrderedDict(
          (metric, means[metric].bounds()) for metric in runs[0]['final']))
  summary.update((key, means[key].estimate) for key in MEAN_KEYS
                 if key in means)
  # Precision@1 by round over the seeds (mean, lowest, highest), for the
  # plot; the rounds every seed evaluated.
  curves = [{p['round']: p['precision_at_1'] for p in r['eval_curve']
             if 'precision_at_1' in p} for r in runs]
  rounds = sorted(set.intersection(*(set(c) for c in curves)))
  summary['precision_at_1_curve'] = [
      collections.OrderedDict(
          round=i, mean=float(np.mean([c[i] for c in curves])),
          low=min(c[i] for c in curves), high=max(c[i] for c in curves))
      for i in rounds]
  return summary


def compare(a: PerSeed, b: PerSeed, *, names: tuple[str, str],
            num_replicates: int = bootstrap_lib.DEFAULT_NUM_REPLICATES,
            seed: int = 0) -> collections.OrderedDict:
  """Precision@1 of A - B over the seeds both ran (`engine.compare`).

  Args:
    a: seed -> method A's results (`sparse_tags.run_method`).
    b: seed -> method B's, on the same test set.
    names: (A, B), for errors and verdicts.
    num_replicates: Replicates of the paired bootstrap.
    seed: Its seed.

  Returns:
    `a`, `b`, `seeds` (the common ones), `difference` (mean over seeds of
    P@1(A) - P@1(B)), `per_seed`, `seed_ci95` (Student-t over the per-seed
    differences; None with one seed), `bootstrap_ci95` (the paired
    bootstrap over test examples, seeds held fixed) and `verdict`.

  Raises:
    ValueError: If A and B share no seed.
    InputError: If their test outcomes differ in length or do not give
      their recorded precision@1.
  """
  table = engine.Table(records(names[0], a) + records(names[1], b))
  return engine.compare(table, engine.Comparison(*names, HITS),
                        num_replicates=num_replicates, seed=seed).to_json()


def reverdict(comparison: Mapping[str, Any]) -> collections.OrderedDict:
  """A stored `compare` result with its verdict re-derived from its intervals.

  Reports written before the one verdict rule carried a verdict per interval
  (`seed_verdict`, `bootstrap_verdict`); those are dropped, the intervals
  kept, and `verdict` is `intervals.comparison_verdict` of them.
  """
  result = collections.OrderedDict(
      (k, v) for k, v in comparison.items()
      if k not in ('seed_verdict', 'bootstrap_verdict', 'verdict'))
  result['verdict'] = intervals.comparison_verdict(
      comparison['seed_ci95'], comparison['bootstrap_ci95'],
      comparison['a'], comparison['b'])
  return result


def _by_method(per_seed_runs: PerSeed) -> dict[str, dict[int, Any]]:
  methods = collections.OrderedDict()
  for seed, run in per_seed_runs.items():
    for method, result in run['methods'].items():
      methods.setdefault(method, collections.OrderedDict())[seed] = result
  return methods


def summarize(per_seed_runs: PerSeed) -> collections.OrderedDict:
  """Every method and every `COMPARISONS` pair present, over the seeds.

  Args:
    per_seed_runs: seed -> that seed's `run_sparse_tags` results.

  Returns:
    `seeds`, `task` (the first seed's), `methods` (method ->
    `summarize_method`) and `comparisons` ('A - B' -> `compare`).
  """
  by_method = _by_method(per_seed_runs)
  table = engine.Table(r for m, runs in by_method.items()
                       for r in records(m, runs))
  return collections.OrderedDict(
      seeds=list(per_seed_runs),
      task=next(iter(per_seed_runs.values()))['task'],
      methods=collections.OrderedDict(
          (m, summarize_method(runs)) for m, runs in by_method.items()),
      comparisons=collections.OrderedDict(
          (key, difference.to_json()) for key, difference
          in engine.compare_all(table, COMPARISONS).items()))


def _pct(value: Optional[float]) -> str:
  return '–' if value is None else f'{100 * value:.2f}'


def comparisons_table(comparisons: Mapping[str, Any]) -> str:
  """Markdown: one row per A - B of precision@1 (points), one verdict each."""
  lines = ['| A − B (precision@1) | seeds | difference (points) | 95% over '
           'seeds | 95% paired bootstrap over test examples | verdict |',
           '|---|---:|---:|---|---|---|']
  for name, c in comparisons.items():
    lines.append(engine.markdown_row([name, str(len(c['seeds']))] + (
        engine.difference_cells(c['difference'], c['seed_ci95'],
                                c['bootstrap_ci95'], c['verdict']))))
  return '\n'.join(lines)


def summary_table(summary: Mapping[str, Any], k_values: Sequence[int]) -> str:
  """Markdown: methods (means and 95% intervals over seeds), comparisons."""
  header = ['Method'] + [f'{m}@{k}' for k in k_values for m in ('P', 'R')]
  header += ['P@1 95% over seeds', 'KiB down / client / round',
             'KiB up / client / round', 'round s (median)',
             'training min / run']
  lines = ['| ' + ' | '.join(header) + ' |',
           '|---|' + '---:|' * (len(header) - 1)]
  for method in summary['methods'].values():
    cells = [method['label']]
    for k in k_values:
      for metric in ('precision', 'recall'):
        cells.append(_pct(method['final'].get(f'{metric}_at_{k}')))
    cells += [engine.interval_cell(method['final_ci95'].get('precision_at_1')),
              f'{method["bytes_down_per_client"] / 1024:.1f}',
              f'{method["bytes_up_per_client"] / 1024:.1f}',
              f'{method["round_seconds_median"]:.2f}',
              f'{method.get("rounds_seconds", float("nan")) / 60:.1f}']
    lines.append(engine.markdown_row(cells))
  return ('\n'.join(lines) + '\n\n'
          + comparisons_table(summary['comparisons']))


def write_summary_report(summary: Mapping[str, Any], output_dir: str) -> None:
  """`seeds.json` and `seeds.md` of a `summarize` result."""
  training_lib.write_json(os.path.join(output_dir, SUMMARY_FILE), summary)
  seeds = ', '.join(map(str, summary['seeds']))
  dataset = summary.get('setup', {}).get('dataset', 'the tag task')
  k_values = summary.get('setup', {}).get('k_values') or [1]
  with open(os.path.join(output_dir, SUMMARY_TABLE_FILE), 'w',
            encoding='utf-8') as f:
    f.write(f'# Partial models on {dataset} over seeds {seeds}\n\n'
            f'Means over seeds of the test metrics (%) after the last round; '
            f'seed s splits the clients and orders their data. Each seed\'s '
            f'own report is in `seed_<s>/`. Sizes are binary (1 KiB = 1,024 '
            f'bytes).\n\n' + tag_inputs.what_the_model_saw(summary) + '\n\n'
            + summary_table(summary, k_values) + '\n\n'
            + engine.verdict_note() + '\n')


def write_plot(summary: Mapping[str, Any], path: str) -> None:
  """Precision@1 by round per method: the seed mean, shaded lowest-highest."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  figure, axis = plt.subplots(figsize=(6, 4))
  for method in summary['methods'].values():
    curve = method['precision_at_1_curve']
    rounds = [p['round'] for p in curve]
    line, = axis.plot(rounds, [100 * p['mean'] for p in curve], marker='o',
                      label=method['label'])
    axis.fill_between(rounds, [100 * p['low'] for p in curve],
                      [100 * p['high'] for p in curve],
                      color=line.get_color(), alpha=0.2)
  axis.set_xlabel('round')
  axis.set_ylabel(f'test precision@1 (%), {len(summary["seeds"])} seeds')
  axis.legend()
  axis.grid(alpha=0.3)
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)


def _read_seed(output_dir: str, seed: int) -> Optional[dict[str, Any]]:
  path = os.path.join(seed_dir(output_dir, seed), sparse_tags.RESULTS_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _check_seeds(seeds: Sequence[int]) -> None:
  if not seeds:
    raise errors.InputError('--seeds: no seed given.')
  if len(set(seeds)) != len(seeds):
    raise errors.InputError(f'--seeds: {list(seeds)} repeats a seed.')


def run_seeds(*, data_dir: Optional[str], output_dir: str,
              data: sparse_tags.TagDataConfig,
              training: sparse_tags.TagTrainingConfig,
              loop: training_lib.LoopConfig, seeds: Sequence[int],
              methods: Sequence[str] = sparse_tags.METHODS,
              report_only: bool = False,
              restart: bool = False) -> collections.OrderedDict:
  """`run_sparse_tags` once per seed, then the summary over seeds (written
  and its table printed).

  Args:
    data_dir: The `shared/data` folder; None finds it.
    output_dir: Holds `seed_<s>/` (one run each, resumable) and the summary.
    data: Data and vocabularies.
    training: Client training and evaluation.
    loop: Rounds and cadence; its seed is replaced by each of `seeds`.
    seeds: Distinct seeds, run in this order.
    methods: A subset of `sparse_tags.METHODS`, in table order.
    report_only: Train nothing: summarize the seeds already finished (the
      others are logged as missing).
    restart: Start every seed's run over (`run_sparse_tags`'s `restart`).

  Returns:
    The summary written to `seeds.json` (`summarize`).

  Raises:
    InputError: On no or repeated seeds, or no finished seed to report.
  """
  _check_seeds(seeds)
  per_seed = collections.OrderedDict()
  for seed in seeds:
    if report_only:
      run = _read_seed(output_dir, seed)
      if run is None:
        logging.warning('sparse_tags: seed %d has not finished; left out.',
                        seed)
        continue
      per_seed[seed] = run
    else:
      per_seed[seed] = sparse_tags.run_sparse_tags(
          data_dir=data_dir, output_dir=seed_dir(output_dir, seed), data=data,
          training=training, loop=dataclasses.replace(loop, seed=seed),
          methods=methods, restart=restart)
  if not per_seed:
    raise errors.InputError(f'{output_dir}: no seed of {list(seeds)} has '
                            f'finished.')
  summary = summarize(per_seed)
  summary['setup'] = tag_inputs.setup_record(data, training, loop)
  write_summary_report(summary, output_dir)
  write_plot(summary, os.path.join(output_dir, SUMMARY_PLOT_FILE))
  print(f'Means over seeds {", ".join(map(str, per_seed))}:\n\n'
        + summary_table(summary, training.k_values))
  return summary


def compare_runs(a_dir: str, b_dir: str, *, seeds: Sequence[int],
                 output_dir: Optional[str] = None) -> collections.OrderedDict:
  """Each method both multi-seed runs have, A - B, seed by seed.

  Args:
    a_dir: A run of `run_seeds` (e.g. block keys).
    b_dir: Another, of the same seeds and data (e.g. one-row keys).
    seeds: The seeds to compare; each must have finished in both.
    output_dir: Where to write `comparison.json` and `comparison.md`; None
      writes nothing.

  Returns:
    `a`, `b` (the directories), `training_differs` (the training settings
    that differ, A's and B's) and `comparisons` (method -> `compare`).

  Raises:
    InputError: If a seed is missing in either run, the runs differ in
      anything but training settings, or share no method.
  """
  _check_seeds(seeds)
  runs = {}
  for name, directory in (('A', a_dir), ('B', b_dir)):
    runs[name] = collections.OrderedDict()
    for seed in seeds:
      run = _read_seed(directory, seed)
      if run is None:
        raise errors.InputError(f'{directory}: seed {seed} has not finished '
                                f'({seed_dir(directory, seed)}).')
      runs[name][seed] = run
  a_config, b_config = (runs[n][seeds[0]]['config']['experiment']
                        for n in ('A', 'B'))
  if a_config['data'] != b_config['data'] or (
      a_config['clients_per_round'] != b_config['clients_per_round']):
    raise errors.InputError(f'{a_dir} and {b_dir} differ in their data or '
                            f'sampling; only training settings may differ.')
  a_methods, b_methods = _by_method(runs['A']), _by_method(runs['B'])
  shared = [m for m in a_methods if m in b_methods]
  if not shared:
    raise errors.InputError(f'{a_dir} and {b_dir} share no method.')
  result = collections.OrderedDict(
      a=a_dir, b=b_dir,
      training_differs=collections.OrderedDict(
          (key, [a_config['training'][key], b_config['training'].get(key)])
          for key in a_config['training']
          if a_config['training'][key] != b_config['training'].get(key)),
      comparisons=collections.OrderedDict(
          (m, compare(a_methods[m], b_methods[m], names=('A', 'B')))
          for m in shared),
      inputs=collections.OrderedDict(
          (name, tag_inputs.side_from_runs(
              runs[name], _by_method(runs[name]), MEAN_KEYS))
          for name in ('A', 'B')))
  if output_dir is not None:
    write_comparison_report(result, output_dir)
  return result


def write_comparison_report(
    result: Mapping[str, Any], output_dir: str,
    inputs: Optional[Mapping[str, Any]] = None) -> None:
  """`comparison.json` and `comparison.md` of a `compare_runs` result.

  Args:
    result: As `compare_runs` returns it.
    output_dir: Where both files go.
    inputs: 'A' and 'B' -> `tag_inputs.comparison_side` (or None), for a result that
      has no `inputs` of its own (one written before they were recorded);
      shown in "What the model saw", not written into `comparison.json`.
  """
  training_lib.write_json(os.path.join(output_dir, COMPARISON_FILE), result)
  differs = ', '.join(f'{k} {a} (A) vs {b} (B)'
                      for k, (a, b) in result['training_differs'].items())
  seeds = next(iter(result['comparisons'].values()))['seeds']
  with open(os.path.join(output_dir, COMPARISON_TABLE_FILE), 'w',
            encoding='utf-8') as f:
    f.write(f'# A = `{result["a"]}` against B = `{result["b"]}`\n\n'
            f'They differ in: {differs or "nothing"}; their data, clients '
            f'and clients per round are the same (checked).\n\n'
            + tag_inputs.comparison_what_the_model_saw(
                dict(result, inputs=inputs or result.get('inputs')))
            + f'\n\nEach method A − B, seeds {", ".join(map(str, seeds))}:'
            '\n\n' + comparisons_table(result['comparisons']) + '\n\n'
            + engine.verdict_note() + '\n')


def _stored_side(directory: Optional[str], name: str,
                 result: Mapping[str, Any]) -> Optional[dict[str, Any]]:
  """`tag_inputs.comparison_side` of side `name` of `result` from the `seeds.json` in
  `directory`, if there is one and it is that side's run: its settings
  match the side's in `training_differs` and it has every compared seed."""
  path = os.path.join(directory or '', SUMMARY_FILE)
  if directory is None or not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    side = tag_inputs.comparison_side(json.load(f))
  index = 0 if name == 'A' else 1
  seeds = next(iter(result['comparisons'].values()))['seeds']
  if (not set(seeds) <= set(side['seeds'])
      or any(key in side['setup'] and side['setup'][key] != values[index]
             for key, values in result['training_differs'].items())):
    return None
  return side


def rewrite_reports(output_dir: str, b_dir: Optional[str] = None) -> None:
  """Writes a run's reports again from its JSON, without its seeds' folders.

  `seeds.json` (and `comparison.json`, if the run has one) are read, every
  comparison's verdict is re-derived from its stored intervals
  (`reverdict`), and the JSON and markdown are written back; the figure is
  left as it is. This is how the committed reports follow a change of the
  verdict rule or of the report's layout without training again.

  A comparison written before `compare_runs` recorded its `inputs` gets
  its "What the model saw" from the runs' `seeds.json`: A's in `output_dir`
  (where `train_sparse_tags --compare_with` writes it), B's in `b_dir` (or,
  by default, in the folder `comparison.json` names as B), each used only
  if it is that side's run; a side without one is "not recorded".

  Args:
    output_dir: A `run_seeds` output folder (e.g. a copy in docs/results).
    b_dir: Where B's `seeds.json` is (e.g. its copy in docs/results).
  """
  path = os.path.join(output_dir, SUMMARY_FILE)
  with open(path, encoding='utf-8') as f:
    summary = json.load(f, object_pairs_hook=collections.OrderedDict)
  summary['comparisons'] = collections.OrderedDict(
      (k, reverdict(c)) for k, c in summary['comparisons'].items())
  write_summary_report(summary, output_dir)
  path = os.path.join(output_dir, COMPARISON_FILE)
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      result = json.load(f, object_pairs_hook=collections.OrderedDict)
    result['comparisons'] = collections.OrderedDict(
        (k, reverdict(c)) for k, c in result['comparisons'].items())
    inputs = None
    if 'inputs' not in result:
      inputs = {'A': _stored_side(output_dir, 'A', result),
                'B': _stored_side(b_dir or result['b'], 'B', result)}
    write_comparison_report(result, output_dir, inputs)
