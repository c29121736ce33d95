"""What the model saw in a partial-model run over seeds: its reports' opening.

Every results page opens with what produced its numbers
(`docs/results/README.md`): the training data and its split over clients,
what a sparse client cuts (the word rows beyond its keys), the test set, the
protocol and the rule that turns intervals into verdicts.

`setup_record` keeps what that section needs of a run's settings (stored in
`seeds.json` as `setup`); `what_the_model_saw` writes it for a `tag_seeds`
summary. For a comparison of two runs (`tag_seeds.compare_runs`),
`comparison_side` (from a `seeds.json`) or `side_from_runs` (from the seeds'
`results.json`) keeps each side's, and `comparison_what_the_model_saw`
writes the section for both. Every number is read from the records; one a
run did not record is said to be so, never guessed.
"""

import collections
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from tff_nlp import training as training_lib
from apps.partial_models import tag_experiment as sparse_tags

PerSeed = Mapping[int, Mapping[str, Any]]


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


def side_from_runs(per_seed: PerSeed,
                   by_method: Mapping[str, Mapping[int, Mapping[str, Any]]],
                   mean_keys: Sequence[str]) -> collections.OrderedDict:
  """`comparison_side` of a run, from its seeds' `results.json`.

  Args:
    per_seed: seed -> that seed's `run_sparse_tags` results.
    by_method: method -> seed -> its results (`tag_seeds`).
    mean_keys: The numbers averaged over seeds (`tag_seeds.MEAN_KEYS`).
  """
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
               for key in mean_keys
               if all(key in r for r in by_seed.values())})
          for m, by_seed in by_method.items())))


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
