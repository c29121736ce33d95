"""The applications of tff_nlp: one folder each, beside the library.

Every binary is `apps.<application>.bin.<name>`. Importing the library first
starts a binary's stderr filter (`tff_nlp._binary_stderr`) before anything
imports TensorFlow: a binary's module is imported after this package, and its
own imports (absl, `apps.common`) may import TensorFlow before `tff_nlp`.
"""

import tff_nlp  # pylint: disable=unused-import
