"""The dynamic-pulling paper's BLEU tables, ours beside the paper's numbers.

Passban et al., NAACL 2022 (`shared/docs/dynamic_pulling.md`) report BLEU of
German→English engines on the test sets of their domains: single-domain
engines (Table 2), centralised data combination and chained fine-tuning
(Table 3), the federated server and client models (Table 4) and the dynamic
pulling modes with their pulled parameters (Table 6). `nmt_tables_markdown`
lays out the results of `tff_nlp.experiments.nmt.run_nmt` the same way.

Our domains differ in one place: the paper's OpenSubtitles client is not
available here, `multi30k_captions` (image captions) stands in its place.
The paper's cells are printed under the four domains both share (news, TED,
PHP, Ubuntu); its average, over its own five test sets, is printed as
reported.
"""

import collections
from collections.abc import Mapping, Sequence
import statistics
from typing import Any

from tff_nlp.metrics import bleu

# Our domain -> the paper's column.
PAPER_DOMAINS = {'wmt_news': 'WMT', 'ted_iwslt14': 'TED', 'php_docs': 'PHP',
                 'ubuntu_l10n': 'UB'}
# Table 4/6: the server model after 5 rounds (BLEU per paper column, avg).
PAPER_SERVER = {
    'default': {'WMT': 33.97, 'TED': 30.80, 'PHP': 37.32, 'UB': 47.90,
                'avg': 33.83},
    'dp_l': {'WMT': 29.28, 'TED': 30.88, 'PHP': 36.33, 'UB': 45.74,
             'avg': 32.28},
    'dp_g': {'WMT': 30.74, 'TED': 27.61, 'PHP': 13.69, 'UB': 32.16,
             'avg': 24.49},
    'random': {'WMT': 24.58, 'TED': 30.57, 'PHP': 35.33, 'UB': 42.50,
               'avg': 30.43},
}
# Parameters a client pulls (sends) per round in the paper's model.
PAPER_PULLED = {'default': 45_724_160, 'dp_l': 22_863_104}
# Table 3: averages over the five test sets.
PAPER_CENTRALIZED = {'combined': {'avg': 32.0}, 'chained': {'avg': 21.8}}
MODE_LABELS = {
    'default': 'FedAvg, all tensors (default)',
    'dp_l': 'DP_l (less active half)',
    'dp_g': 'DP_g (most active half)',
    'random': 'random (same count)',
    'dp_l_33': 'DP_l 33%, push and pull',
    'controllers': 'Controllers',
}


def _paper_row(paper: Mapping[str, float],
               domains: Sequence[str]) -> dict[str, float]:
  row = {d: paper[PAPER_DOMAINS[d]] for d in domains
         if d in PAPER_DOMAINS and PAPER_DOMAINS[d] in paper}
  if 'avg' in paper:
    row['avg'] = paper['avg']
  return row


def _paper_comparable(spec: Mapping[str, Any]) -> bool:
  """The paper's 5-round runs with its change norm."""
  return (spec['mode'] in PAPER_SERVER and spec['rounds'] == 5
          and spec.get('change_norm', 'l2') == 'l2'
          and spec.get('server_optimizer', 'none') == 'none')


def mode_label(spec: Mapping[str, Any]) -> str:
  """E.g. 'DP_l (less active half)', 'DP_l (less active half), rms',
  'FedAvg, all tensors (default), server momentum'."""
  label = MODE_LABELS.get(spec['mode'], spec['mode'])
  norm = spec.get('change_norm', 'l2')
  if norm != 'l2':
    label = f'{label}, {norm}'
  server = spec.get('server_optimizer', 'none')
  return label if server == 'none' else f'{label}, server {server}'


def _federated(results: Mapping[str, Mapping[str, Any]]):
  return {name: r for name, r in results.items()
          if r['spec']['kind'] == 'federated'}


def single_domain_table(results: Mapping[str, Mapping[str, Any]],
                        domains: Sequence[str], generic_domain: str) -> str:
  """Table 2: each domain's engine (the generic engine for the generic
  domain), from scratch or fine-tuned from the generic engine, on every
  test set; '' if there is none."""
  rows = collections.OrderedDict()
  for name, r in results.items():
    spec = r['spec']
    if spec['kind'] == 'generic':
      rows[f'{generic_domain} engine (generic)'] = r['bleu'][name]
    elif spec['kind'] == 'single':
      rows[f'{spec["domain"]} engine'] = r['bleu'][name]
    elif spec['kind'] == 'finetuned':
      rows[f'{spec["domain"]} engine, from the generic'] = r['bleu'][name]
  if not rows:
    return ''
  return bleu.bleu_table_markdown(rows, columns=domains)


def centralized_table(results: Mapping[str, Mapping[str, Any]],
                      domains: Sequence[str]) -> str:
  """Table 3: data combination and chained fine-tuning; '' if neither."""
  rows = collections.OrderedDict(
      (name, r['bleu'][name]) for name, r in results.items()
      if r['spec']['kind'] in ('combined', 'chained'))
  if not rows:
    return ''
  return bleu.bleu_table_markdown(
      rows, columns=domains,
      paper={k: v for k, v in PAPER_CENTRALIZED.items() if k in rows})


def federated_table(result: Mapping[str, Any],
                    domains: Sequence[str]) -> str:
  """Table 4: a federated engine's server model and client models."""
  mode = result['spec']['mode']
  paper = {}
  if _paper_comparable(result['spec']):
    paper['server'] = _paper_row(PAPER_SERVER[mode], domains)
  return bleu.bleu_table_markdown(result['bleu'], columns=domains,
                                  paper=paper)


def modes_table(results: Mapping[str, Mapping[str, Any]],
                domains: Sequence[str]) -> str:
  """Table 6: the server model of every federated engine, with the
  parameters a client pulls and is pushed per round (means over rounds
  and clients); '' without federated engines."""
  federated = _federated(results)
  if not federated:
    return ''
  header = ['Mode', 'rounds', 'Source', *domains, 'avg',
            'parameters pulled / client / round',
            'parameters pushed / client / round', 'pulled vs default']
  lines = ['| ' + ' | '.join(header) + ' |',
           '|---|---:|---|' + '---:|' * (len(header) - 3)]
  default_pulled = None
  for r in federated.values():
    if r['spec']['mode'] == 'default':
      default_pulled = _mean_traffic(r)[0]
  for r in federated.values():
    spec = r['spec']
    server = r['bleu']['server']
    pulled, pushed = _mean_traffic(r)
    ratio = (f'{pulled / default_pulled:.3f}×' if default_pulled
             else '–')
    cells = [f'{server[d]:.2f}' if d in server else '–' for d in domains]
    cells.append(f'{statistics.fmean(server.values()):.2f}')
    lines.append('| ' + ' | '.join([
        mode_label(spec), str(spec['rounds']), 'ours', *cells,
        f'{pulled:,.0f}', f'{pushed:,.0f}', ratio]) + ' |')
    if _paper_comparable(spec):
      paper = _paper_row(PAPER_SERVER[spec['mode']], domains)
      theirs = [f'{paper[d]:.2f}' if d in paper else '–' for d in domains]
      theirs.append(f'{paper["avg"]:.2f}')
      pulled_paper = PAPER_PULLED.get(spec['mode'])
      paper_ratio = (f'{pulled_paper / PAPER_PULLED["default"]:.3f}×'
                     if pulled_paper else '–')
      lines.append('| ' + ' | '.join([
          mode_label(spec), '5', 'paper',
          *theirs, f'{pulled_paper:,}' if pulled_paper else '–', '–',
          paper_ratio]) + ' |')
  return '\n'.join(lines)


def _mean_traffic(result: Mapping[str, Any]) -> tuple[float, float]:
  records = [r for r in result['records']['federated'] if 'train' in r]
  pulled = [r['train']['parameters_pulled_per_client'] for r in records]
  pushed = [r['train']['parameters_pushed_per_client'] for r in records]
  return statistics.fmean(pulled), statistics.fmean(pushed)


def nmt_tables_markdown(results: Mapping[str, Mapping[str, Any]], *,
                        domains: Sequence[str], generic_domain: str) -> str:
  """Every table the results fill, with headings, in the paper's order."""
  parts = []
  table = single_domain_table(results, domains, generic_domain)
  if table:
    parts.append('## Single-domain engines (the paper\'s Table 2)\n\n'
                 'BLEU of each engine on every domain\'s test set. The '
                 'paper gives no full table here; it reports that '
                 'single-domain engines are good in-domain and poor '
                 'elsewhere (its PHP engine scores 0 on WMT).\n\n' + table)
  table = centralized_table(results, domains)
  if table:
    parts.append('## Centralised baselines (the paper\'s Table 3)\n\n'
                 + table)
  table = modes_table(results, domains)
  if table:
    parts.append('## Server models and pulled parameters (the paper\'s '
                 'Tables 4 and 6)\n\n' + table)
  for name, r in _federated(results).items():
    parts.append(f'### {name}: server and client models (Table 4 layout)'
                 '\n\nA client model is the client\'s weights after its last '
                 'local fine-tuning.\n\n' + federated_table(r, domains))
  return '\n\n'.join(parts)


def paper_averages(summaries: Mapping[str, Mapping[str, Any]]
                   ) -> dict[str, float]:
  """The paper's five-test-set average for each summary (keyed by
  `nmt_seeds.report_key`) it reports: its 5-round modes and Table 3."""
  averages = {}
  for key, summary in summaries.items():
    spec = summary['spec']
    if spec['kind'] == 'federated' and _paper_comparable(spec):
      averages[key] = PAPER_SERVER[spec['mode']]['avg']
    elif spec['kind'] in PAPER_CENTRALIZED:
      averages[key] = PAPER_CENTRALIZED[spec['kind']]['avg']
  return averages


def _interval(value: float, ci95) -> str:
  if ci95 is None:
    return f'{value:.2f} (n=1)'
  return f'{value:.2f} [{ci95[0]:.2f}, {ci95[1]:.2f}]'


def seeds_table(summaries: Mapping[str, Mapping[str, Any]],
                domains: Sequence[str]) -> str:
  """Every engine's mean BLEU over seeds with its 95 % seed interval, per
  test set and on average, with the parameters a client pulls relative to
  the default mode and the time per seed (`nmt_seeds.summarize_engine`)."""
  header = ['Engine', 'seeds', *domains, 'avg [95% CI]', 'pulled vs default',
            'minutes per seed']
  lines = ['| ' + ' | '.join(header) + ' |',
           '|---|---:|' + '---:|' * (len(header) - 2)]
  for key, s in summaries.items():
    fraction = s.get('pulled_fraction')
    minutes = s.get('seconds_mean')
    lines.append('| ' + ' | '.join([
        key, str(len(s['seeds'])), *(f'{s["bleu"][d]:.2f}' for d in domains),
        _interval(s['bleu_avg'], s['bleu_avg_ci95']),
        f'{fraction:.3f}×' if fraction is not None else '–',
        f'{minutes / 60:.1f}' if minutes is not None else '–']) + ' |')
  return '\n'.join(lines)


def comparisons_table(comparisons: Sequence[Mapping[str, Any]]) -> str:
  """A - B of average BLEU with the seed and paired-bootstrap intervals
  and the verdict (`nmt_seeds.compare`)."""
  lines = ['| A − B | difference | 95% CI, seeds (paired) | 95% CI, paired '
           'bootstrap over test sentences | verdict |',
           '|---|---:|---:|---:|---|']
  for c in comparisons:
    seeds = c['seed_ci95']
    boot = c['bootstrap_ci95']
    lines.append(
        f'| {c["a"]} − {c["b"]} | {c["difference"]:+.2f} | '
        + (f'[{seeds[0]:+.2f}, {seeds[1]:+.2f}]' if seeds else '–')
        + f' | [{boot[0]:+.2f}, {boot[1]:+.2f}] | {c["verdict"]} |')
  return '\n'.join(lines)
