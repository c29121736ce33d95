"""Execution contexts: TFF's C++ runtime on workers we start and stop.

One local worker (`local_cpp_context`), several local or remote workers with
each round's clients split across them (`multi_worker_context`), the
supervision of the workers (`tff_nlp.runtime.workers`), the absl flags that
choose between them (`tff_nlp.runtime.flags`), resident memory of this
process and its workers (`tff_nlp.runtime.memory`), and rounds whose server
state stays in a worker between calls (`tff_nlp.runtime.resident`).
"""

from tff_nlp.runtime.contexts import ContextSettings
from tff_nlp.runtime.contexts import CppContext
from tff_nlp.runtime.contexts import local_cpp_context
from tff_nlp.runtime.contexts import multi_worker_context
from tff_nlp.runtime.contexts import set_local_cpp_context
from tff_nlp.runtime.multi_worker import SplittingContext
from tff_nlp.runtime.resident import ResidentClientData
from tff_nlp.runtime.resident import ResidentProcess
from tff_nlp.runtime.workers import owned_worker_pids
from tff_nlp.runtime.workers import RemoteWorker
from tff_nlp.runtime.workers import worker_binary_path
from tff_nlp.runtime.workers import WorkerError
from tff_nlp.runtime.workers import WorkerProcess
