"""``r2f-bench --method M --task T``: one method on one task, and its printed summary.

A plain run writes the same durable store a sweep does (``<output>/jobs/``, exported to
``<output>/results.jsonl``), so ``table`` and ``plot`` read it; running the same
configuration again replaces its records.
"""

from __future__ import annotations

import argparse

from ..metrics import ANSWERED_NOTE, legend
from ..plugins import registry
from ..store import Store
from ..sweep import Job, execute
from .options import run_config, say

RESULT_COLUMNS = ("usr", "usr_seen", "gur", "locality", "rap", "rap_control", "mia", "seconds", "peak_mem_mb")


def cmd_run(args: argparse.Namespace) -> None:
    method = registry().method(args.method)
    registry().task(args.task)
    config = run_config(args, args.method, args.task)
    report = execute([Job(config.to_dict())], args.output, process=(0, 1), replace=True, progress=say(args))
    store = Store(args.output)
    records = [r for r in map(store.get, report.keys) if r is not None]
    print(summary(records, RESULT_COLUMNS + tuple(method.result_columns)))
    print(f"\n{len(records)} records stored in {store.jobs} (and exported to {store.export_path}); "
          f"`r2f-bench table --output {args.output}` tabulates them")


def summary(records: list[dict], columns: tuple[str, ...] = RESULT_COLUMNS) -> str:
    """A plain table of the headline metrics, one row per target, with a legend."""
    if not records:
        return "no results"
    cols = [c for c in columns if any(r.get(c) is not None for r in records)]
    head = ["target"] + cols
    rows = [[r["target"]] + [_fmt(r.get(c)) for c in cols] for r in records]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda xs: "  ".join(str(x).ljust(w) for x, w in zip(xs, widths)).rstrip()
    models = records[0]["models"]
    proxy = f" | proxy: {models['proxy']}" if models.get("proxy") else ""
    notes = [f"  {c}: {text}" for c, text in zip(cols, legend(cols))] + [f"  {ANSWERED_NOTE}"]
    return "\n".join([f"method {records[0]['method']} on {records[0]['task']} | target model: {models['target']}{proxy}",
                      line(head), line(["-" * w for w in widths]), *map(line, rows), "", "legend:", *notes])


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)
