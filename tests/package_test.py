"""What `import tff_nlp` loads, and where the public names are."""

import json
import subprocess
import sys

from absl.testing import parameterized
import tensorflow as tf

_PROBE = '''
import json, sys
import tff_nlp
loaded = sorted(m for m in ('tff_nlp.experiments', 'tff_nlp.plots',
                            'matplotlib', 'keras_nlp') if m in sys.modules)
print(json.dumps(loaded))
'''


class PackageExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_import_loads_neither_experiments_nor_matplotlib(self):
    # A fresh interpreter: this test session has imported everything.
    result = subprocess.run([sys.executable, '-c', _PROBE], capture_output=True,
                            text=True, check=True, timeout=300)
    self.assertEqual(json.loads(result.stdout.strip().splitlines()[-1]), [])

  @parameterized.parameters([
      'experiments.run_weighting_demo',
      'plots.plot_metric_by_round',
      'algorithms.build_fl_process',
      'algorithms.build_fcl_process',
      'algorithms.build_sparse_tag_process',
      'algorithms.build_vocab_sliced_process',
      'algorithms.build_dynamic_pulling_process',
  ])
  def test_public_names_resolve(self, path):
    import tff_nlp  # pylint: disable=g-import-not-at-top
    value = tff_nlp
    for name in path.split('.'):
      value = getattr(value, name)
    self.assertTrue(callable(value))

  def test_unknown_attribute_is_an_attribute_error(self):
    import tff_nlp  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(AttributeError, "'tff_nlp' has no attribute"):
      getattr(tff_nlp, 'nowhere')
    self.assertContainsSubset({'experiments', 'plots', 'algorithms'},
                              set(dir(tff_nlp)))
    self.assertContainsSubset({'build_fl_process', 'build_fcl_process',
                               'build_vocab_sliced_process'},
                              set(dir(tff_nlp.algorithms)))


if __name__ == '__main__':
  tf.test.main()
