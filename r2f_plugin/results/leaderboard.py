"""Every leaderboard table a store's records support, in the paper's order."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ..engine.metrics import ANSWERED_NOTE
from ..errors import UserError
from .cells import scored
from .cost_tables import cost_table, phases_table, transfer_tables
from .paired_table import baseline_row, paired_table, row_pairs
from .stats import Record
from .tables import (ALIGNMENT_NOTE, SEEN_NOTE, Table, attacks_table, flag_below_floor, level_table,
                     method_rows, metric_table, target_tables)

SCORES = ("usr", "usr_seen", "gur", "locality", "name_control")  # Table 1's metrics, and the paired table's


def build_tables(records: Sequence[Record], phases: bool = False, reference: str | None = None,
                 baseline: str | None = None, per_target: bool = False) -> list[Table]:
    """Every table the records support, in the paper's order (``phases``: then the
    :func:`phases_table`; ``per_target``: then the :func:`target_tables`; ``reference``: the
    method the cost table states ratios to, and the paired table's baseline where it names one
    row; ``baseline``: that baseline, which must name a row, or ``control:KIND`` a control some
    row has, :func:`~.paired_table.row_pairs`: :class:`UserError` otherwise).

    Only evaluation-split records count: dev-split runs (``r2f-bench tune``) choose
    hyper-parameters and never enter a leaderboard."""
    records, diverged = scored(records)
    if not records:
        return []
    labels, _ = method_rows(records)
    if baseline is not None:
        row_pairs(records, baseline)  # a baseline the user named must name a row, or a control some row has
    elif reference is not None:
        try:
            baseline = baseline_row(labels, reference)
        except UserError:
            pass  # the default baseline names no single row: no paired table
    pairs = [paired_table(records, SCORES, baseline)] if baseline is not None and len(labels) > 1 else []
    tables = [
        flag_below_floor(metric_table(records, SCORES, "table1", "Unlearning success and utility retention (Table 1)",
                                      f"{SEEN_NOTE}. {ANSWERED_NOTE}")),
        *pairs,
        level_table(records),
        metric_table(records, ("rap", "rap_control"), "rap", "Relearning attack (RAP)"),
        *filter(None, [attacks_table(records)]),
        metric_table(records, ("identity_alignment",), "identity_alignment", "Identity alignment (ID-align)",
                     f"{ALIGNMENT_NOTE}."),
        cost_table(records, reference),
    ]
    tables += transfer_tables(records) + ([phases_table(records)] if phases else [])
    tables += target_tables(records) if per_target else []
    if diverged:
        excluded = ", ".join(f"{m} {n}" for m, n in sorted(diverged.items()))
        for t in tables:
            t.note += f" Excluded: {sum(diverged.values())} diverged deletions (non-finite weights; {excluded})."
    if mixed := pooled_revisions(records):
        for t in tables:
            t.note += f" Rows pooling records of several data revisions (other data, or the data changed): {mixed}."
    return tables


def pooled_revisions(records: Sequence[Record]) -> str:
    """Each row and task whose records come from more than one data revision, with how many
    (a cell keeps its newest record, but a row's targets may stand on different data)."""
    _, label = method_rows(records)
    revisions = defaultdict(set)
    for r in records:
        revisions[(label(r), str(r.get("task")))].add(r.get("data_revision"))
    return "; ".join(f"{lab} on {task} ({len(revs)})" for (lab, task), revs in sorted(revisions.items())
                     if len(revs) > 1)
