"""The federated NMT experiment's report: tables, intervals, JSON and plot.

`write_report` turns `tff_nlp.experiments.nmt.run_nmt`'s runs (seed ->
engine -> results) into `results.md` (the paper's tables of the means over
seeds, every engine's interval over seeds, the paper's comparisons as paired
differences), `results.json` (per engine, keyed by
`nmt_seeds.report_key`: per-seed results, `bleu_avg`, `bleu_avg_ci95`,
`pulled_fraction`; the comparisons; the client weights) and `dev_bleu.png`.
"""

import collections
from collections.abc import Mapping, Sequence
import os
from typing import Any

from absl import logging
import numpy as np

from tff_nlp import errors
from tff_nlp import plots
from tff_nlp import training as training_lib
from tff_nlp.metrics import nmt_report
from tff_nlp.metrics import nmt_seeds
from tff_nlp.tasks import nmt as nmt_task

RESULTS_FILE = 'results.json'
TABLE_FILE = 'results.md'
DEV_PLOT_FILE = 'dev_bleu.png'
BLEU_PLOT_FILE = 'bleu_avg.png'
# What DEV_PLOT_FILE plots (and results.json's `dev_bleu_by_round` holds):
# the flat key 'dev_bleu/avg' of each round's 'eval' record.
DEV_PLOT_METRIC = 'eval/dev_bleu/avg'
PREDICTIONS_DIR = 'predictions'
# An engine's results: SHA-256 of the generic weights it started from, or of
# the generic engine's own trained weights (`training.weights_digest`).
GENERIC_DIGEST = 'generic_sha256'
WEIGHTS_DIGEST = 'weights_sha256'


def _by_engine(runs: Mapping[int, Mapping[str, Mapping[str, Any]]]
               ) -> dict[str, dict[int, Mapping[str, Any]]]:
  """seed -> engine -> results, regrouped as engine -> seed -> results."""
  by_engine = collections.OrderedDict()
  for seed, results in runs.items():
    for name, result in results.items():
      by_engine.setdefault(name, collections.OrderedDict())[seed] = result
  return by_engine


def _seed_means(per_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
  """The first seed's results with every model's BLEU averaged over the
  seeds (the paper-layout tables print these means)."""
  first = next(iter(per_seed.values()))
  models = [m for m in first['bleu']
            if all(m in r['bleu'] for r in per_seed.values())]
  return dict(first, bleu=collections.OrderedDict(
      (m, collections.OrderedDict(
          (d, float(np.mean([r['bleu'][m][d] for r in per_seed.values()])))
          for d in first['bleu'][m]))
      for m in models))


def check_one_generic(runs: Mapping[int, Mapping[str, Mapping[str, Any]]]
                      ) -> None:
  """Raises InputError unless every engine that records the generic weights
  it started from started from the same ones, those of the generic engine
  in `runs` (where its digest is known).

  The generic engine trained again elsewhere (another CPU's kernels) gives
  other weights under the same configuration key, so engines restored
  from an archive and engines trained here could otherwise be compared
  silently from different starting points.
  """
  started = collections.defaultdict(list)
  for seed, results in runs.items():
    for name, result in results.items():
      digest = result.get(GENERIC_DIGEST) or (
          result.get(WEIGHTS_DIGEST) if result['spec']['kind'] == 'generic'
          else None)
      if digest:
        started[digest].append(f'{name} (seed {seed}, '
                               f'{result.get("run_dir", "?")})')
  if len(started) > 1:
    groups = '; '.join(f'{digest[:12]}: {", ".join(engines)}'
                       for digest, engines in started.items())
    raise errors.InputError(
        'the engines started from different generic weights, so their '
        f'BLEU cannot be compared: {groups}. Delete the folders of the '
        'engines that did not start from the current generic engine (they '
        'train again from it).')


def summarize(runs: Mapping[int, Mapping[str, Mapping[str, Any]]],
              output_dir: str, domains: Sequence[str]
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
  """Per-engine summaries over seeds (`nmt_seeds.summarize_engine`, keyed
  by `nmt_seeds.report_key`) and the paper's comparisons among them
  (`nmt_seeds.compare`, reading the engines' test predictions)."""
  by_engine = _by_engine(runs)
  default_pulled = {}
  for per_seed in by_engine.values():
    for seed, result in per_seed.items():
      if result['spec']['kind'] == 'federated' and (
          result['spec']['mode'] == 'default'):
        default_pulled.setdefault(seed, nmt_seeds.mean_pulled(result))
  summaries = collections.OrderedDict(
      (nmt_seeds.report_key(per_seed[next(iter(per_seed))]['spec']),
       nmt_seeds.summarize_engine(per_seed, domains, default_pulled))
      for per_seed in by_engine.values())

  def statistics_of(key):
    summary = summaries[key]
    return [nmt_seeds.load_statistics(os.path.join(
        output_dir, entry['run_dir'], PREDICTIONS_DIR,
        nmt_seeds.scored_model(summary).replace(' ', '_') + '.jsonl'),
                                      domains)
            for entry in summary['seeds'].values()]

  comparisons = [
      nmt_seeds.compare(summaries[a], summaries[b],
                        a_statistics=statistics_of(a),
                        b_statistics=statistics_of(b), names=(a, b))
      for a, b in nmt_seeds.comparison_pairs(list(summaries))]
  return summaries, comparisons


def write_report(runs: Mapping[int, Mapping[str, Mapping[str, Any]]],
                 output_dir: str, *, task: nmt_task.NmtTask,
                 data: nmt_task.DataConfig, command: str = '',
                 echo: bool = True) -> str:
  """Writes `results.md` (the paper's tables of the means over seeds, the
  intervals and the paired differences), `results.json` and the federated
  engines' merged-dev BLEU by round of the first seed (`dev_bleu.png`; its
  points are `results.json`'s `dev_bleu_by_round`); with `echo`, prints the
  tables and the SacreBLEU signature.

  Returns:
    The Markdown tables.
  """
  runs = collections.OrderedDict((s, r) for s, r in runs.items() if r)
  check_one_generic(runs)
  summaries, comparisons = summarize(runs, output_dir, data.domains)
  by_engine = _by_engine(runs)
  means = collections.OrderedDict(
      (name, _seed_means(per_seed)) for name, per_seed in by_engine.items())
  tables = nmt_report.nmt_tables_markdown(
      means, domains=data.domains, generic_domain=data.generic_domain)
  seeds = list(runs)
  tables = ('## Every engine over its seeds\n\nMean BLEU over the seeds '
            'with the 95 % Student-t interval over seeds of the average; '
            '"pulled vs default": parameters a client pulls per round over '
            'the default mode\'s.\n\n'
            + nmt_report.seeds_table(summaries, data.domains) + '\n\n'
            + ('## The paper\'s comparisons, paired\n\n'
               'A − B of the average BLEU over the five test sets (means '
               'over seeds). A difference is called only when both '
               'intervals exclude 0.\n\n'
               + nmt_report.comparisons_table(comparisons) + '\n\n'
               if comparisons else '')
            + tables)
  signatures = sorted({r['sacrebleu'] for results in runs.values()
                       for r in results.values() if r.get('sacrebleu')})
  first = runs[seeds[0]]
  federated = {name: r['records']['federated'] for name, r in first.items()
               if r['spec']['kind'] == 'federated'}
  figures = [BLEU_PLOT_FILE]
  plots.plot_intervals(
      collections.OrderedDict(
          (key, (summary['bleu_avg'], summary['bleu_avg_ci95'],
                 [entry['bleu_avg'] for entry in summary['seeds'].values()]))
          for key, summary in summaries.items()),
      os.path.join(output_dir, BLEU_PLOT_FILE),
      x_label='BLEU, average over the test sets (mean over seeds, 95% CI)',
      title=f'{os.path.basename(task.folder)}: every engine',
      reference=nmt_report.paper_averages(summaries))
  dev_bleu = collections.OrderedDict(
      (name, plots.metric_series(records, DEV_PLOT_METRIC))
      for name, records in federated.items())
  if any(rounds for rounds, _ in dev_bleu.values()):
    plots.plot_metric_by_round(
        dev_bleu, os.path.join(output_dir, DEV_PLOT_FILE),
        y_label='dev BLEU, mean over domains', title='Federated server model')
    figures.append(DEV_PLOT_FILE)
  elif federated:
    logging.info('No federated engine recorded %s (--eval_every=0?): %s is '
                 'not written.', DEV_PLOT_METRIC, DEV_PLOT_FILE)
  test_sentences = {d: len(task.splits[d]['test']) for d in data.domains}
  training_lib.write_json(os.path.join(output_dir, RESULTS_FILE),
                          collections.OrderedDict(
                              command=command, data=data,
                              corpus=os.path.basename(task.folder),
                              seeds=seeds, sacrebleu=signatures,
                              test_sentences=test_sentences,
                              truncated=task.truncated(),
                              client_weights=task.client_weights(),
                              engines=summaries,
                              comparisons=comparisons,
                              figures=figures,
                              dev_bleu_by_round=collections.OrderedDict(
                                  (name, collections.OrderedDict(
                                      rounds=rounds, values=values))
                                  for name, (rounds, values)
                                  in dev_bleu.items())))
  with open(os.path.join(output_dir, TABLE_FILE), 'w', encoding='utf-8') as f:
    f.write('# Federated mixed-domain NMT: BLEU (SacreBLEU, detokenized)\n\n')
    if command:
      f.write(f'Command:\n\n```sh\n{command}\n```\n\n')
    f.write(f'Data: `{os.path.basename(task.folder)}`, seeds '
            f'{", ".join(map(str, seeds))}. SacreBLEU signature: '
            f'{", ".join(signatures) or "–"}. Test sentences per domain: '
            + ', '.join(f'{d} {n}' for d, n in test_sentences.items())
            + '. Client weights (training pairs, share): ' + ', '.join(
                f'{d} {w["examples"]:,} ({w["share"]:.3f})'
                for d, w in task.client_weights().items())
            + '.\n\n' + tables + '\n')
    if figures:
      f.write('\nFigures: ' + ', '.join(f'`{p}`' for p in figures) + '.\n')
  if echo:
    print(tables)
    print(f'\nSacreBLEU signature: {", ".join(signatures) or "–"}')
  return tables
