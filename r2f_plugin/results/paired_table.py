"""The paired table: each row's scores minus a baseline row's on the (target, seed) units
both ran.

Two cells of the score table whose intervals overlap may still differ: most of a score's
spread is between targets (one person is easier to forget than another), and it cancels
when two methods are read on the same targets. Here every cell is the mean of per-unit
differences with its interval resampling targets and seeds (:func:`~.stats.clustered`).
A row names the cells that differ: the sign-flip test over targets
(:func:`~.stats.sign_flip_p`), Holm-corrected over the whole table, calls the difference,
and the interval, which also resamples taught models, excludes 0. Not the bootstrap's own
test: three targets whose differences share a sign give a percentile interval that excludes
0, while the sign-flip test on three cannot go below p = 0.25. A cell resting on fewer than
:data:`~.stats.MIN_MODELS` taught models is never named (:func:`~.stats.too_few_models`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Hashable, Sequence

from ..errors import UserError
from ..metric import METRICS, legend
from .cells import task_order
from .stats import ALPHA, Record, Stat, clustered, excludes_zero, holm, metric_value, sign_flip_p, too_few_models
from .tables import Column, Provenance, Table, method_rows

CELLS_NOTE = "Cells: mean difference [95% bootstrap CI, targets and seeds resampled] (n = units both rows ran)."


def baseline_row(labels: Sequence[str], baseline: str) -> str:
    """The one row label ``baseline`` names: the label itself, or a method with one row;
    otherwise a :class:`UserError` that says what to pass instead."""
    if baseline in labels:
        return baseline
    rows = [lab for lab in labels if lab.startswith(baseline + " [")]
    if len(rows) == 1:
        return rows[0]
    if rows:
        raise UserError(f"--baseline {baseline}: {len(rows)} rows ({'; '.join(rows)}); name one of them")
    raise UserError(f"--baseline {baseline}: no row of the table; choose one of {', '.join(labels)}")


def paired_table(records: Sequence[Record], metrics: Sequence[str], baseline: str) -> Table:
    """Every other row minus ``baseline``'s row (:func:`baseline_row`) in ``metrics``, per
    dataset, on the units both have the metric for (a unit's records of several code versions,
    pooled by ``--all-versions``, averaged first); n = those units."""
    labels, label = method_rows(records)
    base = baseline_row(labels, baseline)
    pooled: dict[tuple[str, str, str], dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for m in metrics:
            if (v := metric_value(r, m)) is not None:
                pooled[label(r), str(r.get("task")), m][str(r.get("target")), str(r.get("seed"))].append(v)
    scores = {k: {u: statistics.fmean(v) for u, v in units.items()} for k, units in pooled.items()}
    tasks = task_order(r.get("task") for r in records)
    shown = [(t, m) for t in tasks for m in metrics if any(k[1:] == (t, m) for k in scores)]
    rows = [lab for lab in labels if lab != base]
    cells: dict[tuple[str, str, str], Stat | None] = {}
    p_values: dict[Hashable, float] = {}
    withheld: dict[tuple[str, str, str], str] = {}
    for lab in rows:
        mine_records = [r for r in records if label(r) in (lab, base)]
        for t, m in shown:
            mine, theirs = scores.get((lab, t, m), {}), scores.get((base, t, m), {})
            units = sorted(mine.keys() & theirs.keys())
            diffs = [mine[u] - theirs[u] for u in units]
            cells[lab, t, m] = clustered(diffs, *zip(*units)) if units else None
            if len({target for target, _ in units}) < 2:
                continue
            if why := too_few_models(mine_records, len({seed for _, seed in units})):
                withheld[lab, t, m] = why
            else:
                p_values[lab, t, m] = sign_flip_p(diffs, [target for target, _ in units])
    called = holm(p_values)
    apart = {k: called[k] and excludes_zero(cells[k]) for k in called}
    title = lambda t, m: f"{t} {METRICS[m].column_title}" if len(tasks) > 1 else METRICS[m].column_title
    table_rows = []
    for lab in rows:
        named = [title(t, m) for t, m in shown if apart.get((lab, t, m))]
        table_rows.append((f"{lab} − {base}" + (f" (≠0: {', '.join(named)})" if named else ""),
                           [cells[lab, t, m] for t, m in shown]))
    note = " ".join(f"{line}." for line in legend(dict.fromkeys(m for _, m in shown)))
    note += (f" Paired differences against {base}: on each (target, seed) both rows ran, the row's score minus "
             f"{base}'s; the mean of those differences with its 95% interval resampling targets and seeds "
             f"(uncorrected), n = the units both have. (≠0: …) names a cell where a two-sided sign-flip test over "
             f"targets, Holm-corrected over the table's {len(p_values)} comparisons at family-wise level {ALPHA:g}, "
             f"calls the difference and its interval excludes 0: an interval can exclude 0 and still not be named "
             f"(on k targets the test's p cannot fall below 2/2^k: on three, 0.25). A positive difference is more "
             f"of the metric (more forgotten for USR).")
    if withheld:
        note += (f" Never named, {len(withheld)} cell(s) ({'; '.join(f'{lab} {title(t, m)}' for lab, t, m in withheld)}):"
                 f" {next(iter(withheld.values()))}.")
    columns = [Column(f"{t}.{m}", METRICS[m].column_title, t, None, METRICS[m].digits) for t, m in shown]
    return Table("paired", f"Paired differences against {base}", note, columns, table_rows, Provenance.of(records),
                 row_header="Difference", cells_note=CELLS_NOTE)
