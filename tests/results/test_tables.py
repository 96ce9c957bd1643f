import argparse
import csv
import io

import pytest

from r2f_bench.errors import UserError
from r2f_bench.results.stats import summarize
from r2f_bench.cli.table import add_parser as add_table_parser
from r2f_bench.results.render import render, to_markdown
from r2f_bench.results.cells import newest_per_cell
from r2f_bench.results.leaderboard import build_tables
from records import MODEL, PROXY, record, stored, synthetic

@pytest.fixture
def tables():
    return {t.name: t for t in build_tables(synthetic(), reference="fullgrad")}


def row(table, label):
    return dict(zip([c.key for c in table.columns], dict(table.rows)[label]))


def test_mean_ci_n_over_targets_and_seeds(tables):
    t1 = tables["table1"]
    assert [label for label, _ in t1.rows] == ["fullgrad", "ga", "r2f", "r2f [rank=4]"]
    cell = row(t1, "r2f")["rwku.usr"]
    assert (cell.mean, cell.n) == (82.0, 6)  # 80..84 over 2 targets x 3 seeds
    assert 80.0 <= cell.lo < 82.0 < cell.hi <= 84.0
    variant = row(t1, "r2f [rank=4]")
    assert (variant["rwku.usr"].mean, variant["rwku.usr"].lo, variant["rwku.usr"].n) == (10.0, None, 1)
    assert variant["wmdp.usr"] is None
    assert summarize([]) is None


def test_bootstrap_interval_covers_the_mean_at_its_stated_rate():
    """Over many samples from a known distribution, the 95% interval holds the true mean about 95% of the time."""
    import random

    rng = random.Random(1)
    hits = 0
    for i in range(200):
        values = [rng.gauss(10.0, 3.0) for _ in range(30)]
        stat = summarize(values, bootstrap_seed=i)
        hits += stat.lo <= 10.0 <= stat.hi
    assert 0.88 <= hits / 200 <= 0.99
    assert summarize([5.0] * 4).lo == summarize([5.0] * 4).hi == 5.0
    varied = [1.0, 4.0, 9.0, 2.0, 7.0]  # seeded: one seed gives one interval, another seed another
    assert summarize(varied, bootstrap_seed=3) == summarize(varied, bootstrap_seed=3) != summarize(varied, bootstrap_seed=4)


def test_bold_best_respects_direction(tables):
    import re

    md = to_markdown(tables["table1"])
    ci = r"\[\d+\.\d, \d+\.\d\] \(n=6\)"
    assert re.search(rf"\| r2f \| \*\*82\.0\*\* {ci} \| n/a \| \*\*97\.0\*\* {ci} \|", md)
    assert re.search(rf"\| fullgrad \| 52\.0 {ci} \|", md)
    rap = to_markdown(tables["rap"])  # lower is better
    assert re.search(rf"\| ga \| \*\*12\.0\*\* {ci} \|", rap) and "**22.0" not in rap
    alignment = to_markdown(tables["identity_alignment"])  # closeness to the untouched model: ranked neither way
    assert "**" not in alignment and "↑" not in alignment and "not a membership-inference attack" in alignment
    cost = tables["cost"]
    ratio = row(cost, "r2f")["rwku.seconds_vs_fullgrad"]
    assert ratio.mean == pytest.approx(4 / 12) and "0.33×" in to_markdown(cost)
    assert "| r2f [rank=4] | **1.00** [1.00, 1.00] (n=2) | 0.08× |" in to_markdown(cost)


def test_all_formats_state_provenance(tables):
    rendered = {fmt: render(list(tables.values()), fmt) for fmt in ("md", "latex", "csv", "html")}
    assert set(rendered["csv"]) == {f"{name}.csv" for name in tables}
    for fmt, files in rendered.items():
        for text in files.values():
            for needle in (MODEL, PROXY, "rwku-rev1", "r2f-bench 0.1.0", "torch 2.13.0"):
                assert needle in text, (fmt, needle)
    tex = rendered["latex"]["tables.tex"]
    assert r"\toprule" in tex and r"\cmidrule(lr){2-5}" in tex and r"\textbf{82.0} {\scriptsize [" in tex
    assert r"\multicolumn{4}{c}{wmdp}" in tex and r"$\times$ fullgrad" in tex
    page = rendered["html"]["tables.html"]
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page and "<b>82.0</b> [" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page
    table1 = rendered["csv"]["table1.csv"]
    rows = list(csv.DictReader(io.StringIO("\n".join(l for l in table1.splitlines() if not l.startswith("#")))))
    r2f = next(r for r in rows if r["row"] == "r2f")
    assert (float(r2f["rwku.usr_mean"]), r2f["rwku.usr_n"]) == (82.0, "6")
    assert float(r2f["rwku.usr_lo"]) < 82.0 < float(r2f["rwku.usr_hi"])


def test_transfer_matrix():
    recs = [record("r2f", "rwku", seed, "t1", 50 + 10 * i + seed, 90.0, 0.0, 0.9, 1.0, model=t, proxy=p)
            for seed in (0, 1) for i, (t, p) in enumerate(
                [("embedded:llama-h128-l4", "embedded:gpt2-h64-l2"), ("embedded:llama-h128-l4", "embedded:llama-h64-l2"),
                 ("embedded:gpt2-h128-l4", "embedded:gpt2-h64-l2")])]
    tables = {t.name: t for t in build_tables(recs)}
    matrix = tables["transfer-r2f-rwku"]
    assert [label for label, _ in matrix.rows] == ["embedded:gpt2-h128-l4", "embedded:llama-h128-l4"]
    assert [c.group for c in matrix.columns] == ["embedded:gpt2-h64-l2"] * 2 + ["embedded:llama-h64-l2"] * 2
    cells = row(matrix, "embedded:gpt2-h128-l4")
    assert cells["embedded:gpt2-h64-l2.usr"].mean == 70.5 and cells["embedded:llama-h64-l2.usr"] is None
    assert "**70.5** [70.0, 71.0] (n=2)" in to_markdown(matrix)
    for r in recs:
        r["config"]["control"] = "random_step"
    assert "transfer-r2f-control-random_step-rwku" in {t.name for t in build_tables(recs)}  # a file name, a label


def test_a_transfer_matrix_holds_one_setting():
    """Before: only params and views told matrices apart, so float32 and bfloat16 runs of one
    (model, proxy) pair shared a cell, each (target, seed) in it twice (n=4, a collapsed interval)."""
    recs = [{**(r := record("r2f", "rwku", seed, "t1", usr, 90.0, 0.0, 0.9, 1.0, model=t, proxy=p)),
             "config": {**r["config"], "dtype": dtype}}
            for dtype, usr in (("float32", 80.0), ("bfloat16", 20.0)) for seed in (0, 1)
            for t, p in (("embedded:llama-h128-l4", "embedded:llama-h64-l2"), ("embedded:llama-h128-l4", "embedded:gpt2-h64-l2"))]
    matrices = [t for t in build_tables(recs) if t.name.startswith("transfer-r2f-rwku")]
    assert sorted(t.title for t in matrices) == ["Proxy → target transfer of r2f, rwku (dtype=bfloat16)",
                                                 "Proxy → target transfer of r2f, rwku (dtype=float32)"]
    for t in matrices:
        usr = {c.mean for c in row(t, "embedded:llama-h128-l4").values() if c.n} - {90.0}
        assert len(usr) == 1 and all(c.n == 2 for c in row(t, "embedded:llama-h128-l4").values())


def test_no_cost_ratio_to_a_reference_with_several_rows():
    """Before: × r2f divided by whichever r2f row sorted first (rank=4 here, 2 s, not rank=8's 20 s)."""
    recs = [record("r2f", "rwku", 0, "t1", 1.0, 1.0, 1.0, 1.0, 20.0, params={"rank": "8"}),
            record("r2f", "rwku", 0, "t1", 1.0, 1.0, 1.0, 1.0, 2.0, params={"rank": "4"}),
            record("ga", "rwku", 0, "t1", 1.0, 1.0, 1.0, 1.0, 10.0)]
    cost = {t.name: t for t in build_tables(recs, reference="r2f")}["cost"]
    assert not any(c.key.endswith("_vs_r2f") for c in cost.columns)
    assert "No × r2f ratios: r2f has 2 rows here." in cost.note
    one = {t.name: t for t in build_tables(recs[1:], reference="r2f")}["cost"]
    assert row(one, "ga")["rwku.seconds_vs_r2f"].mean == 5.0


def test_a_local_model_is_grouped_by_its_content_and_named_by_its_file():
    """Records of one GGUF file given by two paths share a row, named by the file (and its
    hash's start), not by a hash alone."""
    local = {"model": "sha256:b179c9523d0e6a0f", "proxy": "sha256:0123456789abcdef"}
    recs = [{**record("r2f", "rwku", seed, "t1", 50.0 + seed, 90.0, 0.0, 0.9, 1.0, model=m, proxy=p),
             "identities": named}
            for seed, m, p, named in [(0, "/a/S.gguf", "/a/P.gguf", local), (1, "../b/S.gguf", "../b/P.gguf", local),
                                      (0, "/a/S.gguf", "embedded:llama-h64-l2", {"model": local["model"]})]]
    matrix = next(t for t in build_tables(recs) if t.name == "transfer-r2f-rwku")
    assert [label for label, _ in matrix.rows] == ["S.gguf (b179c952)"]
    assert [c.group for c in matrix.columns][::2] == ["embedded:llama-h64-l2", "P.gguf (01234567)"]
    assert row(matrix, "S.gguf (b179c952)")["sha256:0123456789abcdef.usr"].n == 2


def test_table_command_writes_every_format(tmp_path, capsys):
    store = stored(synthetic(), tmp_path / "store")
    table("--output", str(store.root))
    written = sorted(p.name for p in (store.root / "tables").iterdir())
    assert written == ["cost.csv", "identity_alignment.csv", "levels.csv", "paired.csv", "rap.csv", "table1.csv",
                       "tables.html", "tables.md", "tables.tex"]
    out = capsys.readouterr().out
    assert "**82.0** [" in out and "### Paired differences against fullgrad" in out
    with pytest.raises(UserError, match="no results"):
        table("--output", str(tmp_path / "empty"))
    with pytest.raises(UserError, match=r"^--baseline npo: no row of the table; choose one of fullgrad, ga, r2f, "
                                        r"r2f \[rank=4\]$"):
        table("--output", str(store.root), "--baseline", "npo")


def test_runs_differing_only_in_a_default_get_separate_rows():
    """Two runs with the same command line but a changed default (resolved params) are not averaged."""
    old = [{**record("r2f", "rwku", s, "t1", 10.0, 90.0, 50.0, 0.9, 1.0), "params": {"step": 0.01, "aggregate": "after"}}
           for s in (0, 1)]
    new = [{**record("r2f", "rwku", s, "t1", 20.0, 80.0, 40.0, 0.8, 1.0), "params": {"step": 0.01, "aggregate": "before"}}
           for s in (0, 1)]
    t1 = {t.name: t for t in build_tables(old + new)}["table1"]
    assert [label for label, _ in t1.rows] == ["r2f [aggregate=after]", "r2f [aggregate=before]"]
    assert row(t1, "r2f [aggregate=before]")["rwku.usr"].mean == 20.0


def test_models_taught_the_world_on_other_schedules_get_separate_rows():
    """A pretrained model taught the knowledge world on another schedule (or thread count) is
    another model: its runs are not averaged with the default schedule's."""
    runs = lambda usr, **teach: [{**(r := record("ga", "rwku", s, "t1", usr, 90.0, 50.0, 0.9, 1.0)),
                                  "config": {**r["config"], **teach}} for s in (0, 1)]
    t1 = {t.name: t for t in build_tables(runs(10.0) + runs(30.0, teach_epochs=4, teach_lr=3e-4)
                                          + runs(50.0, teach_epochs=4, teach_lr=3e-4, teach_threads=2))}["table1"]
    assert sorted(label for label, _ in t1.rows) == ["ga", "ga [teaching=4x0.0003, 2 threads]", "ga [teaching=4x0.0003]"]
    assert row(t1, "ga [teaching=4x0.0003]")["rwku.usr"].mean == 30.0


@pytest.mark.parametrize("option,value", [("dtype", "bfloat16"), ("chat_template", "off"), ("sequential", True),
                                          ("dev_targets", 0), ("target_modules", ["q_proj", "v_proj"]),
                                          ("attacks", "none"), ("rap_steps", 0), ("rap_lr", 1e-4)])
def test_runs_differing_in_any_option_their_key_holds_get_separate_rows(option, value):
    """Before: a bfloat16 run (or a sequential one, or one asked without the chat template) was
    averaged with the float32 run of the same method, targets and seeds, and `r2f-bench table`
    kept only the newer of each cell, setting the other aside as a duplicate."""
    runs = lambda usr, **c: [{**(r := record("ga", "rwku", s, "t1", usr, 90.0, 50.0, 0.9, 1.0)),
                              "config": {**r["config"], **c}, "stored_at": float(usr)} for s in (0, 1)]
    kept, aside = newest_per_cell(runs(10.0) + runs(30.0, **{option: value}))
    assert len(kept) == 4 and not aside
    t1 = {t.name: t for t in build_tables(kept)}["table1"]
    assert sorted((c[0].mean, c[0].n) for _, c in t1.rows) == [(10.0, 2), (30.0, 2)]
    shown = ",".join(value) if isinstance(value, list) else value
    label = f"ga [{option}={shown}]"
    assert row(t1, label)["rwku.usr"].mean == 30.0


@pytest.mark.parametrize("mode", [{"sequential": True}, {"control": "other_request"}])
def test_runs_whose_records_depend_on_other_targets_are_told_apart_by_them(mode):
    """Before: a target's record from sequential deletions after two other targets and one after a
    single other one (or scored after another target's request under other_request) shared a cell,
    and the older was set aside as a duplicate."""
    runs = lambda usr, targets: [{**(r := record("ga", "rwku", s, "t1", usr, 90.0, 50.0, 0.9, 1.0)),
                                  "config": {**r["config"], **mode, "targets": targets, "limit": None},
                                  "stored_at": float(usr)} for s in (0, 1)]
    kept, aside = newest_per_cell(runs(10.0, ["t0", "t1"]) + runs(30.0, ["t2", "t3", "t1"]) + runs(50.0, ["t0", "t1"]))
    assert len(kept) == 4 and sum(aside.values()) == 2  # the repeat of the same sequence is the one set aside
    t1 = {t.name: t for t in build_tables(kept)}["table1"]
    name = "ga" if "sequential" in mode else "ga (control: other_request)"
    assert sorted(label for label, _ in t1.rows) == [f"{name} [sequence=t0,t1]", f"{name} [sequence=t2,t3,t1]"]


def test_every_run_option_is_a_setting_the_cell_or_where_it_ran():
    """A new option is placed on purpose: in what tells records' settings apart (a row each), in
    a table cell's own identity, or among the fields that only say where or how fast it ran."""
    from dataclasses import fields

    from r2f_bench.engine.config import RunConfig
    from r2f_bench.results.cells import RUN_FIELDS
    from r2f_bench.results.store import WHERE_FIELDS

    cell = {"method", "task", "seed", "split", "targets", "limit", "data_dir"}  # data_dir: the data revision
    named = {"model", "proxy", "params", "views", "paraphraser", "forget_source", "retain_items", "control",
             "teach_epochs", "teach_lr", "teach_threads"}
    same_results = {"trust_remote_code"}  # allows a model's own code; what that code computes is the model's
    assert {f.name for f in fields(RunConfig)} == cell | named | same_results | set(RUN_FIELDS) | set(WHERE_FIELDS)


def test_a_records_setting_is_read_without_torch():
    """Grouping records (cells: their key's configuration, the teaching defaults) loads no torch."""
    import subprocess
    import sys

    code = "import sys, r2f_bench.results.cells; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_level_table_reports_each_held_out_set_beside_pooled_and_seen():
    recs = [{**record("r2f", "rwku", seed, t, 10.0 + seed, 90.0, 5.0, 0.9, 1.0),
             "usr_seen": 50.0, "usr_by_level": {"forget_fb": 20.0 + seed, "forget_qa": None}}
            for seed in (0, 1) for t in ("t1", "t2")]
    levels = next(t for t in build_tables(recs) if t.name == "levels")
    assert [c.key for c in levels.columns] == ["rwku.usr_by_level.forget_fb", "rwku.usr_by_level.forget_qa",
                                               "rwku.usr", "rwku.usr_seen"]
    cells = row(levels, "r2f")
    assert (cells["rwku.usr_by_level.forget_fb"].mean, cells["rwku.usr_by_level.forget_fb"].n) == (20.5, 4)
    assert cells["rwku.usr_by_level.forget_qa"].n == 0 and cells["rwku.usr_seen"].mean == 50.0  # n/a


def test_a_metric_no_record_defines_shows_na_with_its_reason_in_every_format():
    """A row that ran on a dataset but forgot nothing has no RAP: ``n/a``, explained under
    every table; a dataset the row never ran on stays blank."""
    recs = [record("r2f", "rwku", s, "t1", 10.0, 90.0, None, 0.9, 1.0) for s in (0, 1)]
    recs.append(record("ga", "wmdp", 0, "t1", 10.0, 90.0, 5.0, 0.9, 1.0))
    tables = {t.name: t for t in build_tables(recs)}
    cells = row(tables["rap"], "r2f")
    assert cells["rwku.rap"].n == 0 and cells["wmdp.rap"] is None
    assert "| r2f | n/a | n/a | – | – |" in to_markdown(tables["rap"])
    assert "| ga | – | – | **5.0** (n=1) | n/a |" in to_markdown(tables["rap"])
    for fmt in ("md", "latex", "csv", "html"):
        for text in render(list(tables.values()), fmt).values():
            assert "n/a: undefined, nothing to count: RAP where nothing was forgotten" in text, fmt
    csv_rows = [line for line in render([tables["rap"]], "csv")["rap.csv"].splitlines() if not line.startswith("#")]
    r2f = next(r for r in csv.DictReader(io.StringIO("\n".join(csv_rows))) if r["row"] == "r2f")
    assert (r2f["rwku.rap_mean"], r2f["rwku.rap_n"], r2f["wmdp.rap_mean"]) == ("n/a", "0", "")


PHASES = {"untouched": 1.0, "unlearn": 2.0, "evaluate": 4.0, "extra": 0.25, "alignment": 0.5, "rap": 2.0,
          "restore": 0.25}


def phases_store(tmp_path):
    """A store of two timed r2f records and one ga record from before phases were recorded."""
    timed = [{**record("r2f", "rwku", s, "t1", 80.0, 90.0, 10.0, 0.9, 2.0), "phases": PHASES,
              "phases_once": {"load": 30.0, "setup": 5.0}} for s in (0, 1)]
    return stored(timed + [record("ga", "rwku", 0, "t1", 60.0, 80.0, 10.0, 0.6, 1.0)], tmp_path / "store")


def table(*argv):
    parser = argparse.ArgumentParser()
    add_table_parser(parser.add_subparsers())
    args = parser.parse_args(["table", *argv])
    args.func(args)


def test_phases_table_shows_where_the_time_goes_and_na_for_untimed_records(tmp_path, capsys):
    store = phases_store(tmp_path)
    table("--output", str(store.root), "--phases", "--format", "md")
    out = capsys.readouterr().out
    assert "### Where the time goes" in out
    # the phases' sum, 80% of it outside unlearn, then the run's one-time load and setup
    assert "| 10.00 [10.00, 10.00] (n=2) | 80.0 (n=2) | 30.00 [30.00, 30.00] (n=2) | 5.00 [5.00, 5.00] (n=2) |" in out
    assert "| ga |" + " n/a |" * 11 in out


def test_the_per_target_table_shows_where_a_mean_over_targets_comes_from(tmp_path, capsys):
    """Each row's USR per target, most known probes first, and every target's probes pooled: a
    pooled share weighs targets by their known probes, the mean over targets does not."""
    def rec(method, target, known, forgotten, seed=0):
        return {**record(method, "rwku", seed, target, 100.0 * forgotten / known, 95.0, 0.0, 0.9, 1.0),
                "known_forget_probes": known, "forgotten_forget_probes": forgotten}

    recs = [rec("fullgrad", "marx", 18, 6), rec("fullgrad", "socrates", 6, 6),
            rec("r2f", "marx", 18, 5), rec("r2f", "marx", 18, 7, seed=1), rec("r2f", "socrates", 6, 0)]
    store = stored(recs, tmp_path / "store")
    table("--output", str(store.root), "--per-target", "--format", "md")
    out = capsys.readouterr().out
    section = out[out.index("### USR per target, rwku"):]
    assert "| Target | known | fullgrad USR | r2f USR |" in section
    assert "| marx | 18 (n=3) | 33.3 (n=1) | 33.3 [27.8, 38.9] (n=2) |" in section
    assert "| socrates | 6 (n=2) | 100.0 (n=1) | 0.0 (n=1) |" in section
    assert section.index("| marx |") < section.index("| socrates |")  # most known first
    # pooled: fullgrad 12/24 = 50 % (its mean over targets is 66.7), r2f 12/42
    assert "| all targets, pooled | 24 (n=2) | 50.0 (n=2) | 28.6 (n=3) |" in section
    assert "**" not in section.split("\n- ")[0]  # no bold: a column compares targets
    # a row whose held-out sets differ (another model, a request that makes a set seen): known is n/a, not a mix
    other = {**recs[0]["config"], "method": "npo", "model": "other"}
    recs.append({**rec("npo", "marx", 12, 6), "config": other})
    recs.append({**rec("npo", "socrates", 4, 3), "usr": 100.0, "config": other})  # chance-corrected: 3 of 4 is all
    capsys.readouterr()
    table_of = {t.name: t for t in build_tables(recs, per_target=True)}["targets-rwku"]
    rows = {label: cells for label, cells in table_of.rows}
    assert rows["marx"][0].n == 0 and rows["socrates"][0].n == 0 and rows["all targets, pooled"][0].n == 0
    npo = [c.key for c in table_of.columns].index("npo.usr")
    assert rows["all targets, pooled"][npo].mean == pytest.approx((50 * 12 + 100 * 4) / 16)  # USR weighted by known
    table("--output", str(store.root), "--format", "md")
    assert "USR per target" not in capsys.readouterr().out  # only when asked


def test_a_controls_row_names_the_setting_of_the_method_it_stands_beside():
    """Two settings of RMU and a control of one: the control's row says which (it did not, when
    a row's label looked only at the records of its own name)."""
    recs = [record("rmu", "rwku", 0, "t1", 80.0, 95.0, 0.0, 0.9, 1.0, params={"lr": lr}) for lr in ("1e-4", "1e-5")]
    control = record("rmu", "rwku", 0, "t1", 40.0, 95.0, 0.0, 0.9, 1.0, params={"lr": "1e-4"})
    control["config"]["control"] = "other_request"
    labels = [label for label, _ in next(t for t in build_tables(recs + [control]) if t.name == "table1").rows]
    assert labels == ["rmu (control: other_request) [lr=1e-4]", "rmu [lr=1e-4]", "rmu [lr=1e-5]"]


def test_phases_json_carries_the_numbers_under_their_own_key(tmp_path, capsys):
    import json

    store = phases_store(tmp_path)
    table("--output", str(store.root), "--phases", "--format", "csv", "--json")
    summary = json.loads(capsys.readouterr().out)
    assert "phases" not in [t["name"] for t in summary["tables"]]
    rows = {r["row"]: r["cells"] for r in summary["phases"]["rows"]}
    assert rows["r2f"]["rwku.phases.evaluate"]["mean"] == 4.0 and rows["r2f"]["rwku.phases.evaluate"]["n"] == 2
    assert (rows["r2f"]["rwku.phases_sum"]["mean"], rows["r2f"]["rwku.outside_unlearn"]["mean"]) == (10.0, 80.0)
    assert rows["r2f"]["rwku.phases_once.load"]["mean"] == 30.0
    assert rows["ga"]["rwku.phases_sum"] == {"mean": None, "lo": None, "hi": None, "n": 0, "targets": None,
                                             "seeds": None}


def test_time_tables_say_which_rows_ran_on_which_machine_when_they_mix_machines():
    """A time measured on one CPU is no ratio to one measured on another: the cost and phases
    tables name each machine's rows when the records come from several; from one, nothing."""
    def rec(method, target, machine):
        return {**record(method, "rwku", 0, target, 50.0, 95.0, 0.0, 0.9, 1.0), "machine": machine}

    one = [rec("fullgrad", t, "Xeon (avx2)") for t in ("a", "b")] + [rec("r2f", t, "Xeon (avx2)") for t in ("a", "b")]
    mixed = one[:3] + [rec("r2f", "b", "EPYC (avx2)"), {**rec("ga", "a", None), "machine": None}]
    for records, said in ((one, False), (mixed, True)):
        tables = {t.name: t for t in build_tables(records, reference="fullgrad", phases=True)}
        for name in ("cost", "phases"):
            note = tables[name].note
            assert ("more than one machine (EPYC (avx2): r2f; Xeon (avx2): fullgrad, r2f; not recorded: ga)" in note) == said
            assert ("machine" in note) == said, note
    assert "Machines: EPYC (avx2) (n=1); Xeon (avx2) (n=3); not recorded (n=1)" in to_markdown(tables["cost"])


def test_a_row_standing_on_several_data_revisions_is_named_in_every_caption():
    """Before: RWKU's bundled sample and the full data (other targets, so no cell replaced the
    other) averaged into one row and only the provenance listed both revisions."""
    sample = record("ga", "rwku", 0, "t1", 10.0, 90.0, 50.0, 0.9, 1.0)
    full = {**record("ga", "rwku", 0, "t2", 30.0, 90.0, 50.0, 0.9, 1.0), "data_revision": "rwku-full"}
    tables = build_tables([sample, full, record("r2f", "rwku", 0, "t1", 50.0, 90.0, 50.0, 0.9, 1.0)])
    assert all("Rows pooling records of several data revisions (other data, or the data changed): ga on rwku (2)."
               in t.note for t in tables)
    assert not any("several data revisions" in t.note for t in build_tables([sample]))
