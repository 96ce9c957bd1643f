"""The metric registry: one record per metric that summaries, legends, tables and checks read."""

import pytest

from r2f_bench.metric import CORE, METRICS, MetricSpec, legend, register_metric


def test_every_metric_has_a_unit_a_definition_and_a_legend_line():
    assert legend(["usr", "identity_alignment", "unregistered"]) == [
        f"USR (%): {METRICS['usr'].definition}", f"ID-align (cosine): {METRICS['identity_alignment'].definition}"]
    assert all(s.unit in ("%", "cosine", "s", "MB") and s.definition for s in METRICS.values())
    assert [METRICS[m].column_title for m in ("gur", "seconds", "peak_mem_mb")] == ["GUR", "Time (s)", "Peak mem (MB)"]
    assert CORE[:3] == ("usr", "usr_seen", "gur") and "grad_cosine" not in CORE  # R2F's own, registered beside R2F


def test_a_name_is_registered_once():
    spec = METRICS["usr"]
    assert register_metric(spec) is spec  # the same again: a no-op
    with pytest.raises(ValueError, match="'usr' is registered already"):
        register_metric(MetricSpec("usr", "USR", "%", "something else"))


def test_a_third_party_metric_reaches_the_run_summary_and_the_record_check(monkeypatch):
    from r2f_bench.cli.run import summary
    from r2f_bench.results.cells import invalid
    from records import record

    spec = MetricSpec("calibration", "Calib", "%", "share of confident answers that are right", True,
                      range=(0.0, 100.0), items="n.calibration")
    monkeypatch.setitem(METRICS, spec.name, spec)
    r = {**record("mine", "rwku", 0, "t1", 50, 90, 10, 0.9, 1.0), "calibration": 42.0, "n": {"calibration": 7}}
    printed = summary([r], CORE + ("calibration",))
    assert "42.000 (n=7)*" in printed and "calibration: Calib (%): share of confident answers that are right" in printed
    assert invalid(r) is None
    assert "outside [0, 100]" in invalid({**r, "calibration": 140.0})
    monkeypatch.setitem(METRICS, "notes", MetricSpec("notes", "Notes", "%", "free text", kind="diagnostic"))
    assert invalid({**r, "notes": "no range: not checked"}) is None
