"""The applications of tff_nlp: one folder each, beside the library.

Every binary is `apps.<application>.bin.<name>`. This package starts a
binary's stderr filter (`apps._binary_stderr`, standard library only) before
anything imports TensorFlow: a binary's module is imported after this
package, and its own imports (absl, `apps.common`, `tff_nlp`) may import
TensorFlow. `import apps` loads neither TensorFlow nor the library.
"""

from apps import _binary_stderr
_binary_stderr.start_if_binary()
