"""``r2f-bench table``: leaderboard tables from a results store (see :mod:`r2f_bench.results.tables`)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..plugins import registry
from ..results.cells import newest_per_cell, tabulable
from ..results.cost_tables import PHASES_TABLE
from ..results.leaderboard import build_tables
from ..results.render import FORMATS, render, to_json, write_files
from ..results.store import Store
from .options import add_json_option, add_out_dir_option, add_store_option, json_command


def counted(store: Store, all_versions: bool = False) -> tuple[list[dict[str, Any]], list[str], Counter[str]]:
    """The store's records a table or plot counts (each cell's newest; ``all_versions``: per
    version), each one skipped named in a warning on stderr; the skipped (``KEY: why``) and
    how many were set aside, by why."""
    records, skipped = tabulable(store.records())
    for line in skipped:
        print(f"warning: skipped record {line}", file=sys.stderr)
    kept, aside = newest_per_cell(records, all_versions)
    return kept, skipped, aside


def tabulate(args: argparse.Namespace) -> dict[str, Any]:
    """Write the tables, print them and what they rest on; return the same as a JSON object."""
    store = Store(args.output)
    records, skipped, aside = counted(store, args.all_versions)
    if not records:
        raise UserError(f"no results in {store.jobs}; run `r2f-bench sweep --output {args.output}` first, or point --output at a results store.")
    tables = build_tables(records, phases=args.phases, reference=registry().cost_reference(), baseline=args.baseline,
                          per_target=args.per_target)
    for t in tables:
        t.note += pooling_note(aside, args.all_versions)
    out_dir = Path(args.out_dir) if args.out_dir else store.root / "tables"
    # every format is rendered before anything is written, then the files are replaced together
    files = {name: text for fmt in (FORMATS if args.format == "all" else [args.format])
             for name, text in render(tables, fmt).items()}
    write_files(out_dir, files)
    for name in files:
        print(f"wrote {out_dir / name}")
    print(f"{len(records)} records in the tables" + (f"; {sum(aside.values())} set aside ({reasons(aside)})" if aside else "")
          + (f"; {len(skipped)} skipped (see the warnings above)" if skipped else ""))
    if args.format in ("md", "all"):
        print()
        print(files["tables.md"])
    timing = to_json([t for t in tables if t.name == PHASES_TABLE])  # under its own key, not among the tables
    summary = {"records": len(records), "set_aside": dict(aside), "skipped": skipped,
               "files": [str(out_dir / name) for name in files],
               "tables": to_json([t for t in tables if t.name != PHASES_TABLE])}
    return {**summary, "phases": timing[0] if timing else None} if args.phases else summary


def reasons(aside: Counter[str]) -> str:
    """``older code version 2, duplicate 1``: how many records were set aside, by why."""
    return ", ".join(f"{'older ' if why != 'duplicate' else ''}{why} {n}" for why, n in sorted(aside.items()))


def pooling_note(aside: Counter[str], all_versions: bool) -> str:
    """What every table's caption says about records of one (target, seed) cell."""
    note = ""
    if all_versions:
        note += (" Pooled across code versions and data revisions (--all-versions): a (target, seed) counts once "
                 "per version and revision.")
    if aside:
        note += (f" Set aside: {sum(aside.values())} records of a cell that has a newer one ({reasons(aside)}); "
                 f"each (target, seed) counts once, its newest record" + ("" if all_versions else
                                                                            " (--all-versions pools versions)") + ".")
    return note


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``table`` to the CLI's subparsers (``args.func(args)`` runs it)."""
    p = subparsers.add_parser("table", help="render leaderboard tables from a results store",
                              description="Leaderboard tables in the paper's shape, with 95% bootstrap CIs, from a results store.")
    add_store_option(p)
    p.add_argument("--format", choices=FORMATS + ("all",), default="all", help="output format (default all)")
    add_out_dir_option(p, "the tables", "tables")
    p.add_argument("--all-versions", action="store_true",
                   help="pool records of one (target, seed) from different code versions and data revisions "
                        "(default: only the newest counts); said in every caption")
    p.add_argument("--baseline", default=None,
                   help="the row the paired table subtracts from every other, a method or a row label (default: the "
                        "method the cost table states ratios to, where the table has one row of it); control:KIND "
                        "(control:other_request, control:random_step) instead subtracts from each row its own "
                        "negative control, the same method and setting run with --control KIND, and Holm corrects "
                        "over those pairs alone")
    p.add_argument("--phases", action="store_true",
                   help="also the phases table: the mean wall seconds of each phase of a target's run (untouched "
                        "scores, unlearn, evaluate, extra, alignment, attacks, restore), their sum, the share outside unlearn, and "
                        "the run's one-time load and setup; in the --json output under \"phases\"")
    p.add_argument("--per-target", action="store_true",
                   help="also, per dataset, each row's USR on every target, the target's known probes beside it and "
                        "every target pooled last (USR weighted by known probes): where a mean over targets comes from")
    add_json_option(p, "every table's cells (mean, interval, n), notes and provenance, and the record counts")
    p.set_defaults(func=json_command(tabulate))
    return p
