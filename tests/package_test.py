"""What `import tff_nlp` loads, and where the public names are."""

import json
import subprocess
import sys

from absl.testing import parameterized
import tensorflow as tf

_PROBE = '''
import json, sys
import tff_nlp
loaded = sorted(m for m in sys.modules
                if m == 'apps' or m.startswith('apps.')
                or m in ('matplotlib', 'keras_nlp'))
print(json.dumps(loaded))
'''

_APPS_PROBE = '''
import json, sys
import apps
print(json.dumps(sorted(m for m in sys.modules
                        if m.split('.')[0] in ('tensorflow', 'tff_nlp'))))
'''


class PackageExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_import_loads_no_application_nor_matplotlib(self):
    # A fresh interpreter: this test session has imported everything.
    result = subprocess.run([sys.executable, '-c', _PROBE], capture_output=True,
                            text=True, check=True, timeout=300)
    self.assertEqual(json.loads(result.stdout.strip().splitlines()[-1]), [])

  def test_import_apps_loads_neither_tensorflow_nor_the_library(self):
    # `apps/__init__` starts a binary's stderr filter before anything imports
    # TensorFlow, so it must stay this light.
    result = subprocess.run([sys.executable, '-c', _APPS_PROBE],
                            capture_output=True, text=True, check=True,
                            timeout=300)
    self.assertEqual(json.loads(result.stdout.strip().splitlines()[-1]), [])

  @parameterized.parameters([
      'algorithms.build_fl_process',
      'algorithms.build_lora_process',
      'algorithms.build_fcl_process',
      'algorithms.build_dynamic_pulling_process',
      'algorithms.partial_models.compose_partial_model_process',
      'algorithms.partial_models.build_row_selection',
      'aggregators.WeightShareCapFactory',
      'aggregators.TrimmedMeanFactory',
      'aggregators.IndexedSlicesMeanFactory',
      'aggregators.build_model_aggregator',
      'templates.build_weighted_client_work',
      'templates.for_each_batch',
      'templates.compose_partial_model_process',
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
    self.assertContainsSubset({'aggregators', 'templates', 'algorithms'},
                              set(dir(tff_nlp)))
    self.assertContainsSubset({'build_fl_process', 'build_fcl_process',
                               'partial_models'},
                              set(dir(tff_nlp.algorithms)))


if __name__ == '__main__':
  tf.test.main()
