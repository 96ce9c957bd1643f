"""What the rest of a many-job command will cost, from the first job that ran (measured,
then multiplied out before the rest runs), and cutting a plan to a time budget.

A later job is expected to cost what the first one did, less what the first one cached
for it: the untouched model's evaluation (``phases["untouched"]``) is read back by every
later job on the same model and data. RAP's control is cached too but is not a phase of
its own, so the estimate errs high by up to half of ``rap``. Each job is assumed to run
as many targets as the first (true of a sweep or frontier over one task), less those
already stored: a resumed or extended command is estimated on what it will run.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import UserError
from .job import Job

# fields whose equality means a later job reads the first job's untouched evaluation back
SAME_EVALUATION = ("model", "task", "data_dir", "targets", "limit", "dtype", "chat_template", "seed", "split",
                   "forget_source")
UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """``--budget`` in seconds: ``8h``, ``90m``, ``1h30m``, ``45s`` or plain seconds."""
    spec = text.strip().lower()
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", spec)
    if not spec or parts is None or not any(parts.groups()):
        raise UserError(f"--budget {text!r} is not a duration; write e.g. 8h, 90m, 1h30m or 3600 (seconds).")
    seconds = sum(float(v) * unit for v, unit in zip(parts.groups(), UNITS.values()) if v)
    if seconds <= 0:
        raise UserError(f"--budget {text!r} is no time at all; give a positive duration, e.g. 8h.")
    return seconds


def span(seconds: float) -> str:
    """``seconds`` as h/min/s, to the precision an estimate has."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


@dataclass(frozen=True)
class Estimate:
    """From the first job's records: its ``fields``, what a job costs once (``once``: loading
    and setting the method up), and a target's mean seconds by phase (``phases``)."""

    fields: dict
    once: float
    phases: dict[str, float]
    targets: int

    @classmethod
    def of(cls, fields: dict, records: list[dict]) -> "Estimate | None":
        """The estimate from a job's ``records`` (``None``: they state no times)."""
        timed = [r for r in records if isinstance(r.get("wall_seconds"), (int, float))]
        if not timed:
            return None
        phases: dict[str, float] = {}
        for r in timed:
            stated = r.get("phases") or {}
            for name, seconds in stated.items():
                phases[name] = phases.get(name, 0.0) + seconds / len(timed)
            phases["other"] = phases.get("other", 0.0) + (r["wall_seconds"] - sum(stated.values())) / len(timed)
        once = sum((timed[0].get("phases_once") or {}).values())
        return cls(fields, once, phases, len(records))

    def job_seconds(self, fields: dict, targets: int | None = None) -> float:
        """A later job's expected seconds for ``targets`` still to run (default: as many as the
        first job ran; none: nothing to load): the untouched evaluation only where it evaluates
        another model or data than the first job."""
        targets = self.targets if targets is None else targets
        if not targets:
            return 0.0
        same = all(fields.get(k) == self.fields.get(k) for k in SAME_EVALUATION)
        target = sum(s for name, s in self.phases.items() if not (same and name == "untouched"))
        return self.once + targets * target

    def line(self, jobs: list[tuple[dict, int]]) -> str:
        """The estimate for ``jobs`` (the later jobs' fields and targets still to run), by phase."""
        total = sum(self.job_seconds(*job) for job in jobs)
        running = sum(1 for _, targets in jobs if targets)
        stored = f"; {len(jobs) - running} stored, skipped" if running < len(jobs) else ""
        by_phase = ", ".join(f"{name} {s:.1f}" for name, s in sorted(self.phases.items(), key=lambda kv: -kv[1])
                             if s >= 0.05)
        return (f"estimate: the {running} remaining job{'s' * (running != 1)} to run should take about {span(total)} "
                f"(measured on the first: {self.targets} target{'s' * (self.targets != 1)} a job, per target {by_phase} "
                f"s, {self.once:.1f} s to load and set up; later jobs read the untouched evaluation back{stored})")

    def fit(self, jobs: list[tuple[dict, int]], seconds: float) -> list[bool]:
        """Which of ``jobs`` (fields, targets still to run) fit in ``seconds``: in plan order
        until the first that does not, none to run after it; stored jobs (nothing to run) all."""
        fits: list[bool] = []
        for job in jobs:
            seconds -= self.job_seconds(*job)
            fits.append(seconds >= 0 or not job[1])
            if not fits[-1]:
                seconds = -float("inf")
        return fits


class Forecast:
    """A many-job run's estimate: made after the first job that ran a target (printed, with
    the jobs cut to fit ``deadline``, a ``time.time()``), checked against the time the rest
    took once they have run."""

    def __init__(self, say: Callable[[str], None], deadline: float | None) -> None:
        self.say, self.deadline = say, deadline
        self.made: tuple[float, float, int] | None = None  # (when, estimated seconds, jobs)

    def measured(self, job: Job, records: list[dict], rest: list[Job], pending: Callable[[Job], int]) -> list[Job]:
        """After ``job`` ran: which of the ``rest`` to run (all but what --budget cuts; a
        stored job is never cut, so its records stay in what the command reports);
        ``pending(j)`` is how many of ``j``'s targets are not stored yet."""
        if self.made is not None or not rest or (estimate := Estimate.of(job.fields, records)) is None:
            return rest
        later = [(j.fields, pending(j)) for j in rest]
        fits = [True] * len(rest) if self.deadline is None else estimate.fit(later, self.deadline - time.time())
        self.say(estimate.line(later))
        if not all(fits):
            cut = [j.label for j, fit in zip(rest, fits) if not fit]
            running = sum(1 for _, targets in later if targets)
            self.say(f"budget: {running - len(cut)} of the {running} jobs to run fit in what is left of "
                     f"--budget; not run: {', '.join(cut)} (run again with a larger --budget to add them; what is "
                     f"stored stays)")
        kept = [(j, job) for j, job, fit in zip(rest, later, fits) if fit]
        self.made = (time.monotonic(), sum(estimate.job_seconds(*job) for _, job in kept),
                     sum(1 for _, (_, targets) in kept if targets))
        return [j for j, _ in kept]

    def check(self, finished: bool) -> None:
        """The estimate against what the jobs run after the first took (when all of them ran)."""
        if self.made is None or not finished or not self.made[2]:
            return
        when, estimated, jobs = self.made
        took = time.monotonic() - when
        error = 100 * (estimated - took) / max(took, 1e-9)
        self.say(f"estimate check: the {jobs} job{'s' * (jobs != 1)} run after the first took {span(took)}, estimated "
                 f"{span(estimated)}: {abs(error):.0f}% {'high' if error >= 0 else 'low'}")
