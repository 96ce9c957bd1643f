"""A pretrained LM's own knowledge of RWKU's people, forgotten: the real-LM table.

    python benchmarks/real_lm.py --model SmolLM2-135M-Instruct.Q4_1.gguf --data-dir ../shared/data/rwku

Nothing is taught: what is forgotten is what the model learned in pretraining, asked
through its chat template. Three stages, into resumable stores under ``--output`` (run the
command again to go on where it stopped; stages 2 and 3 run method by method, so a run
cut short leaves whole rows):

1. **scan** the first ``--scan`` targets (default all; ``r2f-bench scan``, cached): the held-out
   forget probes the untouched model knows (echo-answerable ones never count); the ranking
   is kept in ``<output>/scans/`` (:func:`ranking`), so a rerun on any machine reads it back
   and goes on with the targets the store's records were made on;
2. **calibrate** each method on the ``--calibrate`` best-known targets after the table's:
   its strength knob at the grid of :data:`GRIDS` (stated here, sized for a pretrained
   135M model, not the demo's defaults) and up to ``--extend`` values past its top, from
   the weakest up until the mean GUR falls below ``--min-gur``, without RAP (when even the
   weakest is below it, down past the grid's bottom the same way until one is not); per
   method, the strongest setting whose mean GUR stays at or above it (when the search ends
   on one side of the floor, the last tried, stated as not calibrated). With
   ``--name-control`` the utility is the lower of GUR and the name control, record by record
   (the calibration's runs are the same, read again from the store);
3. **table**: each method at its chosen setting on the ``--targets`` best-known targets,
   with RAP's attack at ``--rap-lr``, and after it each of ``--controls`` (the negative
   controls, rows of their own); then ``r2f-bench table`` prints it with n per cell,
   and each method minus FullGrad on the same targets (the paired table; a difference is
   named only where a sign-flip test over the targets, Holm-corrected, calls it).

4. **frontier** (``--frontier ENTRIES``, after the table): ``r2f-bench frontier`` on the table's
   targets (the entries' curves at ``--points`` log-spaced strengths and their shipped defaults,
   USR at matched GUR, paired against the first entry), into ``<output>/frontier``; a job the
   table already ran (the same key: the same work) is copied from ``<output>/table`` instead
   of run again (:func:`seeded`).

R2F needs a proxy for its decoder; ``--proxy`` defaults to the model itself (so the
decoder maps the model's own LoRA gradients to its full gradient: no smaller model of the
family is in reach here), which the table states.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

from r2f_bench.atomic import atomic_write_text  # noqa: E402
from r2f_bench.cli.main import main as cli, script  # noqa: E402
from r2f_bench.engine.config import CONTROLS, RunConfig, check_bounds  # noqa: E402
from r2f_bench.engine.evalcache import cached  # noqa: E402
from r2f_bench.engine.identity import identities  # noqa: E402
from r2f_bench.engine.plan import Plan  # noqa: E402
from r2f_bench.errors import UserError  # noqa: E402
from r2f_bench.engine.scan import scan  # noqa: E402
from r2f_bench.results.frontier_run import run_frontier, utility_of  # noqa: E402
from r2f_bench.results.frontier_settings import Settings, curves_of  # noqa: E402
from r2f_bench.results.frontier_tables import write_report  # noqa: E402
from r2f_bench.results.store import Store, job_key  # noqa: E402
from r2f_bench.results.sweep import Job, comma_list, execute, stored_keys  # noqa: E402
from r2f_bench.results.tune import check_min_gur  # noqa: E402
from r2f_bench.unlearner import continued  # noqa: E402

# method -> (strength knob, values from weak to strong, fixed parameters)
GRIDS: dict[str, tuple[str, list[float], dict[str, str]]] = {
    "r2f": ("step", [2e-4, 4e-4, 8e-4], {}),
    "fullgrad": ("step", [2e-4, 4e-4, 8e-4], {}),
    "lora_multi": ("step", [2e-4, 4e-4, 8e-4], {}),
    "grad_ascent": ("lr", [1e-5, 3e-5, 1e-4], {}),
    "npo": ("lr", [1e-5, 3e-5, 1e-4], {}),
    # RMU's 150 AdamW steps move each weight by at most about lr a step, whatever the loss's scale:
    # lr, not the steering coefficient, sets its strength (on SmolLM2 at the authors' lr 5e-5,
    # steer 1 to 370 all kept GUR at 98-102: docs/real_lm.md). The steer is RMU's shipped one.
    "rmu": ("lr", [5e-5, 1.5e-4, 5e-4], {}),
}


def ranking(config: RunConfig, out: Path, say: Callable[[str], None]) -> list[tuple[str, int]]:
    """Every scanned target, most known first, as (target, known probes): :func:`scan`'s, kept
    in ``out/scans/<key>.json``, keyed as a job of the store is (the scan's settings, the
    data's revision, the versions), so a rerun reads it back instead of scanning again and
    a store resumed on another machine keeps the targets its records were made on. An entry
    that does not parse or has another shape is set aside and the targets scanned again."""
    plan = Plan(config, lambda _: None)  # the data and the options, no model (the scan says what it reads)
    made_from = plan.config.to_dict()
    key = job_key({**made_from, **identities(made_from, uses_proxy=False)}, "scan", plan.data_revision(),
                  plan.versions())

    def shape(entry: object) -> str | None:
        ranked = entry.get("ranked") if isinstance(entry, dict) else None
        if not isinstance(ranked, list) or not all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
                                                   and type(r[1]) is int for r in ranked):
            return "no list of [target, known probes]"
        return None

    scanned: list[bool] = []  # set when the ranking was computed, not read back

    def compute() -> dict:
        _, found = scan(config, say)
        scanned.append(True)
        return {"made_from": made_from, "data_revision": plan.data_revision(), "versions": plan.versions(),
                "ranked": [[k.target, k.total] for k in found]}

    path = out / "scans" / f"{key}.json"
    ranked = cached(path, shape, compute, say)["ranked"]
    if not scanned:
        say(f"scan: read back from {path} (delete it to scan again)")
    return [(target, known) for target, known in ranked]


def mean_utility(records: list[dict], name_control: bool = False) -> float | None:
    """The records' mean GUR, or (``name_control``) mean of the lower of GUR and the name
    control, as ``frontier --name-control`` reads utility; records without it are left out."""
    values = [u for u in (utility_of(r, name_control) for r in records) if u is not None]
    return sum(values) / len(values) if values else None


def utility_label(name_control: bool) -> str:
    return "min(GUR, name ctrl)" if name_control else "GUR"


def choose(values: list[float], extend: int, floor: float,
           measure: Callable[[float], float | None]) -> tuple[list[tuple[float, float | None]], float, bool]:
    """Measured (value, mean GUR) pairs, the pick and whether the floor decided it.

    From the weakest setting up while GUR holds at or above ``floor``, on past the grid's top
    (``extend`` values at its last ratio); when the weakest is already below, down past the
    grid's bottom (``extend`` values at its first ratio) until one holds. Unreadable GUR ends
    the search (it says the untouched model's utility is too small, whatever the setting).
    The pick is the strongest setting that held (none: the weakest tried); the floor decided
    it when a stronger setting fell below: if not, the pick is where the search ran out."""
    def holds(gur: float | None) -> bool:
        return gur is not None and gur >= floor

    rows = [(values[0], measure(values[0]))]
    up = holds(rows[0][1])  # GUR falls as the knob grows: up while it holds, else down until it does
    ahead = ([*values[1:], *continued(values, extend)] if up
             else continued(values[::-1], extend) if rows[0][1] is not None else [])
    for value in ahead:
        rows.append((value, measure(value)))
        if holds(rows[-1][1]) != up:
            break
    fine = [v for v, g in rows if holds(g)]
    pick = max(fine) if fine else min(v for v, _ in rows)
    return rows, pick, any(v > pick and not holds(g) for v, g in rows) and bool(fine)


def unreached(last: float | None, floor: float, utility: str = "GUR") -> str:
    """Why a search that :func:`choose` says the floor did not decide ended where it did
    (``utility``: what was measured, :func:`utility_label`)."""
    if last is None:
        return f"{utility} unreadable: not calibrated"
    side = "at or above {:g} up to the strongest" if last >= floor else "below {:g} down to the weakest"
    return f"{utility} stayed {side.format(floor)} setting tried: not calibrated; raise --extend"


def calibrate(method: str, targets: list[str], base: dict, args: argparse.Namespace, say) -> dict[str, str]:
    """``method``'s parameters for the table: its knob chosen by :func:`choose` on ``targets``
    over :data:`GRIDS` and ``--extend`` values past it, with the fixed parameters."""
    knob, values, fixed = GRIDS[method]

    def measure(value: float) -> float | None:
        config = RunConfig(method=method, targets=targets, params={**fixed, knob: f"{value:g}"}, rap_steps=0,
                           output=str(Path(args.output) / "calibrate"), **base)
        keys = execute([Job(config.to_dict())], config.output, process=(0, 1), progress=say).keys
        return mean_utility([r for r in map(Store(config.output).get, keys) if r], args.name_control)

    rows, pick, reached = choose(values, args.extend, args.min_gur, measure)
    label = utility_label(args.name_control)
    say(f"calibrated {method}: {knob} " + ", ".join(f"{v:g} -> {label} {g if g is None else round(g, 1)}"
                                                   for v, g in rows)
        + f"; chosen {pick:g}" + ("" if reached else f" ({unreached(rows[-1][1], args.min_gur, label)})"))
    return {**fixed, knob: f"{pick:g}"}


def seeded(settings: Settings, table: Path) -> int:
    """Copy into the frontier's store every record of its first round's jobs that the table's
    store at ``table`` already holds (the same key: the same configuration, target, data and
    versions); how many. The frontier then finds them done instead of running them again."""
    jobs = [j for c in curves_of(settings, settings.methods) for j in
            [*c.shipped(), *(job for strength in c.strengths for job in c.jobs(strength))]]
    source, store = Store(table), Store(settings.output)
    copied = 0
    for key in (k for keys in stored_keys(jobs).values() for k in keys):
        if not store.done(key) and source.done(key):  # the file as written, not as a table re-reads it
            store.jobs.mkdir(parents=True, exist_ok=True)
            atomic_write_text(store.path(key), source.path(key).read_text(encoding="utf-8"))
            copied += 1
    return copied


def frontier(entries: list[str], table_targets: list[str], base: dict, args: argparse.Namespace, say) -> None:
    """The frontier stage: ``entries``' curves on the table's targets, seeded from its store."""
    run = {k: v for k, v in base.items() if k != "task"}
    settings = Settings(entries, base["task"], [0], {**run, "targets": table_targets, "rap_lr": args.rap_lr,
                                                     "output": str(Path(args.output) / "frontier")},
                        args.points, args.refine, None, False)
    say(f"frontier: {seeded(settings, Path(args.output) / 'table')} record(s) read from the table's store")
    files = write_report(run_frontier(settings, None, say), args.refine, base["task"], Path(settings.output) / "report")
    print(files["tables.md"])


def check_arguments(args: argparse.Namespace, methods: list[str], controls: list[str], base: dict) -> None:
    """One line for any option the run would otherwise refuse, or misread, after the scan."""
    unknown = [m for m in methods if m not in GRIDS]
    if unknown or not methods:
        raise UserError(f"--methods: {', '.join(unknown) or 'none given'}; choose from {', '.join(GRIDS)}.")
    if bad := [c for c in controls if c not in CONTROLS or c == "none"]:
        raise UserError(f"--controls: {', '.join(bad)}; choose from {', '.join(c for c in CONTROLS if c != 'none')}.")
    if "other_request" in controls and args.targets < 2:
        raise UserError("--controls other_request unlearns another table target's request; pass --targets 2 or more.")
    for option in ("targets", "calibrate", "scan"):
        if (value := getattr(args, option)) is not None and value < 1:
            raise UserError(f"--{option} must be at least 1, got {value}.")
    if args.extend < 0:
        raise UserError(f"--extend: {args.extend} is below 0 (0 keeps each method to its grid).")
    check_min_gur(args.min_gur)
    check_bounds(RunConfig(method=methods[0], rap_lr=args.rap_lr, **base))
    if args.frontier:  # every entry checked (method, knob, range) before anything runs
        entries = comma_list(args.frontier)
        try:
            curves_of(Settings(entries, base["task"], [0], {}, args.points, args.refine, None, False), entries)
        except UserError as exc:
            raise UserError(str(exc).replace("--methods", "--frontier")) from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded", help="the pretrained LM (GGUF file, folder or hub name; default: "
                                                      "the embedded demo model, a smoke test)")
    p.add_argument("--proxy", help="R2F's proxy (default: the model itself)")
    p.add_argument("--data-dir", help="RWKU in its official layout (default: the knowledge world, a smoke test)")
    p.add_argument("--scan", type=int, default=None,
                   help="targets to scan, from the first (default: every evaluation target; the scan is cached)")
    p.add_argument("--targets", type=int, default=4, help="best-known targets in the table (default 4)")
    p.add_argument("--calibrate", type=int, default=1, help="targets the strengths are chosen on (default 1)")
    p.add_argument("--methods", default=",".join(GRIDS), help="comma-separated methods of GRIDS")
    p.add_argument("--min-gur", type=float, default=90.0, help="the calibration's utility floor (default 90)")
    p.add_argument("--name-control", action="store_true",
                   help="calibrate on the lower of GUR and the name control (other people's facts asked with the "
                        "target's name), as frontier --name-control reads utility: a method that breaks every "
                        "sentence naming the target is held at the floor by it (default: GUR alone)")
    p.add_argument("--extend", type=int, default=3,
                   help="settings tried past a grid's top while GUR stays above the floor, or past its bottom while "
                        "it stays below, at the grid's ratio (default 3)")
    p.add_argument("--controls", default="",
                   help="negative controls run after each method's row, at its chosen setting, comma-separated: "
                        "other_request, random_step (docs/tasks.md#negative-controls; default: none)")
    p.add_argument("--rap-lr", type=float, default=1e-5, help="RAP's attack learning rate (default 1e-5)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eval-batch-size", type=int, default=32,
                   help="generation batch (default 32; 128 for a large vocabulary such as Gemma's 262k on a CPU)")
    p.add_argument("--frontier", default="",
                   help="after the table, a frontier of these comma-separated method entries on its targets, e.g. "
                        "fullgrad@step=1e-4:4e-4,r2f@step=1e-4:4e-4 (r2f-bench frontier's --methods; paired against "
                        "the first; default: none)")
    p.add_argument("--points", type=int, default=3, help="the frontier's strengths per entry (default 3)")
    p.add_argument("--refine", type=int, default=0,
                   help="the frontier's rounds of strengths added near GUR 95 and 90 (default 0)")
    p.add_argument("--output", default="r2f-real-lm",
                   help="stores: <output>/calibrate, <output>/table, <output>/frontier")
    args = p.parse_args(argv)
    methods, controls = comma_list(args.methods), comma_list(args.controls)
    base = {"task": "rwku", "model": args.model, "proxy": args.proxy or args.model, "data_dir": args.data_dir,
            "threads": args.threads, "eval_batch_size": args.eval_batch_size}
    check_arguments(args, methods, controls, base)  # all before the scan loads the model
    say = lambda m: print(m, file=sys.stderr, flush=True)

    found = ranking(RunConfig(method="", limit=args.scan, output=args.output,
                              **{k: v for k, v in base.items() if k != "proxy"}), Path(args.output), say)
    ranked = [target for target, known in found if known > 0]
    table_targets = ranked[:args.targets]
    calibration = ranked[args.targets:args.targets + args.calibrate]
    if len(table_targets) < args.targets or len(calibration) < args.calibrate:
        say(f"only {len(ranked)} of {len(found)} scanned targets have a known probe; scan more (--scan)")
        return 1
    say(f"table targets: {', '.join(f'{target} ({known})' for target, known in found[:args.targets])}; "
        f"calibration: {', '.join(calibration)}")

    chosen: dict[str, dict[str, str]] = {}
    out = str(Path(args.output) / "table")
    for method in methods:  # each method calibrated, then tabulated: a cut-short run keeps whole rows
        chosen[method] = calibrate(method, calibration, base, args, say)
        for control in ["none", *controls]:  # the row, then what a deletion that knows nothing of the target takes
            config = RunConfig(method=method, targets=table_targets, params=chosen[method], rap_lr=args.rap_lr,
                               control=control, output=out, **base)
            execute([Job(config.to_dict())], out, process=(0, 1), progress=say)
    if "r2f" in chosen:
        print(f"R2F's proxy: {base['proxy']}" + (" (the model itself)" if base["proxy"] == args.model else ""))
    settings = "; ".join(f"{m} {', '.join(f'{k}={v}' for k, v in p.items())}" for m, p in chosen.items())
    print(f"chosen settings (calibrated on {utility_label(args.name_control)} >= {args.min_gur:g}): {settings}")
    status = cli(["table", "--output", out])
    if args.frontier and status == 0:
        frontier(comma_list(args.frontier), table_targets, base, args, say)
    return status


if __name__ == "__main__":
    sys.exit(script(main))
