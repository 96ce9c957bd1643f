"""Evaluations cached on disk (``<cache>/evals/<name>-<key>.json``): an entry is read
back only if it parses and has the shape its reader expects; otherwise it is set aside
(:func:`~r2f_bench.atomic.set_aside`), computed again and written atomically."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from ..atomic import atomic_write_text, set_aside
from ..cache import cache_root

Shape = Callable[[Any], str | None]  # why an entry is malformed (None: it is not)


def entry_path(name: str, parts: list[Any]) -> Path:
    """The entry of ``name`` keyed by ``parts`` (JSON values): the first 16 hex digits of
    their SHA-256."""
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    return cache_root() / "evals" / f"{name}-{key}.json"


def read(path: Path, shape: Shape, progress: Callable[[str], None]) -> Any:
    """The entry at ``path`` (``None``: absent); one that does not parse, or whose
    ``shape`` is wrong, is set aside (one warning line) and ``None``."""
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's stack
        set_aside(path, type(exc).__name__, progress)
        return None
    why = shape(entry)
    if why is not None:
        set_aside(path, f"wrong shape: {why}", progress)
        return None
    return entry


def cached(path: Path, shape: Shape, compute: Callable[[], Any], progress: Callable[[str], None]) -> Any:
    """The entry at ``path`` if it is sound (:func:`read`), else ``compute()``, written there
    atomically."""
    entry = read(path, shape, progress)
    if entry is not None:
        return entry
    result = compute()
    atomic_write_text(path, json.dumps(result))
    return result
