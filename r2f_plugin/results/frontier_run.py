"""Measuring the frontiers: plan each method entry's curve over its strength knob, run its
strengths and shipped defaults into the store (here or as a job array a round), add
strengths near the GUR floors round after round, and read every curve's scores on the
units every method is read on into its :class:`~r2f_bench.results.frontier.Frontier`
(the curve mathematics is :mod:`r2f_bench.results.frontier`; the tables and JSON,
:mod:`r2f_bench.results.frontier_tables`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..engine.distributed import process_state
from ..errors import UserError
from ..plugins import registry
from .cells import invalid
from .frontier import GUR_LEVELS, Frontier, Score, Unit, frontier, next_strength
from .frontier_settings import Curve, Settings, baseline_of, checked_after, curves_of
from .job import Job
from .launch import Submitit
from .store import Store
from .sweep import Progress, SweepReport, execute, expand, stored_keys
from .tables import taught_strings


@dataclass
class Readout:
    """What the store holds for the curves: scores on the units every method is read on."""

    scores: dict[str, dict[float | None, dict[Unit, Score | None]]]  # entry -> strength (None: shipped) -> unit
    units: list[Unit]
    lost: list[Unit]  # no record from any method
    unscorable: list[Unit]  # nothing known before unlearning, or utility n/a: no USR or GUR to read
    records: list[dict]  # the scored records (provenance)
    invalid: list[str]  # "key: why" of records that failed validation (never read)
    shipped: dict[str, list[dict]] = field(default_factory=dict)  # entry -> its scored records at the shipped defaults


@dataclass
class FrontierResults:
    """Every curve's frontier, the entry the others are paired against, what the store
    held for them and the jobs that failed."""

    results: list[Frontier]
    baseline: str
    readout: Readout
    failed: list[str]
    min_known: int = 0  # --min-known: a target known by fewer held-out probes stored nothing (among the lost)
    after: str | None = None  # --after: USR read after this attack
    name_control: bool = False  # --name-control: utility is the lower of GUR and the name control

    @property
    def base(self) -> Frontier:
        """The baseline's frontier."""
        return next(f for f in self.results if f.method == self.baseline)


class Runs:
    """Executes jobs into the store (here, or through ``launch``: a job array per round),
    remembering every job's keys and every failed job. Under ``accelerate launch`` each
    process runs its share of a round, then waits for the others and reads every job's
    keys, so that all of them plan the next round from the same store."""

    def __init__(self, settings: Settings, launch: Submitit | None, progress: Progress) -> None:
        self.settings, self.launch, self.progress = settings, launch, progress
        self.keys: dict[str, list[str]] = {}
        self.failed: list[str] = []
        self.share: SweepReport | None = None  # under accelerate launch: this process's share of the first round

    def __call__(self, jobs: list[Job]) -> SweepReport:
        report = self.launch(jobs) if self.launch is not None else \
            execute(jobs, self.settings.output, keep_going=self.settings.keep_going, progress=self.progress,
                    deadline=self.settings.deadline)
        if self.launch is None and (state := process_state()).num_processes > 1:  # every process, even one
            self.share = self.share or report  # given no job of this round, waits for the others' shares
            state.wait_for_everyone()
            report.job_keys = stored_keys(jobs)
        if report.failed and not self.settings.keep_going:  # (only an array gets here: its tasks run independently)
            raise UserError(f"{len(report.failed)} job(s) failed ({'; '.join(report.failed)}); fix and re-run the "
                            f"same command to resume, or pass --keep-going to count their targets as failures.")
        self.keys.update(report.job_keys)
        self.failed += report.failed
        return report


def read(store: Store, keys: dict[str, list[str]], curves: list[Curve], after: str | None = None,
         name_control: bool = False) -> Readout:
    """Every curve's scores (``after``: USR after that attack; ``name_control``: utility the
    lower of GUR and the name control). A diverged record scores ``None`` (a failure); a unit
    that some record cannot score (no USR or utility) is dropped for every method."""
    scores: dict[str, dict[float | None, dict[Unit, Score | None]]] = {}
    records, seen, unscorable, rejected, shipped = [], set(), set(), {}, {}
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
                elif after is not None and after not in (r.get("attacks") or {}):  # its unit is dropped for all
                    rejected[str(r.get("key", "?"))[:12]] = f"holds no USR after {after} (run before --attacks held it)"
                    unscorable.add(unit)
                elif (usr := r.get("usr") if after is None else r["attacks"][after].get("usr")) is None \
                        or (utility := utility_of(r, name_control)) is None:
                    unscorable.add(unit)
                else:
                    records.append(r)
                    row[unit] = (float(usr), utility)
                    if point is None:
                        shipped.setdefault(c.entry, []).append(r)
    planned = {(t, s) for t, _ in seen for s in curves[0].seeds}
    return Readout(scores, sorted(seen - unscorable), sorted(planned - seen), sorted(unscorable), records,
                   [f"{key}: {why}" for key, why in rejected.items()], shipped)


def utility_of(record: dict, name_control: bool) -> float | None:
    """A record's utility: its GUR, or (``name_control``) the lower of GUR and the name
    control, so that breaking sentences that merely name the target costs utility; None
    when either is missing."""
    gur, named = record.get("gur"), record.get("name_control")
    if gur is None or (name_control and named is None):
        return None
    return min(float(gur), float(named)) if name_control else float(gur)


def frontiers(curves: list[Curve], readout: Readout) -> list[Frontier]:
    """Every curve's frontier, all on the readout's units."""
    if not readout.units:
        raise UserError("no (target, seed) could be scored (every record diverged, failed, or knew nothing before "
                        "unlearning); check the records in the store and the task's data.")
    return [frontier(c.entry, c.param, {s: readout.scores[c.entry][s] for s in c.strengths}, readout.units,
                     readout.scores[c.entry][None], c.shipped()[0].fields["params"] or {"(defaults)": ""})
            for c in curves]


def first_round(curves: list[Curve]) -> list[Job]:
    """The first round's jobs, most informative first, so that a --budget cut keeps them: every
    method's shipped defaults, then the strengths from the weakest up (near the GUR floors
    first; the strongest mostly measure a destroyed model), one of each method in turn."""
    shipped = [j for c in curves for j in c.shipped()]
    by_rank = [j for rank in range(max(len(c.strengths) for c in curves)) for c in curves
               if rank < len(c.strengths) for j in c.jobs(sorted(c.strengths)[rank])]
    return shipped + by_rank


def without_cut(curves: list[Curve], cut: list[str]) -> None:
    """Drop from each curve the strengths a --budget left unrun (a missing record would read as a
    failure); one line if it left out a method's shipped defaults, which the tables need."""
    cut_labels = set(cut)
    if not cut_labels:
        return
    if any(j.label in cut_labels for c in curves for j in c.shipped()):
        raise UserError("--budget leaves no time for every method's shipped defaults, which the frontier reads; "
                        "give a larger --budget or fewer --methods (what ran is stored and is read again).")
    for c in curves:
        c.strengths = [s for s in c.strengths if not any(j.label in cut_labels for j in c.jobs(s))]


def refine(curves: list[Curve], results: list[Frontier]) -> list[Job]:
    """One round of refinement: for each curve and floor with no measured point near it, the
    strength between the two that bracket it (added to the curve); their jobs."""
    jobs = []
    for c, f in zip(curves, results):
        new = sorted({s for g in GUR_LEVELS if (s := next_strength(f.curve(), g)) is not None} - set(c.strengths))
        c.strengths = sorted(c.strengths + new)
        jobs += [j for s in new for j in c.jobs(s)]
    return jobs


def run_frontier(settings: Settings, launch: Submitit | None, progress: Progress) -> FrontierResults | SweepReport:
    """Run every curve, refine it at the GUR floors and read the frontiers, warning through
    ``progress`` of failed jobs and skipped records. Under ``accelerate launch`` every
    process runs its share of each round and the main one reads the frontiers; the others
    return their share of the first round."""
    entries = settings.methods
    if settings.after is not None:
        settings = dataclasses.replace(settings, after=checked_after(settings))
    if settings.name_control and registry().task(settings.task).name_control_set is None:
        raise UserError(f"--name-control: the task {settings.task!r} asks no name-control probes; drop the option "
                        f"or choose a task that defines name_control_set (e.g. rwku).")
    curves = curves_of(settings, list(dict.fromkeys(e for x in entries
                                               for e in (expand(["all"], "method") if x == "all" else [x]))))
    baseline = baseline_of(settings.baseline, curves)
    if settings.deadline is not None and (launch is not None or process_state().num_processes > 1):
        raise UserError("--budget cuts the plan in one process; drop it under accelerate launch or a launcher "
                        "(size the job array with --points and --refine instead).")
    runs = Runs(settings, launch, progress)
    without_cut(curves, runs(first_round(curves)).cut)
    store = Store(settings.output)
    for _ in range(settings.refine):
        jobs = refine(curves, frontiers(curves, read(store, runs.keys, curves, settings.after, settings.name_control)))
        if not jobs:
            break
        without_cut(curves, runs(jobs).cut)
    if runs.share is not None and not process_state().is_main_process:
        return runs.share
    readout = read(store, runs.keys, curves, settings.after, settings.name_control)
    results = frontiers(curves, readout)
    for line in runs.failed:
        progress(f"warning: job failed, its targets count as failures: {line}")
    for line in readout.invalid:
        progress(f"warning: skipped record {line}")
    if any(map(taught_strings, readout.records)):
        progress("warning: the embedded model was taught these probes verbatim, so it fails the testbed's "
                 "generalisation check (A1): USR here is taught-string recall; rank on the knowledge world or a real model")
    return FrontierResults(results, baseline, readout, runs.failed, settings.run.get("min_known") or 0, settings.after,
                    settings.name_control)
