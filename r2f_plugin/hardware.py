"""What a measurement ran on: the processor (its model and vector extensions) or the
accelerator. Times and teaching both depend on it, so records and taught models state it."""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

import torch

VECTOR_EXTENSIONS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")  # those that change CPU kernels' speed or rounding


@cache
def cpu() -> tuple[str, str]:
    """The processor's model name and its vector extensions of :data:`VECTOR_EXTENSIONS`
    (``unknown`` where the system does not say); read once per process."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("", platform.machine(), platform.processor()):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, " ".join(f for f in VECTOR_EXTENSIONS if f in flags) or "unknown"


def machine(device: torch.device) -> str:
    """One line naming what ran on ``device``: the GPU's name, else the CPU's model and extensions."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name, vector = cpu()
    return f"{name} ({vector})"
