"""Finished text-to-SQL runs written by hand, for the benchmark's tests.

`write_run` leaves a run directory as `text2sql.run_text2sql` does (its
`results.json` and `predictions/<client>.jsonl`) without training;
`real_test_examples` gives the model inputs and gold SQL of the real test
splits, as a run records them.
"""

import functools
import json
import os

from tff_nlp import data as data_lib
from tff_nlp.data import text2sql as text2sql_data
from apps.text2sql import experiment as text2sql
from apps.text2sql import summary as text2sql_summary


@functools.lru_cache(maxsize=None)
def real_test_examples(clients, with_values=True, schema_columns=True):
  """Client -> (model input, gold SQL) of its test split, from the data."""
  loaded = data_lib.load_clients(clients, with_values=with_values)
  return {c: [(text2sql_data.model_input(e.question, loaded[c].schema,
                                         columns=schema_columns), e.sql)
              for e in loaded[c].test] for c in clients}


def write_run(run_dir, seed, outcomes, examples, *, tokens=None,
              execution=None, seconds=60.0, split_sizes=None, data=None,
              example_tokens=None):
  """A finished run as `run_text2sql` leaves it, without training.

  Args:
    run_dir: Where.
    seed: Its seed, recorded in its config.
    outcomes: Client -> 0/1 exact match per test example.
    examples: Client -> (input, gold SQL) per test example.
    tokens: Client -> (correct tokens, tokens), or None (with
      `example_tokens`: their sums).
    execution: Client -> (correct, total), or None.
    seconds: Its wall time.
    split_sizes: Client -> recorded test split size (default: the number
      of outcomes).
    data: The `DataConfig` fields to record in its config (e.g.
      `{'lowercase_sql': True}`), or None for none.
    example_tokens: Client -> (correct tokens, tokens) of each test example,
      written into its predictions (as runs since per-example token counts
      do), or None (as older runs).
  """
  if example_tokens and not tokens:
    tokens = {c: tuple(int(sum(column)) for column in zip(*pairs))
              for c, pairs in example_tokens.items()}
  os.makedirs(os.path.join(run_dir, text2sql.PREDICTIONS_DIR), exist_ok=True)
  for client, values in outcomes.items():
    with open(os.path.join(run_dir, text2sql.PREDICTIONS_DIR,
                           f'{client}.jsonl'), 'w') as f:
      for i, (value, (source, gold)) in enumerate(
          zip(values, examples[client])):
        record = {'input': source, 'gold': gold,
                  'prediction': gold if value else 'SELECT 0 ;',
                  'exact_match': bool(value)}
        if example_tokens:
          record['correct_tokens'], record['tokens'] = (
              example_tokens[client][i])
        f.write(json.dumps(record) + '\n')
  split_sizes = split_sizes or {c: len(v) for c, v in outcomes.items()}
  results = {
      'config': {'experiment': dict({'seed': seed},
                                    **({'data': data} if data else {})),
                 'loop': {'rounds': 3}},
      'examples': {c: {'train': 8, 'dev': 4, 'test': split_sizes[c]}
                   for c in outcomes},
      'test': {'exact_match': {'per_client': {
          c: {'correct': int(sum(v)), 'total': len(v),
              'accuracy': sum(v) / len(v)} for c, v in outcomes.items()}},
               'execution': execution and {'per_client': {
                   c: {'correct': k, 'total': n, 'accuracy': k / n}
                   for c, (k, n) in execution.items()}}},
      'best_rounds': {'federated': 3},
      'seconds': seconds,
  }
  if tokens:
    results['test_tokens'] = {c: {'correct_tokens': k, 'tokens': n}
                              for c, (k, n) in tokens.items()}
  with open(os.path.join(run_dir, 'results.json'), 'w') as f:
    json.dump(results, f)


def first_correct(k, n):
  """Outcomes of n examples of which the first k are correct."""
  return [1] * k + [0] * (n - k)


def write_method(tmp_path, slug, per_seed, examples, **kwargs):
  """One method's runs, `<tmp_path>/runs/<slug>-<seed>`: [(seed, run_dir)].

  Args:
    tmp_path: A `pathlib.Path`.
    slug: The runs' folder prefix.
    per_seed: Per seed, client -> outcomes (1 correct, 0 not).
    examples: client -> [(source, gold SQL)], as `write_run`'s.
    **kwargs: More of `write_run`'s arguments.
  """
  pairs = []
  for seed, outcomes in enumerate(per_seed):
    run_dir = str(tmp_path / 'runs' / f'{slug}-{seed}')
    write_run(run_dir, seed, outcomes, examples, **kwargs)
    pairs.append((seed, run_dir))
  return pairs


def summarize(tmp_path, runs, **kwargs):
  """`summary.summarize_runs` of `runs` into `tmp_path`, 500 replicates."""
  return text2sql_summary.summarize_runs(
      runs, output_dir=str(tmp_path), num_replicates=500, **kwargs)
