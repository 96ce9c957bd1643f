"""``r2f-bench frontier``: each method's forget–utility curve over its strength knob, refined
at the GUR floors, the summaries that compare methods at matched utility, and paired
differences against a baseline (see :mod:`r2f_bench.results.frontier`)."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..results.aggregate import Stat, invalid
from ..atomic import atomic_path, write_fully
from ..errors import UserError
from ..results.frontier import (AREA_FROM, FAILURE_RULE, GUR_LEVELS, KEYS, MEASURED, OPEN, TOLERANCE, Frontier, Score, Unit,
                        excludes_zero, frontier, next_strength, paired, tiers)
from ..results.launch import add_launcher_options, launcher
from ..results.plots import plot_frontier
from ..plugins import registry
from ..results.render import FORMATS, render, stat_json
from ..results.store import Store
from ..results.sweep import Job, SweepReport, execute, expand, parse_seeds, split_list
from ..results.tables import Column, Provenance, Table, taught_strings
from ..unlearner import method_variant
from .options import add_json_option, add_run_options, json_stdout, print_json, run_config, say

DEFAULT_POINTS = 8
DEFAULT_REFINE = 5
TITLES = {**{f"usr_at_gur{g:g}": f"USR @ GUR≥{g:g}" for g in GUR_LEVELS}, "auc": "Area"}


@dataclass
class Curve:
    """One method entry's runs: its knob and the strengths measured so far."""

    entry: str  # name or name@param=value@...
    param: str
    base: dict[str, Any]  # RunConfig fields, without the seed
    seeds: list[int]
    strengths: list[float]

    def jobs(self, strength: float) -> list[Job]:
        params = {**self.base["params"], self.param: str(strength)}
        return [Job({**self.base, "params": params, "seed": seed}) for seed in self.seeds]

    def shipped(self) -> list[Job]:
        """The jobs at the entry's shipped defaults (with its own parameters)."""
        return [Job({**self.base, "seed": seed}) for seed in self.seeds]


@dataclass
class Readout:
    """What the store holds for the curves: scores on the units every method is read on."""

    scores: dict[str, dict[float | None, dict[Unit, Score | None]]]  # entry -> strength (None: shipped) -> unit
    units: list[Unit]
    lost: list[Unit]  # no record from any method
    unscorable: list[Unit]  # nothing known before unlearning, or utility n/a: no USR or GUR to read
    records: list[dict]  # the scored records (provenance)
    invalid: list[str]  # "key: why" of records that failed validation (never read)


def plan(args: argparse.Namespace, entries: list[str]) -> list[Curve]:
    """Per method entry (``name`` or ``name@param=value@...``): its knob and log-spaced
    strengths; every entry checked before anything runs."""
    if args.points < 2:
        raise UserError(f"--points must be at least 2, got {args.points}.")
    if args.refine < 0:
        raise UserError(f"--refine must be 0 or more rounds, got {args.refine}.")
    curves = []
    for entry in entries:
        method, overrides = method_variant(entry)
        cls = registry().method(method)
        if cls.strength is None:
            raise UserError(f"method {method!r} declares no strength knob, so it has no frontier; give its class "
                            f"`strength = Strength(param, low, high)` (r2f_bench.unlearner) or leave it out of --methods.")
        base = run_config(args, method, args.task).to_dict()
        base["params"] = {**base["params"], **overrides}
        curve = Curve(entry, cls.strength.param, base, parse_seeds(args.seeds), cls.strength.points(args.points))
        for strength in curve.strengths:
            cls.parse_params(curve.jobs(strength)[0].fields["params"])  # a bad name or value fails here
        cls.parse_params(base["params"])
        curves.append(curve)
    return curves


def baseline_of(args: argparse.Namespace, curves: list[Curve]) -> str:
    """The entry every other method is paired against: ``--baseline``, else the first."""
    entries = [c.entry for c in curves]
    if args.baseline is None:
        return entries[0]
    if args.baseline not in entries:
        raise UserError(f"--baseline {args.baseline!r} is not among --methods ({', '.join(entries)}); name one of them.")
    return args.baseline


class Runs:
    """Executes jobs into the store (here, or through ``launch``: a job array per round),
    remembering every job's keys and every failed job."""

    def __init__(self, args: argparse.Namespace, launch: Any = None) -> None:
        self.args, self.launch = args, launch
        self.keys: dict[str, list[str]] = {}
        self.failed: list[str] = []

    def __call__(self, jobs: list[Job]) -> SweepReport:
        report = self.launch(jobs) if self.launch is not None else \
            execute(jobs, self.args.output, keep_going=self.args.keep_going, progress=say(self.args))
        if report.failed and not self.args.keep_going:  # (only an array gets here: its tasks run independently)
            raise UserError(f"{len(report.failed)} job(s) failed ({'; '.join(report.failed)}); fix and re-run the "
                            f"same command to resume, or pass --keep-going to count their targets as failures.")
        self.keys.update(report.job_keys)
        self.failed += report.failed
        return report


def read(store: Store, keys: dict[str, list[str]], curves: list[Curve]) -> Readout:
    """Every curve's scores. A diverged record scores ``None`` (a failure); a unit that
    some record cannot score (no USR or GUR) is dropped for every method."""
    scores: dict[str, dict[float | None, dict[Unit, Score | None]]] = {}
    records, seen, unscorable, rejected = [], set(), set(), {}
    for c in curves:
        for point, jobs in [(s, c.jobs(s)) for s in c.strengths] + [(None, c.shipped())]:
            row = scores.setdefault(c.entry, {}).setdefault(point, {})
            for r in (store.get(key) for job in jobs for key in keys.get(job.label, [])):
                if r is None:
                    continue
                if why := invalid(r):
                    rejected[str(r.get("key", "?"))[:12]] = why
                    continue
                unit = (str(r["target"]), int(r["seed"]))
                seen.add(unit)
                if r.get("status", "ok") != "ok":
                    row[unit] = None
                elif r.get("usr") is None or r.get("gur") is None:
                    unscorable.add(unit)
                else:
                    records.append(r)
                    row[unit] = (float(r["usr"]), float(r["gur"]))
    planned = {(t, s) for t, _ in seen for s in curves[0].seeds}
    return Readout(scores, sorted(seen - unscorable), sorted(planned - seen), sorted(unscorable), records,
                   [f"{key}: {why}" for key, why in rejected.items()])


def frontiers(curves: list[Curve], readout: Readout) -> list[Frontier]:
    """Every curve's frontier, all on the readout's units."""
    if not readout.units:
        raise UserError("no (target, seed) could be scored (every record diverged, failed, or knew nothing before "
                        "unlearning); check the records in the store and the task's data.")
    return [frontier(c.entry, c.param, {s: readout.scores[c.entry][s] for s in c.strengths}, readout.units,
                     readout.scores[c.entry][None], c.shipped()[0].fields["params"] or {"(defaults)": ""})
            for c in curves]


def refine(curves: list[Curve], results: list[Frontier]) -> list[Job]:
    """One round of refinement: for each curve and floor with no measured point near it, the
    strength between the two that bracket it (added to the curve); their jobs."""
    jobs = []
    for c, f in zip(curves, results):
        new = sorted({s for g in GUR_LEVELS if (s := next_strength(f.curve(), g)) is not None} - set(c.strengths))
        c.strengths = sorted(c.strengths + new)
        jobs += [j for s in new for j in c.jobs(s)]
    return jobs


def frontier_command(args: argparse.Namespace) -> None:
    with json_stdout(args) as stdout:
        summary = run_frontier(args)
    if args.json and summary is not None:
        print_json(summary, stdout)


def run_frontier(args: argparse.Namespace) -> dict[str, Any] | None:
    """Run, refine and tabulate the frontier; its JSON (``None``: this process ran only its share)."""
    launch = launcher(args, say(args))  # a missing submitit or a bad combination fails first
    entries = split_list(args.methods)
    curves = plan(args, expand(entries, "method") if entries == ["all"] else entries)
    baseline = baseline_of(args, curves)
    runs = Runs(args, launch)
    report = runs([j for c in curves for s in c.strengths for j in c.jobs(s)] + [j for c in curves for j in c.shipped()])
    if report.assigned < report.planned:
        print(f"this process ran its share ({report.assigned} of {report.planned} jobs); run the same command "
              f"in one process to refine and tabulate the frontier (finished jobs are skipped)")
        return None
    store = Store(args.output)
    for _ in range(args.refine):
        jobs = refine(curves, frontiers(curves, read(store, runs.keys, curves)))
        if not jobs:
            break
        runs(jobs)
    readout = read(store, runs.keys, curves)
    results = frontiers(curves, readout)
    for line in runs.failed:
        say(args)(f"warning: job failed, its targets count as failures: {line}")
    for line in readout.invalid:
        say(args)(f"warning: skipped record {line}")
    if any(map(taught_strings, readout.records)):
        say(args)("warning: the embedded model was taught these probes verbatim, so it fails the testbed's "
                  "generalisation check (A1): USR here is taught-string recall; rank on the knowledge world or a real model")
    tables = [summary_table(results, readout, runs.failed, args.refine), pairs_table(results, baseline, readout),
              ranking_table(results, readout)]
    out_dir = Path(args.out_dir) if args.out_dir else store.root / "frontier"
    files = {name: text for fmt in FORMATS for name, text in render(tables, fmt).items()}
    with ExitStack() as stack:
        temps = {name: stack.enter_context(atomic_path(out_dir / name)) for name in files}
        for name, text in files.items():
            write_fully(temps[name], text.encode("utf-8"))
    plot_frontier(results, args.task, out_dir / "frontier.png")
    print(files["tables.md"])
    print(f"wrote {out_dir}/frontier.png and the tables as {', '.join(sorted(files))}")
    return as_json(results, baseline, readout, runs.failed)


# -- tables -------------------------------------------------------------------
def units_note(readout: Readout) -> str:
    targets, seeds = {t for t, _ in readout.units}, {s for _, s in readout.units}
    note = (f"Every method on the same {len(readout.units)} (target, seed) units ({len(targets)} targets × "
            f"{len(seeds)} seeds); intervals: 95% bootstrap resampling whole targets (all their seeds together), "
            f"n = units.")
    if readout.lost:
        note += f" Lost (no record from any method): {', '.join(f'{t} seed {s}' for t, s in readout.lost)}."
    if readout.unscorable:
        note += (f" Dropped for every method (nothing known before unlearning, or utility n/a): "
                 f"{', '.join(f'{t} seed {s}' for t, s in readout.unscorable)}.")
    return note


def summary_table(results: list[Frontier], readout: Readout, failed: list[str], rounds: int) -> Table:
    columns = [Column(k, TITLES[k], "whole frontier" if k == "auc" else "matched utility", True) for k in KEYS]
    columns += [Column("tuned_usr", "USR", "shipped defaults", None), Column("tuned_gur", "GUR", "shipped defaults", None)]
    rows = [(f.method, [f.summaries[k] for k in KEYS] + [f.tuned["usr"], f.tuned["gur"]]) for f in results]
    notes = [f"USR @ GUR≥g (%): the highest USR a method reaches along its measured curve (the untouched model, "
             f"log-spaced strengths of its knob and strengths added between the two that bracket each floor until "
             f"one lands within {TOLERANCE:g} GUR of it, at most {rounds} rounds; linear between neighbours) while "
             f"GUR stays at least g; 0 if no strength keeps GUR ≥ g. Area (%): its mean over g = {AREA_FROM}…100.",
             units_note(readout),
             f"Failures: {FAILURE_RULE}; counted: "
             + ("; ".join(f"{f.method} {f.failures} of {(len(f.points) - 1) * len(f.units)} points" for f in results
                          if f.failures) or "none") + ".",
             "Shipped defaults: each method's defaults as shipped (chosen on the dev split, docs/tuning.md), on the same units."]
    if failed:
        notes.append(f"{len(failed)} job(s) failed; their targets count as failures: {'; '.join(failed)}.")
    notes += [f"Open at GUR≥{g:g} (even the strongest setting kept GUR ≥ {g:g}; a stronger one might reach more): "
              f"{', '.join(ms)}." for g in GUR_LEVELS if (ms := [f.method for f in results if f.open_at[g]])]
    interpolated = [f"{f.method} at GUR≥{g:g} ({f.refined(g)}; nearest measured GUR {nearest(f, g):.1f})"
                    for f in results for g in GUR_LEVELS if f.refined(g) not in (MEASURED, OPEN)]
    if interpolated:
        notes.append(f"No measured point within {TOLERANCE:g} GUR of the floor (the cell interpolates): "
                     f"{'; '.join(interpolated)}.")
    if opened := [f.method for f in results if f.area_open]:
        notes.append(f"Area open (even the strongest setting kept GUR ≥ {AREA_FROM}; the area stops there): "
                     f"{', '.join(opened)}.")
    notes.append(f"Area over GUR {AREA_FROM}–100; each curve's measured mean GUR range: "
                 + "; ".join(f"{f.method} {f.gur_range[0]:.1f}–{f.gur_range[1]:.1f}" for f in results) + ".")
    notes.append("Knobs: " + "; ".join(f"{f.method}: {f.param} 0 (untouched), {f.points[1]['strength']:g}…"
                                        f"{f.points[-1]['strength']:g} ({len(f.points) - 1} strengths)"
                                        for f in results) + ".")
    return Table("frontier", "Forget–utility frontier: USR at matched GUR", " ".join(notes), columns, rows,
                 Provenance.of(readout.records))


def nearest(f: Frontier, floor: float) -> float:
    """The measured mean GUR closest to ``floor``."""
    return min((p["gur"].mean for p in f.points), key=lambda g: abs(g - floor))


def pairs_table(results: list[Frontier], baseline: str, readout: Readout) -> Table:
    base = next(f for f in results if f.method == baseline)
    rows = []
    for f in results:
        if f is base:
            continue
        diff = paired(f, base)
        apart = [TITLES[k] for k in KEYS if excludes_zero(diff[k])]
        rows.append((f"{f.method} − {baseline}" + (f" (≠0: {', '.join(apart)})" if apart else ""),
                     [diff[k] for k in KEYS]))
    note = (f"Paired differences against {baseline}: each method's summary minus {baseline}'s, both read on the same "
            f"units and drawn on the same target resamples; 95% interval. (≠0: …) names the summaries whose interval "
            f"excludes 0.")
    return Table("frontier-pairs", f"Paired differences against {baseline}", note,
                 [Column(f"diff_{k}", f"Δ {TITLES[k]}") for k in KEYS], rows,
                 Provenance.of(readout.records), row_header="Method − baseline")


def ranking_table(results: list[Frontier], readout: Readout) -> Table:
    n, targets, seeds = len(readout.units), len({t for t, _ in readout.units}), len({s for _, s in readout.units})
    tier = {k: {m: i + 1 for i, group in enumerate(tiers(results, k)) for m in group} for k in KEYS}
    order = sorted(results, key=lambda f: [tier[k][f.method] for k in KEYS])
    rows = [(f.method, [Stat(float(tier[k][f.method]), None, None, n, targets, seeds) for k in KEYS]) for f in order]
    note = ("Tiers (1 is best) per summary: in order of the estimate, tier 1 is the best method and every method "
            "whose paired 95% interval against it includes 0; the next tier starts at the best method left. Methods "
            "in one tier cannot be told apart from its first.")
    return Table("frontier-ranking", "Ranking: methods that cannot be told apart share a tier", note,
                 [Column(f"tier_{k}", TITLES[k], "tier", False, digits=0) for k in KEYS], rows,
                 Provenance.of(readout.records))


# -- JSON ---------------------------------------------------------------------
def frontier_json(f: Frontier) -> dict[str, Any]:
    return {"method": f.method, "param": f.param,
            "points": [{"strength": p["strength"], "usr": stat_json(p["usr"]), "gur": stat_json(p["gur"]),
                        "failures": p["failures"]} for p in f.points],
            **{k: stat_json(f.summaries[k]) for k in KEYS},
            **{f"open_at_gur{g:g}": f.open_at[g] for g in GUR_LEVELS},
            **{f"refined_at_gur{g:g}": f.refined(g) for g in GUR_LEVELS},
            "area_open": f.area_open, "area_gur_range": list(f.gur_range), "failures": f.failures,
            "tuned": {"params": f.tuned["params"], "usr": stat_json(f.tuned["usr"]), "gur": stat_json(f.tuned["gur"]),
                      "failures": f.tuned["failures"]}}


def as_json(results: Sequence[Frontier], baseline: str, readout: Readout, failed: list[str]) -> dict[str, Any]:
    """Every method's curve and summaries, the paired differences against ``baseline`` and the tiers."""
    base = next(f for f in results if f.method == baseline)
    pairs = [{"method": f.method, "baseline": baseline,
              **{k: {**stat_json(d), "excludes_zero": excludes_zero(d)} for k, d in paired(f, base).items()}}
             for f in results if f is not base]
    return {"baseline": baseline, "failure_rule": FAILURE_RULE, "failed_jobs": failed,
            "units": {"n": len(readout.units), "targets": sorted({t for t, _ in readout.units}),
                      "seeds": sorted({s for _, s in readout.units}), "lost": readout.lost,
                      "unscorable": readout.unscorable},
            "methods": [frontier_json(f) for f in results], "pairs": pairs,
            "ranking": {k: tiers(results, k) for k in KEYS}}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("frontier", help="each method's USR-GUR curve over its strength knob; USR at matched GUR",
                              description="Run every method at log-spaced strengths of its declared knob (and once at "
                                          "its shipped defaults) on the same targets, seeds, views and retain data, "
                                          "into a resumable store; add strengths near GUR 95 and 90 until a measured "
                                          "point lies within 2 GUR of each; report USR at GUR >= 95 and >= 90 and "
                                          "the area under the frontier with target-level bootstrap CIs, paired "
                                          "differences against a baseline and tiers, frontier.png and the tables in "
                                          "Markdown, LaTeX, CSV and HTML.")
    add_run_options(p, split=False)
    p.add_argument("--methods", default="all", help="comma-separated methods, or `all` (default); name@param=value "
                                                    "sets parameters of one entry, e.g. r2f@decoder=learned")
    p.add_argument("--task", default="rwku", help="benchmark (default rwku)")
    p.add_argument("--seeds", default="0", help="seeds, e.g. 0,1,2 or 0-4 (default 0)")
    p.add_argument("--points", type=int, default=DEFAULT_POINTS,
                   help=f"strengths per method, log-spaced over its declared range (default {DEFAULT_POINTS})")
    p.add_argument("--refine", type=int, default=DEFAULT_REFINE,
                   help=f"rounds of strengths added near each GUR floor (default {DEFAULT_REFINE}; 0: none)")
    p.add_argument("--baseline", default=None, help="the --methods entry others are paired against (default: the first)")
    p.add_argument("--out-dir", default=None, help="where to write frontier.png and the tables (default <output>/frontier)")
    p.add_argument("--keep-going", action="store_true",
                   help="run the remaining jobs when one fails (its targets count as failures)")
    add_json_option(p, "every method's points, summaries, paired differences and tiers")
    add_launcher_options(p, no_wait=False)  # each round's jobs as one array; the rounds read the store in between
    p.set_defaults(func=frontier_command, output="r2f-frontier")
