"""Shared fixtures: one CPU thread per process, an isolated model cache, the fake runner, the
prompts a model is asked, and tiny taught models on RWKU's bundled sample, built once per
session."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One CPU thread per process, here and in the processes tests spawn (``OMP_NUM_THREADS``
    and ``MKL_NUM_THREADS`` are inherited; runs without ``--threads`` read them), so the
    suite's results and time do not depend on the machine's cores or load."""
    import torch

    with pytest.MonkeyPatch.context() as env:
        for var in THREAD_VARIABLES:
            env.setenv(var, "1")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Every test session builds its models in a fresh cache (unless R2F_BENCH_CACHE is set)."""
    import os

    if "R2F_BENCH_CACHE" not in os.environ:
        os.environ["R2F_BENCH_CACHE"] = str(tmp_path_factory.mktemp("r2f-cache"))
    yield


@pytest.fixture
def fake_run(monkeypatch):
    """tests/fake_runner.py's Run in place of :class:`r2f_bench.engine.run.Run` wherever jobs
    run (sweep, tune, frontier; pickled into submitit's tasks); its calls cleared. The module."""
    import fake_runner
    from r2f_bench.engine import run

    monkeypatch.setattr(run, "Run", fake_runner.Run)
    fake_runner.CALLS.clear()
    return fake_runner


@pytest.fixture
def prompts_seen(monkeypatch):
    """``seen = prompts_seen(model, tok)``: from then on (this test), every prompt a
    ``model.generate`` call receives, whole and decoded without special tokens (a prompt
    pass may start after a cached chat header, so a forward hook sees only part of it)."""
    def watch(model, tok) -> list[str]:
        seen: list[str] = []
        generate = model.generate

        def recording(**kwargs):
            seen.extend(tok.batch_decode(kwargs["input_ids"], skip_special_tokens=True))
            return generate(**kwargs)

        monkeypatch.setattr(model, "generate", recording)
        return seen

    return watch


@pytest.fixture(scope="session")
def tiny():
    """Sample benchmark, a taught tiny target (h64, 2 layers) and a narrower taught proxy (h32)."""
    from r2f_bench.engine.embedded import EmbeddedSpec
    from r2f_bench.engine.models import embedded_model
    from r2f_bench.tasks.rwku import RWKU, SAMPLE_DIR

    bench = RWKU().load(SAMPLE_DIR, None, 2, n_dev=2, forget_source="probes")
    facts = bench.teaching_set()
    quiet = lambda m: None
    target, tok, _ = embedded_model(EmbeddedSpec.parse("embedded:mistral-h64-l2"), facts, bench.general_prompts,
                                    progress=quiet, max_epochs=150)
    proxy, ptok, _ = embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l2"), facts, bench.general_prompts,
                                    progress=quiet, max_epochs=150)
    return {"bench": bench, "model": target, "tok": tok, "proxy": proxy, "proxy_tok": ptok}


@pytest.fixture
def context(tiny, tmp_path):
    from r2f_bench.tasks.rwku import RWKU
    from r2f_bench.unlearner import Context, Proxy
    from r2f_bench.engine.views import Paraphraser, build_views

    bench = tiny["bench"]
    return Context(tokenizer=tiny["tok"], dev_targets=bench.dev_targets, retain_pool=bench.retain_pool(), seed=0,
                   cache_dir=tmp_path, make_views=lambda facts: build_views(facts, 5, Paraphraser()),
                   probe_roles=RWKU().roles_of(bench, bench.dev_targets),
                   proxy=Proxy("tiny-proxy", "tiny-proxy", lambda: (tiny["proxy"], tiny["proxy_tok"])), progress=lambda m: None)


@pytest.fixture(scope="session")
def pretrained(tmp_path_factory):
    """A stand-in pretrained folder: the demo model's architecture and tokenizer (with a chat
    template), freshly initialised, so it knows nothing of the knowledge world."""
    import torch

    from r2f_bench.engine import build
    from r2f_bench.engine.checkpoint import write_pretrained
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.engine.embedded import DEFAULT_MODEL, new_embedded_model
    from r2f_bench.engine.plan import Plan

    plan = Plan(RunConfig(method="", task="rwku", limit=1), progress=lambda m: None)
    tok = build.load_model(build.BuildInputs.of(plan), "embedded", DEFAULT_MODEL, torch.device("cpu"))[1]
    tok.chat_template = ("{% for m in messages %}<|user|> {{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %} <|bot|>{% endif %}")
    folder = tmp_path_factory.mktemp("pretrained")
    write_pretrained(new_embedded_model(DEFAULT_MODEL, tok, run_seed=5), tok, folder)
    return folder
