"""What a binary says about its presets, and the demo preset's method.

* Without `--flagfile`, the experiment binaries whose defaults are the
  papers' settings (days on a CPU) warn first, naming what will run and the
  presets (`apps/common/presets.py`); with a preset they do not.
* `train_text2sql.demo.flags` trains FedAvg in both binaries that take it:
  `text2sql_benchmark` (make demo) runs its `--methods`, FedAvg with
  num_examples and Lorar weighting, and `train_text2sql` its `--algorithm`,
  FedAvg; each accepts the other's flag and warns when it disagrees.

The command lines, and the parse of the demo preset, run in one process per
binary (`_DRIVER`, around `bad_input_driver`); each command line stops at a
data folder that does not exist, before any training.
"""

import functools
import json
import os
import subprocess
import sys
import tempfile

import tensorflow as tf

from apps.common import presets

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
_DEMO = os.path.join(_REPO, 'apps', 'text2sql', 'flags',
                     'train_text2sql.demo.flags')
_NO_DATA = '--data_dir=/no/such/dir'


def _one_line(stderr: str) -> str:
  return ' '.join(stderr.split())


class FlagfileGivenTest(tf.test.TestCase):

  def test_flagfile_given(self):
    self.assertTrue(presets.flagfile_given(['--flagfile=x.flags']))
    self.assertTrue(presets.flagfile_given(['--seed=1', '-flagfile', 'x']))
    self.assertFalse(presets.flagfile_given(['--seed=1']))
    self.assertFalse(presets.flagfile_given(['--', '--flagfile=x']))

  def test_preset_names(self):
    self.assertContainsSubset(['smoke', 'demo', 'cpu', 'paper'],
                              presets.preset_names('train_text2sql'))


# Each binary's command lines, and the demo preset as it parses it, in one
# Python process per binary: a driver around `bad_input_driver.run_cases`
# (which runs each command line through `common.run`, as `python -m` does).
# The preset is parsed first, in the fresh process, as the binary's own
# `python -c` would; the flags are reset before each command line.
_DRIVER = """
import json
import os
import sys

from absl import flags

from apps.common import presets
from tests.apps import bad_input_driver

binary, expression, demo = sys.argv[1:4]
# stdout carries the JSON only; what the binaries print goes to stderr.
outcomes_file = os.fdopen(os.dup(1), 'w')
os.dup2(2, 1)
parsed = None
cases = json.load(sys.stdin)
if expression:
  module = __import__(presets.binary_module(binary), fromlist=['_'])
  flags.FLAGS([sys.argv[0], f'--flagfile={demo}'])
  parsed = str(eval(expression, {'binary': module}))
  flags.FLAGS.unparse_flags()
json.dump({'outcomes': bad_input_driver.run_cases(binary, cases),
           'parsed': parsed}, outcomes_file)
outcomes_file.close()
"""

# binary -> (its command lines, the expression its demo preset is read by).
_CASES = {
    'train_text2sql': (
        [[_NO_DATA],
         [f'--flagfile={_DEMO}', _NO_DATA],
         [f'--flagfile={_DEMO}', '--algorithm=fedopt', _NO_DATA]],
        'binary._METHOD.values()'),
    'text2sql_benchmark': (
        [[_NO_DATA, '--seeds=0'],
         [f'--flagfile={_DEMO}', _NO_DATA, '--seeds=0'],
         [f'--flagfile={_DEMO}', '--methods=fedopt/lorar', _NO_DATA,
          '--seeds=0']],
        'binary._METHODS.value'),
    'train_nmt': ([[_NO_DATA]], ''),
    'train_fcl': ([[_NO_DATA]], ''),
}


@functools.cache
def _driven(binary):
  """((status, stderr) per command line of `_CASES`, the parsed preset)."""
  cases, expression = _CASES[binary]
  with tempfile.TemporaryDirectory() as root:
    result = subprocess.run(
        [sys.executable, '-c', _DRIVER, binary, expression, _DEMO],
        input=json.dumps([[*case, f'--output_dir={root}/{i}']
                          for i, case in enumerate(cases)]),
        cwd=_REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
        capture_output=True, text=True, timeout=1200, check=False)
  if result.returncode != 0:
    raise RuntimeError(f'driver of {binary} failed:\n{result.stderr[-2000:]}')
  output = json.loads(result.stdout)
  return ([(o['returncode'], o['stderr']) for o in output['outcomes']],
          output['parsed'])


class PresetsExecutionTest(tf.test.TestCase):

  def test_train_text2sql(self):
    (bare, demo, fedopt), _ = _driven('train_text2sql')
    for status, stderr in (bare, demo, fedopt):
      self.assertEqual(status, 2, stderr[-2000:])
      self.assertIn('/no/such/dir', stderr)
    self.assertIn(
        "No --flagfile: train_text2sql runs its defaults and flags: the Lorar "
        "paper's schedule, for GPUs (days on 2 CPU cores): 60 rounds of 12 "
        '(advising=6, atis=6) local epochs on every training example of 8 '
        'clients, the seq2seq parser, model small (2+2 layers, d=128). A '
        'preset sets a scale for the machine: '
        '--flagfile=apps/text2sql/flags/train_text2sql.<preset>.flags with '
        '<preset> one of ', _one_line(bare[1]))
    self.assertRegex(_one_line(bare[1]), r'one of [a-z, ]*\bsmoke\b.* \(smoke '
                     r'checks the set-up in minutes\)')
    # The demo preset: train_text2sql trains FedAvg (+ Lorar, its default
    # weighting), one of the preset's --methods: no warning.
    self.assertNotIn('No --flagfile', demo[1])
    self.assertNotIn('--methods', demo[1])
    self.assertIn(
        "--methods=fedavg/num_examples,fedavg/lorar is text2sql_benchmark's; "
        'train_text2sql trains one method, fedopt/lorar', _one_line(fedopt[1]))

  def test_text2sql_benchmark(self):
    (bare, demo, fedopt), _ = _driven('text2sql_benchmark')
    for status, stderr in (bare, demo, fedopt):
      self.assertEqual(status, 2, stderr[-2000:])
      self.assertIn('/no/such/dir', stderr)
    self.assertRegex(
        _one_line(bare[1]),
        r"No --flagfile: text2sql_benchmark runs its defaults and flags: \d+ "
        r"runs \(\d+ methods, seeds 0\), each the Lorar paper's schedule.*60 "
        r'rounds.*--flagfile=apps/text2sql/flags/train_text2sql\.<preset>\.flags')
    # The demo preset's --algorithm=fedavg is the algorithm of its methods.
    self.assertNotIn('No --flagfile', demo[1])
    self.assertNotIn('--algorithm', demo[1])
    self.assertIn(
        "--algorithm=fedavg is train_text2sql's (one method); "
        'text2sql_benchmark runs --methods=fedopt/lorar and ignores it.',
        _one_line(fedopt[1]))

  def test_train_nmt_and_train_fcl_warn_without_a_preset(self):
    for binary, expected in (
        ('train_nmt', r'No --flagfile: train_nmt runs its defaults and flags: '
                      r'\d+ engines .* on every training pair of each domain '
                      r'of nmt_de_en'),
        ('train_fcl', r'No --flagfile: train_fcl runs its defaults and flags: '
                      r'\d+ methods .* on r8,tmn,trec6 with 1 seed\(s\), each '
                      r'3 clients x 5 tasks')):
      ((status, stderr),), _ = _driven(binary)
      self.assertEqual(status, 2, stderr[-2000:])
      self.assertRegex(_one_line(stderr), expected)
      self.assertIn(presets.preset_path(binary, '<preset>'),
                    _one_line(stderr))


class DemoPresetParsingTest(tf.test.TestCase):
  """The demo preset's method as each binary parses it (no training)."""

  def test_both_binaries_train_fedavg(self):
    self.assertEqual(_driven('text2sql_benchmark')[1],
                     "['fedavg/num_examples', 'fedavg/lorar']")
    self.assertEqual(
        _driven('train_text2sql')[1],
        "{'paradigm': 'federated', 'algorithm': 'fedavg', "
        "'weighting': 'lorar'}")


if __name__ == '__main__':
  tf.test.main()
