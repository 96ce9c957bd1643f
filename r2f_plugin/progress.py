"""Progress bars on stderr for the long steps (teaching, decoder fitting, unlearning,
evaluation): counts and rates from tqdm, all off with ``--quiet``.

The command line silences library bars (:mod:`r2f_bench.cli`); ours pass ``disable``
explicitly, so they show whatever ``TQDM_DISABLE`` says.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable

from tqdm.auto import tqdm

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def quiet() -> bool:
    return _quiet


def bar(iterable: Iterable[Any] | None = None, *, desc: str, total: int | None = None, unit: str = "it",
        initial: int = 0) -> tqdm:
    """A progress bar on stderr that disappears when done (``--quiet``: none); ``initial``: what
    was done before (a resumed teaching)."""
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, disable=_quiet, leave=False,
                dynamic_ncols=True, mininterval=0.5, initial=initial)
