"""The cost tables: per-deletion time and memory (with ratios to a reference method), where
each target's wall time goes (``phases``), and R2F-style proxy → target transfer matrices
for methods run with several model pairs."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Mapping, Sequence

from ..cost import ONCE_PHASES, TARGET_PHASES
from ..jsontext import canonical_json
from ..metric import METRICS
from .cells import SETTING_FIELDS, model_name, row_name, setting, setting_label, task_order, varying
from .stats import Record, Stat, group_stats
from .tables import NOT_RECORDED, UNDEFINED, Column, Provenance, Table, cell_stats, direction, method_rows, metric_table

PHASES_TABLE = "phases"


PHASE_SUM = "phases_sum"  # a record's target phases added up (derived, never stored)


OUTSIDE_UNLEARN = "outside_unlearn"  # derived from a row's means (:func:`outside_unlearn`)


# the phases table's columns per dataset: (record field or derived key, title, digits)
PHASE_COLUMNS = ([(f"phases.{p}", f"{p} (s)", 2) for p in TARGET_PHASES]
                 + [(PHASE_SUM, "sum (s)", 2), (OUTSIDE_UNLEARN, "outside unlearn (%)", 1)]
                 + [(f"phases_once.{p}", f"{p} (s, once)", 2) for p in ONCE_PHASES])


PHASES_NOTE = ("Mean wall seconds of each phase of one target's run: untouched (the untouched model's scores, "
               "cached: a cache hit after the first run), unlearn (the deletion and the method's diagnostics), "
               "evaluate (the unlearned model's scores), extra (the task's extra scores), alignment (identity "
               "alignment), rap (the relearning attack, its evaluation and its control), restore (the weights put "
               "back from their snapshot on disk for the next target); sum: the phases' total; "
               "outside unlearn: the share of the mean sum not spent in unlearn. load (the models built; taught on "
               "a cold cache) and setup (the method's, e.g. fitting a decoder) are the run's one-time costs, stated "
               "in each of its records and not in the sum. n/a here: the records predate phase timing (or the restore phase).")


def machines_note(records: Sequence[Record]) -> str:
    """Where ``records`` were timed on more than one machine, a sentence saying which rows ran
    where (a time compared across machines compares the machines too); else nothing."""
    _, label = method_rows(records)
    rows: dict[str, set[str]] = defaultdict(set)
    for r in records:
        rows[str(r.get("machine") or NOT_RECORDED)].add(label(r))
    if len(rows) < 2:
        return ""
    where = "; ".join(f"{m}: {', '.join(sorted(labs))}" for m, labs in sorted(rows.items()))
    return f" These times come from more than one machine ({where}): compare times and ratios only within one."


def cost_table(records: Sequence[Record], reference: str | None = None) -> Table:
    """Per-deletion time and peak memory per dataset, with ratios to the ``reference`` method
    when it was run, and which rows ran where when they ran on several machines."""
    table = metric_table(records, ("seconds", "peak_mem_mb"), "cost", "Per-deletion time and memory",
                         machines_note(records).strip())
    if reference is None:
        return table
    labels = [lab for lab, _ in table.rows]
    rows_of_reference = [lab for lab in labels if lab == reference or lab.startswith(reference + " [")]
    if len(rows_of_reference) != 1:  # not run; or several rows, of which a ratio to the first by name would mislead
        if rows_of_reference:
            table.note += f" No × {reference} ratios: {reference} has {len(rows_of_reference)} rows here."
        return table
    ref = labels.index(rows_of_reference[0])
    columns: list[Column] = []
    rows = [(lab, []) for lab, _ in table.rows]
    for j, col in enumerate(table.columns):
        columns += [col, Column(col.key + "_vs_" + reference, f"× {reference}", col.group,
                                None, 2, ratio=True)]
        base = table.rows[ref][1][j]
        for (lab, cells), (_, new) in zip(table.rows, rows):
            c = cells[j]
            ratio = Stat(c.mean / base.mean, None, None, c.n) if c and c.n and base and base.mean > 0 else None
            new += [c, ratio]
    table.columns, table.rows = columns, rows
    table.note += f" × {reference}: ratio of the mean to {reference}'s."
    return table


def with_phase_sum(record: Record) -> Record:
    """``record`` with :data:`PHASE_SUM`, the seconds of its target's phases added up (unchanged
    unless it times every one of :data:`~r2f_bench.cost.TARGET_PHASES`)."""
    phases = record.get("phases")
    seconds = [phases.get(p) for p in TARGET_PHASES] if isinstance(phases, Mapping) else [None]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seconds):
        return record
    return {**record, PHASE_SUM: float(sum(seconds))}


def outside_unlearn(unlearn: Stat | None, total: Stat | None) -> Stat | None:
    """The share (%) of a row's mean phase sum spent outside ``unlearn`` (a ratio of means)."""
    if total is None:
        return None
    if not total.n or unlearn is None or not unlearn.n or total.mean <= 0:
        return UNDEFINED
    return Stat(100.0 * (total.mean - unlearn.mean) / total.mean, None, None, total.n)


def phases_table(records: Sequence[Record]) -> Table:
    """Where a target's wall time goes, per dataset: the mean seconds of each phase, their sum,
    the share of it outside ``unlearn``, and the run's one-time ``load`` and ``setup``."""
    records = [with_phase_sum(r) for r in records]
    labels, label = method_rows(records)
    tasks = task_order(r.get("task") for r in records)
    columns = [Column(f"{t}.{key}", title, t, None, digits) for t in tasks for key, title, digits in PHASE_COLUMNS]
    cell = cell_stats(records, [key for key, _, _ in PHASE_COLUMNS if key != OUTSIDE_UNLEARN], label)

    def value(lab: str, task: str, key: str) -> Stat | None:
        if key == OUTSIDE_UNLEARN:
            return outside_unlearn(cell(lab, task, "phases.unlearn"), cell(lab, task, PHASE_SUM))
        return cell(lab, task, key)

    rows = [(lab, [value(lab, t, key) for t in tasks for key, _, _ in PHASE_COLUMNS]) for lab in labels]
    return Table(PHASES_TABLE, "Where the time goes: seconds per phase of a target's run",
                 PHASES_NOTE + machines_note(records), columns, rows, Provenance.of(records))


PAIR_FREE = tuple(f for f in SETTING_FIELDS if f not in ("target", "proxy", "control"))  # control: in the row name


def _pair_free(record: Record) -> dict:
    """``record``'s setting less its (target, proxy) pair: one transfer matrix each."""
    return {k: v for k, v in setting(record).items() if k not in ("target", "proxy")}


def transfer_tables(records: Sequence[Record]) -> list[Table]:
    """Proxy→model matrices of every method that uses a proxy model: models as rows,
    proxies × (USR, GUR) as columns, per method, dataset and setting (everything else that tells
    records apart: :func:`~.cells.setting`)."""
    by_case: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in records:
        if (r.get("models") or {}).get("proxy"):
            by_case[(row_name(r), r.get("task"), canonical_json(_pair_free(r)))].append(r)
    tables: list[Table] = []
    rank = {t: i for i, t in enumerate(task_order(t for _, t, _ in by_case))}
    for (method, task, _), rs in sorted(by_case.items(), key=lambda kv: (kv[0][0], rank[kv[0][1]], kv[0][2])):
        pairs = {(setting(r)["target"], setting(r)["proxy"]) for r in rs}
        targets, proxies = sorted({t for t, _ in pairs}), sorted({p for _, p in pairs})
        if len(pairs) < 2:
            continue
        name = {setting(r)[role]: model_name(r, role) for r in rs for role in ("target", "proxy")}
        stats = {m: group_stats(rs, m, lambda r: (setting(r)["target"], setting(r)["proxy"])) for m in ("usr", "gur")}
        columns = [Column(f"{p}.{m}", METRICS[m].column_title, name[p], direction(m), METRICS[m].digits)
                   for p in proxies for m in ("usr", "gur")]
        rows = [(name[t], [stats[m].get((t, p)) for p in proxies for m in ("usr", "gur")]) for t in targets]
        extra = setting_label(_pair_free(rs[0]), varying([r for (m, t, _), group in by_case.items() if (m, t) == (method, task)
                                                         for r in group], PAIR_FREE))
        stem = "-".join(re.findall(r"[\w.]+", f"transfer-{method}-{task}", re.ASCII))  # a file name and a LaTeX label
        same = sum(t.name.startswith(stem) for t in tables)
        tables.append(Table(stem + (f"-{same + 1}" if same else ""),
                            f"Proxy → target transfer of {method}, {task}" + (f" ({extra})" if extra else ""),
                            f"Rows: target model; column groups: proxy model. {method} only.",
                            columns, rows, Provenance.of(rs), row_header="Target \\ proxy"))
    return tables
