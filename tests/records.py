"""Synthetic result records, shaped like a run's, for the tests of tables, plots, the store and the CLI."""

MODEL, PROXY = "embedded:mistral-h128-l4", "embedded:mistral-h64-l2"
FACTS = {"rwku": 120, "wmdp": 80}
# method -> (usr, gur, rap, identity alignment, seconds) bases; per seed s and target t the value is base + s + (0 | 2)
BASES = {"fullgrad": (50, 90, 30, 0.70, 10), "ga": (60, 80, 10, 0.60, 6), "r2f": (80, 95, 20, 0.90, 2)}


def record(method, task, seed, target, usr, gur, rap, alignment, seconds, params=None, model="embedded",
           proxy="embedded-proxy"):
    """A record shaped like the runner's; the model label differs per task, as embedded models' do."""
    config = {"method": method, "task": task, "seed": seed, "model": model, "proxy": proxy,
              "params": params or {}, "views": 5, "output": "x", "limit": None, "targets": None,
              "data_dir": None}
    label = f"{MODEL if model == 'embedded' else model} (embedded demo model, taught {FACTS[task]} facts)"
    return {"method": method, "task": task, "target": target, "seed": seed, "usr": usr, "gur": gur,
            "rap": rap, "identity_alignment": alignment, "seconds": seconds, "peak_mem_mb": 100.0 * seconds, "config": config,
            "versions": {"r2f-bench": "0.1.0", "torch": "2.13.0"},
            "models": {"target": label, "proxy": PROXY if proxy == "embedded-proxy" else proxy},
            "data_revision": f"{task}-rev1", "official": {}}


def synthetic():
    out = []
    for method, (usr, gur, rap, alignment, sec) in BASES.items():
        for task in ("rwku", "wmdp"):
            for seed in (0, 1, 2):
                for target, d in (("t1", 0), ("t2", 2)):
                    out.append(record(method, task, seed, target, usr + seed + d, gur + seed + d,
                                      rap + seed + d, alignment + (seed + d) / 100, sec + seed + d))
    # a variant with one seed, and a target whose USR is undefined (nothing known before)
    out.append(record("r2f", "rwku", 0, "t1", 10.0, 10.0, 99.0, 0.1, 1.0, params={"rank": "4"}))
    out.append(record("r2f", "rwku", 0, "t3", None, 10.0, 99.0, 0.1, 1.0, params={"rank": "4"}))
    return out


def stored(records, root):
    """A results store at ``root`` holding ``records``, each under its job key."""
    from r2f_bench.results.store import Store, record_key

    store = Store(root)
    for r in records:
        store.put(record_key(r), r)
    return store
