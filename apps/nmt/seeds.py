"""NMT engines over seeds: mean BLEU, 95 % intervals and paired differences.

`apps.nmt.experiment.run_nmt` trains every engine once per seed and
scores it on every domain's full test set. This module turns those runs into
what the report claims from:

*   `summarize_engine`: per engine (keyed by `report_key`: `data_combination`,
    `fedavg_default`, `dp_l`, ...), the per-seed BLEU, the mean over seeds of
    each domain's BLEU and of the five-test-set average (`bleu_avg`), each
    with a Student-t interval over seeds (`intervals.seed_interval`: training
    randomness on fixed test sets), and for a federated engine the
    parameters a client pulls per round relative to the default mode's of
    the same seed (`pulled_fraction`).
*   `bootstrap_average_difference`: SacreBLEU's paired bootstrap (resample
    each test set's sentences with replacement, the same draw for both
    systems, and recompute corpus BLEU from the sentences' sufficient
    statistics; 1,000 replicates, seed 12345, as `sacrebleu --paired-bs`)
    applied to the difference of the seed-averaged five-test-set average
    BLEU: every domain's test set is resampled at its own size, and every
    seed of both engines sees the same draw. It covers test-set sampling
    with the trained engines fixed.
*   `compare`: A - B with both intervals, the seed one over the per-seed
    paired differences, and the verdict of the one rule of every results
    page (`intervals.comparison_verdict`, `intervals.VERDICT_RULE`, stated
    in docs/results/README.md), of the average over all test sets or over
    the paper's domains only (`SHARED_AVG`).
"""

import collections
from collections.abc import Mapping, Sequence
import json
import math
import os
import re
import statistics
from typing import Any, Optional

import numpy as np

from apps.common import report_engine
from tff_nlp import errors
from tff_nlp.metrics import bleu
from tff_nlp.metrics import intervals

# An engine's averages (`summarize_engine`): over every test set (ours
# alone: the paper has no captions test set and we have no OpenSubtitles),
# and over the test sets of the domains the paper has too, the average to
# set beside the paper's (its cells of the same domains, averaged).
ALL_AVG = 'bleu_avg'
SHARED_AVG = 'bleu_shared_avg'

# SacreBLEU's paired bootstrap defaults (`sacrebleu --paired-bs`).
BOOTSTRAP_REPLICATES = 1000
BOOTSTRAP_SEED = 12345
# The paper's claims as (A, B) pairs of report keys: its Table 3/4 (the
# federated server above data combination) and Table 6's ordering
# default > DP_l > random > DP_g. Federated keys are compared at equal
# rounds (`comparison_pairs`).
PAPER_COMPARISONS = (('fedavg_default', 'data_combination'),
                     ('fedavg_default', 'dp_l'), ('dp_l', 'random'),
                     ('random', 'dp_g'), ('dp_l', 'dp_g'))
SERVER = 'server'


def report_key(spec: Mapping[str, Any]) -> str:
  """An engine's key in the report: 'generic', 'single_php_docs',
  'finetuned_php_docs',
  'data_combination', 'chained', 'fedavg_default', 'dp_l', 'dp_g',
  'random', 'dp_l_33', 'controllers'; a federated engine's change norm
  other than l2, its server optimizer and rounds other than the paper's 5
  are appended, e.g. 'dp_l_rms', 'fedavg_default_momentum',
  'fedavg_default_r2'."""
  kind = spec['kind']
  if kind in ('single', 'finetuned'):
    return f'{kind}_{spec["domain"]}'
  if kind == 'combined':
    return 'data_combination'
  if kind != 'federated':
    return kind
  key = 'fedavg_default' if spec['mode'] == 'default' else spec['mode']
  if spec.get('change_norm', 'l2') != 'l2':
    key += f'_{spec["change_norm"]}'
  if spec.get('server_optimizer', 'none') != 'none':
    key += f'_{spec["server_optimizer"]}'
  if spec['rounds'] != 5:
    key += f'_r{spec["rounds"]}'
  return key


def comparison_pairs(keys: Sequence[str]) -> list[tuple[str, str]]:
  """The `PAPER_COMPARISONS` among `keys` (`report_key`s): for the paper's
  5 rounds as named, and for any other rounds R present with each federated
  key's `_rR` suffix (e.g. 'fedavg_default_r2' - 'dp_l_r2'); data
  combination is compared with the federated default at every R. A
  variant of the 5-round default (e.g. 'fedavg_default_momentum') is
  compared with data combination and with the default."""
  suffixes = [''] + sorted({k[k.rindex('_r'):] for k in keys
                            if k.startswith('fedavg_default_r')})
  federated = {'fedavg_default', 'dp_l', 'dp_g', 'random'}
  pairs = []
  for suffix in suffixes:
    for a, b in PAPER_COMPARISONS:
      pair = tuple(k + suffix if k in federated else k for k in (a, b))
      if all(k in keys for k in pair) and pair not in pairs:
        pairs.append(pair)
  # 5-round variants only: a variant at R rounds has no R-round default
  # to stand beside here.
  variants = [k for k in keys if k.startswith('fedavg_default_')
              and not re.search(r'_r\d+$', k)]
  for variant in variants:
    for other in ('data_combination', 'fedavg_default'):
      if other in keys:
        pairs.append((variant, other))
  return pairs


def scored_model(result: Mapping[str, Any]) -> str:
  """The model an engine is compared by: the server of a federated one."""
  return SERVER if result['spec']['kind'] == 'federated' else result['engine']


def mean_pulled(result: Mapping[str, Any]) -> Optional[float]:
  """Parameters a client pulls per round, averaged over rounds and clients;
  None for a centralised engine."""
  records = [r for r in result.get('records', {}).get('federated', ())
             if 'train' in r]
  if not records:
    return None
  return statistics.fmean(r['train']['parameters_pulled_per_client']
                          for r in records)


def engine_seconds(result: Mapping[str, Any]) -> Optional[float]:
  """An engine's cost: its rounds' training time over every invocation plus
  its scoring (`train_seconds` + `score_seconds`). For results written
  before those were kept, a lower bound: the larger of the last
  invocation's `seconds` (all of a run never interrupted) and the sum of
  its rounds' `round_seconds` (the training of a resumed one)."""
  if 'train_seconds' in result:
    return result['train_seconds'] + result['score_seconds']
  rounds = sum(r.get('round_seconds', 0.0)
               for records in result.get('records', {}).values()
               for r in records)
  if result.get('seconds') is None and not rounds:
    return None
  return max(result.get('seconds') or 0.0, rounds)


# The report engine's records of an engine's seeds (`_records`): its BLEU
# per domain, keyed (_BLEU, domain), and its averages.
_ENGINE = 'engine'
_BLEU = 'bleu'


def _records(method: str, seeds: Mapping[str, Mapping[str, Any]]
             ) -> list[report_engine.Record]:
  """seed -> `summarize_engine`'s per-seed entry as `report_engine.Record`s:
  BLEU per domain, `ALL_AVG` and, if there, `SHARED_AVG` (no examples: the
  bootstrap is SacreBLEU's, `bootstrap_average_difference`)."""
  records = []
  for seed, entry in seeds.items():
    records += [report_engine.Record(method, seed, (_BLEU, d), value)
                for d, value in entry['bleu'].items()]
    records += [report_engine.Record(method, seed, key, entry[key])
                for key in (ALL_AVG, SHARED_AVG) if key in entry]
  return records


def summarize_engine(per_seed: Mapping[int, Mapping[str, Any]],
                     domains: Sequence[str],
                     default_pulled: Optional[Mapping[int, float]] = None,
                     shared_domains: Sequence[str] = ()
                     ) -> collections.OrderedDict:
  """One engine over its seeds.

  Args:
    per_seed: seed -> the engine's results (`run_engine`'s, with `bleu`,
      `spec`, `seconds` and, federated, `records`).
    domains: The test sets, in column order.
    default_pulled: seed -> the default mode's `mean_pulled`, for
      `pulled_fraction`.
    shared_domains: The test sets of `domains` the paper has too; if any,
      the average over them (`SHARED_AVG`) is summarised as `bleu_avg` is.

  Returns:
    `engine`, `spec`, `seeds` (seed -> `bleu` per domain, `bleu_avg`,
    `seconds` (`engine_seconds`), `run_dir`, and federated
    `parameters_pulled_per_client_round`),
    `bleu` and `bleu_ci95` per domain, `bleu_avg`, `bleu_avg_ci95` (`None`
    with one seed), with `shared_domains` the same of `bleu_shared_avg`
    (and per seed), `seconds_mean`, and federated `pulled_fraction` (the mean
    over seeds of pulled / default's pulled, when known).
  """
  first = next(iter(per_seed.values()))
  model = scored_model(first)
  seeds = collections.OrderedDict()
  for seed, result in per_seed.items():
    scores = result['bleu'][model]
    missing = [d for d in domains if d not in scores]
    if missing:
      raise errors.InputError(
          f'{result["engine"]}, seed {seed}: no BLEU on {missing}.')
    entry = collections.OrderedDict(
        bleu=collections.OrderedDict((d, scores[d]) for d in domains),
        bleu_avg=statistics.fmean(scores[d] for d in domains),
        **({SHARED_AVG: statistics.fmean(scores[d] for d in shared_domains)}
           if shared_domains else {}),
        seconds=engine_seconds(result), run_dir=result.get('run_dir'))
    pulled = mean_pulled(result)
    if pulled is not None:
      entry['parameters_pulled_per_client_round'] = pulled
    seeds[str(seed)] = entry
  summary = collections.OrderedDict(engine=first['engine'],
                                    spec=first['spec'], seeds=seeds)
  means = report_engine.method_intervals(
      report_engine.Table(_records(_ENGINE, seeds)), _ENGINE)
  per_domain = {d: means[_BLEU, d] for d in domains}
  summary['bleu'] = collections.OrderedDict(
      (d, i.estimate) for d, i in per_domain.items())
  summary['bleu_ci95'] = collections.OrderedDict(
      (d, i.bounds()) for d, i in per_domain.items())
  average = means[ALL_AVG]
  summary['bleu_avg'] = average.estimate
  summary['bleu_avg_ci95'] = average.bounds()
  if shared_domains:
    shared = means[SHARED_AVG]
    summary['shared_domains'] = list(shared_domains)
    summary[SHARED_AVG] = shared.estimate
    summary[SHARED_AVG + '_ci95'] = shared.bounds()
  summary['seconds_mean'] = statistics.fmean(
      s['seconds'] for s in seeds.values() if s['seconds'] is not None
  ) if any(s['seconds'] is not None for s in seeds.values()) else None
  pulled = [s.get('parameters_pulled_per_client_round')
            for s in seeds.values()]
  if all(p is not None for p in pulled):
    summary['parameters_pulled_per_client_round'] = statistics.fmean(pulled)
    ratios = [p / default_pulled[int(seed)]
              for seed, p in zip(seeds, pulled)
              if default_pulled and default_pulled.get(int(seed))]
    summary['pulled_fraction'] = (statistics.fmean(ratios)
                                  if len(ratios) == len(pulled) else None)
  return summary


def load_statistics(path: str, domains: Sequence[str]
                    ) -> dict[str, np.ndarray]:
  """domain -> `bleu.sentence_statistics` of a predictions file.

  Args:
    path: An engine's `predictions/<model>.jsonl` (one JSON object per
      line with `domain`, `reference` and `hypothesis`).
    domains: The domains needed.

  Raises:
    InputError: If the file is missing, a line is not such an object, or
      a domain has no sentence (naming the file and line).
  """
  if not os.path.isfile(path):
    raise errors.InputError(f'{path}: no predictions file there.')
  pairs = collections.defaultdict(lambda: ([], []))
  with open(path, encoding='utf-8') as f:
    for number, line in enumerate(f, start=1):
      try:
        row = json.loads(line)
        hypotheses, references = pairs[row['domain']]
        hypotheses.append(row['hypothesis'])
        references.append(row['reference'])
      except (ValueError, KeyError, TypeError) as e:
        raise errors.InputError(
            f'{path}:{number}: expected a JSON object with domain, reference '
            f'and hypothesis ({e}).') from None
  missing = [d for d in domains if d not in pairs]
  if missing:
    raise errors.InputError(f'{path}: no predictions for {missing}.')
  return {d: bleu.sentence_statistics(*pairs[d]) for d in domains}


def _average_bleu(stats: Mapping[str, np.ndarray],
                  counts: Mapping[str, np.ndarray]) -> float:
  return statistics.fmean(
      bleu.score_from_statistics(counts[d] @ stats[d]) for d in counts)


def bootstrap_average_difference(
    a: Sequence[Mapping[str, np.ndarray]],
    b: Sequence[Mapping[str, np.ndarray]],
    *,
    num_replicates: int = BOOTSTRAP_REPLICATES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = intervals.DEFAULT_CONFIDENCE,
) -> intervals.Interval:
  """Paired bootstrap of mean-over-seeds average BLEU, A - B.

  Args:
    a: Per seed of engine A, domain -> `sentence_statistics` of its test
      translations (every seed and both engines: the same domains and
      sentences, in the same order).
    b: The same for engine B (its seeds need not pair with A's).
    num_replicates: Bootstrap replicates.
    seed: Seed of the draws: replicate by replicate, domain by domain in
      the order of `a[0]`, `rng.integers(0, n_d, n_d)`.
    confidence: Coverage of the percentile interval.

  Returns:
    The point estimate on the test sets as they are, and the percentile
    interval of the replicates.

  Raises:
    ValueError: If an engine has no seed, or the domains or sentence counts
      differ.
  """
  if not a or not b:
    raise ValueError('Each engine needs at least one seed.')
  domains = list(a[0])
  sizes = {d: len(a[0][d]) for d in domains}
  for runs in (a, b):
    for stats in runs:
      if list(stats) != domains or any(len(stats[d]) != sizes[d]
                                       for d in domains):
        raise ValueError(f'Every run must score the same sentences of '
                         f'{sizes}.')

  def difference(counts):
    return (statistics.fmean(_average_bleu(s, counts) for s in a)
            - statistics.fmean(_average_bleu(s, counts) for s in b))

  point = difference({d: np.ones(n, np.int64) for d, n in sizes.items()})
  rng = np.random.default_rng(seed)
  replicates = []
  for _ in range(num_replicates):
    counts = {d: np.bincount(rng.integers(0, n, n), minlength=n)
              for d, n in sizes.items()}
    replicates.append(difference(counts))
  low, high = np.quantile(replicates, [(1 - confidence) / 2,
                                       (1 + confidence) / 2])
  return intervals.Interval(point, float(low), float(high))


def compare(a: Mapping[str, Any], b: Mapping[str, Any], *,
            a_statistics: Sequence[Mapping[str, np.ndarray]],
            b_statistics: Sequence[Mapping[str, np.ndarray]],
            names: tuple[str, str],
            average: str = ALL_AVG) -> collections.OrderedDict:
  """A - B of two `summarize_engine` summaries, on one of their averages.

  The seed interval is over the per-seed differences of `average` on the
  seeds both ran (paired: the same seed's data order; `report_engine.compare`
  of the seed records); with fewer than two such seeds it is undefined
  (None). The bootstrap is `bootstrap_average_difference` of every seed of
  each, over the domains of the statistics given (those of `average`: every
  test set for `ALL_AVG`, the shared ones for `SHARED_AVG`). The verdict is
  `intervals.comparison_verdict` of the two (`report_engine.Difference.
  with_bootstrap`): the one rule of every results page
  (`intervals.VERDICT_RULE`).
  """
  comparison = report_engine.Comparison('A', 'B', average, names=names)
  table = report_engine.Table(_records('A', a['seeds'])
                              + _records('B', b['seeds']))
  boot = bootstrap_average_difference(a_statistics, b_statistics)
  if any(s in b['seeds'] for s in a['seeds']):
    difference = report_engine.compare(table, comparison)
  else:  # No seed paired: no seed interval.
    undefined = intervals.Interval(math.nan, math.nan, math.nan)
    difference = report_engine.Difference(comparison, [], [], undefined,
                                          None, '')
  difference = difference.with_bootstrap(boot)
  name_a, name_b = names
  return collections.OrderedDict(
      a=name_a, b=name_b, average=average,
      difference=a[average] - b[average],
      paired_seeds=[int(s) for s in difference.seeds],
      seed_ci95=difference.seed.bounds(),
      bootstrap_ci95=[boot.low, boot.high],
      bootstrap_replicates=BOOTSTRAP_REPLICATES,
      verdict=difference.verdict)
