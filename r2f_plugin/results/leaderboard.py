"""Every leaderboard table a store's records support, in the paper's order."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ..engine.metrics import ANSWERED_NOTE
from .cost_tables import cost_table, phases_table, transfer_tables
from .stats import Record
from .tables import (ALIGNMENT_NOTE, SEEN_NOTE, Table, attacks_table, flag_below_floor, level_table,
                     metric_table)

def build_tables(records: Sequence[Record], phases: bool = False, reference: str | None = None) -> list[Table]:
    """Every table the records support, in the paper's order (``phases``: then the
    :func:`phases_table`; ``reference``: the method the cost table states ratios to).

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
        flag_below_floor(metric_table(records, ("usr", "usr_seen", "gur", "locality", "name_control"), "table1",
                                      "Unlearning success and utility retention (Table 1)",
                                      f"{SEEN_NOTE}. {ANSWERED_NOTE}")),
        level_table(records),
        metric_table(records, ("rap", "rap_control"), "rap", "Relearning attack (RAP)"),
        *filter(None, [attacks_table(records)]),
        metric_table(records, ("identity_alignment",), "identity_alignment", "Identity alignment (ID-align)",
                     f"{ALIGNMENT_NOTE}."),
        cost_table(records, reference),
    ]
    tables += transfer_tables(records) + ([phases_table(records)] if phases else [])
    if diverged:
        excluded = ", ".join(f"{m} {n}" for m, n in sorted(diverged.items()))
        for t in tables:
            t.note += f" Excluded: {sum(diverged.values())} diverged deletions (non-finite weights; {excluded})."
    return tables
