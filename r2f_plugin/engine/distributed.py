"""Running independent jobs under ``accelerate launch``.

A sweep spreads whole jobs over processes; no model is ever shared between them
(no DistributedDataParallel), so every process trains and evaluates alone on its
own device.

lm-eval and a distributed launch
--------------------------------
``lm_eval``'s ``HFLM`` given an in-memory model skips its Accelerate set-up and
reports rank 0 of 1, so the evaluation loop itself is already process-local. But
``simple_evaluate`` (recent lm-eval, 0.4.13 here) also reads ``LOCAL_RANK`` from the
environment to decide which process builds the results: on every process but the
first of a node it returns ``None`` instead of the scores, although it evaluated
everything. ``accelerate launch`` (torchrun) sets ``LOCAL_RANK``/``RANK``/
``WORLD_SIZE`` in every worker, so worker 1's evaluation is silently thrown away.
:func:`single_process_eval` hides those variables for the duration of an
in-memory evaluation; lm-eval then treats the process as a standalone run. The
process group (already initialised, if any) does not read them again.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from datetime import timedelta
from typing import Iterator

# Read by lm-eval / torchrun-aware code to infer a multi-process launch.
LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")

_env_lock = threading.RLock()  # re-entrant: nesting is harmless


@contextmanager
def single_process_eval() -> Iterator[None]:
    """Make an lm-eval evaluation of an in-memory model run as a standalone process.

    Wrap the ``HFLM(pretrained=model, ...)`` construction and the
    ``simple_evaluate`` call. Outside a distributed launch it changes nothing.
    Not for ``HFLM(pretrained="name")``, which is meant to shard data across ranks.
    """
    with _env_lock:
        saved = {k: os.environ.pop(k) for k in LAUNCH_VARIABLES if k in os.environ}
        try:
            yield
        finally:
            os.environ.update(saved)


def accelerator_available() -> bool:
    """Whether torch sees a GPU-like accelerator (CUDA, ROCm, XPU, MPS...)."""
    import torch

    probe = getattr(torch, "accelerator", None)
    if probe is not None and hasattr(probe, "is_available"):
        return bool(probe.is_available())
    return torch.cuda.is_available()


# How long a process waits at a barrier: a frontier's processes wait there for the others'
# shares of a round, which can take hours longer (the default, 30 minutes, would fail them).
WAIT = timedelta(days=7)


def process_state():
    """Accelerate's ``PartialState`` for this process (rank, world size, device).

    On a machine without an accelerator it is created with ``cpu=True``, so that
    ``accelerate launch --multi_gpu --num_processes N`` (torchrun workers) becomes
    an N-process CPU group instead of N unaware copies; ``accelerate launch --cpu``
    sets ``ACCELERATE_USE_CPU`` and is honoured too. With GPUs each process gets its
    own device (``state.device``), which Accelerate makes the current one.
    """
    from accelerate import PartialState

    forced = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
    return PartialState(cpu=forced or not accelerator_available(), timeout=WAIT)


def cpu_threads(requested: int | None, processes: int, load: float | None = None) -> int:
    """Intra-op threads for one process on CPU: ``--threads`` if given, else
    ``OMP_NUM_THREADS``, else the cores this process may use: the cores it may run on,
    less those other work keeps busy (the 1-minute load average, ``load``, measured when
    the run starts), shared among the processes of the run (one each under ``accelerate
    launch`` with as many processes as cores), and at least one. Oversubscribing a busy
    machine slows every process many times over and makes measured seconds meaningless."""
    if requested:
        return requested
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    free = max(1, cores - int(load + 0.5))
    return max(1, free // max(1, processes))


def set_up_cpu(requested: int | None, processes: int) -> None:
    """This process's CPU arithmetic: :func:`cpu_threads` intra-op threads, and subnormal
    floats (below 1.2e-38) flushed to zero. A model pushed far from its weights (gradient
    ascent, NPO) puts subnormal probabilities into its softmax, and x86 cores compute on
    them many times slower: Gemma 3 270M's fifth ascent step took 133 s against 9 s with
    them flushed, the losses equal to the printed digits (docs/cost.md)."""
    import torch

    torch.set_num_threads(cpu_threads(requested, processes))
    torch.set_flush_denormal(True)


def release_process_group() -> None:
    """Tear down the process group, if any, so workers exit without warnings."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
