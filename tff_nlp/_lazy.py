"""Package attributes imported on first use (PEP 562 module `__getattr__`).

Some subpackages export modules that import keras-nlp, which takes seconds
and is not needed by every user of the package; they are imported when
first accessed instead of when the package is.
"""

from collections.abc import Mapping
import importlib
import sys
from typing import Optional


def lazy_exports(
    package: str,
    exports: Mapping[str, tuple[str, Optional[str]]],
):
  """`(__getattr__, __dir__)` for a package with lazily imported exports.

  Args:
    package: The package's `__name__`, for error messages.
    exports: Exported name -> (module, attribute of it, or None for the
      module itself).

  Returns:
    The package's `__getattr__` and `__dir__`.
  """

  def getattr_(name):
    if name not in exports:
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    module_name, attribute = exports[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)

  def dir_():
    # The package's own names (read when called: the package is still being
    # initialised when this runs) and the lazy ones.
    return sorted(set(vars(sys.modules[package])) | set(exports))

  return getattr_, dir_
