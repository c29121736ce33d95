"""Built processes kept on disk, so that other Python processes skip tracing.

`ProcessCache` keeps built processes for the Python process that built them.
A sweep whose runs are separate programs (a shell loop over seeds, a job per
configuration, a resumed run, the binaries a test suite starts) traces the
same computations again in each. A `ProcessStore` keeps what a build
returned in a folder, keyed like the cache, so the next program loads it:
loading a process is milliseconds, tracing it seconds to minutes.

What is stored is the built object itself (a `tff.learning.templates.
LearningProcess`, our `FLProcess`, a tuple of them, ...) pickled with two
substitutions: every `tff.Computation` becomes its serialized `pb.Computation`
(TFF's public `tff.framework.serialize_computation`) with its Python-level
type signature, and every TFF type is rebuilt from its parts, so a loaded
process returns the same Python containers (`LearningAlgorithmState`,
named tuples, attrs classes) as the built one. An object that cannot be
stored that way (one holding a Keras model, a `tf.function` or a closure)
is simply not stored: `ProcessStore.put` says so and the caller keeps
building it.

An entry is keyed by the cache key's `repr` together with a fingerprint of
the code that builds processes (the sources of `tff_nlp` and `apps`) and of
Python, TensorFlow and TFF's versions, so a change of the code or of the
stack never loads an old entry. The key must name everything else the build
depends on (`ProcessCache`'s rule); data named by a path only is not re-read,
so clear the folder after changing a dataset in place.

`TFF_NLP_PROCESS_CACHE_DIR=<folder>` in the environment gives
`shared_processes()` a store in that folder (off when unset).
"""

import functools
import hashlib
import io
import os
import pickle
import sys
import tempfile
from typing import Any, Hashable, Optional

from absl import logging
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import computation_pb2

# Environment variable: a folder for the store of `shared_processes()`.
DIR_ENV_VAR = 'TFF_NLP_PROCESS_CACHE_DIR'
_SUFFIX = '.process.pkl'
# The packages whose code builds the stored computations (fingerprinted).
_CODE_PACKAGES = ('tff_nlp', 'apps')

_types = tff.types
_PLACEMENT_LITERAL = type(tff.CLIENTS)


class NotStorableError(Exception):
  """A key or built object that the store cannot keep (see the module doc)."""


@functools.cache
def code_fingerprint() -> str:
  """SHA-256 over the Python sources of `tff_nlp` and `apps` and the stack's
  versions: entries written by other code are never loaded."""
  digest = hashlib.sha256()
  digest.update(f'{sys.version};{tf.__version__};{tff.__version__};'.encode())
  repo = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  for package in _CODE_PACKAGES:
    root = os.path.join(repo, package)
    paths = []
    for directory, dirs, files in os.walk(root):
      dirs[:] = sorted(d for d in dirs if d != '__pycache__')
      paths += [os.path.join(directory, f) for f in files if f.endswith('.py')]
    for path in sorted(paths):
      with open(path, 'rb') as f:
        content = f.read()
      digest.update(f'{os.path.relpath(path, repo)}:{len(content)};'.encode())
      digest.update(content)
  return digest.hexdigest()


def key_digest(key: Hashable) -> str:
  """The file name of `key`'s entry: SHA-256 over its repr and the code.

  Raises:
    NotStorableError: If `key`'s repr names an object by its address, which
      differs from one program to the next.
  """
  text = repr(key)
  if ' at 0x' in text:
    raise NotStorableError(
        f'the key names an object by its address, not by value: {text[:200]}')
  return hashlib.sha256(
      f'{code_fingerprint()}\n{text}'.encode()).hexdigest()[:32]


# --- Pickling computations and TFF types by their parts. ---


def _computation(proto_bytes: bytes, type_signature: tff.FunctionType):
  computation = tff.framework.deserialize_computation(
      computation_pb2.Computation.FromString(proto_bytes))
  # The proto's type has no Python containers; the stored signature does.
  return tff.framework.ConcreteComputation.with_type(computation,
                                                     type_signature)


def _struct(elements, container):
  if container is None:
    return _types.StructType(elements, convert=False)
  return _types.StructWithPythonType(elements, container)


def _placement(uri: str):
  return {tff.CLIENTS.uri: tff.CLIENTS, tff.SERVER.uri: tff.SERVER}[uri]


def _reduce_type(value: tff.Type):
  """A TFF type as (constructor, its parts), the parts reduced in turn."""
  if isinstance(value, _types.StructType):
    elements = [(name, element)
                for name, element in tff.structure.iter_elements(value)]
    container = getattr(value, 'python_container', None)
    return _struct, (elements, container)
  if isinstance(value, _types.TensorType):
    return _types.TensorType, (value.dtype, value.shape)
  if isinstance(value, _types.FederatedType):
    return _types.FederatedType, (value.member, value.placement,
                                  value.all_equal)
  if isinstance(value, _types.SequenceType):
    return _types.SequenceType, (value.element,)
  if isinstance(value, _types.FunctionType):
    return _types.FunctionType, (value.parameter, value.result)
  if isinstance(value, _types.AbstractType):
    return _types.AbstractType, (value.label,)
  if isinstance(value, _types.PlacementType):
    return _types.PlacementType, ()
  raise NotStorableError(f'a TFF type the store does not know: {value!r}')


class _Pickler(pickle.Pickler):

  def reducer_override(self, obj):
    if isinstance(obj, tff.framework.ConcreteComputation):
      proto = tff.framework.serialize_computation(obj)
      return _computation, (proto.SerializeToString(), obj.type_signature)
    if isinstance(obj, tff.Computation):
      raise NotStorableError(
          f'a computation the store cannot serialize: {type(obj).__name__}')
    if isinstance(obj, tff.Type):
      return _reduce_type(obj)
    if isinstance(obj, _PLACEMENT_LITERAL):  # A singleton: by its URI.
      return _placement, (obj.uri,)
    if isinstance(obj, (tf.Module, tf.keras.layers.Layer, tf.Variable,
                        tf.Tensor)) or callable(getattr(
                            obj, 'get_concrete_function', None)):
      raise NotStorableError(
          f'a TensorFlow object, bound to this program: {type(obj).__name__}')
    return NotImplemented


def dumps(value: Any) -> bytes:
  """`value` pickled with its computations serialized (see the module doc).

  Raises:
    NotStorableError: If `value` holds something that cannot be stored.
  """
  buffer = io.BytesIO()
  try:
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
  except NotStorableError:
    raise
  except (pickle.PicklingError, TypeError, AttributeError) as e:
    raise NotStorableError(f'{type(e).__name__}: {e}') from e
  return buffer.getvalue()


def loads(data: bytes) -> Any:
  return pickle.loads(data)


class ProcessStore:
  """Built objects in a folder, one file per key (see the module doc)."""

  def __init__(self, directory: str):
    self._directory = directory

  @property
  def directory(self) -> str:
    return self._directory

  def _path(self, key: Hashable) -> str:
    return os.path.join(self._directory, key_digest(key) + _SUFFIX)

  def get(self, key: Hashable) -> Optional[Any]:
    """The object stored under `key`, or None (absent, or not storable)."""
    try:
      path = self._path(key)
    except NotStorableError:
      return None
    try:
      with open(path, 'rb') as f:
        data = f.read()
    except FileNotFoundError:
      return None
    try:
      return loads(data)
    except Exception as e:  # pylint: disable=broad-except
      # A file of another program's partial write cannot occur (writes are
      # atomic), but one of a since-changed class can: build instead.
      logging.warning('Process store: could not load %s (%s: %s); '
                      'building instead.', path, type(e).__name__, e)
      return None

  def put(self, key: Hashable, value: Any) -> bool:
    """Stores `value` under `key`; False (and a log line) if not storable."""
    try:
      path = self._path(key)
      data = dumps(value)
    except NotStorableError as e:
      logging.info('Process store: not storing %r: %s', key, e)
      return False
    os.makedirs(self._directory, exist_ok=True)
    # Atomic: programs building the same key at once each write a whole file.
    fd, tmp = tempfile.mkstemp(dir=self._directory, suffix='.tmp')
    try:
      with os.fdopen(fd, 'wb') as f:
        f.write(data)
      os.replace(tmp, path)
    except BaseException:
      if os.path.exists(tmp):
        os.remove(tmp)
      raise
    return True
