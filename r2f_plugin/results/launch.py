"""Launchers: how a sweep's jobs are spread.

``local`` (the default) runs them in this process, or in the processes of ``accelerate
launch`` (one node's GPUs), each taking its share (:func:`r2f_bench.results.sweep.shard`).
``submitit`` submits them as a SLURM job array through `submitit
<https://github.com/facebookincubator/submitit>`_ (``pip install 'r2f-bench[submitit]'``):
array task *i* runs job *i* of the same deterministic plan with
:func:`r2f_bench.results.sweep.execute`, into the same durable store. Tasks know nothing of
each other: a finished target is skipped and :meth:`r2f_bench.results.store.Store.claim` locks a
target while it runs, so a resubmitted, requeued or overlapping task never runs a target
twice. The submitting process waits for the array and reports as a local sweep does
(``r2f-bench sweep --no-wait`` returns after submitting).

A task is a :class:`Task`: plain data (the job's ``RunConfig`` fields, the store) and the
class that runs it, which submitit pickles for the array (the class by reference: the
task imports its module).
A task that reaches its time limit (or is preempted) is requeued by submitit (its
``checkpoint``) and resumes from the store, losing only the target in flight.
``--slurm-executor local`` runs the tasks as local processes instead (submitit's local
executor; for testing the array without a cluster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import UserError
from .job import Job
from .store import Store
from .sweep import SweepReport, admitted, default_runner, execute

if TYPE_CHECKING:
    from ..engine.run import Run

LAUNCHERS = ("local", "submitit")
EXECUTORS = ("slurm", "local")
MINUTES = 240  # default time limit per task
PARALLELISM = 256  # submitit's default cap on running array tasks
INSTALL = "pip install 'r2f-bench[submitit]'"
# dest -> (flag, type, metavar, help): the launcher's options, declared once; None means "not given"
SLURM_OPTIONS: dict[str, tuple[str, Callable[[str], Any], str | None, str]] = {
    "slurm_executor": ("--slurm-executor", str, None, "slurm (default: sbatch from this login node) or local (the array's "
                                                "tasks as local processes; for testing without a cluster)"),
    "slurm_partition": ("--slurm-partition", str, "NAME", "SLURM partition (default: the cluster's)"),
    "slurm_time": ("--slurm-time", int, "MIN", f"minutes per task (default {MINUTES}); a task that reaches it is requeued "
                                        f"and resumes"),
    "slurm_gpus": ("--slurm-gpus", int, "N", "GPUs per task (default 0)"),
    "slurm_cpus": ("--slurm-cpus", int, "N", "CPUs per task (default: the cluster's)"),
    "slurm_array_parallelism": ("--slurm-array-parallelism", int, "N",
                                f"most tasks running at once (default {PARALLELISM}; SLURM only)"),
    "slurm_folder": ("--slurm-folder", str, "DIR", "submitit's folder: sbatch scripts, pickled tasks, logs "
                                            "(default <output>/submitit)"),
    "slurm_extra": ("--slurm-extra", str, "NAME=VALUE", "any other sbatch option, NAME=VALUE, repeatable (e.g. account=abc, "
                                          "qos=high, mem=32G)"),
}


def add_launcher_options(p: argparse.ArgumentParser, no_wait: bool = True) -> None:
    """``--launcher``, the ``--slurm-*`` options and (``no_wait``) ``--no-wait``."""
    g = p.add_argument_group("launcher", "how jobs are spread: here (local; use `accelerate launch` for one node's "
                                         "GPUs) or as a SLURM job array (submitit)")
    g.add_argument("--launcher", choices=LAUNCHERS, default="local",
                   help="local (default: this process, or each `accelerate launch` process, takes its share) or "
                        f"submitit (one SLURM array task per job; needs {INSTALL})")
    for dest, (flag, kind, metavar, text) in SLURM_OPTIONS.items():
        g.add_argument(flag, dest=dest, type=kind, default=None, metavar=metavar, help=text,
                       **({"choices": EXECUTORS} if dest == "slurm_executor" else {}),
                       **({"action": "append"} if dest == "slurm_extra" else {}))
    if no_wait:
        g.add_argument("--no-wait", action="store_true",
                       help="with --launcher submitit: submit, print the array's id and return")


def launcher(args: argparse.Namespace, progress: Callable[[str], None]) -> Submitit | None:
    """The launcher the options ask for: ``None`` for ``local``. Fails in one line, before
    anything is submitted or loaded, on a missing submitit or a bad combination."""
    given = [SLURM_OPTIONS[d][0] for d in SLURM_OPTIONS if getattr(args, d, None) is not None]
    given += ["--no-wait"] * bool(getattr(args, "no_wait", False))
    if args.launcher != "submitit":
        if given:
            raise UserError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} only to a SLURM array; add "
                            f"--launcher submitit, or leave {'it' if len(given) == 1 else 'them'} out.")
        return None
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise UserError(f"--launcher submitit needs the submitit package, which is not installed; {INSTALL} "
                        f"(or pip install submitit).") from None
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise UserError("--launcher submitit submits from one process: run the command without `accelerate launch` "
                        "(which is the way to use one node's GPUs, with the local launcher).")
    for dest in ("slurm_time", "slurm_cpus", "slurm_array_parallelism"):
        if getattr(args, dest) is not None and getattr(args, dest) < 1:
            raise UserError(f"{SLURM_OPTIONS[dest][0]} must be at least 1, got {getattr(args, dest)}.")
    if args.slurm_gpus is not None and args.slurm_gpus < 0:
        raise UserError(f"--slurm-gpus must be 0 or more, got {args.slurm_gpus}.")
    extra = {}
    for item in args.slurm_extra or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UserError(f"bad --slurm-extra {item!r}; write NAME=VALUE, e.g. account=abc.")
        extra[name.strip().lstrip("-")] = value
    executor = args.slurm_executor or "slurm"
    if executor == "slurm" and not all(map(shutil.which, ("sbatch", "srun"))):
        raise UserError("sbatch or srun not found: submitting a SLURM array needs a SLURM login node; run there, or pass "
                        "--slurm-executor local to run the array's tasks as local processes.")
    folder = Path(args.slurm_folder) if args.slurm_folder else Path(args.output) / "submitit"
    return Submitit(executor=executor, folder=folder, output=args.output,
                    quiet=bool(getattr(args, "quiet", False)), progress=progress,
                    keep_going=bool(getattr(args, "keep_going", False)),
                    parameters={"timeout_min": args.slurm_time or MINUTES, "gpus_per_node": args.slurm_gpus or 0,
                                "cpus_per_task": args.slurm_cpus, "slurm_partition": args.slurm_partition,
                                "slurm_array_parallelism": args.slurm_array_parallelism or PARALLELISM,
                                "slurm_additional_parameters": extra or None, "name": "r2f-bench"})


@dataclass
class Task:
    """One array task: run one job into the store with ``runner`` (picklable: plain data and
    a class)."""

    fields: dict[str, Any]
    output: str
    runner: type[Run]
    quiet: bool = False
    cwd: str = field(default_factory=os.getcwd)  # the submitter's: relative paths mean the same in the task

    def __call__(self) -> dict[str, Any]:
        """The job's :class:`~r2f_bench.results.sweep.SweepReport`, as a dict. A failing job is
        reported in it (``failed``), with its traceback in the task's log."""
        from ..progress import set_quiet

        os.chdir(self.cwd)
        set_quiet(self.quiet)
        say = (lambda m: None) if self.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
        say(f"job {Job(self.fields).label}")
        report = execute([Job(self.fields)], self.output, runner=self.runner, process=(0, 1),
                         keep_going=True, progress=say)
        return asdict(report)

    def checkpoint(self) -> Any:
        """Called by submitit at a time limit or preemption: requeue the same task, which
        skips what the store already holds."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self)


@dataclass
class Submitit:
    """Submits jobs as a job array (one task each) and waits for them."""

    executor: str
    folder: Path
    output: str
    quiet: bool
    progress: Callable[[str], None]
    parameters: dict[str, Any] = field(default_factory=dict)
    keep_going: bool = False  # a job that cannot be set up is listed as failed; the others are submitted

    def __call__(self, jobs: Sequence[Job]) -> SweepReport:
        """Run ``jobs`` as one array and wait: the report of all its tasks (and of the jobs
        :meth:`checked` refused, as failed)."""
        good, refused = self.checked(jobs)
        return self.wait(good, self.submit(good), refused)

    def checked(self, jobs: Sequence[Job]) -> tuple[list[Job], list[str]]:
        """Every job set up before any is submitted (options checked, data read, no model
        built): those that check out, and a failure line for each other, which without
        ``keep_going`` refuses them all in one line instead."""
        return admitted(jobs, default_runner(), self.keep_going, self.progress, verb="submitted")[1:]

    def submit(self, jobs: Sequence[Job]) -> list[Any]:
        """Submit one array task per job (set up by :meth:`checked`), each run by
        :func:`~r2f_bench.results.sweep.default_runner`; the submitit jobs, in the order of ``jobs``."""
        import submitit

        if not jobs:
            return []
        Store(self.output).check()
        runner = default_runner()
        try:
            executor = submitit.AutoExecutor(folder=self.folder, cluster=self.executor)
            executor.update_parameters(**{k: v for k, v in self.parameters.items() if v is not None})
            submitted = executor.submit_array([Task(dict(j.fields), self.output, runner, self.quiet)
                                               for j in jobs])
        except (OSError, subprocess.CalledProcessError, RuntimeError, ValueError) as exc:
            raise UserError(f"submitting the array failed: {' '.join(str(exc).split())[:500]}") from None
        self.progress(f"submitted {len(jobs)} job(s) as {self.describe(submitted)}; logs in {self.folder}")
        return submitted

    def describe(self, submitted: Sequence[Any]) -> str:
        if self.executor == "slurm":
            return f"SLURM array {self.array_ids(submitted)[0]}" if len(self.array_ids(submitted)) == 1 else \
                f"SLURM jobs {', '.join(self.array_ids(submitted))}"
        return f"local processes {', '.join(s.job_id for s in submitted)}"

    @staticmethod
    def array_ids(submitted: Sequence[Any]) -> list[str]:
        return list(dict.fromkeys(s.job_id.split("_")[0] for s in submitted))

    def wait(self, jobs: Sequence[Job], submitted: Sequence[Any], refused: Sequence[str] = ()) -> SweepReport:
        """Wait for every task (Ctrl-C or SIGTERM cancels those still running); their reports
        summed, tasks that ended without one counted as failed, as are the jobs :meth:`checked`
        ``refused``."""
        report = SweepReport(planned=len(jobs) + len(refused), assigned=len(jobs) + len(refused),
                             failed=list(refused))
        pending = dict(enumerate(submitted))
        poll = 0.2 if self.executor == "local" else 5.0
        try:
            while pending:
                for i, task in list(pending.items()):
                    if task.done():
                        del pending[i]
                        self.collect(jobs[i], task, report, len(submitted) - len(pending), len(submitted))
                if pending:
                    time.sleep(poll)
        except KeyboardInterrupt:
            self.cancel(list(pending.values()))
            raise
        finally:
            store = Store(self.output)
            if store.jobs.is_dir():
                store.export()
        report.failed.sort()  # in the order of the plan's labels, not of the tasks' ending
        self.warn_unfinished(report)
        return report

    def collect(self, job: Job, task: Any, report: SweepReport, n: int, total: int) -> None:
        result, why = None, None
        if task.paths.result_pickle.exists() or self.executor == "slurm":  # slurm: results may lag on shared disks
            try:
                result = task.result()
            except Exception as exc:  # noqa: BLE001 - submitit's FailedJobError / UncompletedJobError
                why = _last_line(str(exc))
        else:
            why = "ended without a result (killed or interrupted)"
        if result is None:
            report.failed.append(f"{job.label}: task {task.job_id} {why}; log {task.paths.stderr}")
            self.progress(f"[{n}/{total}] {job.label}: task {task.job_id} failed: {why}")
            return
        report.ran += result["ran"]
        report.skipped += result["skipped"]
        report.too_little_known += result.get("too_little_known", 0)
        report.cut += result.get("cut", [])
        report.failed += result["failed"]
        report.keys += result["keys"]
        report.job_keys.update(result["job_keys"])
        self.progress(f"[{n}/{total}] {job.label}: {result['ran']} run, {result['skipped']} already done"
                      + (f", failed (log {task.paths.stderr})" if result["failed"] else ""))

    def warn_unfinished(self, report: SweepReport) -> None:
        """Name the targets a task left to another process's lock that are still not done."""
        store = Store(self.output)
        left = [k for k in dict.fromkeys(report.keys) if not store.done(k)]
        if left and not report.failed:
            holders = sorted({store.holder(k) for k in left})
            self.progress(f"warning: {len(left)} target(s) were left to other processes holding their locks "
                          f"({'; '.join(holders)}) and are not finished; if those are gone, remove their files in "
                          f"{store.root / 'locks'} and run the same command again.")

    def cancel(self, pending: list[Any]) -> None:
        if not pending:
            return
        if self.executor == "slurm":
            for array in self.array_ids(pending):
                subprocess.call(["scancel", array])
        else:  # a Ctrl-C in the terminal reached the local tasks too: give them a moment to unwind
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and not all(task.done() for task in pending):
                time.sleep(0.1)
            for task in pending:
                if not task.done():
                    task.cancel(check=False)
        self.progress(f"cancelled {len(pending)} unfinished task(s) of {self.describe(pending)}")

    def detached(self, jobs: Sequence[Job], submitted: Sequence[Any], command: str) -> str:
        """What ``--no-wait`` prints: where the tasks run and how to follow, read and resume them."""
        ids = self.array_ids(submitted)
        follow = (f"watch: squeue -j {','.join(ids)}; cancel: scancel {' '.join(ids)}" if self.executor == "slurm"
                  else f"they run as local processes (pids {', '.join(ids)})")
        return (f"{command}: submitted {len(jobs)} job(s) as {self.describe(submitted)}, not waiting; {follow}; "
                f"logs in {self.folder}.\nResults land in {Store(self.output).jobs} as targets finish; "
                f"`r2f-bench table --output {self.output}` reads them. Run the same command again (without "
                f"--no-wait to wait) to resume: finished targets are skipped, running ones are left to their task.")


def _last_line(text: str) -> str:
    """The exception line of a submitit error's traceback (or its first line)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not set(ln.strip()) <= {"-"}]
    errors = [ln for ln in lines if ln.split(":")[0].endswith(("Error", "Exception", "Interrupt", "Exit"))]
    return (errors[-1] if errors else lines[0] if lines else "failed")[:300]
