"""Executes every notebook in colabs/ headless, at smoke scale.

A notebook that raises fails the test with the failing cell's traceback.
Notebooks run in their own Jupyter kernel (this Python), from the colabs/
folder, with `TFF_NLP_NOTEBOOK_ROUNDS=2` so training cells stay short; the
kernel starts and stops its own TFF worker (the notebooks close their
context), which the check at the end makes sure of. The notebooks share
nothing, so `make test` may run two at once, one on each pytest worker
(tests/conftest.py).
"""

import glob
import os
import shutil
import subprocess
import sys
from unittest import mock
import uuid

from absl.testing import parameterized
import nbclient
import nbformat
import tensorflow as tf

from tests import test_helpers

_COLABS_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))),
    'colabs',
)
_NOTEBOOKS = sorted(glob.glob(os.path.join(_COLABS_DIR, '*.ipynb')))


_MARK_VAR = 'TFF_NLP_NOTEBOOK_TEST_MARK'


def _worker_pids(mark: str) -> set[int]:
  """The live `worker_binary` processes started by one notebook's kernel.

  The kernel's workers are not children of this process, so
  `runtime.owned_worker_pids()` does not see them. They inherit the kernel's
  environment, whose `_MARK_VAR` (a value of its own per test) tells them
  apart from the workers of other TFF programs running on the machine at the
  same time, another notebook's included (its working directory, colabs/,
  would not).
  """
  return test_helpers.marked_worker_pids(_MARK_VAR, mark)


_REPO = os.path.dirname(_COLABS_DIR)


class NotebooksExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_there_is_a_notebook(self):
    self.assertTrue(_NOTEBOOKS, f'no notebooks in {_COLABS_DIR}')

  @parameterized.named_parameters(
      (os.path.basename(p), p) for p in _NOTEBOOKS)
  def test_notebook_runs(self, path):
    mark = uuid.uuid4().hex
    self.enter_context(mock.patch.dict(os.environ, {
        'TFF_NLP_NOTEBOOK_ROUNDS': '2', 'TF_CPP_MIN_LOG_LEVEL': '2',
        _MARK_VAR: mark}))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=900,
        kernel_name='python3',
        resources={'metadata': {'path': _COLABS_DIR}},
    )
    client.execute()  # Raises CellExecutionError naming the failing cell.

    code_cells = [c for c in notebook.cells if c.cell_type == 'code']
    errors = [
        o for c in code_cells for o in c.get('outputs', [])
        if o.get('output_type') == 'error'
    ]
    self.assertFalse(errors)
    # The guarded install cell saw tff_nlp installed and did nothing.
    install_outputs = ''.join(
        o.get('text', '') for c in code_cells if 'find_spec' in c.source
        for o in c.outputs
    )
    self.assertIn('nothing to do', install_outputs)
    leftover = _worker_pids(mark)
    self.assertFalse(leftover, f'{path} left TFF workers running: {leftover}')

  def test_local_instructions_are_commands_that_exist(self):
    # `.venv/bin/python -m jupyter notebook` failed: Jupyter Notebook cannot
    # live in .venv (it needs typing_extensions>=4.6; TensorFlow 2.14 refuses
    # it). `make notebook` serves it from its own environment.
    texts = {os.path.basename(p): open(p, encoding='utf-8').read()
             for p in _NOTEBOOKS}
    texts['README.md'] = open(os.path.join(_REPO, 'README.md'),
                              encoding='utf-8').read()
    for name, text in texts.items():
      self.assertNotIn('-m jupyter notebook', text, name)
      self.assertNotIn('jupyter lab', text, name)
    self.assertIn('make notebook', texts['quickstart.ipynb'])
    self.assertIn('make notebook', texts['README.md'])
    # The target exists and installs Jupyter beside, not into, .venv; the
    # notebooks' kernel is .venv's Python.
    dry_run = subprocess.run(
        ['make', '-n', '-o', '.venv/.tff_nlp-installed', 'notebook',
         'NOTEBOOK_VENV=/nowhere/nb'],
        cwd=_REPO, capture_output=True, text=True, check=True).stdout
    self.assertIn(
        '"/nowhere/nb/bin/pip" install -q -r requirements-notebook.txt',
        dry_run)
    self.assertIn(
        '.venv/bin/python" -m ipykernel install --prefix "/nowhere/nb"',
        dry_run)
    self.assertIn('"/nowhere/nb/bin/jupyter" notebook --notebook-dir=colabs',
                  dry_run)
    # .venv itself can run a notebook without a browser.
    self.assertTrue(os.path.exists(
        os.path.join(_REPO, 'requirements-notebook.txt')))
    self.assertTrue(shutil.which('jupyter-execute', path=os.path.dirname(
        sys.executable)), 'jupyter-execute is missing from .venv')


if __name__ == '__main__':
  tf.test.main()
