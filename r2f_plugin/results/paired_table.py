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

``--baseline control:KIND`` pairs each row with its own negative control instead (the same
method and setting, ``--control KIND``): the planned comparison of a control, so the family
Holm corrects over is those pairs alone, not every row against one baseline.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Hashable, Sequence

from ..errors import UserError
from ..jsontext import canonical_json
from ..metric import METRICS, legend
from ..engine.config import CONTROLS
from .cells import setting, task_order
from .stats import ALPHA, Record, Stat, clustered, excludes_zero, holm, metric_value, sign_flip_p, too_few_models
from .tables import Column, Provenance, Table, method_rows

OWN_CONTROL = "control:"  # --baseline control:KIND

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


def own_control_pairs(records: Sequence[Record], kind: str) -> list[tuple[str, str]]:
    """(row, its ``kind`` control's row) for every row whose method was also run under
    ``--control kind`` at the same setting; otherwise a :class:`UserError` that says why."""
    if kind not in CONTROLS or kind == "none":
        raise UserError(f"--baseline {OWN_CONTROL}{kind}: no such control; choose "
                        f"{', '.join(OWN_CONTROL + c for c in CONTROLS if c != 'none')}.")
    _, label = method_rows(records)
    key = lambda r: canonical_json({**setting(r), "control": None, "sequence": None,  # the setting it stands beside
                                    "method": r.get("method")})
    controls = {key(r): label(r) for r in records if setting(r)["control"] == kind}
    pairs = dict.fromkeys((label(r), controls[key(r)]) for r in records
                          if setting(r)["control"] == "none" and key(r) in controls)
    if not pairs:
        raise UserError(f"--baseline {OWN_CONTROL}{kind}: no row has its own {kind} control in this store; "
                        f"run the method again with --control {kind} at the same setting.")
    return sorted(pairs)


def row_pairs(records: Sequence[Record], baseline: str) -> list[tuple[str, str]]:
    """(row, the row it is paired against): every other row against ``baseline``'s
    (:func:`baseline_row`), or with ``control:KIND`` each row against its own control
    (:func:`own_control_pairs`)."""
    if baseline.startswith(OWN_CONTROL):
        return own_control_pairs(records, baseline[len(OWN_CONTROL):])
    labels, _ = method_rows(records)
    base = baseline_row(labels, baseline)
    return [(lab, base) for lab in labels if lab != base]


def paired_table(records: Sequence[Record], metrics: Sequence[str], baseline: str) -> Table:
    """Every row minus the row :func:`row_pairs` pairs it with in ``metrics``, per dataset, on
    the units both have the metric for (a unit's records of several code versions, pooled by
    ``--all-versions``, averaged first); n = those units."""
    _, label = method_rows(records)
    pairs = row_pairs(records, baseline)
    pooled: dict[tuple[str, str, str], dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for m in metrics:
            if (v := metric_value(r, m)) is not None:
                pooled[label(r), str(r.get("task")), m][str(r.get("target")), str(r.get("seed"))].append(v)
    scores = {k: {u: statistics.fmean(v) for u, v in units.items()} for k, units in pooled.items()}
    tasks = task_order(r.get("task") for r in records)
    shown = [(t, m) for t in tasks for m in metrics if any(k[1:] == (t, m) for k in scores)]
    cells: dict[tuple[str, str, str], Stat | None] = {}
    p_values: dict[Hashable, float] = {}
    withheld: dict[tuple[str, str, str], str] = {}
    for lab, base in pairs:
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
    for lab, base in pairs:
        named = [title(t, m) for t, m in shown if apart.get((lab, t, m))]
        table_rows.append((f"{lab} − {base}" + (f" (≠0: {', '.join(named)})" if named else ""),
                           [cells[lab, t, m] for t, m in shown]))
    own = baseline.startswith(OWN_CONTROL)
    against = f"each row's own {baseline[len(OWN_CONTROL):]} control" if own else pairs[0][1]
    note = " ".join(f"{line}." for line in legend(dict.fromkeys(m for _, m in shown)))
    note += (f" Paired differences against {against}: on each (target, seed) both rows ran, the row's score minus "
             f"{'the control' if own else against}'s; the mean of those differences with its 95% interval resampling targets and seeds "
             f"(uncorrected), n = the units both have. (≠0: …) names a cell where a two-sided sign-flip test over "
             f"targets, Holm-corrected over the table's {len(p_values)} comparisons at family-wise level {ALPHA:g}, "
             f"calls the difference and its interval excludes 0: an interval can exclude 0 and still not be named "
             f"(on k targets the test's p cannot fall below 2/2^k: on three, 0.25). A positive difference is more "
             f"of the metric (more forgotten for USR).")
    if withheld:
        note += (f" Never named, {len(withheld)} cell(s) ({'; '.join(f'{lab} {title(t, m)}' for lab, t, m in withheld)}):"
                 f" {next(iter(withheld.values()))}.")
    columns = [Column(f"{t}.{m}", METRICS[m].column_title, t, None, METRICS[m].digits) for t, m in shown]
    return Table("paired", f"Paired differences against {against}", note, columns, table_rows, Provenance.of(records),
                 row_header="Difference", cells_note=CELLS_NOTE)
