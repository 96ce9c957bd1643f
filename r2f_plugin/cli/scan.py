"""``r2f-bench scan``: how many of each target's held-out forget probes the untouched model
knows (:mod:`r2f_bench.engine.scan`), and the ``--targets`` it knows best."""

from __future__ import annotations

import argparse
from typing import Any

from ..engine.metrics import ANSWERED_NOTE
from ..engine.scan import Known, scan
from .options import add_json_option, add_run_options, add_task_option, json_command, run_config, say


def selector(known: Known) -> str:
    """How ``--targets`` names a target: its id, or where the id holds a comma (RWKU's
    ``10_Prince_Harry,_Duke_of_Sussex``) the number before its first ``_``, which selects it too."""
    return known.target.split("_", 1)[0] if "," in known.target else known.target


def render(found: list[Known], model: str, min_known: int, top: int) -> str:
    """The scan's table, most known first, and the line to run the best-known targets."""
    sets = list(dict.fromkeys(s for k in found for s in k.known))
    head = ["target", *sets, "known", "echo"]
    rows = [[k.target, *(f"{k.known.get(s, 0)}/{k.probes.get(s, 0)}" for s in sets), str(k.total), str(k.echo)]
            for k in found]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    enough = [k for k in found if k.total >= max(min_known, 1)]
    chosen = enough[:top]
    out = [f"Held-out forget probes the untouched model {model} knows, per target (known/all; echo: probes whose own "
           f"prompt holds the answer, never counted). {ANSWERED_NOTE}", "", line(head), *map(line, rows), ""]
    out.append(f"{len(enough)} of {len(found)} targets have at least {max(min_known, 1)} known probe"
               f"{'s' * (max(min_known, 1) != 1)}.")
    if chosen:
        out.append(f"Run the {len(chosen)} it knows best: --targets {','.join(map(selector, chosen))}"
                   f" (or keep your selection and pass --min-known {max(min_known, 1)})")
    return "\n".join(out)


def scan_command(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Print what the untouched model knows of each target; the same as JSON rows."""
    config = run_config(args, "", args.task)
    plan, found = scan(config, say(args))
    if not args.json:
        print(render(found, config.model, config.min_known, args.top))
    return [{"target": k.target, "name": k.name, "known": k.known, "probes": k.probes, "echo": k.echo,
             "total": k.total} for k in found]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("scan", help="count what the untouched model knows of each target, to choose targets",
                       description="Scores the untouched model on every selected target's held-out forget probes "
                                   "(cached: a run reads the answers back) and prints, most known first, how many "
                                   "it answers; USR on a target rests on these. Then run on the targets it knows "
                                   "(--targets) or let runs skip the rest (--min-known).")
    add_run_options(p, evaluation=False, limit_help="targets to scan, from the first (default 3); all of RWKU's: --limit 200")
    add_task_option(p, "whose targets are scanned")
    p.add_argument("--top", type=int, default=12, help="targets in the suggested --targets line (default 12)")
    add_json_option(p, "each target's counts")
    p.set_defaults(func=json_command(scan_command))
    return p
