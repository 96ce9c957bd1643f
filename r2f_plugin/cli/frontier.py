"""``r2f-bench frontier``: each method's forget–utility curve over its strength knob, and
the summaries that compare methods at matched utility (see :mod:`r2f_bench.frontier`)."""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ..atomic import atomic_path, write_fully
from ..errors import UserError
from ..frontier import GUR_LEVELS, Frontier, frontier
from ..plots import plot_frontier
from ..plugins import registry
from ..render import FORMATS, render
from ..store import Store
from ..sweep import DEFAULT_RUNNER, Job, execute, expand, load_runner, parse_seeds, split_list
from ..tables import Column, Provenance, Table
from ..unlearner import method_variant
from .options import add_run_options, run_config, say

DEFAULT_POINTS = 8


def plan(args: argparse.Namespace, entries: list[str]) -> dict[str, tuple[str, list[float], dict[float, list[Job]], list[Job]]]:
    """Per method entry (``name`` or ``name@param=value@...``): its knob, strengths, the
    jobs at each strength and the jobs at its dev-tuned defaults (with the entry's
    parameters); every entry checked before anything runs."""
    out = {}
    for entry in entries:
        method, overrides = method_variant(entry)
        cls = registry().method(method)
        if cls.strength is None:
            raise UserError(f"method {method!r} declares no strength knob, so it has no frontier; give its class "
                            f"`strength = Strength(param, low, high)` (r2f_bench.unlearner) or leave it out of --methods.")
        knob = cls.strength
        if args.points < 2:
            raise UserError(f"--points must be at least 2, got {args.points}.")
        base = run_config(args, method, args.task).to_dict()
        base["params"] = {**base["params"], **overrides}
        seeds = parse_seeds(args.seeds)
        at = {s: [Job({**base, "params": {**base["params"], knob.param: str(s)}, "seed": seed}) for seed in seeds]
              for s in knob.points(args.points)}
        for jobs in at.values():
            cls.parse_params(jobs[0].fields["params"])  # a bad name or value fails here
        cls.parse_params(base["params"])
        out[entry] = (knob.param, list(at), at, [Job({**base, "seed": seed}) for seed in seeds])
    return out


def frontier_command(args: argparse.Namespace) -> None:
    entries = split_list(args.methods)
    plans = plan(args, expand(entries, "method") if entries == ["all"] else entries)
    jobs = [j for _, _, at, tuned in plans.values() for js in at.values() for j in js] + \
           [j for _, _, _, tuned in plans.values() for j in tuned]
    report = execute(jobs, args.output, runner=load_runner(args.runner), keep_going=args.keep_going,
                     progress=say(args))
    if report.assigned < report.planned:
        print(f"this process ran its share ({report.assigned} of {report.planned} jobs); run the same command "
              f"in one process to tabulate the frontier (finished jobs are skipped)")
        return
    if report.failed:
        raise UserError(f"{len(report.failed)} job(s) failed ({'; '.join(report.failed)}); fix and re-run the same "
                        f"command to resume.")
    store = Store(args.output)
    results, records = [], []

    def measured(job: Job) -> dict[tuple, tuple[float, float]]:
        out = {}
        for key in report.job_keys.get(job.label, []):
            r = store.get(key)
            if r is not None and r.get("status", "ok") == "ok" and r.get("usr") is not None and r.get("gur") is not None:
                records.append(r)
                out[(r["target"], r["seed"])] = (float(r["usr"]), float(r["gur"]))
        return out

    for method, (param, strengths, at, tuned) in plans.items():
        by_strength = {s: {u: v for job in at[s] for u, v in measured(job).items()} for s in strengths}
        if not all(by_strength.values()):
            raise UserError(f"method {method!r} has no scored target at some strength (all diverged or nothing "
                            f"known); see the records in {store.jobs}.")
        tuned_params = tuned[0].fields["params"] or {"(defaults)": ""}
        results.append(frontier(method, param, by_strength, {u: v for job in tuned for u, v in measured(job).items()},
                                tuned_params))
    out_dir = Path(args.out_dir) if args.out_dir else store.root / "frontier"
    table = summary_table(results, records)
    files = {name: text for fmt in FORMATS for name, text in render([table], fmt).items()}
    with ExitStack() as stack:
        temps = {name: stack.enter_context(atomic_path(out_dir / name)) for name in files}
        for name, text in files.items():
            write_fully(temps[name], text.encode("utf-8"))
    plot_frontier(results, args.task, out_dir / "frontier.png")
    print(files["tables.md"])
    print(f"wrote {out_dir}/frontier.png and the table as {', '.join(sorted(files))}")
    if args.json:
        print(json.dumps([as_json(f) for f in results], indent=2))


def summary_table(results: list[Frontier], records: list[dict]) -> Table:
    columns = [Column(f"usr_at_gur{int(g)}", f"USR @ GUR≥{g:g}", "matched utility", True) for g in GUR_LEVELS]
    columns += [Column("auc", "Area", "whole frontier", True),
                Column("tuned_usr", "USR", "dev-tuned point", None), Column("tuned_gur", "GUR", "dev-tuned point", None)]
    rows = [(f.method, [f.usr_at[g] for g in GUR_LEVELS] + [f.auc, f.tuned["usr"], f.tuned["gur"]]) for f in results]
    opened = {g: [f.method for f in results if f.open_at[g]] for g in GUR_LEVELS}
    notes = ["USR @ GUR≥g (%): the highest USR a method reaches along its measured curve (log-spaced strengths of "
             "its knob, linear between neighbours) while GUR stays at least g; 0 if no strength keeps GUR ≥ g. "
             "Area (%): its mean over g = 50…100. Intervals: 95% bootstrap over (target, seed) pairs; n = pairs. "
             "The dev-tuned point is each method's shipped defaults on the same targets."]
    notes += [f"Open at GUR≥{g:g} (even the strongest setting kept GUR ≥ {g:g}; a stronger one might reach more): "
              f"{', '.join(ms)}." for g, ms in opened.items() if ms]
    knobs = "; ".join(f"{f.method}: {f.param} {f.points[0]['strength']:g}…{f.points[-1]['strength']:g} "
                      f"({len(f.points)} points)" for f in results)
    return Table("frontier", "Forget–utility frontier: USR at matched GUR", " ".join(notes) + f" Knobs: {knobs}.",
                 columns, rows, Provenance.of(records))


def as_json(f: Frontier) -> dict[str, Any]:
    stat = lambda s: None if s is None else {"mean": s.mean, "lo": s.lo, "hi": s.hi, "n": s.n}
    return {"method": f.method, "param": f.param,
            "points": [{"strength": p["strength"], "usr": stat(p["usr"]), "gur": stat(p["gur"])} for p in f.points],
            **{f"usr_at_gur{int(g)}": stat(f.usr_at[g]) for g in GUR_LEVELS},
            **{f"open_at_gur{int(g)}": f.open_at[g] for g in GUR_LEVELS},
            "auc": stat(f.auc), "tuned": {"params": f.tuned["params"], "usr": stat(f.tuned["usr"]),
                                          "gur": stat(f.tuned["gur"])}}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("frontier", help="each method's USR-GUR curve over its strength knob; USR at matched GUR",
                              description="Run every method at log-spaced strengths of its declared knob (and once at "
                                          "its dev-tuned defaults) on the same targets, seeds, views and retain data, "
                                          "into a resumable store; report USR at GUR >= 95 and >= 90, the area under "
                                          "the frontier with bootstrap CIs, frontier.png and the table in Markdown, "
                                          "LaTeX, CSV and HTML.")
    add_run_options(p, split=False)
    p.add_argument("--methods", default="all", help="comma-separated methods, or `all` (default); name@param=value "
                                                    "sets parameters of one entry, e.g. r2f@decoder=learned")
    p.add_argument("--task", default="rwku", help="benchmark (default rwku)")
    p.add_argument("--seeds", default="0", help="seeds, e.g. 0,1,2 or 0-4 (default 0)")
    p.add_argument("--points", type=int, default=DEFAULT_POINTS,
                   help=f"strengths per method, log-spaced over its declared range (default {DEFAULT_POINTS})")
    p.add_argument("--out-dir", default=None, help="where to write frontier.png and the tables (default <output>/frontier)")
    p.add_argument("--keep-going", action="store_true", help="run the remaining jobs when one fails")
    p.add_argument("--json", action="store_true", help="also print every method's points and summaries as JSON")
    p.add_argument("--runner", default=DEFAULT_RUNNER, help=argparse.SUPPRESS)
    p.set_defaults(func=frontier_command, output="r2f-frontier")
