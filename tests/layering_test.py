"""The import order of DEVELOPERS.md ("Layout") holds, and no import circle.

Reads every module of `tff_nlp/` with `ast` (nothing is imported): each
`tff_nlp.<layer>` may import only layers after it in `_LAYERS`, never one
beside it, and the graph of module imports (function-level imports
included) has no cycle.
"""

import ast
import collections
import os

from absl.testing import absltest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Layers in import order (DEVELOPERS.md, "Layout"); a tuple is one layer of
# folders that do not import each other.
_LAYERS = (
    'bin', 'benchmarks', 'experiments', 'tasks', 'training', 'algorithms',
    ('analysis', 'baselines'), 'models', ('sparse', 'metrics', 'data', 'plots'),
    'runtime', ('errors', '_lazy', '_binary_stderr'),
)
_RANK = {name: rank for rank, layer in enumerate(_LAYERS)
         for name in ((layer,) if isinstance(layer, str) else layer)}


def _modules() -> dict[str, str]:
  """Module name -> path, for every module of tff_nlp."""
  modules = {}
  for root, _, files in os.walk(os.path.join(_REPO, 'tff_nlp')):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(root, name)
        module = os.path.relpath(path, _REPO)[:-3].replace(os.sep, '.')
        modules[module.removesuffix('.__init__')] = path
  return modules


def _imports(path: str, modules) -> set[str]:
  """The tff_nlp modules `path` imports (a name resolved to its module)."""
  found = set()
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.level == 0 and (
        node.module or '').startswith('tff_nlp'):
      for alias in node.names:
        name = f'{node.module}.{alias.name}'
        found.add(name if name in modules else node.module)
    elif isinstance(node, ast.Import):
      found.update(a.name for a in node.names if a.name.startswith('tff_nlp'))
  return {m for m in found if m in modules}


def _layer(module: str) -> str:
  return module.split('.')[1] if '.' in module else ''


class LayeringExecutionTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    modules = _modules()
    cls.graph = {m: _imports(p, modules) for m, p in modules.items()}

  def test_every_folder_has_a_layer(self):
    folders = {_layer(m) for m in self.graph} - {''}
    self.assertEmpty(sorted(folders - set(_RANK)),
                     'a folder of tff_nlp/ missing from _LAYERS (and from '
                     'DEVELOPERS.md, "Layout")')

  def test_imports_run_down_the_layers(self):
    upward = []
    for module, imported in self.graph.items():
      source = _layer(module)
      for target in imported:
        destination = _layer(target)
        if (source and destination and source != destination
            and _RANK[destination] <= _RANK[source]):
          upward.append(f'{module} imports {target}')
    self.assertEmpty(sorted(upward))

  def test_no_import_circle(self):
    # Depth-first search; a grey module met again closes a cycle.
    state = collections.defaultdict(int)  # 0 new, 1 on the path, 2 done.
    cycles = []

    def visit(module, path):
      state[module] = 1
      for target in sorted(self.graph[module]):
        # A package's __init__ importing its own modules is not a circle.
        if module.startswith(target + '.') or target.startswith(
            module + '.'):
          continue
        if state[target] == 1:
          cycles.append(path[path.index(target):] + [target])
        elif state[target] == 0:
          visit(target, path + [target])
      state[module] = 2

    for module in sorted(self.graph):
      if state[module] == 0:
        visit(module, [module])
    self.assertEmpty([' -> '.join(c) for c in cycles])


if __name__ == '__main__':
  absltest.main()
