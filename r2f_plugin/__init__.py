"""r2f-bench: measurable, pluggable LLM unlearning.

The public API: everything a plugin author needs to add a method, a benchmark or a
command (see :mod:`r2f_bench.hookspecs`). Names load on first use, so importing a
submodule (the command line, a plugin) does not import torch first.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_HOME = {
    "Attack": "attack", "Attacked": "attack", "Benchmark": "data", "ForgetRequest": "data", "Probe": "data", "Target": "data",
    "UserError": "errors", "hookimpl": "hookspecs", "MetricSpec": "metric", "register_metric": "metric", "Task": "task",
    "Context": "unlearner", "Edit": "unlearner", "Proxy": "unlearner", "Strength": "unlearner", "Unlearner": "unlearner",
}
__all__ = sorted(_HOME) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value
