"""The ``r2f-bench`` command line: one module per subcommand, shared options in
:mod:`.options`, the parser and entry point in :mod:`.main`. Plugins add their own
subcommands through the ``register_commands`` hook."""

from .main import main

__all__ = ["main"]
