"""What `python -m apps.<application>.bin.<binary> --help` prints first: its docstring.

absl prints the main module's docstring as the usage text (after replacing
`%s` by the program). A shell command in it continued with ` \\` at the end
of a line must be in a raw docstring: in a plain one, backslash-newline is a
line continuation, and `--help` printed the command as one line with runs
of spaces where the line breaks were. Checked here on every public binary
of apps/*/bin from its source (no import, no TensorFlow), and once for
real through `--help`.
"""

import ast
import glob
import os
import re
import subprocess
import sys

from absl.testing import parameterized
import tensorflow as tf

from apps.common import presets

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Binary name -> application: every public module of apps/<application>/bin.
_APPLICATIONS = presets.binaries()
_BINARIES = sorted(_APPLICATIONS)


def _source(binary: str) -> str:
  return os.path.join(_REPO, 'apps', _APPLICATIONS[binary], 'bin',
                      f'{binary}.py')


def _usage(binary: str) -> str:
  """The usage text absl prints for the binary: its docstring, `%s` filled."""
  with open(_source(binary), encoding='utf-8') as f:
    doc = ast.get_docstring(ast.parse(f.read()), clean=False)
  if not doc:
    return ''
  # As absl.app.usage does.
  specifiers = doc.count('%') - 2 * doc.count('%%')
  try:
    return doc % ((f'{binary}.py',) * specifiers)
  except (OverflowError, TypeError, ValueError):
    return doc


class UsageTest(parameterized.TestCase):

  def test_binaries_are_found(self):
    self.assertContainsSubset(
        ['train_text2sql', 'train_nmt', 'train_fcl', 'weighting_demo',
         'text2sql_benchmark', 'seq2seq_xla_step', 'tff_worker'], _BINARIES)

  @parameterized.parameters(*_BINARIES)
  def test_usage_is_readable(self, binary):
    usage = _usage(binary)
    self.assertNotEmpty(usage.strip(), f'{binary} has no docstring')
    for line in usage.splitlines():
      self.assertNotRegex(line, r'^ {2,}$', f'{binary}: a line of spaces')
      # Runs of spaces inside a line (aligned `# comments` aside): a
      # swallowed line break.
      self.assertNotRegex(line, r'\S {4,}[^\s#]',
                          f'{binary}: runs of spaces in {line!r}')
    # A continued shell command keeps its backslash and its line break.
    for match in re.finditer(r'python -m apps\.\w+\.bin\.\w+[^\n]*', usage):
      self.assertNotRegex(match.group(), r'\S {4,}--',
                          f'{binary}: {match.group()!r}')

  @parameterized.parameters(*_BINARIES)
  def test_usage_is_the_docstring(self, binary):
    # No accidental %-formatting: absl prints the docstring as written.
    with open(_source(binary), encoding='utf-8') as f:
      doc = ast.get_docstring(ast.parse(f.read()), clean=False)
    self.assertEqual(_usage(binary), doc)


def _make_targets() -> dict[str, tuple[list[str], str]]:
  """The Makefile's targets: name -> (prerequisites, recipe text)."""
  with open(os.path.join(_REPO, 'Makefile'), encoding='utf-8') as f:
    text = f.read().replace('\\\n', ' ')
  targets, current = {}, None
  for line in text.splitlines():
    if line.startswith('\t'):
      if current is not None:
        targets[current][1].append(line)
      continue
    match = re.match(r'([A-Za-z0-9_-]+)\s*:(?!=)(.*)$', line)
    if match:
      current = match.group(1)
      targets[current] = (match.group(2).split(), [])
    elif line.strip() and not line.startswith('#'):
      current = None
  return {name: (prerequisites, '\n'.join(recipe))
          for name, (prerequisites, recipe) in targets.items()}


def _runs(target: str, targets, seen=None) -> str:
  """The recipe of `target` and of every target it makes, as text."""
  seen = set() if seen is None else seen
  seen.add(target)
  prerequisites, recipe = targets[target]
  text = recipe
  for other in prerequisites + re.findall(r'\$\(MAKE\)\s+([\w-]+)', recipe):
    if other in targets and other not in seen:
      text += '\n' + _runs(other, targets, seen)
  return text


_MAKE_CLAIM = re.compile(r'`?make ([a-z][a-z0-9-]*)')


class MakeTargetsTest(parameterized.TestCase):
  """A binary's usage, or the first comment line of its preset, that names
  `make <target>` names a target that runs the binary or one of its presets
  (`weighting_demo --help` called its cpu preset `make demo`, which runs
  text2sql_benchmark)."""

  def _check(self, binary, text, where):
    targets = _make_targets()
    for match in _MAKE_CLAIM.finditer(text):
      target = match.group(1)
      if target not in targets:
        # `make x` in backquotes is a command; bare, it may be prose.
        self.assertFalse(match.group().startswith('`'),
                         f'{where}: no target make {target}')
        continue
      runs = _runs(target, targets)
      self.assertTrue(  # pylint: disable=g-generic-assert
          f'{presets.binary_module(binary)} ' in runs
          or os.path.join(os.path.relpath(presets.flags_dir(binary), _REPO),
                          f'{binary}.') in runs,
          f'{where} names `make {target}`, which runs neither '
          f'{presets.binary_module(binary)} nor a preset of it')

  @parameterized.parameters(*_BINARIES)
  def test_usage_names_make_targets_that_run_the_binary(self, binary):
    self._check(binary, _usage(binary), f'{binary} --help')

  @parameterized.parameters(*sorted(
      os.path.relpath(path, _REPO)
      for path in glob.glob(os.path.join(_REPO, 'apps', '*', 'flags',
                                         '*.flags'))))
  def test_preset_names_make_targets_that_run_it(self, preset):
    with open(os.path.join(_REPO, preset), encoding='utf-8') as f:
      first_line = f.readline()
    self._check(os.path.basename(preset).split('.')[0], first_line, preset)


class HelpExecutionTest(tf.test.TestCase):

  def _help(self, binary: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-m', presets.binary_module(binary), '--help'],
        cwd=_REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'),
        capture_output=True, text=True, timeout=300, check=False)

  def test_help_prints_the_usage_the_source_gives(self):
    result = self._help('train_text2sql')
    # absl's --help exits with status 1.
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertIn(_usage('train_text2sql'), result.stdout)
    self.assertIn(
        'python -m apps.text2sql.bin.train_text2sql \\\n'
        '      --flagfile=apps/text2sql/flags/train_text2sql.smoke.flags \\\n',
        result.stdout)

  def test_train_fcl_help_lists_only_the_flags_it_accepts(self):
    result = self._help('train_fcl')
    listed = set(re.findall(r'^ +--(?:\[no\])?(\w+):', result.stdout, re.M))
    self.assertContainsSubset(
        {'seed', 'data_dir', 'output_dir', 'rounds_per_task', 'methods',
         'proximal_strength', 'num_workers'}, listed)
    # common's loop flags that train_fcl refuses (its _NOT_USED).
    self.assertNoCommonElements(
        {'rounds', 'clients_per_round', 'checkpoint_every', 'eval_every',
         'evaluate_initial', 'progress'}, listed)
    proximal = re.search(r'--proximal_strength:(.*?)\(default', result.stdout,
                         re.S).group(1)
    self.assertIn('fedprox method (--methods)', ' '.join(proximal.split()))
    self.assertNotIn('--algorithm', result.stdout)

  def test_help_of_the_xla_benchmark_does_not_run_it(self):
    # It took no flags and ran its 5-minute measurement on --help.
    result = self._help('seq2seq_xla_step')
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertIn('Benchmark: one training step', result.stdout)
    self.assertNotIn('jit_compile=', result.stdout)


if __name__ == '__main__':
  tf.test.main()
