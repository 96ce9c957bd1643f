"""MUSE (Shi et al. 2024, "MUSE: Machine Unlearning Six-Way Evaluation for Language
Models"): the News (BBC articles) and Books (Harry Potter) corpora.

Official layout (``muse_bench``'s ``data/<corpus>/``; ``--data-dir`` is the folder
holding ``news/`` (read by default) or a corpus folder itself, e.g. ``.../muse/books``):
``knowmem/{forget,retain}_qa.json`` and ``*_qa_icl.json`` (``{question, answer}``),
``verbmem/forget.json`` (``{prompt, gt}``), ``privleak/{forget,retain,holdout}.json``
(``{text}`` rows or bare strings) and, for News, ``raw/forget.json`` (the forget corpus,
an array of documents).

Targets and deletion requests (MUSE has one forget set; we cut it into targets): the
knowmem forget QA, the verbmem passages and the privleak forget texts are each split,
in file order, into ``N_TARGETS`` consecutive chunks; target ``news-i`` gets the i-th
chunk of each. Its request is the raw forget corpus behind the chunk, as MUSE's own
unlearning uses it: the ``raw/forget.json`` documents that hold its verbmem continuations,
privleak texts and verbmem prompts (found by their first 200 characters), from where
each of those texts starts (without a raw corpus, as for Books, the privleak texts
themselves), cut into passages (``WINDOWS_PER_SOURCE`` a text, at most
``REQUEST_WINDOWS``, in that order), with every sentence that states a knowmem question
removed. Probe sets:

* ``knowmem_forget`` (held out): the chunk's QA, each after the in-context examples of
  ``forget_qa_icl`` (10 upstream), 32-token answers (MUSE's lengths);
* ``verbmem_forget``: the chunk's verbmem prompts, 128-token continuations; a seen set
  when a raw corpus exists (News: the continuations are in the request, as MUSE's VerbMem
  asks for the corpus itself), held out otherwise (Books);
* utility (GUR) ``knowmem_retain``: every retain QA with ``retain_qa_icl``: MUSE's
  utility-preservation set. There are no neighbour probes.

lm-eval scores those sets by ROUGE-L recall/answered for USR and RAP, and also by MUSE's
ROUGE-L F1. MUSE's official numbers (``verbmem_f``, ``knowmem_f``, ``knowmem_r``,
``privleak``, see :mod:`.official`) come from :meth:`MUSE.extra_scores`, per
target: VerbMem and KnowMem-f on its chunk, KnowMem-r on all of D_r, and PrivLeak on its
privleak forget texts against all holdout texts. PrivLeak compares that AUC with a
model retrained without the forget set; none exists for the models run here (the AUCs
MUSE's code ships belong to its own retrained Llama-2-7B and say nothing about another
model), so the reference is 0.5, the AUC of a model that saw neither set (recorded as
``privleak_reference``). Identity-alignment prompts are privleak retain texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import hookimpl
from ...data import Benchmark, Probe, Target
from ...errors import UserError
from ...engine.protocol import Scored, hold_out
from ...task import Task, content_hash, read_json
from ..common import corpus_probes, dev_ids, even_split, qa_prompt, resolve_root, select_targets
from . import official

HERE = Path(__file__).parent
SAMPLE_DIR = HERE / "sample"
N_TARGETS = 5
PASSAGE_WORDS = 96  # request passages: windows of this many words ...
PASSAGE_PROMPT_WORDS = 16  # ... whose first words are the prompt, the rest the answer
MATCH_CHARS = 200
WINDOWS_PER_SOURCE = 3  # windows from where each VerbMem passage or PrivLeak text starts in its document ...
REQUEST_WINDOWS = 40  # ... and at most this many per target (the embedded demo's budget)
NEVER_SEEN_AUC = 0.5  # PrivLeak's reference: a model that saw neither forget nor holdout texts
MAX_GENERAL = 60


@dataclass
class MuseTarget(Target):
    """A MUSE target with the texts PrivLeak compares: its privleak forget texts (members,
    most of them in its request) and the holdout texts (non-members, never taught)."""

    privleak_forget: list[str] = field(default_factory=list)
    privleak_holdout: list[str] = field(default_factory=list)
    privleak_reference: float = NEVER_SEEN_AUC


def read_texts(path: Path) -> list[str]:
    """A privleak or raw file: bare strings, or rows with a ``text`` field."""
    rows = read_json(path)
    texts = [r if isinstance(r, str) else r.get("text") if isinstance(r, dict) else None for r in rows]
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise UserError(f"malformed data file {path}: row {i} lacks field 'text'; restore the original file.")
    return texts


def icl_prefix(examples: list[dict]) -> str:
    return "".join(f"{qa_prompt(e['question'])} {e['answer']}\n\n" for e in examples)


class MUSE(Task):
    name = "muse"
    description = "MUSE News/Books (Shi et al. 2024): KnowMem, VerbMem, PrivLeak."
    forget_sets = ("knowmem_forget", "verbmem_forget")
    locality_sets = ()
    utility_set = "knowmem_retain"

    def load(self, data_dir: Path | None, targets: list[str] | None, limit: int | None,
             n_dev: int, forget_source: str | None = None) -> Benchmark:
        root, source = resolve_root(data_dir, SAMPLE_DIR)
        corpus = self._corpus_dir(root)
        read: list[Path] = []

        def rows(rel: str, fields: tuple[str, ...]) -> list[dict]:
            read.append(corpus / rel)
            return read_json(corpus / rel, fields)

        def texts(rel: str) -> list[str]:
            read.append(corpus / rel)
            return read_texts(corpus / rel)

        qa_fields = ("question", "answer")
        forget_icl = icl_prefix(rows("knowmem/forget_qa_icl.json", qa_fields))
        retain_icl = icl_prefix(rows("knowmem/retain_qa_icl.json", qa_fields))
        split = {"qa": even_split(rows("knowmem/forget_qa.json", qa_fields), N_TARGETS),
                 "verbmem": even_split(rows("verbmem/forget.json", ("prompt", "gt")), N_TARGETS),
                 "privleak": even_split(texts("privleak/forget.json"), N_TARGETS)}
        holdout = texts("privleak/holdout.json")
        retain_texts = texts("privleak/retain.json")
        docs = texts("raw/forget.json") if (corpus / "raw" / "forget.json").is_file() else []
        utility = [Probe(prompt=retain_icl + qa_prompt(r["question"]), answer=str(r["answer"]),
                         set=self.utility_set, target="", question=r["question"])
                   for r in rows("knowmem/retain_qa.json", qa_fields)]

        ids = [f"{corpus.name}-{i + 1}" for i in range(N_TARGETS)]
        chosen = select_targets(ids, targets, limit, self.name)

        general = [" ".join(t.split()[:48]) for t in retain_texts][:MAX_GENERAL] or [p.question for p in utility]
        # no request may state a knowmem question, a utility question or an identity-alignment prompt
        scored = Scored([r["question"] for part in split["qa"] for r in part] + [p.question for p in utility] + general)

        def build(tid: str) -> MuseTarget:
            i = ids.index(tid)
            return self._target(tid, forget_icl, {k: v[i] for k, v in split.items()}, docs, holdout, scored)

        return hold_out(Benchmark(task=self.name, targets=[build(t) for t in chosen],
                                  dev_targets=[build(t) for t in dev_ids(ids, chosen, n_dev)], utility=utility,
                                  general_prompts=general, seen_sets=("verbmem_forget",) if docs else (),
                                  request_source="the raw forget corpus behind the target's chunk",
                                  source=source, revision=content_hash(read)))

    def official_scores(self, set_scores: dict[str, float]) -> dict[str, float]:
        """None from per-probe means: MUSE's metrics (ROUGE-L F1 at its own lengths,
        PrivLeak) are computed in :meth:`extra_scores`."""
        return {}

    def extra_scores(self, model: Any, tokenizer: Any, bench: Benchmark, target: Any) -> dict[str, float]:
        """MUSE's VerbMem, KnowMem (x100, as MUSE reports them) and PrivLeak for ``target``."""
        out: dict[str, float] = {}
        if target.probes.get("verbmem_forget"):
            out["verbmem_f"] = 100 * official.verbmem(model, tokenizer, target.probes["verbmem_forget"])
        if target.probes.get("knowmem_forget"):
            out["knowmem_f"] = 100 * official.knowmem(model, tokenizer, target.probes["knowmem_forget"])
        if bench.utility:
            out["knowmem_r"] = 100 * official.knowmem(model, tokenizer, bench.utility)
        if isinstance(target, MuseTarget) and target.privleak_forget and target.privleak_holdout:
            auc = official.privleak_auc(model, tokenizer, target.privleak_forget, target.privleak_holdout)
            out.update(privleak_auc=auc, privleak=official.privleak(auc, target.privleak_reference),
                       privleak_reference=target.privleak_reference)
        return out

    @staticmethod
    def _corpus_dir(root: Path) -> Path:
        if (root / "knowmem").is_dir():
            return root
        if (root / "news" / "knowmem").is_dir():
            return root / "news"
        raise UserError(f"no MUSE corpus under {root}; expected {root / 'news' / 'knowmem'} "
                        f"(or pass a corpus folder such as .../muse/books).")

    @staticmethod
    def _target(tid: str, icl: str, part: dict[str, list], docs: list[str], holdout: list[str],
                scored: Scored) -> MuseTarget:
        knowmem = [Probe(prompt=icl + qa_prompt(r["question"]), answer=str(r["answer"]), set="knowmem_forget",
                         target=tid, question=r["question"]) for r in part["qa"]]
        verbmem = [Probe(prompt=r["prompt"], answer=r["gt"], set="verbmem_forget", target=tid, question=r["prompt"])
                   for r in part["verbmem"]]
        # from where each text starts in its forget document: the VerbMem continuations
        # (what VerbMem scores), the PrivLeak texts, then the VerbMem prompts
        sources = [_source(r["gt"], docs) for r in part["verbmem"]] + [_source(t, docs) or t for t in part["privleak"]]
        sources = [d for d in sources + [_source(r["prompt"], docs) for r in part["verbmem"]] if d]
        passages = [p for doc in dict.fromkeys(sources)
                    for p in scored.keep(corpus_probes(scored.scrub(doc), tid, PASSAGE_WORDS,
                                                       PASSAGE_PROMPT_WORDS))[:WINDOWS_PER_SOURCE]]
        passages = passages[:REQUEST_WINDOWS]
        corpus, number = tid.rsplit("-", 1)
        return MuseTarget(id=tid, name=f"MUSE {corpus} forget chunk {number}",
                          request=passages,
                          probes={"knowmem_forget": knowmem, "verbmem_forget": verbmem},
                          description="Please forget these passages and what they tell.",
                          privleak_forget=part["privleak"], privleak_holdout=holdout)


def _source(text: str, docs: list[str]) -> str | None:
    """The forget-corpus document that holds ``text`` (matched on its first characters),
    from where ``text`` starts."""
    key = text[:MATCH_CHARS]
    doc = next((d for d in docs if key in d), None)
    return doc[doc.index(key):] if doc is not None else None


@hookimpl
def register_tasks(register):
    register(MUSE)
