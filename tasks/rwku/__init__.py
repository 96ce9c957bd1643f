"""RWKU (Jin et al. 2024, "RWKU: Benchmarking Real-World Knowledge Unlearning for LLMs").

Official layout: ``Target/<id>_<Name>/{intro,forget_level1,forget_level2,forget_level3,
neighbor_level1,neighbor_level2,forget_mia,retain_mia,triviaqa,...}.json``.

How a target becomes a deletion request (our choice, the benchmark defines probes
only): the request names the target's level-1 (cloze) and level-2 (QA) facts; the
views are their paraphrases. RWKU's official scores are ROUGE-L recall of greedy
answers on forget FB (level 1), QA (level 2) and AA (level 3, adversarial phrasings
never in the request) and on neighbour FB / QA. Utility (GUR) uses TriviaQA items
shipped with the targets (RWKU's "Fac" utility); MIA prompts use ``retain_mia`` texts.
"""

from __future__ import annotations

import re
from pathlib import Path

from r2f_plugin import hookimpl
from r2f_plugin.data import Benchmark, Probe, Target
from r2f_plugin.errors import UserError
from r2f_plugin.task import Task, content_hash, read_json

HERE = Path(__file__).parent
SAMPLE_DIR = HERE / "sample"

# probe set -> (file, prompt template)
PROBE_FILES = {
    "forget_fb": ("forget_level1", "Fill in the blank: {query}\nAnswer:"),
    "forget_qa": ("forget_level2", "Question: {query}\nAnswer:"),
    "forget_aa": ("forget_level3", "Question: {query}\nAnswer:"),
    "neighbor_fb": ("neighbor_level1", "Fill in the blank: {query}\nAnswer:"),
    "neighbor_qa": ("neighbor_level2", "Question: {query}\nAnswer:"),
}
REQUEST_SETS = ("forget_fb", "forget_qa")
QA_TEMPLATE = "Question: {query}\nAnswer:"
MAX_UTILITY = 60
MAX_GENERAL = 60


def _target_id_key(dirname: str) -> tuple[int, str]:
    m = re.match(r"(\d+)_", dirname)
    return (int(m.group(1)) if m else 10**9, dirname)


class RWKU(Task):
    name = "rwku"
    description = "RWKU real-world knowledge unlearning (Jin et al. 2024): forget FB/QA/AA, neighbour FB/QA."
    forget_sets = ("forget_fb", "forget_qa", "forget_aa")
    neighbor_sets = ("neighbor_fb", "neighbor_qa")
    max_answer_tokens = 16

    def load(self, data_dir: Path | None, targets: list[str] | None, limit: int | None,
             n_dev: int) -> Benchmark:
        root = Path(data_dir) if data_dir is not None else SAMPLE_DIR
        if not root.is_dir():
            raise UserError(f"data dir {root} does not exist; pass --data-dir pointing at RWKU's folder (the one holding Target/).")
        tdir = root / "Target" if (root / "Target").is_dir() else root
        dirs = sorted((d.name for d in tdir.iterdir() if d.is_dir()), key=_target_id_key)
        if not dirs:
            raise UserError(f"no RWKU targets under {tdir}; expected Target/<id>_<Name>/ folders.")
        chosen = self._choose(dirs, targets, limit)
        rest = [d for d in reversed(dirs) if d not in chosen]
        dev = rest[:n_dev]
        read: list[Path] = []
        eval_targets = [self._target(tdir / d, read) for d in chosen]
        dev_targets = [self._target(tdir / d, read) for d in dev]
        utility, general = self._utility(tdir, dirs, read)
        return Benchmark(task=self.name, targets=eval_targets, dev_targets=dev_targets,
                         utility=utility, general_prompts=general,
                         alternatives=same_answer_alternatives(eval_targets + dev_targets),
                         source="bundled sample (fictional, written for r2f-bench)" if data_dir is None else str(root),
                         revision=content_hash(read))

    @staticmethod
    def _choose(dirs: list[str], targets: list[str] | None, limit: int | None) -> list[str]:
        if limit is not None and limit < 1:
            raise UserError(f"--limit must be at least 1, got {limit}.")
        if targets:
            chosen = []
            for t in targets:
                hits = [d for d in dirs if d == t or d.split("_", 1)[0] == t
                        or d.split("_", 1)[-1].replace("_", " ").lower() == t.replace("_", " ").lower()]
                if not hits:
                    raise UserError(f"unknown RWKU target {t!r}; use an id like '1' or a folder name like '1_Stephen_King'.")
                chosen.append(hits[0])
            return chosen[:limit] if limit else chosen
        return dirs[: (limit or 3)]

    def _target(self, d: Path, read: list[Path]) -> Target:
        intro_path = d / "intro.json"
        intro = read_json(intro_path, ("target",))[0]
        read.append(intro_path)
        probes: dict[str, list[Probe]] = {}
        for set_name, (fname, template) in PROBE_FILES.items():
            path = d / f"{fname}.json"
            rows = read_json(path, ("query", "answer"))
            read.append(path)
            probes[set_name] = [Probe(prompt=template.format(query=r["query"]), answer=str(r["answer"]),
                                      set=set_name, target=d.name, question=r["query"]) for r in rows]
        request = [p for s in REQUEST_SETS for p in probes[s]]
        return Target(id=d.name, name=intro["target"], request=request, probes=probes,
                      description=intro.get("intro", ""))

    @staticmethod
    def _utility(tdir: Path, dirs: list[str], read: list[Path]) -> tuple[list[Probe], list[str]]:
        utility: dict[str, Probe] = {}
        general: list[str] = []
        for d in dirs:
            trivia = tdir / d / "triviaqa.json"
            if trivia.is_file() and len(utility) < MAX_UTILITY:
                read.append(trivia)
                for r in read_json(trivia, ("question", "answers")):
                    if len(utility) < MAX_UTILITY and r["answers"]:
                        utility.setdefault(r["question"], Probe(
                            prompt=QA_TEMPLATE.format(query=r["question"]), answer=str(r["answers"][0]),
                            set="utility", target="", question=r["question"]))
            mia = tdir / d / "retain_mia.json"
            if mia.is_file() and len(general) < MAX_GENERAL:
                read.append(mia)
                general += [" ".join(r["text"].split()[:48]) for r in read_json(mia, ("text",))]
        if not utility:
            raise UserError(f"no utility probes (triviaqa.json) under {tdir}; RWKU ships them for targets 1-10, include at least one of those.")
        general = list(dict.fromkeys(general))[:MAX_GENERAL]
        return list(utility.values()), general or [p.prompt for p in utility.values()]


def same_answer_alternatives(targets: list[Target]) -> dict[str, list[Probe]]:
    """RWKU's own other phrasings of a fact: the target's other request probes
    (cloze or QA) with the same answer, e.g. a birth date asked as a blank and as a question."""
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
