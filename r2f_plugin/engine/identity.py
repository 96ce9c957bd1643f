"""What a run's model, proxy, paraphrase model, data and parameter files are, whatever path
they were given by: a local file's or folder's content, not where it lies. Store keys, table
settings and the caches built from a proxy read these, so the same GGUF file under two paths
is one model, and a file replaced at one path is another."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from .config import OPTIONS, RunConfig

PREFIX = "sha256:"  # before the hash of a local model's bytes: its identity
HF = "hf:"  # before a paraphrase model's name or path (--paraphraser)
DEFAULT_PROXY = RunConfig.proxy  # the --proxy of a run that names none


def _is_local(spec: str) -> bool:
    return not spec.startswith("embedded") and Path(spec).expanduser().exists()


def content_id(spec: str) -> str:
    """A local model as ``sha256:<16 hex>``: the hash of a file's bytes (a GGUF file) or of a
    folder's files (:func:`folder_digest`), whatever it is called or linked as. Any other spec
    (an embedded spec, a hub name, ``first-layers:N``) as given."""
    if not _is_local(spec):
        return spec
    path = Path(spec).expanduser().resolve()
    return PREFIX + (_digest(_stamp([path]), False) if path.is_file() else folder_digest(path))


def folder_digest(folder: Path) -> str:
    """The 16-hex hash of a model folder's files, names and bytes: weights, configuration,
    tokenizer, chat template, custom code (not its sub-folders, nor hidden files such as
    ``.gitattributes``)."""
    return _digest(_stamp(sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))), True)


def _stamp(files: list[Path]) -> tuple[tuple[str, int, int, int], ...]:
    """Each file as (path, inode, size, modification time): what :func:`_digest` is cached by."""
    return tuple((str(p), (s := p.stat()).st_ino, s.st_size, s.st_mtime_ns) for p in files)


@functools.lru_cache(maxsize=32)
def _digest(stamp: tuple[tuple[str, int, int, int], ...], folder: bool) -> str:
    """The hash of the files ``stamp`` lists (with their names where ``folder``): an unchanged
    file is read once a process."""
    h = hashlib.sha256()
    for name, *_ in stamp:
        path = Path(name)
        if folder:
            h.update(path.name.encode())
        with path.open("rb") as f:
            while chunk := f.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()[:16]


def identities(config: Mapping[str, Any], uses_proxy: bool, unread: Sequence[str] = ()) -> dict[str, Any]:
    """The configuration fields that a store key and a table's setting hold other than as
    written, with what they hold: a local ``model`` or ``proxy`` by its :func:`content_id`, and
    a local paraphrase model (``hf:DIR``) likewise; a local ``data_dir`` as ``None`` (the data
    revision, a hash of the files read, names its content); the proxy of a method that reads none,
    and the ``unread`` fields (:func:`~.config.unread_fields`), as the default's (they change nothing)."""
    out: dict[str, Any] = {field: OPTIONS[field].default for field in unread
                           if config.get(field, OPTIONS[field].default) != OPTIONS[field].default}
    for field in ("model", "proxy"):
        spec = config.get(field)
        if field == "proxy" and not uses_proxy:
            if spec != DEFAULT_PROXY:
                out[field] = DEFAULT_PROXY
        elif isinstance(spec, str) and _is_local(spec):
            out[field] = content_id(spec)
    paraphraser = config.get("paraphraser")
    if "paraphraser" not in unread and isinstance(paraphraser, str) and paraphraser.startswith(HF) and _is_local(paraphraser[len(HF):]):
        out["paraphraser"] = HF + content_id(paraphraser[len(HF):])
    data_dir = config.get("data_dir")
    if isinstance(data_dir, str) and data_dir and _is_local(data_dir):
        out["data_dir"] = None
    return out
