"""The Python snippets of docs/algorithms.md run as written.

A reader pastes the page's snippets into one session, in order, bringing
only what the page says is theirs (a `model_fn`, client datasets, ...).
Each snippet is named here by a line it holds: the cheap ones are executed
in one namespace, in page order (they build processes of the tiny linear
model of `tests/linear_model.py`, and run one round of the first);
the others are compiled only, with the reason. A snippet added to the page
without an entry here fails `test_every_snippet_is_listed`.
"""

import os
import re

import tensorflow as tf

from tests import linear_model

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PAGE = os.path.join(_REPO, 'docs', 'algorithms.md')

# A line of each snippet -> None (executed) or why it is only compiled.
_SNIPPETS = {
    "algorithm='fedopt',": None,
    'tff.learning.dp_aggregator(noise_multiplier=': None,
    'aggregation.AggregationConfig(target_epsilon=8.0)': None,
    "method='fedseit_sit',": (
        'trains the FCL CNN over 5 tasks and needs the reader\'s datasets'),
}


def _snippets() -> list[str]:
  with open(_PAGE, encoding='utf-8') as f:
    return re.findall(r'^```python\n(.*?)^```', f.read(), re.S | re.M)


def _key(snippet: str) -> str:
  keys = [key for key in _SNIPPETS if key in snippet]
  if len(keys) != 1:
    raise AssertionError(
        f'docs/algorithms.md snippet matches {len(keys)} entries of '
        f'_SNIPPETS (want 1): {keys}\n{snippet}')
  return keys[0]


class DocsSnippetsExecutionTest(tf.test.TestCase):

  def test_every_snippet_is_listed(self):
    snippets = _snippets()
    self.assertLen(snippets, len(_SNIPPETS))
    self.assertCountEqual([_key(s) for s in snippets], list(_SNIPPETS))

  def test_snippets_run_as_written(self):
    clients = linear_model.three_clients()
    # What the page leaves to the reader.
    namespace = {
        '__name__': 'docs_algorithms_md',
        'model_fn': linear_model.model_fn,
        'client_datasets': [linear_model.to_dataset(c) for c in clients],
    }
    executed = []
    for i, snippet in enumerate(_snippets()):
      code = compile(snippet, f'docs/algorithms.md, python snippet {i + 1}',
                     'exec')
      if _SNIPPETS[_key(snippet)] is None:
        exec(code, namespace)  # pylint: disable=exec-used
        executed.append(_key(snippet))
    self.assertLen(executed, 3)
    # The first snippet ran a round and read the model back.
    self.assertLen(namespace['weights'].trainable, 2)
    # The DP snippet built a Lorar process on the DP aggregator.
    self.assertIn('aggregator', str(
        namespace['process'].next.type_signature.result))
    # The ε snippet calibrated a noise multiplier the adaptive clip allows
    # (below 0.1 * 100 clients per round) and spent less than 8 by round 250.
    accounting = namespace['accounting']
    self.assertBetween(accounting.noise_multiplier, 0.1, 10.0)
    self.assertLess(accounting.epsilon(250), 8.0)


if __name__ == '__main__':
  tf.test.main()
