"""A job: one planned run of a many-run command (sweep, tune, frontier)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Job:
    """One planned run: keyword arguments of :class:`~r2f_bench.engine.config.RunConfig`."""

    fields: dict[str, Any] = field(hash=False)

    @property
    def label(self) -> str:
        f = self.fields
        extra = [f"{k}={v}" for k, v in sorted(f.get("params", {}).items())]
        extra += [f"{k}={f[k]}" for k in ("views", "model", "proxy") if f.get(k) is not None]
        return f"{f['method']}/{f['task']}/seed{f['seed']}" + (f" [{', '.join(extra)}]" if extra else "")
