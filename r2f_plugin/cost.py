"""Per-deletion wall time and peak memory, and where the time goes (phases)."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

# what a result record times (``phases``): one target's run, in the order a run runs them;
# and the run's one-time costs (``phases_once``), stated in each of its records
TARGET_PHASES = ("untouched", "unlearn", "evaluate", "extra", "alignment", "attacks", "restore")
ONCE_PHASES = ("load", "setup")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def _heap_reader():
    """Bytes currently allocated by malloc (glibc), else the resident set size."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        libc.mallinfo2()
    except (OSError, AttributeError):
        def rss() -> int:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return rss

    def in_use() -> int:
        info = libc.mallinfo2()
        return info.uordblks + info.hblkhd
    return in_use


_allocated_bytes = _heap_reader()


@dataclass
class Cost:
    seconds: float = 0.0
    peak_mem_mb: float = 0.0  # peak extra memory over the level at entry
    budget: dict[str, Any] = field(default_factory=dict)  # a deletion's other spending (engine.budget.Spend)


@contextmanager
def measure(device: torch.device | str = "cpu", interval: float = 0.002) -> Iterator[Cost]:
    """Time a block and record its peak extra memory.

    On CUDA: ``torch.cuda.max_memory_allocated`` above the allocation at entry.
    On CPU: bytes allocated through malloc (glibc ``mallinfo2``; the resident set
    size elsewhere), sampled every ``interval`` seconds by a background thread,
    above the value at entry (a lower bound on the true peak).
    """
    cost = Cost()
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        start = time.perf_counter()
        yield cost
        torch.cuda.synchronize(device)
        cost.seconds = time.perf_counter() - start
        cost.peak_mem_mb = (torch.cuda.max_memory_allocated(device) - base) / 2**20
        return
    base = _allocated_bytes()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _allocated_bytes())
            stop.wait(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    try:
        yield cost
    finally:
        cost.seconds = time.perf_counter() - start
        stop.set()
        thread.join()
        peak[0] = max(peak[0], _allocated_bytes())
        cost.peak_mem_mb = (peak[0] - base) / 2**20


@dataclass
class Phases:
    """Seconds per named phase, each exclusive of the phases nested inside it."""

    seconds: dict[str, float] = field(default_factory=dict)
    _open: list[list[float]] = field(default_factory=list)  # [start, nested seconds] per open phase


_active: ContextVar[Phases | None] = ContextVar("r2f_bench_phases", default=None)


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextmanager
def phases() -> Iterator[Phases]:
    """Collect the :func:`phase` timings of the code run inside the block."""
    collector = Phases()
    token = _active.set(collector)
    try:
        yield collector
    finally:
        _active.reset(token)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time a block into the active :func:`phases` collector; a no-op without one, so
    methods can mark their phases at no cost (autograd hooks run on CUDA's own
    threads, where they are not seen)."""
    collector = _active.get()
    if collector is None:
        yield
        return
    _sync()
    collector._open.append([time.perf_counter(), 0.0])
    try:
        yield
    finally:
        _sync()
        start, nested = collector._open.pop()
        spent = time.perf_counter() - start
        collector.seconds[name] = collector.seconds.get(name, 0.0) + spent - nested
        if collector._open:
            collector._open[-1][1] += spent


@contextmanager
def timed(seconds: dict[str, float], name: str) -> Iterator[None]:
    """Add a block's wall seconds (its CUDA work finished) to ``seconds[name]``. Unlike
    :func:`phase`, nothing nested is subtracted: a run's phases of a target."""
    _sync()
    start = time.perf_counter()
    try:
        yield
    finally:
        _sync()
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
