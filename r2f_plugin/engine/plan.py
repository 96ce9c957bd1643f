"""What a run is about, checked before any model is built: the method and task, the
targets it scores and the data methods fit on, each target's probe sets by role and
retain items, and what an embedded model is taught."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable

import torch

from .. import __version__
from ..atomic import check_writable
from ..attack import Attack, parse_attacks
from ..cache import check_cache
from ..data import Target, Teaching
from ..errors import UserError
from ..plugins import registry
from ..task import HELD_OUT, SEEN
from ..unlearner import existing_file
from . import protocol
from . import world_teaching
from .config import (CONTROLS, INPUT_FIELDS, OPTIONS, SPLITS, TEACH_EPOCHS, TEACH_LR, TEACH_THREADS, RunConfig,
                     check_bounds, unread_fields)
from .embedded import DEFAULT_MODEL, DEFAULT_PROXY, EmbeddedSpec
from .identity import content_id
from .pretrained import check_model_path, decoder_layers, first_layers_of
from .scope import Scope, scored_split
from .views import check_paraphraser


def capped_threads(threads: int | None, progress: Callable[[str], None]) -> int | None:
    """``--threads``, capped at the cores this process may use (with one warning line)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if threads is None or threads <= cores:
        return threads
    progress(f"warning: --threads {threads} is more than the {cores} cores available here; using {cores}")
    return cores


def model_layers(spec: str) -> int | None:
    """The decoder layers of the model ``spec`` names, read without building or loading it
    (``None``: a hub model's not in the local hub cache, known once loaded)."""
    defaults = {"embedded": DEFAULT_MODEL, "embedded-proxy": DEFAULT_PROXY}
    if spec in defaults:
        return defaults[spec].layers
    return EmbeddedSpec.parse(spec).layers if spec.startswith("embedded") else decoder_layers(spec)


# what each input of :data:`~r2f_bench.unlearner.INPUTS` is, for the line refusing an option a method does not read
INPUT_NAMES = {"views": "the request's paraphrased views", "retain": "the request's retain items",
               "target_modules": "the linear layers to adapt or step"}


def unread_options(config: RunConfig, attacks: list[tuple[str, Attack]], unread: tuple[str, ...] = ()) -> None:
    """One line for an option this run would accept and never read (the same work stored twice
    otherwise): the relearning budget without a relearning attack, a paraphraser with nothing to
    paraphrase, a chat template setting for models that have none, and the ``unread`` fields, which
    set an input the method does not read (:func:`~.config.unread_fields`)."""
    default = lambda name: OPTIONS[name].default
    for name, fields in INPUT_FIELDS.items():
        given = [f for f in fields if f in unread and getattr(config, f) != default(f)]
        if given:
            value = lambda f: ",".join(v) if isinstance(v := getattr(config, f), list) else v
            shown = " and ".join(f"{OPTIONS[f].flag} {value(f)}" for f in given)
            raise UserError(f"{shown}: method {config.method!r} does not read {INPUT_NAMES[name]} with these settings "
                            f"(`r2f-bench methods` says what each reads); drop {'them' if len(given) > 1 else 'it'}.")
    if not any(a.relearns for _, a in attacks) and (config.rap_steps, config.rap_lr) != (
            default("rap_steps"), default("rap_lr")):
        raise UserError(f"--rap-steps and --rap-lr set the relearning attacks' budget, and --attacks {config.attacks} "
                        f"runs none; drop them.")
    if config.rap_steps == 0 and config.rap_lr != default("rap_lr"):
        raise UserError("--rap-lr sets the relearning attacks' rate, and --rap-steps 0 runs no relearning; drop one "
                        "of them.")
    if config.views == 1 and config.paraphraser != default("paraphraser"):
        raise UserError(f"--paraphraser {config.paraphraser}, but with --views 1 each fact is asked as it is and "
                        f"nothing is paraphrased; drop it, or pass --views 2 or more.")
    if config.model.startswith("embedded") and config.chat_template != default("chat_template"):
        raise UserError(f"--chat-template {config.chat_template}, but the embedded models have no chat template; "
                        f"drop it, or pass --model with an instruct model.")


class Plan:
    """A run's checked inputs and data (no model): constructing it fails with one line on
    a bad option, loads the benchmark and picks the targets the run scores.

    ``config`` (a completed copy of the one given: capped ``threads``, the task's default
    ``forget_source``, ``targets`` as the ids they resolved to), ``task``, ``method_cls`` and
    ``params`` (``None`` for a plan that runs no method: ``config.method`` empty, e.g. the
    knowledge scan), ``bench`` (the loaded data),
    ``scope`` (:class:`~.scope.Scope`: what is scored, what methods fit on), ``targets`` (those
    of the split that can be scored) and ``out_dir``.
    """

    def __init__(self, config: RunConfig, progress: Callable[[str], None] = print) -> None:
        self.progress = progress
        reg = registry()
        self.method_cls = reg.method(config.method) if config.method else None
        self.task = reg.task(config.task)()
        self.params = self.method_cls.parse_params(config.params) if self.method_cls else None
        # an unknown attack, a bad value or an option the run would not read: one line, before the data loads
        check_bounds(config)
        unread_options(config, parse_attacks(config.attacks),
                       unread_fields(self.method_cls, self.params, config.attacks) if self.method_cls else ())
        if config.split not in SPLITS:
            raise UserError(f"unknown split {config.split!r}; use {' or '.join(SPLITS)}.")
        if config.control not in CONTROLS:  # argparse checks the CLI's; this, the Python API's
            raise UserError(f"unknown control {config.control!r}; use one of {', '.join(CONTROLS)}.")
        check_paraphraser(config.paraphraser)
        reads_proxy = self.method_cls is not None and self.method_cls.uses_proxy
        cut = first_layers_of(config.proxy) if reads_proxy else None
        for spec in (config.model,) if cut is not None or not reads_proxy else (config.model, config.proxy):
            if not spec.startswith("embedded"):
                check_model_path(spec)
            elif spec not in ("embedded", "embedded-proxy"):
                EmbeddedSpec.parse(spec)  # a spec it cannot build is one line here, before the data loads
        schedule = (config.teach_epochs, config.teach_lr, config.teach_threads)
        if config.model.startswith("embedded") and schedule != (TEACH_EPOCHS, TEACH_LR, TEACH_THREADS):
            raise UserError("--teach-epochs, --teach-lr and --teach-threads set how a pretrained model (--model NAME, "
                            "DIR or FILE.gguf) is taught a knowledge world; the embedded models keep their own "
                            "schedule: drop them.")
        layers = model_layers(config.model) if cut is not None else None
        if layers is not None and not 1 <= cut < layers:  # an uncached hub model's: checked where the proxy is cut
            raise UserError(f"--proxy first-layers:{cut}: {config.model} has {layers} decoder layers; keep between 1 "
                            f"and {layers - 1}.")
        if not str(config.output).strip():  # Path("") is the working directory
            raise UserError("--output is empty; pass the results directory, e.g. --output r2f-output.")
        self.out_dir = Path(config.output)
        check_writable(self.out_dir)
        check_cache()
        config = dataclasses.replace(config, threads=capped_threads(config.threads, progress))
        if config.save_model and self.method_cls:
            if not self.method_cls.edits_weights:
                raise UserError(f"method {config.method!r} edits no weights (it wraps the model at inference), so "
                                f"there is no checkpoint to save; drop --save-model.")
            check_writable(Path(config.save_model), "--save-model")
        self._versions = {"r2f-bench": __version__, "torch": torch.__version__,
                          f"task:{config.task}": reg.version_of("task", config.task)}
        if self.method_cls:
            self._versions[f"method:{config.method}"] = reg.version_of("method", config.method)
        if config.forget_source is not None and config.forget_source not in self.task.forget_sources:
            choices = ", ".join(self.task.forget_sources) or "none: it has one kind of request"
            raise UserError(f"task {config.task!r} has no forget source {config.forget_source!r}; choices: {choices}.")
        if config.forget_source is None and self.task.forget_sources:  # one store key for the same work
            config = dataclasses.replace(config, forget_source=self.task.forget_sources[0])
        self.config = config
        self.source = self.task.locate(config.data_dir)
        self.bench = self.task.load(self.source, config.targets, config.limit, config.dev_targets, config.forget_source)
        pretrained = [spec for spec in (config.model, *((config.proxy,) if reads_proxy else ()))
                      if not spec.startswith("embedded")]
        if pretrained and self.bench.world is not None:  # how it is taught the world is part of what a record is
            self._versions["world-teaching"] = world_teaching.VERSION
        if self.bench.world is None and schedule != (TEACH_EPOCHS, TEACH_LR, TEACH_THREADS):  # or one run, two keys
            raise UserError("--teach-epochs, --teach-lr and --teach-threads set how a pretrained model is taught a "
                            "knowledge world, and this run's data is a benchmark's own, which no model is taught: "
                            "drop them.")
        protocol.check(self.bench, config.task)
        self._check_dev_targets()
        if config.targets:  # by the ids the task resolved (a number, a name, an id split at its comma): one store key
            config = self.config = dataclasses.replace(config, targets=[t.id for t in self.bench.targets], limit=None)
        scored = scored_split(self.bench, config.split)
        self.targets = self._scorable(scored.targets)
        self.scope = Scope(self.task, self.bench, scored, self.targets, config.seed, config.retain_items)
        if not self.targets:
            raise UserError(f"no {config.task} target has both a request and forget probes in {self.bench.source}; "
                            f"check the data or pick other --targets.")
        if config.sequential and len(self.targets) < 2:  # one deletion is the same with or without it
            raise UserError("--sequential applies the targets' deletions one after another, and this run has one "
                            "target; pass two or more (--targets or --limit), or drop it.")
        if self.method_cls and not scored.retain_pool() and (fix := self.method_cls.dev_split_needed(self.params)):
            raise UserError(fix)
        if config.control == "other_request" and config.sequential:
            raise UserError("--control other_request with --sequential would score each target after its own "
                            "request was unlearned (by the step before); drop one of them.")
        if config.control == "other_request" and len(self.targets) < 2:
            raise UserError("--control other_request unlearns another evaluation target's request, and this run has "
                            "one target; pass two or more (--targets or --limit).")
        if config.control == "random_step" and self.method_cls and not self.method_cls.edits_weights:
            raise UserError(f"--control random_step replaces a deletion's weight step, and method {config.method!r} "
                            f"edits no weights; use --control other_request.")
        if config.control == "random_step" and config.dtype != "float32":  # a spread-out step would round away
            raise UserError(f"--control random_step needs --dtype float32 (in {config.dtype} a random step of a "
                            f"deletion's norm, spread over every weight, mostly rounds away).")
        if config.control != "none" and config.save_model:
            raise UserError("--save-model with --control would save a control under the deletion's checkpoint "
                            "names; save the deletion's models in a run without --control.")
        n, d = len(self.bench.targets), len(self.bench.dev_targets)
        progress(f"{config.task}: {n} evaluation target{'s' * (n != 1)}, {d} dev target{'s' * (d != 1)} "
                 f"from {self.bench.source} (revision {self.bench.revision}); running the {config.split} split")
        self._taught: tuple[Teaching, list[str]] | None = None

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
        if total - c.dev_targets < 1:  # no --limit helps: the data cannot hold them beside one evaluation target
            raise UserError(f"--dev-targets {c.dev_targets} leaves no evaluation target ({c.task} data here holds {total} "
                            f"targets); pass --dev-targets {total - 1} or less.")
        needs = have == 0 and self.method_cls is not None and self.method_cls.dev_split_needed(self.params)
        fewer = "" if needs else f", or --dev-targets {have}"  # none at all: refused by the method's own check
        raise UserError(f"--limit {c.limit} leaves {have} of the {c.dev_targets} dev targets ({c.task} data here holds "
                        f"{total} targets); pass --limit {max(total - c.dev_targets, 1)} or less{fewer}.")

    # -- the runner API (r2f_bench.results.sweep) ------------------------------
    def data_revision(self) -> str:
        return self.bench.revision

    def versions(self) -> dict[str, str]:
        return dict(self._versions)

    def resolved_params(self) -> dict[str, Any]:
        """The method's hyper-parameters with defaults filled in (part of the store key), less a
        field added after stores existed (``metadata={"added": True}``) left at its default,
        which does what runs did before it: an older store's results keep their keys. A file
        a parameter names (its check is :func:`~r2f_bench.unlearner.existing_file`: a fitted
        decoder, say) is held by its content (:func:`~.identity.content_id`), not its path."""
        named = lambda f, v: content_id(v) if f.metadata.get("check") is existing_file and v else v
        return {f.name: named(f, getattr(self.params, f.name)) for f in dataclasses.fields(self.params)
                if not (f.metadata.get("added") and getattr(self.params, f.name) == f.default)}

    def knowledge(self) -> tuple[Teaching, list[str]]:
        """What a model is taught before the run (an embedded model always; a pretrained one
        when the data is a knowledge world), and the prompts an embedded tokenizer sees.

        A knowledge world defines it (biographies, other people's QA: no scored probe).
        Other data teaches every string of the run's evaluation and dev targets, under
        every kind of request the task offers, with the utility set: USR then measures
        taught-string recall. The requests are built exactly as the run builds them, so
        every retain window a method sees was taught; runs on the same targets share
        one cached model whatever the method or --forget-source."""
        if self._taught is None:
            if self.bench.world is not None:
                self._taught = (self.bench.world, list(self.bench.general_prompts))
                if leaks := protocol.taught_leaks(self.bench, self.bench.world):
                    self.progress(f"warning: the knowledge world teaches {len(leaks)} scored item(s) near-verbatim "
                                  f"(first: {leaks[0]}); their scores are partly taught-string recall: reword its "
                                  f"templates.")
                return self._taught
            c = self.config
            facts = {(p.prompt, p.answer): p for p in self.bench.teaching_set()}
            for source in self.task.forget_sources:
                if source != c.forget_source:
                    other = self.task.load(self.source, c.targets, c.limit, c.dev_targets, source)
                    facts.update({(p.prompt, p.answer): p for p in other.teaching_set()})
            self._taught = (Teaching(facts=tuple(facts.values()), strings=True), list(self.bench.general_prompts))
        return self._taught
