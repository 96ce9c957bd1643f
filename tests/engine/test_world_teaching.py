"""A knowledge world taught into a pretrained model (TOFU's protocol): a pretrained folder
run on the world is fine-tuned on it first (in float32, its questions as they will be
asked), the taught weights cached by what they depend on and read back into the loaded
model, a corrupt or misfitting entry rebuilt before any weight changes, and the model
named for what it is in the label, the record and the proxy's key."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from r2f_bench.engine import build, world_teaching
from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.embedded import DEFAULT_MODEL
from r2f_bench.engine.plan import Plan

CPU = torch.device("cpu")


def plan(folder, out, said: list[str] | None = None, method: str = "fullgrad", **kw) -> Plan:
    return Plan(RunConfig(method=method, task="rwku", limit=1, model=str(folder), output=str(out), **kw),
                progress=(said.append if said is not None else lambda m: None))


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture
def no_teaching(monkeypatch, tmp_path):
    """teach_schedule and the answered shares as stand-ins (what teaching was handed, nothing
    learned), their untaught weights cached apart from the session's cache."""
    seen: list[dict] = []
    monkeypatch.setattr(world_teaching, "cache_root", lambda: tmp_path / "cache")

    def teach(model, tok, texts, facts, steps, lr, **kw):
        seen.append({"texts": list(texts), "facts": list(facts), "dtype": next(model.parameters()).dtype,
                     "steps": steps, "lr": lr, "threads": torch.get_num_threads(), "apart": kw.get("apart")})

    monkeypatch.setattr(world_teaching, "teach_schedule", teach)
    monkeypatch.setattr(world_teaching, "world_answers", lambda *a: {"taught_answered": 0.0})
    return seen


def test_a_pretrained_model_on_the_world_is_taught_it_once_and_read_back(pretrained, tmp_path):
    said: list[str] = []
    model, tok, label, info = build.load_model(build.BuildInputs.of(plan(pretrained, tmp_path, said)), str(pretrained), DEFAULT_MODEL, CPU)
    untaught = weights(build.hf_model(str(pretrained), progress=lambda m: None)[0])
    taught = weights(model)
    assert any(not torch.equal(taught[k], untaught[k]) for k in taught)  # a no-op teaching fails
    assert label.startswith(f"{pretrained} (fine-tuned on a synthetic knowledge world, {world_teaching.EPOCHS} epochs")
    assert info["world_texts"] > 0 and info["steps"] == world_teaching.steps_and_batch(info["world_texts"], info["facts"])[0]
    assert any("teaching the knowledge world into the pretrained model" in m for m in said)
    said.clear()
    again = build.load_model(build.BuildInputs.of(plan(pretrained, tmp_path, said)), str(pretrained), DEFAULT_MODEL, CPU)
    assert any("loaded from cache" in m for m in said) and again[3]["key"] == info["key"]
    assert all(torch.equal(v, taught[k]) for k, v in again[0].state_dict().items())

    built = build.build_models(build.BuildInputs.of(plan(pretrained, tmp_path)), CPU)
    assert built.knowledge["taught"] and not built.knowledge["embedded"] and not built.knowledge["taught_strings"]


def test_a_corrupt_or_misfitting_entry_is_rebuilt_and_never_half_read(pretrained, tmp_path):
    info = build.load_model(build.BuildInputs.of(plan(pretrained, tmp_path)), str(pretrained), DEFAULT_MODEL, CPU)[3]
    path = world_teaching.cache_root() / "models" / f"taught-{info['key']}"
    model = build.hf_model(str(pretrained), progress=lambda m: None)[0]
    before = weights(model)
    state = {k: v for k, v in before.items() if "layers.1." not in k}  # a tensor short
    save_file({k: v.contiguous() for k, v in state.items() if k != "lm_head.weight"}, str(tmp_path / "short.st"))
    with pytest.raises(ValueError, match="missing"):
        world_teaching.read_weights(model, tmp_path / "short.st")
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # nothing changed

    (path / world_teaching.WEIGHTS).write_bytes(b"not weights")
    said: list[str] = []
    rebuilt = build.load_model(build.BuildInputs.of(plan(pretrained, tmp_path, said)), str(pretrained), DEFAULT_MODEL, CPU)
    assert any("teaching the knowledge world" in m for m in said) and not any("loaded from cache" in m for m in said)
    assert rebuilt[3]["key"] == info["key"] and (path / world_teaching.WEIGHTS).stat().st_size > 100


@pytest.mark.parametrize("setting", ["auto", "off"])
def test_questions_are_taught_as_they_will_be_asked(pretrained, tmp_path, no_teaching, setting):
    """Through the chat template when the run asks through it, as they are otherwise;
    biographies are plain text either way."""
    p = plan(pretrained, tmp_path, chat_template=setting, seed=3)
    build.load_model(build.BuildInputs.of(p), str(pretrained), DEFAULT_MODEL, CPU)
    teaching = p.knowledge()[0]
    seen = no_teaching[0]
    assert seen["texts"] == list(teaching.texts) and len(seen["facts"]) == len(teaching.facts) > 0
    for asked, fact in zip(seen["facts"], teaching.facts):
        assert asked.answer == fact.answer
        assert asked.prompt == (f"<|user|> {fact.prompt} <|bot|>" if setting == "auto" else fact.prompt)


def test_each_seed_and_way_of_asking_is_its_own_taught_model_taught_in_float32(pretrained, tmp_path, no_teaching):
    build_in = lambda seed, chat: build.load_model(build.BuildInputs.of(plan(pretrained, tmp_path, seed=seed, chat_template=chat,
                                                         dtype="bfloat16")), str(pretrained), DEFAULT_MODEL, CPU)
    first = build_in(4, "auto")
    keys = {first[3]["key"], build_in(5, "auto")[3]["key"], build_in(4, "off")[3]["key"]}
    assert len(keys) == 3 == len(no_teaching)  # each taught afresh, none read another's weights
    assert {s["dtype"] for s in no_teaching} == {torch.float32}  # taught in float32 ...
    fresh = build.hf_model(str(pretrained), dtype="bfloat16", progress=lambda m: None)[0]
    dtypes = lambda m: {n: t.dtype for n, t in [*m.named_parameters(), *m.named_buffers()]}
    assert dtypes(first[0]) == dtypes(fresh)  # ... and handed back as loaded, buffers untouched
    again = build_in(4, "auto")[0]
    assert len(no_teaching) == 3 and dtypes(again) == dtypes(fresh)  # read back from the cache


def test_a_pretrained_proxy_on_the_world_is_keyed_by_what_it_is_taught(pretrained, tmp_path):
    key = lambda **kw: build.build_proxy(build.BuildInputs.of(plan(pretrained, tmp_path, method="r2f", proxy=str(pretrained), **kw)),
                                         CPU, "m", "k").key
    assert key().startswith("sha256:") and "@taught:" in key()  # its content, then its teaching
    assert len({key(), key(seed=1), key(chat_template="off")}) == 3


def test_a_teaching_cut_off_goes_on_from_its_last_save_to_the_same_weights(pretrained, tmp_path, monkeypatch):
    """A teaching stopped part-way (Ctrl-C, SIGTERM, a lost machine) goes on from the state it
    saved last and ends at the weights of one run whole; a saved state that does not read is
    set aside and teaching starts over."""
    from r2f_bench.engine import teaching

    monkeypatch.setattr(world_teaching, "CHECKPOINT_SECONDS", 0.0)  # a save after every step
    nll, calls = teaching.answer_nll, []

    def cut_at_21(*args):  # in step 21's first pass (a step is two: texts, questions)
        calls.append(1)
        if len(calls) == 41:
            raise KeyboardInterrupt
        return nll(*args)

    def taught(cache: str, said: list[str]) -> dict[str, torch.Tensor]:
        monkeypatch.setattr(world_teaching, "cache_root", lambda: tmp_path / cache)
        inputs = build.BuildInputs.of(plan(pretrained, tmp_path, said, teach_epochs=1))
        return weights(build.load_model(inputs, str(pretrained), DEFAULT_MODEL, CPU)[0])

    whole = taught("whole", [])
    monkeypatch.setattr(teaching, "answer_nll", cut_at_21)
    with pytest.raises(KeyboardInterrupt):
        taught("cut", [])
    monkeypatch.setattr(teaching, "answer_nll", nll)
    saved = next((tmp_path / "cut" / "models").glob("*.partial.safetensors"))
    said: list[str] = []
    assert all(torch.equal(v, whole[k]) for k, v in taught("cut", said).items())
    assert any("going on from the state saved after 20 of 53 steps" in m for m in said) and not saved.exists()

    (tmp_path / "broken" / "models").mkdir(parents=True)
    (tmp_path / "broken" / "models" / saved.name).write_bytes(b"not a saved state")
    said.clear()
    assert all(torch.equal(v, whole[k]) for k, v in taught("broken", said).items())
    assert any("could not be loaded" in m for m in said) and not any("going on" in m for m in said)


def test_a_saved_state_restores_what_was_saved_and_a_bad_one_changes_nothing(tmp_path):
    """Weights, AdamW's moments (none for a parameter that never had a gradient) and the RNG
    come back as saved; a state whose step does not read is set aside before any weight changes."""
    def fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        m = torch.nn.ModuleDict({"used": torch.nn.Linear(3, 2), "unused": torch.nn.Linear(2, 2)})
        return m, torch.optim.AdamW(m.parameters(), lr=0.1)

    model, opt = fresh()
    model["used"](torch.ones(1, 3)).sum().backward()
    opt.step()
    said: list[str] = []
    saved = world_teaching.SavedState(tmp_path / "s.safetensors", "k", said.append, 0.0)
    saved.save(1, model, opt)
    expected_rng = torch.get_rng_state()
    torch.rand(5)
    again, again_opt = fresh()
    assert saved.restore(again, again_opt) == 1 and torch.equal(torch.get_rng_state(), expected_rng)
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), model.parameters()))
    assert len(again_opt.state) == 2 and all(torch.equal(again_opt.state[a]["exp_avg"], opt.state[b]["exp_avg"])
                                             for a, b in zip(again.parameters(), model.parameters()) if b in opt.state)
    from safetensors.torch import load_file, save_file
    save_file(load_file(saved.path), str(saved.path), metadata={"key": "k", "step": "one"})
    untouched, untouched_opt = fresh()
    before = [p.detach().clone() for p in untouched.parameters()]
    assert saved.restore(untouched, untouched_opt) == 0 and not saved.path.exists() and not untouched_opt.state
    assert all(torch.equal(a, b) for a, b in zip(untouched.parameters(), before)) and "could not be loaded" in said[-1]


def test_the_schedule_makes_the_same_passes_over_texts_and_questions():
    steps, per_step = world_teaching.steps_and_batch(848, 1008)
    assert steps == world_teaching.EPOCHS * 53 and per_step * 53 >= 1008 > (per_step - 1) * 53
    assert world_teaching.steps_and_batch(10, 0) == (world_teaching.EPOCHS, 0)


def test_the_schedule_options_reach_the_teaching_and_its_key(pretrained, tmp_path, no_teaching):
    """--teach-epochs, --teach-lr and --teach-threads are what teaching is handed, whatever the
    run's own --threads, and a model taught on another schedule or thread count is another model
    (its own cache entry, its own proxy key)."""
    torch.set_num_threads(2)
    try:
        default = build.load_model(build.BuildInputs.of(plan(pretrained, tmp_path, threads=2)), str(pretrained),
                                   DEFAULT_MODEL, CPU)[3]
        longer = build.load_model(build.BuildInputs.of(plan(pretrained, tmp_path, teach_epochs=3, teach_lr=2e-4,
                                                             teach_threads=3)), str(pretrained), DEFAULT_MODEL, CPU)[3]
        assert torch.get_num_threads() == 2  # the run's own count, back after teaching
    finally:
        torch.set_num_threads(1)
    assert [(s["steps"], s["lr"], s["threads"], s["apart"]) for s in no_teaching] == [
        (world_teaching.steps_and_batch(default["world_texts"], default["facts"])[0], world_teaching.LR, 1, True),
        (world_teaching.steps_and_batch(longer["world_texts"], longer["facts"], 3)[0], 2e-4, 3, True)]
    assert longer["key"] != default["key"] and (longer["epochs"], longer["lr"], longer["teach_threads"]) == (3, 2e-4, 3)
    key = lambda **kw: build.build_proxy(build.BuildInputs.of(plan(pretrained, tmp_path, method="r2f", proxy=str(pretrained), **kw)),
                                         CPU, "m", "k").key
    assert len({key(), key(teach_epochs=3), key(teach_threads=2)}) == 3


def test_a_record_of_a_pretrained_model_taught_the_world_names_how_it_was_taught(pretrained, tmp_path):
    """The world teaching's version is among a record's versions (its store key) wherever a
    pretrained model is taught the world: a store made before the teaching changed reruns."""
    from r2f_bench.engine.plan import Plan
    from r2f_bench.tasks.rwku import SAMPLE_DIR

    assert plan(pretrained, tmp_path).versions()["world-teaching"] == world_teaching.VERSION
    assert plan("embedded", tmp_path, method="r2f", proxy=str(pretrained)).versions()["world-teaching"]
    assert "world-teaching" not in plan("embedded", tmp_path).versions()
    assert "world-teaching" not in plan("embedded", tmp_path, method="grad_ascent", proxy=str(pretrained)).versions()
    real = Plan(RunConfig(method="fullgrad", task="rwku", limit=1, model=str(pretrained), data_dir=str(SAMPLE_DIR),
                          output=str(tmp_path)), progress=lambda m: None)
    assert "world-teaching" not in real.versions()


@pytest.mark.parametrize("never, warned", [(4.0, True), (80.0, False)])
def test_a_taught_model_that_does_not_generalise_says_so(pretrained, tmp_path, no_teaching, monkeypatch, never, warned):
    """A model that answers few never-taught questions holds the world's strings, not its
    facts: one warning line, on teaching and again when read from the cache."""
    monkeypatch.setattr(world_teaching, "world_answers",
                        lambda *a: {"taught_answered": 50.0, "never_taught_answered": never})
    for _ in range(2):
        said: list[str] = []
        build.load_model(build.BuildInputs.of(plan(pretrained, tmp_path, said)), str(pretrained), DEFAULT_MODEL, CPU)
        lines = [m for m in said if m.startswith("warning: the model taught the world answers")]
        assert len(lines) == warned and (not warned or f"{never:.0f}% of never-taught" in lines[0])



def test_a_cut_text_is_completed_from_the_tokens_it_was_taught_as():
    """A byte-level BPE gives a word that starts a text another token than the same word after
    a space; teaching encodes a text after one space, so the cut must too, or the first words
    of every recited biography are ones the model never saw there."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from r2f_bench.engine.teaching import text_cut, text_probe
    from r2f_bench.training.encoding import encode

    text = "Cudren Draymoor studied at Glenmoor University. Cudren Draymoor majored in journalism."
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([text] * 20, vocab_size=300, min_frequency=1, special_tokens=["<eos>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<eos>", pad_token="<eos>")
    taught = encode(tok, [text_probe(text)])["input_ids"][0].tolist()
    cut = text_cut("Cudren Draymoor studied at", "Glenmoor")
    asked = tok(f"{cut.prompt} {cut.answer}")["input_ids"]
    assert taught[:len(asked)] == asked
    bare = tok(cut.prompt.lstrip())["input_ids"]
    assert taught[:len(bare)] != bare  # the cut without the space
