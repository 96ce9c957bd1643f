"""Where r2f-bench keeps what it builds (embedded models, knowledge worlds, untouched
models' evaluations): ``$R2F_BENCH_CACHE``, else ``~/.cache/r2f-bench``."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("R2F_BENCH_CACHE", Path.home() / ".cache" / "r2f-bench"))
