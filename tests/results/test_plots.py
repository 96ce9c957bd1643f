import argparse

import pytest
from records import record, stored

from r2f_bench.errors import UserError
from r2f_bench.cli.plot import add_parser as add_plot_parser
from r2f_bench.results.plots import ablation_figure, plot_ablation, series


def ablation_records():
    out = []
    for task in ("rwku", "wmdp"):
        for seed in (0, 1):
            for rank in (2, 4, 8):
                out.append(record("r2f", task, seed, "t1", 10.0 * rank + seed, 90.0, 5.0, 0.9, 1.0,
                                  params={"rank": str(rank)}))
            for views in (1, 2, 3):
                r = record("r2f", task, seed, "t1", 20.0 + views, 80.0, 5.0, 0.8, 1.0)
                r["config"]["views"] = views
                out.append(r)
    out.append(record("fullgrad", "rwku", 0, "t1", 50.0, 90.0, 30.0, 0.7, 10.0))  # views=5 only: no line
    return out


def test_series_per_task_and_line():
    rank = series(ablation_records(), "rank")
    assert set(rank) == {("rwku", "r2f"), ("wmdp", "r2f")}
    stat = rank[("rwku", "r2f")]["usr"][4.0]
    assert (stat.mean, stat.n) == (40.5, 2)
    views = series(ablation_records(), "views")
    assert set(views) == {("rwku", "r2f"), ("wmdp", "r2f")}  # rank runs differ in params: not this line
    assert sorted(views[("rwku", "r2f")]["usr"]) == [1.0, 2.0, 3.0]
    assert series([], "rank") == {}


def test_a_line_is_one_setting_of_evaluated_deletions():
    """Before: a bfloat16 run's ranks joined the float32 line (or overwrote its points at the same
    ranks) under one label, and dev-split (tune) and diverged records were averaged in."""
    recs = []
    for dtype, base in (("float32", 50.0), ("bfloat16", 10.0)):
        for rank in (2, 4):
            r = record("r2f", "rwku", 0, "t1", base + rank, 90.0, 5.0, 0.9, 1.0, params={"rank": str(rank)})
            recs.append({**r, "config": {**r["config"], "dtype": dtype}})
    dev = record("r2f", "rwku", 0, "d1", 99.0, 90.0, 5.0, 0.9, 1.0, params={"rank": "2"})
    dev["config"]["split"] = "dev"
    diverged = {**record("r2f", "rwku", 1, "t1", 0.0, 0.0, 5.0, 0.9, 1.0, params={"rank": "2"}), "status": "diverged"}
    lines = series(recs + [dev, diverged], "rank")
    assert set(lines) == {("rwku", "r2f, dtype=float32"), ("rwku", "r2f, dtype=bfloat16")}
    usr = lambda label: {x: (s.mean, s.n) for x, s in lines[("rwku", label)]["usr"].items()}
    assert usr("r2f, dtype=float32") == {2.0: (52.0, 1), 4.0: (54.0, 1)}
    assert usr("r2f, dtype=bfloat16") == {2.0: (12.0, 1), 4.0: (14.0, 1)}


def test_plots_written_as_png(tmp_path, capsys):
    store = stored(ablation_records(), tmp_path / "store")
    parser = argparse.ArgumentParser()
    add_plot_parser(parser.add_subparsers())
    args = parser.parse_args(["plot", "--output", str(store.root)])
    args.func(args)
    for axis in ("rank", "views"):
        assert (store.root / "plots" / f"{axis}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plot_ablation([r for r in ablation_records() if "rank" not in r["config"]["params"]], "rank",
                             tmp_path / "none.png")
    args = parser.parse_args(["plot", "--output", str(tmp_path / "empty")])
    with pytest.raises(UserError, match="no rank or views ablation"):
        args.func(args)


def test_the_ablation_title_fits_a_one_dataset_figure():
    """The narrowest figure (one dataset) shows its whole title, and identity alignment has no "better" arrow."""
    fig = ablation_figure(series([r for r in ablation_records() if r["task"] == "rwku"], "views"), "views")
    fig.canvas.draw()
    title = next(t for t in fig.texts if t.get_text().startswith("R2F ablation: views"))
    box = title.get_window_extent()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
    assert [ax.get_ylabel() for ax in fig.axes] == ["USR ↑", "GUR ↑", "RAP ↓", "ID-align"]
