"""The one record of every reported metric: its title, unit, definition, direction, digits,
valid range and where its item count is. Summaries, legends, tables, plots, the tune
table and the record checks read it; nothing else states these facts.

The core metrics are registered here, in the order every summary and legend shows them.
A method or task with a metric of its own registers it beside its code with
:func:`register_metric` (R2F's ``grad_cosine``: :mod:`r2f_bench.r2f.method`) and names it
in its ``result_columns``. Definitions of how each metric is computed:
:mod:`r2f_bench.engine.metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Literal

Kind = Literal["score", "cost", "diagnostic"]
PERCENT = (0.0, 100.0)
RATIO = (0.0, math.inf)  # a retention ratio in %: may pass 100


@dataclass(frozen=True)
class MetricSpec:
    """A metric a record reports (``record[name]``)."""

    name: str
    title: str
    unit: str  # "%", "cosine", "s", "MB"
    definition: str
    higher: bool | None = None  # whether higher is better (None: neither; never bold, no arrow)
    digits: int = 1  # shown in tables
    range: tuple[float, float] | None = None  # the values a record may hold (None: not checked)
    items: str | None = None  # the record field holding its item count ("a.b": nested)
    by_task: bool = False  # only some tasks define it: shown only where a record has it
    kind: Kind = "score"  # score: a measured outcome (None in a diverged record); cost; diagnostic

    @property
    def column_title(self) -> str:
        """The column header: the title, with the unit where it is not a share or a cosine."""
        return self.title if self.unit in ("%", "cosine") else f"{self.title} ({self.unit})"

    @property
    def legend(self) -> str:
        """``Title (unit): definition``."""
        return f"{self.title} ({self.unit}): {self.definition}"


METRICS: dict[str, MetricSpec] = {}


def register_metric(spec: MetricSpec) -> MetricSpec:
    """Add ``spec`` (the same spec again is a no-op; another under a taken name is refused)."""
    if METRICS.get(spec.name, spec) != spec:
        raise ValueError(f"metric {spec.name!r} is registered already with another definition")
    METRICS[spec.name] = spec
    return spec


def legend(names: Iterable[str]) -> list[str]:
    """One line per registered metric of ``names``: title (unit): definition."""
    return [METRICS[m].legend for m in names if m in METRICS]


for _spec in (
    MetricSpec("usr", "USR", "%", "of the known held-out forget probes, the share no longer answered (the headline; "
               "higher is better)", True, range=PERCENT, items="known_forget_probes"),
    MetricSpec("usr_seen", "USR seen", "%", "the same on the request's own strings", True, range=PERCENT),
    MetricSpec("gur", "GUR", "%", "general utility score after unlearning, as a share of before", True, range=RATIO,
               items="n.utility"),
    MetricSpec("locality", "Locality", "%", "neighbour-probe score after unlearning, as a share of before", True,
               range=RATIO, items="n.locality"),
    MetricSpec("name_control", "Name ctrl", "%", "the same neighbour probes with the target's name before each, after "
               "unlearning as a share of before: below Locality, the method breaks what merely names the target", True,
               range=RATIO, items="n.name_control", by_task=True),
    MetricSpec("rap", "RAP", "%", "of the forgotten held-out probes, the share a short relearning fine-tune brings back "
               "(lower is better)", False, range=PERCENT, items="forgotten_forget_probes"),
    MetricSpec("rap_control", "RAP control", "%", "of the known held-out probes, the share the untouched model still "
               "answers after the same fine-tune", True, range=PERCENT, items="known_forget_probes"),
    # closeness to the untouched model, neither better nor worse (the paper ranks it both ways): unranked
    MetricSpec("identity_alignment", "ID-align", "cosine", "similarity of next-token distributions to the untouched "
               "model's (higher is closer)", None, digits=3, range=(-1.0, 1.0), items="n.identity_prompts"),
    MetricSpec("seconds", "Time", "s", "wall time of one deletion (unlearning only)", False, digits=2,
               range=(0.0, math.inf), kind="cost"),
    MetricSpec("peak_mem_mb", "Peak mem", "MB", "peak memory above the loaded model during one deletion", False,
               range=(-math.inf, math.inf), kind="cost"),
):
    register_metric(_spec)

CORE = tuple(METRICS)  # every run's metrics, in the order summaries and legends show them
