"""Rendering tables: Markdown, LaTeX (booktabs), CSV and one self-contained HTML page."""

from __future__ import annotations

import csv
import html
import io
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Mapping, Sequence

from .stats import Stat
from ..atomic import atomic_path, write_fully
from ..errors import UserError
from .tables import NA_NOTE, Column, Table


FORMATS = ("md", "latex", "csv", "html")
AGGREGATION_NOTE = ("Cells: mean [95% bootstrap CI] over targets × seeds, n = records (target, seed); "
                    f"best mean per column in bold; {NA_NOTE}.")
NA = "n/a"


def cells_note(table: Table) -> str:
    """What the table's cells are: its own note, or :data:`AGGREGATION_NOTE`."""
    return table.cells_note or AGGREGATION_NOTE


def _num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}"


def _parts(cell: Stat | None, col: Column) -> tuple[str, str, str]:
    """(mean, interval, n) texts; empty strings where absent, :data:`NA` where undefined."""
    if cell is None:
        return "", "", ""
    if not cell.n:
        return NA, "", ""
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
    lines += [""] + [f"- {line}" for line in [cells_note(table)] + table.provenance.lines()]
    return "\n".join(lines) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "→": r"$\rightarrow$", "×": r"$\times$", "±": r"$\pm$", "−": r"$-$", "≠": r"$\neq$",
                  "≥": r"$\geq$", "≤": r"$\leq$"}


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
    notes = [cells_note(table) + " Small numbers: n."] + table.provenance.lines()
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\vspace{2pt}\footnotesize",
              (r" \\" + "\n").join(latex_escape(line) for line in notes), r"\end{table}"]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """One row per table row; for each column ``<key>_mean`` (:data:`NA` where undefined), ``_lo``, ``_hi``,
    ``_n``; provenance as ``#`` lines."""
    buf = io.StringIO()
    for line in [table.title, cells_note(table)] + table.provenance.lines():
        buf.write(f"# {line}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["row"] + [f"{c.key}_{s}" for c in table.columns for s in ("mean", "lo", "hi", "n")])
    for label, cells in table.rows:
        row: list[Any] = [label]
        for cell in cells:
            row += _csv_cells(cell)
        w.writerow(row)
    return buf.getvalue()


def _csv_cells(cell: Stat | None) -> list[Any]:
    """mean, lo, hi, n of one cell for CSV."""
    if cell is None:
        return ["", "", "", ""]
    if not cell.n:
        return [NA, "", "", 0]
    return [repr(cell.mean), "" if cell.lo is None else repr(cell.lo), "" if cell.hi is None else repr(cell.hi), cell.n]


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
    parts += [f'<p class="prov">{e(line)}</p>' for line in [cells_note(table)] + table.provenance.lines()]
    return "\n".join(parts) + "</section>"


def to_html(tables: Sequence[Table], title: str = "r2f-bench results") -> str:
    """One self-contained page (inline CSS, no scripts or external files)."""
    body = "\n".join(to_html_section(t) for t in tables)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head>\n<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")


def stat_json(cell: Stat | None) -> dict[str, Any] | None:
    """A cell as JSON: mean (``None`` where undefined), interval, n, and the targets and seeds behind it."""
    if cell is None:
        return None
    return {"mean": cell.mean if cell.n else None, "lo": cell.lo, "hi": cell.hi, "n": cell.n, "targets": cell.targets,
            "seeds": cell.seeds}


def to_json(tables: Sequence[Table]) -> list[dict[str, Any]]:
    """Every table as a JSON object: its columns, rows of cells by column key, note and provenance."""
    return [{"name": t.name, "title": t.title, "note": t.note, "row_header": t.row_header,
             "columns": [{"key": c.key, "title": c.title, "group": c.group, "higher_is_better": c.higher}
                         for c in t.columns],
             "rows": [{"row": label, "cells": {c.key: stat_json(cell) for c, cell in zip(t.columns, cells)}}
                      for label, cells in t.rows],
             "provenance": t.provenance.lines()} for t in tables]


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


def write_files(out_dir: Path, files: Mapping[str, str]) -> None:
    """Write ``files`` (name -> text) into ``out_dir``, each atomically; none replaces its old
    version before all are written."""
    with ExitStack() as stack:
        temps = {name: stack.enter_context(atomic_path(out_dir / name)) for name in files}
        for name, text in files.items():
            write_fully(temps[name], text.encode("utf-8"))
