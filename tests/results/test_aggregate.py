"""Target-level intervals: seeds of one target are resampled together, never as independent values."""

from __future__ import annotations

import numpy as np

from r2f_bench.results.aggregate import aggregate, clustered, summarize, target_weights


def test_seeds_of_a_target_do_not_narrow_its_interval():
    """Five seeds that repeat each target's value add no information about other targets:
    the interval is the four targets' own, while a pair-level bootstrap would shrink it."""
    per_target = {"t1": 10.0, "t2": 20.0, "t3": 30.0, "t4": 40.0}
    units = [(t, s) for t in per_target for s in range(5)]
    values = [per_target[t] for t, _ in units]
    stat = clustered(values, [t for t, _ in units], [s for _, s in units])
    alone = clustered(list(per_target.values()), list(per_target), [0] * 4)
    assert (stat.mean, stat.n, stat.targets, stat.seeds) == (25.0, 20, 4, 5)
    assert (stat.lo, stat.hi) == (alone.lo, alone.hi)
    naive = summarize(values)
    assert naive.hi - naive.lo < stat.hi - stat.lo


def test_weights_draw_whole_targets_and_pair_across_calls():
    targets = ["a", "a", "b", "c", "c", "c"]
    w = target_weights(targets, samples=50, bootstrap_seed=3)
    assert w.shape == (50, 6) and np.array_equal(w, target_weights(targets, samples=50, bootstrap_seed=3))
    assert (w[:, 0] == w[:, 1]).all() and (w[:, 3] == w[:, 5]).all()  # a target's units weigh alike
    assert (w[:, [0, 2, 3]].sum(axis=1) == 3).all()  # three targets drawn per sample
    lone = target_weights(["a", "a", "a"], samples=50)  # one target: its seeds are drawn
    assert (lone.sum(axis=1) == 3).all() and not (lone == 1).all()


def test_aggregate_reports_targets_and_seeds():
    records = [{"target": t, "seed": s, "usr": float(i)} for i, (t, s) in enumerate((("t1", 0), ("t1", 1), ("t2", 0)))]
    stat = aggregate(records, "usr", key=lambda r: "all")["all"]
    assert (stat.n, stat.targets, stat.seeds) == (3, 2, 2) and stat.lo <= stat.mean <= stat.hi
