"""``r2f-bench tune``: choose a method's hyper-parameters on the dev split (see :mod:`r2f_bench.tune`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..plugins import registry
from ..store import Store
from ..sweep import Job, execute, parse_seeds, split_list
from ..tune import DEFAULT_MIN_GUR, choose, grid_points, parse_grid, render, summarize
from .options import add_run_options, run_config, say


def tune_command(args: argparse.Namespace) -> None:

    plans = []  # (method, grid points, jobs per point): all checked before anything runs
    for method in split_list(args.method):
        cls = registry().method(method)
        space = parse_grid(args.grid) if args.grid else dict(cls.search_space)
        points = grid_points(space) if space else [{}]
        base = run_config(args, method, args.task)
        jobs = []
        for point in points:
            fields = {**base.to_dict(), "split": "dev", "params": {**base.params, **point}}
            cls.parse_params(fields["params"])  # a bad name or value fails here
            jobs.append([Job({**fields, "seed": seed}) for seed in parse_seeds(args.seeds)])
        plans.append((method, points, jobs))
    results = []
    for method, points, jobs in plans:
        store, rows = Store(args.output), []
        for point, point_jobs in zip(points, jobs):
            keys = execute(point_jobs, args.output, process=(0, 1), progress=say(args)).keys
            rows.append((point, summarize([r for r in map(store.get, keys) if r is not None])))
        best, why = choose(rows, args.min_gur)
        print(render(method, args.task, rows, best, why), flush=True)
        results.append({"method": method, "task": args.task, "rule": why, "chosen": rows[best][0],
                        "rows": [{"params": p, **s} for p, s in rows]})
    if args.json:
        print(json.dumps(results, indent=2))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:

    p = subparsers.add_parser("tune", help="choose a method's hyper-parameters on the dev split",
                              description="Run each point of a method's search space (or --grid) on the dev split "
                                          "(methods fit on one half of the dev targets, the other half is scored; the "
                                          "evaluation targets are never touched) and choose by one rule: the highest USR "
                                          "with GUR >= --min-gur, else the highest GUR.")
    add_run_options(p, split=False, limit_help="evaluation targets to set aside (the dev targets come from the end of "
                                               "the target list, never among them; default 3)")
    p.add_argument("--method", required=True, help="method(s) to tune, comma-separated")
    p.add_argument("--task", default="rwku", help="benchmark whose dev targets are searched (default rwku)")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=v1,v2",
                   help="search these values instead of the method's declared space (repeatable)")
    p.add_argument("--seeds", default="0", help="seeds to average over (default 0)")
    p.add_argument("--min-gur", type=float, default=DEFAULT_MIN_GUR,
                   help=f"utility floor of the selection rule, in %% (default {DEFAULT_MIN_GUR:g})")
    p.add_argument("--json", action="store_true", help="also print the search as JSON")
    p.set_defaults(func=tune_command, output="r2f-tune")
    return p
