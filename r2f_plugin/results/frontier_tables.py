"""The frontier's report: from what :mod:`r2f_bench.results.frontier_run` measured, the
summary table (USR at matched GUR, the area, the shipped defaults, with notes on the
units, failures, refinement and knobs), the paired differences against the baseline, the
ranking in tiers, the files they are written to beside ``frontier.png``, and the same as
one JSON object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..metric import METRICS
from .frontier import (AREA_FROM, AREA_KEY, FAILURE_RULE, GUR_LEVELS, KEYS, MEASURED, OPEN, TOLERANCE, Frontier,
                       paired, paired_p, tiers)
from .frontier_run import FrontierResults, Readout
from .plots import plot_frontier
from .render import FORMATS, render, stat_json, write_files
from .stats import ALPHA, MIN_MODELS, Stat, excludes_zero, group_stats, holm, too_few_models
from .tables import ATTACKS_NOTE, Column, Provenance, Table, attack_fields

TITLES = {**{f"usr_at_gur{g:g}": f"USR @ GUR≥{g:g}" for g in GUR_LEVELS}, AREA_KEY: "Area"}


def withheld(m: FrontierResults) -> str | None:
    """Why no difference is called (:func:`~.stats.too_few_models`), or None."""
    if why := too_few_models(m.readout.records, len({s for _, s in m.readout.units})):
        return f"{why}: no difference is called and no tier formed below {MIN_MODELS} (pass --seeds 0,1,2)"
    return None


def comparable(f: Frontier, base: Frontier, key: str) -> bool:
    """Whether ``f`` − ``base`` in ``key`` may be called: neither cell interpolates."""
    return not (f.interpolates(key) or base.interpolates(key))


def units_note(readout: Readout, min_known: int = 0) -> str:
    targets, seeds = {t for t, _ in readout.units}, {s for _, s in readout.units}
    note = (f"Every method on the same {len(readout.units)} (target, seed) units ({len(targets)} targets × "
            f"{len(seeds)} seeds: {len(seeds)} model(s) behind each interval); intervals: 95% bootstrap resampling "
            f"targets and, independently, seeds (taught models), n = units; every unit weighs the same.")
    if min_known:
        note += (f" --min-known {min_known}: a unit whose untouched model knew fewer held-out probes was run by no "
                 f"method ({len(readout.lost)} lost below, these included).")
    if readout.lost:
        note += f" Lost (no record from any method): {', '.join(f'{t} seed {s}' for t, s in readout.lost)}."
    if readout.unscorable:
        note += (f" Dropped for every method (nothing known before unlearning, or utility n/a): "
                 f"{', '.join(f'{t} seed {s}' for t, s in readout.unscorable)}.")
    return note


def budget_note(m: FrontierResults) -> str | None:
    """Each method's measured budget per deletion at its shipped defaults (medians over units),
    for reading the ranking beside it (one step is not 150)."""
    parts = []
    for f in m.results:
        spent = [r["budget"] for r in m.readout.shipped.get(f.method, []) if r.get("budget")]
        if not spent:
            continue
        median = lambda key: float(np.median([b.get(key) or 0 for b in spent]))
        changed = [b["weights_changed"] for b in spent if b.get("weights_changed") is not None]
        retain = ("in the deletion" if any(b.get("retain_read") for b in spent) else
                  "in its setup only" if any(b.get("retain_in_setup") for b in spent) else "none")
        parts.append(f"{f.method} {median('grad_passes'):.0f} passes ({median('grad_tokens'):.0f} tokens), "
                     + (f"{np.median(changed):.3g}% of weights changed" if changed
                        else "weights changed not measurable (it returned another model object)")
                     + f", retain data {retain}")
    if not parts:
        return None
    return ("Budget per deletion at the shipped defaults (medians over units, measured alike for every method: "
            "forward passes through the model with gradients on and their input tokens, the share of weight "
            "elements changed, whether retain data was read): " + "; ".join(parts) + ".")


def summary_table(m: FrontierResults, rounds: int) -> Table:
    results = m.results
    columns = [Column(k, TITLES[k], "whole frontier" if k == AREA_KEY else "matched utility", True) for k in KEYS]
    columns += [Column("tuned_usr", METRICS["usr"].title, "shipped defaults", None),
                Column("tuned_gur", METRICS["gur"].title, "shipped defaults", None)]
    rows = [(f.method, [f.summaries[k] for k in KEYS] + [f.tuned["usr"], f.tuned["gur"]]) for f in results]
    notes = [f"USR @ GUR≥g (%): the highest USR a method reaches along its measured curve (the untouched model, "
             f"log-spaced strengths of its knob and strengths added between the two that bracket each floor until "
             f"one lands within {TOLERANCE:g} GUR of it, at most {rounds} rounds; linear between neighbours) while "
             f"GUR stays at least g; 0 if no strength keeps GUR ≥ g. Area (%): its mean over g = {AREA_FROM}…100.",
             units_note(m.readout, m.min_known),
             f"Failures: {FAILURE_RULE}; counted: "
             + ("; ".join(f"{f.method} {f.failures} of {(len(f.points) - 1) * len(f.units)} points" for f in results
                          if f.failures) or "none") + ".",
             "Shipped defaults: each method's defaults as shipped (chosen on the dev split, docs/tuning.md), on the same units."]
    if m.failed:
        notes.append(f"{len(m.failed)} job(s) failed; their targets count as failures: {'; '.join(m.failed)}.")
    notes += [f"Open at GUR≥{g:g} (even the strongest setting kept GUR ≥ {g:g}; a stronger one might reach more): "
              f"{', '.join(ms)}." for g in GUR_LEVELS if (ms := [f.method for f in results if f.open_at[g]])]
    interpolated = [f"{f.method} at GUR≥{g:g} ({f.refined(g)}; nearest measured GUR {nearest(f, g):.1f})"
                    for f in results for g in GUR_LEVELS if f.refined(g) not in (MEASURED, OPEN)]
    if interpolated:
        notes.append(f"No measured point within {TOLERANCE:g} GUR of the floor (the cell interpolates): "
                     f"{'; '.join(interpolated)}.")
    if opened := [f.method for f in results if f.area_open]:
        notes.append(f"Area open (even the strongest setting kept GUR ≥ {AREA_FROM}; the area stops there): "
                     f"{', '.join(opened)}.")
    notes.append(f"Area over GUR {AREA_FROM}–100; each curve's measured mean GUR range: "
                 + "; ".join(f"{f.method} {f.gur_range[0]:.1f}–{f.gur_range[1]:.1f}" for f in results) + ".")
    if budgets := budget_note(m):
        notes.append(budgets)
    notes.append("Knobs: " + "; ".join(f"{f.method}: {f.param} 0 (untouched), {f.points[1]['strength']:g}…"
                                        f"{f.points[-1]['strength']:g} ({len(f.points) - 1} strengths)"
                                        for f in results) + ".")
    if m.after:
        notes.insert(0, f"USR here is read after the attack {m.after} (the share of the known held-out probes still "
                        f"not answered once it has run): a method that hides rather than removes falls.")
    if m.name_control:
        notes.insert(0, "GUR here is the lower of GUR and the name control (other people's facts asked with the "
                        "target's name) at each point: breaking sentences that merely name the target costs utility.")
    title = ("Forget–utility frontier: USR at matched GUR" + (" and name control" if m.name_control else "")
             + (f", after {m.after}" if m.after else ""))
    return Table("frontier", title, " ".join(notes), columns, rows,
                 Provenance.of(m.readout.records))


def nearest(f: Frontier, floor: float) -> float:
    """The measured mean GUR closest to ``floor``."""
    return min((p["gur"].mean for p in f.points), key=lambda g: abs(g - floor))


def apart_from_baseline(m: FrontierResults) -> dict[tuple[str, str], bool]:
    """(method, summary) -> whether it differs from the baseline once Holm-corrected over
    every comparison the pairs table may call (each other method × each summary, less the
    cells that interpolate); nothing with fewer than :data:`MIN_MODELS` taught models."""
    family = {(f.method, k): p for f in m.results if f is not m.base for k, p in paired_p(f, m.base).items()
              if comparable(f, m.base, k)}
    apart = {} if withheld(m) else holm(family)
    return {(f.method, k): apart.get((f.method, k), False) for f in m.results if f is not m.base for k in KEYS}


def pairs_table(m: FrontierResults) -> Table:
    base, baseline = m.base, m.baseline
    apart = apart_from_baseline(m)
    rows = []
    for f in m.results:
        if f is base:
            continue
        diff = paired(f, base)
        named = [TITLES[k] for k in KEYS if apart[(f.method, k)]]
        between = [TITLES[k] for k in KEYS if not comparable(f, base, k)]
        rows.append((f"{f.method} − {baseline}" + (f" (≠0: {', '.join(named)})" if named else "")
                     + (f" (interpolated: {', '.join(between)})" if between else ""), [diff[k] for k in KEYS]))
    family = sum(comparable(f, base, k) for f in m.results if f is not base for k in KEYS)
    note = (f"Paired differences against {baseline}: each method's summary minus {baseline}'s, both read on the same "
            f"units and drawn on the same target and seed resamples; 95% interval (uncorrected). (≠0: …) names the "
            f"summaries that differ at family-wise level {ALPHA:g}, Holm-corrected over the table's {family} "
            f"comparisons (an interval can exclude 0 and still not be named). (interpolated: …) marks a comparison "
            f"whose cell, the method's or {baseline}'s, has no measured point within {TOLERANCE:g} GUR of its floor: "
            f"it is never called.")
    if why := withheld(m):
        note += f" Not called: {why}."
    return Table("frontier-pairs", f"Paired differences against {baseline}", note,
                 [Column(f"diff_{k}", f"Δ {TITLES[k]}") for k in KEYS], rows,
                 Provenance.of(m.readout.records), row_header="Method − baseline")


def ranking_table(m: FrontierResults) -> Table:
    units = m.readout.units
    n, targets, seeds = len(units), len({t for t, _ in units}), len({s for _, s in units})
    tier = {k: {name: i + 1 for i, group in enumerate(groups) for name in group}
            for k, groups in ranking(m).items()}
    last = len(m.results) + 1  # no tier: sorted last
    order = sorted(m.results, key=lambda f: [tier.get(k, {}).get(f.method, last) for k in KEYS])
    rows = [(f.method, [Stat(float(tier[k][f.method]), None, None, n, targets, seeds)
                        if f.method in tier.get(k, {}) else None for k in KEYS]) for f in order]
    note = ("Tiers (1 is best) per summary: in order of the estimate, tier 1 is the best method and every method "
            f"not told apart from it (paired bootstrap test, Holm-corrected at {ALPHA:g} over the comparisons with "
            "that leader); the next tier starts at the best method left. Methods in one tier cannot be told apart "
            f"from its first. A cell with no measured point within {TOLERANCE:g} GUR of its floor enters no tier (—).")
    if why := withheld(m):
        note += f" No tiers: {why}."
    return Table("frontier-ranking", "Ranking: methods that cannot be told apart share a tier", note,
                 [Column(f"tier_{k}", TITLES[k], "tier", False, digits=0) for k in KEYS], rows,
                 Provenance.of(m.readout.records))


def attacks_table(m: FrontierResults) -> Table | None:
    """At each method's shipped defaults, on the frontier's units: per attack the records hold,
    USR after it, the share of the forgotten probes it recovers and its control, with the
    intervals of every other cell (targets and taught models resampled); ``None`` without attacks."""
    units = set(m.readout.units)
    shipped = {f.method: [r for r in m.readout.shipped.get(f.method, []) if (str(r["target"]), int(r["seed"])) in units]
               for f in m.results}
    if not (fields := attack_fields(r for rs in shipped.values() for r in rs)):
        return None
    stat = lambda rs, path: group_stats(rs, path, lambda r: 0).get(0)
    rows = [(f.method, [stat(shipped[f.method], "usr")] + [stat(shipped[f.method], f"attacks.{s}.{key}")
                                                         for s, key, _, _ in fields]) for f in m.results]
    columns = [Column("usr", METRICS["usr"].title, "the deletion", True)] + [Column(f"{s}.{key}", title, s, higher)
                                                               for s, key, title, higher in fields]
    diverged = {f.method: sum(u in units and score is None
                              for u, score in m.readout.scores.get(f.method, {}).get(None, {}).items())
                for f in m.results}
    left_out = ", ".join(f"{method} {n}" for method, n in diverged.items() if n)
    note = ATTACKS_NOTE + (f" Left out: diverged deletions at the shipped defaults ({left_out}), which the summary "
                           f"counts as failures (USR 0, GUR 0): nothing is left to attack." if left_out else "")
    return Table("frontier-attacks", "Is it gone or hidden? Each method at its shipped defaults, attacked",
                 note, columns, rows, Provenance.of(m.readout.records))


def ranking(m: FrontierResults) -> dict[str, list[list[str]]]:
    """Each summary's tiers (:func:`~r2f_bench.results.frontier.tiers`); none when :func:`withheld`."""
    return {} if withheld(m) else {k: tiers(m.results, k) for k in KEYS}


def write_report(m: FrontierResults, rounds: int, task: str, out_dir: Path) -> dict[str, str]:
    """Write the three tables in every format and ``frontier.png`` into ``out_dir``; the
    tables' files (name -> text)."""
    tables = [summary_table(m, rounds), pairs_table(m), ranking_table(m), *filter(None, [attacks_table(m)])]
    files = {name: text for fmt in FORMATS for name, text in render(tables, fmt).items()}
    write_files(out_dir, files)
    plot_frontier(m.results, task, out_dir / "frontier.png")
    return files


def frontier_json(f: Frontier) -> dict[str, Any]:
    return {"method": f.method, "param": f.param,
            "points": [{"strength": p["strength"], "usr": stat_json(p["usr"]), "gur": stat_json(p["gur"]),
                        "failures": p["failures"]} for p in f.points],
            **{k: stat_json(f.summaries[k]) for k in KEYS},
            **{f"open_at_gur{g:g}": f.open_at[g] for g in GUR_LEVELS},
            **{f"refined_at_gur{g:g}": f.refined(g) for g in GUR_LEVELS},
            "area_open": f.area_open, "area_gur_range": list(f.gur_range), "failures": f.failures,
            "tuned": {"params": f.tuned["params"], "usr": stat_json(f.tuned["usr"]), "gur": stat_json(f.tuned["gur"]),
                      "failures": f.tuned["failures"]}}


def as_json(m: FrontierResults) -> dict[str, Any]:
    """Every method's curve and summaries, the paired differences against the baseline and the tiers."""
    base, units = m.base, m.readout.units
    apart = apart_from_baseline(m)
    pairs = [{"method": f.method, "baseline": m.baseline,
              **{k: {**stat_json(d), "excludes_zero": excludes_zero(d), "p": paired_p(f, base)[k],
                     "holm_apart": apart[(f.method, k)], "interpolated": not comparable(f, base, k)}
                 for k, d in paired(f, base).items()}}
             for f in m.results if f is not base]
    return {"baseline": m.baseline, "usr_after": m.after, "utility": "min(gur, name_control)" if m.name_control else "gur",
            "failure_rule": FAILURE_RULE, "failed_jobs": m.failed,
            "units": {"n": len(units), "targets": sorted({t for t, _ in units}),
                      "seeds": sorted({s for _, s in units}), "lost": m.readout.lost,
                      "unscorable": m.readout.unscorable},
            "methods": [frontier_json(f) for f in m.results], "pairs": pairs,
            "ranking": ranking(m), "ranking_withheld": withheld(m),
            "shipped_attacks": {label: {c.key: stat_json(v) for c, v in zip(table.columns, cells)}
                                for table in filter(None, [attacks_table(m)]) for label, cells in table.rows}}
