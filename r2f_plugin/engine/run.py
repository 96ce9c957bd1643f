"""One run: load → build models → unlearn each target → evaluate → record.

Data flows one way. For every evaluation target the runner builds the deletion
request once (the same views and retain facts for every method), evaluates the
untouched model (cached), hands the model to the method under time and memory
measurement, then scores the result: the benchmark's official scores, USR, GUR,
identity alignment and RAP (after a relearning attack on the edited model). The
model is edited in place and put back from a snapshot on disk after each target
(:mod:`~r2f_bench.engine.snapshot`), so a run holds one copy of the weights in memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import random
import shutil
import tempfile
import time
import weakref
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from .. import __version__
from . import protocol
from .config import SPLITS, RunConfig, check_bounds
from ..atomic import atomic_dir, atomic_write_text, check_writable, set_aside
from ..cost import TARGET_PHASES, Cost, measure, timed
from ..data import Benchmark, ForgetRequest, Probe, Target, Teaching
from .distributed import cpu_threads, process_state, single_process_eval
from ..errors import UserError
from ..training.gradients import linear_modules
from .lmeval import evaluate_probes
from .metrics import (MIN_UTILITY, identity_alignment, kept, mean, next_token_distributions, pooled, recovery,
                      retention, usr)
from .models import (DEFAULT_PROXY, DEFAULT_TARGET, EmbeddedSpec, check_model_path, dispatch,
                     dtype_of, embedded_key, embedded_model, hf_model)
from ..plugins import registry
from .snapshot import Snapshot
from ..cache import cache_root
from ..jsontext import json_safe
from ..task import ACC, ANSWERED, HELD_OUT, LOCALITY, SCORE, SEEN
from .teaching import finetune
from ..unlearner import Context, Edit, Proxy
from .views import build_views, check_paraphraser, make_paraphraser

EVAL_VERSION = "2"


def taught_label(info: dict) -> str:
    """What an embedded model's label says about its knowledge: a world's generalisation,
    or the taught strings' recall (then no ranking on it means knowledge)."""
    if "world_texts" in info:
        never = info.get("never_taught_answered")
        unseen = f" and {never:.0f}% of never-taught" if never is not None else ""
        return (f"embedded demo model taught a synthetic knowledge world: answers {info['taught_answered']:.0f}% of "
                f"taught{unseen} questions")
    return (f"embedded demo model, taught {info['facts']} strings to answer-token accuracy "
            f"{info['taught_token_accuracy']:.3f}: USR is taught-string recall")


def answered(scores: dict[str, list[dict]], probe_set: str) -> list[bool]:
    """Per probe of ``probe_set``: whether it counts as answered."""
    return [bool(x.get(ANSWERED, x.get(ACC, 0.0))) for x in scores.get(probe_set, [])]


def score(rows: list[dict]) -> float:
    """Mean score of per-probe rows (%): ROUGE-L recall, or accuracy for multiple choice."""
    return 100.0 * mean([r.get(SCORE, r.get(ACC, 0.0)) for r in rows])


def scores_shape(scores: Any, sets: dict[str, list[Probe]]) -> str | None:
    """Why cached per-probe ``scores`` do not fit the probe ``sets`` they were made for
    (``None``: they do): each non-empty set needs one object per probe."""
    if not isinstance(scores, dict):
        return f"a JSON {type(scores).__name__}, not an object of probe sets"
    for name, probes in sets.items():
        rows = scores.get(name, [] if not probes else None)
        if not isinstance(rows, list) or len(rows) != len(probes) or not all(isinstance(r, dict) for r in rows):
            return f"probe set {name!r} lacks its {len(probes)} score rows"
    return None


def untouched_shape(entry: Any, sets: dict[str, list[Probe]]) -> str | None:
    """Why a cached untouched-model evaluation is malformed (``None``: it is not)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("extra"), dict):
        return "not an evaluation record (scores and extra)"
    return scores_shape(entry.get("scores"), sets)


def capped_threads(threads: int | None, progress: Callable[[str], None]) -> int | None:
    """``--threads``, capped at the cores this process may use (with one warning line)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if threads is None or threads <= cores:
        return threads
    progress(f"warning: --threads {threads} is more than the {cores} cores available here; using {cores}")
    return cores


class Run:
    """A (method, task, seed) run.

    Constructing it is cheap (configuration checked, data loaded); the models are
    built and the method set up by :meth:`prepare`, on the first target that
    actually runs, so a resumed sweep skips finished jobs without building anything.
    """

    def __init__(self, config: RunConfig, progress: Callable[[str], None] = print) -> None:
        self.config, self.progress = config, progress
        reg = registry()
        self.method_cls = reg.method(config.method)
        self.task = reg.task(config.task)()
        self.params = self.method_cls.parse_params(config.params)
        if config.split not in SPLITS:
            raise UserError(f"unknown split {config.split!r}; use {' or '.join(SPLITS)}.")
        check_bounds(config)
        check_paraphraser(config.paraphraser)
        for spec in (config.model, config.proxy):
            if not spec.startswith("embedded"):
                check_model_path(spec)
        self.out_dir = Path(config.output)
        check_writable(self.out_dir)
        check_writable(cache_root(), "the cache (R2F_BENCH_CACHE)")
        config.threads = capped_threads(config.threads, progress)
        if config.save_model:
            if not self.method_cls.edits_weights:
                raise UserError(f"method {config.method!r} edits no weights (it wraps the model at inference), so "
                                f"there is no checkpoint to save; drop --save-model.")
            check_writable(Path(config.save_model), "--save-model")
        self._versions = {"r2f-bench": __version__, "torch": torch.__version__,
                          f"method:{config.method}": reg.version_of("method", config.method),
                          f"task:{config.task}": reg.version_of("task", config.task)}
        if config.forget_source is not None and config.forget_source not in self.task.forget_sources:
            choices = ", ".join(self.task.forget_sources) or "none: it has one kind of request"
            raise UserError(f"task {config.task!r} has no forget source {config.forget_source!r}; choices: {choices}.")
        if config.forget_source is None and self.task.forget_sources:  # one store key for the same work
            config.forget_source = self.task.forget_sources[0]
        self.source = self.task.locate(config.data_dir)
        self.bench = self.task.load(self.source, config.targets, config.limit, config.dev_targets, config.forget_source)
        protocol.check(self.bench, config.task)
        self._check_dev_targets()
        self.split = self._split(self.bench, config.split)
        self.targets = self._scorable(self.split.targets)
        if not self.targets:
            raise UserError(f"no {config.task} target has both a request and forget probes in {self.bench.source}; "
                            f"check the data or pick other --targets.")
        n, d = len(self.bench.targets), len(self.bench.dev_targets)
        progress(f"{config.task}: {n} evaluation target{'s' * (n != 1)}, {d} dev target{'s' * (d != 1)} "
                 f"from {self.bench.source} (revision {self.bench.revision}); running the {config.split} split")
        self._prepared = False
        self._taught: tuple[Teaching, list[str]] | None = None
        self._low_utility_said = False

    def _scorable(self, targets: list[Target]) -> list[Target]:
        """``targets`` less those with an empty request (in the data, or emptied by the leak
        scrub) or no forget probes to score, each skipped with one warning line. A target is
        scored on its held-out forget sets (the headline USR); only a task that holds none
        out (WaterDrum) is scored on its seen sets, which a corpus request always fills."""
        roles = self.task.roles_of(self.bench, targets)
        scored = [s for s, r in roles.items() if r == HELD_OUT] or [s for s, r in roles.items() if r == SEEN]
        kept = []
        for t in targets:
            if not t.request:
                why = "its request is empty (in the data, or once what it is scored on is removed)"
            elif not any(t.probes.get(s) for s in scored):
                why = f"its forget probe sets ({', '.join(scored)}) are empty"
            else:
                kept.append(t)
                continue
            self.progress(f"warning: skipping target {t.id}: {why}; the other targets run")
        return kept

    def _check_dev_targets(self) -> None:
        """Fail before any model loads when ``--limit`` takes dev targets away (their fix is a
        smaller --limit, not more --dev-targets)."""
        c, have = self.config, len(self.bench.dev_targets)
        if c.limit is None or have >= c.dev_targets:
            return
        total = len(self.bench.targets) + have
        raise UserError(f"--limit {c.limit} leaves {have} of the {c.dev_targets} dev targets ({c.task} data here holds "
                        f"{total} targets); pass --limit {max(total - c.dev_targets, 1)} or less, or --dev-targets {have}.")

    @staticmethod
    def _split(bench: Benchmark, split: str) -> Benchmark:
        """The targets scored and the dev targets methods fit on. The eval split scores the
        evaluation targets; the dev split (tuning) scores the first half of the dev targets
        (rounded down) and lets methods fit on the rest, so tuning never fits on what it
        scores."""
        if split == "eval":
            return bench
        dev = bench.dev_targets
        if len(dev) < 2:
            raise UserError("the dev split needs at least 2 dev targets (one half is scored, methods fit on the "
                            "other); pass --dev-targets 2 or more.")
        scored = len(dev) // 2
        return protocol.hold_out(dataclasses.replace(bench, targets=dev[:scored], dev_targets=dev[scored:]))

    def prepare(self) -> None:
        """Build (or load) the models and set the method up; idempotent."""
        if self._prepared:
            return
        config, progress = self.config, self.progress
        torch.manual_seed(config.seed)
        state = process_state()
        self.device = state.device
        if self.device.type == "cpu":
            torch.set_num_threads(cpu_threads(config.threads, state.num_processes))
        once: dict[str, float] = {}  # the run's one-time costs, stated in each of its records
        with timed(once, "load"):  # an embedded model is taught here on a cold cache; a proxy loads in setup
            self.model, self.tokenizer, self.model_label, self.model_info = self._build(config.model, DEFAULT_TARGET)
            if config.target_modules:  # names this model lacks fail here, before any method is set up
                linear_modules(self.model, config.target_modules)
            self.paraphraser = make_paraphraser(config.paraphraser, self.model, self.tokenizer, self.bench.alternatives)
            proxy = self._proxy() if self.method_cls.uses_proxy else None
        self._keep_weights()
        dev = self.split.dev_targets
        self.ctx = Context(tokenizer=self.tokenizer, dev_targets=dev, retain_pool=self.split.retain_pool(),
                           seed=config.seed, cache_dir=cache_root(), make_views=self._views,
                           probe_roles=self.task.roles_of(self.bench, dev), proxy=proxy, progress=progress,
                           target_modules=tuple(config.target_modules) if config.target_modules else None)
        self.method = self.method_cls(self.params)
        with measure() as setup_cost:
            self.method.setup(self.model, self.ctx)
        self.setup_seconds = setup_cost.seconds
        self.phases_once = {**once, "setup": self.setup_seconds}
        self._prepared = True

    # -- models ---------------------------------------------------------------
    def _keep_weights(self) -> None:
        """Snapshot the untouched model to disk (in a hidden folder of the output, removed with
        the run): each target edits ``self.model`` in place and :meth:`_to` puts it back."""
        folder = Path(tempfile.mkdtemp(prefix=".weights-", dir=self.out_dir))
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        self._snapshots = {"untouched": Snapshot(self.model, folder / "untouched.safetensors")}
        self._state: str | None = "untouched"  # the snapshot self.model equals (None: neither)
        self._reference: list[torch.Tensor] | None = None  # the untouched model's identity distributions

    def _start(self) -> str:
        """The state a deletion starts from: the untouched model, or in sequential mode the last result."""
        return "current" if "current" in self._snapshots else "untouched"

    def _to(self, state: str) -> torch.nn.Module:
        """``self.model``, put back to the snapshot ``state`` unless it is there already."""
        if self._state != state:
            try:
                self._snapshots[state].restore(self.model)
            except ValueError as exc:
                raise UserError(f"method {self.config.method!r} left the model's structure changed ({exc}), so its "
                                f"untouched weights cannot be put back for the next target; remove what the "
                                f"deletion attached (e.g. PEFT's unload() or merge_and_unload()).") from None
            self._state = state
        return self.model

    def _edited(self) -> torch.nn.Module:
        """``self.model``, about to be changed in place (a deletion or an attack)."""
        self._state = None
        return self.model

    @staticmethod
    def _embedded(spec: str, default: EmbeddedSpec) -> EmbeddedSpec | None:
        """The embedded architecture ``spec`` names (``None``: a hub name or path)."""
        if not spec.startswith("embedded"):
            return None
        return default if spec in ("embedded", "embedded-proxy") else EmbeddedSpec.parse(spec)

    def _build(self, spec: str, default: EmbeddedSpec) -> tuple[torch.nn.Module, Any, str, dict]:
        """(model, tokenizer, label, build info) for an embedded spec, hub name or path."""
        es = self._embedded(spec, default)
        if es is not None:
            teaching, prompts = self.knowledge()
            model, tok, info = embedded_model(es, teaching.facts, prompts, progress=self.progress, device=self.device,
                                              seed=self.config.seed, world=teaching.texts, check=teaching.check)
            model = model.to(dtype_of(self.config.dtype))
            model = dispatch(model, self.config.device_map) if self.config.device_map else model
            return model, tok, f"{info['label']} ({taught_label(info)})", info
        model, tok = hf_model(spec, trust_remote_code=self.config.trust_remote_code, dtype=self.config.dtype,
                              device_map=self.config.device_map)
        return (model if self.config.device_map else model.to(self.device)), tok, spec, {}

    def _proxy(self) -> Proxy:
        """The --proxy model, built on first use. Its key says what determines its weights
        before it is built: for an embedded model its build key (architecture, seed, taught
        facts), else its name or path."""
        spec = self.config.proxy
        es = self._embedded(spec, DEFAULT_PROXY)
        if es is None:
            label = key = spec
        else:
            label = es.label
            teaching, prompts = self.knowledge()
            key = f"{es.label}@{embedded_key(es, teaching.facts, prompts, seed=self.config.seed, world=teaching.texts)}"
        return Proxy(label, key, lambda: self._build(spec, DEFAULT_PROXY)[:2])

    def knowledge(self) -> tuple[Teaching, list[str]]:
        """What an embedded model is taught, and the prompts its tokenizer sees.

        A knowledge world defines it (biographies, other people's QA: no scored probe).
        Other data teaches every string of the run's evaluation and dev targets, under
        every kind of request the task offers, with the utility set: USR then measures
        taught-string recall. The requests are built exactly as the run builds them, so
        every retain window a method sees was taught; runs on the same targets share
        one cached model whatever the method or --forget-source."""
        if self._taught is None:
            if self.bench.world is not None:
                self._taught = (self.bench.world, list(self.bench.general_prompts))
                return self._taught
            c = self.config
            facts = {(p.prompt, p.answer): p for p in self.bench.teaching_set()}
            for source in self.task.forget_sources:
                if source != c.forget_source:
                    other = self.task.load(self.source, c.targets, c.limit, c.dev_targets, source)
                    facts.update({(p.prompt, p.answer): p for p in other.teaching_set()})
            self._taught = (Teaching(facts=tuple(facts.values()), strings=True), list(self.bench.general_prompts))
        return self._taught

    def _views(self, facts: list[Probe]) -> list[list[Probe]]:
        return build_views(facts, self.config.views, self.paraphraser, self.config.seed)

    def knowledge_record(self) -> dict[str, Any]:
        """What the edited model knew: ``taught_strings`` when an embedded model was taught
        the scored probes themselves (USR is then recall of taught strings), and a world
        model's share of never-taught questions answered."""
        taught = self.config.model.startswith("embedded")
        return {"embedded": taught,
                "taught_strings": taught and self.knowledge()[0].strings,
                "never_taught_answered": self.model_info.get("never_taught_answered")}

    # -- bookkeeping ----------------------------------------------------------
    def data_revision(self) -> str:
        return self.bench.revision

    def versions(self) -> dict[str, str]:
        return dict(self._versions)

    def resolved_params(self) -> dict[str, Any]:
        """The method's hyper-parameters with defaults filled in (part of the store key)."""
        return asdict(self.params)

    def retain_for(self, target: Target) -> list[Probe]:
        """A request's retain items: a seeded sample of the fitting targets' requests, of the
        same size in both splits (what the dev split's fitting half holds, capped by
        ``retain_items``)."""
        dev = self.bench.dev_targets
        fitting = dev[len(dev) // 2:] if len(dev) > 1 else dev
        size = min(self.config.retain_items, sum(len(t.request) for t in fitting))
        pool = self.split.retain_pool()
        return random.Random(f"{self.config.seed}:{target.id}").sample(pool, min(size, len(pool)))

    def request(self, target: Target) -> ForgetRequest:
        """The deletion request every method gets: the same views and retain items."""
        self.prepare()  # views may come from the model itself (--paraphraser self)
        views = self._views(target.request)
        protocol.check_views(target, views, self.bench)
        return ForgetRequest(target=target.id, views=views, retain=self.retain_for(target), name=target.name)

    # -- evaluation -----------------------------------------------------------
    def roles(self, target: Target) -> dict[str, list[str]]:
        """The target's non-empty probe sets by role (:data:`~r2f_bench.task.ROLES`):
        ``held_out`` forget sets (the headline USR), ``seen`` sets (the request's own
        strings) and ``locality`` (neighbour) sets."""
        sets = [s for s, ps in target.probes.items() if ps]
        return {role: [s for s in sets if self.task.role(s, self.bench) == role] for role in (HELD_OUT, SEEN, LOCALITY)}

    def _probe_sets(self, target: Target, forget_only: bool = False) -> dict[str, list[Probe]]:
        roles = self.roles(target)
        names = roles["held_out"] + roles["seen"] + ([] if forget_only else roles["locality"])
        sets = {s: target.probes[s] for s in names}
        if not forget_only:
            sets[self.task.utility_set] = self.bench.utility
        return sets

    def _evaluate(self, model: torch.nn.Module, target: Target, forget_only: bool = False) -> dict[str, list[dict]]:
        with single_process_eval(), tempfile.TemporaryDirectory(prefix=".work-", dir=self.out_dir) as workdir:
            return evaluate_probes(model, self.tokenizer, self.task, self._probe_sets(target, forget_only), Path(workdir))

    def untouched_path(self, target: Target) -> Path:
        """Where the untouched model's scores on ``target`` are cached: keyed by the model
        and by every probe scored (a request's seen set depends on the chosen targets)."""
        probes = {s: [(p.prompt, p.answer) for p in ps] for s, ps in self._probe_sets(target).items()}
        key = hashlib.sha256(json.dumps([EVAL_VERSION, self.model_label, target.id, self.bench.revision,
                                         self.config.task, self.config.seed, probes,
                                         self.model_info.get("key", "")]).encode()).hexdigest()[:16]
        return cache_root() / "evals" / f"{self.config.task}-{key}.json"

    def _untouched(self, target: Target) -> dict[str, Any]:
        """Scores of the untouched model on ``target``, cached on disk (an entry that does not
        parse, or parses to the wrong shape, is set aside and rebuilt)."""
        path = self.untouched_path(target)
        cached = self._cached(path, lambda entry: untouched_shape(entry, self._probe_sets(target)))
        if cached is not None:
            return cached
        model = self._to("untouched")
        result = {"scores": self._evaluate(model, target),
                  "extra": self.task.extra_scores(model, self.tokenizer, self.bench, target)}
        atomic_write_text(path, json.dumps(result))
        return result

    def _cached(self, path: Path, shape: Callable[[Any], str | None]) -> Any:
        """The cache entry at ``path`` (``None``: absent); one that does not parse, or whose
        ``shape`` is wrong, is set aside (:func:`~r2f_bench.atomic.set_aside`) and ``None``."""
        if not path.exists():
            return None
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            set_aside(path, type(exc).__name__, self.progress)
            return None
        why = shape(entry)
        if why is not None:
            set_aside(path, f"wrong shape: {why}", self.progress)
            return None
        return entry

    def _attack_data(self, request: ForgetRequest) -> list[Probe]:
        """RAP's relearning data: paraphrased views of half the request's facts."""
        paraphrased = [p for view in request.views[1:] for p in view] or list(request.facts)
        rng = random.Random(self.config.seed)
        keep = {p.answer for p in rng.sample(list(request.facts), max(1, len(request.facts) // 2))}
        return [p for p in paraphrased if p.answer in keep]

    def _attacked(self, model: torch.nn.Module, data: list[Probe]) -> torch.nn.Module:
        """RAP's attack: ``model`` fine-tuned in place for ``rap_steps`` steps on ``data``."""
        if model is self.model:
            self._edited()
        for p in model.parameters():
            p.requires_grad_(True)
        finetune(model, self.tokenizer, data, epochs=10**6, lr=self.config.rap_lr, batch_size=16,
                 max_steps=self.config.rap_steps, seed=self.config.seed)
        return model

    def _control(self, target: Target, data: list[Probe]) -> dict[str, list[dict]]:
        """RAP's control: the forget-set scores of the *untouched* model after the same
        attack, cached beside its plain scores (a corrupt entry is rebuilt)."""
        attack = [(p.prompt, p.answer) for p in data]
        key = hashlib.sha256(json.dumps([self.untouched_path(target).stem, attack, self.config.rap_steps,
                                         self.config.rap_lr]).encode()).hexdigest()[:16]
        path = cache_root() / "evals" / f"{self.config.task}-attack-{key}.json"
        cached = self._cached(path, lambda entry: scores_shape(entry, self._probe_sets(target, forget_only=True)))
        if cached is not None:
            return cached
        scores = self._evaluate(self._attacked(self._to("untouched"), data), target, forget_only=True)
        atomic_write_text(path, json.dumps(scores))
        return scores

    def run_target(self, target: Target) -> dict[str, Any]:
        """Unlearn one target and return its result record, with the wall seconds of each phase.

        The untouched model's scores and RAP's control (both cached) come first, then the
        deletion, the edited model's scores, and RAP's attack on the edited model last; then
        the model is put back where the next deletion starts (phase ``restore``)."""
        self.prepare()
        t0, spent = time.time(), {}
        request = self.request(target)
        try:
            return self._run_target(target, request, t0, spent)
        finally:  # a no-op unless the target failed before its record
            self._to(self._start())

    def _run_target(self, target: Target, request: ForgetRequest, t0: float, spent: dict[str, float]) -> dict:
        with timed(spent, "untouched"):
            before = self._untouched(target)
            if self._reference is None:
                self._reference = next_token_distributions(self._to("untouched"), self.tokenizer,
                                                           self.bench.general_prompts)
        with timed(spent, "rap"):
            attack = self._attack_data(request)
            control = self._control(target, attack)
        edit, cost, info = self._unlearn(target, request, spent)
        if info is None:
            self.progress(f"warning: {self.config.method} on {target.id} left non-finite weights; "
                          f"recorded as a diverged deletion (no metrics), excluded from tables")
            self._restore(spent)
            return self._diverged(target, request, cost, edit.info, time.time() - t0, spent)
        self.progress(f"{self.config.method} on {target.id}: evaluating")
        with timed(spent, "evaluate"):
            after = self._evaluate(edit.model, target)
            if edit.evaluation_info is not None:
                info.update(edit.evaluation_info(self._probe_sets(target)))
        if self.config.sequential:
            info["sequence_step"] = self.targets.index(target) + 1
        if self.config.save_model:
            self._save(edit, target)
        with timed(spent, "extra"):
            extra_after = self.task.extra_scores(edit.model, self.tokenizer, self.bench, target)
        with timed(spent, "alignment"):
            alignment = identity_alignment(self._reference, edit.model, self.tokenizer, self.bench.general_prompts)
        if self.config.sequential:  # the next deletion starts from this one's result, not from its attack
            with timed(spent, "restore"):
                self._keep_result(edit)
        with timed(spent, "rap"):
            relearned = self._evaluate(self._attacked(edit.model, attack), target, forget_only=True)
        self._restore(spent)
        return self._record(target, request, before, after, relearned, control, extra_after, cost, info, alignment,
                            time.time() - t0, spent)

    def _restore(self, spent: dict[str, float]) -> None:
        """Put the model back where the next deletion starts (phase ``restore``)."""
        with timed(spent, "restore"):
            self._to(self._start())

    def _keep_result(self, edit: Edit) -> None:
        """Sequential mode: snapshot the deletion's result as the state the next one starts from."""
        if edit.model is not self.model:
            raise UserError(f"--sequential needs a method that edits the model it is given in place; method "
                            f"{self.config.method!r} returned another model object. Drop --sequential.")
        folder = self._snapshots["untouched"].path.parent
        self._snapshots["current"] = Snapshot(self.model, folder / "current.safetensors")
        self._state = "current"

    def _unlearn(self, target: Target, request: ForgetRequest,
                 spent: dict[str, float]) -> tuple[Edit, Cost, dict | None]:
        """The method's deletion, in place on the model the run is at, measured (``seconds``,
        ``peak_mem_mb``), and its info with the method's diagnostics, taken on the model before
        the deletion (``None``: it left non-finite weights, a diverged deletion); its wall
        seconds, diagnostics included, go to ``spent["unlearn"]``."""
        with timed(spent, "unlearn"):
            diagnostics = self.method.diagnostics(self._to(self._start()), request, self.ctx)
            torch.manual_seed(self.config.seed)
            model = self._edited()
            self.progress(f"{self.config.method} on {target.id}: unlearning")
            with measure(self.device) as cost:
                edit = self.checked(self.method.unlearn(model, request, self.ctx))
            if not all(torch.isfinite(p).all() for p in edit.model.parameters()):
                return edit, cost, None
            return edit, cost, {**edit.info, **diagnostics}

    def checked(self, edit: Any) -> Edit:
        """What ``unlearn()`` returned, checked as it returns (not after the evaluation): an
        :class:`Edit` whose ``info`` can be stored as JSON."""
        origin = f"method {self.config.method!r} (distribution {self._versions[f'method:{self.config.method}']})"
        if not isinstance(edit, Edit):
            raise UserError(f"{origin} returned {type(edit).__name__} from unlearn(), not an Edit; return "
                            f"Edit(model, info) (r2f_bench.unlearner).")
        try:
            if not isinstance(edit.info, dict):
                raise TypeError(f"info is a {type(edit.info).__name__}, not a dict")
            json.dumps(json_safe(edit.info), sort_keys=True, default=str, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UserError(f"{origin} returned an Edit whose info cannot be stored as JSON ({exc}); give "
                            f"Edit.info str keys and JSON values.") from None
        return edit

    def _save(self, edit: Edit, target: Target) -> None:
        """Write the unlearned model and its tokenizer (safetensors) for ``lm_eval`` and reuse."""
        path = Path(self.config.save_model) / target.id
        with atomic_dir(path) as tmp:
            edit.model.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)
        self.progress(f"{self.config.method} on {target.id}: unlearned model saved to {path}")

    def _provenance(self, request: ForgetRequest, wall: float, spent: dict[str, float]) -> dict[str, Any]:
        """What every record states besides its scores: among them the wall seconds of the
        target's phases that ran (``phases``) and the run's one-time costs (``phases_once``)."""
        return {"request_source": self.bench.request_source,
                "views": [[p.question for p in view] for view in request.views],
                "models": {"target": self.model_label, "proxy": self.ctx.proxy.label if self.ctx.proxy else None},
                "knowledge": self.knowledge_record(),
                "config": self.config.to_dict(), "params": asdict(self.params),
                "versions": self.versions(), "data_revision": self.bench.revision,
                "setup_seconds": self.setup_seconds, "wall_seconds": wall, "phases": {p: spent[p] for p in TARGET_PHASES if p in spent},
                "phases_once": dict(self.phases_once), "host": platform.node(),
                "threads": torch.get_num_threads() if self.device.type == "cpu" else None}

    def _diverged(self, target: Target, request: ForgetRequest, cost: Cost, info: dict, wall: float,
                  spent: dict[str, float]) -> dict:
        """The record of a deletion that destroyed the model: a failure, never a score."""
        return json_safe({"method": self.config.method, "task": self.config.task, "target": target.id,
                          "seed": self.config.seed, "status": "diverged",
                          **{m: None for m in ("usr", "usr_seen", "gur", "locality", "rap", "rap_control",
                                              "identity_alignment")},
                          "seconds": cost.seconds, "peak_mem_mb": cost.peak_mem_mb, "info": info,
                          **self._provenance(request, wall, spent)})

    def headline(self, target: Target, before: dict[str, list[dict]], after: dict[str, list[dict]]) -> tuple[float | None, float | None]:
        """(USR, GUR) of one deletion from the per-probe scores before and after (GUR ``None``
        when ``after`` holds no utility scores: a forget-only evaluation)."""
        held_out, util = self.roles(target)[HELD_OUT], self.task.utility_set
        known = {s: sum(answered(before, s)) for s in held_out}
        by_level = {s: usr(answered(before, s), answered(after, s), self.task.chance(s)) for s in held_out}
        gur = self.gur(score(before[util]), score(after[util])) if util in after else None
        return pooled(by_level, known), gur

    def gur(self, before: float, after: float) -> float | None:
        """GUR from the untouched and unlearned utility scores (%): n/a (``None``) where the
        untouched model scores below :data:`~r2f_bench.engine.metrics.MIN_UTILITY`, said once per run."""
        if before < MIN_UTILITY and not self._low_utility_said:
            self._low_utility_said = True
            self.progress(f"warning: the untouched model scores {before:.1f}% on the utility set, below the "
                          f"{MIN_UTILITY:g}% floor: GUR, a ratio to it, is n/a in this run's records")
        return retention(before, after, MIN_UTILITY)

    def _record(self, target, request, before, after, relearned, control, extra_after, cost, info, alignment,
                wall, spent) -> dict:
        """The result record; every share is a percentage (0-100), identity alignment a cosine."""
        roles, chance = self.roles(target), self.task.chance
        b_scores, util, held_out = before["scores"], self.task.utility_set, roles[HELD_OUT]
        known = {s: sum(answered(b_scores, s)) for s in held_out + roles[SEEN]}
        forgotten = {s: sum(b and not a for b, a in zip(answered(b_scores, s), answered(after, s))) for s in held_out}

        def rate(f, sets: list[str], *scores) -> dict[str, float | None]:
            return {s: f(answered(b_scores, s), *(answered(x, s) for x in scores), chance(s)) for s in sets}

        by_level = rate(usr, held_out, after)
        locality = [p for s in roles[LOCALITY] for p in b_scores.get(s, [])]
        locality_after = [p for s in roles[LOCALITY] for p in after.get(s, [])]
        set_before = {s: score(rows) for s, rows in b_scores.items()}
        set_after = {s: score(rows) for s, rows in after.items()}
        record = {
            "method": self.config.method, "task": self.config.task, "target": target.id, "seed": self.config.seed,
            "status": "ok",
            "usr": pooled(by_level, known),
            "usr_seen": pooled(rate(usr, roles[SEEN], after), known),
            "usr_by_level": by_level,
            "gur": self.gur(set_before[util], set_after[util]),
            "locality": retention(score(locality), score(locality_after)) if locality else None,
            "rap": pooled(rate(recovery, held_out, after, relearned), forgotten),
            "rap_control": pooled(rate(kept, held_out, control), known),
            "identity_alignment": alignment,
            "seconds": cost.seconds, "peak_mem_mb": cost.peak_mem_mb,
            "known_forget_probes": sum(known[s] for s in held_out),
            "forgotten_forget_probes": sum(forgotten.values()),
            "forget_probes": sum(len(b_scores.get(s, [])) for s in held_out),
            "n": {"utility": len(self.bench.utility), "identity_prompts": len(self.bench.general_prompts),
                  "locality": len(locality), "request": len(request.facts), "retain": len(request.retain)},
            "roles": roles,
            "official": {"before": {**self.task.official_scores(set_before), **before["extra"]},
                         "after": {**self.task.official_scores(set_after), **extra_after}},
            "set_scores": {"before": set_before, "after": set_after},
            "info": info,
            **self._provenance(request, wall, spent),
        }
        record.update({column: info.get(column) for column in self.method_cls.result_columns})
        return json_safe(record)
