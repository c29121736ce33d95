"""The federated NMT experiment's report: tables, intervals, JSON and plot.

`write_report` turns `apps.nmt.experiment.run_nmt`'s runs (seed ->
engine -> results) into `results.md`, `results.json`, `bleu_avg.png` and
`dev_bleu.png`. The Markdown opens with what the engines saw (training
pairs per client and per engine, the test pairs cut at `max_length` by the
engines' own tokenizer, the test sets, the protocol, the verdict rule) and
how their translations look (`nmt_report.output_health`), because BLEU of
1-4 alone does not say whether an engine translates at all. Then the
paper's comparisons as paired differences on the average over the domains
the paper has too (`nmt_seeds.SHARED_AVG`, like with like), every engine
over its seeds, the same comparisons on all our test sets (ours only), and
the paper's tables of the means over seeds. `results.json` holds per
engine (keyed by `nmt_seeds.report_key`) the per-seed results, both
averages with their intervals, `pulled_fraction` and `output_health`; the
comparisons; the client weights and truncation counts.
"""

import collections
from collections.abc import Mapping, Sequence
import json
import os
from typing import Any, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from tff_nlp import errors
from apps.common import plots
from tff_nlp import training as training_lib
from tff_nlp.metrics import intervals
from apps.nmt import report as nmt_report
from apps.nmt import seeds as nmt_seeds
from apps.nmt import task as nmt_task

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
MISSING = nmt_report.MISSING


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


def _predictions_path(output_dir: str, summary: Mapping[str, Any],
                      entry: Mapping[str, Any]) -> str:
  return os.path.join(output_dir, entry['run_dir'], PREDICTIONS_DIR,
                      nmt_seeds.scored_model(summary).replace(' ', '_')
                      + '.jsonl')


def read_predictions(path: str) -> list[dict[str, str]]:
  """The rows of a predictions file (`domain`, `source`, `reference`,
  `hypothesis`), in file order."""
  if not os.path.isfile(path):
    raise errors.InputError(f'{path}: no predictions file there.')
  with open(path, encoding='utf-8') as f:
    return [json.loads(line) for line in f]


def summarize(runs: Mapping[int, Mapping[str, Mapping[str, Any]]],
              output_dir: str, domains: Sequence[str]
              ) -> tuple[dict[str, Any], list[dict[str, Any]],
                         list[dict[str, Any]]]:
  """Per-engine summaries over seeds (`nmt_seeds.summarize_engine`, keyed
  by `nmt_seeds.report_key`, with the average over the domains the paper
  has too) and the paper's comparisons among them (`nmt_seeds.compare`,
  reading the engines' test predictions): on that shared-domain average
  (like with like: the pairs the page sets beside the paper's gaps), then
  on the average over all our test sets (ours only)."""
  by_engine = _by_engine(runs)
  shared = nmt_report.shared_domains(domains)
  default_pulled = {}
  for per_seed in by_engine.values():
    for seed, result in per_seed.items():
      if result['spec']['kind'] == 'federated' and (
          result['spec']['mode'] == 'default'):
        default_pulled.setdefault(seed, nmt_seeds.mean_pulled(result))
  summaries = collections.OrderedDict(
      (nmt_seeds.report_key(per_seed[next(iter(per_seed))]['spec']),
       nmt_seeds.summarize_engine(per_seed, domains, default_pulled,
                                  shared_domains=shared))
      for per_seed in by_engine.values())

  statistics = {}

  def statistics_of(key, over):
    if key not in statistics:
      summary = summaries[key]
      statistics[key] = [
          nmt_seeds.load_statistics(
              _predictions_path(output_dir, summary, entry), domains)
          for entry in summary['seeds'].values()]
    return [{d: s[d] for d in over} for s in statistics[key]]

  comparisons = {}
  for average, over in ((nmt_seeds.SHARED_AVG, shared),
                        (nmt_seeds.ALL_AVG, domains)):
    comparisons[average] = [] if not over else [
        nmt_seeds.compare(summaries[a], summaries[b],
                          a_statistics=statistics_of(a, over),
                          b_statistics=statistics_of(b, over),
                          names=(a, b), average=average)
        for a, b in nmt_seeds.comparison_pairs(list(summaries))]
  return (summaries, comparisons[nmt_seeds.SHARED_AVG],
          comparisons[nmt_seeds.ALL_AVG])


def output_health(summaries: Mapping[str, Mapping[str, Any]],
                  output_dir: str) -> tuple[dict[str, Any], float,
                                            list[dict[str, Any]]]:
  """Per engine, `nmt_report.output_health` averaged over its seeds (and
  its shared-domain BLEU); the share of references with a loop; and the
  examples (`nmt_report.degenerate_examples`) of the first seed of the
  federated default (else the first engine)."""
  health = collections.OrderedDict()
  reference_share, examples = None, []
  example_key = ('fedavg_default' if 'fedavg_default' in summaries
                 else next(iter(summaries), None))
  for key, summary in summaries.items():
    per_seed = []
    for seed, entry in summary['seeds'].items():
      rows = read_predictions(_predictions_path(output_dir, summary, entry))
      per_seed.append(nmt_report.output_health(rows))
      if reference_share is None:
        reference_share = nmt_report.reference_loops(rows)
      if key == example_key and not examples:
        examples = [collections.OrderedDict(
            engine=key, seed=int(seed), **e)
                    for e in nmt_report.degenerate_examples(rows)]
    health[key] = collections.OrderedDict(
        seeds=len(per_seed), bleu=summary.get(nmt_seeds.SHARED_AVG),
        **{f: float(np.mean([h[f] for h in per_seed]))
           for f in (*nmt_report.HEALTH_FIELDS, 'length_ratio')})
    summary['output_health'] = health[key]
  return health, reference_share, examples


def cut_test_pairs(task: nmt_task.NmtTask, max_length: int
                   ) -> collections.OrderedDict:
  """Per domain, the test pairs whose source or target is longer than
  `max_length` tokens with END, as `seq2seq_examples.encode_pairs` counts
  them with the engines' tokenizer: the engine never sees the rest of such
  a source, and cannot write such a reference in full (the decoder stops at
  `max_length`), so none of them can be translated right."""
  cut = collections.OrderedDict()
  for d in task.domains:
    corpus = task.splits[d]['test'].corpus
    lengths = [task.tokenizer.tokenize(tf.constant(list(texts)))
               .row_lengths().numpy() + 1
               for texts in (corpus.sources, corpus.targets)]
    sources, targets = (lengths[0] > max_length, lengths[1] > max_length)
    cut[d] = collections.OrderedDict(
        pairs=len(corpus), sources=int(sources.sum()),
        targets=int(targets.sum()), either=int((sources | targets).sum()))
  return cut


def _examples_trained(result: Mapping[str, Any]) -> int:
  """The training pairs an engine went through, from its round records
  (summed over rounds and, federated, over clients)."""
  total = 0
  for records in result.get('records', {}).values():
    for r in records:
      train = r.get('train')
      if train:
        train = train['client_work'] if 'client_work' in train else train
        total += int(train['train']['num_examples'])
  return total


def what_the_model_saw(runs: Mapping[int, Mapping[str, Mapping[str, Any]]],
                       task: nmt_task.NmtTask, data: nmt_task.DataConfig,
                       cut: Mapping[str, Mapping[str, int]],
                       signatures: Sequence[str],
                       beam_size: Optional[int] = None) -> str:
  """The report's first section: training pairs per client and per engine,
  truncation and what it rules out, the test sets, the protocol and the
  verdict rule."""
  weights = task.client_weights()
  generic = len(task.splits[task.generic_domain]['train'])
  first = next(iter(runs.values()))
  engines = collections.OrderedDict()
  for name, result in first.items():
    trained = _examples_trained(result)
    if not trained:
      continue
    if result['spec']['kind'] == 'federated':
      rounds = sum('train' in r for r in result['records']['federated'])
      per_client = trained / len(task.domains)
      what = (f'{trained:,} pairs in {rounds} rounds, {per_client:,.0f} per '
              'client (' + ', '.join(
                  f'{d} {per_client / weights[d]["examples"]:.2f}×'
                  for d in task.domains) + ' its training set)')
    else:
      what = f'{trained:,} pairs'
    engines.setdefault(what, []).append(name)
  engines = [f'{", ".join(names)}: {what}' for what, names in engines.items()]
  total = {k: sum(c[k] for c in cut.values())
           for k in ('pairs', 'sources', 'targets', 'either')}
  rows = '\n'.join(
      f'| {d} | {c["pairs"]:,} | {c["sources"]:,} | {c["targets"]:,} | '
      f'{c["either"]:,} ({100 * c["either"] / c["pairs"]:.1f} %) |'
      for d, c in [*cut.items(), ('all', total)])
  train_cut = ', '.join(
      f'{d} {v["train"]["sources"]:,} / {v["train"]["targets"]:,}'
      for d, v in task.truncated().items() if 'train' in v)
  return (
      '## What the model saw\n\n'
      '- **Training pairs per client** (its domain\'s training set; a '
      'federated round weighs the clients by these shares): '
      + ', '.join(f'{d} {w["examples"]:,} ({w["share"]:.3f})'
                  for d, w in weights.items())
      + f'. The generic engine\'s corpus `{task.generic_domain}`: '
      f'{generic:,} pairs. Pairs each engine went through (seed '
      f'{next(iter(runs))}, from its round records): '
      + '; '.join(engines) + '.\n'
      f'- **Truncation**: sources and targets are cut at {data.max_length} '
      'subword tokens (END included; the engines\' own SentencePiece '
      f'tokenizer of {task.tokenizer.vocabulary_size():,} pieces). Training '
      f'pairs cut (sources / targets): {train_cut}. A test pair with a cut '
      'source (the engine never sees its end) or a cut target (the decoder '
      'stops before the reference ends) can never be translated right:\n\n'
      '| test set | pairs | sources cut | targets cut | either: never '
      'right |\n|---|---:|---:|---:|---:|\n' + rows + '\n\n'
      '- **Test sets**: every domain\'s full test set, one reference each, '
      'raw (detokenized) text; SacreBLEU corpus BLEU, '
      f'{", ".join(signatures) or MISSING}.\n'
      '- **Protocol**: each engine translates the German source alone '
      '(no reference, no domain label, no oracle), '
      + ('decoding as configured' if beam_size is None
         else 'greedy decoding' if beam_size == 1
         else f'beam search of {beam_size}')
      + f', at most {data.max_length} tokens; a federated engine '
      'is scored by its server model.\n'
      '- **Verdict rule**: docs/results/README.md, '
      '`tff_nlp.metrics.intervals.VERDICT_RULE`: '
      + intervals.VERDICT_RULE + '\n')

def _share_of_paper(summaries: Mapping[str, Mapping[str, Any]],
                    domains: Sequence[str]) -> str:
  """'Our 5-round modes score 1.9-5.8 % of the paper's BLEU ...: ' (of its
  cells of the same domains), or '' without such an engine."""
  paper = nmt_report.paper_averages(summaries, domains)
  shares = [summaries[k][nmt_seeds.SHARED_AVG] / v for k, v in paper.items()
            if v and summaries[k].get(nmt_seeds.SHARED_AVG) is not None]
  if not shares:
    return ''
  return (f'Our 5-round federated modes score {100 * min(shares):.1f}–'
          f'{100 * max(shares):.1f} % of the paper\'s BLEU on the same '
          'domains: ')


def write_report(runs: Mapping[int, Mapping[str, Mapping[str, Any]]],
                 output_dir: str, *, task: nmt_task.NmtTask,
                 data: nmt_task.DataConfig, command: str = '',
                 echo: bool = True,
                 training: Optional[nmt_task.TrainingConfig] = None) -> str:
  """Writes `results.md` (module docstring), `results.json`, `bleu_avg.png`
  (each engine's shared-domain average over seeds, the paper's beside it)
  and the federated engines' merged-dev BLEU by round of the first seed
  (`dev_bleu.png`; its points are `results.json`'s `dev_bleu_by_round`);
  with `echo`, prints the tables and the SacreBLEU signature. It reads
  only the engines' results and translations (and the task's data and
  tokenizer), so it regenerates from archived runs without training.

  Returns:
    The Markdown tables.
  """
  runs = collections.OrderedDict((s, r) for s, r in runs.items() if r)
  check_one_generic(runs)
  summaries, comparisons, comparisons_all = summarize(runs, output_dir,
                                                      data.domains)
  health, reference_loops, examples = output_health(summaries, output_dir)
  by_engine = _by_engine(runs)
  means = collections.OrderedDict(
      (name, _seed_means(per_seed)) for name, per_seed in by_engine.items())
  seeds = list(runs)
  signatures = sorted({r['sacrebleu'] for results in runs.values()
                       for r in results.values() if r.get('sacrebleu')})
  cut = cut_test_pairs(task, data.max_length)
  shared = nmt_report.shared_domains(data.domains)
  parts = [what_the_model_saw(
      runs, task, data, cut, signatures,
      beam_size=training.beam_size if training else None)]
  parts.append(
      '## What the translations look like\n\n'
      'Per engine, the mean over its seeds of the share of test hypotheses '
      'that loop (one unit of 1–10 characters repeated 5+ times in a row '
      f'over {nmt_report.LOOP_MIN_CHARACTERS}+ characters), are shorter '
      f'than {nmt_report.SHORT_RATIO:g}× or longer than '
      f'{nmt_report.LONG_RATIO:g}× the reference in characters, or any of '
      'these; the references row is the loop measure\'s false-alarm rate. '
      + _share_of_paper(summaries, data.domains)
      + 'an engine whose BLEU is a few points translates little, so any '
      'ranking among such engines says little about the method.\n\n'
      + nmt_report.health_table(health, reference_loops)
      + ('\n\nExamples, verbatim (in each of the first test sets in file '
         'order, its first hypothesis that loops, else its first far too '
         'short or long):\n\n'
         + nmt_report.examples_markdown(examples[0]['engine'],
                                        examples[0]['seed'], examples)
         if examples else ''))
  if comparisons:
    parts.append(
        '## The paper\'s comparisons, paired (shared domains)\n\n'
        f'A − B of the average BLEU over {", ".join(shared)} (means over '
        'seeds): the test sets the paper has too, so these are the '
        'differences to set beside the paper\'s gaps over its cells of the '
        'same domains. Verdicts by the rule above (docs/results/README.md)'
        '.\n\n' + nmt_report.comparisons_table(comparisons))
  parts.append(
      '## Every engine over its seeds\n\nMean BLEU over the seeds with the '
      '95 % Student-t interval over seeds of each average; "pulled vs '
      'default": parameters a client pulls per round over the default '
      'mode\'s.\n\n' + nmt_report.seeds_table(summaries, data.domains))
  if comparisons_all:
    parts.append(
        '## The same comparisons on all our test sets (ours only)\n\n'
        f'A − B of the average over all {len(data.domains)} of our test '
        'sets, which the paper\'s averages do not match. Verdicts by the '
        'same rule.\n\n' + nmt_report.comparisons_table(comparisons_all))
  parts.append(nmt_report.nmt_tables_markdown(
      means, domains=data.domains, generic_domain=data.generic_domain))
  tables = '\n\n'.join(p for p in parts if p)
  first = runs[seeds[0]]
  federated = {name: r['records']['federated'] for name, r in first.items()
               if r['spec']['kind'] == 'federated'}
  figures = [BLEU_PLOT_FILE]
  average = nmt_seeds.SHARED_AVG if shared else nmt_seeds.ALL_AVG
  plots.plot_intervals(
      collections.OrderedDict(
          (key, (summary[average], summary[average + '_ci95'],
                 [entry[average] for entry in summary['seeds'].values()]))
          for key, summary in summaries.items()),
      os.path.join(output_dir, BLEU_PLOT_FILE),
      x_label=(f'BLEU, average over {", ".join(shared)} (mean over seeds, '
               '95% CI)' if shared else
               'BLEU, average over the test sets (mean over seeds, 95% CI)'),
      title=f'{os.path.basename(task.folder)}: every engine',
      reference=nmt_report.paper_averages(summaries, data.domains))
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
                              test_pairs_cut=cut,
                              shared_domains=shared,
                              client_weights=task.client_weights(),
                              engines=summaries,
                              comparisons=comparisons,
                              comparisons_all_domains=comparisons_all,
                              reference_loops=reference_loops,
                              degenerate_examples=examples,
                              verdict_rule=intervals.VERDICT_RULE,
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
            f'{", ".join(map(str, seeds))}.\n\n' + tables + '\n')
    if figures:
      f.write('\nFigures: ' + ', '.join(f'`{p}`' for p in figures) + '.\n')
  if echo:
    print(tables)
    print(f'\nSacreBLEU signature: {", ".join(signatures) or MISSING}')
  return tables
