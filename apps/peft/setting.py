"""What the model saw in the fine-tuning comparison: data, cuts, test, protocol.

Every results page opens with this section (`docs/results/README.md`). For
the PEFT benchmark it matters more than usual: exact match is 0.0 in every
run, and without the section a reader cannot tell that the runs trained on
capped subsets, or that about half of the test queries could never have been
matched because their SQL is longer than the decoder's length.

The numbers come from the runs' own records, not from a new tokenization:
each run's `results.json` holds its data configuration (`config`), the
examples it used per client and split (`examples`) and what its
`tasks.text2sql.prepare_task` cut with the tokenizer and lengths that run
used (`truncated`: inputs longer than `max_source_length` with END; SQL
whose pieces plus END exceed `max_target_length`). So the section needs
neither the pre-trained run's tokenizer nor a model, and reports exactly
what was trained and scored. Only the full split sizes ("400 of 2,629")
come from the data (`split_sizes`).

A cut target cannot be matched exactly: training saw only its first
`max_target_length - 1` pieces followed by END, and decoding writes at most
`max_target_length` tokens. (Strictly, a gold SQL of exactly
`max_target_length` pieces could still come out whole if the decoder ran to
its limit without END, which its training never showed it; the records do
not say how many such queries there are.)
"""

import collections
from collections.abc import Mapping, Sequence
import json
import os
from typing import Any, Optional

from tff_nlp.data import text2sql as text2sql_data
from tff_nlp.metrics import intervals

# `results.json` of a run (as `experiments.text2sql.RESULTS_FILE`; not
# imported, so that reading a record loads no TensorFlow).
_RUN_RESULTS = 'results.json'
SPLITS = ('train', 'dev', 'test')


def split_sizes(clients: Sequence[str], *, data_dir: Optional[str],
                with_values: bool = True) -> dict[str, dict[str, int]]:
  """Client -> split -> number of examples in the data (before any cap)."""
  loaded = text2sql_data.load_clients(clients, data_dir=data_dir,
                                      with_values=with_values)
  return {c: {s: len(getattr(loaded[c], s)) for s in SPLITS}
          for c in clients}


def read_run(run_dir: str) -> dict[str, Any]:
  """A run's `results.json`."""
  with open(os.path.join(run_dir, _RUN_RESULTS), encoding='utf-8') as f:
    return json.load(f)


def _tokenizer(experiment: Mapping[str, Any],
               vocabulary_size: Optional[int]) -> str:
  """Which tokenizer a run's configuration says it used."""
  data = experiment.get('data', {})
  pieces = f', {vocabulary_size:,} pieces' if vocabulary_size else ''
  # The same run's tokenizer whether a variant starts from that run
  # (`init_from`) or takes only its tokenizer (`tokenizer_from`); named by
  # the run's folder, not its path, which differs between machines.
  source = experiment.get('init_from') or experiment.get('tokenizer_from')
  if source:
    name = os.path.basename(os.path.normpath(source))
    return (f"the pre-trained model's SentencePiece tokenizer "
            f'(`{name}`{pieces})')
  if data.get('tokenizer') == 'copy_words':
    return f'word tokens with copying (`copy_words`{pieces})'
  return ("a SentencePiece tokenizer trained on the clients' training text"
          f'{pieces}')


def _setting_key(run: Mapping[str, Any]) -> str:
  """What makes two runs see the same test data the same way: their data
  configuration (but the seed, which draws the training subset), their
  tokenizer, and what they used and cut of the dev and test splits."""
  experiment = run.get('config', {}).get('experiment', {})
  return json.dumps({
      'data': experiment.get('data'),
      'tokenizer': _tokenizer(experiment, run.get('vocabulary_size')),
      'eval': {c: {s: (n[s], run.get('truncated', {}).get(c, {}).get(s))
                   for s in ('dev', 'test')}
               for c, n in run.get('examples', {}).items()},
  }, sort_keys=True)


def _span(values: Sequence[int]) -> list[int]:
  return [min(values), max(values)]


def setting_json(runs: Mapping[str, Sequence[Mapping[str, Any]]],
                 sizes: Optional[Mapping[str, Mapping[str, int]]] = None
                 ) -> list[dict[str, Any]]:
  """The settings the variants' runs saw, from their `results.json`.

  Args:
    runs: Variant name -> its runs' `results.json` contents (every method
      and seed).
    sizes: Client -> split -> examples in the data (`split_sizes`), or None
      (then "of how many" is not reported).

  Returns:
    One entry per distinct setting (`_setting_key`; one when every variant
    uses the same data, tokenizer and lengths): `variants`, `runs`,
    `tokenizer`, `with_values`, `lowercase_sql`, `schema_columns`,
    `max_source_length`, `max_target_length`, `max_train_examples`,
    `max_eval_examples`; `per_client`: client -> `train` (examples used:
    [least, most] over the runs), `train_split`, `test`, `test_split`,
    `test_inputs_cut`, `test_targets_cut` (the test queries that cannot be
    matched exactly), `train_inputs_cut` and `train_targets_cut` ([least,
    most] over the runs: each seed draws its own training subset); `total`:
    the same summed over the clients. Runs without `examples` or
    `truncated` (older records) give entries with those fields None.
  """
  groups = collections.OrderedDict()
  for variant, variant_runs in runs.items():
    for run in variant_runs:
      group = groups.setdefault(_setting_key(run), {'variants': [],
                                                    'runs': []})
      if variant not in group['variants']:
        group['variants'].append(variant)
      group['runs'].append(run)
  return [_group_json(g['variants'], g['runs'], sizes)
          for g in groups.values()]


def _group_json(variants: Sequence[str], runs: Sequence[Mapping[str, Any]],
                sizes: Optional[Mapping[str, Mapping[str, int]]]
                ) -> dict[str, Any]:
  first = runs[0]
  experiment = first.get('config', {}).get('experiment', {})
  data = experiment.get('data', {})
  examples = first.get('examples') or {}
  recorded = all(r.get('truncated') for r in runs)

  def cut(run, client, split, what):
    return run['truncated'][client][split][what]

  per_client = collections.OrderedDict()
  for client in examples:
    size = (sizes or {}).get(client, {})
    entry = collections.OrderedDict(
        train=_span([r['examples'][client]['train'] for r in runs]),
        train_split=size.get('train'),
        test=examples[client]['test'], test_split=size.get('test'))
    for split in ('test', 'train'):
      for what in ('sources', 'targets'):
        key = f'{split}_{"inputs" if what == "sources" else what}_cut'
        if not recorded:
          entry[key] = None
        elif split == 'test':
          entry[key] = cut(first, client, split, what)
        else:
          entry[key] = _span([cut(r, client, split, what) for r in runs])
    per_client[client] = entry

  def total(key):
    values = [e[key] for e in per_client.values()]
    if not values or any(v is None for v in values):
      return None
    if isinstance(values[0], list):
      # Sums of the per-run values, run by run (not of the spans).
      return _span([sum(r['examples'][c]['train'] if key == 'train' else
                        cut(r, c, 'train', 'sources' if 'inputs' in key
                            else 'targets') for c in per_client)
                    for r in runs])
    return sum(values)

  return collections.OrderedDict(
      variants=list(variants), runs=len(runs),
      tokenizer=_tokenizer(experiment, first.get('vocabulary_size')),
      with_values=data.get('with_values'),
      lowercase_sql=bool(data.get('lowercase_sql')),
      schema_columns=data.get('schema_columns'),
      max_source_length=data.get('max_source_length'),
      max_target_length=data.get('max_target_length'),
      max_train_examples=data.get('max_train_examples'),
      max_eval_examples=data.get('max_eval_examples'),
      per_client=per_client,
      total=collections.OrderedDict(
          (key, total(key)) for key in next(iter(per_client.values()), {})))


def _count(span) -> str:
  """'400' or '246–267' (a [least, most] span), or '?'."""
  if span is None:
    return '?'
  if isinstance(span, list):
    return (f'{span[0]:,}' if span[0] == span[1]
            else f'{span[0]:,}–{span[1]:,}')
  return f'{span:,}'


def _of(used, split) -> str:
  return _count(used) + ('' if split is None else f' of {split:,}')


def markdown_lines(settings: Sequence[Mapping[str, Any]], *,
                   rule_link: str = '../README.md') -> list[str]:
  """The report's "What the model saw" section, in Markdown.

  Args:
    settings: `setting_json`'s entries.
    rule_link: Where `docs/results/README.md` is from the report.
  """
  lines = ['## What the model saw', '']
  for setting in settings:
    if len(settings) > 1:
      lines += [f'### {", ".join(setting["variants"])}', '']
    lines += _setting_lines(setting)
  lines += [f'* {intervals.VERDICT_RULE} ([the rule of every results '
            f'page]({rule_link}))', '']
  return lines


def _setting_lines(s: Mapping[str, Any]) -> list[str]:
  if not s['max_target_length'] or not s['per_client']:
    # E.g. runs recorded before their data configuration was.
    return [f'{s["runs"]} runs ({", ".join(s["variants"])}): their records '
            'do not say what data they used.', '']
  total = s['total']
  source, target = s['max_source_length'], s['max_target_length']
  caps = s['max_train_examples'] or {}
  cap_text = ', '.join(
      [f'{name} {value}' for name, value in caps.get('overrides', [])]
      + ([f'every other client {caps["default"]}'] if caps.get('default')
         else []))
  # Test counts that differ from the data's split sizes (where known).
  unlike_data = any(e['test_split'] is not None and e['test'] != e['test_split']
                    for e in s['per_client'].values())
  never = total.get('test_targets_cut')
  lines = [
      f'{s["runs"]} runs ({", ".join(s["variants"])}), from their own records '
      '(`results.json`: `examples`, `truncated`, `config`).', '',
      '* **Training data: capped subsets.** '
      + (f'Each run trains on a seeded random subset per client '
         f'(`max_train_examples`: {cap_text}): '
         f'{_of(total.get("train"), total.get("train_split"))} training '
         'questions in all.' if cap_text else
         f'All training questions: {_of(total.get("train"), None)}.'),
      f'* **Truncation:** inputs are cut at {source} tokens (END included; '
      'the question comes first, so a cut drops table names first) and SQL '
      f'at {target} ({target - 1} pieces and END). A cut SQL cannot be '
      f'matched exactly (training shows only its first {target - 1} pieces, '
      f'and decoding stops at {target} tokens): '
      f'**{_count(never)} of {_count(total.get("test"))} test queries can '
      'never be matched exactly**; '
      f'{_count(total.get("test_inputs_cut"))} test inputs are cut.',
      '* **Test set:** '
      + ('every client\'s full test split' if not s['max_eval_examples'] else
         f'a seeded subset of at most {s["max_eval_examples"]} test '
         'questions per client (`max_eval_examples`)')
      + f' ({_count(total.get("test"))} questions), the same for every run'
      + (': fewer than the data holds, see the table' if unlike_data
         else '') + '.',
      '* **Protocol:** '
      + ('the question with its values → SQL with values'
         if s['with_values'] else
         'the question with anonymised variables → SQL with variables, '
         'values filled in before scoring')
      + ('; the input is the question followed by the database\'s table '
         'names' + (' and columns' if s['schema_columns'] else ''))
      + ('; SQL lower-cased outside its quoted values, in the training '
         'targets and in the gold that exact match compares '
         '(`--lowercase_sql`)' if s['lowercase_sql'] else '')
      + f'; tokenizer: {s["tokenizer"]}; decoding writes at most {target} '
      'tokens; exact match compares the whole SQL string '
      '(`metrics.text2sql.exact_match`).',
      '',
      '| Client | Training questions used | Test questions | Test inputs '
      f'cut at {source} | Test SQL cut at {target}: can never match | '
      'Training SQL cut (over the runs) |',
      '|---|---:|---:|---:|---:|---:|']
  for name, e in [*s['per_client'].items(), ('**All**', total)]:
    lines.append(
        f'| {name} | {_of(e.get("train"), e.get("train_split"))} | '
        f'{_of(e.get("test"), e.get("test_split"))} | '
        f'{_count(e.get("test_inputs_cut"))} | '
        f'{_count(e.get("test_targets_cut"))} | '
        f'{_count(e.get("train_targets_cut"))} |')
  return lines + ['']
