"""Options shared by the commands that run methods (run, sweep, tune, frontier, and plugin
commands such as ``decoder``), made from the fields of the
:class:`~r2f_bench.engine.config.RunConfig` they describe; ``--quiet`` and ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import contextmanager, redirect_stdout
from typing import Any, Callable, Iterator, TextIO

from ..engine.config import OPTIONS, Option, RunConfig, names
from ..errors import UserError
from ..jsontext import json_safe
from ..plugins import DEFAULT_TASK


def add_run_options(p: argparse.ArgumentParser, evaluation: bool = True, limit_help: str | None = None,
                    seeds: bool = False) -> None:
    """The options of :class:`RunConfig` (models, data, targets, ...) and ``--quiet``. ``evaluation``:
    also the evaluation-only options (``--sequential``, ``--control``, ``--split``, ...);
    ``limit_help``: ``--limit``'s help, where the command reads it otherwise; ``seeds``: the
    command runs the seeds of ``--seeds``, so one run's ``--seed`` is left out (argparse refuses it)."""
    for opt in OPTIONS.values():
        if (evaluation or not opt.evaluation_only) and not (seeds and opt.name == "seed"):
            _add(p, opt, limit_help if opt.name == "limit" and limit_help else opt.help, opt.default)
    add_quiet_option(p)


def add_sweep_run_options(p: argparse.ArgumentParser) -> None:
    """The options of :class:`RunConfig` a sweep takes (:attr:`Option.sweep`): unset, one
    means the run's default (and is left out of the jobs); a model and a proxy may name
    several, comma-separated."""
    for opt in OPTIONS.values():
        if opt.sweep is not None:
            kept = opt.sweep == "kept"
            text = opt.help if kept else opt.help.replace("%(default)s", str(opt.default))
            if opt.sweep == "each":
                text += "; several, comma-separated, multiply the jobs"
            _add(p, opt, text, opt.default if kept else None)


def _add(p: argparse.ArgumentParser, opt: Option, text: str, default: Any) -> None:
    """``opt`` as an argparse option with this help and default (an option parsed from its
    text defaults to ``None``: unset, the field's default)."""
    if opt.kind is bool:
        p.add_argument(opt.flag, dest=opt.name, action="store_true", default=default, help=text)
        return
    p.add_argument(opt.flag, dest=opt.name, type=None if opt.parse else opt.kind,
                   default=None if opt.parse else default, choices=opt.choices, metavar=opt.metavar,
                   action="append" if opt.repeatable else "store", help=text)


def add_method_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--method``: the one method a plain run unlearns with (the run's :attr:`RunConfig.method`)."""
    p.add_argument("--method", help=f"{what} (see `r2f-bench methods`)")


def add_methods_option(p: argparse.ArgumentParser, default: str | None, what: str, required: bool = False,
                       alias: str | None = None) -> None:
    """``--methods`` (and ``alias``): several methods, comma-separated, `all` for every installed one."""
    p.add_argument("--methods", *filter(None, [alias]), dest="methods", default=default, required=required,
                   help=f"comma-separated methods{what}")


def add_task_option(p: argparse.ArgumentParser, what: str, default: str | None = DEFAULT_TASK) -> None:
    """``--task``: the one task a command works on (the run's :attr:`RunConfig.task`)."""
    shown = f" (default {default})" if default else ""
    p.add_argument("--task", default=default, help=f"the task {what}{shown} (see `r2f-bench tasks`)")


def add_store_option(p: argparse.ArgumentParser) -> None:
    """``--output`` of a command that reads a results store: where runs write (:attr:`RunConfig.output`)."""
    opt = OPTIONS["output"]
    p.add_argument(opt.flag, default=opt.default, help="results store directory (default %(default)s)")


def add_out_dir_option(p: argparse.ArgumentParser, what: str, folder: str) -> None:
    """``--out-dir``: where a command writes its files (default a folder in the store)."""
    p.add_argument("--out-dir", default=None, help=f"where to write {what} (default <output>/{folder})")


def add_keep_going_option(p: argparse.ArgumentParser, after: str = "") -> None:
    """``--keep-going``: a failed job does not stop the rest."""
    p.add_argument("--keep-going", action="store_true", help=f"run the remaining jobs when one fails{after}")


def add_seeds_option(p: argparse.ArgumentParser, what: str = "the replicates to run") -> None:
    """``--seeds``: the run seeds (replicates) a many-run command covers (see ``--seed``)."""
    p.add_argument("--seeds", default="0", help=f"{what}, e.g. 0,1,2 or 0-4 (default 0)")


def add_budget_option(p: argparse.ArgumentParser, order: str) -> None:
    """``--budget``: after the first job, the rest's estimate; jobs past the budget are not run."""
    p.add_argument("--budget", default=None, metavar="DURATION",
                   help=f"time for this command, e.g. 8h or 90m: after the first job the rest is estimated from it and "
                        f"{order}, only what fits is run (default: no limit; the estimate is printed anyway)")


def budget_deadline(args: argparse.Namespace) -> float | None:
    """The ``time.time()`` by which ``--budget`` ends (``None``: no budget); a bad duration is one line."""
    from ..results.estimate import parse_duration

    return time.time() + parse_duration(args.budget) if getattr(args, "budget", None) else None


def add_quiet_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bars or progress messages (warnings still print)")


def add_json_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true",
                   help=f"print {what} as JSON, alone on stdout (everything else goes to stderr)")


@contextmanager
def json_stdout(args: argparse.Namespace) -> Iterator[TextIO]:
    """The stream a command prints its JSON to: with ``--json``, whatever else the command
    prints inside the block goes to stderr, so stdout holds the JSON alone (``| jq`` works)."""
    stdout = sys.stdout
    if not getattr(args, "json", False):
        yield stdout
        return
    with redirect_stdout(sys.stderr):
        yield stdout


def print_json(obj: Any, stream: TextIO) -> None:
    """``obj`` as strict JSON (non-finite numbers as ``null``) on ``stream``."""
    print(json.dumps(json_safe(obj), indent=2, allow_nan=False, default=str), file=stream, flush=True)


def json_command(work: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], None]:
    """A command's handler from ``work(args)``, which prints its text and returns its JSON
    object (``None``: nothing to print): with ``--json`` the object alone goes to stdout."""
    def handler(args: argparse.Namespace) -> None:
        with json_stdout(args) as stdout:
            obj = work(args)
        if getattr(args, "json", False) and obj is not None:
            print_json(obj, stdout)
    return handler


def say(args: argparse.Namespace, once: bool = False):
    """The progress callback of a command: messages on stderr, only warnings with --quiet;
    ``once``: each distinct message only the first time (a command of many runs)."""
    quiet, said = getattr(args, "quiet", False), set()

    def progress(message: str) -> None:
        if quiet and not message.startswith("warning") or once and message in said:
            return
        said.add(message)
        print(message, file=sys.stderr, flush=True)
    return progress


def run_values(args: argparse.Namespace, sweep: bool = False) -> dict[str, Any]:
    """The :class:`RunConfig` fields the parsed options set (unset ones left out), each
    parsed from its text. ``sweep``: only the options of :func:`add_sweep_run_options`
    (the namespace also holds the top-level parser's), a model or a proxy as the list of
    its comma-separated values."""
    values = {}
    for opt in OPTIONS.values():
        text = getattr(args, opt.name, None)
        if text is None or sweep and opt.sweep is None:
            continue
        if isinstance(text, str) and not names(text) and opt.name != "output":  # "", " ", ",": the run names --output's fix
            raise UserError(f"{opt.flag} is empty (an unset shell variable?); give it a value, or leave it out "
                            f"for its default.")
        values[opt.name] = names(text) if sweep and opt.sweep == "each" else opt.parse(text) if opt.parse else text
    return values


def run_config(args: argparse.Namespace, method: str, task: str) -> RunConfig:
    """The run configuration the parsed :func:`add_run_options` describe."""
    return RunConfig(method=method, task=task, **run_values(args))
