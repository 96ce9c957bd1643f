"""``r2f-bench tune``: choose a method's hyper-parameters on the dev split.

Every method declares its search space beside its defaults
(:attr:`r2f_bench.unlearner.Unlearner.search_space`). ``tune`` runs each point of
that grid (or of ``--grid NAME=v1,v2``) on the **dev targets**, which are disjoint
from the evaluation targets and unlearned from the same taught model, through the
sweep machinery (results stored as they finish; a re-run resumes). It then applies
one fixed rule:

    the highest mean USR among settings whose mean GUR is at least ``--min-gur``
    (ties: the higher GUR); if none reaches it, the highest GUR.

The same rule for every method, one seed unless ``--seeds`` says otherwise, and
never a look at the evaluation targets. The defaults shipped in each method's
``Params`` are the choices this command made on RWKU's dev split with the embedded
models (``docs/tuning.md`` records the searches).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from typing import Any, Sequence

from .errors import UserError
from .store import Store

METRICS = ("usr", "gur", "rap", "mia", "seconds")
DEFAULT_MIN_GUR = 90.0


def grid_points(space: dict[str, Sequence[Any]]) -> list[dict[str, str]]:
    """Every combination of the space's values, as ``--set`` strings."""
    names = sorted(space)
    return [{n: str(v) for n, v in zip(names, values)} for values in itertools.product(*(space[n] for n in names))]


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    space: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name.strip() or not vals:
            raise UserError(f"--grid expects NAME=v1,v2,..., got {item!r}.")
        space[name.strip()] = vals
    return space


def summarize(records: list[dict]) -> dict[str, float | None]:
    """Mean of each metric over the records that have it."""
    out: dict[str, float | None] = {}
    for m in METRICS:
        values = [r[m] for r in records if isinstance(r.get(m), (int, float))]
        out[m] = statistics.fmean(values) if values else None
    out["targets"] = len(records)
    return out


def choose(rows: list[tuple[dict[str, str], dict[str, float | None]]], min_gur: float) -> tuple[int, str]:
    """Index of the chosen row and the reason, by the module's rule."""
    usr = lambda r: r[1]["usr"] if r[1]["usr"] is not None else -1.0
    gur = lambda r: r[1]["gur"] if r[1]["gur"] is not None else -1.0
    eligible = [i for i, r in enumerate(rows) if gur(r) >= min_gur]
    if eligible:
        best = max(eligible, key=lambda i: (usr(rows[i]), gur(rows[i])))
        return best, f"highest USR with GUR ≥ {min_gur:g}"
    best = max(range(len(rows)), key=lambda i: (gur(rows[i]), usr(rows[i])))
    return best, f"no setting kept GUR ≥ {min_gur:g}; highest GUR"


def tune_command(args: argparse.Namespace) -> None:
    from .cli import run_config
    from .plugins import registry
    from .sweep import Job, execute, parse_seeds, split_list

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
            keys = execute(point_jobs, args.output, process=(0, 1)).keys
            rows.append((point, summarize([r for r in map(store.get, keys) if r is not None])))
        best, why = choose(rows, args.min_gur)
        print(render(method, args.task, rows, best, why), flush=True)
        results.append({"method": method, "task": args.task, "rule": why, "chosen": rows[best][0],
                        "rows": [{"params": p, **s} for p, s in rows]})
    if args.json:
        print(json.dumps(results, indent=2))


def render(method: str, task: str, rows: list, best: int, why: str) -> str:
    """A Markdown table of the search with the chosen row marked."""
    head = "| setting | " + " | ".join(m.upper() if m != "seconds" else "s/deletion" for m in METRICS) + " | targets |"
    lines = [f"### {method} on {task} (dev split): chosen {rows[best][0] or 'defaults'} ({why})", "",
             head, "|" + "---|" * (len(METRICS) + 2)]
    for i, (point, s) in enumerate(rows):
        label = ", ".join(f"{k}={v}" for k, v in point.items()) or "defaults"
        cells = ["n/a" if s[m] is None else f"{s[m]:.3f}" if m in ("mia", "seconds") else f"{s[m]:.1f}" for m in METRICS]
        mark = " **←**" if i == best else ""
        lines.append(f"| {label}{mark} | " + " | ".join(cells) + f" | {s['targets']} |")
    return "\n".join(lines) + "\n"


def add_tune_parser(subparsers: Any) -> argparse.ArgumentParser:
    from .cli import add_run_options

    p = subparsers.add_parser("tune", help="choose a method's hyper-parameters on the dev split",
                              description=__doc__.split("\n\n")[0])
    add_run_options(p, split=False)
    p.add_argument("--method", required=True, help="method(s) to tune, comma-separated")
    p.add_argument("--task", default="rwku")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=v1,v2",
                   help="search these values instead of the method's declared space (repeatable)")
    p.add_argument("--seeds", default="0", help="seeds to average over (default 0)")
    p.add_argument("--min-gur", type=float, default=DEFAULT_MIN_GUR,
                   help=f"utility floor of the selection rule, in %% (default {DEFAULT_MIN_GUR:g})")
    p.add_argument("--json", action="store_true", help="also print the search as JSON")
    p.set_defaults(func=tune_command, output="r2f-tune")
    return p
