r"""Benchmark: round time and peak memory against clients per round.

On the tag task of `experiments.sparse_tags` with every TREC-50 training
question a client (5,452 clients), for each `--clients_per_round_values`
setting (10, 100, 1,000 by default) and method: `--warmup_rounds` untimed
rounds, then `--rounds` timed rounds of seeded client sampling; the median
round time, the time per client, and the peak resident memory of the Python
process and of the TFF worker(s). Each setting runs in a fresh child process
(this script again, with the hidden `--child_*` flags and a context of its
own from the runtime flags), so each peak is that setting's alone. The
parent prints one Markdown table and the linearity check (time ratio of the
largest to the smallest setting against their clients ratio, and the
log-log slope), and writes `client_scaling.{json,md,png}` to `--output_dir`
(`benchmarks.client_scaling`).

  python -m apps.scaling.bin.client_scaling                        # ~5 minutes, 2 cores
  python -m apps.scaling.bin.client_scaling --methods=sparse,dense
  python -m apps.scaling.bin.client_scaling --clients_per_round_values=10,100 --rounds=2
  # 10^5 simulated users, datasets built in the worker, 250 clients per call:
  python -m apps.scaling.bin.client_scaling --population_size=100000 \
      --clients_per_round_values=100,1000,10000 --clients_per_subround=250

Runtime flags (`--max_concurrent_computation_calls`, the worker flags) go
to every child. This is a benchmark, not a test: its numbers depend on the
machine.
"""

import collections
import json
import os
import sys

from absl import app
from absl import flags

from apps.scaling import client_scaling
from apps.partial_models import tag_task_flags as _tag_task_flags
from apps.common import config_flags
from tff_nlp.data import population as population_lib
from apps.partial_models import tag_experiment as sparse_tags
from tff_nlp.runtime import flags as runtime_flags

_OUTPUT_DIR = config_flags.define('output_dir', 'runs/client_scaling')
_METHODS = flags.DEFINE_list(
    'methods', [sparse_tags.SPARSE],
    f'Methods to measure, from {list(sparse_tags.METHODS)}. Sparse (each '
    'client selects M rows) is the cross-device method; dense sends every '
    'client the whole [V, T] model, so its worker memory grows with the '
    'clients per round.')
_CLIENTS_PER_ROUND_VALUES = flags.DEFINE_list(
    'clients_per_round_values', ['10', '100', '1000'],
    'Clients per round of each setting.')
# Timed rounds per setting (the median is reported).
_ROUNDS = config_flags.define('rounds', 3)
_WARMUP_ROUNDS = flags.DEFINE_integer(
    'warmup_rounds', 1, 'Untimed first rounds per setting.', lower_bound=0)
_SEED = config_flags.define('seed', 0)
_POPULATION_SIZE = flags.DEFINE_integer(
    'population_size', 0,
    'If positive, the clients are this many simulated users drawn from the '
    'training questions with Dirichlet label skew (data.population), their '
    'datasets built in the TFF worker from their ids; 0: the task\'s clients '
    '(--partition), datasets built here.', lower_bound=0)
_EXAMPLES_PER_USER = flags.DEFINE_integer(
    'examples_per_user', 8, 'Examples of each simulated user.', lower_bound=1)
_POPULATION_ALPHA = flags.DEFINE_float(
    'population_alpha', 0.5,
    'Dirichlet concentration of the simulated users\' label mixtures '
    '(smaller: more skewed).')
_TIMEOUT = flags.DEFINE_float(
    'timeout_seconds', None, 'Kill a setting\'s child after this long.')

# Internal: set by the parent when it runs one setting in a child.
_CHILD_METHOD = flags.DEFINE_string(
    'child_method', None, 'Internal: measure only this method ...')
_CHILD_CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'child_clients_per_round', None, '... with this many clients per round '
    '...')
_CHILD_OUTPUT_JSON = flags.DEFINE_string(
    'child_output_json', None, '... and write the record here.')
_CHILD_FLAGS = ('child_method', 'child_clients_per_round',
                'child_output_json')


@flags.validator('methods', f'--methods must name distinct methods from '
                 f'{list(sparse_tags.METHODS)}.')
def _check_methods(value):
  return (bool(value) and len(set(value)) == len(value)
          and set(value) <= set(sparse_tags.METHODS))


@flags.validator('clients_per_round_values',
                 '--clients_per_round_values must be positive integers.')
def _check_clients(value):
  return bool(value) and all(v.isdigit() and int(v) > 0 for v in value)


def _population():
  if not _POPULATION_SIZE.value:
    return None
  return population_lib.PopulationConfig(
      num_users=_POPULATION_SIZE.value,
      examples_per_user=_EXAMPLES_PER_USER.value,
      dirichlet_alpha=_POPULATION_ALPHA.value, seed=_SEED.value)


def _child_main():
  """Measures one setting in a context of this process and writes JSON."""
  with runtime_flags.context_from_flags():
    record = client_scaling.measure_clients_per_round(
        data_dir=_tag_task_flags.DATA_DIR.value,
        data=_tag_task_flags.data_config(),
        training=_tag_task_flags.training_config(),
        method=_CHILD_METHOD.value,
        clients_per_round=_CHILD_CLIENTS_PER_ROUND.value,
        rounds=_ROUNDS.value,
        warmup_rounds=_WARMUP_ROUNDS.value,
        seed=_SEED.value,
        population=_population(),
    )
  with open(_CHILD_OUTPUT_JSON.value, 'w', encoding='utf-8') as f:
    json.dump(record, f, indent=1)


def _child_command(method, clients_per_round, json_path):
  # This script again with the parent's own arguments (flag files
  # included), so the child sees the same data, training and runtime flags.
  own_args = [a for a in sys.argv[1:]
              if a.lstrip('-').split('=')[0] not in _CHILD_FLAGS]
  return [sys.executable, '-m', 'apps.scaling.bin.client_scaling', *own_args,
          f'--child_method={method}',
          f'--child_clients_per_round={clients_per_round}',
          f'--child_output_json={os.path.abspath(json_path)}']


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if _CHILD_METHOD.value is not None:
    _child_main()
    return
  runtime = runtime_flags.settings_from_flags()
  config = collections.OrderedDict(
      **_tag_task_flags.config_record(),
      rounds=_ROUNDS.value, warmup_rounds=_WARMUP_ROUNDS.value,
      seed=_SEED.value,
      population_size=_POPULATION_SIZE.value or 'the task\'s clients',
      **({} if not _POPULATION_SIZE.value else dict(
          examples_per_user=_EXAMPLES_PER_USER.value,
          population_alpha=_POPULATION_ALPHA.value)),
      num_workers=runtime.num_workers,
      clients_per_subround=runtime.clients_per_subround or 'off',
      worker_malloc_arena_max=(
          runtime_flags.WORKER_MALLOC_ARENA_MAX.value or 'default'),
      worker_malloc_mmap_threshold=(
          runtime_flags.WORKER_MALLOC_MMAP_THRESHOLD.value or 'default'))
  result = client_scaling.run_client_scaling(
      measure=client_scaling.subprocess_measure(
          _child_command, _OUTPUT_DIR.value,
          timeout_seconds=_TIMEOUT.value),
      methods=_METHODS.value,
      clients_per_round_values=[int(v) for v in
                                _CLIENTS_PER_ROUND_VALUES.value],
      output_dir=_OUTPUT_DIR.value,
      config=config,
  )
  print(result['markdown'])
  print(f'\nWritten to {_OUTPUT_DIR.value}/')


if __name__ == '__main__':
  app.run(main)
