"""The text-to-SQL statistics binary as a user runs it: `python -m`.

Two runs (each pays TensorFlow's import, through apps.common.binary): the JSON
of every client, and the exit status for a missing --data_dir. The markdown
layout is `text2sql_stats.to_markdown`, tested in tests/tff_nlp/data.
"""

import json
import os
import subprocess
import sys

import tensorflow as tf

from tff_nlp import data

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
# Fields of one client's JSON object, in output order.
_FIELDS = [
    'train', 'dev', 'test', 'questions', 'unique_queries',
    'sql_pattern_count', 'questions_per_unique_query',
    'unique_tables_per_query_mean', 'unique_tables_per_query_max',
    'selects_per_query_mean', 'selects_per_query_max',
]


def _run(*args):
  return subprocess.run(
      [sys.executable, '-m', 'apps.text2sql.bin.text2sql_stats', *args],
      cwd=_REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
      capture_output=True, text=True, timeout=300, check=False)


class Text2sqlStatsBinaryExecutionTest(tf.test.TestCase):

  def test_json_of_every_client(self):
    # --data_dir is the shared/data folder, as for every binary.
    result = _run(f'--data_dir={data.find_data_dir()}')
    self.assertEqual(result.returncode, 0, result.stderr)
    stats = json.loads(result.stdout)  # One JSON object, nothing else.
    self.assertEqual(list(stats), list(data.text2sql.CLIENTS))
    self.assertEqual(list(stats['atis']), _FIELDS)
    # The paper's split sizes (lorar.md); imdb differs, see text2sql.py.
    self.assertEqual(
        {name: [row['train'], row['dev'], row['test']]
         for name, row in stats.items()},
        {'advising': [2629, 229, 573], 'atis': [4347, 486, 447],
         'geography': [549, 49, 279], 'restaurants': [228, 76, 74],
         'scholar': [499, 100, 218], 'academic': [120, 38, 38],
         'imdb': [79, 26, 26], 'yelp': [78, 26, 24]})
    # restaurants.json: 378 sentences over 23 queries.
    self.assertEqual(stats['restaurants']['questions_per_unique_query'],
                     round(378 / 23, 4))

  def test_missing_data_dir_exits_2_with_one_line(self):
    missing = os.path.join(self.create_tempdir().full_path, 'none')
    result = _run(f'--data_dir={missing}')
    self.assertEqual(result.returncode, 2)
    self.assertEqual(result.stdout, '')
    error_lines = [line for line in result.stderr.splitlines()
                   if 'error:' in line]
    self.assertEqual(error_lines, [
        f"text2sql_stats.py: error: Text-to-SQL folder "
        f"'{os.path.join(missing, 'text2sql')}' (from the data_dir argument) "
        f"does not exist. Pass the `shared/data` folder, the one holding "
        f"`text2sql/`, as data_dir (--data_dir) or TFF_NLP_DATA_DIR; leave "
        f"both unset to download the data."])


if __name__ == '__main__':
  tf.test.main()
