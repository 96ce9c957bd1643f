"""Atomic writes: a crash never leaves a half-written result, cache entry or model."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from r2f_plugin.errors import UserError


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise _as_user_error(exc, path) from None
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise _as_user_error(exc, path) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield an empty directory beside ``path``; on success it replaces ``path``.

    A crash leaves either the old directory or the new one, never a half-written one.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        raise _as_user_error(exc, path) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def append_line(path: Path, line: str) -> None:
    """Append one line with a single write on an O_APPEND descriptor, then fsync.

    POSIX appends of one ``write`` are not interleaved by concurrent writers, so
    parallel processes may share one JSONL file.
    """
    data = (line.rstrip("\n") + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _as_user_error(exc, path) from None


def check_writable(directory: Path) -> None:
    """Fail early, with one line, if results cannot be written to ``directory``."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test"):
            pass
    except OSError as exc:
        raise _as_user_error(exc, directory) from None


def _as_user_error(exc: OSError, path: Path) -> UserError:
    if exc.errno == errno.ENOSPC:
        return UserError(f"disk full while writing {path}; free space, or write elsewhere (--output, or R2F_BENCH_CACHE for models).")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return UserError(f"cannot write to {path} (permission denied); choose a writable --output (or R2F_BENCH_CACHE for models).")
    return UserError(f"cannot write {path}: {exc.strerror}; choose another --output (or R2F_BENCH_CACHE for models).")
