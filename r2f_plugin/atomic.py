"""Atomic writes: a crash never leaves a half-written result, cache entry or model."""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .errors import UserError


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the file gets the user's umask, as open() would
    except OSError as exc:
        raise as_user_error(exc, path) from None
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise as_user_error(exc, path) from None
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
        raise as_user_error(exc, path) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, every byte checked and flushed to disk."""
    with atomic_path(path) as tmp:
        write_fully(tmp, text.encode("utf-8"))


def write_safetensors(path: Path, tensors: dict, metadata: dict[str, str]) -> None:
    """Write ``tensors`` (CPU, contiguous) to ``path`` as safetensors, atomically and durably,
    with the user's umask (safetensors' own writer leaves a file only its owner can read)."""
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)
        os.chmod(tmp, 0o666 & ~_umask())
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_fully(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (truncating), failing on a short write, then fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            if n <= 0:
                raise OSError(errno.ENOSPC, "short write")
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def set_aside(path: Path, why: str, progress: Callable[[str], None]) -> None:
    """Move a cache entry that failed to load out of the way (``<name>.corrupt-<time>``),
    saying so once, so that it is rebuilt and never trusted again."""
    path, stamp = Path(path), int(time.time())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    for n in itertools.count(2):  # a folder cannot replace one set aside in the same second
        if not aside.exists():
            break
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        os.replace(path, aside)
    except OSError as exc:
        raise as_user_error(exc, path) from None
    progress(f"warning: cache entry {path} could not be loaded ({why}); moved to {aside.name} and rebuilt")


def check_writable(directory: Path, option: str = "--output") -> None:
    """Fail early, with one line naming ``option``, if nothing can be written to ``directory``."""
    try:
        if directory.exists() and not directory.is_dir():
            raise UserError(f"{option} {directory} is a file; pass a directory.")
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test"):
            pass
    except OSError as exc:
        raise UserError(f"cannot write to {option} {directory} ({exc.strerror}); choose a writable directory.") from None


def _umask() -> int:
    """The process's umask (read by setting it, then restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def as_user_error(exc: OSError, path: Path) -> UserError:
    if exc.errno == errno.ENOSPC:
        return UserError(f"disk full while writing {path}; free space, or write elsewhere (--output, or R2F_BENCH_CACHE for models).")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return UserError(f"cannot write to {path} (permission denied); choose a writable --output (or R2F_BENCH_CACHE for models).")
    return UserError(f"cannot write {path}: {exc.strerror}; choose another --output (or R2F_BENCH_CACHE for models).")
