"""``r2f-bench frontier``: each method's forget–utility curve over its strength knob, refined
at the GUR floors, the summaries that compare methods at matched utility, and paired
differences against a baseline (see :mod:`r2f_bench.results.frontier`; the runs,
:mod:`r2f_bench.results.frontier_run`; the tables, :mod:`r2f_bench.results.frontier_tables`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..atomic import check_writable
from ..results.frontier import TOLERANCE
from ..results.frontier_run import run_frontier
from ..results.frontier_settings import Settings
from ..results.frontier_tables import as_json, write_report
from ..results.launch import add_launcher_options, launcher
from ..results.store import Store
from ..results.sweep import SweepReport, comma_list, parse_seeds
from .options import (add_budget_option, add_json_option, add_keep_going_option, add_methods_option,
                      add_out_dir_option, add_run_options, add_seeds_option, add_task_option, budget_deadline,
                      json_command, run_values, say)

DEFAULT_POINTS = 8
DEFAULT_REFINE = 5


def run(args: argparse.Namespace) -> dict[str, Any] | None:
    """Run, refine and tabulate the frontier, print its tables; its JSON (``None``: this
    process ran its share under ``accelerate launch``, and the main one tabulates)."""
    launch = launcher(args, say(args))  # a missing submitit or a bad combination fails first
    if args.out_dir:  # before the rounds, not after them
        check_writable(Path(args.out_dir), "--out-dir")
    settings = Settings(comma_list(args.methods), args.task, parse_seeds(args.seeds), run_values(args), args.points,
                        args.refine, args.baseline, args.keep_going, budget_deadline(args), args.after,
                        args.name_control)
    measured = run_frontier(settings, launch, say(args))
    if isinstance(measured, SweepReport):
        print(f"this process ran its share of the first round ({measured.assigned} of {measured.planned} jobs) "
              f"and of every refinement; the main process writes the tables")
        return None
    out_dir = Path(args.out_dir) if args.out_dir else Store(args.output).root / "frontier"
    files = write_report(measured, args.refine, args.task, out_dir)
    print(files["tables.md"])
    print(f"wrote {out_dir}/frontier.png and the tables as {', '.join(sorted(files))}")
    return as_json(measured)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("frontier", help="each method's USR-GUR curve over its strength knob; USR at matched GUR",
                              description="Run every method at log-spaced strengths of its declared knob (and once at "
                                          "its shipped defaults) on the same targets, seeds, views and retain data, "
                                          "into a resumable store; add strengths near GUR 95 and 90 until a measured "
                                          f"point lies within {TOLERANCE:g} GUR of each; report USR at GUR >= 95 and "
                                          ">= 90 (or after an attack: --after) and the area under the frontier with "
                                          "bootstrap CIs over targets and taught models, Holm-corrected paired "
                                          "differences against a baseline and tiers, frontier.png and the tables in "
                                          "Markdown, LaTeX, CSV and HTML.")
    add_run_options(p, evaluation=False, seeds=True)
    add_methods_option(p, "all", ", `all` (default) among them; name@param=value sets parameters of one entry, e.g. "
                                 "all,r2f@steps=5,fullgrad@steps=5")
    add_task_option(p, "whose targets are unlearned")
    add_seeds_option(p)
    p.add_argument("--points", type=int, default=DEFAULT_POINTS,
                   help=f"strengths per method, log-spaced over its declared range (default {DEFAULT_POINTS})")
    p.add_argument("--refine", type=int, default=DEFAULT_REFINE,
                   help=f"rounds of strengths added near each GUR floor (default {DEFAULT_REFINE}; 0: none)")
    p.add_argument("--after", default=None, metavar="ATTACK",
                   help="read USR after this attack (one of --attacks, e.g. quantize:nf4): a method that hides what "
                        "it removes falls down the ranking (default: USR as the deletion left it)")
    p.add_argument("--name-control", action="store_true",
                   help="read utility as the lower of GUR and the name control (other people's facts asked with the "
                        "target's name): a method that breaks every sentence naming the target pays for it in utility")
    p.add_argument("--baseline", default=None, help="the --methods entry others are paired against (default: the first)")
    add_out_dir_option(p, "frontier.png and the tables", "frontier")
    add_keep_going_option(p, " (its targets count as failures)")
    add_budget_option(p, "the shipped defaults first, then the strengths from the weakest up, one method after "
                         "another")
    add_json_option(p, "every method's points, summaries, paired differences and tiers")
    add_launcher_options(p, no_wait=False)  # each round's jobs as one array; the rounds read the store in between
    p.set_defaults(func=json_command(run), output="r2f-frontier")
