"""Leaderboard tables in the paper's shape, rendered from the results store.

Every cell aggregates the same way: the mean of a metric over every (target, seed)
record that has it, with its 95% bootstrap confidence interval (percentile, over
those records resampled with replacement) and ``n`` the number of records, printed
as ``mean [lo, hi]``. A cell of one record has no interval. The best cell of a
column is bold, by the metric's direction (:data:`HIGHER_IS_BETTER`); cells equal
to it at the shown precision are bold too.

Rows are methods. Records of one method that differ in setting (hyper-parameters,
views, target or proxy model) are never averaged together: they become separate
rows, labelled by the setting fields that vary among that method's records.

Tables: ``table1`` (USR / GUR per dataset), ``rap``, ``mia``, ``cost``
(per-deletion time and peak memory, with ratios to FullGrad when present) and
``transfer`` (R2F's proxy→target matrix, when the store holds several model pairs).
Formats: Markdown, LaTeX (booktabs), CSV and one self-contained HTML page; each
states the models, data revisions and plugin versions its records came from.
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import math
import random
import statistics
import sys
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

from .errors import UserError
from .storage import atomic_path, write_fully
from .store import Store, canonical_json

HIGHER_IS_BETTER = {"usr": True, "usr_seen": True, "gur": True, "locality": True, "rap": False, "mia": True,
                    "seconds": False, "peak_mem_mb": False}
METRIC_TITLES = {"usr": "USR", "usr_seen": "USR seen", "gur": "GUR", "locality": "Locality", "rap": "RAP",
                 "mia": "MIA", "seconds": "Time (s)", "peak_mem_mb": "Peak mem (MB)"}
DIGITS = {"usr": 1, "usr_seen": 1, "gur": 1, "locality": 1, "rap": 1, "mia": 3, "seconds": 2, "peak_mem_mb": 1}
BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
TASK_ORDER = ("rwku", "wmdp", "muse", "waterdrum")
REFERENCE_METHOD = "fullgrad"
OURS = "r2f"  # listed last; the transfer matrix is of this method
FORMATS = ("md", "latex", "csv", "html")
Record = Mapping[str, Any]


# -- aggregation --------------------------------------------------------------
@dataclass(frozen=True)
class Stat:
    """Mean of ``n`` values with its confidence interval [``lo``, ``hi``] (``None`` below two values)."""

    mean: float
    lo: float | None
    hi: float | None
    n: int


def summarize(values: Sequence[float], seed: int = 0) -> Stat | None:
    """The mean and its 95% percentile-bootstrap interval (seeded: tables are reproducible)."""
    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Stat(mean, None, None, 1)
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP_SAMPLES))
    tail = (1 - CONFIDENCE) / 2
    return Stat(mean, means[int(tail * BOOTSTRAP_SAMPLES)], means[int((1 - tail) * BOOTSTRAP_SAMPLES) - 1],
                len(values))


def _value(record: Record, metric: str) -> float | None:
    """The record's ``metric``; ``a.b`` reads a nested field (e.g. ``usr_by_level.forget_qa``)."""
    v: Any = record
    for part in metric.split("."):
        v = v.get(part) if isinstance(v, Mapping) else None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def aggregate(records: Iterable[Record], metric: str,
              key: Callable[[Record], Hashable]) -> dict[Hashable, Stat]:
    """Group records by ``key``; per group, a :class:`Stat` over its (target, seed) records."""
    groups: dict[Hashable, list[tuple[str, float]]] = defaultdict(list)
    for r in records:
        v = _value(r, metric)
        if v is not None:
            groups[key(r)].append((f"{r.get('target')}/{r.get('seed')}", v))
    # a fixed order of values, so the bootstrap does not depend on the store's order
    return {k: summarize([v for _, v in sorted(vs)]) for k, vs in groups.items()}


def setting(record: Record) -> dict[str, Any]:
    """What distinguishes runs of one method besides task, seed and target.

    The request is what the record says it was made of (``request_source``: RWKU's
    corpus and its FB probes never share a row). Hyper-parameters are the resolved ones a record carries (``params``: defaults
    included, so runs that differ only in a default never share a row), else the
    configured overrides. Models are identified by the spec the run was given
    (``config.model`` / ``config.proxy``), not by the descriptive labels in
    ``record["models"]``, which may differ between tasks for the same model (e.g.
    "taught N facts").
    """
    config, models = record.get("config", {}), record.get("models", {})
    params = record.get("params") or config.get("params") or {}
    return {"params": dict(params), "views": config.get("views"),
            "target": config.get("model", models.get("target")), "proxy": config.get("proxy", models.get("proxy")),
            "request": record.get("request_source"), "retain_items": config.get("retain_items"),
            "paraphraser": config.get("paraphraser")}


SETTING_FIELDS = ("params", "views", "target", "proxy", "request", "retain_items", "paraphraser")


def varying(records: Sequence[Record], fields: Sequence[str] = SETTING_FIELDS) -> list[str]:
    """The setting fields that take more than one value among ``records``; for
    ``params``, each varying hyper-parameter as ``params.<name>``."""
    differs = lambda values: len({canonical_json(v) for v in values}) > 1
    out: list[str] = []
    for f in fields:
        if f == "params":
            names = sorted({k for r in records for k in setting(r)["params"]})
            out += [f"params.{k}" for k in names if differs(setting(r)["params"].get(k) for r in records)]
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
        elif f in s:
            parts.append(f"{f}={s[f]}")
    return ", ".join(parts)


def task_order(tasks: Iterable[str]) -> list[str]:
    rank = {t: i for i, t in enumerate(TASK_ORDER)}
    return sorted(set(tasks), key=lambda t: (rank.get(t, len(rank)), t))


# -- the table model ----------------------------------------------------------
@dataclass(frozen=True)
class Column:
    key: str  # machine name, e.g. "rwku.usr" (CSV headers)
    title: str  # e.g. "USR"
    group: str = ""  # spanning header, e.g. the dataset
    higher: bool | None = None  # direction for bold; None: never bold
    digits: int = 1
    ratio: bool = False  # a plain ratio (×), no interval or n


@dataclass
class Provenance:
    targets: list[str] = field(default_factory=list)
    proxies: list[str] = field(default_factory=list)
    revisions: dict[str, list[str]] = field(default_factory=dict)  # task -> data revisions
    versions: dict[str, list[str]] = field(default_factory=dict)  # name -> versions seen

    @classmethod
    def of(cls, records: Iterable[Record]) -> "Provenance":
        targets, proxies = set(), set()
        revisions: dict[str, set[str]] = defaultdict(set)
        versions: dict[str, set[str]] = defaultdict(set)
        for r in records:
            models = r.get("models") or {}
            targets.add(str(models.get("target", setting(r)["target"])))
            proxies.add(str(models.get("proxy", setting(r)["proxy"])))
            revisions[str(r.get("task"))].add(str(r.get("data_revision")))
            for k, v in (r.get("versions") or {}).items():
                versions[str(k)].add(str(v))
        return cls(sorted(targets), sorted(proxies), {t: sorted(revisions[t]) for t in task_order(revisions)},
                   {k: sorted(v) for k, v in sorted(versions.items())})

    def lines(self) -> list[str]:
        return [f"Models: target {', '.join(self.targets)}; proxy {', '.join(self.proxies)}",
                "Data revision: " + "; ".join(f"{t} {', '.join(v)}" for t, v in self.revisions.items()),
                "Versions: " + "; ".join(f"{k} {', '.join(v)}" for k, v in self.versions.items())]


@dataclass
class Table:
    name: str  # file stem
    title: str
    note: str
    columns: list[Column]
    rows: list[tuple[str, list[Stat | None]]]
    provenance: Provenance
    row_header: str = "Method"

    def best(self) -> list[set[int]]:
        """Per column, the indices of the rows to set in bold."""
        out: list[set[int]] = []
        for j, col in enumerate(self.columns):
            shown = {i: round(cells[j].mean, col.digits) for i, (_, cells) in enumerate(self.rows)
                     if cells[j] is not None}
            if col.higher is None or not shown:
                out.append(set())
                continue
            target = max(shown.values()) if col.higher else min(shown.values())
            out.append({i for i, v in shown.items() if v == target})
        return out


# -- building the paper's tables ------------------------------------------------
def method_rows(records: Sequence[Record]) -> tuple[list[str], Callable[[Record], str]]:
    """Row labels in display order (R2F last, as in the paper) and the record -> label function.

    A label is the method plus the setting fields that vary among that method's records.
    """
    by_method: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_method[str(r.get("method"))].append(r)
    fields = {m: varying(rs) for m, rs in by_method.items()}

    def label(r: Record) -> str:
        method = str(r.get("method"))
        extra = setting_label(setting(r), fields[method])
        return f"{method} [{extra}]" if extra else method

    methods = {label(r): r.get("method") for r in records}
    return sorted(methods, key=lambda lab: (methods[lab] == OURS, lab)), label


def metric_table(records: Sequence[Record], metrics: Sequence[str], name: str, title: str, note: str) -> Table:
    """Methods as rows; for each dataset, one column per metric."""
    labels, label = method_rows(records)
    tasks = task_order(r.get("task") for r in records)
    columns = [Column(f"{t}.{m}", METRIC_TITLES[m], t, HIGHER_IS_BETTER[m], DIGITS[m]) for t in tasks for m in metrics]
    stats = {m: aggregate(records, m, lambda r: (label(r), r.get("task"))) for m in metrics}
    rows = [(lab, [stats[m].get((lab, t)) for t in tasks for m in metrics]) for lab in labels]
    return Table(name, title, note, columns, rows, Provenance.of(records))


def level_table(records: Sequence[Record]) -> Table:
    """Held-out USR per probe set (RWKU: FB / QA / AA), beside the pooled USR and the seen USR."""
    labels, label = method_rows(records)
    tasks = task_order(r.get("task") for r in records)
    levels = {t: sorted({s for r in records if r.get("task") == t for s in (r.get("usr_by_level") or {})}) for t in tasks}
    metrics = [(t, f"usr_by_level.{s}", f"USR {s}") for t in tasks for s in levels[t]]
    metrics += [(t, m, METRIC_TITLES[m]) for t in tasks for m in ("usr", "usr_seen")]
    metrics.sort(key=lambda x: tasks.index(x[0]))
    columns = [Column(f"{t}.{m}", title, t, True, DIGITS["usr"]) for t, m, title in metrics]
    stats = {m: aggregate(records, m, lambda r: (label(r), r.get("task"))) for m in {m for _, m, _ in metrics}}
    rows = [(lab, [stats[m].get((lab, t)) for t, m, _ in metrics]) for lab in labels]
    return Table("levels", "Unlearning success per probe set",
                 "USR on each held-out forget set, pooled (USR) and on the request's own strings (USR seen).",
                 columns, rows, Provenance.of(records))


def cost_table(records: Sequence[Record]) -> Table:
    """Per-deletion time and peak memory per dataset, with ratios to FullGrad when it was run."""
    table = metric_table(records, ("seconds", "peak_mem_mb"), "cost", "Per-deletion time and memory",
                         "Wall time and peak extra memory of one deletion (unlearning only).")
    ref = next((i for i, (lab, _) in enumerate(table.rows) if lab == REFERENCE_METHOD), None)
    if ref is None:
        ref = next((i for i, (lab, _) in enumerate(table.rows) if lab.startswith(REFERENCE_METHOD + " [")), None)
    if ref is None:
        return table
    columns: list[Column] = []
    rows = [(lab, []) for lab, _ in table.rows]
    for j, col in enumerate(table.columns):
        columns += [col, Column(col.key + "_vs_" + REFERENCE_METHOD, f"× {REFERENCE_METHOD}", col.group,
                                None, 2, ratio=True)]
        base = table.rows[ref][1][j]
        for (lab, cells), (_, new) in zip(table.rows, rows):
            c = cells[j]
            ratio = Stat(c.mean / base.mean, None, None, c.n) if c and base and base.mean > 0 else None
            new += [c, ratio]
    table.columns, table.rows = columns, rows
    table.note += f" × {REFERENCE_METHOD}: ratio of the mean to {REFERENCE_METHOD}'s."
    return table


def transfer_tables(records: Sequence[Record]) -> list[Table]:
    """R2F's proxy→target matrices: targets as rows, proxies × (USR, GUR) as columns, per dataset."""
    r2f = [r for r in records if r.get("method") == OURS]
    by_case: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in r2f:
        s = setting(r)
        by_case[(r.get("task"), canonical_json([s["params"], s["views"]]))].append(r)
    tables: list[Table] = []
    rank = {t: i for i, t in enumerate(task_order(t for t, _ in by_case))}
    for (task, _), rs in sorted(by_case.items(), key=lambda kv: (rank[kv[0][0]], kv[0][1])):
        pairs = {(setting(r)["target"], setting(r)["proxy"]) for r in rs}
        targets, proxies = sorted({t for t, _ in pairs}), sorted({p for _, p in pairs})
        if len(pairs) < 2:
            continue
        stats = {m: aggregate(rs, m, lambda r: (setting(r)["target"], setting(r)["proxy"])) for m in ("usr", "gur")}
        columns = [Column(f"{p}.{m}", METRIC_TITLES[m], p, HIGHER_IS_BETTER[m], DIGITS[m])
                   for p in proxies for m in ("usr", "gur")]
        rows = [(t, [stats[m].get((t, p)) for p in proxies for m in ("usr", "gur")]) for t in targets]
        extra = setting_label(setting(rs[0]), varying([r for r in r2f if r.get("task") == task], ("params", "views")))
        same = sum(t.name.startswith(f"transfer-{task}") for t in tables)
        tables.append(Table(f"transfer-{task}" + (f"-{same + 1}" if same else ""),
                            f"Proxy → target transfer, {task}" + (f" ({extra})" if extra else ""),
                            "Rows: target model; column groups: proxy model. R2F only.",
                            columns, rows, Provenance.of(rs), row_header="Target \\ proxy"))
    return tables


def build_tables(records: Sequence[Record]) -> list[Table]:
    """Every table the records support, in the paper's order.

    Only evaluation-split records count: dev-split runs (``r2f-bench tune``) choose
    hyper-parameters and never enter a leaderboard."""
    records = [r for r in records if r.get("config", {}).get("split", "eval") == "eval"]
    diverged = defaultdict(int)
    for r in records:
        if r.get("status", "ok") != "ok":
            diverged[str(r.get("method"))] += 1
    records = [r for r in records if r.get("status", "ok") == "ok"]
    if not records:
        return []
    tables = [
        metric_table(records, ("usr", "usr_seen", "gur", "locality"), "table1",
                     "Unlearning success and utility retention (Table 1)",
                     "USR: % of known held-out forget probes no longer answered (the headline); USR seen: the same "
                     "on the request's own strings; GUR: % of general utility kept; Locality: % of neighbour "
                     "knowledge kept."),
        level_table(records),
        metric_table(records, ("rap",), "rap", "Relearning attack (RAP)",
                     "% of known held-out forget probes answered after a short relearning fine-tune; lower is better."),
        metric_table(records, ("mia",), "mia", "Model identity alignment (MIA)",
                     "Cosine similarity of next-token distributions to the untouched model; "
                     "higher is closer (the paper's Table 3 marks it lower-is-better)."),
        cost_table(records),
    ]
    tables += transfer_tables(records)
    if diverged:
        excluded = ", ".join(f"{m} {n}" for m, n in sorted(diverged.items()))
        for t in tables:
            t.note += f" Excluded: {sum(diverged.values())} diverged deletions (non-finite weights; {excluded})."
    return tables


# -- rendering ----------------------------------------------------------------
AGGREGATION_NOTE = ("Cells: mean [95% bootstrap CI] over targets × seeds, n = records (target, seed); "
                    "best mean per column in bold.")


def _num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}"


def _parts(cell: Stat | None, col: Column) -> tuple[str, str, str]:
    """(mean, interval, n) texts; empty strings where absent."""
    if cell is None:
        return "", "", ""
    if col.ratio:
        return f"{_num(cell.mean, col.digits)}×", "", ""
    ci = f"[{_num(cell.lo, col.digits)}, {_num(cell.hi, col.digits)}]" if cell.lo is not None else ""
    return _num(cell.mean, col.digits), ci, str(cell.n)


def _arrow(col: Column, up: str, down: str) -> str:
    return "" if col.higher is None else (" " + (up if col.higher else down))


def _header_title(col: Column) -> str:
    return f"{col.group} {col.title}".strip()


def to_markdown(table: Table) -> str:
    best = table.best()
    head = [table.row_header] + [_header_title(c) + _arrow(c, "↑", "↓") for c in table.columns]
    lines = [f"### {table.title}", "", table.note, "", "| " + " | ".join(head) + " |",
             "|" + "|".join([":---"] + ["---:"] * len(table.columns)) + "|"]
    for i, (label, cells) in enumerate(table.rows):
        out = [label.replace("|", "\\|")]
        for j, (cell, col) in enumerate(zip(cells, table.columns)):
            mean, ci, n = _parts(cell, col)
            if not mean:
                out.append("–")
                continue
            out.append((f"**{mean}**" if i in best[j] else mean) + (f" {ci}" if ci else "") + (f" (n={n})" if n else ""))
        lines.append("| " + " | ".join(out) + " |")
    lines += [""] + [f"- {line}" for line in [AGGREGATION_NOTE] + table.provenance.lines()]
    return "\n".join(lines) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "→": r"$\rightarrow$", "×": r"$\times$", "±": r"$\pm$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))


def _groups(columns: Sequence[Column]) -> list[tuple[str, int]]:
    """Consecutive runs of equal group names: (group, span)."""
    spans: list[tuple[str, int]] = []
    for col in columns:
        if spans and spans[-1][0] == col.group:
            spans[-1] = (col.group, spans[-1][1] + 1)
        else:
            spans.append((col.group, 1))
    return spans


def to_latex(table: Table) -> str:
    best = table.best()
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{latex_escape(table.title)}. {latex_escape(table.note)}}}",
             rf"\label{{tab:r2f-{table.name}}}", r"\begin{tabular}{l" + "r" * len(table.columns) + "}", r"\toprule"]
    spans = _groups(table.columns)
    if any(g for g, _ in spans):
        cells, rules, start = [""], [], 2
        for group, span in spans:
            cells.append(rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(group)}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        lines += [" & ".join(cells) + r" \\", " ".join(rules)]
    lines.append(" & ".join([latex_escape(table.row_header)] + [
        latex_escape(c.title) + _arrow(c, r"$\uparrow$", r"$\downarrow$") for c in table.columns]) + r" \\")
    lines.append(r"\midrule")
    for i, (label, cells) in enumerate(table.rows):
        out = [latex_escape(label)]
        for j, (cell, col) in enumerate(zip(cells, table.columns)):
            mean, ci, n = _parts(cell, col)
            if not mean:
                out.append("--")
                continue
            value = rf"\textbf{{{latex_escape(mean)}}}" if i in best[j] else latex_escape(mean)
            out.append(value + (rf" {{\scriptsize {ci}}}" if ci else "") + (rf" {{\scriptsize ({n})}}" if n else ""))
        lines.append(" & ".join(out) + r" \\")
    notes = [AGGREGATION_NOTE + " Small numbers: n."] + table.provenance.lines()
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\vspace{2pt}\footnotesize",
              (r" \\" + "\n").join(latex_escape(line) for line in notes), r"\end{table}"]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """One row per table row; for each column ``<key>_mean``, ``_lo``, ``_hi``, ``_n``; provenance as ``#`` lines."""
    buf = io.StringIO()
    for line in [table.title, AGGREGATION_NOTE] + table.provenance.lines():
        buf.write(f"# {line}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["row"] + [f"{c.key}_{s}" for c in table.columns for s in ("mean", "lo", "hi", "n")])
    for label, cells in table.rows:
        row: list[Any] = [label]
        for cell in cells:
            row += ["", "", "", ""] if cell is None else [
                repr(cell.mean), "" if cell.lo is None else repr(cell.lo), "" if cell.hi is None else repr(cell.hi), cell.n]
        w.writerow(row)
    return buf.getvalue()


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 .3em}th,td{padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}thead tr:last-child th{border-bottom:1px solid #444}
table{border-top:2px solid #444;border-bottom:2px solid #444}.n{color:#777;font-size:.8em}
.note,.prov{color:#555;font-size:.9em;margin:.2em 0}section{margin-bottom:2.5em}"""


def to_html_section(table: Table) -> str:
    best = table.best()
    e = html.escape
    parts = [f'<section id="{e(table.name)}"><h2>{e(table.title)}</h2>', f'<p class="note">{e(table.note)}</p>',
             "<table><thead>"]
    spans = _groups(table.columns)
    if any(g for g, _ in spans):
        parts.append("<tr><th></th>" + "".join(f'<th colspan="{s}" style="text-align:center">{e(g)}</th>'
                                               for g, s in spans) + "</tr>")
    parts.append(f"<tr><th>{e(table.row_header)}</th>" + "".join(
        f"<th>{e(c.title + _arrow(c, '↑', '↓'))}</th>" for c in table.columns) + "</tr></thead><tbody>")
    for i, (label, cells) in enumerate(table.rows):
        tds = [f"<td>{e(label)}</td>"]
        for j, (cell, col) in enumerate(zip(cells, table.columns)):
            mean, ci, n = _parts(cell, col)
            value = f"<b>{e(mean)}</b>" if mean and i in best[j] else e(mean or "–")
            tds.append(f"<td>{value}" + (f" {e(ci)}" if ci else "") + (f' <span class="n">(n={n})</span>' if n else "") + "</td>")
        parts.append("<tr>" + "".join(tds) + "</tr>")
    parts.append("</tbody></table>")
    parts += [f'<p class="prov">{e(line)}</p>' for line in [AGGREGATION_NOTE] + table.provenance.lines()]
    return "\n".join(parts) + "</section>"


def to_html(tables: Sequence[Table], title: str = "r2f-bench results") -> str:
    """One self-contained page (inline CSS, no scripts or external files)."""
    body = "\n".join(to_html_section(t) for t in tables)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head>\n<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")


def render(tables: Sequence[Table], fmt: str) -> dict[str, str]:
    """File name -> content for one format (CSV: one file per table)."""
    if fmt == "md":
        return {"tables.md": "\n".join(to_markdown(t) for t in tables)}
    if fmt == "latex":
        return {"tables.tex": "% requires \\usepackage{booktabs}\n" + "\n".join(to_latex(t) for t in tables)}
    if fmt == "csv":
        return {f"{t.name}.csv": to_csv(t) for t in tables}
    if fmt == "html":
        return {"tables.html": to_html(tables)}
    raise UserError(f"unknown table format {fmt!r}; choose one of {', '.join(FORMATS)} or all.")


# -- command line -------------------------------------------------------------
def invalid(record: Record) -> str | None:
    """Why ``record`` cannot enter a table (``None``: it can)."""
    for name, kind in (("method", str), ("task", str), ("target", str), ("seed", int), ("config", dict)):
        if not isinstance(record.get(name), kind):
            return f"field {name!r} missing or not a {kind.__name__}"
    for metric in HIGHER_IS_BETTER:
        v = record.get(metric)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"metric {metric!r} is {v!r}, not a number"
    return None


def table_command(args: argparse.Namespace) -> None:
    store = Store(args.output)
    records, skipped = [], []
    for r in store.records():
        why = invalid(r)
        if why:
            skipped.append(f"{r.get('key', '?')[:12]}: {why}")
        else:
            records.append(r)
    for line in skipped:
        print(f"warning: skipped record {line}", file=sys.stderr)
    if not records:
        raise UserError(f"no results in {store.jobs}; run `r2f-bench sweep --output {args.output}` first, or point --output at a results store.")
    tables = build_tables(records)
    out_dir = Path(args.out_dir) if args.out_dir else store.root / "tables"
    # every format is rendered before anything is written, then the files are replaced together
    files = {name: text for fmt in (FORMATS if args.format == "all" else [args.format])
             for name, text in render(tables, fmt).items()}
    with ExitStack() as stack:
        temps = {name: stack.enter_context(atomic_path(out_dir / name)) for name in files}
        for name, text in files.items():
            write_fully(temps[name], text.encode("utf-8"))
    for name in files:
        print(f"wrote {out_dir / name}")
    print(f"{len(records)} records in the tables" + (f"; {len(skipped)} skipped (see the warnings above)" if skipped else ""))
    if args.format in ("md", "all"):
        print()
        print(files["tables.md"])


def add_table_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``table`` to the CLI's subparsers (``args.func(args)`` runs it)."""
    p = subparsers.add_parser("table", help="render leaderboard tables from a results store",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--output", default="r2f-output", help="results store directory (default r2f-output)")
    p.add_argument("--format", choices=FORMATS + ("all",), default="all", help="output format (default all)")
    p.add_argument("--out-dir", default=None, help="where to write the tables (default <output>/tables)")
    p.set_defaults(func=table_command)
    return p
