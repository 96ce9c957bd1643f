import json
import multiprocessing as mp

import pytest

from r2f_bench.results.store import Store, job_key, record_key, upgraded

CONFIG = {"method": "r2f", "task": "rwku", "seed": 0, "params": {"rank": "8", "lr": "1e-4"}, "views": 5,
          "output": "out-a"}
VERSIONS = {"r2f-bench": "0.1.0"}


def test_key_is_canonical_and_ignores_output():
    k = job_key(CONFIG, "t1", "rev", VERSIONS)
    reordered = {**dict(reversed(list(CONFIG.items()))), "params": {"lr": "1e-4", "rank": "8"}}
    assert job_key(reordered, "t1", "rev", VERSIONS) == k
    assert job_key({**CONFIG, "output": "elsewhere"}, "t1", "rev", VERSIONS) == k
    assert len(k) == 64


@pytest.mark.parametrize("change", [
    dict(config={**CONFIG, "seed": 1}), dict(config={**CONFIG, "params": {"rank": "4", "lr": "1e-4"}}),
    dict(config={**CONFIG, "views": 3}), dict(target="t2"), dict(revision="rev2"),
    dict(versions={"r2f-bench": "0.2.0"}),
])
def test_key_changes_with_anything_that_determines_the_result(change):
    base = dict(config=CONFIG, target="t1", revision="rev", versions=VERSIONS)
    args = {**base, **change}
    assert job_key(args["config"], args["target"], args["revision"], args["versions"]) != \
        job_key(CONFIG, "t1", "rev", VERSIONS)


def test_put_get_records_and_export(tmp_path):
    store = Store(tmp_path)
    record = {"method": "r2f", "task": "rwku", "target": "t1", "seed": 0, "usr": 50.0, "config": CONFIG,
              "data_revision": "rev", "versions": VERSIONS}
    key = record_key(record)
    assert not store.done(key) and list(store.records()) == []
    store.put(key, record)
    assert store.done(key) and store.get(key)["key"] == key
    assert [r["usr"] for r in store.records()] == [50.0]
    store.put(key, record)  # same key again: idempotent
    assert len(store) == 1 and record_key(store.get(key)) == key
    assert [json.loads(line)["key"] for line in store.export().read_text().splitlines()] == [key]
    assert not list(store.jobs.glob(".*"))  # no temporary files left


def test_a_record_written_before_the_rename_reads_under_the_new_names(tmp_path, capsys):
    """An older store's ``mia`` (and ``n.mia_prompts``) count as identity alignment in the tables."""
    from r2f_bench.cli import main
    from records import record

    store = Store(tmp_path)
    new = record("r2f", "rwku", 0, "t1", 10.0, 90.0, 20.0, 0.876, 1.0)
    old = {**{k: v for k, v in new.items() if k != "identity_alignment"}, "mia": 0.876, "n": {"mia_prompts": 5}}
    store.jobs.mkdir(parents=True)
    store.path(record_key(old)).write_text(json.dumps(old))
    read = store.get(record_key(old))
    assert (read["identity_alignment"], read["n"], "mia" in read) == (0.876, {"identity_prompts": 5}, False)
    assert main(["table", "--output", str(tmp_path), "--format", "md"]) == 0
    assert "| r2f | 0.876 (n=1) |" in capsys.readouterr().out


def test_a_record_from_before_the_ratio_floor_reads_its_ratios_under_it(tmp_path):
    """An older record took Locality and the name control over every set, however little the
    untouched model scored there: read back, a set below the floor is left out where its set
    scores allow it, and the ratio is n/a where nothing is left; a newer record is as stored."""
    store = Store(tmp_path)
    roles = {"locality": ["fb", "qa"], "name_control": ["named"]}

    def put(target: str, before: dict, after: dict, locality: float, named: float, **more) -> dict:
        record = {"method": "r2f", "task": "rwku", "target": target, "seed": 0, "config": CONFIG,
                  "data_revision": "rev", "versions": VERSIONS, "roles": roles, "locality": locality,
                  "name_control": named, "set_scores": {"before": before, "after": after}, **more}
        return store.put(record_key(record), record)["key"]

    both = put("t1", {"fb": 20.0, "qa": 10.0, "named": 8.0}, {"fb": 10.0, "qa": 10.0, "named": 4.0}, 70.0, 50.0)
    one = put("t2", {"fb": 3.4, "qa": 7.9, "named": 1.7}, {"fb": 20.0, "qa": 3.95, "named": 9.0}, 300.0, 529.4,
              n={"locality": 50, "name_control": 21, "utility": 240})
    none = put("t3", {"fb": 0.0, "qa": 3.9, "named": 4.9}, {"fb": 5.0, "qa": 3.9, "named": 4.9}, 250.0, 100.0)
    newer = put("t4", {"fb": 3.4, "qa": 7.9, "named": 1.7}, {"fb": 20.0, "qa": 3.95, "named": 9.0}, 30.0, None,
                ratio_floor=5.0)
    three = {"locality": ["fb", "qa", "mc"], "name_control": ["named"]}
    unpoolable = put("t5", {"fb": 20.0, "qa": 10.0, "mc": 1.0, "named": 8.0}, {"fb": 10.0, "qa": 10.0, "mc": 1.0,
                                                                               "named": 4.0}, 70.0, 50.0, roles=three)
    read = {key: store.get(key) for key in (both, one, none, newer, unpoolable)}
    assert [(read[k]["locality"], read[k]["name_control"]) for k in (both, one, none, newer, unpoolable)] == \
        [(70.0, 50.0), (pytest.approx(50.0), None), (None, None), (30.0, None), (None, 50.0)]
    assert read[one]["n"] == {"locality": None, "name_control": None, "utility": 240}  # a left-out set's size: unknown
    assert upgraded(json.loads(json.dumps(read[one]))) == read[one]  # read twice, the same


@pytest.mark.parametrize("broken", [dict(roles=["fb"]), dict(set_scores=[1, 2]), dict(set_scores={"before": "x"}),
                                    dict(set_scores={"before": {"fb": "high"}, "after": {}})])
def test_an_older_record_of_another_shape_reads_as_stored_for_the_tables_checks(tmp_path, broken):
    """Re-reading under the floor never fails on a record of an unexpected shape: it is left as
    stored, so the table's own checks skip it with their line instead of a crash."""
    store = Store(tmp_path)
    record = {"method": "r2f", "task": "rwku", "target": "t1", "seed": 0, "config": CONFIG, "data_revision": "rev",
              "versions": VERSIONS, "roles": {"locality": ["fb"]}, "locality": 300.0,
              "set_scores": {"before": {"fb": 1.0}, "after": {"fb": 3.0}}, **broken}
    key = store.put(record_key(record), record)["key"]
    assert store.get(key)["locality"] == 300.0


def test_unreadable_file_is_not_done(tmp_path):
    store = Store(tmp_path)
    key = "ab" * 32
    store.jobs.mkdir(parents=True)
    store.path(key).write_text('{"truncated":')
    assert not store.done(key)
    deep = "cd" * 32
    store.path(deep).write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")  # past the parser's stack
    assert not store.done(deep)
    store.path(deep).unlink()
    with pytest.warns(UserWarning, match="unreadable"):
        assert list(store.records()) == []
    with pytest.raises(ValueError):
        store.path("../escape")


def _writer(root: str, worker: int, n: int) -> None:
    store = Store(root)
    for i in range(n):
        store.put(job_key({"i": i, "w": worker}, "t", "r", {}), {"worker": worker, "i": i, "pad": "x" * 5000})
        store.put(job_key({"shared": i}, "t", "r", {}), {"shared": i, "pad": "y" * 5000})


def test_concurrent_processes_never_corrupt(tmp_path):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 25)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    store = Store(tmp_path)
    records = list(store.records())
    assert len(records) == 3 * 25 + 25
    assert all(len(r["pad"]) == 5000 for r in records)
    lines = store.export().read_text().splitlines()
    assert len(lines) == 3 * 25 + 25 and all(json.loads(line) for line in lines)
    assert not list(store.jobs.glob(".*"))


def test_a_put_cut_off_mid_write_leaves_the_old_record(tmp_path, monkeypatch):
    """A write that dies halfway (disk full, a kill) never leaves a half record under the key."""
    from r2f_bench import atomic
    from r2f_bench.errors import UserError

    store = Store(tmp_path)
    key = job_key(CONFIG, "t1", "rev", VERSIONS)
    store.put(key, {"usr": 1.0, "pad": "x" * 5000})
    real_write = atomic.os.write

    def half_then_fail(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "write", half_then_fail)
    with pytest.raises(UserError):
        store.put(key, {"usr": 2.0, "pad": "y" * 5000})
    monkeypatch.undo()
    assert store.get(key) == {"usr": 1.0, "pad": "x" * 5000, "key": key}
    assert not list(store.jobs.glob(".*"))  # no temporary file left behind


def test_options_added_later_keep_older_stores_keys():
    """--attacks at its default (RAP alone) did what runs did before it existed: an older
    store's results keep their keys and resume; other attacks are other results."""
    old = job_key(CONFIG, "t1", "rev", VERSIONS)
    assert job_key({**CONFIG, "attacks": "rap"}, "t1", "rev", VERSIONS) == old
    assert job_key({**CONFIG, "attacks": "rap,quantize:nf4"}, "t1", "rev", VERSIONS) != old
    assert job_key({**CONFIG, "control": "none"}, "t1", "rev", VERSIONS) == old  # --control, added later
    assert job_key({**CONFIG, "control": "other_request"}, "t1", "rev", VERSIONS) != old
    assert job_key({**CONFIG, "teach_threads": 1}, "t1", "rev", VERSIONS) == old  # --teach-threads, added later
    assert job_key({**CONFIG, "teach_threads": 2}, "t1", "rev", VERSIONS) != old
