"""Execution contexts: TFF's local C++ runtime with an owned, stoppable worker."""

from tff_nlp.runtime.contexts import ContextSettings
from tff_nlp.runtime.contexts import LocalCppContext
from tff_nlp.runtime.contexts import local_cpp_context
from tff_nlp.runtime.contexts import owned_worker_pids
from tff_nlp.runtime.contexts import set_local_cpp_context
from tff_nlp.runtime.contexts import WorkerError
from tff_nlp.runtime.contexts import WorkerProcess
