"""Views of a deletion request: paraphrases of each fact's question.

The paper generates paraphrases with T5/BART and filters them by embedding cosine.
Paraphrasers are pluggable (``--paraphraser``):

* ``templates`` (offline default, no download): rewrites the question with a fixed
  set of syntactic transformations (question-word swaps, clause fronting, cloze →
  question, politeness/brevity frames). Weaker than a neural paraphraser; it exists
  so the tool runs anywhere.
* ``benchmark``: the benchmark's own alternative probes of the same fact, where the
  task provides them (``Benchmark.alternatives``; RWKU: other request probes of the
  target with the same answer), each in its own prompt format; templates fill in
  where there are none.
* ``self``: the model itself, prompted to paraphrase (useful for real LLMs).
* ``hf:<name-or-path>``: a Hugging Face seq2seq paraphrase model (T5/BART), as in the paper.

Every candidate is then filtered with the offline sentence embedder
(:mod:`r2f_bench.training.embedder`, all-MiniLM-L6-v2): kept when its cosine to the
original is in [``MIN_COSINE``, ``MAX_COSINE``] (faithful but not a near-copy),
deduplicated, and used in the paraphraser's order of preference (the templates put the
most rewritten first).
"""

from __future__ import annotations

import random
import re
from typing import Any, Sequence

import torch

from ..data import Probe
from ..errors import UserError
from ..training.embedder import embed
from ..training.encoding import chat_prompt, special_tokens

MIN_COSINE = 0.70
MAX_COSINE = 0.995

_SWAPS = [
    (r"^What is the (.+) of (.+)\?$", r"Can you tell me the \1 of \2?"),
    (r"^Where was (.+) born\?$", r"In which place was \1 born?"),
    (r"^Who is (.+)\?$", r"Name the person who is \1."),
    (r"^Which (.+)\?$", r"Tell me which \1."),
    (r"^What (.+)\?$", r"Do you know what \1?"),
    (r"^Under what (.+)\?$", r"By what other \1?"),
    (r"^In which (.+)\?$", r"Which is the \1?"),
    (r"^How (.+)\?$", r"Explain briefly how \1."),
]
_FRAMES = [
    "{q}",
    "Quick question: {q}",
    "{q} Please answer in a few words.",
    "I would like to know: {q}",
    "Answer this: {q}",
    "Here is a question for you. {q}",
]


def template_paraphrases(question: str) -> list[str]:
    """Offline rewrites of ``question`` (cloze blanks are kept as blanks)."""
    q = " ".join(question.split())
    rewritten = [q]
    for pattern, repl in _SWAPS:
        if re.match(pattern, q):
            rewritten.append(re.sub(pattern, repl, q))
    if "___" in q:
        rewritten.append(f"What word or phrase fills the blank in: {q}")
        rewritten.append(q.replace("___", "[blank]") + " What goes in the [blank]?")
    # most different first: plain rewrites, then each frame over the rewrites, then over q
    out = rewritten[1:]
    for frame in _FRAMES[1:]:
        out += [frame.format(q=base) for base in rewritten[::-1]]
    return [c for c in dict.fromkeys(out) if c != q]


class Paraphraser:
    """Produces candidate rewrites of questions; filtering is shared (see :func:`build_views`)."""

    name = "templates"

    def candidates(self, questions: Sequence[str], n: int) -> list[list[str]]:
        return [template_paraphrases(q) for q in questions]

    def prompt(self, probe: Probe, question: str) -> str:
        """The prompt of ``probe`` asked as ``question`` (its template kept)."""
        original = probe.question or probe.prompt
        return probe.prompt.replace(original, question) if original in probe.prompt else question


class BenchmarkParaphraser(Paraphraser):
    """The benchmark's own alternative probes of a fact, then template rewrites."""

    name = "benchmark"

    def __init__(self, alternatives: dict[str, list[Probe]]) -> None:
        self.alternatives = alternatives

    def candidates(self, questions: Sequence[str], n: int) -> list[list[str]]:
        return [[a.question for a in self.alternatives.get(q, [])] + template_paraphrases(q) for q in questions]

    def prompt(self, probe: Probe, question: str) -> str:
        own = {a.question: a.prompt for a in self.alternatives.get(probe.question, [])}
        return own.get(question) or super().prompt(probe, question)


class Seq2SeqParaphraser(Paraphraser):
    """A Hugging Face T5/BART paraphrase model, sampled with beam search."""

    def __init__(self, name_or_path: str, prefix: str = "paraphrase: ") -> None:
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        try:
            self.tok = AutoTokenizer.from_pretrained(name_or_path)
            self.model = AutoModelForSeq2SeqLM.from_pretrained(name_or_path, use_safetensors=True).eval()
        except (OSError, ValueError):
            raise UserError(f"cannot load paraphrase model {name_or_path!r}; pass a local directory or a reachable hub name, or use --paraphraser templates.") from None
        self.name, self.prefix = f"hf:{name_or_path}", prefix

    @torch.no_grad()
    def candidates(self, questions: Sequence[str], n: int) -> list[list[str]]:
        out = []
        for q in questions:
            enc = self.tok(self.prefix + q, return_tensors="pt")
            gen = self.model.generate(**enc, num_beams=max(2 * n, 4), num_return_sequences=max(2 * n, 4),
                                      max_new_tokens=64)
            out.append(self.tok.batch_decode(gen, skip_special_tokens=True))
        return out


class SelfParaphraser(Paraphraser):
    """The model itself, prompted to rephrase each fact's question (or text: a corpus
    window's), an instruct model through its chat template, as the run asks it."""

    name = "self"

    def __init__(self, model: torch.nn.Module, tokenizer: Any, chat: bool = False) -> None:
        self.model, self.tok, self.chat = model, tokenizer, chat

    def instruction(self, question: str) -> str:
        """What the model is asked for the paraphrases of one question or text."""
        if self.chat:
            return chat_prompt(self.tok, f"Rephrase the following without changing its meaning. Reply with the "
                                         f"rephrased text only.\n\n{question}")
        return f"Rephrase the text without changing its meaning.\nText: {question}\nRephrased:"

    @torch.no_grad()
    def candidates(self, questions: Sequence[str], n: int) -> list[list[str]]:
        out = []
        for q in questions:
            text = self.instruction(q)
            enc = self.tok(text, return_tensors="pt", **special_tokens(self.tok, text)).to(self.model.device)
            gen = self.model.generate(**enc, do_sample=True, top_p=0.9, num_return_sequences=2 * n,
                                      max_new_tokens=48, pad_token_id=self.tok.pad_token_id)
            texts = self.tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            out.append([t.strip().split("\n")[0] for t in texts if t.strip()])
        return out


def filter_candidates(original: str, candidates: Sequence[str], n: int) -> list[str]:
    """Keep up to ``n`` candidates whose cosine to ``original`` lies in the accepted band."""
    unique = [c for c in dict.fromkeys(" ".join(c.split()) for c in candidates) if c and c != original]
    if not unique or n <= 0:
        return []
    vecs = embed([original] + unique)
    sims = (vecs[1:] @ vecs[0]).tolist()
    return [c for s, c in zip(sims, unique) if MIN_COSINE <= s <= MAX_COSINE][:n]


def build_views(facts: Sequence[Probe], n_views: int, paraphraser: Paraphraser, seed: int = 0) -> list[list[Probe]]:
    """``n_views`` views of the request: view 0 is the facts as asked, then paraphrases.

    Each fact's paraphrases are the paraphraser's first accepted candidate, then a
    seeded sample of ``n_views - 2`` among its next ``2 n_views - 3``, kept in the
    paraphraser's order of preference (so every run seed sees other views). A fact with fewer accepted paraphrases than
    needed reuses its last accepted one, so every view has one phrasing of every fact.
    """
    if n_views < 1:
        raise UserError(f"--views must be at least 1, got {n_views}.")
    views = [list(facts)]
    if n_views == 1:
        return views
    questions = [p.question or p.prompt for p in facts]
    all_candidates = paraphraser.candidates(questions, n_views - 1)
    per_fact = []
    rng = random.Random(seed)
    for p, q, cands in zip(facts, questions, all_candidates):
        accepted = filter_candidates(q, cands, 2 * (n_views - 1))
        picked = sorted(rng.sample(range(1, len(accepted)), min(n_views - 2, len(accepted) - 1))) if accepted else []
        kept = [accepted[i] for i in [0] + picked] if accepted else []
        variants = [Probe(prompt=paraphraser.prompt(p, c), answer=p.answer, set=p.set, target=p.target, question=c)
                    for c in kept]
        per_fact.append(variants or [p])
    for i in range(n_views - 1):
        views.append([v[min(i, len(v) - 1)] for v in per_fact])
    return views


PARAPHRASERS = ("templates", "benchmark", "self")


def check_paraphraser(spec: str) -> None:
    """One line for an unknown ``--paraphraser``, before any model is built."""
    if spec not in PARAPHRASERS and not (spec.startswith("hf:") and len(spec) > 3):
        raise UserError(f"unknown paraphraser {spec!r}; use templates, benchmark, self or hf:<model name or path>.")


def make_paraphraser(spec: str, model: torch.nn.Module | None = None, tokenizer: Any = None,
                     alternatives: dict[str, list[Probe]] | None = None, chat: bool = False) -> Paraphraser:
    check_paraphraser(spec)
    if spec == "templates":
        return Paraphraser()
    if spec == "benchmark":
        return BenchmarkParaphraser(alternatives or {})
    if spec == "self":
        return SelfParaphraser(model, tokenizer, chat)
    return Seq2SeqParaphraser(spec[3:])
