"""``r2f-bench --method M --task T``: one method on one task, and its printed summary."""

from __future__ import annotations

import argparse
import sys

from ..plugins import registry
from ..runner import run
from .options import run_config

RESULT_COLUMNS = ("usr", "usr_seen", "gur", "locality", "rap", "mia", "seconds", "peak_mem_mb")


def cmd_run(args: argparse.Namespace) -> None:
    method = registry().method(args.method)
    registry().task(args.task)
    records = run(run_config(args, args.method, args.task), progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(summary(records, RESULT_COLUMNS + tuple(method.result_columns)))
    print(f"\n{len(records)} records appended to {args.output}/results.jsonl")


def summary(records: list[dict], columns: tuple[str, ...] = RESULT_COLUMNS) -> str:
    """A plain table of the headline metrics, one row per target."""
    if not records:
        return "no results"
    cols = [c for c in columns if any(r.get(c) is not None for r in records)]
    head = ["target"] + cols
    rows = [[r["target"]] + [_fmt(r.get(c)) for c in cols] for r in records]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda xs: "  ".join(str(x).ljust(w) for x, w in zip(xs, widths))
    models = records[0]["models"]
    proxy = f" | proxy: {models['proxy']}" if models.get("proxy") else ""
    return "\n".join([f"method {records[0]['method']} on {records[0]['task']} | target model: {models['target']}{proxy}",
                      line(head), line(["-" * w for w in widths]), *map(line, rows)])


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)
