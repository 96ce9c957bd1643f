"""``r2f-bench --method M --task T``: one method on one task, and its printed summary.

A plain run writes the same durable store a sweep does (``<output>/jobs/``, exported to
``<output>/results.jsonl``), so ``table`` and ``plot`` read it; running the same
configuration again replaces its records.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..engine.metrics import ANSWERED_NOTE
from ..engine.record import RAP
from ..metric import CORE, METRICS, legend
from ..plugins import registry
from ..results.job import Job
from ..results.store import Store
from ..results.sweep import execute
from ..results.tables import ALIGNMENT_NOTE, NA_NOTE, SEEN_NOTE
from ..results.tune import DEFAULT_MIN_GUR
from .options import run_config, say

COLLAPSED_GUR = 20.0  # below it a model has lost most of what it could do: a USR there means nothing
FEW_ITEMS = 10  # cells resting on fewer items are flagged: one item moves a share by more than 10 points
ITEMS_NOTE = ("(n=k): the items a cell rests on: the known held-out forget probes (usr, rap_control), the forgotten "
              "ones (rap), utility items (gur), neighbour probes (locality, name_control), general prompts "
              f"(identity_alignment); *: fewer than {FEW_ITEMS} items, too few to read as a rate")


def cmd_run(args: argparse.Namespace) -> None:
    method = registry().method(args.method)
    registry().task(args.task)
    config = run_config(args, args.method, args.task)
    report = execute([Job(config.to_dict())], args.output, process=(0, 1), replace=True, progress=say(args))
    store = Store(args.output)
    records = [r for r in map(store.get, report.keys) if r is not None]
    print(summary(records, CORE + tuple(method.result_columns)))
    if attacked := attacks_summary(records):
        print(attacked)
    for line in utility_warnings(records):
        print(line)
    print(f"\n{plural(len(records), 'record')} stored in {store.jobs} (and exported to {store.export_path}); "
          f"`r2f-bench table --output {args.output}` tabulates them")


def utility_warnings(records: list[dict]) -> list[str]:
    """A line for the targets whose GUR fell below the floor the shipped defaults were tuned
    for, and a louder one for those where the model collapsed (its USR is then a destroyed
    model's, not a deletion's)."""
    def targets(test) -> list[str]:
        return [f"{r['target']} ({r['gur']:.1f})" for r in records if isinstance(r.get("gur"), (int, float)) and test(r["gur"])]

    lines = []
    if collapsed := targets(lambda g: g < COLLAPSED_GUR):
        lines.append(f"\nwarning: the model collapsed on {', '.join(collapsed)}: it kept less than {COLLAPSED_GUR:g}% of "
                     f"its utility (GUR), so its USR counts a destroyed model, not a deletion; weaken the method "
                     f"(`r2f-bench methods` lists its knob) or find its operating point with `r2f-bench tune`")
    if below := targets(lambda g: COLLAPSED_GUR <= g < DEFAULT_MIN_GUR):
        lines.append(f"\nwarning: GUR below the {DEFAULT_MIN_GUR:g}% floor the shipped defaults were tuned for on "
                     f"{', '.join(below)}: part of this USR is bought with utility; compare methods at matched GUR "
                     f"with `r2f-bench frontier`")
    return lines


def plural(n: int, noun: str) -> str:
    """``1 record``, ``2 records``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def summary(records: list[dict], columns: tuple[str, ...] = CORE) -> str:
    """A plain table of the headline metrics, one row per target, each share with the items
    it rests on, and a legend. The headline columns always show (``n/a`` where undefined);
    a method's own columns, and those only some tasks have, only where some record has them."""
    if not records:
        return "no results"
    cols = [c for c in columns if c in CORE and not METRICS[c].by_task or any(r.get(c) is not None for r in records)]
    rows = [[r["target"]] + [_cell(r, c) for c in cols] for r in records]
    models = records[0]["models"]
    proxy = f" | proxy: {models['proxy']}" if models.get("proxy") else ""
    notes = [f"  {c}: {text}" for c in cols for text in legend([c])]
    notes += [f"  {text}" for text in (ITEMS_NOTE, NA_NOTE, SEEN_NOTE, ALIGNMENT_NOTE, ANSWERED_NOTE)]
    return "\n".join([f"method {records[0]['method']} on {records[0]['task']} | model: {models['target']}{proxy}",
                      *plain(["target"] + cols, rows), "", "legend:", *notes])


def attacks_summary(records: list[dict]) -> str | None:
    """Per target, each attack besides RAP (whose columns are above): the USR after it, the
    share of the forgotten probes it recovered, and its control ("n/a" where undefined)."""
    specs = sorted({s for r in records for s in (r.get("attacks") or {}) if s != RAP})
    if not specs:
        return None
    reading = lambda a: (f"{_fmt(a.get('usr'))} / {_fmt(a.get('recovered'))} / {_fmt(a.get('control'))}"
                         if a else "n/a")
    rows = [[r["target"]] + [reading((r.get("attacks") or {}).get(s)) for s in specs] for r in records]
    return "\n".join(["", "attacks (USR after / recovered / control kept, %: `r2f-bench table` defines them)",
                      *plain(["target"] + specs, rows)])


def plain(head: list[str], rows: list[list[Any]]) -> list[str]:
    """``head`` and ``rows`` as lines of left-aligned columns, a rule under the head."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda xs: "  ".join(str(x).ljust(w) for x, w in zip(xs, widths)).rstrip()
    return [line(head), line(["-" * w for w in widths]), *map(line, rows)]


def items(record: dict, column: str) -> int | None:
    """How many items ``column``'s value in ``record`` rests on (``None``: not recorded)."""
    path = METRICS[column].items if column in METRICS else None
    if path is None:
        return None
    value: Any = record
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value if isinstance(value, int) else None


def _cell(record: dict, column: str) -> str:
    """The value, with ``(n=k)`` where its item count is known, ``*`` when a value rests on
    fewer than :data:`FEW_ITEMS`."""
    value, n = record.get(column), items(record, column)
    if n is None:
        return _fmt(value)
    return f"{_fmt(value)} (n={n}){'*' if value is not None and n < FEW_ITEMS else ''}"


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)
