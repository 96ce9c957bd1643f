"""``r2f-bench table``: leaderboard tables from a results store (see :mod:`r2f_bench.tables`)."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ..aggregate import invalid
from ..atomic import atomic_path, write_fully
from ..errors import UserError
from ..render import FORMATS, render
from ..store import Store
from ..tables import build_tables


def table_command(args: argparse.Namespace) -> None:
    store = Store(args.output)
    records, skipped = [], []
    for r in store.records():
        why = invalid(r)
        if why:
            skipped.append(f"{r.get('key', '?')[:12]}: {why}")
        else:
            records.append(r)
    for line in skipped:
        print(f"warning: skipped record {line}", file=sys.stderr)
    if not records:
        raise UserError(f"no results in {store.jobs}; run `r2f-bench sweep --output {args.output}` first, or point --output at a results store.")
    tables = build_tables(records)
    out_dir = Path(args.out_dir) if args.out_dir else store.root / "tables"
    # every format is rendered before anything is written, then the files are replaced together
    files = {name: text for fmt in (FORMATS if args.format == "all" else [args.format])
             for name, text in render(tables, fmt).items()}
    with ExitStack() as stack:
        temps = {name: stack.enter_context(atomic_path(out_dir / name)) for name in files}
        for name, text in files.items():
            write_fully(temps[name], text.encode("utf-8"))
    for name in files:
        print(f"wrote {out_dir / name}")
    print(f"{len(records)} records in the tables" + (f"; {len(skipped)} skipped (see the warnings above)" if skipped else ""))
    if args.format in ("md", "all"):
        print()
        print(files["tables.md"])


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``table`` to the CLI's subparsers (``args.func(args)`` runs it)."""
    p = subparsers.add_parser("table", help="render leaderboard tables from a results store",
                              description="Leaderboard tables in the paper's shape, with 95% bootstrap CIs, from a results store.")
    p.add_argument("--output", default="r2f-output", help="results store directory (default r2f-output)")
    p.add_argument("--format", choices=FORMATS + ("all",), default="all", help="output format (default all)")
    p.add_argument("--out-dir", default=None, help="where to write the tables (default <output>/tables)")
    p.set_defaults(func=table_command)
    return p
