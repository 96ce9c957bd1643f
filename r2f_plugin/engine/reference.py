"""Identity alignment's reference on disk: the untouched model's next-token distributions on
the identity prompts, each kept by its largest entries (:func:`~r2f_bench.engine.metrics.largest`),
written once per model (before its first edit) and read back one batch at a time, so it is
never held whole. A folder of four files: per position the number of entries kept
(``counts.npy``, int64) and the whole distribution's L2 norm (``norms.npy``, float64); the
kept entries' vocabulary indices (``indices.bin``, int32) and values (``values.bin``,
float32), row after row. SmolLM2's 31.5k positions take 0.44 GB this way, against 6.2 GB as
full float32 rows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from ..atomic import atomic_dir, set_aside
from .metrics import Largest, largest

COUNTS, NORMS, INDICES, VALUES = "counts.npy", "norms.npy", "indices.bin", "values.bin"
CHECK_CHUNK = 1 << 22  # entries read at a time when a cached reference is checked


class Reference:
    """A written reference: iterate it for one :class:`~r2f_bench.engine.metrics.Largest` a batch."""

    def __init__(self, path: Path, rows: list[int], counts: np.ndarray, norms: np.ndarray) -> None:
        self.path, self.rows, self.counts, self.norms = path, rows, counts, norms

    def __iter__(self) -> Iterator[Largest]:
        with (self.path / INDICES).open("rb") as fi, (self.path / VALUES).open("rb") as fv:
            start = 0
            for n in self.rows:
                counts = self.counts[start:start + n]
                total = int(counts.sum())
                yield Largest(torch.from_numpy(counts), torch.from_numpy(self.norms[start:start + n]),
                              torch.from_numpy(np.fromfile(fi, dtype=np.int32, count=total)).long(),
                              torch.from_numpy(np.fromfile(fv, dtype=np.float32, count=total)))
                start += n

    @classmethod
    def read(cls, path: Path, rows: list[int], vocab: int, progress: Callable[[str], None]) -> "Reference | None":
        """The entry at ``path`` (``None``: absent); one whose files are missing, cut short, of
        the wrong shape or holding an index outside ``vocab`` or a value that is no probability
        is set aside (one line)."""
        if not path.exists():
            return None
        try:
            counts, norms = (np.load(path / name, allow_pickle=False) for name in (COUNTS, NORMS))
            why = _misfit(path, sum(rows), vocab, counts, norms)
        except (OSError, ValueError) as exc:
            why = type(exc).__name__
        if why:
            set_aside(path, why, progress)
            return None
        return cls(path, rows, counts, norms)

    @classmethod
    def write(cls, path: Path, rows: list[int], batches: Iterator[torch.Tensor]) -> "Reference":
        """Keep each of ``batches`` (``rows`` positions each, in order) by its largest entries
        and write them to ``path`` atomically, one batch at a time."""
        counts, norms = [], []
        with atomic_dir(path) as tmp:
            with (tmp / INDICES).open("wb") as fi, (tmp / VALUES).open("wb") as fv:
                for n, batch in zip(rows, batches, strict=True):
                    if len(batch) != n:
                        raise RuntimeError(f"identity alignment's batch has {len(batch)} positions, {n} expected")
                    kept = largest(batch)
                    fi.write(kept.indices.to(torch.int32).cpu().numpy().tobytes())
                    fv.write(kept.values.float().cpu().numpy().tobytes())
                    counts.append(kept.counts.cpu().numpy())
                    norms.append(kept.norms.cpu().numpy())
                for f in (fi, fv):
                    f.flush()
                    os.fsync(f.fileno())
            all_counts, all_norms = np.concatenate(counts).astype(np.int64), np.concatenate(norms).astype(np.float64)
            np.save(tmp / COUNTS, all_counts)
            np.save(tmp / NORMS, all_norms)
        return cls(path, rows, all_counts, all_norms)


def _misfit(path: Path, positions: int, vocab: int, counts: np.ndarray, norms: np.ndarray) -> str | None:
    """Why the reference files at ``path`` do not describe ``positions`` distributions over
    ``vocab`` tokens (``None``: they do). Every stored index and value is read once."""
    if counts.shape != (positions,) or counts.dtype != np.int64 or norms.shape != (positions,) or norms.dtype != np.float64:
        return f"wrong shape: {counts.shape} {counts.dtype} counts, {norms.shape} {norms.dtype} norms; not {positions} int64 and float64"
    if positions and (counts.min() < 1 or counts.max() > vocab or not np.isfinite(norms).all() or norms.min() <= 0):
        return f"a count outside 1..{vocab} or a norm that is not positive"
    total = int(counts.sum())
    for name, dtype, bad in ((INDICES, np.int32, lambda a: a.min() < 0 or a.max() >= vocab),
                             (VALUES, np.float32, lambda a: not np.isfinite(a).all() or a.min() < 0 or a.max() > 1)):
        if (path / name).stat().st_size != 4 * total:
            return f"{name} holds {(path / name).stat().st_size} bytes, not {4 * total}"
        with (path / name).open("rb") as f:
            while len(chunk := np.fromfile(f, dtype=dtype, count=CHECK_CHUNK)):
                if bad(chunk):
                    return f"{name} holds an entry outside its range"
    return None
