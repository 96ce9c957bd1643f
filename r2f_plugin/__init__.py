"""r2f-bench: measurable, pluggable LLM unlearning.

Plugins import :data:`hookimpl` from here to implement the hooks declared in
:mod:`r2f_bench.hookspecs`.
"""

from .hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
