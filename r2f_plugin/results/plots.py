"""Ablation plots: USR, GUR, RAP and identity alignment against R2F's LoRA rank and number of views.

One figure per ablation (``rank.png``, ``views.png``): a row per metric, a column
per dataset, points at the mean over targets × seeds with 95% bootstrap intervals (aggregated as in
:mod:`r2f_bench.results.tables`). Records that differ in anything but the ablated value
(method, other hyper-parameters, models) are drawn as separate lines; only lines
with at least two ablated values are drawn. A rank point needs an explicit
``rank`` parameter (``r2f-bench sweep --ablation rank`` sets it).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from ..atomic import atomic_path
from ..jsontext import canonical_json
from ..metric import METRICS
from .cells import row_name, scored, setting, setting_label, task_order, varying
from .stats import Record, group_stats
from .tables import direction

PLOTTED = ("usr", "gur", "rap", "identity_alignment")  # one row of panels each
MARKERS = ("o", "s", "^", "D")  # frontier lines: a new marker and line style for every ten methods (colours repeat)
LINESTYLES = ("-", "--", "-.", ":")
ARROWS = {True: " ↑", False: " ↓", None: ""}  # by the metric's direction (r2f_bench.results.tables.direction)


def _rank(r: Record) -> float | None:
    value = setting(r)["params"].get("rank")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _views(r: Record) -> float | None:
    v = setting(r)["views"]
    return float(v) if isinstance(v, (int, float)) else None


def _rest(axis: str) -> Callable[[Record], dict[str, Any]]:
    """Everything but the ablated value: what identifies one line."""
    def rest(r: Record) -> dict[str, Any]:
        s = setting(r)
        if axis == "rank":
            s["params"] = {k: v for k, v in s["params"].items() if k != "rank"}
        else:
            s.pop("views")
        return {"method": row_name(r), **s}
    return rest


AXES: dict[str, tuple[Callable[[Record], float | None], str]] = {
    "rank": (_rank, "LoRA rank"),
    "views": (_views, "views"),
}


def series(records: Sequence[Record], axis: str) -> dict[tuple[str, str], dict[str, dict[float, Any]]]:
    """(task, line label) -> metric -> x -> Stat, for lines with at least two x values, from the
    records a table counts (:func:`~.cells.scored`). A line is labelled by every setting field that
    varies among the points but the ablated one, so two lines never share a label."""
    x_of, _ = AXES[axis]
    rest = _rest(axis)
    points = [r for r in scored(records)[0] if x_of(r) is not None]
    if not points:
        return {}
    ablated = "params.rank" if axis == "rank" else "views"
    fields = ["method"] + [f for f in varying(points) if f not in (ablated, "control")]  # control: in the method

    def line(r: Record) -> str:
        rs = rest(r)
        parts = [str(rs["method"])] + [setting_label(rs, [f]) for f in fields[1:]]
        return ", ".join(p for p in parts if p)

    def key(r: Record) -> Hashable:
        return r.get("task"), line(r), canonical_json(rest(r)), x_of(r)

    out: dict[tuple[str, str], dict[str, dict[float, Any]]] = defaultdict(lambda: defaultdict(dict))
    for metric in PLOTTED:
        for (task, label, _, x), stat in group_stats(points, metric, key).items():
            out[(task, label)][metric][x] = stat
    return {k: v for k, v in out.items() if len({x for m in v.values() for x in m}) >= 2}


def plot_ablation(records: Sequence[Record], axis: str, path: Path) -> bool:
    """Draw one ablation to ``path`` (PNG, written atomically); ``False`` if the records hold none."""
    data = series(records, axis)
    if not data:
        return False
    fig = ablation_figure(data, axis)
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return True


def ablation_figure(data: dict[tuple[str, str], dict[str, dict[float, Any]]], axis: str) -> Any:
    """The figure of one ablation's :func:`series`: a row per metric, a column per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = task_order(t for t, _ in data)
    lines = sorted({label for _, label in data})
    fig, axes = plt.subplots(len(PLOTTED), len(tasks), figsize=(3.6 * len(tasks) + 0.6, 2.4 * len(PLOTTED)),
                             squeeze=False, sharex=True)
    for col, task in enumerate(tasks):
        axes[0][col].set_title(task)
        axes[-1][col].set_xlabel(AXES[axis][1])
        for row, metric in enumerate(PLOTTED):
            ax = axes[row][col]
            for k, label in enumerate(lines):
                stats = data.get((task, label), {}).get(metric, {})
                if not stats:
                    continue
                xs = sorted(stats)
                ax.errorbar(xs, [stats[x].mean for x in xs], yerr=[[stats[x].mean - (stats[x].lo if stats[x].lo is not None else stats[x].mean) for x in xs],
                                     [(stats[x].hi if stats[x].hi is not None else stats[x].mean) - stats[x].mean for x in xs]],
                            marker="o", capsize=3, label=label, color=f"C{k % 10}")
            if col == 0:
                ax.set_ylabel(METRICS[metric].column_title + ARROWS[direction(metric)])
            ax.grid(alpha=0.3)
    axes[-1][0].set_xticks(sorted({x for v in data.values() for m in v.values() for x in m}))
    if len(lines) > 1:
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=min(3, len(lines)),
                   fontsize="small")
    # two lines at the axes' font size: the title fits a one-dataset figure (3.6 in wide)
    fig.suptitle(f"R2F ablation: {AXES[axis][1]}\nmean, 95% bootstrap CI over targets × seeds", fontsize="medium")
    fig.tight_layout(rect=(0, 0.04 if len(lines) > 1 else 0, 1, 1))
    return fig


def plot_frontier(frontiers: Sequence[Any], task: str, path: Path) -> None:
    """USR against GUR, one line per method in strength order (points marked, 95% CIs
    as bars and the USR interval as a band), each method's shipped defaults as a star; PNG, atomic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    for k, f in enumerate(frontiers):
        color, marker, style = f"C{k % 10}", MARKERS[k // 10 % len(MARKERS)], LINESTYLES[k // 10 % len(LINESTYLES)]
        pts = f.points
        gur = [p["gur"].mean for p in pts]
        usr = [p["usr"].mean for p in pts]
        lo = lambda s: s.lo if s.lo is not None else s.mean
        hi = lambda s: s.hi if s.hi is not None else s.mean
        ax.errorbar(gur, usr, xerr=[[g - lo(p["gur"]) for g, p in zip(gur, pts)], [hi(p["gur"]) - g for g, p in zip(gur, pts)]],
                    yerr=[[u - lo(p["usr"]) for u, p in zip(usr, pts)], [hi(p["usr"]) - u for u, p in zip(usr, pts)]],
                    marker=marker, linestyle=style, markersize=4, capsize=2, elinewidth=0.6, color=color,
                    label=f"{f.method} ({f.param})")
        ax.fill_between(gur, [lo(p["usr"]) for p in pts], [hi(p["usr"]) for p in pts], color=color, alpha=0.12)
        t = f.tuned
        if t["usr"] is not None and t["gur"] is not None:
            ax.plot([t["gur"].mean], [t["usr"].mean], marker="*", markersize=13, color=color, markeredgecolor="black")
    for g in (95, 90):
        ax.axvline(g, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("GUR (%): utility kept →")
    ax.set_ylabel("USR (%): held-out forget probes forgotten →")
    ax.set_title(f"Forget–utility frontier on {task} (mean, 95% bootstrap CI; ★ shipped defaults)", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
