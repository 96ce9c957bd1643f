"""Which records count where: the setting a record was run in (records of different
settings are never pooled), the tables' task order, the check a record must pass to enter a
table, and the newest record of each (target, seed) cell."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..engine.config import OPTIONS, TEACH_EPOCHS, TEACH_LR, TEACH_THREADS
from ..jsontext import canonical_json
from ..metric import METRICS
from .stats import Record


# run options in a job's key that change what its record measures, beside those :func:`setting` names
# otherwise (the rest only say where or how fast it ran, or are the cell: task, target, seed, split)
RUN_FIELDS = ("dtype", "chat_template", "target_modules", "dev_targets", "sequential", "attacks", "rap_steps", "rap_lr")


def keyed_config(record: Record) -> dict[str, Any]:
    """A record's configuration as its key holds it: ``config`` with its ``identities`` (a
    local model by its content, not its path: :func:`~r2f_bench.engine.identity.identities`)."""
    named = record.get("identities")
    return {**(record.get("config") or {}), **(named if isinstance(named, dict) else {})}


def setting(record: Record) -> dict[str, Any]:
    """What distinguishes runs of one method besides task, seed and target.

    The request is what the record says it was made of (``request_source``: RWKU's
    corpus and its FB probes never share a row). Hyper-parameters are the resolved ones a record carries (``params``: defaults
    included, so runs that differ only in a default never share a row), else the
    configured overrides. Models are identified as the record's key holds them (the spec
    the run was given, a local file or folder by its content: ``identities``), not by the
    descriptive labels in ``record["models"]``, which may differ between tasks for the same
    model (e.g. "taught N facts"). A pretrained model taught a knowledge world on another
    schedule is another model (``teaching``). The other options a key holds that change what a
    record measures (:data:`RUN_FIELDS`: precision, prompt format, which layers are adapted, the
    dev split, sequential deletions, the attacks) are read with their defaults filled in, so a
    record made before an option existed stands with those left at it. Records that depend on the
    run's other targets carry them (:func:`sequence`).
    """
    config, models = keyed_config(record), record.get("models", {})
    params = record.get("params") or config.get("params") or {}
    return {"params": dict(params), "views": config.get("views"),
            "target": config.get("model", models.get("target")), "proxy": config.get("proxy", models.get("proxy")),
            "request": record.get("request_source"), "retain_items": config.get("retain_items"),
            "paraphraser": config.get("paraphraser"), "control": config.get("control", "none"),
            "teaching": teaching(config), "sequence": sequence(config),
            **{f: config.get(f, OPTIONS[f].default) for f in RUN_FIELDS}}


def sequence(config: Mapping[str, Any]) -> str | None:
    """The evaluation targets of a run whose records depend on one another, in order: deleted one
    after another (``sequential``), or each scored after the next one's request (``control``
    ``other_request``); by id where given, else ``first N`` (``limit``) or ``all``. ``None`` for any
    other run, whose records each stand alone (which targets it ran is then only which cells)."""
    if not config.get("sequential") and config.get("control", "none") != "other_request":
        return None
    targets, limit = config.get("targets"), config.get("limit")
    return ",".join(map(str, targets)) if targets else f"first {limit}" if limit is not None else "all"


def teaching(config: Mapping[str, Any]) -> str | None:
    """A run's world-teaching schedule as ``EPOCHSxLR`` (``, N threads``), or None at the
    defaults (every embedded model's, and every run made before the options existed)."""
    epochs, lr = config.get("teach_epochs", TEACH_EPOCHS), config.get("teach_lr", TEACH_LR)
    threads = config.get("teach_threads", TEACH_THREADS)
    if (epochs, lr, threads) == (TEACH_EPOCHS, TEACH_LR, TEACH_THREADS):
        return None
    return f"{epochs}x{lr:g}" + (f", {threads} threads" if threads != TEACH_THREADS else "")


def model_name(record: Record, role: str) -> str:
    """How a table names a record's ``target`` or ``proxy`` model (:func:`setting`): a local
    file or folder, which its identity (a hash) groups, by its own name and the hash's start."""
    value, named = setting(record)[role], record.get("identities")
    field = "model" if role == "target" else role
    if isinstance(value, str) and value.startswith("sha256:") and isinstance(named, dict) and field in named:
        return f"{Path(str((record.get('config') or {}).get(field, ''))).name} ({value[7:15]})"
    return str(value)


SETTING_FIELDS = ("params", "views", "target", "proxy", "request", "retain_items", "paraphraser", "control",
                  "teaching", "sequence", *RUN_FIELDS)


def row_name(record: Record) -> str:
    """The method a row, line or count is named by: a negative control's as ``method (control: kind)``."""
    control = setting(record)["control"]
    return str(record.get("method")) + ("" if control == "none" else f" (control: {control})")


def varying(records: Sequence[Record], fields: Sequence[str] = SETTING_FIELDS) -> list[str]:
    """The setting fields that take more than one value among ``records``; for
    ``params``, each varying hyper-parameter as ``params.<name>``."""
    differs = lambda values: len({canonical_json(v) for v in values}) > 1
    out: list[str] = []
    for f in fields:
        if f == "params":
            names = sorted({k for r in records for k in setting(r)["params"]})
            out += [f"params.{k}" for k in names if differs(setting(r)["params"].get(k) for r in records)]
        elif f == "sequence":  # named only where two of one task differ (sequential and control say the rest)
            by_task: dict[Any, set[str]] = {}
            for r in records:
                if (v := setting(r)[f]) is not None:
                    by_task.setdefault(r.get("task"), set()).add(canonical_json(v))
            if any(len(values) > 1 for values in by_task.values()):
                out.append(f)
        elif differs(setting(r)[f] for r in records):
            out.append(f)
    return out


def setting_label(s: Mapping[str, Any], fields: Sequence[str]) -> str:
    parts: list[str] = []
    for f in fields:
        group, _, name = f.partition(".")
        if name:
            if name in s.get(group, {}):
                parts.append(f"{name}={s[group][name]}")
        elif isinstance(s.get(f), list):  # --target-modules as typed
            parts.append(f"{f}={','.join(map(str, s[f]))}")
        elif s.get(f) is not None:  # unset (a default schedule, say): nothing to name
            parts.append(f"{f}={s[f]}")
    return ", ".join(parts)


def task_order(tasks: Iterable[str]) -> list[str]:
    """``tasks`` as tables order them: the built-in tasks in registration order, then the rest by name."""
    from ..plugins import registry

    rank = {t: i for i, t in enumerate(registry().builtin_order("task"))}
    return sorted(set(tasks), key=lambda t: (rank.get(t, len(rank)), t))


REQUIRED = (("method", str), ("task", str), ("target", str), ("seed", int), ("config", dict), ("versions", dict),
            ("data_revision", str))
OPTIONAL = (("params", dict), ("models", dict), ("info", dict), ("official", dict), ("set_scores", dict),
            ("n", dict), ("phases", dict), ("budget", dict), ("attacks", dict),
            ("identities", dict))  # where present, of this type


def invalid(record: Record) -> str | None:
    """Why ``record`` cannot enter a table (``None``: it can): a required field missing or
    mistyped, an optional one (:data:`OPTIONAL`) mistyped, no headline metric fields (``usr``, ``gur``) at all, or a metric that is not
    a number in its range (:attr:`~r2f_bench.metric.MetricSpec.range`; ``null`` is allowed: undefined)."""
    for name, kind in REQUIRED:
        value = record.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"field {name!r} missing or not a {kind.__name__}"
    for name, kind in OPTIONAL:
        if record.get(name) is not None and not isinstance(record[name], kind):
            return f"field {name!r} is a {type(record[name]).__name__}, not a {kind.__name__}"
    for metric in ("usr", "gur"):
        if metric not in record:
            return f"metric {metric!r} missing (an identity without results)"
    for metric, spec in METRICS.items():
        v = record.get(metric)
        if v is None or spec.range is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"metric {metric!r} is {v!r}, not a number"
        lo, hi = spec.range
        if not lo - 1e-9 <= v <= hi + 1e-9:
            return f"metric {metric!r} is {v!r}, outside [{lo:g}, {hi:g}]"
    return None


def scored(records: Iterable[Record]) -> tuple[list[Record], Counter[str]]:
    """The evaluation-split records of deletions that did not diverge, which tables and plots
    count, and the diverged ones by row (:func:`row_name`). Dev-split runs (``r2f-bench tune``)
    choose hyper-parameters and never count."""
    evaluated = [r for r in records if (r.get("config") or {}).get("split", "eval") == "eval"]
    diverged = Counter(row_name(r) for r in evaluated if r.get("status", "ok") != "ok")
    return [r for r in evaluated if r.get("status", "ok") == "ok"], diverged


def tabulable(records: Iterable[Record]) -> tuple[list[Record], list[str]]:
    """The records that can enter a table or plot, and ``KEY: why`` for each other one (:func:`invalid`)."""
    kept, skipped = [], []
    for r in records:
        why = invalid(r)
        if why:
            skipped.append(f"{str(r.get('key', '?'))[:12]}: {why}")
        else:
            kept.append(r)
    return kept, skipped


def cell(record: Record, all_versions: bool = False) -> str:
    """The table cell a record counts in once: method, setting, task, target, seed and split;
    with ``all_versions`` also its code versions and data revision (pooled deliberately)."""
    identity = [record.get("method"), setting(record), record.get("task"), record.get("target"), record.get("seed"),
                (record.get("config") or {}).get("split", "eval")]
    if all_versions:
        identity += [record.get("versions"), record.get("data_revision")]
    return canonical_json(identity)


def superseded(old: Record, new: Record) -> str:
    """Why ``old`` gives way to ``new`` in one cell: another code version, data revision, or a duplicate."""
    if canonical_json(old.get("versions")) != canonical_json(new.get("versions")):
        return "code version"
    if old.get("data_revision") != new.get("data_revision"):
        return "data revision"
    return "duplicate"


def newest_per_cell(records: Iterable[Record], all_versions: bool = False) -> tuple[list[Record], Counter[str]]:
    """One record per :func:`cell`: the newest (``stored_at``, then key), in the input's
    order; and how many were set aside, by :func:`superseded`'s reason."""
    records = list(records)
    newest: dict[str, Record] = {}
    for r in records:
        c = cell(r, all_versions)
        if c not in newest or _age(r) > _age(newest[c]):
            newest[c] = r
    kept_ids = {id(r) for r in newest.values()}
    aside = Counter(superseded(r, newest[cell(r, all_versions)]) for r in records if id(r) not in kept_ids)
    return [r for r in records if id(r) in kept_ids], aside


def _age(record: Record) -> tuple[float, str]:
    stored = record.get("stored_at")
    return (float(stored) if isinstance(stored, (int, float)) else 0.0, str(record.get("key", "")))
