"""The durable results store: one atomically written JSON file per finished job.

Layout under an output directory::

    <output>/jobs/<key>.json   one finished (config, target) result; the truth
    <output>/results.jsonl     an export: every record, one line each, in key order,
                               rewritten (atomically) when a run or sweep ends

A job's key is the SHA-256 of the canonical JSON of everything that determines its
result: the full run configuration (less :data:`WHERE_FIELDS`, which only say where or
how fast things run or which targets get a record, and :data:`LATER_DEFAULTS` at their
defaults), the method's resolved hyper-parameters (defaults
included), the target id, the data revision and the plugin and library versions. The
configuration is keyed by what it names, not how it was typed: its targets by the ids the
task resolved, a local model or proxy by its content, a local data folder by the data
revision alone, an unread proxy as the default (the record's ``identities``). A
changed hyper-parameter or default, seed, model, data file or plugin release therefore
gives a new key and a fresh run; an unchanged one, from any folder, is found done and
skipped by a sweep, and replaced by a plain run (``r2f-bench --method ... --task ...``),
which writes the same store.

Concurrency: every file is written beside its final name and renamed into place,
so readers never see half a record, and processes writing distinct keys never
touch the same file. Two processes that finish the same key both rename a complete
file onto it; either one is a valid result (idempotent).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..atomic import atomic_write_text, check_writable
from ..engine.config import TEACH_EPOCHS, TEACH_LR, TEACH_THREADS
from ..engine.metrics import floored_sets, retention
from ..errors import UserError
from ..jsontext import canonical_json, json_safe
from .cells import keyed_config

JOBS_DIR = "jobs"
LOCKS_DIR = "locks"
EXPORT_FILE = "results.jsonl"
# say where or how fast things run, or which targets get a record, not what a record holds
WHERE_FIELDS = ("output", "save_model", "threads", "device_map", "min_known", "eval_batch_size")
# configuration fields added after stores existed: left out of a key at these values, so
# an older store's results keep their keys and still resume
LATER_DEFAULTS = {"dtype": "float32", "target_modules": None, "chat_template": "auto", "attacks": "rap",
                  "teach_epochs": TEACH_EPOCHS, "teach_lr": TEACH_LR, "teach_threads": TEACH_THREADS, "control": "none"}
# record fields renamed since stores existed: the old field's path -> its new name (beside it)
RENAMED = {("mia",): "identity_alignment", ("n", "mia_prompts"): "identity_prompts", ("phases", "rap"): "attacks"}
# ratios that records made before ``ratio_floor`` took over every set, whatever its untouched score
FLOORED = ("locality", "name_control")


def job_key(config: Mapping[str, Any], target: str, data_revision: str,
            versions: Mapping[str, str], params: Mapping[str, Any] | None = None) -> str:
    """The store key of one target of one run configuration (``RunConfig.to_dict()``),
    given the method's resolved hyper-parameters ``params`` (defaults included: a
    changed default never matches an old result)."""
    identity = {
        "config": {k: v for k, v in config.items()
                   if k not in WHERE_FIELDS and not (k in LATER_DEFAULTS and v == LATER_DEFAULTS[k])},
        "params": dict(params or {}),
        "target": str(target),
        "data_revision": data_revision,
        "versions": dict(versions),
    }
    return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


def upgraded(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with every field of :data:`RENAMED` under its new name (a record that
    carries both keeps the new one), and, if it predates ``ratio_floor``, its Locality and
    name control re-read under the floor (:func:`floored`). In place and idempotent; the one
    place older records are mapped."""
    for (*parents, old), new in RENAMED.items():
        holder: Any = record
        for part in parents:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and old in holder:
            holder.setdefault(new, holder.pop(old))
    if "ratio_floor" not in record:
        for role in FLOORED:
            floored(record, role)
    return record


def floored(record: dict[str, Any], role: str) -> None:
    """Re-read an older record's ``role`` ratio (Locality or name control, pooled over every
    set of the role) under the floor (:func:`~r2f_bench.engine.metrics.floored_sets`), in
    place: as stored where every set clears it, or where the record names no sets or holds
    no per-set scores of the expected shape (left for the table's checks); that one set's
    ratio where one does; n/a where none does, or where several do beside one that does not
    (the record lacks the sets' sizes to pool them). Where a set was left out, the item count
    (``n``) is unknown and dropped."""
    roles, scores = record.get("roles"), record.get("set_scores")
    if record.get(role) is None or not isinstance(roles, dict) or not isinstance(scores, dict):
        return
    sets, before, after = roles.get(role), scores.get("before"), scores.get("after")
    if not (isinstance(sets, list) and isinstance(before, dict) and isinstance(after, dict)
            and all(isinstance(before.get(s), (int, float)) for s in sets)):
        return
    live = floored_sets(before, sets)
    if len(live) == len(sets):
        return
    one = live[0] if len(live) == 1 else None
    record[role] = retention(before[one], after[one]) if isinstance(after.get(one), (int, float)) else None
    if isinstance(record.get("n"), dict) and role in record["n"]:
        record["n"][role] = None


def record_key(record: Mapping[str, Any]) -> str:
    """The key of a result record, recomputed from the fields it carries."""
    return job_key(keyed_config(record), record["target"], record["data_revision"], record["versions"],
                   record.get("params"))


class Store:
    """Finished jobs under ``<root>/jobs``; safe to share between processes."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.jobs = self.root / JOBS_DIR
        self.export_path = self.root / EXPORT_FILE

    def path(self, key: str) -> Path:
        if not _is_key(key):
            raise ValueError(f"not a store key: {key!r}")
        return self.jobs / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The record stored under ``key`` (older field names :func:`upgraded`); ``None`` if absent or unreadable."""
        record = _read(self.path(key))
        return None if record is None else upgraded(record)

    def done(self, key: str) -> bool:
        return self.get(key) is not None

    def put(self, key: str, record: Mapping[str, Any]) -> dict[str, Any]:
        """Write ``record`` under ``key`` atomically (and durably), replacing any record
        stored there. The stored record carries its ``key``; it is returned."""
        stored = json_safe({**record, "key": key})
        text = json.dumps(stored, indent=1, sort_keys=True, default=str, allow_nan=False) + "\n"
        atomic_write_text(self.path(key), text)
        _fsync_dir(self.jobs)
        return stored

    def export(self) -> Path:
        """Rewrite ``results.jsonl`` atomically: every readable record, one line each, in key order."""
        atomic_write_text(self.export_path, "".join(canonical_json(r) + "\n" for r in self.records()))
        return self.export_path

    def check(self) -> None:
        """Fail before anything runs, with one line, if the store's folders cannot be written."""
        check_writable(self.root)
        for folder, holds in ((self.jobs, "finished jobs"), (self.root / LOCKS_DIR, "job locks")):
            if folder.exists() and not folder.is_dir():
                raise UserError(f"{folder} is a file, but the results store keeps its {holds} there; move it away, "
                                f"or pass another --output.")
            check_writable(folder)

    def lock_path(self, key: str) -> Path:
        return self.root / LOCKS_DIR / f"{self.path(key).stem}.lock"

    def holder(self, key: str) -> str:
        """Who holds ``key``'s lock: ``host <name> pid <n>`` (``unknown`` if unreadable)."""
        try:
            host, pid = self.lock_path(key).read_text().split()
        except (OSError, ValueError):
            return "unknown"
        return f"host {host} pid {pid}"

    @contextmanager
    def claim(self, key: str) -> Iterator[bool]:
        """Hold ``key``'s lock while its job runs; yields ``False`` if another live process
        holds it (two sweeps on one store never run the same job twice). A lock left by a
        process that died on this host is taken over; a lock that cannot be written whole
        (a full disk) is removed, never left empty."""
        lock = self.lock_path(key)
        lock.parent.mkdir(parents=True, exist_ok=True)
        me = f"{socket.gethostname()} {os.getpid()}"
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                if not _stale(lock):
                    yield False
                    return
                lock.unlink(missing_ok=True)
                continue
            except OSError as exc:
                raise UserError(f"cannot create the job lock {lock} ({exc.strerror}); free space or fix "
                                f"permissions there, or pass another --output.") from None
            _write_lock(fd, lock, me)
            try:
                yield True
            finally:
                lock.unlink(missing_ok=True)
            return
        yield False

    def keys(self) -> list[str]:
        if not self.jobs.is_dir():
            return []
        return sorted(p.stem for p in self.jobs.glob("*.json") if _is_key(p.stem))

    def records(self) -> Iterator[dict[str, Any]]:
        """Every finished record, in key order (one without ``stored_at``, from before it was
        recorded, gets its file's modification time); unreadable files are skipped with a warning."""
        for key in self.keys():
            record = self.get(key)
            if record is None:
                warnings.warn(f"skipping unreadable result {self.path(key)}; the next sweep re-runs that job.",
                              stacklevel=2)
                continue
            if "stored_at" not in record:
                record["stored_at"] = _mtime(self.path(key))
            yield record

    def __len__(self) -> int:
        return len(self.keys())


def _write_lock(fd: int, lock: Path, text: str) -> None:
    """Write the lock's owner whole, or remove the lock and fail in one line naming it."""
    try:
        try:
            if os.write(fd, text.encode()) != len(text.encode()):
                raise OSError(errno.ENOSPC, "short write")
        finally:
            os.close(fd)
    except OSError as exc:
        lock.unlink(missing_ok=True)
        raise UserError(f"cannot write the job lock {lock} ({exc.strerror}); free space or fix permissions there, "
                        f"or pass another --output.") from None


def _stale(lock: Path) -> bool:
    """Whether ``lock`` was left by a process of this host that no longer runs (or is an
    empty or unreadable lock older than a minute: its writer died while creating it).
    Locks of other hosts are trusted: remove them by hand if their host is gone."""
    try:
        host, pid = lock.read_text().split()
    except ValueError:
        try:
            return time.time() - lock.stat().st_mtime > 60
        except OSError:
            return False
    except OSError:
        return False
    if host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):
        return False
    return False


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _is_key(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdef" for c in text)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: nested past the stack
        return None
    return record if isinstance(record, dict) else None


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (best effort: not every platform allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
