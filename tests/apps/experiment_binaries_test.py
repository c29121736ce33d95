"""The experiment binaries as a user runs them: bad input exits 2.

`python -m apps.text2sql.bin.train_text2sql`, `apps.text2sql.bin.text2sql_benchmark`,
`apps.nmt.bin.train_nmt` and `apps.fcl.bin.train_fcl` in a subprocess with
their smoke presets: every bad flag value or data location gives exit status
2 and one line naming the flag or path, before any training (every
command line of one binary runs in one process, `bad_input_driver`); and a
good value reaches the configuration the binary builds. (Training itself is
covered by each application's tests in tests/apps/<application>/.)
"""

import json
import os
import re
import subprocess
import sys

from absl.testing import parameterized
import tensorflow as tf

from tests.apps import bad_input_driver
from apps.common import presets
from tff_nlp.data import data_root

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_PRESETS = {'train_text2sql': 'train_text2sql', 'text2sql_benchmark':
            'train_text2sql', 'train_nmt': 'train_nmt',
            'train_fcl': 'train_fcl', 'weighting_demo': 'weighting_demo',
            'train_sparse_tags': 'train_sparse_tags'}


# The data folder of the tests (../shared/data).
_DATA_ROOT = data_root.find_data_dir()


def _smoke_flags(binary: str) -> str:
  return os.path.join(_REPO, presets.preset_path(_PRESETS[binary], 'smoke'))


# (binary, arguments after its smoke preset, what its one error line says).
_BAD_INPUT = (
      ('train_text2sql', ['--max_train_examples=200,atis=-3'],
       r"--max_train_examples: 'atis=-3' must be >= 0"),
      ('train_text2sql', ['--local_epochs=advising=6'],
       r'--local_epochs: needs a default value'),
      ('train_text2sql', ['--clients=imdb,nowhere'], r"nowhere"),
      ('train_text2sql', ['--data_dir=/no/such/dir'], r'/no/such/dir'),
      ('train_text2sql', [f'--data_dir={_DATA_ROOT}/text2sql'],
       r'looks like the `text2sql/` folder itself; pass its parent'),
      # The smoke preset's seq2seq options do not apply to the template parser.
      ('train_text2sql', ['--parser=template'],
       r'--parser=template\) takes no .*--retrieved_sql'),
      ('train_text2sql', ['--parser=template', '--template_ngrams=0'],
       r'template_ngrams'),
      # The default method is fedopt/lorar: DP needs uniform weighting.
      ('train_text2sql', ['--target_epsilon=5'],
       r"needs weighting='uniform', got weighting='lorar'"),
      ('train_text2sql', ['--paradigm=centralized', '--max_weight_share=0.5'],
       r'apply to the federated paradigm without --vocab_slice_keys, got '
       r'--paradigm=centralized'),
      ('train_text2sql', ['--weighting=uniform', '--target_epsilon=5',
                          '--dp_noise_multiplier=0.5'],
       r'dp_noise_multiplier and target_epsilon both set'),
      # 8 clients in each of 2 rounds: the adaptive clip's noise (< 0.8)
      # gives epsilon 3.9 at best.
      ('train_text2sql', ['--weighting=uniform', '--target_epsilon=1'],
       r'target_epsilon=1.0 is not reachable'),
      ('text2sql_benchmark', ['--trim_fraction=0.1', '--robust_aggregation'],
       r'trim_fraction is a mean of its own'),
      ('text2sql_benchmark', ['--methods=fedavg/median'],
       r"--methods: 'fedavg/median' is not a method"),
      ('text2sql_benchmark', ['--seeds=0,x'],
       r"--seeds: 'x' is not an integer"),
      ('text2sql_benchmark', ['--seeds=1,2,1'], r'--seeds: repeated seeds'),
      ('text2sql_benchmark', ['--seed=5'],
       r'--seed=5 is not among --seeds=\[0, 1, 2\]'),
      ('text2sql_benchmark', ['--single_seed_methods=fedavg/median'],
       r"--single_seed_methods: 'fedavg/median' is not a method"),
      ('text2sql_benchmark', ['--time_rounds=3', '--pretrained_dir=x'],
       r'--pretrained_dir, --time_rounds: only with --variants'),
      ('text2sql_benchmark', ['--variants=lora_r4', '--timing_only'],
       r'--timing_only needs --time_rounds > 0'),
      ('train_nmt', ['--engines=generic,federated:dp_x'],
       r"--engines: 'federated:dp_x': Unknown mode 'dp_x'"),
      ('train_nmt', ['--engines=single:php_docs', '--domains=wmt_news,legal'],
       r"legal"),
      ('train_nmt', ['--controller_layers=0,x'], r'--controller_layers'),
      ('train_nmt', ['--generic_domain=nowhere', '--domains=wmt_news'],
       r"Unknown domains \['nowhere'\]"),
      # --data_dir is the data folder, as for every binary; --corpus the
      # folder of domains in it.
      ('train_nmt', ['--data_dir=no_such_dir'],
       r"Data directory 'no_such_dir' \(from the data_dir argument\) does "
       r'not exist'),
      ('train_nmt', ['--data_dir=nmt_de_en_large'],
       r"data_dir 'nmt_de_en_large': no such folder; it is the name of a "
       r'corpus in the data folder .*: pass --corpus=nmt_de_en_large'),
      ('train_nmt', [f'--data_dir={_DATA_ROOT}/nmt_de_en_large'],
       r'looks like a corpus folder itself: it holds the domains .*Pass its '
       r'parent as the data folder and its name as the corpus: '
       rf'--data_dir={re.escape(_DATA_ROOT)} --corpus=nmt_de_en_large\.'),
      ('train_nmt', ['--corpus=no_such_corpus'],
       r"No corpus 'no_such_corpus' in the data folder .*: its folders of "
       r"domains are \['nmt_de_en', 'nmt_de_en_large'\]"),
      ('train_nmt', ['--seeds=0,x'], r'--seeds'),
      ('train_nmt', ['--data_dir=/no/such/dir'], r'/no/such/dir'),
      ('train_nmt', ['--clients_per_round=2'],
       r'--clients_per_round does not apply to train_nmt'),
      ('train_nmt', ['--max_weight_share=1.5'],
       r'flag --max_weight_share=1.5: 1.5 is not a number in the range '
       r'\[0.0, 1.0\]'),
      ('train_nmt', ['--max_weight_share=0'],
       r'max_weight_share must be a number in \(0, 1\].*got 0.0'),
      ('train_nmt', ['--pretrain_dropout=1'],
       r'pretrain_dropout must be in \[0, 1\), got 1.0'),
      ('train_nmt', ['--pretrain_learning_rate_schedule=cosine'],
       r'--pretrain_learning_rate_schedule'),
      ('train_fcl', ['--methods=fedavg,fedx'], r"Unknown FCL method.*'fedx'"),
      ('train_fcl', ['--word_vectors=glove.6B.50d.top50k.txt'],
       r'glove.6B.50d.top50k.txt has 50 values per word, but --embedding_dim '
       r'is 8; set --embedding_dim=50'),
      ('train_fcl', ['--word_vectors=nowhere.txt'], r'nowhere.txt: file not'),
      ('train_fcl', ['--construction=relay'], r'--construction'),
      ('train_fcl', ['--num_clients=15', '--construction=shared_labels'],
       r'needs num_clients \+ tasks_per_client - 1 = 16'),
      ('train_fcl', ['--rounds=3'],
       r'--rounds does not apply.*rounds_per_task'),
      ('train_fcl', ['--datasets=trec6,nowhere'], r'nowhere'),
      ('train_fcl', ['--max_weight_share=1.5'],
       r'flag --max_weight_share=1.5: 1.5 is not a number in the range '
       r'\[0.0, 1.0\]'),
      ('train_fcl', ['--max_weight_share=0'],
       r'max_weight_share must be a number in \(0, 1\].*got 0.0'),
      ('train_fcl', ['--data_dir=/no/such/dir'], r'/no/such/dir'),
      ('train_fcl', [f'--data_dir={_DATA_ROOT}/text_classification'],
       r'looks like the `text_classification/` folder itself; pass its '
       rf"parent, '{re.escape(_DATA_ROOT)}', as data_dir"),
      ('train_fcl', ['--noevaluate_initial'],
       r'--evaluate_initial does not apply to train_fcl'),
      # Two labels cannot make the smoke preset's distinct tasks.
      ('train_fcl', ['--datasets=subj'],
       r"Dataset 'subj' has 2 labels with test documents \(objective, "
       r'subjective\), which make 1 distinct label set.*tasks_per_client=\d+ '
       r'.*--allow_repeated_label_sets'),
      # More clients than the data can be split into: the flag, its value and
      # the limit (r8 has 5,485 training texts, 50 per client at least).
      ('weighting_demo', ['--num_clients=100'],
       r'error: num_clients=100: no split into 100 clients .*at most 109 '
       r'clients'),
      ('train_sparse_tags', ['--num_clients=1000'],
       r'error: num_clients=1000: .*so at most \d+ clients'),
      # The smoke preset has 4 clients.
      ('train_sparse_tags', ['--clients_per_round=5'],
       r'error: clients_per_round=5 is more than the 4 clients'),
      ('weighting_demo', ['--clients_per_round=4'],
       r'error: clients_per_round=4 is more than the 3 clients'),
      # absl's own wording once doubled the prefix ('error: ERROR:: ...').
      ('train_nmt', ['--flagfile=/no/such.flags'],
       r'^train_nmt.py: error: Unable to open flagfile: .*/no/such.flags'),
)


class ExperimentBinariesExecutionTest(parameterized.TestCase,
                                     tf.test.TestCase):

  # binary -> {case: bad_input_driver.Outcome}, filled once per binary.
  _outcomes_by_binary = {}

  def _command_outcome(self, case: int) -> bad_input_driver.Outcome:
    """What `_BAD_INPUT[case]`'s command line did.

    Every case of one binary runs in one driver process
    (`tests/apps/bad_input_driver.py`: the binary imported once, each command
    line parsed and run by `common.run` as `python -m` would), which saves
    starting TensorFlow and TFF for each.
    """
    binary = _BAD_INPUT[case][0]
    if binary not in self._outcomes_by_binary:
      cases = [i for i, c in enumerate(_BAD_INPUT) if c[0] == binary]
      self._outcomes_by_binary[binary] = dict(zip(
          cases, bad_input_driver.run_in_one_process(
              binary, _smoke_flags(binary),
              [_BAD_INPUT[i][1] for i in cases])))
    return self._outcomes_by_binary[binary][case]

  def test_one_process_runs_a_binary_as_python_m_does(self):
    # The driver's outcome of a bad command line is the shell's.
    case = next(i for i, c in enumerate(_BAD_INPUT) if c[0] == 'train_fcl')
    result = subprocess.run(
        [sys.executable, '-m', 'apps.fcl.bin.train_fcl',
         f'--flagfile={_smoke_flags("train_fcl")}',
         f'--output_dir={self.create_tempdir().full_path}/run',
         *_BAD_INPUT[case][1]], cwd=_REPO,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
        capture_output=True, text=True, timeout=600, check=False)
    outcome = self._command_outcome(case)
    self.assertEqual(result.returncode, outcome.returncode)
    self.assertEqual(
        [line for line in result.stderr.splitlines() if 'error:' in line],
        [line for line in outcome.stderr.splitlines() if 'error:' in line])

  @parameterized.parameters(*range(len(_BAD_INPUT)))
  def test_bad_input_exits_2_with_one_line(self, case):
    binary, _, message = _BAD_INPUT[case]
    returncode, stderr, written = self._command_outcome(case)
    self.assertEqual(returncode, 2, stderr[-2000:])
    error_lines = [line for line in stderr.splitlines() if 'error:' in line]
    self.assertLen(error_lines, 1, stderr[-2000:])
    self.assertTrue(error_lines[0].startswith(f'{binary}.py: error: '),
                    error_lines[0])
    self.assertRegex(error_lines[0], message)
    self.assertNotIn('Traceback', stderr)
    # Nothing was trained, nor left behind (no config.json that would refuse
    # the corrected command as another experiment).
    self.assertEqual(written, [])

  def test_a_users_dataset_and_word_vectors_named_on_the_command_line(self):
    # A dataset made up here: 6 labels, each with its own 3 words and a
    # word all share; 12 training and 4 test documents per label. Only
    # 'common' and label a's words have vectors (4 of the 19 words).
    root = self.create_tempdir().full_path
    folder = os.path.join(root, 'text_classification', 'mine')
    os.makedirs(folder)
    for split, count in (('train', 12), ('test', 4)):
      with open(os.path.join(folder, f'{split}.tsv'), 'w') as f:
        for label in 'abcdef':
          for i in range(count):
            f.write(f'{label}\t{label}word{i % 3} common {label}word'
                    f'{(i + 1) % 3}\n')
    os.makedirs(os.path.join(root, 'word_vectors'))
    with open(os.path.join(root, 'word_vectors', 'tiny.txt'), 'w') as f:
      for i, word in enumerate(['common', 'aword0', 'aword1', 'aword2']):
        f.write(word + ''.join(f' {0.1 * (i + j)}' for j in range(4)) + '\n')
    run_dir = os.path.join(self.create_tempdir().full_path, 'run')
    result = subprocess.run(
        [sys.executable, '-m', 'apps.fcl.bin.train_fcl',
         f'--flagfile={_smoke_flags("train_fcl")}', f'--output_dir={run_dir}',
         f'--data_dir={root}', '--datasets=mine', '--methods=fedavg',
         '--word_vectors=tiny.txt', '--embedding_dim=4',
         '--construction=shared_labels'],
        # As a user runs it: no TF_CPP_MIN_LOG_LEVEL (the Makefile sets one).
        cwd=_REPO, env={k: v for k, v in os.environ.items()
                        if k != 'TF_CPP_MIN_LOG_LEVEL'},
        capture_output=True, text=True, timeout=600, check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    # What the terminal shows: no TensorFlow start-up errors (its CUDA
    # plugins registered twice), no grappler lines (two INFO lines per
    # computation compiled for the worker, and an ERROR for each one without
    # outputs, which TFF leaves unoptimized)...
    self.assertNotIn('Unable to register', result.stderr)
    self.assertNotIn('grappler', result.stderr)
    # ... but the ACC table and, last, the report's path.
    *table, last = result.stdout.splitlines()
    self.assertIn('| FedAvg | ', '\n'.join(table))
    report = os.path.join(run_dir, 'results.md')
    self.assertEqual(last, f'Report: {report}')
    self.assertTrue(os.path.isfile(report))
    with open(os.path.join(run_dir, 'results.json')) as f:
      results = json.load(f)['results']['mine']['fedavg']
    self.assertAlmostEqual(results['word_vector_coverage'], 4 / 19)
    self.assertLen(results['accuracy_matrix'], 2)  # 2 clients (smoke)

  @parameterized.parameters('train_nmt', 'train_fcl')
  def test_max_weight_share_reaches_the_training_config(self, binary):
    # Parsing only (no training): the binary's flags, parsed as its `main`
    # parses them, with the smoke preset and then without the flag.
    script = (
        'import sys\n'
        'from absl import flags\n'
        f'from apps.{presets.application_of(binary)}.bin import {binary} as binary\n'
        'for argv in (sys.argv, sys.argv[:-1]):\n'
        '  flags.FLAGS.unparse_flags()\n'
        '  flags.FLAGS(argv)\n'
        '  print(binary._TRAINING.build().max_weight_share)\n')
    result = subprocess.run(
        [sys.executable, '-c', script, f'--flagfile={_smoke_flags(binary)}',
         '--max_weight_share=0.5'],
        cwd=_REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
        capture_output=True, text=True, timeout=600, check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    self.assertEqual(result.stdout.split(), ['0.5', 'None'])


if __name__ == '__main__':
  tf.test.main()
