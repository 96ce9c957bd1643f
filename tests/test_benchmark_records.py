"""The stores committed under ``benchmarks/records/`` read whole (no record skipped), and the
numbers the docs cite from them are what a table built from them says: a documented table
can be rebuilt, and a changed record or statistic breaks a test, not a reader's trust."""

import json
from pathlib import Path

import pytest

from r2f_bench.results.cells import tabulable
from r2f_bench.results.frontier import KEYS, frontier, paired, paired_p
from r2f_bench.results.leaderboard import build_tables
from r2f_bench.results.stats import Stat, holm, sign_flip_p, summarize
from r2f_bench.results.store import Store, record_key

ROOT = Path(__file__).resolve().parents[1]
STORES = sorted(jobs.parent for jobs in ROOT.glob("benchmarks/records/*/*/jobs"))
SMOLLM2 = ROOT / "benchmarks/records/smollm2-rwku10/table"
# method: (known probes forgotten by its own request, by its other-request control; the paired
# USR difference as docs/real_lm.md and the README cite it)
CITED = {"grad_ascent": (74, 51, "+25.2 [9.7, 44.6]"), "r2f": (31, 25, "+9.0 [−3.6, 25.6]"),
         "fullgrad": (30, 24, "+4.9 [−9.4, 18.4]"), "npo": (45, 23, "+29.4 [14.8, 44.0]"),
         "lora_multi": (18, 19, "−0.7 [−7.6, 5.9]"), "rmu": (73, 35, "+46.2 [36.4, 55.9]")}
NAMED = {"rmu"}  # the one method whose USR difference the docs say Holm names (over the family of 24)


def as_cited(stat: Stat) -> str:
    """``+9.0 [−3.6, 25.6]``: a difference as the docs write it (signed, a true minus sign)."""
    return f"{stat.mean:+.1f} [{stat.lo:.1f}, {stat.hi:.1f}]".replace("-", "−")


@pytest.mark.parametrize("store", STORES, ids=lambda p: str(p.relative_to(ROOT / "benchmarks/records")))
def test_every_committed_record_reads_and_counts(store):
    records, skipped = tabulable(Store(store).records())
    assert records and not skipped, skipped
    assert sorted(map(record_key, records)) == Store(store).keys()  # each under the key a run computes


@pytest.fixture(scope="module")
def paired_store():
    """The store's rows and their other-request controls, and the paired table the records README's
    command prints from them: every method beside its control, one Holm family (built once)."""
    records, _ = tabulable(Store(SMOLLM2).records())
    rows = [r for r in records if r["config"]["control"] in ("none", "other_request")]
    return rows, next(t for t in build_tables(rows, baseline="control:other_request") if t.name == "paired")


@pytest.mark.parametrize("method", CITED)
def test_a_methods_own_control_is_what_the_docs_cite(method, paired_store):
    rows, paired = paired_store
    rows = [r for r in rows if r["method"] == method]
    own = {r["target"]: r for r in rows if r["config"]["control"] == "none"}
    control = {r["target"]: r for r in rows if r["config"]["control"] == "other_request"}
    assert len(own) == 10 and own.keys() == control.keys()
    assert sum(r["known_forget_probes"] for r in own.values()) == 81
    own_forgotten, control_forgotten, cited = CITED[method]
    pooled = [sum(r["forgotten_forget_probes"] for r in side.values()) for side in (own, control)]
    assert pooled == [own_forgotten, control_forgotten]

    (label, cells), = [(label, cells) for label, cells in paired.rows if label.startswith(f"{method} − ")]
    assert as_cited(cells[0]) == cited and cells[0].n == 10
    assert ("(≠0: USR)" in label) == (method in NAMED), label
    assert "over the table's 24 comparisons" in paired.note  # six methods × four scores, as the docs count them
    for page in ("docs/real_lm.md", "README.md"):
        assert cited in (ROOT / page).read_text(encoding="utf-8"), page


# method: (mean Locality, mean name control) of its own row under the ratio floor, as the docs' tables cite them
NEIGHBOURS = {"grad_ascent": ("25.0", "28.0"), "r2f": ("202.3", "89.9"), "fullgrad": ("204.2", "168.2"),
              "npo": ("198.5", "142.6"), "lora_multi": ("105.0", "104.9"), "rmu": ("43.7", "2.1")}


@pytest.mark.parametrize("method", NEIGHBOURS)
def test_a_rows_locality_and_name_control_are_read_under_the_floor_as_cited(method, paired_store):
    """The records predate the floor on Locality and the name control; read back they take it (Jon
    Voight's Locality, his and Socrates' name control n/a), and the cells the docs cite are theirs."""
    rows, _ = paired_store
    own = [r for r in rows if r["method"] == method and r["config"]["control"] == "none"]
    control = sum(r["forgotten_forget_probes"] for r in rows
                  if r["method"] == method and r["config"]["control"] == "other_request")
    cells = []
    for field, n in (("locality", 8), ("name_control", 7)):
        values = [r[field] for r in own if r[field] is not None]
        assert len(values) == n, field
        cells.append(f"{sum(values) / n:.1f}")
    assert tuple(cells) == NEIGHBOURS[method]
    locality, named = cells
    assert f"| {locality} | {named} | {control}/81 |" in (ROOT / "docs/real_lm.md").read_text(encoding="utf-8")
    assert f"| {named} | {control}/81 |" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_fullgrads_random_step_takes_almost_nothing():
    """The negative control that knows no one's request: FullGrad's step in a random direction of
    its norm forgets 2 of the 81 known probes and leaves identity alignment at 1.000, as the docs say."""
    records, _ = tabulable(Store(SMOLLM2).records())
    random = [r for r in records if r["method"] == "fullgrad" and r["config"]["control"] == "random_step"]
    assert len({r["target"] for r in random}) == len(random) == 10
    assert sum(r["forgotten_forget_probes"] for r in random) == 2
    assert sum(r["known_forget_probes"] for r in random) == 81
    assert min(r["identity_alignment"] for r in random) > 0.9995
    assert "| 2/81 | 3.3 [0.0, 10.0] | 99.7 |" in (ROOT / "docs/real_lm.md").read_text(encoding="utf-8")


def test_the_committed_scan_ranks_the_stores_targets_first():
    """The ranking a resumed run reads back instead of scanning (benchmarks/real_lm.py keeps it
    beside the stores) names the table's ten targets first, with the known probes their
    records count, and the calibration's target next."""
    scan, = (SMOLLM2.parent / "scans").glob("*.json")
    ranked = json.loads(scan.read_text(encoding="utf-8"))["ranked"]
    table, _ = tabulable(Store(SMOLLM2).records())
    assert {(r["target"], r["known_forget_probes"]) for r in table} == {tuple(r) for r in ranked[:10]}
    calibration, _ = tabulable(Store(SMOLLM2.parent / "calibrate").records())
    assert {r["target"] for r in calibration} == {ranked[10][0]}


CALIBRATE3 = ROOT / "benchmarks/records/smollm2-rwku10-calibrate3"
FRONTIER = ROOT / "benchmarks/records/smollm2-rwku10-frontier"
# (method, setting): mean GUR over the three calibration targets, as docs/real_lm.md's table cites it
CITED_CALIBRATION = {("fullgrad", "0.0002"): 89.9, ("fullgrad", "0.0001"): 98.8, ("r2f", "0.0002"): 88.3,
                     ("r2f", "0.0001"): 99.6, ("lora_multi", "0.0002"): 99.7, ("lora_multi", "0.0004"): 97.6,
                     ("lora_multi", "0.0008"): 95.3, ("lora_multi", "0.0016"): 87.8, ("rmu", "5e-05"): 99.8,
                     ("rmu", "0.00015"): 103.6, ("rmu", "0.0005"): 36.5, ("npo", "1e-05"): 98.6,
                     ("npo", "3e-05"): 97.9, ("npo", "0.0001"): 95.1, ("npo", "0.000333"): 95.3, ("npo", "0.00111"): 21.5,
                     ("grad_ascent", "1e-05"): 97.1, ("grad_ascent", "3e-05"): 96.8, ("grad_ascent", "0.0001"): 95.6,
                     ("grad_ascent", "0.000333"): 89.9}


def test_the_three_target_calibration_is_what_the_docs_cite():
    """The check of the table's one-target calibration: every setting tried on three targets
    reads the mean GUR the docs cite (each there as "→ GUR"), and multi-view LoRA's row at the
    step they chose, 8e-4, forgets 31 of the 81 known probes; NPO's row at the learning rate
    they chose, 3.33e-4, forgets 77 at a mean GUR of 89.2, below the floor; gradient ascent's at
    1e-4 forgets 53 at 95.8, paired with FullGrad's frontier point at step 2e-4 (54 at 94.7) a
    difference of +0.5 in USR (their controls: the next test)."""
    records, _ = tabulable(Store(CALIBRATE3 / "calibrate").records())
    by_setting: dict[tuple[str, str], list[float]] = {}
    for r in records:
        (value,) = r["config"]["params"].values()
        by_setting.setdefault((r["method"], value), []).append(r["gur"])
    assert all(len(gurs) == 3 for gurs in by_setting.values())
    assert {k: round(sum(v) / 3, 1) for k, v in by_setting.items()} == CITED_CALIBRATION
    docs = (ROOT / "docs/real_lm.md").read_text(encoding="utf-8")
    assert all(f"→ {gur}" in docs for gur in CITED_CALIBRATION.values())
    records, _ = tabulable(Store(CALIBRATE3 / "table").records())
    assert {(r["method"], *r["config"]["params"].values()) for r in records} == {
        ("lora_multi", "0.0008"), ("npo", "0.000333"), ("grad_ascent", "0.0001")}
    npo = [r for r in records if r["method"] == "npo" and r["config"]["control"] == "none"]
    assert len(npo) == 10 and sum(r["forgotten_forget_probes"] for r in npo) == 77
    assert f"{sum(r['gur'] for r in npo) / 10:.1f}" == "89.2" and "forgets **77 of the 81**" in docs
    ascent = [r for r in records if r["method"] == "grad_ascent" and r["config"]["control"] == "none"]
    assert len(ascent) == 10 and sum(r["forgotten_forget_probes"] for r in ascent) == 53
    assert f"{sum(r['gur'] for r in ascent) / 10:.1f}" == "95.8" and "forgets **53 of the 81**" in docs
    frontier_jobs, _ = tabulable(Store(FRONTIER / "frontier").records())
    fullgrad = [r for r in frontier_jobs if r["method"] == "fullgrad" and r["config"]["params"] == {"step": "0.0002"}]
    assert sum(r["forgotten_forget_probes"] for r in fullgrad) == 54
    against_fullgrad = next(t for t in build_tables(ascent + fullgrad, reference="fullgrad") if t.name == "paired")
    (_, cells), = against_fullgrad.rows
    assert as_cited(cells[0]) == "+0.5 [−7.3, 9.6]" and "USR **+0.5 [−7.3, 9.6]**" in docs
    lora = [r for r in records if r["method"] == "lora_multi" and r["config"]["control"] == "none"]
    assert [sum(r[k] for r in lora) for k in ("forgotten_forget_probes", "known_forget_probes")] == [31, 81]
    assert "forgets **31 of the 81**, USR 37.5 [26.2, 53.3]" in docs


def own_and_control(records: list[dict], method: str, setting: str) -> tuple[list, dict, dict, dict]:
    """``method`` at its one hyper-parameter ``setting``: its rows beside their other-request
    controls, the own runs and the controls by target, and own − control USR by target."""
    rows = [r for r in records if r["method"] == method and list(r["config"]["params"].values()) == [setting]
            and r["config"]["control"] in ("none", "other_request")]
    own, control = ({r["target"]: r for r in rows if r["config"]["control"] == c} for c in ("none", "other_request"))
    assert own.keys() == control.keys(), (method, setting)
    return rows, own, control, {t: r["usr"] - control[t]["usr"] for t, r in own.items()}


# (method, setting) with its other-request control on the ten targets: (mean GUR, own forgotten,
# control forgotten, own − control USR, its exact sign-flip p in 1024ths (2^10 sign assignments);
# FullGrad's step of the same utility and, per target, own − control minus FullGrad's there), as
# docs/real_lm.md's matched-utility table cites them
SPECIFICITY = {
    ("grad_ascent", "0.0001"): ("95.8", 53, 20, "+41.2 [23.5, 55.9]", 6, ("0.0002", "+30.5 [10.2, 47.3]")),
    ("npo", "0.0001"): ("96.3", 45, 23, "+29.4 [14.8, 44.0]", 8, ("0.0002", "+18.7 [2.0, 35.4]")),
    ("lora_multi", "0.0008"): ("95.6", 31, 24, "+9.1 [−1.5, 22.1]", 224, ("0.0002", "−1.6 [−19.6, 18.2]")),
    ("r2f", "0.000168"): ("95.3", 46, 45, "+5.1 [−13.5, 27.0]", 704, ("0.0002", "−5.6 [−21.2, 10.9]")),
    ("fullgrad", "0.0002"): ("94.7", 54, 44, "+10.8 [−6.4, 26.6]", 260, None),
    ("grad_ascent", "0.000333"): ("88.1", 74, 51, "+25.2 [9.7, 44.6]", 16, ("0.00026", "+23.2 [−0.4, 53.2]")),
    ("npo", "0.000333"): ("89.2", 77, 56, "+22.5 [2.8, 43.2]", 104, ("0.00026", "+20.4 [−0.9, 46.3]")),
    ("r2f", "0.000218"): ("90.4", 53, 47, "+9.4 [−5.9, 26.9]", 352, ("0.00026", "+7.4 [−3.9, 19.8]")),
    ("fullgrad", "0.00026"): ("90.3", 58, 54, "+2.0 [−13.7, 17.3]", 856, None)}


def test_what_another_persons_request_takes_at_matched_utility_is_what_the_docs_cite():
    """Each method at a setting near GUR 95 (and four near 90) beside its other-request control on
    the ten targets: what each forgets, own minus control, and, per target, how far its margin over
    its control exceeds FullGrad's at its point of the same utility (Holm over those comparisons),
    as the docs' table cites them."""
    stores = [SMOLLM2, CALIBRATE3 / "table", FRONTIER / "frontier", FRONTIER / "controls"]
    records = [r for s in stores for r in tabulable(Store(s).records())[0]]
    margins, docs = {}, (ROOT / "docs/real_lm.md").read_text(encoding="utf-8")
    for (method, setting), (gur, own, control, cited, p, _) in SPECIFICITY.items():
        rows, by_own, by_control, margin = own_and_control(records, method, setting)
        assert len(rows) == 20
        assert f"{sum(r['gur'] for r in by_own.values()) / 10:.1f}" == gur
        assert [sum(r["forgotten_forget_probes"] for r in side.values()) for side in (by_own, by_control)] == [
            own, control]
        (_, cells), = next(t for t in build_tables(rows, baseline="control:other_request") if t.name == "paired").rows
        assert as_cited(cells[0]) == cited
        assert sign_flip_p(list(margin.values()), list(margin)) == pytest.approx(p / 1024)
        assert f"| {gur} | {own}/81 | {control}/81 | {cited} | {p / 1024:.3f} |" in docs, (method, setting)
        assert f"{sum(r['gur'] for r in by_control.values()) / 10:.1f}" == gur  # the same cost
        margins[method, setting] = margin
    targets = sorted(margins["fullgrad", "0.0002"])
    p_values = {}
    for key, (*_, against) in SPECIFICITY.items():
        if against is None:
            continue
        step, cited = against
        excess = [margins[key][t] - margins["fullgrad", step][t] for t in targets]
        assert as_cited(summarize(excess)) == cited and f"| {cited}" in docs, key
        p_values[key] = sign_flip_p(excess, targets)
    assert p_values["grad_ascent", "0.0001"] == pytest.approx(22 / 1024)
    assert len(p_values) == 7 and not any(holm(p_values).values())  # after the fact: none named
    assert "FullGrad's there takes 44, and R2F's near that utility 45 of its 46" in (ROOT / "README.md").read_text(
        encoding="utf-8")


FRESH = ROOT / "benchmarks/records/smollm2-rwku-fresh9/replication"
# the test registered before its run, on the nine targets next in the scan's ranking: (method,
# setting) -> (mean GUR, own and control forgotten of the 31 known, own − control as cited, its p
# of 512; the margin minus FullGrad's as cited, its p of 512; the same over the nineteen targets)
REPLICATION = {("fullgrad", "0.0002"): ("87.8", 21, 23, "−5.6 [−27.8, 13.9]", 384, None),
               ("grad_ascent", "0.0001"): ("92.3", 18, 14, "+13.9 [−3.7, 32.4]", 160,
                                           ("+19.4 [−3.7, 43.5]", 104, "+25.2 [9.7, 39.9]")),
               ("npo", "0.0001"): ("92.5", 13, 16, "−8.3 [−35.2, 18.5]", 352,
                                   ("−2.8 [−24.1, 16.7]", 448, "+8.5 [−5.4, 22.7]"))}


def test_the_registered_test_on_nine_fresh_targets_is_what_the_docs_cite():
    """Gradient ascent's and NPO's specificity lead over FullGrad, found on the ten targets, tested
    as registered before the run on the nine next in the scan's ranking (Holm over the two): what
    each forgets beside its control, each margin minus FullGrad's, and the nineteen pooled, as the
    docs cite them."""
    fresh = tabulable(Store(FRESH).records())[0]
    ten = [r for s in [SMOLLM2, CALIBRATE3 / "table", FRONTIER / "frontier", FRONTIER / "controls"]
           for r in tabulable(Store(s).records())[0]]
    docs = (ROOT / "docs/real_lm.md").read_text(encoding="utf-8")
    cases, p_values = {}, {}
    for (method, setting), (gur, forgotten, control_forgotten, cited, p, against) in REPLICATION.items():
        rows, own, control, margin = own_and_control(fresh, method, setting)
        assert len(own) == 9 and sum(r["known_forget_probes"] for r in own.values()) == 31
        assert f"{sum(r['gur'] for r in own.values()) / 9:.1f}" == gur
        assert abs(sum(r["gur"] for r in control.values()) / 9 - float(gur)) < 0.15  # the same cost
        assert [sum(r["forgotten_forget_probes"] for r in side.values()) for side in (own, control)] == [
            forgotten, control_forgotten]
        (_, cells), = next(t for t in build_tables(rows, baseline="control:other_request") if t.name == "paired").rows
        assert as_cited(cells[0]) == cited
        assert sign_flip_p(list(margin.values()), list(margin)) == pytest.approx(p / 512)
        assert f"| {gur} | {forgotten}/31 | {control_forgotten}/31 | {cited} | {p / 512:.3f} |" in docs, method
        cases[method] = margin, own_and_control(ten, method, setting)[3]
    targets = sorted(cases["fullgrad"][0])
    for (method, _), (*_, against) in REPLICATION.items():
        if against is None:
            continue
        cited, p, pooled = against
        excess = [cases[method][0][t] - cases["fullgrad"][0][t] for t in targets]
        assert as_cited(summarize(excess)) == cited and f"| {cited} | {p / 512:.3f} |" in docs, method
        p_values[method] = sign_flip_p(excess, targets)
        assert p_values[method] == pytest.approx(p / 512)
        both = {**cases[method][1], **cases[method][0]}, {**cases["fullgrad"][1], **cases["fullgrad"][0]}
        assert len(both[0]) == 19 and both[0].keys() == both[1].keys()
        together = sorted(both[0])
        excess = [both[0][t] - both[1][t] for t in together]
        assert as_cited(summarize(excess)) == pooled
        assert f"{pooled} (p = {sign_flip_p(excess, together):.3f}" in docs, method
    assert not any(holm(p_values).values())  # as registered: neither lead replicates


def test_the_ten_target_frontiers_shipped_defaults_destroy_the_model():
    """The frontier on the table's targets ran each method's shipped defaults (tuned on the demo
    model): every target forgotten whole and no utility left, as the docs say, so no one reads
    them as forgetting."""
    records, _ = tabulable(Store(FRONTIER / "frontier").records())
    shipped = {m: [r for r in records if r["method"] == m and not r["config"]["params"]]
               for m in ("fullgrad", "r2f", "lora_multi")}
    assert all(len(rows) == 10 for rows in shipped.values())
    assert all(r["usr"] == 100.0 and r["gur"] < 1.5 and r["identity_alignment"] < 0.11
               for rows in shipped.values() for r in rows)
    assert "leave USR 100, GUR 0.0 and ID-align 0.000" in (ROOT / "docs/real_lm.md").read_text(encoding="utf-8")


def ten_target_frontiers() -> dict:
    """Each method's frontier on the ten table targets from the committed records: the table's
    own rows (read back by the frontier run) and the frontier's jobs, every one at control none."""
    stores = [SMOLLM2, CALIBRATE3 / "table", FRONTIER / "frontier"]
    rows = [r for s in stores for r in tabulable(Store(s).records())[0]
            if r["config"]["control"] == "none" and r["method"] in ("fullgrad", "r2f", "lora_multi")]
    curves: dict[str, tuple[dict, dict]] = {}
    for r in rows:
        by_step, shipped = curves.setdefault(r["method"], ({}, {}))
        params, unit = r["config"]["params"], (r["target"], int(r["seed"]))
        (by_step.setdefault(float(params["step"]), {}) if params else shipped)[unit] = (r["usr"], r["gur"])
    units = sorted(curves["fullgrad"][1])
    assert len(units) == 10
    return {m: frontier(m, "step", by_step, units, shipped, {}) for m, (by_step, shipped) in curves.items()}


def test_the_ten_target_frontier_is_what_the_docs_cite():
    """The frontier's summaries, its paired differences against FullGrad, that no cell interpolates
    after three rounds of refinement, and which difference Holm names, as docs/real_lm.md and the
    README cite them."""
    fs = ten_target_frontiers()
    assert {m: sorted(s["strength"] for s in f.points[1:]) for m, f in fs.items()} == {
        "fullgrad": [1e-4, 2e-4, 2.38e-4, 2.6e-4, 2.83e-4, 4e-4],
        "r2f": [1e-4, 1.41e-4, 1.68e-4, 2e-4, 2.18e-4, 2.38e-4, 2.83e-4, 4e-4],
        "lora_multi": [4e-4, 8e-4, 1.6e-3]}
    base = fs["fullgrad"]
    cited = {"fullgrad": ("65.6 [40.2, 82.9]", "73.8 [60.5, 88.8]", "75.3 [62.5, 87.9]"),
             "r2f": ("59.3 [43.5, 72.1]", "67.6 [55.6, 79.5]", "75.2 [63.6, 86.2]"),
             "lora_multi": ("40.3 [22.5, 60.7]", "61.8 [43.1, 72.1]", "56.8 [43.3, 68.5]")}
    differences = {"r2f": ("−6.2 [−19.9, 11.7]", "−6.2 [−15.2, 0.9]", "−0.1 [−4.2, 2.7]"),
                   "lora_multi": ("−25.2 [−43.3, −6.1]", "−12.0 [−31.4, 0.1]", "−18.5 [−30.9, −7.1]")}
    docs = (ROOT / "docs/real_lm.md").read_text(encoding="utf-8")
    for method, f in fs.items():
        assert tuple(as_cited(f.summaries[k]).lstrip("+") for k in KEYS) == cited[method]
        assert all(cell in docs for cell in cited[method])
    for method, cells in differences.items():
        assert tuple(as_cited(paired(fs[method], base)[k]) for k in KEYS) == cells
        assert all(cell in docs for cell in cells)
    assert not any(f.interpolates(k) for f in fs.values() for k in KEYS)  # every cell measured
    assert fs["lora_multi"].open_at[90.0] and not fs["lora_multi"].open_at[95.0]
    family = {(m, k): p for m in differences for k, p in paired_p(fs[m], base).items()}
    assert len(family) == 6 and "Holm over the six comparisons, every cell now measured" in docs
    assert [c for c, named in holm(family).items() if named] == [("lora_multi", "usr_at_gur95"), ("lora_multi", "auc")]
    assert (family[("r2f", "usr_at_gur95")], family[("r2f", "usr_at_gur90")]) == pytest.approx((0.63, 0.087))
    assert "(p = 0.63;" in docs and "(p = 0.087;" in docs
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "−25.2 [−43.3, −6.1], named" in readme
    assert "(−6.2 [−19.9, 11.7]; at GUR ≥ 90, −6.2 [−15.2, 0.9])" in readme
