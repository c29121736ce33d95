"""The dynamic-pulling paper's BLEU tables, ours beside the paper's numbers.

Passban et al., NAACL 2022 (`shared/docs/dynamic_pulling.md`) report BLEU of
German→English engines on the test sets of their domains: single-domain
engines (Table 2), centralised data combination and chained fine-tuning
(Table 3), the federated server and client models (Table 4) and the dynamic
pulling modes with their pulled parameters (Table 6). `nmt_tables_markdown`
lays out the results of `apps.nmt.experiment.run_nmt` the same way.

Our domains differ in one place: the paper's OpenSubtitles client is not
available here, `multi30k_captions` (image captions) stands in its place.
So the paper's five-test-set average and ours average different test sets
and are never set side by side: beside the paper, an average is over the
four domains both have (news, TED, PHP, Ubuntu), the paper's recomputed
from its own cells of them (`paper_shared_average`). Our average over all
our test sets is printed as ours only, and the paper's own average (with
OpenSubtitles) as the paper's only.

The report also says how the translations look (`output_health`): BLEU of
1-4 leaves open whether an engine translates poorly or not at all, and the
share of outputs that loop on a character sequence or are far shorter or
longer than the reference tells which.
"""

import collections
from collections.abc import Mapping, Sequence
import re
import statistics
from typing import Any, Optional

from apps.common import report_engine
from tff_nlp.metrics import bleu

# Our domain -> the paper's column.
PAPER_DOMAINS = {'wmt_news': 'WMT', 'ted_iwslt14': 'TED', 'php_docs': 'PHP',
                 'ubuntu_l10n': 'UB'}
# Table 4/6: the server model after 5 rounds (BLEU per paper column, and
# the paper's own average over its five, OS = OpenSubtitles included).
PAPER_SERVER = {
    'default': {'WMT': 33.97, 'OS': 19.17, 'TED': 30.80, 'PHP': 37.32,
                'UB': 47.90, 'avg': 33.83},
    'dp_l': {'WMT': 29.28, 'OS': 19.17, 'TED': 30.88, 'PHP': 36.33,
             'UB': 45.74, 'avg': 32.28},
    'dp_g': {'WMT': 30.74, 'OS': 18.28, 'TED': 27.61, 'PHP': 13.69,
             'UB': 32.16, 'avg': 24.49},
    'random': {'WMT': 24.58, 'OS': 19.16, 'TED': 30.57, 'PHP': 35.33,
               'UB': 42.50, 'avg': 30.43},
}
# Parameters a client pulls (sends) per round in the paper's model.
PAPER_PULLED = {'default': 45_724_160, 'dp_l': 22_863_104}
# Table 3: averages over the paper's five test sets (no per-domain cells, so
# no average over the shared domains).
PAPER_CENTRALIZED = {'combined': {'avg': 32.0}, 'chained': {'avg': 21.8}}
MODE_LABELS = {
    'default': 'FedAvg, all tensors (default)',
    'dp_l': 'DP_l (less active half)',
    'dp_g': 'DP_g (most active half)',
    'random': 'random (same count)',
    'dp_l_33': 'DP_l 33%, push and pull',
    'controllers': 'Controllers',
}


# Column headings of the averages (module docstring).
AVG_SHARED = 'avg, shared domains'
AVG_OURS = 'avg, all ours (ours only)'
AVG_PAPER = "paper's own avg (its 5, with OS)"
MISSING = '–'


def shared_domains(domains: Sequence[str]) -> list[str]:
  """The domains of `domains` the paper has too, in their order."""
  return [d for d in domains if d in PAPER_DOMAINS]


def paper_shared_average(paper: Mapping[str, float],
                         domains: Sequence[str]) -> Optional[float]:
  """The mean of the paper's cells of `shared_domains(domains)`, or None
  when it gives no cell for one of them (e.g. Table 3: averages only).

  E.g. the default server over news, TED, PHP and Ubuntu: (33.97 + 30.80
  + 37.32 + 47.90) / 4 = 37.4975, against its own 33.83 with OpenSubtitles.
  """
  columns = [PAPER_DOMAINS[d] for d in shared_domains(domains)]
  if not columns or any(c not in paper for c in columns):
    return None
  return statistics.fmean(paper[c] for c in columns)


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


def _number(value: Optional[float]) -> str:
  return MISSING if value is None else f'{value:.2f}'


def _ours_cells(scores: Mapping[str, float],
                domains: Sequence[str]) -> list[str]:
  """Our BLEU per domain, the shared-domain average, our average, and no
  paper average."""
  shared = shared_domains(domains)
  return ([_number(scores.get(d)) for d in domains]
          + [_number(statistics.fmean(scores[d] for d in shared)
                     if shared else None),
             _number(statistics.fmean(scores[d] for d in domains)),
             MISSING])


def _paper_cells(paper: Mapping[str, float],
                 domains: Sequence[str]) -> list[str]:
  """The paper's cells under our domains, its shared-domain average, no
  average of ours, and its own average."""
  cells = [_number(paper.get(PAPER_DOMAINS.get(d, ''))) for d in domains]
  return cells + [_number(paper_shared_average(paper, domains)), MISSING,
                  _number(paper.get('avg'))]


def _table(first: Sequence[str], rows: Sequence[Sequence[str]],
           domains: Sequence[str], last: Sequence[str] = ()) -> str:
  """A Markdown table: `first` columns (left-aligned), the domains and the
  three averages, then `last` columns."""
  header = [*first, *domains, AVG_SHARED, AVG_OURS, AVG_PAPER, *last]
  lines = ['| ' + ' | '.join(header) + ' |',
           '|' + '---|' * len(first) + '---:|' * (len(header) - len(first))]
  lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
  return '\n'.join(lines)


def single_domain_table(results: Mapping[str, Mapping[str, Any]],
                        domains: Sequence[str], generic_domain: str) -> str:
  """Table 2: each domain's engine (the generic engine for the generic
  domain), from scratch or fine-tuned from the generic engine, on every
  test set; '' if there is none."""
  rows = []
  for name, r in results.items():
    spec = r['spec']
    if spec['kind'] == 'generic':
      label = f'{generic_domain} engine (generic)'
    elif spec['kind'] == 'single':
      label = f'{spec["domain"]} engine'
    elif spec['kind'] == 'finetuned':
      label = f'{spec["domain"]} engine, from the generic'
    else:
      continue
    rows.append([label, 'ours', *_ours_cells(r['bleu'][name], domains)])
  return _table(['Model', 'Source'], rows, domains) if rows else ''


def centralized_table(results: Mapping[str, Mapping[str, Any]],
                      domains: Sequence[str]) -> str:
  """Table 3: data combination and chained fine-tuning; '' if neither.
  The paper gives only its five-domain averages here."""
  rows = []
  for name, r in results.items():
    kind = r['spec']['kind']
    if kind in ('combined', 'chained'):
      rows.append([name, 'ours', *_ours_cells(r['bleu'][name], domains)])
      if kind in PAPER_CENTRALIZED:
        rows.append([name, 'paper',
                     *_paper_cells(PAPER_CENTRALIZED[kind], domains)])
  return _table(['Model', 'Source'], rows, domains) if rows else ''


def federated_table(result: Mapping[str, Any],
                    domains: Sequence[str]) -> str:
  """Table 4: a federated engine's server model and client models."""
  rows = []
  for model, scores in result['bleu'].items():
    rows.append([model, 'ours', *_ours_cells(scores, domains)])
    if model == 'server' and _paper_comparable(result['spec']):
      rows.append([model, 'paper', *_paper_cells(
          PAPER_SERVER[result['spec']['mode']], domains)])
  return _table(['Model', 'Source'], rows, domains)


def modes_table(results: Mapping[str, Mapping[str, Any]],
                domains: Sequence[str]) -> str:
  """Table 6: the server model of every federated engine, with the
  parameters a client pulls and is pushed per round (means over rounds
  and clients); '' without federated engines."""
  federated = _federated(results)
  if not federated:
    return ''
  default_pulled = None
  for r in federated.values():
    if r['spec']['mode'] == 'default':
      default_pulled = _mean_traffic(r)[0]
  rows = []
  for r in federated.values():
    spec = r['spec']
    pulled, pushed = _mean_traffic(r)
    ratio = (f'{pulled / default_pulled:.3f}×' if default_pulled
             else MISSING)
    rows.append([mode_label(spec), str(spec['rounds']), 'ours',
                 *_ours_cells(r['bleu']['server'], domains),
                 f'{pulled:,.0f}', f'{pushed:,.0f}', ratio])
    if _paper_comparable(spec):
      pulled_paper = PAPER_PULLED.get(spec['mode'])
      paper_ratio = (f'{pulled_paper / PAPER_PULLED["default"]:.3f}×'
                     if pulled_paper else MISSING)
      rows.append([mode_label(spec), '5', 'paper',
                   *_paper_cells(PAPER_SERVER[spec['mode']], domains),
                   f'{pulled_paper:,}' if pulled_paper else MISSING,
                   MISSING, paper_ratio])
  return _table(['Mode', 'rounds', 'Source'], rows, domains,
                ['parameters pulled / client / round',
                 'parameters pushed / client / round', 'pulled vs default'])


def _mean_traffic(result: Mapping[str, Any]) -> tuple[float, float]:
  records = [r for r in result['records']['federated'] if 'train' in r]
  pulled = [r['train']['parameters_pulled_per_client'] for r in records]
  pushed = [r['train']['parameters_pushed_per_client'] for r in records]
  return statistics.fmean(pulled), statistics.fmean(pushed)


def averages_note(domains: Sequence[str]) -> str:
  """What the three average columns average (under every table)."""
  shared = shared_domains(domains)
  ours_only = [d for d in domains if d not in PAPER_DOMAINS]
  return (f'"{AVG_SHARED}": the mean over {", ".join(shared)}, the test '
          'sets the paper has too (for the paper, the mean of its cells '
          f'of them): the only average to compare with the paper. '
          f'"{AVG_OURS}": over all {len(domains)} of our test sets'
          + (f' ({", ".join(ours_only)} has no counterpart in the paper)'
             if ours_only else '')
          + f'. "{AVG_PAPER}": the paper\'s reported average over its five '
          'test sets, OpenSubtitles (OS) included, which we do not have.')


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
                 'The paper gives only its five-domain averages here, so '
                 'nothing of ours compares with them like for like.\n\n'
                 + table)
  table = modes_table(results, domains)
  if table:
    parts.append('## Server models and pulled parameters (the paper\'s '
                 'Tables 4 and 6)\n\n' + table)
  for name, r in _federated(results).items():
    parts.append(f'### {name}: server and client models (Table 4 layout)'
                 '\n\nA client model is the client\'s weights after its last '
                 'local fine-tuning.\n\n' + federated_table(r, domains))
  if parts:
    parts.append(averages_note(domains))
  return '\n\n'.join(parts)


def paper_averages(summaries: Mapping[str, Mapping[str, Any]],
                   domains: Sequence[str]) -> dict[str, float]:
  """The paper's shared-domain average (`paper_shared_average`) for each
  summary (keyed by `nmt_seeds.report_key`) of a 5-round mode it reports;
  Table 3 has none (averages over its five only)."""
  averages = {}
  for key, summary in summaries.items():
    spec = summary['spec']
    if spec['kind'] == 'federated' and _paper_comparable(spec):
      average = paper_shared_average(PAPER_SERVER[spec['mode']], domains)
      if average is not None:
        averages[key] = average
  return averages


def _interval(value: Optional[float], ci95) -> str:
  if value is None:
    return MISSING
  return f'{value:.2f} ' + report_engine.interval_cell(
      ci95, scale=1.0, missing='(n=1)')


def seeds_table(summaries: Mapping[str, Mapping[str, Any]],
                domains: Sequence[str]) -> str:
  """Every engine's mean BLEU over seeds with its 95 % seed interval, per
  test set and on both averages, with the parameters a client pulls
  relative to the default mode and the time per seed
  (`nmt_seeds.summarize_engine`)."""
  header = ['Engine', 'seeds', *domains, f'{AVG_SHARED} [95% CI]',
            f'{AVG_OURS} [95% CI]', 'pulled vs default', 'minutes per seed']
  lines = ['| ' + ' | '.join(header) + ' |',
           '|---|---:|' + '---:|' * (len(header) - 2)]
  for key, s in summaries.items():
    fraction = s.get('pulled_fraction')
    minutes = s.get('seconds_mean')
    lines.append('| ' + ' | '.join([
        key, str(len(s['seeds'])), *(f'{s["bleu"][d]:.2f}' for d in domains),
        _interval(s.get('bleu_shared_avg'), s.get('bleu_shared_avg_ci95')),
        _interval(s['bleu_avg'], s['bleu_avg_ci95']),
        f'{fraction:.3f}×' if fraction is not None else MISSING,
        f'{minutes / 60:.1f}' if minutes is not None else MISSING]) + ' |')
  return '\n'.join(lines)


def comparisons_table(comparisons: Sequence[Mapping[str, Any]]) -> str:
  """A - B of an average BLEU with the seed and paired-bootstrap intervals
  and the verdict (`nmt_seeds.compare`)."""
  lines = ['| A − B | difference | 95% CI, seeds (paired) | 95% CI, paired '
           'bootstrap over test sentences | verdict |',
           '|---|---:|---:|---:|---|']
  for c in comparisons:
    lines.append(report_engine.markdown_row([
        f'{c["a"]} − {c["b"]}', *report_engine.difference_cells(
            c['difference'], c['seed_ci95'], c['bootstrap_ci95'],
            c['verdict'], scale=1.0, missing=MISSING)]))
  return '\n'.join(lines)


# Degenerate output. A loop: one unit of 1-10 characters repeated at least
# 5 times in a row, the run at least LOOP_MIN_CHARACTERS long
# ('1000000000000', 'TETETETETE', 'ooh, ooh, ooh, ooh, ooh, '); 0.06 % of
# our references have one (PHP code, '9999....').
_LOOP = re.compile(r'(.{1,10}?)\1{4,}', re.DOTALL)
LOOP_MIN_CHARACTERS = 10
# Outside these bounds of hypothesis / reference characters an output is
# far too short or too long.
SHORT_RATIO = 0.5
LONG_RATIO = 2.0
HEALTH_FIELDS = ('loops', 'short', 'long', 'degenerate')


def has_loop(text: str) -> bool:
  """Whether `text` repeats a unit of 1-10 characters 5+ times in a row
  over at least `LOOP_MIN_CHARACTERS` characters."""
  return any(len(m.group(0)) >= LOOP_MIN_CHARACTERS
             for m in _LOOP.finditer(text))


def _flags(row: Mapping[str, str]) -> list[str]:
  """Why one (hypothesis, reference) row is degenerate, if it is."""
  ratio = len(row['hypothesis']) / max(1, len(row['reference']))
  return ([f for f, on in (('loop', has_loop(row['hypothesis'])),
                           ('short', ratio < SHORT_RATIO),
                           ('long', ratio > LONG_RATIO)) if on])


def output_health(rows: Sequence[Mapping[str, str]]
                  ) -> collections.OrderedDict:
  """How one engine's test translations look.

  Args:
    rows: Its predictions (`hypothesis` and `reference` of each test
      sentence).

  Returns:
    `sentences`; the shares of hypotheses with a loop (`has_loop`), shorter
    than `SHORT_RATIO` or longer than `LONG_RATIO` times the reference in
    characters, and with any of these (`degenerate`); `length_ratio`, all
    hypothesis characters over all reference characters.
  """
  flags = [_flags(r) for r in rows]
  n = len(rows)
  return collections.OrderedDict(
      sentences=n,
      loops=sum('loop' in f for f in flags) / n,
      short=sum('short' in f for f in flags) / n,
      long=sum('long' in f for f in flags) / n,
      degenerate=sum(bool(f) for f in flags) / n,
      length_ratio=(sum(len(r['hypothesis']) for r in rows)
                    / max(1, sum(len(r['reference']) for r in rows))))


def reference_loops(rows: Sequence[Mapping[str, str]]) -> float:
  """The share of references with a loop: the measure's false alarms."""
  return sum(has_loop(r['reference']) for r in rows) / len(rows)


def degenerate_examples(rows: Sequence[Mapping[str, str]],
                        count: int = 3) -> list[collections.OrderedDict]:
  """One degenerate row (`output_health`) per domain, for the first `count`
  domains in file order that have one: the domain's first loop, else its
  first row far too short or long; with its line number (1-based) and why.
  Loops first, because they show most plainly that the model is not
  translating."""
  loops, others = {}, {}
  for number, row in enumerate(rows, start=1):
    flags = _flags(row)
    if flags:
      found = loops if 'loop' in flags else others
      found.setdefault(row['domain'], collections.OrderedDict(
          line=number, domain=row['domain'], why=flags,
          source=row['source'], reference=row['reference'],
          hypothesis=row['hypothesis']))
  domains = list(dict.fromkeys(r['domain'] for r in rows))
  return [loops.get(d) or others[d] for d in domains
          if d in loops or d in others][:count]


def health_table(health: Mapping[str, Mapping[str, Any]],
                 reference_loop_share: Optional[float] = None) -> str:
  """Per engine (mean over its seeds): BLEU on the shared domains and the
  shares of `output_health`, in %."""
  lines = ['| Engine | seeds | BLEU, shared domains | loops | shorter than '
           f'{SHORT_RATIO:g}× | longer than {LONG_RATIO:g}× | any of these '
           '| hypothesis / reference characters |',
           '|---|---:|---:|---:|---:|---:|---:|---:|']
  for key, h in health.items():
    lines.append('| ' + ' | '.join([
        key, str(h['seeds']), _number(h.get('bleu')),
        *(f'{100 * h[f]:.1f} %' for f in HEALTH_FIELDS),
        f'{h["length_ratio"]:.2f}']) + ' |')
  if reference_loop_share is not None:
    lines.append(f'| (the references) | – | – | '
                 f'{100 * reference_loop_share:.2f} % | – | – | – | 1.00 |')
  return '\n'.join(lines)


def _code(text: str) -> str:
  """`text` as inline code, verbatim (a longer fence if it has a `)."""
  fence = '``' if '`' in text else '`'
  pad = ' ' if fence == '``' else ''
  return f'{fence}{pad}{text}{pad}{fence}'


def examples_markdown(engine: str, seed: Any,
                      examples: Sequence[Mapping[str, Any]]) -> str:
  """Degenerate examples, verbatim, as a list."""
  return '\n'.join(
      f'- {engine}, seed {seed}, {e["domain"]} (predictions line '
      f'{e["line"]}; {", ".join(e["why"])}):\n'
      f'  source {_code(e["source"])}\n'
      f'  reference {_code(e["reference"])}\n'
      f'  ours {_code(e["hypothesis"])}' for e in examples)
