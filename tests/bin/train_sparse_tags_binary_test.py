"""`python -m tff_nlp.bin.train_sparse_tags` as a user runs it."""

import json
import os
import re
import subprocess
import sys

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_SMOKE_FLAGS = os.path.join(_REPO, 'tff_nlp', 'bin', 'flags',
                            'train_sparse_tags.smoke.flags')


def _run(tmp_path, *args):
  return subprocess.run(
      [sys.executable, '-m', 'tff_nlp.bin.train_sparse_tags',
       f'--flagfile={_SMOKE_FLAGS}', f'--output_dir={tmp_path}/run', *args],
      cwd=_REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
      capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.parametrize('args, message', [
    (['--methods=dense,median'], '--methods must name distinct methods'),
    (['--k_values=1,0'], '--k_values must be positive integers'),
    (['--dataset=nowhere'], "Dataset folder .*nowhere.* not found"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, args, message):
  result = _run(tmp_path, *args)
  assert result.returncode == 2, result.stderr[-2000:]
  error_lines = [l for l in result.stderr.splitlines() if 'error:' in l]
  assert len(error_lines) == 1, result.stderr[-2000:]
  assert error_lines[0].startswith('train_sparse_tags.py: error: ')
  assert re.search(message, error_lines[0]), error_lines[0]
  assert 'Traceback' not in result.stderr


def test_smoke_preset_writes_the_comparison(tmp_path):
  result = _run(tmp_path, '--rounds=1')
  assert result.returncode == 0, result.stderr[-3000:]
  with open(tmp_path / 'run' / 'results.json') as f:
    summary = json.load(f)
  assert list(summary['methods']) == ['dense', 'sparse', 'sparse_per_row']
  for method in summary['methods'].values():
    assert 0.0 <= method['final']['precision_at_1'] <= 1.0
  # M = 50 rows of T float32 down, whatever the 501-row vocabulary.
  num_tags = summary['task']['num_tags']
  assert summary['methods']['sparse']['bytes_down_per_client'] == (
      50 * num_tags * 4)
