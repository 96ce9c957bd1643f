"""``r2f-bench plot``: the rank and views ablations from a results store (see :mod:`r2f_bench.results.plots`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..results.cells import scored
from ..results.plots import AXES, plot_ablation
from ..results.store import Store
from .options import add_out_dir_option, add_store_option
from .table import counted, reasons


def plot_command(args: argparse.Namespace) -> None:
    store = Store(args.output)
    records, _, aside = counted(store)
    if aside:
        print(f"{sum(aside.values())} records set aside: a (target, seed) cell counts its newest record once "
              f"({reasons(aside)})", file=sys.stderr)
    _, diverged = scored(records)
    if diverged:
        print(f"left out: {sum(diverged.values())} diverged deletions (non-finite weights; "
              f"{', '.join(f'{m} {n}' for m, n in sorted(diverged.items()))})", file=sys.stderr)
    out_dir = Path(args.out_dir) if args.out_dir else store.root / "plots"
    drawn = [axis for axis in AXES if plot_ablation(records, axis, out_dir / f"{axis}.png")]
    if not drawn:
        raise UserError(f"no rank or views ablation in {store.jobs}; run `r2f-bench sweep --ablation rank` "
                        f"or `--ablation views` with --output {args.output} first.")
    for axis in drawn:
        print(f"wrote {out_dir / f'{axis}.png'}")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``plot`` to the CLI's subparsers (``args.func(args)`` runs it)."""
    p = subparsers.add_parser("plot", help="plot the rank and views ablations from a results store",
                              description="Plot the rank and views ablations (USR, GUR, RAP, identity alignment against the ablated value) from a results store.")
    add_store_option(p)
    add_out_dir_option(p, "the PNGs", "plots")
    p.set_defaults(func=plot_command)
    return p
