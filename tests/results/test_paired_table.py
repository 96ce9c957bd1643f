"""The paired table: a method minus a baseline on the targets both ran, named apart only by a
test that survives few targets and the table's whole family of comparisons."""

from __future__ import annotations

import numpy as np
import pytest

from r2f_bench.errors import UserError
from r2f_bench.results.leaderboard import SCORES, build_tables
from r2f_bench.results.paired_table import baseline_row, paired_table
from r2f_bench.results.render import to_markdown
from records import record


def pair(n_targets: int, shift: float, taught: bool = False, seeds: int = 1, task: str = "rwku",
         by_seed: tuple[float, ...] = ()) -> list[dict]:
    """fullgrad and r2f on ``n_targets``: targets differ widely in USR (0 to 90), r2f forgets
    ``shift`` more on every one (``by_seed[s]`` more on seed ``s`` where given); GUR differs by
    noise only."""
    rng = np.random.default_rng(1)
    out = []
    for i in range(n_targets):
        for seed in range(seeds):
            base, noise = 90.0 * i / max(n_targets - 1, 1), rng.normal(0, 2)
            more = by_seed[seed] if by_seed else shift
            for method, usr, gur in (("fullgrad", base, 95.0), ("r2f", base + more, 95.0 + noise)):
                r = record(method, task, seed, f"t{i}", usr, gur, 10.0, 0.9, 1.0)
                r["knowledge"] = {"taught": taught}
                out.append(r)
    return out


def row(table, start: str):
    return next((label, cells) for label, cells in table.rows if label.startswith(start))


def test_a_shift_hidden_by_the_spread_between_targets_is_named_on_ten_targets():
    records = pair(10, 8.0)
    table1, paired = (next(t for t in build_tables(records, reference="fullgrad") if t.name == n)
                      for n in ("table1", "paired"))
    usr = [c[0] for _, c in table1.rows]  # the unpaired cells overlap: the targets' spread hides the shift
    assert usr[0].hi > usr[1].lo
    label, cells = row(paired, "r2f − fullgrad")
    usr_d, gur_d = cells[0], cells[1]  # columns: usr, gur (usr_seen, locality, name_control: no values)
    assert (usr_d.mean, usr_d.lo, usr_d.hi, usr_d.n) == pytest.approx((8.0, 8.0, 8.0, 10))
    assert "(≠0: USR)" in label and "GUR" not in label.split("(≠0")[1]
    assert abs(gur_d.mean) < 2 and gur_d.n == 10
    assert "Holm-corrected over the table's 2 comparisons" in paired.note


def test_three_targets_name_nothing_though_every_difference_has_one_sign():
    paired = paired_table(pair(3, 8.0), SCORES, "fullgrad")
    label, cells = row(paired, "r2f − fullgrad")
    assert cells[0].lo > 0  # the percentile interval excludes 0 ...
    assert "≠0" not in label  # ... the test over three targets (p >= 0.25) does not call it
    assert "on three, 0.25" in paired.note


def test_holm_keeps_a_difference_one_test_alone_would_call():
    """Six targets, one sign: p = 2/64 = 0.031 < 0.05, but the table holds two comparisons
    (USR, GUR) and Holm asks the smallest p for 0.025."""
    paired = paired_table(pair(6, 8.0), SCORES, "fullgrad")
    assert row(paired, "r2f − fullgrad")[1][0].lo > 0
    assert "≠0" not in row(paired, "r2f − fullgrad")[0]
    assert "(≠0: USR)" in row(paired_table(pair(7, 8.0), SCORES, "fullgrad"), "r2f − fullgrad")[0]  # 2/128


def test_taught_models_fewer_than_three_name_nothing_and_say_why():
    paired = paired_table(pair(10, 8.0, taught=True, seeds=2), SCORES, "fullgrad")
    assert "≠0" not in row(paired, "r2f − fullgrad")[0]
    assert "Never named, 2 cell(s) (r2f USR; r2f GUR): only 2 taught model(s)" in paired.note
    called = paired_table(pair(10, 8.0, taught=True, seeds=3), SCORES, "fullgrad")
    assert "(≠0: USR)" in row(called, "r2f − fullgrad")[0] and "Never named" not in called.note
    # the models behind a cell count, not the store's: r2f ran one of fullgrad's three
    one = [r for r in pair(10, 8.0, taught=True, seeds=3) if r["method"] == "fullgrad" or r["seed"] == 0]
    assert "≠0" not in row(paired_table(one, SCORES, "fullgrad"), "r2f − fullgrad")[0]


def test_a_method_better_on_one_taught_model_only_is_not_named():
    """+10 on model 0, -4 on models 1 and 2: every target's mean is positive, so the test over
    targets alone would call it; the interval, which resamples the models, does not exclude 0."""
    paired = paired_table(pair(10, 0.0, taught=True, seeds=3, by_seed=(10.0, -4.0, -4.0)), SCORES, "fullgrad")
    label, cells = row(paired, "r2f − fullgrad")
    assert cells[0].mean == pytest.approx(2 / 3) and cells[0].lo < 0 < cells[0].hi
    assert "≠0" not in label


def test_each_dataset_is_paired_apart_and_named_with_its_name():
    paired = paired_table(pair(10, 8.0) + pair(10, 0.0, task="wmdp"), SCORES, "fullgrad")
    assert [c.key for c in paired.columns] == ["rwku.usr", "rwku.gur", "wmdp.usr", "wmdp.gur"]
    label, cells = row(paired, "r2f − fullgrad")
    assert "(≠0: rwku USR)" in label and cells[2].mean == 0.0


def test_records_of_one_unit_from_several_versions_are_averaged_not_dropped():
    records = pair(10, 8.0)
    again = {**next(r for r in records if r["method"] == "r2f" and r["target"] == "t0"), "usr": 100.0}
    cells = row(paired_table(records + [again], SCORES, "fullgrad"), "r2f − fullgrad")[1]
    assert cells[0].n == 10 and cells[0].mean == pytest.approx(8.0 + (100.0 - 8.0) / 2 / 10)


def test_units_are_paired_only_where_both_rows_ran():
    records = [r for r in pair(10, 8.0) if not (r["method"] == "r2f" and r["target"] in ("t0", "t1"))]
    cells = row(paired_table(records, SCORES, "fullgrad"), "r2f − fullgrad")[1]
    assert cells[0].n == 8 and cells[0].mean == pytest.approx(8.0)
    assert "| r2f − fullgrad (≠0: USR) | 8.0 [8.0, 8.0] (n=8) |" in to_markdown(paired_table(records, SCORES, "fullgrad"))


def test_the_baseline_names_one_row_or_says_what_to_pass():
    labels = ["fullgrad", "r2f [rank=4]", "r2f [rank=8]"]
    assert baseline_row(labels, "fullgrad") == "fullgrad"
    assert baseline_row(labels, "r2f [rank=4]") == "r2f [rank=4]"
    with pytest.raises(UserError, match=r"--baseline r2f: 2 rows \(r2f \[rank=4\]; r2f \[rank=8\]\); name one"):
        baseline_row(labels, "r2f")
    with pytest.raises(UserError, match="--baseline npo: no row of the table; choose one of fullgrad, "):
        baseline_row(labels, "npo")


def test_the_default_baseline_is_the_cost_reference_where_it_names_one_row():
    records = pair(4, 8.0)
    assert "paired" in [t.name for t in build_tables(records, reference="fullgrad")]
    assert "paired" not in [t.name for t in build_tables(records, reference="npo")]  # no such row: no table
    assert "paired" not in [t.name for t in build_tables([r for r in records if r["method"] == "r2f"],
                                                         reference="r2f")]  # one row: nothing to pair
    assert next(t for t in build_tables(records, baseline="r2f") if t.name == "paired").title.endswith("against r2f")
    with pytest.raises(UserError, match="--baseline npo"):
        build_tables(records, baseline="npo")
    with pytest.raises(UserError, match="--baseline npo"):  # named, it is checked even with nothing to pair
        build_tables([r for r in records if r["method"] == "r2f"], baseline="npo")


def test_the_latex_table_spells_its_signs_in_math():
    from r2f_bench.results.render import to_latex

    tex = to_latex(paired_table(pair(10, 8.0), SCORES, "fullgrad"))
    assert r"r2f $-$ fullgrad ($\neq$0: USR)" in tex and "−" not in tex and "≠" not in tex


def with_controls(n_targets: int = 10) -> list[dict]:
    """fullgrad and r2f (:func:`pair`: r2f forgets 8 more), each beside its own other_request
    control, which forgets 5 less than the row on every target for r2f and as much for fullgrad;
    and r2f at another setting whose control was never run."""
    records = pair(n_targets, 8.0)
    for r in list(records):
        control = {**r, "config": {**r["config"], "control": "other_request"}}
        control["usr"] = r["usr"] - (5.0 if r["method"] == "r2f" else 0.0)
        records.append(control)
        if r["method"] == "r2f":
            records.append({**r, "config": {**r["config"], "params": {"rank": "4"}}})
    return records


def test_each_row_is_paired_with_its_own_control_and_holm_counts_those_pairs_alone():
    paired = paired_table(with_controls(), SCORES, "control:other_request")
    assert [label.split(" (≠0")[0] for label, _ in paired.rows] == [  # r2f at rank 4 has no control: no row
        "fullgrad − fullgrad (control: other_request)", "r2f − r2f (control: other_request)"]
    fullgrad, r2f = (row(paired, start)[1][0] for start in ("fullgrad", "r2f"))
    assert (fullgrad.mean, r2f.mean) == pytest.approx((0.0, 5.0))  # not the 8 the row forgets beyond fullgrad
    assert "(≠0: USR)" in row(paired, "r2f")[0] and "≠0" not in row(paired, "fullgrad")[0]
    assert "Holm-corrected over the table's 4 comparisons" in paired.note  # 2 pairs × (USR, GUR), not 4 rows'
    assert paired.title == "Paired differences against each row's own other_request control"


def test_an_own_control_baseline_says_what_is_missing_in_one_line():
    with pytest.raises(UserError, match="no row has its own other_request control in this store; run the method "
                                        "again with --control other_request"):
        build_tables(pair(4, 8.0), baseline="control:other_request")
    with pytest.raises(UserError, match="--baseline control:other: no such control; choose control:other_request, "
                                        "control:random_step"):
        build_tables(with_controls(4), baseline="control:other")
