"""keras-nlp, imported and called without its side effects.

keras-nlp 0.10 in Keras 2 mode imports keras-core, which prints "Using
TensorFlow backend" on stdout on import; stdout is for binaries' results.
Modules that use keras-nlp import it from here:
`from tff_nlp.models._keras_nlp import keras_nlp`. The context managers below
make building keras-nlp layers deterministic and calling them with explicit
padding masks quiet.
"""

from collections.abc import Iterator
import contextlib
import io
import logging
import random

from absl import logging as absl_logging

with contextlib.redirect_stdout(io.StringIO()):
  # pylint: disable-next=g-import-not-at-top,g-bad-import-order,unused-import
  import keras_nlp


@contextlib.contextmanager
def seeded_keras_initializers(seed: int) -> Iterator[None]:
  """Makes the unseeded Keras initializers used inside deterministic.

  Keras 2 gives an unseeded initializer a stateless seed when it first draws,
  from the generator that `tf.keras.utils.set_random_seed` installs (else
  from Python's `random`). Installing a generator seeded with `seed` while
  the model is built, and restoring the previous one after, gives every
  variable its own seed, the same on every build, in eager and graph mode,
  without touching the caller's random state. (keras-nlp layers clone one
  initializer for all their sublayers, so seeded initializers would give e.g.
  the query, key and value projections of a layer equal weights.)
  """
  # pylint: disable-next=g-import-not-at-top
  from keras.src import backend as keras_backend

  # pylint: disable-next=protected-access
  seed_generator = keras_backend._SEED_GENERATOR
  previous = getattr(seed_generator, 'generator', None)
  seed_generator.generator = random.Random(seed)
  try:
    yield
  finally:
    seed_generator.generator = previous


class _DropsExplicitMaskWarning(logging.Filter):
  """Drops keras-nlp's warning that an explicit padding mask wins.

  In graph mode (e.g. in TFF computations) every Keras tensor has a
  `_keras_mask` attribute, None here, and keras-nlp then warns on each layer
  call that the explicitly passed padding mask overrides it, which is the
  intent.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    return 'explicitly setting `padding_mask`' not in record.getMessage()


@contextlib.contextmanager
def explicit_masks_without_warnings() -> Iterator[None]:
  """Silences `_DropsExplicitMaskWarning`'s warning while keras-nlp runs."""
  logger = absl_logging.get_absl_logger()
  log_filter = _DropsExplicitMaskWarning()
  logger.addFilter(log_filter)
  try:
    yield
  finally:
    logger.removeFilter(log_filter)
