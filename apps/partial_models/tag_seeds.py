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
(`comparison_what_the_model_saw`). `rewrite_reports` writes both reports
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
            num_replicates: int = intervals.DEFAULT_NUM_REPLICATES,
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


def setup_record(data: sparse_tags.TagDataConfig,
                 training: sparse_tags.TagTrainingConfig,
                 loop: training_lib.LoopConfig) -> collections.OrderedDict:
  """What the report's "What the model saw" needs of the run's settings."""
  return collections.OrderedDict(
      dataset=data.dataset, partition=data.partition,
      dirichlet_alpha=data.dirichlet_alpha, max_keys=training.max_keys,
      block_size=training.block_size, client_epochs=training.client_epochs,
      batch_size=training.batch_size, rounds=loop.rounds,
      clients_per_round=loop.clients_per_round,
      k_values=list(training.k_values))


def _clients_of_round(clients_per_round: Optional[int]) -> str:
  if clients_per_round is None:
    return 'the sampled clients'
  if clients_per_round == 0:
    return 'all clients'
  return f'{clients_per_round} sampled clients'


def what_the_model_saw(summary: Mapping[str, Any]) -> str:
  """Markdown: the data, truncation, test set and protocol of the summary.

  Every number is read from `summary` (`task`, `setup`, the methods'
  `dropped_tokens_per_round`); one a run did not record is said to be so,
  never guessed.
  """
  task, setup = summary['task'], summary.get('setup', {})
  unknown = 'not recorded'
  dataset = f'{setup["dataset"]} ' if 'dataset' in setup else ''
  per_round = setup.get('clients_per_round')
  keys = setup.get('max_keys', unknown)
  if setup.get('block_size', 1) > 1:
    keys = f'{keys} keys of {setup["block_size"]} rows'
  dropped = {m['label']: m['dropped_tokens_per_round']
             for m in summary['methods'].values()
             if m.get('dropped_tokens_per_round')}
  entries = task.get('train_word_entries')
  if len(set(dropped.values())) == 1:
    dropped = {'every sparse method': next(iter(dropped.values()))}
  cut = '; '.join(
      f'{label}: {value:,.0f}'
      + (f' of {entries:,} ({100 * value / entries:.0f}%)' if entries else '')
      for label, value in dropped.items())
  no_tag = task.get('test_examples_no_known_tag')
  never = (unknown if no_tag is None else f'{no_tag:,} of the '
           f'{task["test_examples"]:,}')
  k_values = ', '.join(map(str, setup.get('k_values', [])))
  return '\n'.join([
      '## What the model saw', '',
      f'- **Training data.** {task["train_examples"]:,} {dataset}training '
      f'examples, split over {task["num_clients"]} clients '
      f'({setup.get("partition", unknown)}, '
      f'Dirichlet α = {setup.get("dirichlet_alpha", unknown)}): '
      f'{task["client_examples_min"]}–{task["client_examples_max"]} '
      f'examples per client in seed {summary["seeds"][0]}; each seed draws '
      f'its own split. Each round {_clients_of_round(per_round)} train '
      f'{setup.get("client_epochs", unknown)} epoch(s) over all their '
      f'examples (batch {setup.get("batch_size", unknown)}), for '
      f'{setup.get("rounds", unknown)} rounds.',
      f'- **Truncation.** Dense FedAvg trains every word. A sparse client '
      f'keeps M = {keys} of the V = {task["num_words"]:,} word rows; '
      f'{task["clients_over_max_keys"]} of the {task["num_clients"]} '
      f'clients have more distinct words than that and drop their rarer '
      f'ones: (example, word) entries dropped per epoch, mean over seeds, '
      f'{cut or "none"}. Nothing is cut at test time (the global model '
      f'scores every test example\'s whole bag of words); test examples '
      f'with no tag in the tag vocabulary, which can never be right: '
      f'{never}.',
      f'- **Test set.** The {task["test_examples"]:,} {dataset}test '
      f'examples, the same for every method and seed.',
      f'- **Protocol.** Precision@k and recall@k (k = {k_values or unknown}) '
      f'of the global model after the last round over the in-vocabulary '
      f'tags; nothing is selected on the test set.',
      f'- **Verdicts.** One rule, quoted below the comparisons '
      f'(docs/results/README.md).'])


def comparison_side(summary: Mapping[str, Any]) -> collections.OrderedDict:
  """What a compared run's "What the model saw" needs, from its summary
  (`summarize` with `setup`, as in `seeds.json`)."""
  return collections.OrderedDict(
      seeds=list(summary['seeds']), task=summary['task'],
      setup=summary.get('setup', {}),
      dropped=collections.OrderedDict(
          (m, v['dropped_tokens_per_round'])
          for m, v in summary['methods'].items()
          if 'dropped_tokens_per_round' in v))


def _side_from_runs(per_seed: PerSeed) -> collections.OrderedDict:
  """`comparison_side` of a run, from its seeds' `results.json`."""
  first = next(iter(per_seed.values()))
  experiment, loop = first['config']['experiment'], first['config']['loop']
  data, training = experiment['data'], experiment['training']
  return comparison_side(collections.OrderedDict(
      seeds=list(per_seed), task=first['task'],
      setup=collections.OrderedDict(
          dataset=data['dataset'], partition=data['partition'],
          dirichlet_alpha=data['dirichlet_alpha'],
          max_keys=training['max_keys'], block_size=training['block_size'],
          client_epochs=training['client_epochs'],
          batch_size=training['batch_size'], rounds=loop['rounds'],
          clients_per_round=experiment['clients_per_round'],
          k_values=list(training['k_values'])),
      methods=collections.OrderedDict(
          (m, {key: float(np.mean([r[key] for r in by_seed.values()]))
               for key in MEAN_KEYS
               if all(key in r for r in by_seed.values())})
          for m, by_seed in _by_method(per_seed).items())))


def comparison_what_the_model_saw(result: Mapping[str, Any]) -> str:
  """Markdown: the data, truncation, test set and protocol of A and B.

  Read from `result['inputs']` ('A' and 'B': `comparison_side` or None);
  what neither side recorded is said to be so, never guessed.
  """
  unknown = 'not recorded'
  sides = {n: (result.get('inputs') or {}).get(n) for n in ('A', 'B')}
  recorded = [n for n in ('A', 'B') if sides[n]]
  task = sides[recorded[0]]['task'] if recorded else {}
  setup = sides[recorded[0]]['setup'] if recorded else {}

  def both(key: str) -> str:
    values = {n: (sides[n] or {}).get('setup', {}).get(key, unknown)
              for n in ('A', 'B')}
    if values['A'] == values['B']:
      return str(values['A'])
    return f'{values["A"]} (A) / {values["B"]} (B)'

  def keys(name: str) -> str:
    side_setup = (sides[name] or {}).get('setup', {})
    value = side_setup.get('max_keys', unknown)
    if side_setup.get('block_size', 1) > 1:
      value = f'{value} keys of {side_setup["block_size"]} rows'
    elif 'block_size' in side_setup:
      value = f'{value} one-row keys'
    return f'{value} ({name})'

  entries = task.get('train_word_entries')
  cut = []
  for name in ('A', 'B'):
    if not sides[name]:
      cut.append(f'{name}: {unknown}')
      continue
    dropped = {m: v for m, v in sides[name]['dropped'].items()
               if m in result['comparisons']}
    share = lambda v: f'{v:,.0f}' + (
        f' of {entries:,} ({100 * v / entries:.0f}%)' if entries else '')
    if len(set(dropped.values())) == 1:
      text = f'{share(next(iter(dropped.values())))}, every method compared'
    else:
      text = ', '.join(f'{m} {share(v)}' for m, v in dropped.items())
    over = sides[name]['task'].get('clients_over_max_keys', unknown)
    cut.append(f'{name} ({over} of the {task.get("num_clients", unknown)} '
               f'clients drop words) {text or unknown}')
  no_tag = task.get('test_examples_no_known_tag')
  never = (unknown if no_tag is None else
           f'{no_tag:,} of the {task["test_examples"]:,}')
  dataset = f'{setup["dataset"]} ' if 'dataset' in setup else ''
  if task:
    data = (f'{task["train_examples"]:,} {dataset}training examples, split '
            f'over {task["num_clients"]} clients '
            f'({setup.get("partition", unknown)}, Dirichlet α = '
            f'{setup.get("dirichlet_alpha", unknown)}): '
            f'{task["client_examples_min"]}–{task["client_examples_max"]} '
            f'examples per client in seed {sides[recorded[0]]["seeds"][0]}; '
            f'each seed draws its own split, the same in A and B')
    test = (f'The {task["test_examples"]:,} {dataset}test examples, the '
            f'same for A and B, every method and seed.')
  else:
    data = f'{unknown} (the data of A and B is the same: checked)'
    test = f'{unknown}; the same for A and B (their data is the same).'
  rounds = both('clients_per_round')
  rounds = ('all clients' if rounds == '0' else
            f'clients per round {rounds}')
  num_words = (f'{task["num_words"]:,}' if 'num_words' in task
               else unknown)
  return '\n'.join([
      '## What the model saw', '',
      f'- **Training data, the same in A and B (checked).** {data}. Each '
      f'round {rounds} train {both("client_epochs")} epoch(s) over all '
      f'their examples (batch {both("batch_size")}), for {both("rounds")} '
      'rounds.',
      f'- **Truncation.** A sparse client keeps M = {keys("A")} or '
      f'{keys("B")} of the V = {num_words} word rows; a client with more '
      'distinct words drops its rarer ones. (example, word) entries dropped '
      'per epoch, mean over seeds: ' + '; '.join(cut) + '. Nothing is cut '
      'at test time; test examples with no tag in the tag vocabulary, which '
      f'can never be right: {never}.',
      f'- **Test set.** {test}',
      '- **Protocol.** Precision@1 of each run\'s global model after its '
      'last round, A − B paired by seed and by test example; nothing is '
      'selected on the test set.',
      '- **Verdicts.** [The verdict rule](../../README.md#the-verdict-rule) '
      '(docs/results/README.md), quoted below the table.'])


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
            f'bytes).\n\n' + what_the_model_saw(summary) + '\n\n'
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
  summary['setup'] = setup_record(data, training, loop)
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
          (name, _side_from_runs(runs[name])) for name in ('A', 'B')))
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
    inputs: 'A' and 'B' -> `comparison_side` (or None), for a result that
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
            + comparison_what_the_model_saw(
                dict(result, inputs=inputs or result.get('inputs')))
            + f'\n\nEach method A − B, seeds {", ".join(map(str, seeds))}:'
            '\n\n' + comparisons_table(result['comparisons']) + '\n\n'
            + engine.verdict_note() + '\n')


def _stored_side(directory: Optional[str], name: str,
                 result: Mapping[str, Any]) -> Optional[dict[str, Any]]:
  """`comparison_side` of side `name` of `result` from the `seeds.json` in
  `directory`, if there is one and it is that side's run: its settings
  match the side's in `training_differs` and it has every compared seed."""
  path = os.path.join(directory or '', SUMMARY_FILE)
  if directory is None or not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    side = comparison_side(json.load(f))
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
