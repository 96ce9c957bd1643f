"""Intervals over everything that varies: targets and taught models (seeds) resampled, crossed; never
units as if they were independent values."""

from __future__ import annotations

import numpy as np

from r2f_bench.results.stats import (clustered, group_stats, holm, percentile_interval, sign_flip_p, summarize,
                                     unit_weights)


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


def test_weights_draw_targets_and_seeds_crossed_and_pair_across_calls():
    targets = ["a", "a", "b", "b", "c", "c"]
    seeds = [0, 1, 0, 1, 0, 1]
    w = unit_weights(targets, seeds, samples=50, bootstrap_seed=3)
    assert w.shape == (50, 6) and np.array_equal(w, unit_weights(targets, seeds, samples=50, bootstrap_seed=3))
    # unit (t, s) weighs count(t) x count(s): rows factor into a target part and a seed part
    by_target = np.stack([w[:, [0, 1]].sum(1), w[:, [2, 3]].sum(1), w[:, [4, 5]].sum(1)], 1)
    by_seed = np.stack([w[:, [0, 2, 4]].sum(1), w[:, [1, 3, 5]].sum(1)], 1)
    unit_target, unit_seed = [0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 0, 1]
    assert np.allclose(w * w.sum(1, keepdims=True), by_target[:, unit_target] * by_seed[:, unit_seed])
    assert (w.sum(1) == 6).all()  # 3 targets drawn x 2 seeds drawn, every unit present
    assert not (w[:, 0] == w[:, 1]).all()  # a target's two taught models are drawn apart
    one_seed = unit_weights(["a", "b", "c"], [0, 0, 0], samples=50)
    assert (one_seed.sum(axis=1) == 3).all()  # the bootstrap over targets
    lone = unit_weights(["a", "a", "a"], [0, 0, 0], samples=50)  # one unit of each: units are drawn
    assert (lone.sum(axis=1) == 3).all() and not (lone == 1).all()
    sparse = unit_weights(["a", "b"], [0, 1], samples=200)  # (a, 1) and (b, 0) do not exist
    assert (sparse.sum(axis=1) > 0).all()


def test_a_method_by_model_interaction_widens_the_interval():
    """A difference between two methods that changes from one taught model to another
    (SD 3 points) is not a difference the next taught model will show: resampling targets
    alone covered the true mean difference 14 % of the time in this simulation (20 targets x
    3 seeds); the crossed bootstrap covers it far more often (still short of 95 % with only
    3 taught models), and without an interaction it covers at least 95 % (conservative)."""
    rng = np.random.default_rng(1)
    units = [(t, s) for t in range(20) for s in range(3)]
    targets, seeds = [u[0] for u in units], [u[1] for u in units]

    def coverage(interaction_sd: float, crossed: bool, runs: int = 150) -> float:
        hits = 0
        for run in range(runs):
            per_seed = rng.normal(0, interaction_sd, 3)
            diff = np.array([3 + per_seed[s] + rng.normal(0, 1.4) for _, s in units])
            w = unit_weights(targets, seeds if crossed else [0] * len(units), samples=500, bootstrap_seed=run)
            lo, hi = percentile_interval(w @ diff / w.sum(axis=1))
            hits += lo <= 3 <= hi
        return hits / runs

    assert coverage(3.0, crossed=False) < 0.35
    assert coverage(3.0, crossed=True) > 0.6
    assert coverage(0.0, crossed=True) >= 0.95


def test_group_stats_reports_targets_and_seeds():
    records = [{"target": t, "seed": s, "usr": float(i)} for i, (t, s) in enumerate((("t1", 0), ("t1", 1), ("t2", 0)))]
    stat = group_stats(records, "usr", key=lambda r: "all")["all"]
    assert (stat.mean, stat.n, stat.targets, stat.seeds) == (1.0, 3, 2, 2) and stat.lo <= stat.mean <= stat.hi


def test_holm_keeps_only_what_survives_the_family():
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == {"a": True, "b": False, "c": False}  # 0.03 > 0.05 / 2
    assert holm({"a": 0.01, "b": 0.02, "c": 0.04}) == {"a": True, "b": True, "c": True}
    assert holm({"a": 0.2}) == {"a": False} and holm({}) == {}


def test_the_sign_flip_test_is_exact_and_never_calls_three_targets():
    """Every difference of one sign: the bootstrap would say p = 0 on any number of targets;
    the sign-flip test says 2 / 2^k, so three targets cannot pass 0.05 and ten can."""
    assert sign_flip_p([1.0, 2.0, 3.0], ["a", "b", "c"]) == 0.25
    assert sign_flip_p([float(i) for i in range(1, 11)], list("abcdefghij")) == 2 / 1024
    assert sign_flip_p([5.0, -5.0, 1.0, -1.0], list("abcd")) == 1.0  # means 0: as far from 0 as every flip
    assert sign_flip_p([0.0, 0.0], ["a", "b"]) == 1.0 and sign_flip_p([], []) == 1.0
    # one target's two seeds are one unit: their sum (0) is what flips
    assert sign_flip_p([4.0, -4.0, 1.0, 2.0, 3.0], ["a", "a", "b", "c", "d"]) == sign_flip_p([0.0, 1.0, 2.0, 3.0], list("abcd"))
    # a tie that is not a mirror image counts as at least as far (|0.1 + 0.2 - 0.1| = |-0.1 + 0.2 + 0.1|)
    assert sign_flip_p([0.1, 0.2, -0.1], list("abc")) == 0.75
    # past the exact range, sampled assignments with the observed one counted: never 0, close to exact
    p = sign_flip_p([1.0] * 20, [str(i) for i in range(20)])
    assert 0 < p < 1e-4
    x = np.random.default_rng(3).normal(0.3, 1.0, 14)
    assert abs(sign_flip_p(x, list(range(14)), exact_up_to=0) - sign_flip_p(x, list(range(14)))) < 0.01
    # a two-sided p: which side does not matter; a small shift among large noise is not called
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 10, 12)
    assert sign_flip_p(noise + 0.5, list("abcdefghijkl")) == sign_flip_p(-(noise + 0.5), list("abcdefghijkl")) > 0.05
