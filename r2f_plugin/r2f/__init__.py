"""R2F (Recover-to-Forget) as an ordinary plugin: the method (:mod:`.method`), its
gradient decoder (:mod:`.decoder`) and its ``decoder fit|eval`` commands
(:mod:`.commands`), registered through the same hooks a third-party plugin uses."""

from __future__ import annotations

from typing import Any, Callable

from ..hookspecs import hookimpl
from .method import R2F


@hookimpl
def register_unlearners(register: Callable[[type], None]) -> None:
    register(R2F)


@hookimpl
def register_commands(subparsers: Any) -> None:
    from . import commands  # the command line loads only when a parser is built

    commands.add_parser(subparsers)
