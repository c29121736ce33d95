"""The import order of DEVELOPERS.md ("Layout") holds, and no import circle.

Reads every module of `tff_nlp/` and `apps/` with `ast` (nothing is
imported):

*   the library, `tff_nlp`, never imports an application (`apps`);
*   each `tff_nlp.<folder>` imports only folders after it in `_LAYERS`,
    never one beside it;
*   an application (`apps.<x>`) imports the library, `apps.common` and the
    applications `_APP_DEPENDENCIES` lists for it, never the others; its
    binaries (`apps.<x>.bin`) may import any application; `apps.common`
    imports no application;
*   the graph of module imports (function-level imports included) has no
    cycle.
"""

import ast
import collections
import os

from absl.testing import absltest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The library's folders in import order (DEVELOPERS.md, "Layout"); a tuple is
# one layer of folders that do not import each other.
_LAYERS = (
    'training', 'algorithms', 'templates', 'aggregators', 'models',
    ('analysis', 'data', 'metrics'), 'runtime',
    ('errors', '_lazy'),
)
_RANK = {name: rank for rank, layer in enumerate(_LAYERS)
         for name in ((layer,) if isinstance(layer, str) else layer)}

# Application -> the other applications it builds on (besides apps.common).
# PEFT is LoRA on the text-to-SQL task; the robustness benchmark attacks the
# text-to-SQL task among others; scaling and the vocabulary slice measure the
# partial-models task and model.
_APP_DEPENDENCIES = {
    'common': set(),
    'fcl': set(),
    'nmt': set(),
    'partial_models': {'text2sql'},
    'peft': {'text2sql'},
    'robustness': {'text2sql'},
    'scaling': {'partial_models', 'text2sql'},
    'text2sql': set(),
    'weighting_demo': set(),
}


# Modules of `apps` itself, below every application: the binaries' stderr
# filter, which `apps/__init__.py` starts before anything imports TensorFlow,
# so it imports the standard library only.
_APP_BASE = ('apps._binary_stderr',)


def _modules() -> dict[str, str]:
  """Module name -> path, for every module of tff_nlp and apps."""
  modules = {}
  for package in ('tff_nlp', 'apps'):
    for root, _, files in os.walk(os.path.join(_REPO, package)):
      for name in files:
        if name.endswith('.py'):
          path = os.path.join(root, name)
          module = os.path.relpath(path, _REPO)[:-3].replace(os.sep, '.')
          modules[module.removesuffix('.__init__')] = path
  return modules


def _imports(path: str, modules) -> set[str]:
  """The tff_nlp and apps modules `path` imports (a name resolved to its
  module)."""
  found = set()
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.level == 0 and (
        node.module or '').split('.')[0] in ('tff_nlp', 'apps'):
      for alias in node.names:
        name = f'{node.module}.{alias.name}'
        found.add(name if name in modules else node.module)
    elif isinstance(node, ast.Import):
      found.update(a.name for a in node.names
                   if a.name.split('.')[0] in ('tff_nlp', 'apps'))
  return {m for m in found if m in modules}


def _part(module: str) -> str:
  """The second component: a library folder or an application."""
  return module.split('.')[1] if '.' in module else ''


class LayeringExecutionTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    modules = _modules()
    cls.graph = {m: _imports(p, modules) for m, p in modules.items()}

  def test_every_folder_has_a_layer(self):
    library = {_part(m) for m in self.graph if m.startswith('tff_nlp.')}
    self.assertEmpty(sorted(library - set(_RANK)),
                     'a folder of tff_nlp/ missing from _LAYERS (and from '
                     'DEVELOPERS.md, "Layout")')
    applications = {_part(m) for m in self.graph if m.startswith('apps.')
                    and m not in _APP_BASE}
    self.assertEmpty(sorted(applications - set(_APP_DEPENDENCIES)),
                     'a folder of apps/ missing from _APP_DEPENDENCIES')

  def test_the_library_imports_no_application(self):
    self.assertEmpty(sorted(
        f'{module} imports {target}'
        for module, imported in self.graph.items()
        if module.split('.')[0] == 'tff_nlp'
        for target in imported if target.split('.')[0] == 'apps'))

  def test_library_imports_run_down_the_layers(self):
    upward = []
    for module, imported in self.graph.items():
      if not module.startswith('tff_nlp.'):
        continue
      source = _part(module)
      for target in imported:
        destination = _part(target)
        if (destination and source != destination
            and _RANK[destination] <= _RANK[source]):
          upward.append(f'{module} imports {target}')
    self.assertEmpty(sorted(upward))

  def test_applications_import_only_what_they_build_on(self):
    stray = []
    for module, imported in self.graph.items():
      parts = module.split('.')
      if (parts[0] != 'apps' or len(parts) < 2 or parts[2:3] == ['bin']
          or module in _APP_BASE):
        continue
      allowed = {parts[1], 'common'} | _APP_DEPENDENCIES[parts[1]]
      if parts[1] == 'common':
        allowed = {'common'}
      for target in imported:
        target_parts = target.split('.')
        if (target_parts[0] == 'apps' and len(target_parts) > 1
            and target_parts[1] not in allowed):
          stray.append(f'{module} imports {target}')
        if target_parts[0] == 'apps' and target_parts[2:3] == ['bin'] and (
            target_parts[1] != 'common'):
          stray.append(f'{module} imports the binary {target}')
    self.assertEmpty(sorted(stray))

  def test_the_base_of_apps_imports_nothing_of_ours(self):
    for module in _APP_BASE:
      self.assertEmpty(sorted(self.graph[module]), module)

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
