"""RWKU (Jin et al. 2024, "RWKU: Benchmarking Real-World Knowledge Unlearning for LLMs").

Official layout: ``Target/<id>_<Name>/{intro,forget_level1,forget_level2,forget_level3,
neighbor_level1,neighbor_level2,passage,positive,retain_mia,triviaqa,truthful,retain_mmlu,...}.json``.

The deletion request (``--forget-source``):

* ``corpus`` (default, RWKU's own protocol): the target's forget corpus, i.e. its
  one-line description and the texts RWKU's methods train on: ``positive.json`` (text
  the original model wrote about the target) where it exists, else the Wikipedia
  ``passage.json``; the first ``REQUEST_WINDOWS`` windows of ``WINDOW_WORDS`` words,
  after removing every sentence that holds an evaluated string (a cloze with its
  answer filled in, a question). Every probe is held out: forget FB (level 1), QA
  (level 2) and AA (level 3). The seen set ``forget_seen`` asks the request's own
  windows for their next words.
* ``probes``: a fact-level request, the target's FB cloze probes; FB is then the
  seen set, QA and AA stay held out.

RWKU's official scores are ROUGE-L recall of greedy answers on forget FB / QA / AA and
neighbour FB / QA (locality). Utility (GUR) mixes RWKU's own utility files, TriviaQA,
TruthfulQA (its best answer) and MMLU (the correct option), round robin up to
``MAX_UTILITY`` items; identity-alignment prompts are ``MAX_GENERAL`` ``retain_mia`` texts.
"""

from __future__ import annotations

import re
from itertools import zip_longest
from pathlib import Path

from ... import hookimpl
from ...data import Benchmark, Probe, Target, Teaching
from ...errors import UserError
from ...engine.protocol import Scored, asked, hold_out
from ...task import Task, content_hash, read_json
from ..common import SAMPLE_SOURCE, check_dir, corpus_probes, dev_ids, name_mentions, seen_probes, select_targets
from . import world as knowledge_world

HERE = Path(__file__).parent
# the five fictional people of the string sample (tests, and the layout by example);
# the default data is the synthetic knowledge world (world.py)
SAMPLE_DIR = HERE / "sample"
WORLD_SOURCE = "synthetic knowledge world (r2f-bench)"

# probe set -> (file, prompt template)
PROBE_FILES = {
    "forget_fb": ("forget_level1", "Fill in the blank: {query}\nAnswer:"),
    "forget_qa": ("forget_level2", "Question: {query}\nAnswer:"),
    "forget_aa": ("forget_level3", "Question: {query}\nAnswer:"),
    "neighbor_fb": ("neighbor_level1", "Fill in the blank: {query}\nAnswer:"),
    "neighbor_qa": ("neighbor_level2", "Question: {query}\nAnswer:"),
}
QA_TEMPLATE = "Question: {query}\nAnswer:"
FORGET_SOURCES = ("corpus", "probes")
SEEN_SET = "forget_seen"
NAME_SET = "name_control"  # the neighbour probes with the target's name before them
REQUEST_WINDOWS = 4  # the embedded demo's budget of forget-corpus windows per target ...
WINDOW_WORDS = 48  # ... of this many words, the first PROMPT_WORDS of them the prompt
PROMPT_WORDS = 12
SEEN_WORDS = 8  # words of the continuation the seen set asks for
MAX_UTILITY = 240
MAX_GENERAL = 500


def _target_id_key(dirname: str) -> tuple[int, str]:
    m = re.match(r"(\d+)_", dirname)
    return (int(m.group(1)) if m else 10**9, dirname)


class RWKU(Task):
    name = "rwku"
    description = "RWKU real-world knowledge unlearning (Jin et al. 2024): forget FB/QA/AA, neighbour FB/QA."
    forget_sets = ("forget_fb", "forget_qa", "forget_aa", SEEN_SET)
    locality_sets = ("neighbor_fb", "neighbor_qa")
    name_control_set = NAME_SET
    forget_sources = FORGET_SOURCES

    def load(self, data_dir: Path | None, targets: list[str] | None, limit: int | None,
             n_dev: int, forget_source: str | None = None) -> Benchmark:
        source = forget_source or FORGET_SOURCES[0]
        root, data_source = self._root(data_dir)
        tdir = root / "Target" if (root / "Target").is_dir() else root
        dirs = sorted((d.name for d in tdir.iterdir() if d.is_dir()), key=_target_id_key)
        if not dirs:
            raise UserError(f"no RWKU targets under {tdir}; expected Target/<id>_<Name>/ folders.")
        aliases = [(d.split("_", 1)[i], d) for d in dirs for i in (0, -1)]  # its number, its name
        chosen = select_targets(dirs, targets, limit, "RWKU", aliases=aliases)
        dev = dev_ids(dirs, chosen, n_dev)
        read: list[Path] = []
        probes = {d: self._probes(tdir / d, read) for d in chosen + dev}
        utility, general = self._utility(tdir, dirs, read)
        # everything the evaluation targets are scored on: no request may contain it
        scored = Scored([asked(p) for d in chosen for s, ps in probes[d].items() for p in ps]
                        + [asked(p) for p in utility] + general)
        build = lambda d: self._target(tdir / d, probes[d], source, scored, read)
        eval_targets, dev_targets = [build(d) for d in chosen], [build(d) for d in dev]
        fb_request = source == "probes"
        world = self._world(root, read)
        return hold_out(Benchmark(
            task=self.name, targets=eval_targets, dev_targets=dev_targets, utility=utility, general_prompts=general,
            alternatives=same_answer_alternatives(eval_targets + dev_targets) if fb_request else {},
            seen_sets=("forget_fb",) if fb_request else (SEEN_SET,), controls=(NAME_SET,),
            request_source="the target's FB cloze probes" if fb_request else
            f"the target's forget corpus (description, then positive.json or passage.json; {REQUEST_WINDOWS} windows of {WINDOW_WORDS} words)",
            source=data_source,
            revision=revision(tdir, read),
            world=world))

    @staticmethod
    def _root(data_dir: Path | None) -> tuple[Path, str]:
        """The folder to read and how results name it: ``None`` is the synthetic knowledge
        world (generated once into the cache)."""
        if data_dir is None:
            cfg = knowledge_world.WorldConfig()
            return knowledge_world.default_world(cfg), f"{WORLD_SOURCE} (seed {cfg.seed})"
        check_dir(Path(data_dir), "RWKU's folder (the one holding Target/)")
        root = Path(data_dir)
        if root.resolve() == SAMPLE_DIR.resolve():
            return root, SAMPLE_SOURCE
        return root, (f"{WORLD_SOURCE}: {root}" if knowledge_world.is_world(root) else str(root))

    @staticmethod
    def _world(root: Path, read: list[Path]) -> Teaching | None:
        """A knowledge world's teaching file: what an embedded model is taught (None: real data)."""
        path = root / knowledge_world.TEACHING_FILE
        if not path.is_file():
            return None
        read.append(path)
        data = read_json(path, array=False)
        qa = lambda key: tuple(Probe(prompt=QA_TEMPLATE.format(query=r["question"]), answer=str(r["answer"]),
                                     set="teaching", target="", question=r["question"]) for r in data.get(key, []))
        return Teaching(texts=tuple(data["texts"]), facts=qa("qa"), check=qa("check"))

    @staticmethod
    def _probes(d: Path, read: list[Path]) -> dict[str, list[Probe]]:
        probes: dict[str, list[Probe]] = {}
        for set_name, (fname, template) in PROBE_FILES.items():
            path = d / f"{fname}.json"
            rows = read_json(path, ("query", "answer"))
            read.append(path)
            probes[set_name] = [Probe(prompt=template.format(query=r["query"]), answer=str(r["answer"]),
                                      set=set_name, target=d.name, question=r["query"]) for r in rows]
        return probes

    @staticmethod
    def _target(d: Path, probes: dict[str, list[Probe]], source: str, scored: Scored, read: list[Path]) -> Target:
        intro_path = d / "intro.json"
        rows = read_json(intro_path, ("target",))
        if not rows:
            raise UserError(f"malformed data file {intro_path}: expected one row naming the target; restore the original file.")
        intro = rows[0]
        read.append(intro_path)
        neighbours = [p for s in RWKU.locality_sets for p in probes[s]]
        probes = {**probes, NAME_SET: name_mentions(str(intro["target"]), neighbours, NAME_SET)}
        if source == "probes":
            return Target(id=d.name, name=intro["target"], request=list(probes["forget_fb"]), probes=probes,
                          description=intro.get("intro", ""))
        corpus = d / "positive.json" if (d / "positive.json").is_file() else d / "passage.json"
        read.append(corpus)
        texts = [intro.get("intro", "")] + [r["text"] for r in read_json(corpus, ("text",))]
        request: list[Probe] = []
        for text in texts:
            request += scored.keep(corpus_probes(scored.scrub(text), d.name, WINDOW_WORDS, PROMPT_WORDS))
            if len(request) >= REQUEST_WINDOWS:
                break
        request = request[:REQUEST_WINDOWS]
        if not request:
            raise UserError(f"RWKU target {d.name} has no forget corpus left once evaluated strings are removed "
                            f"({corpus.name}); use --forget-source probes for it.")
        return Target(id=d.name, name=intro["target"], request=request,
                      probes={**probes, SEEN_SET: seen_probes(request, SEEN_SET, SEEN_WORDS, REQUEST_WINDOWS)},
                      description=intro.get("intro", ""))

    @staticmethod
    def _utility(tdir: Path, dirs: list[str], read: list[Path]) -> tuple[list[Probe], list[str]]:
        """RWKU's utility files (TriviaQA, TruthfulQA, MMLU) round robin, and the identity-alignment prompts."""
        sources: dict[str, dict[str, Probe]] = {"triviaqa": {}, "truthful": {}, "retain_mmlu": {}}
        general: list[str] = []
        for d in dirs:
            for name, items in sources.items():
                path = tdir / d / f"{name}.json"
                if path.is_file() and len(items) < MAX_UTILITY:
                    read.append(path)
                    for r in read_json(path, ("question",)):
                        probe = _utility_probe(name, r, path)
                        if probe is not None:
                            items.setdefault(probe.question, probe)
            path = tdir / d / "retain_mia.json"
            if path.is_file() and len(general) < MAX_GENERAL:
                read.append(path)
                general += [" ".join(r["text"].split()[:48]) for r in read_json(path, ("text",))]
        utility = [p for tier in zip_longest(*(list(v.values()) for v in sources.values()))
                   for p in tier if p is not None][:MAX_UTILITY]
        if not utility:
            raise UserError(f"no utility probes (triviaqa.json) under {tdir}; RWKU ships them for targets 1-10, include at least one of those.")
        general = list(dict.fromkeys(general))[:MAX_GENERAL]
        return utility, general or [p.prompt for p in utility]


def revision(tdir: Path, read: list[Path]) -> str:
    """The data revision: every target's files and every file read, whatever the targets
    chosen (a --limit or --targets selection never gives the same data a new revision)."""
    return content_hash(sorted(set(read) | set(tdir.glob("*/*.json"))))


def _utility_probe(source: str, row: dict, path: Path) -> Probe | None:
    """A utility row as a QA probe: TriviaQA's first answer, TruthfulQA's best answer,
    MMLU's correct option (with the options in the prompt)."""
    question = row["question"]
    if source == "triviaqa":
        answers = row.get("answers") or []
        if not isinstance(answers, list):  # a string's first character is no answer
            raise UserError(f"{path}: 'answers' of {question!r} is a {type(answers).__name__}, not a list of "
                            f"strings; write it as RWKU does, e.g. \"answers\": [\"Paris\"].")
        answer = answers[0] if answers else None
    elif source == "truthful":
        mc1 = row.get("mc1_targets") or {}
        answer = next((c for c, lab in zip(mc1.get("choices", []), mc1.get("labels", [])) if lab == 1), None)
    else:
        choices, label = row.get("choices") or [], row.get("answer")
        answer = choices[label] if isinstance(label, int) and 0 <= label < len(choices) else None
        question = f"{question}\nOptions: {'; '.join(map(str, choices))}"
    if not answer:
        return None
    return Probe(prompt=QA_TEMPLATE.format(query=question), answer=str(answer), set="utility", target="",
                 question=question)


def same_answer_alternatives(targets: list[Target]) -> dict[str, list[Probe]]:
    """RWKU's own other phrasings of a request fact: the target's other request probes
    with the same answer (request strings only: no evaluated probe is a source)."""
    out: dict[str, list[Probe]] = {}
    for t in targets:
        by_answer: dict[str, list[Probe]] = {}
        for p in t.request:
            by_answer.setdefault(p.answer.strip().lower(), []).append(p)
        for p in t.request:
            others = [q for q in by_answer[p.answer.strip().lower()] if q.question != p.question]
            if others:
                out[p.question] = list(dict.fromkeys(others))
    return out


@hookimpl
def register_tasks(register):
    register(RWKU)
