"""Hook specifications: how methods and tasks plug into r2f-bench.

A plugin is any module listed under the ``r2f_bench`` entry-point group of an
installed distribution. It implements one or both hooks below with
:data:`hookimpl`. The built-in R2F method, every baseline and every benchmark are
ordinary plugins registered exactly this way.

Example (``my_method.py``)::

    from . import hookimpl
    from .unlearner import Unlearner

    class MyMethod(Unlearner):
        name = "mine"
        ...

    @hookimpl
    def register_unlearners(register):
        register(MyMethod)
"""

from __future__ import annotations

from typing import Callable

import pluggy

PROJECT = "r2f_bench"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_unlearners(register: Callable[[type], None]) -> None:
    """Register unlearning methods.

    :param register: call ``register(cls)`` once per method, where ``cls`` is a
        subclass of :class:`r2f_bench.unlearner.Unlearner`. Its ``name`` is what
        users pass to ``--method``; a name registered twice is an error.

    Implementations must not do heavy work here (no model loading): this hook runs
    every time the CLI starts, including for ``r2f-bench methods``.
    """


@hookspec
def register_tasks(register: Callable[[type], None]) -> None:
    """Register benchmarks.

    :param register: call ``register(cls)`` once per benchmark, where ``cls`` is
        a subclass of :class:`r2f_bench.task.Task`. Its ``name`` is what users
        pass to ``--task``; its lm-eval task YAMLs live in the directory returned
        by ``cls.yaml_dir()``.
    """
