"""Sweeps: plan many single runs, spread them over processes, store each result as it finishes.

A *job* is one run configuration (method × task × seed × models × setting); it
yields one record per evaluation target. Under ``accelerate launch`` process ``i``
of ``n`` takes jobs ``i, i+n, i+2n, ...`` of the same deterministic plan, and runs
each alone on its own device (independent jobs: no DistributedDataParallel).
Before a target runs, its key (see :mod:`r2f_bench.results.store`) is looked up and a
finished one is skipped, so re-running an interrupted or extended sweep only does
what is missing.

The command line is :mod:`r2f_bench.cli.sweep` (``r2f-bench sweep``; under Accelerate,
``accelerate launch -m r2f_bench sweep``).
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import sys
import traceback
from functools import partial
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..engine.config import FAMILIES, MAX_SEED, RunConfig, names, unread_fields
from ..engine.distributed import process_state
from ..engine.identity import identities
from ..errors import UserError
from ..plugins import registry as plugin_registry
from .estimate import Forecast
from .job import Job
from .store import Store, job_key

if TYPE_CHECKING:
    from ..engine.run import Run

RANKS = (2, 4, 8, 12, 16)
VIEWS = tuple(range(1, 9))
TRANSFER_TARGETS = tuple(f"embedded:{f}-h{h}-l4" for f in FAMILIES for h in (128, 256))
TRANSFER_PROXIES = tuple(f"embedded:{f}-h{h}-l2" for f in FAMILIES for h in (64, 96))
ABLATIONS = ("rank", "views", "transfer")

Progress = Callable[[str], None]
_progress: Progress = partial(print, file=sys.stderr, flush=True)  # stdout stays for results


@dataclass
class SweepReport:
    planned: int = 0
    assigned: int = 0  # jobs this process took
    ran: int = 0  # targets run and stored
    skipped: int = 0  # targets already in the store
    too_little_known: int = 0  # targets skipped by --min-known (none stored)
    cut: list[str] = field(default_factory=list)  # labels of jobs not run: they would end after the deadline
    failed: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # store keys of this process's finished targets
    job_keys: dict[str, list[str]] = field(default_factory=dict)  # the same, by job label


# -- planning -----------------------------------------------------------------
def comma_list(text: str | None) -> list[str]:
    """A comma-separated option as a list (empty when unset)."""
    return names(text) or []


MAX_SEEDS = 10_000  # seeds one command may ask for (0-4294967295 once built a list of 4 billion)


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` or ``0-4`` (inclusive ranges), mixed freely; each seed in ``0..MAX_SEED``."""
    seeds: dict[int, None] = {}  # ordered, each seed once
    for part in comma_list(text):
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise UserError(f"bad --seeds item {part!r}; write e.g. 0,1,2 or 0-4.") from None
        if last < first:
            raise UserError(f"bad --seeds item {part!r}: a range runs from low to high; write {hi}-{lo}.")
        if last > MAX_SEED:  # none is negative: a leading "-" does not parse
            raise UserError(f"bad --seeds item {part!r}: seeds run from 0 to {MAX_SEED}.")
        if last - first < MAX_SEEDS:  # a range is checked before it is built
            seeds.update(dict.fromkeys(range(first, last + 1)))
        if last - first >= MAX_SEEDS or len(seeds) > MAX_SEEDS:
            raise UserError(f"--seeds {text} asks for more than {MAX_SEEDS} seeds; run fewer at a time.")
    if not seeds:
        raise UserError("--seeds is empty; write e.g. 0,1,2.")
    return list(seeds)


def expand(requested: Sequence[str], kind: str, registry: Any = None) -> list[str]:
    """Resolve ``all`` to every registered method or task; reject unknown names."""
    flag = "--methods" if kind == "method" else "--tasks"
    if not requested:
        raise UserError(f"{flag} is empty; name some or pass `all`.")
    if registry is None:
        registry = plugin_registry()
    known = [info.name for info in registry.listing(kind)]
    if list(requested) == ["all"]:
        if not known:
            raise UserError(f"no {kind}s are registered; install r2f-bench (pip install -e .) or a plugin.")
        return known
    for name in requested:
        if name not in known:
            raise UserError(f"unknown {kind} {name!r} in {flag}; choose from: {', '.join(known) or 'none registered'} or `all`.")
    return list(dict.fromkeys(requested))


def sweep_jobs(methods: Sequence[str], tasks: Sequence[str], seeds: Sequence[int], *,
         ablation: str | None = None, models: Sequence[str | None] = (None,),
         proxies: Sequence[str | None] = (None,), params: dict[str, str] | None = None,
         output: str = RunConfig.output, **given: Any) -> list[Job]:
    """The jobs of a sweep, in a deterministic order (seed-major, so early seeds fill tables first).

    ``None`` for a model, proxy or a ``given`` RunConfig field (e.g. ``views``,
    ``paraphraser``) means the run's default. An
    ``ablation`` multiplies the jobs by its settings: ``rank`` (R2F's LoRA rank,
    ``params["rank"]``), ``views`` (1-8), or ``transfer`` (every target model ×
    every proxy; :data:`TRANSFER_TARGETS` × :data:`TRANSFER_PROXIES` unless
    models or proxies are given). A method that uses no proxy runs with the first proxy
    only, and one that does not read an input (views, retain items, target modules:
    :meth:`~r2f_bench.unlearner.Unlearner.reads`) without the options that set it: the others would
    repeat its work under other keys.
    """
    params = dict(params or {})
    settings: list[dict[str, Any]]
    if ablation is None:
        settings = [{}]
    elif ablation == "rank":
        settings = [{"params": {**params, "rank": str(r)}} for r in RANKS]
    elif ablation == "views":
        settings = [{"views": v} for v in VIEWS]
    elif ablation == "transfer":
        settings = [{}]
        models = models if any(m is not None for m in models) else TRANSFER_TARGETS
        proxies = proxies if any(p is not None for p in proxies) else TRANSFER_PROXIES
    else:
        raise UserError(f"unknown --ablation {ablation!r}; choose one of {', '.join(ABLATIONS)}.")
    common = {k: v for k, v in given.items() if v is not None}
    jobs: dict[str, Job] = {}
    for seed, task, model, proxy, setting, method in itertools.product(
            seeds, tasks, models, proxies, settings, methods):
        if proxy != proxies[0] and not _uses_proxy(method):
            continue
        fields: dict[str, Any] = {"method": method, "task": task, "seed": seed, "output": output,
                                  "params": dict(params), **common}
        for name, value in (("model", model), ("proxy", proxy)):
            if value is not None:
                fields[name] = value
        fields.update(setting)
        for name in _unread(method, fields["params"], fields.get("attacks")):  # not read: once, at the default
            fields.pop(name, None)
        job = Job(fields)
        jobs.setdefault(job.label, job)
    return list(jobs.values())


def _uses_proxy(method: str) -> bool:
    """Whether ``method`` reads ``--proxy`` (a name not registered here: assumed to)."""
    try:
        return plugin_registry().method(method).uses_proxy
    except UserError:
        return True


def _unread(method: str, params: Mapping[str, str] | None, attacks: str | None) -> tuple[str, ...]:
    """The run options ``method`` does not read with ``params`` under ``attacks``
    (:func:`~r2f_bench.engine.config.unread_fields`; a name not registered here, or parameters or
    attacks it refuses: none, and the run says why)."""
    try:
        cls = plugin_registry().method(method)
        return unread_fields(cls, cls.parse_params(params), attacks)
    except UserError:
        return ()


def check_params(jobs: Sequence[Job], registry: Any = None) -> None:
    """Refuse, before anything runs, a job whose method lacks a ``--set`` parameter or
    rejects its value: a sweep applies ``--set`` to every method it names."""
    registry = registry or plugin_registry()
    for job in jobs:
        method = registry.method(job.fields["method"])
        try:
            method.parse_params(job.fields.get("params"))
        except UserError as err:
            if not set(job.fields.get("params") or {}) - {f.name for f in dataclasses.fields(method.Params)}:
                raise  # a bad value: its own line says it
            raise UserError(f"{err} A sweep's --set applies to every method in --methods: sweep the methods "
                            "that lack it separately, into the same --output.") from None


def shard(jobs: Sequence[Job], index: int, count: int) -> list[Job]:
    """Process ``index`` of ``count`` takes every ``count``-th job from position ``index``."""
    if not 0 <= index < count:
        raise ValueError(f"process index {index} outside 0..{count - 1}")
    return list(jobs[index::count])


# -- execution ----------------------------------------------------------------
def default_runner() -> type[Run]:
    """:class:`r2f_bench.engine.run.Run`, imported when jobs run (the model stack), not at start-up."""
    from ..engine.run import Run

    return Run


def execute(jobs: Sequence[Job], output: str, *, runner: type[Run] | None = None,
            process: tuple[int, int] | None = None, keep_going: bool = False, replace: bool = False,
            progress: Progress = _progress, deadline: float | None = None) -> SweepReport:
    """Run this process's share of ``jobs``, skipping finished targets (``replace``: running
    them again and replacing their records) and storing each new one at once; then
    export the store to ``results.jsonl``. After the first job that runs a target, the
    rest's cost is estimated from it (:class:`~.estimate.Forecast`) and, with a ``deadline``
    (``time.time()``), the jobs that would end after it are not run (``report.cut``).

    ``runner`` runs each job's configuration: ``runner(config, progress=...)`` with
    ``targets``, ``data_revision()``, ``versions()``, ``resolved_params()`` and
    ``run_target(target)`` (default: :func:`default_runner`). ``process`` is
    (index, count); by default it comes from Accelerate. Of several jobs, each is set up
    before any runs (:func:`set_up`). A failing job stops the sweep unless ``keep_going``,
    in which case the failures are listed in the report.
    """
    runner = runner or default_runner()
    if process is None:
        state = process_state()
        process = (state.process_index, state.num_processes)
    index, count = process
    tag = process_tag(process)

    def say(msg: str) -> None:
        progress(tag + msg)

    store = Store(output)
    store.check()
    mine = shard(jobs, index, count)
    report = SweepReport(planned=len(jobs), assigned=len(mine))
    keys: dict[str, list[str]] = {}
    if len(mine) > 1:  # one job fails as itself
        keys, mine, refused = admitted(mine, runner, keep_going, say, process)
        report.failed += refused
    forecast = Forecast(say, deadline)
    try:
        n = 0
        while n < len(mine):
            job, n = mine[n], n + 1
            if len(mine) > 1:
                say(f"job {n}/{len(mine)}: {job.label}")
            ran = report.ran
            if keys.get(job.label) and not replace and all(map(store.done, keys[job.label])):
                _done_already(job, keys[job.label], report, say)  # set up already: not a second time
                continue
            try:
                _run_job(job, runner, store, report, say, replace)
            except Exception as exc:  # noqa: BLE001 - reported, then re-raised unless keep_going
                if not keep_going:
                    raise
                report.failed.append(f"{job.label}: {type(exc).__name__}: {exc}")
                say(f"job failed: {job.label}\n{traceback.format_exc()}")
            finally:  # a finished run holds reference cycles: free its model and weights' snapshot
                gc.collect()  # before the next job builds its own
            if report.ran > ran:
                kept = forecast.measured(job, [r for r in map(store.get, report.job_keys.get(job.label, [])) if r],
                                         mine[n:], partial(_pending, keys=keys, store=store, replace=replace))
                report.cut += [j.label for j in mine[n:] if all(j is not k for k in kept)]
                mine = mine[:n] + kept
        forecast.check(n == len(mine))
    finally:
        if store.jobs.is_dir():
            store.export()
    return report


def process_tag(process: tuple[int, int]) -> str:
    return f"[process {process[0] + 1}/{process[1]}] " if process[1] > 1 else ""


def _keyed(job: Job, runner: type[Run],
           say: Progress) -> tuple[Run, dict[str, Any], dict[str, Any], str, dict, dict, list[str]]:
    """The job's run (nothing built yet), its configuration, what the key holds other than as
    written (:func:`~r2f_bench.engine.identity.identities`), data revision, versions, resolved
    parameters, and the store key of each of its targets."""
    run = runner(RunConfig(**job.fields), progress=say)
    return run, *run_identity(run), list(target_keys(run).values())


def run_identity(run: Run) -> tuple[dict[str, Any], dict[str, Any], str, dict, dict]:
    """What ``run``'s store keys are made of (nothing built): its configuration as completed by
    the run (forget source, target ids: one key for the same work), what the key holds other
    than as written (:func:`~r2f_bench.engine.identity.identities`), data revision, versions and
    resolved parameters."""
    identity = run.config.to_dict()
    method = run.config.method
    return (identity, identities(identity, _uses_proxy(method), _unread(method, run.config.params, run.config.attacks)),
            run.data_revision(), run.versions(), run.resolved_params())


def target_keys(run: Run) -> dict[str, str]:
    """The store key of each of ``run``'s targets, by target id."""
    identity, named, revision, versions, params = run_identity(run)
    return {t.id: job_key({**identity, **named}, t.id, revision, versions, params) for t in run.targets}


def set_up(jobs: Sequence[Job], runner: type[Run] | None = None,
           keep_going: bool = False) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Every job's run set up before any runs (options checked, data read, no model built):
    the store keys of each that checks out, and why each other would fail, by label (with
    ``keep_going`` also a failure other than bad input, which would otherwise propagate)."""
    runner = runner or default_runner()
    keys, bad = {}, {}
    for job in jobs:
        try:
            keys[job.label] = _keyed(job, runner, lambda msg: None)[-1]
        except UserError as exc:
            bad[job.label] = str(exc)
        except Exception as exc:  # noqa: BLE001 - listed as the job's failure, as a run's would be
            if not keep_going:
                raise
            bad[job.label] = f"{type(exc).__name__}: {exc}"
    return keys, bad


def admitted(jobs: Sequence[Job], runner: type[Run] | None, keep_going: bool, say: Progress,
             process: tuple[int, int] = (0, 1), verb: str = "run") -> tuple[dict[str, list[str]], list[Job], list[str]]:
    """:func:`set_up` on ``jobs``: a bad one refuses them all (:func:`refusal`), or with
    ``keep_going`` is said and returned as a failure line. The keys, the jobs that check out,
    the failure lines."""
    keys, bad = set_up(jobs, runner, keep_going)
    if bad and not keep_going:
        raise refusal(bad, len(jobs), process, verb)
    for label, why in bad.items():
        say(f"job refused: {label}: {why}")
    return keys, [job for job in jobs if job.label not in bad], [f"{label}: {why}" for label, why in bad.items()]


def refusal(bad: Mapping[str, str], planned: int, process: tuple[int, int] = (0, 1),
            verb: str = "run") -> UserError:
    """The one line that refuses the ``planned`` jobs for those :func:`set_up` found (the
    first, and how many more): none of them was ``verb`` (an earlier round may have run)."""
    label, why = next(iter(bad.items()))
    more = f" {len(bad) - 1} more job(s) refused." if len(bad) > 1 else ""
    return UserError(f"job {label}: {why}{more} None of the {planned} job(s) was {verb}"
                     f"{' by this process' * (process[1] > 1)}; fix it, or pass --keep-going to run the others.")


def stored_keys(jobs: Sequence[Job], runner: type[Run] | None = None) -> dict[str, list[str]]:
    """Each job's store keys, by job label, as running it would store them; nothing runs."""
    runner = runner or default_runner()
    return {job.label: _keyed(job, runner, lambda msg: None)[-1] for job in jobs}


def _pending(job: Job, *, keys: Mapping[str, list[str]], store: Store, replace: bool) -> int:
    """How many of ``job``'s targets (their store keys: ``keys``, by label) running it would
    run (all with ``replace``)."""
    mine = keys[job.label]
    return len(mine) if replace else sum(not store.done(key) for key in mine)


def _done_already(job: Job, keys: list[str], report: SweepReport, say: Progress) -> None:
    """Count a job whose every target the store holds (``keys``, from :func:`set_up`) as skipped."""
    report.keys += keys
    report.job_keys.setdefault(job.label, []).extend(keys)
    report.skipped += len(keys)
    say(f"  all {len(keys)} target(s) already done")


def _run_job(job: Job, runner: type[Run], store: Store, report: SweepReport, say: Progress, replace: bool) -> None:
    run, identity, named, revision, versions, params, keys = _keyed(job, runner, say)
    for target, key in zip(run.targets, keys):
        report.keys.append(key)
        report.job_keys.setdefault(job.label, []).append(key)
        if store.done(key) and not replace:
            report.skipped += 1
            say(f"  {target.id}: already done ({key[:12]})")
            continue
        with store.claim(key) as mine:
            if not mine and replace:
                raise UserError(f"{target.id} of this run ({key[:12]}) is being run by another process "
                                f"({store.holder(key)}); wait for it to finish, or remove {store.lock_path(key)} "
                                f"if that process is gone.")
            if not mine or (store.done(key) and not replace):
                report.skipped += 1
                say(f"  {target.id}: " + (f"running in another process ({store.holder(key)})" if not mine else
                                          "finished by another process meanwhile") + f" ({key[:12]})")
                continue
            record = run.run_target(target)
            if record is None:  # --min-known skipped it (the run said why): nothing stored
                report.too_little_known += 1
                continue
            record = dict(record)
            record.setdefault("target", target.id)
            record.setdefault("config", identity)
            record.setdefault("identities", named)
            record.setdefault("data_revision", revision)
            record.setdefault("versions", versions)
            record.setdefault("params", params)
            store.put(key, record)
        report.ran += 1
        say(f"  {target.id}: stored {key[:12]}")
