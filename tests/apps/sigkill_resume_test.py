"""SIGKILL between checkpoints, rerun: the same final model as without the kill.

For every experiment binary but the weighting demo (covered, with the same
mechanics, by weighting_demo/weighting_demo_binary_test.py): `python -m apps.<application>.bin.<binary>`
in a subprocess with its smoke preset shrunk further, killed with SIGKILL
(its whole session, so the TFF worker goes too, as with a killed terminal or
a preempted job) once a chosen round (`_Case.kill_at`: between checkpoints,
after an evaluation) is recorded, then run again with the same command. An
uninterrupted run with the same flags runs at the same time in another
directory. The two output trees must hold

*   the same final model: the variables of the last checkpoint of every
    `checkpoints/` folder, every saved weights file (`*.npz`) and every
    TensorFlow checkpoint outside `checkpoints/` (the selected model), equal
    to 1e-6;
*   the same metrics: every `metrics.jsonl` (each round once, none lost or
    repeated), `results.json` and `config.json`, equal to
    1e-6 except wall-clock times and the output directory's name.

No `worker_binary` started by a case may outlive it.
"""

import dataclasses
import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any, Callable
import uuid

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from apps.common import presets
from tests import test_helpers

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_TIMEOUT = 600
_ATOL = 1e-6
# Keys of wall-clock measurements, which differ between any two runs.
_VOLATILE_KEY = re.compile(r'seconds|^time|_time$|elapsed')
_MARK_VAR = 'TFF_NLP_SIGKILL_TEST_MARK'


def _flagfile(preset: str) -> str:
  return f'--flagfile={os.path.join(_REPO, presets.preset_path(preset, "smoke"))}'


def _jsonl_rounds(pattern: str) -> Callable[[str], int]:
  """Progress: the highest round in the metrics.jsonl matching `pattern`."""

  def progress(output_dir: str) -> int:
    best = -1
    for path in glob.glob(os.path.join(output_dir, pattern)):
      with open(path, 'rb') as f:
        lines = f.read().split(b'\n')
      for line in lines:
        if line.strip() and line.endswith(b'}'):
          best = max(best, json.loads(line)['round'])
    return best

  return progress


@dataclasses.dataclass(frozen=True)
class _Case:
  binary: str
  args: tuple[str, ...]
  rounds: int
  progress: Callable[[str], int]
  kill_at: int  # The round after which the run is killed.


# 4 rounds, checkpointed after rounds 2 and 4, evaluated after 2 and 4: the
# kill after round 3 lands between checkpoints, after an evaluation (the
# selected model so far must survive it), and the rerun resumes from round
# 2, runs round 3 again (recorded once) and round 4 with its evaluation.
# What resuming must reproduce needs no more rounds than that.
_ROUNDS = 4
_KILL_AT = 3
_T2S_ARGS = (
    _flagfile('train_text2sql'),
    '--clients=geography,restaurants',
    '--max_train_examples=8',
    '--max_eval_examples=4',
    f'--rounds={_ROUNDS}',
    '--checkpoint_every=2',  # So the kill lands between checkpoints.
    '--eval_every=2',
    '--progress=off',
    # Dropout stays on (the preset's 0.1): its masks are keyed by the round's
    # global model, batch and step, so a resumed run redraws the same ones.
)
_CASES = (
    _Case('train_text2sql',
          (*_T2S_ARGS, '--paradigm=federated', '--algorithm=fedopt',
           '--weighting=lorar'),
          _ROUNDS, _jsonl_rounds(os.path.join('federated', 'metrics.jsonl')),
          _KILL_AT),
    _Case('text2sql_benchmark',
          (*_T2S_ARGS, '--methods=fedavg/num_examples', '--seeds=0'),
          _ROUNDS, _jsonl_rounds(os.path.join('runs', '*', 'federated',
                                              'metrics.jsonl')), _KILL_AT),
    _Case('train_nmt',
          (_flagfile('train_nmt'), '--domains=wmt_news,php_docs',
           '--max_train_examples=16', '--max_eval_examples=4',
           '--engines=federated:dp_l', f'--rounds={_ROUNDS}', '--local_steps=1',
           '--checkpoint_every=2', '--eval_every=2', '--progress=off'),
          _ROUNDS, _jsonl_rounds(os.path.join('engines', 'federated-*',
                                              'metrics.jsonl')), _KILL_AT),
    _Case('train_sparse_tags',
          (_flagfile('train_sparse_tags'), '--methods=dense,sparse',
           f'--rounds={_ROUNDS}', '--clients_per_round=3',
           '--checkpoint_every=2', '--eval_every=2', '--progress=off'),
          _ROUNDS, _jsonl_rounds(os.path.join('dense', 'metrics.jsonl')),
          _KILL_AT),
    # No --rounds: the preset's 1 round per task, so 4 rounds; a run is
    # checkpointed after every task. Killed after task 2 of 4 (the second
    # method's tasks and the report come after the rerun too).
    _Case('train_fcl',
          (_flagfile('train_fcl'), '--methods=fedavg,fedweit',
           '--tasks_per_client=4', '--max_train_per_task=16',
           '--max_test_per_task=8'),
          4, _jsonl_rounds(os.path.join('runs', '*', 'metrics.jsonl')), 2),
)


def _command(case: _Case, output_dir: str) -> list[str]:
  return [sys.executable, '-m', presets.binary_module(case.binary), *case.args,
          f'--output_dir={output_dir}']


def _start(case: _Case, output_dir: str, mark: str) -> subprocess.Popen:
  # A session of its own, so killing its process group takes the TFF worker
  # with it. stderr goes to a file: a pipe nobody reads could fill and stall.
  log = open(f'{output_dir}.log', 'ab')  # pylint: disable=consider-using-with
  try:
    return subprocess.Popen(
        _command(case, output_dir), cwd=_REPO,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', **{_MARK_VAR: mark}),
        stdout=log, stderr=log, start_new_session=True)
  finally:
    log.close()


def _log_tail(output_dir: str) -> str:
  with open(f'{output_dir}.log', 'rb') as f:
    return f.read()[-3000:].decode(errors='replace')


def _wait_ok(process: subprocess.Popen, output_dir: str) -> None:
  assert process.wait(timeout=_TIMEOUT) == 0, _log_tail(output_dir)


def _group_alive(pgid: int) -> bool:
  try:
    os.killpg(pgid, 0)
  except ProcessLookupError:
    return False
  return True


def _kill_group(process: subprocess.Popen) -> None:
  if process.poll() is None or _group_alive(process.pid):
    try:
      os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  process.wait()


def _marked_workers(mark: str) -> list[int]:
  """Live `worker_binary` processes started by this case's binaries."""
  return sorted(test_helpers.marked_worker_pids(_MARK_VAR, mark))


# --- What an output tree holds. ---


def _checkpoint_variables(prefix: str) -> dict[str, np.ndarray]:
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          if name != '_CHECKPOINTABLE_OBJECT_GRAPH'}


def _final_weights(output_dir: str) -> dict[str, np.ndarray]:
  """Every final weight tensor of a run, by '<relative file>:<name>'."""
  weights = {}

  def add(source: str, arrays: dict[str, np.ndarray]) -> None:
    rel = os.path.relpath(source, output_dir)
    for name, value in arrays.items():
      weights[f'{rel}:{name}'] = value

  for root, dirs, files in os.walk(output_dir):
    if os.path.basename(root) == 'checkpoints':
      # The last version: round_<n>.
      # A SIGKILL during a save may leave a `round_<n>_temp<pid>` folder.
      versions = [d for d in dirs if re.fullmatch(r'[a-z_]+_\d+', d)]
      if versions:
        last = max(versions, key=lambda d: int(d.rsplit('_', 1)[1]))
        add(os.path.join(root, last),
            _checkpoint_variables(os.path.join(root, last, 'variables',
                                               'variables')))
      dirs[:] = []  # Earlier versions are not the final model.
      continue
    for name in files:
      path = os.path.join(root, name)
      if name.endswith('.npz'):
        with np.load(path) as npz:
          add(path, {k: npz[k] for k in npz.files})
      elif name.endswith('.index') and 'variables' not in name:
        add(path, _checkpoint_variables(path[:-len('.index')]))
  return weights


def _weight_differences(resumed: dict[str, np.ndarray],
                        reference: dict[str, np.ndarray]) -> dict[str, float]:
  """The tensors that differ by more than 1e-6, with their largest gap."""
  differences = {}
  for name, value in reference.items():
    other = resumed[name]
    if other.shape != value.shape:
      differences[name] = math.inf
    elif np.issubdtype(value.dtype, np.number):
      diff = np.max(np.abs(other.astype(np.float64) - value), initial=0.0)
      if not diff <= _ATOL:
        differences[name] = float(diff)
    elif not np.array_equal(other, value):
      differences[name] = math.inf
  return differences


def _metric_files(output_dir: str) -> list[str]:
  names = ('metrics.jsonl', 'results.json', 'config.json')
  found = []
  for root, _, files in os.walk(output_dir):
    found += [os.path.relpath(os.path.join(root, f), output_dir)
              for f in files if f in names]
  return sorted(found)


def _read_metrics(path: str, output_dir: str) -> Any:
  with open(path, encoding='utf-8') as f:
    text = f.read().replace(output_dir, '<output_dir>')
  if path.endswith('.jsonl'):
    return [json.loads(line) for line in text.splitlines() if line.strip()]
  return json.loads(text)


def _assert_same(resumed: Any, reference: Any, where: str) -> None:
  """Equal JSON values; floats to 1e-6; wall-clock times not compared."""
  if isinstance(reference, dict):
    assert isinstance(resumed, dict), where
    assert sorted(resumed) == sorted(reference), where
    for key, value in reference.items():
      if not _VOLATILE_KEY.search(key):
        _assert_same(resumed[key], value, f'{where}/{key}')
  elif isinstance(reference, list):
    assert isinstance(resumed, list), where
    assert len(resumed) == len(reference), where
    for i, (a, b) in enumerate(zip(resumed, reference)):
      _assert_same(a, b, f'{where}[{i}]')
  elif isinstance(reference, float) and not isinstance(resumed, bool):
    assert isinstance(resumed, (int, float)), where
    assert (math.isnan(resumed) and math.isnan(reference)) or (
        abs(resumed - reference) <= _ATOL), (
            f'{where}: resumed {resumed!r}, uninterrupted {reference!r}')
  else:
    assert resumed == reference, (
        f'{where}: resumed {resumed!r}, uninterrupted {reference!r}')


class SigkillResumeExecutionTest(parameterized.TestCase, tf.test.TestCase):

  @parameterized.named_parameters(
      (f'{c.binary}_kill_after_{c.kill_at}_of_{c.rounds}', c)
      for c in _CASES)
  def test_sigkill_then_rerun_resumes_to_the_uninterrupted_model(self, case):
    kill_at = case.kill_at
    about = f'{case.binary} killed after round {kill_at} of {case.rounds}'
    mark = uuid.uuid4().hex
    tmp_path = self.create_tempdir().full_path
    reference_dir = os.path.join(tmp_path, 'uninterrupted')
    output_dir = os.path.join(tmp_path, 'killed')
    processes = []
    try:
      # The uninterrupted run goes along with the killed one (2 cores), from
      # its first recorded round on: by then it has built its processes and
      # left them in the session's process store (tests/conftest.py), which
      # the killed run and the rerun load instead of tracing them again.
      reference = _start(case, reference_dir, mark)
      processes.append(reference)
      deadline = time.monotonic() + _TIMEOUT
      while case.progress(reference_dir) < 1 and reference.poll() is None:
        self.assertLess(time.monotonic(), deadline,
                        f'{about}: the uninterrupted run made no progress')
        time.sleep(0.05)
      killed = _start(case, output_dir, mark)
      processes.append(killed)
      try:
        while case.progress(output_dir) < kill_at:
          self.assertIsNone(
              killed.poll(), f'{about}: the run ended before it was killed\n'
              f'{_log_tail(output_dir)}')
          self.assertLess(time.monotonic(), deadline, f'{about}: no progress')
          time.sleep(0.02)
      finally:
        _kill_group(killed)
      killed_at = case.progress(output_dir)
      self.assertBetween(killed_at, kill_at, case.rounds - 1,
                         (about, killed_at))
      for _ in range(100):  # The worker is reaped by init, not by us.
        if not _group_alive(killed.pid):
          break
        time.sleep(0.1)
      self.assertFalse(_group_alive(killed.pid), about)

      rerun = _start(case, output_dir, mark)
      processes.append(rerun)
      _wait_ok(rerun, output_dir)
      self.assertNotIn('Traceback', _log_tail(output_dir))
      _wait_ok(reference, reference_dir)
    finally:
      for process in processes:
        _kill_group(process)

    # No worker of the case is left.
    leftover = []
    for _ in range(50):
      leftover = _marked_workers(mark)
      if not leftover:
        break
      time.sleep(0.1)
    for pid in leftover:  # Ours (marked): stop them, then fail.
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    self.assertEmpty(leftover,
                     f'{about}: worker_binary left running: {leftover}')

    # The same final model.
    resumed_weights = _final_weights(output_dir)
    reference_weights = _final_weights(reference_dir)
    self.assertNotEmpty(reference_weights, f'{case.binary}: no weights found')
    self.assertEqual(sorted(resumed_weights), sorted(reference_weights),
                     about)
    differences = _weight_differences(resumed_weights, reference_weights)
    self.assertEmpty(differences, (
        f'{about}: {len(differences)} of {len(reference_weights)} tensors '
        f'differ (max |resumed - uninterrupted|): ' + ', '.join(
            f'{name}: {diff:.3g}'
            for name, diff in sorted(differences.items()))))

    # The same metrics: every round once, equal values.
    files = _metric_files(reference_dir)
    self.assertTrue(any(f.endswith('results.json') for f in files), files)
    self.assertEqual(_metric_files(output_dir), files, about)
    for rel in files:
      resumed = _read_metrics(os.path.join(output_dir, rel), output_dir)
      expected = _read_metrics(os.path.join(reference_dir, rel),
                               reference_dir)
      if rel.endswith('.jsonl'):
        self.assertEqual([r['round'] for r in resumed],
                         [r['round'] for r in expected], f'{about}: {rel}')
      _assert_same(resumed, expected, f'{about}: {rel}')

    # Each run ended by naming its report (the rerun's log also holds the
    # killed run's output, which ended without).
    for directory in (reference_dir, output_dir):
      with open(f'{directory}.log', encoding='utf-8',
                errors='replace') as f:
        reports = [line for line in f.read().splitlines()
                   if line.startswith('Report: ')]
      report = os.path.join(directory, 'results.md')
      self.assertEqual(reports, [f'Report: {report}'], about)
      self.assertTrue(os.path.isfile(report), report)


if __name__ == '__main__':
  tf.test.main()
