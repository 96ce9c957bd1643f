"""Where r2f-bench keeps what it builds (embedded models, knowledge worlds, untouched
models' evaluations): ``$R2F_BENCH_CACHE``, else ``~/.cache/r2f-bench``."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError


def cache_root() -> Path:
    """The cache folder; an empty ``R2F_BENCH_CACHE`` is refused (it would make the working
    folder the cache, and ``cache clear`` would empty its ``models/``)."""
    value = os.environ.get("R2F_BENCH_CACHE")
    if value is None:
        return Path.home() / ".cache" / "r2f-bench"
    if not value.strip():
        raise UserError("R2F_BENCH_CACHE is set but empty; unset it (the cache is then ~/.cache/r2f-bench) "
                        "or set it to a folder.")
    return Path(value).expanduser()


KINDS = ("models", "evals", "decoders", "worlds")  # the cache's folders, one per kind of entry
PARTIAL = ".partial.safetensors"  # after a models entry's name: the saved state of its teaching under way


def check_cache() -> None:
    """Fail early, with one line, if the cache or one of its folders cannot be written
    (before: a ``models`` that is a file failed only after a model was taught)."""
    from .atomic import check_writable

    root = cache_root()
    check_writable(root, "the cache (R2F_BENCH_CACHE)")
    for kind in KINDS:
        check_writable(root / kind, f"the cache's {kind} folder")
