"""benchmarks/real_lm.py end to end on the demo model and world (a smoke test of the
script: scan, calibration from the weakest setting up, the table)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_script_scans_calibrates_and_tabulates(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("real_lm", ROOT / "benchmarks" / "real_lm.py")
    real_lm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real_lm)
    assert real_lm.main(["--scan", "3", "--targets", "1", "--calibrate", "1", "--methods", "fullgrad",
                         "--threads", "1", "--output", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "table targets: " in err and "calibrated fullgrad: step 0.0002 -> GUR " in err
    assert "chosen settings: fullgrad step=" in out and "| fullgrad |" in out and "R2F's proxy" not in out
    assert len(list((tmp_path / "table" / "jobs").glob("*.json"))) == 1
