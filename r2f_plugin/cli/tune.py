"""``r2f-bench tune``: choose a method's hyper-parameters on the dev split (see :mod:`r2f_bench.results.tune`)."""

from __future__ import annotations

import argparse
from typing import Any

from ..plugins import registry
from ..results.store import Store
from ..results.sweep import Job, execute, parse_seeds, split_list
from ..results.tune import DEFAULT_MIN_GUR, choose, grid_points, parse_grid, refinement, render, summarize
from .options import (add_json_option, add_methods_option, add_run_options, add_seeds_option, add_task_option,
                      json_command, run_config, say)


def search(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Search every method, print each search's table; the searches as JSON objects."""
    plans = []  # (method, class, run configuration, grid points): all checked before anything runs
    for method in split_list(args.methods):
        cls, base = registry().method(method), run_config(args, method, args.task)
        if args.grid:
            points = grid_points(parse_grid(args.grid))
        elif cls.strength is not None:
            points = [{cls.strength.param: str(v)} for v in cls.strength.points(args.points)]
        else:
            points = [{}]  # no knob and no --grid: the method's defaults alone
        for point in points:
            cls.parse_params({**base.params, **point})  # a bad name or value fails here
        plans.append((method, cls, base, points))
    results, progress = [], say(args, once=True)
    for method, cls, base, points in plans:
        store = Store(args.output)

        def evaluate(point: dict[str, str]) -> tuple[dict[str, str], dict]:
            fields = {**base.to_dict(), "split": "dev", "params": {**base.params, **point}}
            jobs = [Job({**fields, "seed": seed}) for seed in parse_seeds(args.seeds)]
            keys = execute(jobs, args.output, process=(0, 1), progress=progress).keys
            return point, summarize([r for r in map(store.get, keys) if r is not None])

        rows = [evaluate(point) for point in points]
        if not args.grid and cls.strength is not None and args.refine:
            rows += [evaluate(point) for point in refinement(rows, cls.strength.param, args.min_gur, args.refine)]
            rows.sort(key=lambda row: float(row[0][cls.strength.param]))
        best, why = choose(rows, args.min_gur)
        print(render(method, args.task, rows, best, why), flush=True)
        results.append({"method": method, "task": args.task, "rule": why, "chosen": rows[best][0],
                        "rows": [{"params": p, **s} for p, s in rows]})
    return results


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("tune", help="choose a method's hyper-parameters on the dev split",
                              description="Run a method at log-spaced strengths of its knob (or --grid), then more "
                                          "strengths between the two that cross the GUR floor, on the dev split "
                                          "(methods fit on one half of the dev targets, the other half is scored; the "
                                          "evaluation targets are never touched) and choose by one rule: the highest USR "
                                          "with GUR >= --min-gur, else the highest GUR.")
    add_run_options(p, split=False, limit_help="evaluation targets to set aside (the dev targets come from the end of "
                                               "the target list, never among them; default 3)")
    add_methods_option(p, None, " to tune (--method is the same)", required=True, alias="--method")
    add_task_option(p, "whose dev targets are searched")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=v1,v2",
                   help="search these values instead of the method's strength knob (repeatable)")
    p.add_argument("--points", type=int, default=8,
                   help="log-spaced strengths of the method's knob to search (default 8)")
    p.add_argument("--refine", type=int, default=3,
                   help="extra log-spaced strengths between the two that cross --min-gur (default 3; 0: none)")
    add_seeds_option(p, "the replicates each setting is averaged over")
    p.add_argument("--min-gur", type=float, default=DEFAULT_MIN_GUR,
                   help=f"utility floor of the selection rule, in %% (default {DEFAULT_MIN_GUR:g})")
    add_json_option(p, "every search (its rows, the rule and the chosen setting)")
    p.set_defaults(func=json_command(search), output="r2f-tune")
    return p
