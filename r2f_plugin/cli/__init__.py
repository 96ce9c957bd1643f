"""The ``r2f-bench`` command line: one module per subcommand, shared options in
:mod:`.options`, the parser and entry point in :mod:`.main`. Plugins add their own
subcommands through the ``register_commands`` hook."""

import os

# Library progress bars (lm-eval's request building, transformers' weight loading, hub
# downloads) stay off in the command line, which draws its own (r2f_bench.progress):
# tqdm reads TQDM_DISABLE once, when first imported, so this comes before any library.
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from .main import main  # noqa: E402

__all__ = ["main"]
