"""``r2f-bench tune``: choose a method's hyper-parameters on the dev split.

Every method declares its strength knob (:attr:`r2f_bench.unlearner.Unlearner.strength`).
``tune`` runs ``--points`` log-spaced strengths of it (default 8); while the strongest
keeps mean GUR at or above the floor, up to ``--extend`` more past the range's top at its
last ratio (default 3), so a model that moves less per unit of the knob than the declared
range expects is not capped at the range's top (a search that never crosses the floor
says so); then ``--refine`` more (default 3) log-spaced between the two neighbouring
strengths whose mean GUR crosses the floor, so the choice does not hang on where a
coarse grid happens to cross it; ``--grid NAME=v1,v2`` searches given values instead (a method without a
knob and no ``--grid`` runs its defaults alone). Every point runs on the **dev targets**, which are disjoint
from the evaluation targets and unlearned from the same taught model, through the
sweep machinery (results stored as they finish; a re-run resumes). It then applies
one fixed rule:

    the highest mean USR among settings whose mean GUR is at least ``--min-gur``
    (ties: the higher GUR); if none reaches it, the highest GUR,

a diverged deletion counting in the means as USR 0, GUR 0 (as on the frontier).

The same rule for every method, one seed unless ``--seeds`` says otherwise, and
never a look at the evaluation targets. The defaults shipped in each method's
``Params`` are the choices this command made on RWKU's dev split with the embedded
models (``docs/tuning.md`` records the searches, made with the coarser grids of the
time); table captions name a method whose evaluation GUR falls below the floor it was tuned
for (:data:`DEFAULT_MIN_GUR`).
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..engine.config import RunConfig
from ..errors import UserError
from ..metric import METRICS
from ..plugins import registry
from ..unlearner import continued, log_spaced
from .frontier import FAILURE
from .job import Job
from .store import Store
from .sweep import execute

COLUMNS = ("usr", "gur", "rap", "identity_alignment", "seconds")  # the search table's metrics
# the search table's own headers and digits where they differ from the leaderboard's: seconds of small runs
TUNE_COLUMN = {"seconds": ("s/deletion", 3)}
DEFAULT_MIN_GUR = 90.0


def check_min_gur(value: float) -> None:
    """One line unless ``value`` is a utility floor in % (above 1, at most 100) or 0 for none;
    NaN, and a fraction such as 0.9 that would let every setting pass, are refused."""
    if not (value == 0 or 1 < value <= 100):
        raise UserError(f"--min-gur is the share of utility kept, in %: above 1 and at most 100, or 0 for no "
                        f"floor (default {DEFAULT_MIN_GUR:g}), got {value:g}; for 90 % write --min-gur 90.")


def grid_points(space: dict[str, Sequence[Any]]) -> list[dict[str, str]]:
    """Every combination of the space's values, as ``--set`` strings."""
    names = sorted(space)
    return [{n: str(v) for n, v in zip(names, values)} for values in itertools.product(*(space[n] for n in names))]


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    space: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name.strip() or not vals:
            raise UserError(f"--grid expects NAME=v1,v2,..., got {item!r}.")
        space[name.strip()] = vals
    return space


Row = tuple[dict[str, str], dict[str, float | None]]  # a searched point and its means (:func:`tune_means`)


def score(row: Row, metric: str) -> float:
    """``row``'s mean ``metric``; unreadable counts as -1, below every real value."""
    value = row[1][metric]
    return value if value is not None else -1.0


def refinement(rows: Sequence[Row], param: str, min_gur: float, n: int) -> list[dict[str, str]]:
    """``n`` log-spaced strengths strictly between the neighbouring rows (in strength order)
    whose mean GUR crosses ``min_gur``; none if the curve never crosses it."""
    ordered = sorted(rows, key=lambda row: float(row[0][param]))
    for weak, strong in zip(ordered, ordered[1:]):
        if score(weak, "gur") >= min_gur > score(strong, "gur"):
            low, high = float(weak[0][param]), float(strong[0][param])
            return [{**weak[0], param: f"{s:.3g}"} for s in log_spaced(low, high, n + 2)[1:-1]]
    return []


def tune_means(records: list[dict]) -> dict[str, float | None]:
    """Mean of each metric over the records that have it, a diverged deletion counted as the
    frontier's failure (:data:`~.frontier.FAILURE`: USR 0, GUR 0), so a setting is never chosen
    on the few dev targets it did not break; and how many records and divergences there were."""
    ok = [r for r in records if r.get("status", "ok") == "ok"]
    failed = dict(zip(("usr", "gur"), FAILURE))
    out: dict[str, float | None] = {}
    for m in COLUMNS:
        values = [r[m] for r in ok if isinstance(r.get(m), (int, float))]
        values += [failed[m]] * (len(records) - len(ok)) if m in failed else []
        out[m] = statistics.fmean(values) if values else None
    out["targets"], out["diverged"] = len(records), len(records) - len(ok)
    return out


def choose(rows: list[Row], min_gur: float) -> tuple[int, str]:
    """Index of the chosen row and the reason, by the module's rule."""
    usr, gur = (lambda r: score(r, "usr")), (lambda r: score(r, "gur"))
    eligible = [i for i, r in enumerate(rows) if gur(r) >= min_gur]
    if eligible:
        best = max(eligible, key=lambda i: (usr(rows[i]), gur(rows[i])))
        return best, f"highest USR with GUR ≥ {min_gur:g}"
    best = max(range(len(rows)), key=lambda i: (gur(rows[i]), usr(rows[i])))
    return best, f"no setting kept GUR ≥ {min_gur:g}; highest GUR"


def render(method: str, task: str, rows: list, best: int, why: str) -> str:
    """A Markdown table of the search with the chosen row marked, and how to run the choice.
    Its last column counts the (target, seed) units scored: the dev split scores half of
    the dev targets (methods fit on the other half)."""
    shown = {m: TUNE_COLUMN.get(m, (METRICS[m].title, METRICS[m].digits)) for m in COLUMNS}  # title, digits
    head = ("| setting | " + " | ".join(title for title, _ in shown.values())
            + " | scored units |")
    lines = [f"### {method} on {task} (dev split): chosen {rows[best][0] or 'defaults'} ({why})", "",
             head, "|" + "---|" * (len(COLUMNS) + 2)]
    for i, (point, s) in enumerate(rows):
        label = ", ".join(f"{k}={v}" for k, v in point.items()) or "defaults"
        cells = ["n/a" if s[m] is None else f"{s[m]:.{shown[m][1]}f}" for m in COLUMNS]
        mark = " **←**" if i == best else ""
        broke = f" ({s['diverged']} diverged: USR 0, GUR 0)" if s.get("diverged") else ""
        lines.append(f"| {label}{mark} | " + " | ".join(cells) + f" | {s['targets']}{broke} |")
    sets = " ".join(f"--set {k}={v}" for k, v in rows[best][0].items())
    lines += ["", f"Run the choice: `r2f-bench --method {method} --task {task}{' ' + sets if sets else ''}`"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Search:
    """One method's search: its run configuration, the points to run, the knob to refine along
    and the points past its top, tried while GUR stays above the floor."""

    method: str
    base: RunConfig
    points: list[dict[str, str]]
    knob: str | None  # the strength parameter refined between points (None: a given grid, or no knob)
    beyond: list[dict[str, str]]  # past the knob's top, weak to strong, each one the method accepts


@dataclass(frozen=True)
class Tuned:
    """A finished search: every row, the chosen one and why."""

    search: Search
    rows: list[Row]
    best: int
    why: str
    capped: bool  # GUR never fell below the floor: the strongest setting tried bounds the choice

    def render(self) -> str:
        return render(self.search.method, self.search.base.task, self.rows, self.best, self.why)

    def to_json(self) -> dict[str, Any]:
        return {"method": self.search.method, "task": self.search.base.task, "rule": self.why,
                "capped": self.capped, "chosen": self.rows[self.best][0], "rows": [{"params": p, **s} for p, s in self.rows]}


def plan_searches(methods: Sequence[str], base_of: Callable[[str], RunConfig], grid: dict[str, list[str]] | None,
                  points: int, extend: int) -> list[Search]:
    """Every method's search, each point's parameters checked before anything runs: ``grid``
    where given, else ``points`` strengths of the method's knob (and up to ``extend`` past its
    top, at its last ratio, as far as the method accepts them), else its defaults alone."""
    searches = []
    for method in methods:
        cls, base = registry().method(method), base_of(method)
        knob = None if grid else cls.strength
        if grid:
            chosen = grid_points(grid)
        elif knob is not None:
            chosen = [{knob.param: str(v)} for v in knob.points(points)]
        else:
            chosen = [{}]  # no knob and no --grid: the method's defaults alone
        for point in chosen:
            cls.parse_params({**base.params, **point})  # a bad name or value fails here
        beyond = []
        if knob is not None and len(chosen) > 1:
            for value in continued([float(point[knob.param]) for point in chosen], extend):
                try:
                    cls.parse_params({**base.params, knob.param: f"{value:g}"})
                except UserError:
                    break  # past what the knob allows (a step above 1)
                beyond.append({knob.param: f"{value:g}"})
        searches.append(Search(method, base, chosen, knob.param if knob else None, beyond))
    return searches


def strengths(points: list[dict[str, str]], beyond: list[dict[str, str]], knob: str,
              evaluate: Callable[[dict[str, str]], Row], min_gur: float, refine: int) -> tuple[list[Row], bool]:
    """Rows of ``points`` (``knob`` from weak to strong), then of ``beyond`` (stronger still) while
    the strongest's mean GUR stays at or above ``min_gur``, then ``refine`` between the two that
    cross it (:func:`refinement`); in strength order, and whether the floor was crossed (if not,
    the strongest setting tried caps the choice)."""
    rows = [evaluate(point) for point in points]
    for point in beyond:
        if score(rows[-1], "gur") < min_gur:
            break  # GUR falls as the knob grows: a stronger setting would be below the floor too
        rows.append(evaluate(point))
    crossed = score(rows[-1], "gur") < min_gur
    if refine:
        rows += [evaluate(point) for point in refinement(rows, knob, min_gur, refine)]
    return sorted(rows, key=lambda row: float(row[0][knob])), crossed


def run_search(search: Search, seeds: Sequence[int], refine: int, min_gur: float,
               progress: Callable[[str], None]) -> Tuned:
    """Run ``search``'s points on the dev split for ``seeds`` (stored in ``search.base.output``;
    a re-run resumes), those past the knob's top while GUR stays at or above ``min_gur``,
    ``refine`` more between the two that cross it (:func:`strengths`), and choose."""
    store = Store(search.base.output)

    def evaluate(point: dict[str, str]) -> Row:
        fields = {**search.base.to_dict(), "split": "dev", "params": {**search.base.params, **point}}
        jobs = [Job({**fields, "seed": seed}) for seed in seeds]
        keys = execute(jobs, search.base.output, process=(0, 1), progress=progress).keys
        return point, tune_means([r for r in map(store.get, keys) if r is not None])

    if search.knob is None:
        rows, crossed = [evaluate(point) for point in search.points], True
    else:
        rows, crossed = strengths(search.points, search.beyond, search.knob, evaluate, min_gur, refine)
    best, why = choose(rows, min_gur)
    if not crossed:
        why += (f"; GUR stayed at or above {min_gur:g} up to the strongest setting tried, so this is the search's "
                f"top, not a calibration: raise --extend (where the method allows a stronger setting)")
    return Tuned(search, rows, best, why, capped=not crossed)
