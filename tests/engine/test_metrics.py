"""The metric definitions on hand-made answer patterns."""

import pytest

from r2f_bench.engine.metrics import DEFINITIONS, kept, legend, recovery, usr


def test_rap_counts_only_the_forgotten_probes():
    """8 known probes, 7 still answered after unlearning, 1 forgotten. The attack brings
    the forgotten one back and loses one it had: RAP is 100 (1 of 1 forgotten came back),
    never the 75 of "answered after the attack among the known"."""
    before = [True] * 8
    after = [True] * 7 + [False]
    attacked = [True] * 5 + [False, False, True]
    assert recovery(before, after, attacked) == 100.0
    assert recovery(before, [True] * 8, attacked) is None  # nothing forgotten: no RAP
    assert recovery(before, [False] * 8, attacked) == pytest.approx(100 * 6 / 8)
    assert usr(before, after) == pytest.approx(100 / 8)


def test_rap_control_is_recall_kept_by_the_untouched_model_under_attack():
    before = [True, True, True, True, False]
    assert kept(before, [True, True, False, False, True]) == 50.0  # the unknown 5th does not count
    assert kept([False] * 3, [True] * 3) is None
    assert kept(before, [True] * 5, chance=0.25) == 100.0


def test_every_reported_metric_has_a_unit_and_definition():
    assert legend(["usr", "identity_alignment"]) == [f"USR (%): {DEFINITIONS['usr'][2]}",
                                                     f"ID-align (cosine): {DEFINITIONS['identity_alignment'][2]}"]
    assert all(unit in ("%", "cosine", "s", "MB") for _, unit, _ in DEFINITIONS.values())
