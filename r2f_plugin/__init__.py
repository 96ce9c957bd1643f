"""r2f-bench: measurable, pluggable LLM unlearning.

The public API: everything a plugin author needs to add a method, a benchmark or a
command (see :mod:`r2f_bench.hookspecs`).
"""

__version__ = "0.1.0"

from .data import Benchmark, ForgetRequest, Probe, Target
from .errors import UserError
from .hookspecs import hookimpl
from .task import Task
from .unlearner import Context, Edit, Proxy, Unlearner

__all__ = ["Benchmark", "Context", "Edit", "ForgetRequest", "Probe", "Proxy", "Target", "Task", "Unlearner",
           "UserError", "__version__", "hookimpl"]
