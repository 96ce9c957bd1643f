"""The stores committed under ``benchmarks/records/`` read whole (no record skipped), and the
numbers the docs cite from them are what a table built from them says: a documented table
can be rebuilt, and a changed record or statistic breaks a test, not a reader's trust."""

from pathlib import Path

import pytest

from r2f_bench.results.cells import tabulable
from r2f_bench.results.leaderboard import build_tables
from r2f_bench.results.store import Store

ROOT = Path(__file__).resolve().parents[1]
STORES = sorted(jobs.parent for jobs in ROOT.glob("benchmarks/records/*/*/jobs"))
SMOLLM2 = ROOT / "benchmarks/records/smollm2-rwku10/table"


@pytest.mark.parametrize("store", STORES, ids=lambda p: str(p.relative_to(ROOT / "benchmarks/records")))
def test_every_committed_record_reads_and_counts(store):
    records, skipped = tabulable(Store(store).records())
    assert records and not skipped, skipped


def test_gradient_ascents_own_control_is_what_the_docs_cite():
    records, skipped = tabulable(Store(SMOLLM2).records())
    assert not skipped
    ga = [r for r in records if r["method"] == "grad_ascent"]
    own = {r["target"]: r for r in ga if r["config"]["control"] == "none"}
    control = {r["target"]: r for r in ga if r["config"]["control"] == "other_request"}
    assert len(own) == len(control) == 10 and own.keys() == control.keys()
    pooled = [sum(rows[t]["forgotten_forget_probes"] for t in rows) for rows in (own, control)]
    assert pooled == [74, 51] and sum(r["known_forget_probes"] for r in own.values()) == 81

    paired = next(t for t in build_tables(ga, baseline="control:other_request") if t.name == "paired")
    (label, cells), = paired.rows
    usr = cells[0]
    cited = f"+{usr.mean:.1f} [{usr.lo:.1f}, {usr.hi:.1f}]"
    assert cited == "+25.2 [9.7, 44.6]" and usr.n == 10
    assert "≠0" not in label  # seven targets favour the request, three tie: p = 2/2^7, never named
    for page in ("docs/real_lm.md", "README.md"):
        assert cited in (ROOT / page).read_text(encoding="utf-8"), page
