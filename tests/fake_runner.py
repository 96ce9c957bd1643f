"""A stand-in for :class:`r2f_bench.engine.run.Run` in sweep tests: same API, synthetic records,
no models. Tests put it in place with the ``fake_run`` fixture (conftest.py); tests that spawn
processes run ``python -m fake_runner <r2f-bench arguments>`` (:func:`main`).

Every ``run_target`` call appends ``{"label", "target", "rank", "pid"}`` to the
JSONL file named by ``R2F_FAKE_LOG`` (if set) and to :data:`CALLS`, so tests can
count executions across processes. ``R2F_FAKE_REVISION`` overrides the data revision;
``R2F_FAKE_INTERRUPT_AT=N`` interrupts the run after N targets in this process;
``R2F_FAKE_SIGTERM_AT=N`` sends this process SIGTERM after N targets, while it holds a
``.work-*`` scratch folder under the output directory (as an evaluation does).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import tempfile
from types import SimpleNamespace
from typing import Callable

from r2f_bench.engine.config import RunConfig  # the real configuration: the fake differs only in what it computes

CALLS: list[dict] = []


def _label(spec: str, default: str) -> str:
    return default if spec in ("embedded", "embedded-proxy") else spec


class Run:
    def __init__(self, config: RunConfig, progress: Callable[[str], None] = print) -> None:
        self.config = config
        ids = config.targets or [f"t{i}" for i in range(1, 4)]
        self.targets = [SimpleNamespace(id=i) for i in ids[: config.limit or None]]

    def data_revision(self) -> str:
        return os.environ.get("R2F_FAKE_REVISION", "rev1")

    def versions(self) -> dict[str, str]:
        return {"r2f-bench": "0.1.0", "fake-runner": "1"}

    def resolved_params(self) -> dict:
        return {"default": os.environ.get("R2F_FAKE_DEFAULT", "1"), **self.config.params}

    def run_target(self, target) -> dict:
        c = self.config
        call = {"label": f"{c.method}/{c.task}/{c.seed}/{json.dumps(c.params, sort_keys=True)}/{c.views}",
                "target": target.id, "rank": int(os.environ.get("RANK", "0")), "pid": os.getpid()}
        if len(CALLS) == int(os.environ.get("R2F_FAKE_INTERRUPT_AT", "-1")):
            raise KeyboardInterrupt  # as Ctrl-C (or a kill) mid-run
        if len(CALLS) == int(os.environ.get("R2F_FAKE_SIGTERM_AT", "-1")):
            with tempfile.TemporaryDirectory(prefix=".work-", dir=c.output):
                os.kill(os.getpid(), signal.SIGTERM)  # as `timeout`, SLURM or `docker stop` mid-evaluation
        CALLS.append(call)
        if os.environ.get("R2F_FAKE_LOG"):
            with open(os.environ["R2F_FAKE_LOG"], "a") as log:  # one write per line: processes never interleave
                log.write(json.dumps(call) + "\n")
        u = int(hashlib.sha256(json.dumps([call["label"], target.id]).encode()).hexdigest(), 16)
        return {"method": c.method, "task": c.task, "target": target.id, "seed": c.seed,
                "usr": float(u % 100), "gur": float(u // 100 % 100), "rap": float(u // 10**4 % 100),
                "identity_alignment": (u // 10**6 % 1000) / 1000, "seconds": 0.01, "peak_mem_mb": 1.0,
                "grad_cosine": None, "official": {}, "config": c.to_dict(), "versions": self.versions(),
                "models": {"target": _label(c.model, "embedded:mistral-h128-l4"),
                           "proxy": _label(c.proxy, "embedded:mistral-h64-l2")},
                "data_revision": self.data_revision()}


def main() -> int:
    """``r2f-bench`` with :class:`Run` in place of the real one."""
    from r2f_bench import cli
    from r2f_bench.engine import run

    run.Run = Run
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
