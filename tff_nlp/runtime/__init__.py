"""Execution contexts: TFF's C++ runtime on workers we start and stop.

One local worker (`local_cpp_context`), several local or remote workers with
each round's clients split across them (`multi_worker_context`), the absl
flags that choose between them (`tff_nlp.runtime.flags`), and resident
memory of this process and its workers (`tff_nlp.runtime.memory`).
"""

from tff_nlp.runtime.contexts import ContextSettings
from tff_nlp.runtime.contexts import CppContext
from tff_nlp.runtime.contexts import local_cpp_context
from tff_nlp.runtime.contexts import multi_worker_context
from tff_nlp.runtime.contexts import owned_worker_pids
from tff_nlp.runtime.contexts import RemoteWorker
from tff_nlp.runtime.contexts import set_local_cpp_context
from tff_nlp.runtime.contexts import worker_binary_path
from tff_nlp.runtime.contexts import WorkerError
from tff_nlp.runtime.contexts import WorkerProcess
from tff_nlp.runtime.multi_worker import SplittingContext
