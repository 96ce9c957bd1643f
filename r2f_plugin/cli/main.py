"""The ``r2f-bench`` parser and entry point."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..errors import Terminated, UserError
from ..plugins import registry
from ..progress import set_quiet
from . import cache, frontier, listing, plot, scan, sweep, table, tune
from .options import add_method_option, add_run_options, add_task_option
from .run import cmd_run

BUILT_IN = (listing, scan, cache, tune, sweep, frontier, table, plot)


class Parser(argparse.ArgumentParser):
    """A parser that takes no abbreviated option (without ``--seed``, ``frontier --seed 3``
    would be ``--seeds 3``); the parsers of its commands, and of theirs, are Parsers too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="r2f-bench", description="Run, compare and extend LLM unlearning methods.")
    add_method_option(parser, "unlearning method to run")
    add_task_option(parser, "to run it on", default=None)
    add_run_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="command")
    for module in BUILT_IN:
        module.add_parser(sub)
    registry().add_commands(sub)
    return parser


def quiet_libraries() -> None:
    """Libraries' FutureWarnings are theirs, not the user's (their progress bars are
    silenced when :mod:`r2f_bench.cli` is imported); every other warning prints as one
    line, ``warning: <message>``, without the file and source line that raised it."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.formatwarning = one_line_warning


def one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     line: str | None = None) -> str:
    return "warning: " + " ".join(str(message).split()) + "\n"


KEPT = "finished results are kept in the output directory (`r2f-bench table` reads them; a sweep run again skips them)"


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While the command runs, SIGTERM raises :class:`Terminated` (a KeyboardInterrupt) in
    the main thread, so every ``finally`` runs: the store is exported, scratch folders and
    locks are removed. A second SIGTERM during that cleanup is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def script(main: Callable[[], int]) -> int:
    """A benchmark script's exit status: ``main``'s own, run :func:`guarded` (a UserError one
    line, SIGTERM unwinding so that the store's locks are released, as for the CLI)."""
    code = 0

    def command() -> None:
        nonlocal code
        code = main()

    return guarded(command) or code


def guarded(command: Callable[[], None]) -> int:
    """Run an entry point's command: a UserError prints one line and exits 2, Ctrl-C exits 130,
    SIGTERM 143, a closed pipe on stdout exits 141 (as a shell reports SIGPIPE), a full stdout
    exits 2, each without a traceback."""
    try:
        with sigterm_unwinds():
            command()
            sys.stdout.flush()  # a full or failing stdout shows here, not as a traceback at exit
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        print(f"terminated (SIGTERM); {KEPT}", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"interrupted; {KEPT}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`r2f-bench methods | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EFBIG):
            raise
        # what stdout could not take (`r2f-bench tasks > /dev/full`); files are written atomically and say so themselves
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"error: cannot write the output ({exc.strerror}); free space or send it elsewhere.", file=sys.stderr)
        return 2
    return 0


def refuse_options_before(parser: argparse.ArgumentParser, argv: list[str], command: str) -> None:
    """Options before a command word belong to a plain run and no command reads them there
    (argparse lets the command's defaults overwrite them): refuse them in one line."""
    valued = {flag for action in parser._actions for flag in action.option_strings if action.nargs != 0}
    given, i = [], 0
    while i < len(argv) and argv[i] != command:
        if argv[i].startswith("-"):
            given.append(argv[i].split("=")[0])
            i += argv[i] in valued  # its value
        i += 1
    if given:
        raise UserError(f"{', '.join(given)} given before the command '{command}', which reads its options only "
                        f"after it; write r2f-bench {command} {given[0]} ….")


def main(argv: list[str] | None = None) -> int:
    quiet_libraries()

    def command() -> None:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "command", None):
            refuse_options_before(parser, sys.argv[1:] if argv is None else argv, args.command)
        set_quiet(getattr(args, "quiet", False))
        if getattr(args, "func", None):
            args.func(args)
        elif args.method and args.task:
            cmd_run(args)
        else:
            parser.error("give --method and --task, or a command (methods, tasks, sweep, table, ...)")

    return guarded(command)
