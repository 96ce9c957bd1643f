"""Leaderboard tables in the paper's shape, rendered from the results store.

Every cell aggregates the same way: the mean of a metric over every (target, seed)
record that has it, with its 95% bootstrap confidence interval (percentile, targets and
seeds resampled: :func:`~r2f_bench.results.stats.unit_weights`) and ``n`` the number of records, printed
as ``mean [lo, hi]``. A cell of one record has no interval. The best cell of a
column is bold, by the metric's direction (:func:`direction`); cells equal to it at
the shown precision are bold too. A row that ran on a dataset but whose records all
leave a metric undefined (RAP where nothing was forgotten) shows ``n/a``
(:data:`UNDEFINED`, :data:`NA_NOTE`), not a blank.

Rows are methods. Records of one method that differ in setting (hyper-parameters,
views, model or proxy) are never averaged together: they become separate
rows, labelled by the setting fields that vary among that method's records.

This module holds the table model and the score tables: ``table1`` (USR / GUR per
dataset), ``levels``, ``rap``, ``attacks``, ``identity_alignment`` and, on request, the
per-target ``targets-<task>``; the cost tables are
in :mod:`.cost_tables`, and :func:`~.leaderboard.build_tables` puts them all in order.
Each states the models, data revisions and plugin versions its records came from;
:mod:`r2f_bench.results.render` writes them as Markdown, LaTeX, CSV and HTML.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Sequence

from ..engine.metrics import RATIO_FLOOR
from ..metric import METRICS, legend
from .cells import row_name, setting, setting_label, task_order, varying
from .stats import Record, Stat, group_stats, metric_value
from .tune import DEFAULT_MIN_GUR


# what every summary and table says once besides the metrics' definitions
SEEN_NOTE = ("USR counts held-out probes, phrased apart from anything the request contains (does the forgetting "
             "generalise?); USR seen counts probes made of the request's own strings (is what was asked removed?): "
             "two measurements, neither bounds the other")
ALIGNMENT_NOTE = ("ID-align is identity alignment (the paper's \"MIA\"), not a membership-inference attack; the "
                  "paper's Table 3 ranks it lower-is-better, so no direction is marked best here")
NA_NOTE = ("n/a: undefined, nothing to count: RAP where nothing was forgotten (nothing can come back) or no attack ran "
           "(--rap-steps 0), the other "
           "shares where the untouched model knew none of their probes or the benchmark has none, GUR, Locality and Name "
           f"ctrl where the untouched model scores below {RATIO_FLOOR:g}% on their sets (a ratio to almost nothing; "
           "Locality pools only the neighbour sets at or above it)")
UNDEFINED = Stat(math.nan, None, None, 0)  # records exist, but none defines the metric (NA_NOTE)


def direction(metric: str) -> bool | None:
    """Whether higher is better for ``metric`` (``None``: neither; never bold, no arrow)."""
    return METRICS[metric].higher


# -- the table model ----------------------------------------------------------
@dataclass(frozen=True)
class Column:
    key: str  # machine name, e.g. "rwku.usr" (CSV headers)
    title: str  # e.g. "USR"
    group: str = ""  # spanning header, e.g. the dataset
    higher: bool | None = None  # direction for bold; None: never bold
    digits: int = 1
    ratio: bool = False  # a plain ratio (×), no interval or n


TAUGHT_STRINGS_NOTE = ("Taught-string recall: the embedded model was taught every scored probe verbatim (real "
                       "benchmark data defines no world to generalise from), so USR measures how fast taught strings "
                       "erode, not knowledge; rank nothing on it.")


def taught_strings(record: Record) -> bool:
    """Whether ``record``'s model was taught the scored probes themselves."""
    return bool((record.get("knowledge") or {}).get("taught_strings"))


NOT_RECORDED = "not recorded"  # the machine of a record older than the field


@dataclass
class Provenance:
    models: list[str] = field(default_factory=list)
    proxies: list[str] = field(default_factory=list)
    revisions: dict[str, list[str]] = field(default_factory=dict)  # task -> data revisions
    versions: dict[str, list[str]] = field(default_factory=dict)  # name -> versions seen
    taught_strings: bool = False  # an embedded model was taught the scored probes themselves
    machines: dict[str, int] = field(default_factory=dict)  # what records ran on -> how many (NOT_RECORDED: older ones)

    @classmethod
    def of(cls, records: Iterable[Record]) -> "Provenance":
        records = list(records)
        models, proxies = set(), set()
        revisions: dict[str, set[str]] = defaultdict(set)
        versions: dict[str, set[str]] = defaultdict(set)
        machines = Counter(str(r.get("machine") or NOT_RECORDED) for r in records)
        for r in records:
            named = r.get("models") or {}
            models.add(str(named.get("target", setting(r)["target"])))
            if named.get("proxy"):  # only methods that use a proxy name one
                proxies.add(str(named["proxy"]))
            revisions[str(r.get("task"))].add(str(r.get("data_revision")))
            for k, v in (r.get("versions") or {}).items():
                versions[str(k)].add(str(v))
        return cls(sorted(models), sorted(proxies), {t: sorted(revisions[t]) for t in task_order(revisions)},
                   {k: sorted(v) for k, v in sorted(versions.items())}, any(map(taught_strings, records)),
                   dict(sorted(machines.items())))

    def lines(self) -> list[str]:
        proxies = f"; proxy {', '.join(self.proxies)}" if self.proxies else ""
        recall = [TAUGHT_STRINGS_NOTE] if self.taught_strings else []
        ran_on = (["Machines: " + "; ".join(f"{m} (n={n})" for m, n in self.machines.items())]
                  if set(self.machines) - {NOT_RECORDED} else [])
        return recall + [f"Models: target {', '.join(self.models)}{proxies}",
                "Data revision: " + "; ".join(f"{t} {', '.join(v)}" for t, v in self.revisions.items()),
                "Versions: " + "; ".join(f"{k} {', '.join(v)}" for k, v in self.versions.items())] + ran_on


@dataclass
class Table:
    name: str  # file stem
    title: str
    note: str
    columns: list[Column]
    rows: list[tuple[str, list[Stat | None]]]
    provenance: Provenance
    row_header: str = "Method"
    cells_note: str | None = None  # what a cell is, where not the renderer's AGGREGATION_NOTE

    def best(self) -> list[set[int]]:
        """Per column, the indices of the rows to set in bold."""
        out: list[set[int]] = []
        for j, col in enumerate(self.columns):
            shown = {i: round(cells[j].mean, col.digits) for i, (_, cells) in enumerate(self.rows)
                     if cells[j] is not None and cells[j].n}
            if col.higher is None or not shown:
                out.append(set())
                continue
            target = max(shown.values()) if col.higher else min(shown.values())
            out.append({i for i, v in shown.items() if v == target})
        return out


# -- building the paper's tables ------------------------------------------------
def method_rows(records: Sequence[Record]) -> tuple[list[str], Callable[[Record], str]]:
    """Row labels in display order (R2F last, as in the paper) and the record -> label function.

    A label is the method (a negative control's: ``method (control: kind)``, ``--control``)
    plus the setting fields that vary among the method's records, its controls' included (so a
    control's row says which of the method's settings it stands beside).
    """
    by_method: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_method[str(r.get("method"))].append(r)
    fields = {m: [f for f in varying(rs) if f != "control"] for m, rs in by_method.items()}

    def label(r: Record) -> str:
        extra = setting_label(setting(r), fields[str(r.get("method"))])
        return f"{row_name(r)} [{extra}]" if extra else row_name(r)

    methods = {label(r): r.get("method") for r in records}
    return sorted(methods), label


def cell_stats(records: Sequence[Record], metrics: Iterable[str],
               label: Callable[[Record], Hashable]) -> Callable[[Hashable, str, str], Stat | None]:
    """(row label, task, metric) -> the cell's :class:`Stat`: :data:`UNDEFINED` where the row
    has records on the task but none defines the metric, ``None`` where it has none there."""
    key = lambda r: (label(r), r.get("task"))
    stats = {m: group_stats(records, m, key) for m in metrics}
    ran = {key(r) for r in records}
    return lambda lab, task, m: stats[m].get((lab, task)) or (UNDEFINED if (lab, task) in ran else None)


def metric_table(records: Sequence[Record], metrics: Sequence[str], name: str, title: str, note: str = "") -> Table:
    """Methods as rows; for each dataset, one column per metric (one only some tasks define,
    :attr:`~r2f_bench.metric.MetricSpec.by_task`, where a record of the dataset has it). The
    note starts with the metrics' definitions (:data:`r2f_bench.metric.METRICS`)."""
    note = " ".join([f"{line}." for line in legend(metrics)] + ([note] if note else []))
    labels, label = method_rows(records)
    tasks = task_order(r.get("task") for r in records)
    shown = [(t, m) for t in tasks for m in metrics
             if not METRICS[m].by_task or any(r.get("task") == t and r.get(m) is not None for r in records)]
    columns = [Column(f"{t}.{m}", METRICS[m].column_title, t, direction(m), METRICS[m].digits) for t, m in shown]
    cell = cell_stats(records, metrics, label)
    rows = [(lab, [cell(lab, t, m) for t, m in shown]) for lab in labels]
    return Table(name, title, note, columns, rows, Provenance.of(records))


# an attack's three readings (record ``attacks.<spec>.<field>``): title, higher is better
ATTACK_FIELDS = (("usr", "USR after", True), ("recovered", "recovered", False), ("control", "control kept", None))
ATTACKS_NOTE = ("Each attack (--attacks) runs on the unlearned model and, as its control, on the untouched one. USR after: "
                "of the known held-out forget probes, the share still not answered after the attack (higher is better: "
                "what the attack cannot bring back). Recovered: of the probes the deletion forgot, the share the attack "
                "brings back (lower is better). Control kept: of the known probes, the share the untouched model still "
                "answers after the same attack; far below 100, the attack itself destroys what it asks and its other "
                "readings say little. rap is the R2F paper's RAP (its recovered and control are the RAP table's).")


def attack_fields(records: Iterable[Record]) -> list[tuple[str, str, str, bool | None]]:
    """(spec, field, title, higher is better) of every attack the records hold, in spec order."""
    specs = sorted({s for r in records for s in (r.get("attacks") or {})})
    return [(s, f, title, higher) for s in specs for f, title, higher in ATTACK_FIELDS]


def attacks_table(records: Sequence[Record]) -> Table | None:
    """Methods as rows; per dataset and attack, the USR after it, the share it recovers and its
    control (``None`` where no record holds an attack)."""
    if not (fields := attack_fields(records)):
        return None
    labels, label = method_rows(records)
    tasks = task_order(r.get("task") for r in records)
    cell = cell_stats(records, [f"attacks.{s}.{f}" for s, f, _, _ in fields], label)
    columns = [Column(f"{t}.attacks.{s}.{f}", f"{s}: {title}", t, higher) for t in tasks for s, f, title, higher in fields]
    rows = [(lab, [cell(lab, t, f"attacks.{s}.{f}") for t in tasks for s, f, _, _ in fields]) for lab in labels]
    return Table("attacks", "Is it gone or hidden? Every attack, after the deletion and on the untouched model",
                 ATTACKS_NOTE, columns, rows, Provenance.of(records))


def flag_below_floor(table: Table, floor: float = DEFAULT_MIN_GUR) -> Table:
    """Name in the note the rows whose mean GUR on some dataset is below the floor the
    shipped defaults were tuned for: there a method's chosen point no longer holds."""
    gur = [j for j, col in enumerate(table.columns) if col.key.endswith(".gur")]
    flagged = [label for label, cells in table.rows if any(cells[j] and cells[j].mean < floor for j in gur)]
    if flagged:
        table.note += (f" Below the {floor:g}% GUR floor their defaults were tuned for on the dev split "
                       f"(r2f-bench tune): {', '.join(flagged)}; compare them on the frontier (r2f-bench frontier).")
    return table


def level_table(records: Sequence[Record]) -> Table:
    """Held-out USR per probe set (RWKU: FB / QA / AA), beside the pooled USR and the seen USR."""
    labels, label = method_rows(records)
    tasks = task_order(r.get("task") for r in records)
    levels = {t: sorted({s for r in records if r.get("task") == t for s in (r.get("usr_by_level") or {})}) for t in tasks}
    metrics = [(t, f"usr_by_level.{s}", f"USR {s}") for t in tasks for s in levels[t]]
    metrics += [(t, m, METRICS[m].column_title) for t in tasks for m in ("usr", "usr_seen")]
    metrics.sort(key=lambda x: tasks.index(x[0]))
    columns = [Column(f"{t}.{m}", title, t, True, METRICS["usr"].digits) for t, m, title in metrics]
    cell = cell_stats(records, {m for _, m, _ in metrics}, label)
    rows = [(lab, [cell(lab, t, m) for t, m, _ in metrics]) for lab in labels]
    return Table("levels", "Unlearning success per probe set",
                 f"USR on each held-out forget set, pooled (USR) and on the request's own strings (USR seen). "
                 f"{SEEN_NOTE}.", columns, rows, Provenance.of(records))


TARGETS_NOTE = ("Each method row's USR on each target: where the mean over targets comes from. Known: the held-out "
                "forget probes the untouched model answered, which the target's USR counts (n/a where the rows "
                "differ in it: another model, or a request that makes a held-out set seen). The last row pools "
                "every target: each record's USR weighted by its known probes (without chance answers, forgotten "
                "over known probes, all targets' together), beside the sum of known.")
TARGETS_CELLS = ("Cells: a target's mean over its seeds [95% bootstrap CI over seeds, where more than one], n = records; "
                 "the pooled row: n = records, and targets for the sum of known; no bold (a column compares "
                 f"targets, not methods); {NA_NOTE}.")


def target_tables(records: Sequence[Record]) -> list[Table]:
    """``table --per-target``: per dataset, targets as rows (most known probes first), their
    known probes, then each method row's USR on them; last, every target pooled."""
    labels, label = method_rows(records)
    tables = []
    for task in task_order(r.get("task") for r in records):
        rs = [r for r in records if r.get("task") == task]
        by_label: dict[str, list[Record]] = defaultdict(list)
        for r in rs:
            by_label[label(r)].append(r)
        here = [lab for lab in labels if lab in by_label]
        known = _known(rs)
        cell = cell_stats(rs, ["usr"], lambda r: (label(r), str(r.get("target"))))
        targets = sorted({str(r.get("target")) for r in rs}, key=lambda t: (-known[t].mean if known[t].n else 1, t))
        columns = [Column("known", "known", digits=0)] + [Column(f"{lab}.usr", "USR", lab, None) for lab in here]
        rows = [(t, [known[t]] + [cell((lab, t), task, "usr") for lab in here]) for t in targets]
        total = (Stat(sum(k.mean for k in known.values()), None, None, len(known))
                 if all(k.n for k in known.values()) else UNDEFINED)
        rows.append(("all targets, pooled", [total] + [_pooled(by_label[lab]) for lab in here]))
        tables.append(Table(f"targets-{task}", f"USR per target, {task}", TARGETS_NOTE, columns, rows,
                            Provenance.of(rs), row_header="Target", cells_note=TARGETS_CELLS))
    return tables


def _known(records: Sequence[Record]) -> dict[str, Stat]:
    """Per target, its known held-out probes (:data:`UNDEFINED` where its records differ in them)."""
    values: dict[str, list[float | None]] = defaultdict(list)
    for r in records:
        values[str(r.get("target"))].append(r.get("known_forget_probes"))
    return {t: Stat(float(v[0]), None, None, len(v)) if len(set(v)) == 1 and v[0] is not None else UNDEFINED
            for t, v in values.items()}


def _pooled(records: Sequence[Record]) -> Stat:
    """The records' USR weighted by their known held-out probes (USR corrects for chance where a
    benchmark has it, so this is not forgotten over known there)."""
    counted = [r for r in records if r.get("known_forget_probes") and metric_value(r, "usr") is not None]
    known = sum(r["known_forget_probes"] for r in counted)
    if not known:
        return UNDEFINED
    return Stat(sum(r["usr"] * r["known_forget_probes"] for r in counted) / known, None, None, len(counted))
