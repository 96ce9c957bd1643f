"""``r2f-bench tune``: choose a method's hyper-parameters on the dev split (see :mod:`r2f_bench.results.tune`)."""

from __future__ import annotations

import argparse
from typing import Any

from ..engine.config import RunConfig, for_method
from ..errors import UserError
from ..plugins import registry
from ..results.sweep import comma_list, parse_seeds
from ..results.tune import DEFAULT_MIN_GUR, check_min_gur, parse_grid, plan_searches, run_search
from .options import (add_json_option, add_methods_option, add_run_options, add_seeds_option, add_task_option,
                      json_command, run_values, say)


def base_of(args: argparse.Namespace, method: str) -> RunConfig:
    """``method``'s run configuration in a search of several: without the options that set an input
    it does not read (:func:`~r2f_bench.engine.config.for_method`), which its run would refuse."""
    cls, values = registry().method(method), run_values(args)
    return RunConfig(method=method, task=args.task, **for_method(values, cls, cls.parse_params(values.get("params"))))


def search(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Search every method, print each search's table; the searches as JSON objects."""
    for option in ("extend", "refine"):
        if getattr(args, option) < 0:
            raise UserError(f"--{option}: {getattr(args, option)} is below 0 (0 adds no strengths).")
    check_min_gur(args.min_gur)
    searches = plan_searches(comma_list(args.methods), lambda method: base_of(args, method),
                             parse_grid(args.grid) if args.grid else None, args.points, args.extend)
    results, progress = [], say(args, once=True)
    for s in searches:
        tuned = run_search(s, parse_seeds(args.seeds), args.refine, args.min_gur, progress)
        print(tuned.render(), flush=True)
        results.append(tuned.to_json())
    return results


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("tune", help="choose a method's hyper-parameters on the dev split",
                              description="Run a method at log-spaced strengths of its knob (or --grid), then more "
                                          "strengths between the two that cross the GUR floor (past the knob's top while it "
                                          "is not crossed), on the dev split "
                                          "(methods fit on one half of the dev targets, the other half is scored; the "
                                          "evaluation targets are never touched) and choose by one rule: the highest USR "
                                          "with GUR >= --min-gur, else the highest GUR.")
    add_run_options(p, evaluation=False, seeds=True,
                    limit_help="evaluation targets to set aside (the dev targets come from the end of the target "
                               "list, never among them; default 3)")
    add_methods_option(p, None, " to tune (--method is the same)", required=True, alias="--method")
    add_task_option(p, "whose dev targets are searched")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=v1,v2",
                   help="search these values instead of the method's strength knob (repeatable)")
    p.add_argument("--points", type=int, default=8,
                   help="log-spaced strengths of the method's knob to search (default 8)")
    p.add_argument("--extend", type=int, default=3,
                   help="strengths tried past the knob's top, at its last ratio, while GUR stays >= --min-gur "
                        "(default 3; 0: none)")
    p.add_argument("--refine", type=int, default=3,
                   help="extra log-spaced strengths between the two that cross --min-gur (default 3; 0: none)")
    add_seeds_option(p, "the replicates each setting is averaged over")
    p.add_argument("--min-gur", type=float, default=DEFAULT_MIN_GUR,
                   help=f"utility floor of the selection rule, in %% (default {DEFAULT_MIN_GUR:g})")
    add_json_option(p, "every search (its rows, the rule and the chosen setting)")
    p.set_defaults(func=json_command(search), output="r2f-tune")
    return p
