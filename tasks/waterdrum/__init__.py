"""WaterDrum (Lu et al. 2025, "WaterDrum: Watermarking for Data-centric Unlearning
Metric"): TOFU QA (``Glow-AI/WaterDrum-TOFU``) or arXiv abstracts
(``Glow-AI/WaterDrum-Ax``) watermarked per data owner, so that how much of an owner's
data a model still holds can be read from the watermark in its outputs.

Layout: the HF dataset's config (``forget_05`` by default; also ``forget_01``, ...) with
its splits ``forget`` and ``retain``, columns ``question``/``answer`` (TOFU) or ``text``
(Ax). ``--data-dir`` is either a local export, ``<dir>/<config>/<split>.json`` (JSON
arrays of the rows) or a config folder itself, or ``hf:Glow-AI/WaterDrum-TOFU[/<config>]``
to read the hub (needs access). The HF data does not carry the watermark keys, so an
optional ``waterdrum.json`` (in the config folder or above it) supplies what the metric
needs: ``{"tokenizer": ..., "k_p": 1, "keys": {"forget": <id>, "retain": <id>},
"rows_per_owner": 20}``; without keys the task runs and only the WaterDrum score is off.

Targets and deletion requests: the forget split, in order, is cut into owners of
``rows_per_owner`` rows (20 = one fictitious TOFU author); target ``owner-i`` asks to
delete the i-th owner's rows. As WaterDrum defines its metric, they are also what is
scored: the ``forget`` probes are the request's own rows (TOFU: question -> answer; Ax:
the first words of an abstract -> the rest), a *seen* set (``usr_seen``); WaterDrum has
no held-out forget probes, so the headline USR is empty (null) for it. The
``retain`` neighbour probes are the i-th chunk of the retain split, another owner whose
data stays; utility (GUR) is the retain rows after those chunks; identity-alignment prompts are their
questions or abstract openings. Dev targets are other forget owners.

The official metric (:mod:`.watermark`), from :meth:`WaterDrum.extra_scores`:
``waterdrum_forget`` (watermark strength of the model's outputs on the target's queries
under the forget key; unlearning should bring it to about 0, where a model that never
saw the data is) and ``waterdrum_retain`` (on its neighbour owner's queries under the
retain key; it should stay).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import hookimpl
from ...data import Benchmark, Probe, Target
from ...errors import UserError
from ...engine.protocol import hold_out
from ...task import HubData, Task, content_hash, data_source, read_json, require_fields
from ..common import chunks, dev_ids, generate, qa_prompt, resolve_root, select_targets
from .watermark import GENERATIONS, MAX_NEW_TOKENS, WatermarkSpec, load_verifier, waterdrum_score

HERE = Path(__file__).parent
SAMPLE_DIR = HERE / "sample"
DEFAULT_CONFIG = "forget_05"
SPLITS = ("forget", "retain")
SIDECAR = "waterdrum.json"
# the watermarking model of WaterDrum's official scripts
WATERMARK_TOKENIZER = "meta-llama/Meta-Llama-3.1-8B-Instruct"
ROWS_PER_OWNER = 20
AX_PROMPT_WORDS = 32
MAX_UTILITY = 40
MAX_GENERAL = 60
STOPS = ("\n\n", "Question:")  # where an answer ends in our QA format (the lm-eval YAMLs stop there too)


@dataclass
class OwnerTarget(Target):
    """A target with the watermark keys of its probe sets (``None``: keys unknown)."""

    watermark: WatermarkSpec | None = None
    keys: dict[str, int] = field(default_factory=dict)


def row_probe(row: dict, set_name: str, target: str) -> Probe:
    """A WaterDrum-TOFU QA row, or a WaterDrum-Ax abstract split into opening and rest."""
    if "question" in row:
        return Probe(prompt=qa_prompt(row["question"]), answer=str(row["answer"]), set=set_name,
                     target=target, question=row["question"])
    words = row["text"].split()
    opening = " ".join(words[:AX_PROMPT_WORDS])
    return Probe(prompt=opening, answer=" ".join(words[AX_PROMPT_WORDS:]), set=set_name, target=target,
                 question=opening)


def check_rows(rows: Any, where: str) -> None:
    """Rows of one schema: TOFU (``question``, ``answer``) or Ax (``text``)."""
    if not isinstance(rows, list) or not rows:
        raise UserError(f"no rows in {where}; expected a JSON array of WaterDrum rows.")
    tofu = isinstance(rows[0], dict) and "question" in rows[0]
    require_fields(rows, ("question", "answer") if tofu else ("text",), where)


class WaterDrum(Task):
    name = "waterdrum"
    description = "WaterDrum watermark-based unlearning metric (Lu et al. 2025) on TOFU or arXiv owners."
    forget_sets = ("forget",)
    locality_sets = ("retain",)

    def locate(self, data_dir: str | None) -> Path | HubData | None:
        """A hub address stays one: WaterDrum's configs are read through ``datasets``."""
        return data_source(data_dir)

    def load(self, data_dir: Path | HubData | None, targets: list[str] | None, limit: int | None,
             n_dev: int, forget_source: str | None = None) -> Benchmark:
        if isinstance(data_dir, HubData):
            rows, meta, source, revision = self._read_hub(data_dir.repo, data_dir.config or DEFAULT_CONFIG)
        else:
            rows, meta, source, revision = self._read_local(data_dir)
        spec, keys, per_owner = _watermark(meta)
        owners = chunks(rows["forget"], per_owner)
        neighbors = chunks(rows["retain"], per_owner)[:len(owners)]
        rest = rows["retain"][len(neighbors) * per_owner:][:MAX_UTILITY]
        if not rest:
            raise UserError(f"the retain split of {source} is too small: it needs rows beyond one neighbour "
                            f"owner per forget owner ({len(owners)} x {per_owner}) for the utility set.")
        ids = [f"owner-{i + 1}" for i in range(len(owners))]
        chosen = select_targets(ids, targets, limit, self.name)

        def build(tid: str) -> OwnerTarget:
            i = ids.index(tid)
            forget = [row_probe(r, "forget", tid) for r in owners[i]]
            retain = [row_probe(r, "retain", tid) for r in neighbors[i]]
            return OwnerTarget(id=tid, name=f"WaterDrum forget owner {i + 1}", request=forget,
                               probes={"forget": forget, "retain": retain},
                               description=f"Please delete the {len(forget)} items this data owner contributed.",
                               watermark=spec, keys=keys)

        utility = [row_probe(r, self.utility_set, "") for r in rest]
        return hold_out(Benchmark(task=self.name, targets=[build(t) for t in chosen],
                                  dev_targets=[build(t) for t in dev_ids(ids, chosen, n_dev)], utility=utility,
                                  general_prompts=[p.question for p in utility][:MAX_GENERAL], seen_sets=("forget",),
                                  request_source="the data owner's rows (WaterDrum scores them: seen set)",
                                  source=source if keys else f"{source} (no watermark keys: WaterDrum score off)",
                                  revision=revision))

    def official_scores(self, set_scores: dict[str, float]) -> dict[str, float]:
        """None from per-probe means: WaterDrum's metric is the watermark strength of fresh
        generations, computed in :meth:`extra_scores`."""
        return {}

    def extra_scores(self, model: Any, tokenizer: Any, bench: Benchmark, target: Any) -> dict[str, float]:
        """``waterdrum_<set>``: WaterDrum on the target's forget and retain queries, each
        under its owner's key (empty when the keys are unknown)."""
        if not isinstance(target, OwnerTarget) or target.watermark is None:
            return {}
        verifier = load_verifier(target.watermark)
        out = {}
        for set_name, key in target.keys.items():
            probes = target.probes.get(set_name, [])
            if probes:
                texts = generate(model, tokenizer, [p.prompt for p in probes], MAX_NEW_TOKENS,
                                 samples=GENERATIONS, stop=STOPS)
                out[f"waterdrum_{set_name}"] = waterdrum_score(texts, verifier, key)
        return out

    @staticmethod
    def _read_local(data_dir: Path | None) -> tuple[dict[str, list], dict, str, str]:
        root, source = resolve_root(data_dir, SAMPLE_DIR)
        config = root if (root / "forget.json").is_file() else root / DEFAULT_CONFIG
        files = [config / f"{s}.json" for s in SPLITS]
        rows = {s: read_json(p, array=False) for s, p in zip(SPLITS, files)}
        for p, r in zip(files, rows.values()):
            check_rows(r, str(p))
        sidecar = next((p for p in (config / SIDECAR, root / SIDECAR) if p.is_file()), None)
        meta = read_json(sidecar, array=False) if sidecar else {}
        if not isinstance(meta, dict):
            raise UserError(f"malformed data file {sidecar}: expected a JSON object; see tasks/waterdrum/README.md.")
        return rows, meta, source, content_hash(files + ([sidecar] if sidecar else []))

    @staticmethod
    def _read_hub(repo: str, config: str) -> tuple[dict[str, list], dict, str, str]:
        import datasets

        rows = {}
        for split in SPLITS:
            try:
                rows[split] = datasets.load_dataset(repo, config, split=split).to_list()
            except Exception as exc:  # the hub client raises many types; all mean "not readable here"
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise UserError(f"cannot read {repo} (config {config!r}, split {split!r}) from the Hugging Face hub "
                                f"({first}); request access and log in, or export it to a local folder.") from None
            check_rows(rows[split], f"hf:{repo}/{config} split {split}")
        digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:12]
        return rows, {}, f"hf:{repo}/{config}", digest


MAX_WORD_VOCAB = 1 << 20  # the word-hash tokenizer's largest vocabulary (real tokenizers: up to ~262k)


def _watermark(meta: dict) -> tuple[WatermarkSpec | None, dict[str, int], int]:
    """The watermark spec, the key of each probe set and the owner size from ``waterdrum.json``."""
    per_owner = meta.get("rows_per_owner", ROWS_PER_OWNER)
    if not isinstance(per_owner, int) or per_owner < 1:
        raise UserError(f"malformed {SIDECAR}: 'rows_per_owner' must be a positive integer, got {per_owner!r}.")
    keys = meta.get("keys")
    if keys is None:
        return None, {}, per_owner
    missing = [s for s in SPLITS if not isinstance(keys, dict) or not isinstance(keys.get(s), int)]
    if missing:
        raise UserError(f"malformed {SIDECAR}: 'keys' lacks an integer field {missing[0]!r}.")
    spec = WatermarkSpec(tokenizer=meta.get("tokenizer", WATERMARK_TOKENIZER), k_p=meta.get("k_p", 1),
                         n_gram=meta.get("n_gram", 2))
    check_spec(spec)
    return spec, {s: keys[s] for s in SPLITS}, per_owner


def check_spec(spec: WatermarkSpec) -> None:
    """``waterdrum.json``'s watermark fields typed and bounded when the data loads, before any
    model (before: a TypeError or MemoryError after teaching)."""
    for name, value, least in (("k_p", spec.k_p, 1), ("n_gram", spec.n_gram, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UserError(f"malformed {SIDECAR}: {name!r} must be an integer of at least {least}, got {value!r}.")
    if not isinstance(spec.tokenizer, str) or not spec.tokenizer.strip():
        raise UserError(f"malformed {SIDECAR}: 'tokenizer' must name the watermarking model's tokenizer (or "
                        f"words:<N>), got {spec.tokenizer!r}.")
    if spec.tokenizer.startswith("words:"):
        size = spec.tokenizer.split(":", 1)[1]
        if not size.isdigit() or not 2 * spec.k_p < int(size) <= MAX_WORD_VOCAB:
            raise UserError(f"malformed {SIDECAR}: tokenizer {spec.tokenizer!r} needs a vocabulary size above "
                            f"2 x k_p ({2 * spec.k_p}) and at most {MAX_WORD_VOCAB}, e.g. words:4096.")


@hookimpl
def register_tasks(register):
    register(WaterDrum)
