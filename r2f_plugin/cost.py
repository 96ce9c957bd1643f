"""Per-deletion wall time and peak memory."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch


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
