"""Paraphrased views: the model as its own paraphraser is asked as the run asks it."""

from __future__ import annotations

import copy

import pytest

from r2f_bench.data import Probe
from r2f_bench.engine.views import make_paraphraser

CHAT = ("{% for m in messages %}<s>USER {{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}ASSISTANT{% endif %}")


@pytest.mark.parametrize("chat", [True, False])
def test_the_model_paraphrases_through_its_chat_template_when_the_run_uses_one(tiny, chat):
    tok = copy.deepcopy(tiny["tok"])
    tok.chat_template = CHAT
    model = tiny["model"]
    asked: list[str] = []
    generate = model.generate

    def spy(**kw):
        asked.extend(tok.batch_decode(kw["input_ids"], skip_special_tokens=False))
        return generate(**kw)

    model.generate = spy
    paraphraser = make_paraphraser("self", model, tok, chat=chat)
    try:
        out = paraphraser.candidates(["Where was Ann Lee born?"], 2)
    finally:
        del model.generate
    assert len(out) == 1 and asked
    probe = Probe(prompt="Question: Where was Ann Lee born?\nAnswer:", answer="Oslo", set="forget_qa", target="t",
                  question="Where was Ann Lee born?")  # a paraphrase is asked in the probe's own template
    assert paraphraser.prompt(probe, "In which city was Ann Lee born?") == "Question: In which city was Ann Lee born?\nAnswer:"
    if chat:
        assert asked[0].startswith("<s>USER Rephrase the following") and asked[0].endswith("ASSISTANT")
        assert "Where was Ann Lee born?" in asked[0]
    else:
        assert asked[0].startswith("Rephrase the text") and asked[0].endswith("Rephrased:")
