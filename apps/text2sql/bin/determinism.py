"""Benchmark: which settings change a run's numbers, and which do not.

Runs `apps.text2sql.bin.train_text2sql` (the smoke preset: eight clients, a
1+1-layer transformer with dropout 0.1, `--rounds` rounds) once as the
reference and once per variant, each in a fresh Python process, and compares
every array of `federated/best_model.npz` and every non-time metric of
`federated/metrics.jsonl` with the reference. Variants:

*   `rerun`: the same flags and seed again;
*   `concurrency_1`: `--max_concurrent_computation_calls=1` (clients one
    after another in TFF's worker instead of all at once);
*   `threads_1`: `TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1`
    (TensorFlow's thread pools, in Python and in the worker);
*   `onednn_off`: `TF_ENABLE_ONEDNN_OPTS=0` (TensorFlow's own CPU kernels
    instead of oneDNN's);
*   `seed_1`: `--seed=1`, which must differ (a check that the comparison can
    see a difference).

Writes `determinism.{json,md}` to `--output_dir` and prints the table.

  python -m apps.text2sql.bin.determinism                       # ~3 minutes, 2 cores

A benchmark, not a test: which variants change the numbers depends on the
machine's CPU and TensorFlow's kernels. `tests/apps/text2sql/text2sql_test.py`
checks the guarantee itself (same flags and seed, identical weights and
metrics).
"""

import collections
import json
import os
import subprocess
import sys

from absl import app
from absl import flags
import numpy as np

from apps.common import config_flags

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_FLAGFILE = os.path.join(_REPO, 'apps', 'text2sql', 'flags',
                         'train_text2sql.smoke.flags')

# Passed to every train_text2sql run (--output_dir: a folder per run).
_OUTPUT_DIR = config_flags.define('output_dir', 'runs/determinism')
_ROUNDS = config_flags.define('rounds', 3)
_DATA_DIR = config_flags.define('data_dir', None, str)

# name -> (extra flags, extra environment, what it changes).
_VARIANTS = collections.OrderedDict(
    reference=((), {}, 'the reference run'),
    rerun=((), {}, 'the same flags and seed again'),
    concurrency_1=(('--max_concurrent_computation_calls=1',), {},
                   'clients trained one after another'),
    threads_1=((), {'TF_NUM_INTRAOP_THREADS': '1',
                    'TF_NUM_INTEROP_THREADS': '1'},
               'TensorFlow thread pools of 1 thread'),
    onednn_off=((), {'TF_ENABLE_ONEDNN_OPTS': '0'},
                "TensorFlow's own CPU kernels instead of oneDNN's"),
    seed_1=(('--seed=1',), {}, 'another seed (must differ)'),
)


def _run(name: str, args, env) -> str:
  run_dir = os.path.join(_OUTPUT_DIR.value, name)
  command = [sys.executable, '-m', 'apps.text2sql.bin.train_text2sql',
             f'--flagfile={_FLAGFILE}', f'--rounds={_ROUNDS.value}',
             '--paradigm=federated', '--progress=off',
             f'--output_dir={run_dir}', *args]
  if _DATA_DIR.value:
    command.append(f'--data_dir={_DATA_DIR.value}')
  print(f'determinism: {name}: {" ".join(command[2:])}', flush=True)
  with open(f'{run_dir}.log', 'wb') as log:
    subprocess.run(command, cwd=_REPO, env=dict(os.environ, **env),
                   stdout=log, stderr=log, check=True)
  return run_dir


def _load(run_dir: str):
  with np.load(os.path.join(run_dir, 'federated', 'best_model.npz')) as f:
    weights = {k: f[k] for k in f.files}
  with open(os.path.join(run_dir, 'federated', 'metrics.jsonl')) as f:
    metrics = [{k: v for k, v in json.loads(line).items()
                if not k.endswith('_seconds')} for line in f]
  return weights, metrics


def _compare(reference, other) -> collections.OrderedDict:
  (weights_a, metrics_a), (weights_b, metrics_b) = reference, other
  if weights_a.keys() != weights_b.keys():
    raise ValueError('The runs have different weight arrays.')
  differing = [k for k in weights_a
               if not np.array_equal(weights_a[k], weights_b[k])]
  max_diff = max(float(np.max(np.abs(weights_a[k] - weights_b[k])))
                 for k in weights_a)
  return collections.OrderedDict(
      identical=not differing and metrics_a == metrics_b,
      arrays_differing=len(differing), arrays=len(weights_a),
      max_abs_weight_difference=max_diff,
      metrics_identical=metrics_a == metrics_b)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  runs = {name: _load(_run(name, args, env))
          for name, (args, env, _) in _VARIANTS.items()}
  rows = collections.OrderedDict(
      (name, _compare(runs['reference'], runs[name]))
      for name in _VARIANTS if name != 'reference')
  result = collections.OrderedDict(
      config=collections.OrderedDict(
          flagfile=os.path.relpath(_FLAGFILE, _REPO), rounds=_ROUNDS.value,
          paradigm='federated',
          variants={k: dict(flags=list(v[0]), env=v[1], what=v[2])
                    for k, v in _VARIANTS.items()}),
      results=rows)
  lines = [
      f'Against the reference run (train_text2sql smoke preset, '
      f'{_ROUNDS.value} rounds, dropout 0.1):', '',
      '| variant | what changes | identical | arrays differing | '
      'max abs weight difference | metrics identical |',
      '|---|---|---|---:|---:|---|']
  for name, row in rows.items():
    lines.append(
        f'| `{name}` | {_VARIANTS[name][2]} | '
        f'{"yes" if row["identical"] else "**no**"} | '
        f'{row["arrays_differing"]} of {row["arrays"]} | '
        f'{row["max_abs_weight_difference"]:.3g} | '
        f'{"yes" if row["metrics_identical"] else "no"} |')
  markdown = '\n'.join(lines) + '\n'
  with open(os.path.join(_OUTPUT_DIR.value, 'determinism.json'), 'w') as f:
    json.dump(result, f, indent=2)
  with open(os.path.join(_OUTPUT_DIR.value, 'determinism.md'), 'w') as f:
    f.write(markdown)
  print(markdown)


if __name__ == '__main__':
  app.run(main)
