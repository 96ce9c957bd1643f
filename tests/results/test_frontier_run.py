"""Measuring the frontiers: the first round's order under a budget, what a cut leaves out,
and a curve's own knob range."""

from __future__ import annotations

import pytest

from r2f_bench.errors import UserError
from r2f_bench.results.frontier_run import first_round, without_cut
from r2f_bench.results.frontier_settings import Curve, Settings, curves_of


def test_a_frontiers_first_round_puts_the_shipped_defaults_then_the_weakest_strengths_first():
    curves = [Curve("a", "lr", {"params": {}, "method": "a", "task": "t"}, [0], [0.1, 0.01, 1.0]),
              Curve("b", "step", {"params": {}, "method": "b", "task": "t"}, [0], [0.2, 0.02])]
    order = [(j.fields["method"], j.fields["params"]) for j in first_round(curves)]
    assert order == [("a", {}), ("b", {}), ("a", {"lr": "0.01"}), ("b", {"step": "0.02"}), ("a", {"lr": "0.1"}),
                     ("b", {"step": "0.2"}), ("a", {"lr": "1.0"})]
    without_cut(curves, [curves[0].jobs(1.0)[0].label])
    assert curves[0].strengths == [0.1, 0.01] and curves[1].strengths == [0.2, 0.02]
    with pytest.raises(UserError, match="no time for every method's shipped defaults"):
        without_cut(curves, [curves[1].shipped()[0].label])


def test_a_frontier_gives_each_method_only_the_inputs_it_reads():
    """--views and --retain-items apply to the methods that read them; gradient ascent's curve runs at
    the defaults (before: its every job was refused, or stored apart from the same work)."""
    settings = Settings(["r2f", "grad_ascent", "npo@retain_weight=1"], "rwku", [0],
                        {"output": "o", "views": 3, "retain_items": 8, "attacks": "none"}, 3, 0, None, False)
    r2f, ga, npo = curves_of(settings, settings.methods)
    assert (r2f.base["views"], r2f.base["retain_items"]) == (3, 64)
    assert (ga.base["views"], ga.base["retain_items"]) == (5, 64)
    assert (npo.base["views"], npo.base["retain_items"]) == (3, 8)
    both = Settings(["simnpo", "graddiff"], "rwku", [0], {"output": "o", "retain_items": 8,
                                                           "params": {"retain_weight": "0"}}, 3, 0, None, False)
    assert [c.base["retain_items"] for c in curves_of(both, both.methods)] == [64, 64]  # --set decides too


def test_a_frontier_entry_can_give_its_knob_a_range_of_its_own():
    """A pretrained model's steps lie far below the demo model's declared range."""
    settings = Settings(["fullgrad@step=1e-4:1e-3", "fullgrad"], "rwku", [0], {"output": "o"}, 3, 0, None, False)
    ranged, declared = curves_of(settings, settings.methods)
    assert ranged.strengths == [1e-4, 3.16e-4, 1e-3] and declared.strengths[0] == 0.002
    assert "step" not in ranged.base["params"] and ranged.entry == "fullgrad@step=1e-4:1e-3"
    for bad in ("fullgrad@step=1e-3:1e-4", "fullgrad@step=x:1", "fullgrad@step=0:1"):
        with pytest.raises(UserError, match=r"bad range step=.* write step=low:high with 0 < low < high"):
            curves_of(settings, [bad])
