"""Hook specifications: how methods, tasks, attacks and commands plug into r2f-bench.

A plugin is a module that implements some of the hooks below with :data:`hookimpl`.
Third-party plugins are listed under the ``r2f_bench`` entry-point group of their
distribution; the built-ins (R2F, every baseline, task and attack) are ordinary
plugins loaded from :data:`r2f_bench.plugins.DEFAULT_PLUGINS` through the same hooks.

Example (``my_method.py``, with ``[project.entry-points.r2f_bench] mine = "my_method"``)::

    from r2f_bench import Edit, Unlearner, hookimpl

    class MyMethod(Unlearner):
        name = "mine"

        def unlearn(self, model, request, ctx):
            ...
            return Edit(model)

    @hookimpl
    def register_unlearners(register):
        register(MyMethod)
"""

from __future__ import annotations

from typing import Any, Callable

import pluggy

PROJECT = "r2f_bench"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_unlearners(register: Callable[[type], None]) -> None:
    """Register unlearning methods.

    :param register: call ``register(cls)`` once per method, where ``cls`` is a
        subclass of :class:`r2f_bench.Unlearner`. Its ``name`` is what users pass to
        ``--method``; a name registered twice is an error.

    A method sees only its :class:`r2f_bench.ForgetRequest` (the request's views and
    retain facts) and :class:`r2f_bench.Context` (dev split, retain pool, probe-set
    roles, and a :class:`r2f_bench.Proxy` model if it sets ``uses_proxy``), never an
    evaluated string. It declares its hyper-parameters as a ``Params`` dataclass
    (typed fields, defaults, ``metadata={"help": ...}``), and any info keys that should
    become result columns in ``result_columns``.

    Implementations must not do heavy work here (no model loading): this hook runs
    every time the CLI starts, including for ``r2f-bench methods``.
    """


@hookspec
def register_tasks(register: Callable[[type], None]) -> None:
    """Register tasks (each the adapter of one benchmark: RWKU, WMDP, ...).

    :param register: call ``register(cls)`` once per task, where ``cls`` is a
        subclass of :class:`r2f_bench.Task`. Its ``name`` is what users pass to
        ``--task``.

    The contract (:mod:`r2f_bench.task`): every probe set ``s`` is an lm-eval task
    named ``f"{name}_{s}"`` whose YAML lives in ``cls.yaml_dir()``, and whose
    ``process_results`` returns per probe the keys of :data:`r2f_bench.task.METRIC_KEYS`
    (``rouge_l_recall`` and ``answered`` for generation, ``acc`` for multiple choice).
    Each set plays one role (:data:`r2f_bench.task.ROLES`): ``utility`` (the task's
    ``utility_set``), ``locality`` (its ``locality_sets``), ``name_control`` (its
    ``name_control_set``, if any: neighbour probes asked with the target's name), ``seen``
    (the loaded benchmark's ``seen_sets``: strings of the request itself) or ``held_out``
    (all others: the headline USR). ``load`` must keep every evaluated string out of what a
    method sees (:mod:`r2f_bench.engine.protocol` checks it before any model loads).
    """


@hookspec
def register_attacks(register: Callable[[type], None]) -> None:
    """Register attacks on unlearned models (``--attacks``).

    :param register: call ``register(cls)`` once per attack, where ``cls`` is a subclass
        of :class:`r2f_bench.Attack`. Its ``name`` is what users pass to ``--attacks``
        (``name`` or ``name:value``, the value setting its ``spec_param``, by default the only
        field of its ``Params``).

    An attack sees what a method sees, never an evaluated string; the run checks the data
    it declares for leaks, runs it on the untouched model as its control, and puts the
    unlearned weights back after it (:mod:`r2f_bench.attack`).
    """


@hookspec
def register_commands(subparsers: Any) -> None:
    """Add subcommands to ``r2f-bench``.

    :param subparsers: the :mod:`argparse` subparsers action of the ``r2f-bench``
        parser. Call ``subparsers.add_parser(name, help=..., description=...)`` and
        ``set_defaults(func=handler)``; ``handler(args)`` runs the command. A handler
        reports a user mistake by raising :class:`r2f_bench.UserError` (printed as one
        line, exit status 2).

    Called each time the parser is built; import heavy modules inside the handler, not
    here. R2F adds ``decoder fit|eval`` this way.
    """
