"""``r2f-bench sweep``: plan and run many jobs into the durable store (see :mod:`r2f_bench.results.sweep`).

Under ``accelerate launch -m r2f_bench sweep ...`` each process takes its share of the jobs;
with ``--launcher submitit`` they run as a SLURM job array (see :mod:`r2f_bench.results.launch`).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..engine.distributed import process_state, release_process_group
from ..errors import UserError
from ..plugins import registry as plugin_registry
from ..results.launch import add_launcher_options, launcher
from ..results.store import Store
from ..results.sweep import (ABLATIONS, check_params, comma_list, execute, expand, parse_seeds, process_tag, refusal,
                             set_up, shard, sweep_jobs)
from .options import (add_budget_option, add_keep_going_option, add_methods_option, add_quiet_option,
                      add_seeds_option, add_sweep_run_options, budget_deadline, run_values, say)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_methods_option(p, None, ", or `all` (default: all; with --ablation, the methods that declare it)")
    p.add_argument("--tasks", default="all", help="comma-separated tasks, or `all` (default)")
    add_seeds_option(p)
    p.add_argument("--ablation", choices=ABLATIONS, default=None,
                   help="paper ablation preset: rank (LoRA rank 2,4,8,12,16), views (1-8), "
                        "transfer (target models × proxies)")
    add_sweep_run_options(p)
    add_keep_going_option(p)
    p.add_argument("--dry-run", action="store_true",
                   help="set every job up (options checked, data read, no model built), print the plan and this "
                        "process's share; run nothing")
    add_budget_option(p, "the jobs, in plan order")
    add_quiet_option(p)
    add_launcher_options(p)


def sweep_command(args: argparse.Namespace) -> None:
    """Handler of ``r2f-bench sweep`` (also under ``accelerate launch``)."""

    launch = launcher(args, say(args))  # a missing submitit or a bad combination fails first
    deadline = budget_deadline(args)
    if args.methods is None:
        methods = plugin_registry().with_ablation(args.ablation) if args.ablation else ["all"]
    else:
        methods = comma_list(args.methods)
    given = run_values(args, sweep=True)
    jobs = sweep_jobs(expand(methods, "method"), expand(comma_list(args.tasks), "task"), parse_seeds(args.seeds),
                      ablation=args.ablation, models=given.pop("model", None) or [None],
                      proxies=given.pop("proxy", None) or [None], **given)
    check_params(jobs)
    if args.dry_run:  # a run sets its jobs up as it starts (a local one its own share, an array's at submission)
        bad = set_up(jobs)[1]
        if bad:
            raise refusal(bad, len(jobs))
    if launch is not None:
        return submit_sweep(args, launch, jobs)

    state = process_state()
    process = (state.process_index, state.num_processes)
    try:
        if args.dry_run:
            share = {j.label for j in shard(jobs, *process)}
            for n, job in enumerate(jobs, 1):
                print(f"{n:4d} {'*' if job.label in share else ' '} {job.label}")
            print(f"{len(jobs)} jobs planned; * = taken by process {process[0] + 1} of {process[1]}")
            return
        report = execute(jobs, args.output, process=process, keep_going=args.keep_going,
                         progress=say(args), deadline=deadline)
    finally:
        release_process_group()
    print(f"{process_tag(process)}sweep: {report.assigned} of {report.planned} jobs here; {report.ran} targets run, "
           f"{report.skipped} already done{known_note(report)}; results in {Store(args.output).jobs}")
    if report.failed:
        raise UserError(f"{len(report.failed)} job(s) failed ({'; '.join(report.failed)}); fix and re-run the same command to resume.")


def known_note(report: Any) -> str:
    """The sweep line's note of targets --min-known skipped and jobs --budget cut (empty: none)."""
    n, cut = report.too_little_known, len(report.cut)
    return (f", {n} skipped by --min-known" if n else "") + (f", {cut} jobs left out by --budget" if cut else "")


def submit_sweep(args: argparse.Namespace, launch: Any, jobs: list) -> None:
    """The sweep as a job array: one task per job (see :mod:`r2f_bench.results.launch`)."""
    if args.dry_run:
        for n, job in enumerate(jobs, 1):
            print(f"{n:4d}   {job.label}")
        print(f"{len(jobs)} jobs planned; --launcher submitit runs each as one task of an array")
        return
    good, refused = launch.checked(jobs)
    submitted = launch.submit(good)
    if args.no_wait:
        print(launch.detached(good, submitted, "sweep"))
        if refused:
            raise UserError(f"{len(refused)} job(s) refused, not submitted ({'; '.join(refused)}); fix and re-run the "
                            f"same command.")
        return
    report = launch.wait(good, submitted, refused)
    print(f"sweep: {report.planned} jobs as {launch.describe(submitted)}; {report.ran} targets run, "
          f"{report.skipped} already done{known_note(report)}; results in {Store(args.output).jobs}")
    if report.failed:
        raise UserError(f"{len(report.failed)} job(s) failed ({'; '.join(report.failed)}); fix and re-run the same "
                        f"command to resume.")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sweep`` to the CLI's subparsers (``args.func(args)`` runs it)."""
    p = subparsers.add_parser("sweep", help="plan and run many jobs; resumable, Accelerate-aware",
                              description="Plan runs (methods x tasks x seeds x settings) and run them into a durable "
                                          "store: finished targets are skipped, so re-running the same command resumes; "
                                          "under `accelerate launch -m r2f_bench sweep` each process takes its share.")
    _add_arguments(p)
    p.set_defaults(func=sweep_command)
    return p
