"""One run: load → build models → unlearn each target → evaluate → record.

Data flows one way. Constructing a :class:`Run` checks the inputs and loads the data
(:mod:`~r2f_bench.engine.plan`); :meth:`Run.prepare` builds the models
(:mod:`~r2f_bench.engine.build`) and sets the method up. For every target the run
builds the deletion request (the same views and retain facts for every method),
evaluates the untouched model (cached), hands the model to the method under time and
memory measurement, scores the result (:mod:`~r2f_bench.engine.evaluate`: the
benchmark's official scores, identity alignment and RAP, after a relearning attack on
the edited model) and writes the record (:mod:`~r2f_bench.engine.record`: USR, GUR and
the rest). The model is edited in place and put back from a snapshot on disk after each
target (:mod:`~r2f_bench.engine.weights`), so a run holds one copy of the weights in memory.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from ..atomic import atomic_dir
from ..attack import Budget
from ..cache import cache_root
from ..cost import Cost, measure, timed
from ..data import ForgetRequest, Target
from ..errors import UserError
from ..jsontext import json_safe
from ..unlearner import Context, Edit
from .attacks import Attacks
from .budget import Watched, metered
from .build import BuildInputs, build_models, forget_request
from .config import RunConfig
from .controls import other_target, step_seed
from .distributed import process_state, set_up_cpu
from .evaluate import Evaluator
from .checkpoint import write_pretrained
from .plan import Plan
from .record import Measured, Recorder, provenance, run_facts
from .scan import known_of
from .weights import Weights


class Run:
    """A (method, task, seed) run.

    Constructing it is cheap (configuration checked, data loaded: its :class:`Plan`); the
    models are built and the method set up by :meth:`prepare`, on the first target that
    actually runs, so a resumed sweep skips finished jobs without building anything.

    What a plugin command or a script may use: ``config`` (completed), ``task``, ``bench``,
    ``scope`` (:class:`~.scope.Scope`: what is scored, what methods fit on), ``targets`` and
    ``progress``; after :meth:`prepare`, ``model`` (the model each target edits in place and
    then puts back), its ``tokenizer``, ``model_label`` and build info ``model_info``;
    ``method`` (set up) and ``ctx``, the :class:`~r2f_bench.unlearner.Context` it was set up
    with (views, proxy, retain pool); ``evaluator`` (:class:`~r2f_bench.engine.evaluate.Evaluator`:
    scores, the untouched model's cached evaluation) and, from the start, ``recorder``
    (:class:`~r2f_bench.engine.record.Recorder`: the headline USR and GUR); and
    :meth:`request`, a target's deletion request.
    """

    def __init__(self, config: RunConfig, progress: Callable[[str], None] = print) -> None:
        self.plan = plan = Plan(config, progress)
        self.config, self.progress, self.task, self.method_cls = plan.config, progress, plan.task, plan.method_cls
        self.bench, self.scope, self.targets, self.out_dir = plan.bench, plan.scope, plan.targets, plan.out_dir
        self.recorder = Recorder(self.scope, self.config, self.method_cls.result_columns, progress)
        self._facts = run_facts(self.config, self.bench, self.resolved_params(), self.versions())
        self._prepared = False

    # -- the runner API (r2f_bench.results.sweep) ------------------------------
    def data_revision(self) -> str:
        return self.plan.data_revision()

    def versions(self) -> dict[str, str]:
        return self.plan.versions()

    def resolved_params(self) -> dict[str, Any]:
        return self.plan.resolved_params()

    def prepare(self) -> None:
        """Build (or load) the models and set the method up; idempotent."""
        if self._prepared:
            return
        config = self.config
        torch.manual_seed(config.seed)
        state = process_state()
        self.device = state.device
        if self.device.type == "cpu":
            set_up_cpu(config.threads, state.num_processes)
        once: dict[str, float] = {}  # the run's one-time costs, stated in each of its records
        with timed(once, "load"):  # an embedded model is taught here on a cold cache; a proxy loads in setup
            self._built = build_models(BuildInputs.of(self.plan), self.device)
        built = self._built
        self.model, self.tokenizer = built.model, built.tokenizer
        self.model_label, self.model_info = built.label, built.info
        self.weights = Weights(self.model, self.out_dir, config.method)
        self.evaluator = Evaluator(self.scope, built, self.weights, config, self.progress)
        dev = self.scope.scored.dev_targets
        self.ctx = Context(tokenizer=self.tokenizer, dev_targets=dev, retain_pool=Watched(self.scope.scored.retain_pool()),
                           seed=config.seed, cache_dir=cache_root(), make_views=built.views,
                           probe_roles=self.task.roles_of(self.bench, dev), proxy=built.proxy, progress=self.progress,
                           target_modules=tuple(config.target_modules) if config.target_modules else None)
        self.attacks = Attacks(config.attacks, self.scope, self.evaluator, self.weights, self.ctx,
                               Budget(config.rap_steps, config.rap_lr), self.progress)
        self.method = self.method_cls(self.plan.params)
        with measure() as setup_cost:
            self.method.setup(self.model, self.ctx)
            self.retain_in_setup = self.ctx.retain_pool.read
        self._once = {**once, "setup": setup_cost.seconds}
        self._prepared = True

    def request(self, target: Target, scored: Target | None = None) -> ForgetRequest:
        """The deletion request every method gets: the same views and retain items (``scored``:
        the target scored after it, where another: a negative control)."""
        self.prepare()  # views may come from the model itself (--paraphraser self)
        return forget_request(self.scope, self._built, target, scored)

    def run_target(self, target: Target) -> dict[str, Any] | None:
        """Unlearn one target and return its result record, with the wall seconds of each phase
        (``None``, with a line, for a target the untouched model knows too little of: ``--min-known``).

        The untouched model's scores and the attacks' controls (both cached) come first, then
        the deletion, the edited model's scores, and the attacks on the edited model last;
        then the model is put back where the next deletion starts (phase ``restore``)."""
        self.prepare()
        t0, spent = time.time(), {}
        if self.config.min_known:
            with timed(spent, "untouched"):
                known = known_of(self.scope, target, self.evaluator.untouched(target, forget_only=True)["scores"])
            if known.total < self.config.min_known:
                self.progress(f"skipping target {target.id}: the untouched model knows {known.total} of its "
                              f"{sum(known.probes.values())} held-out forget probes, fewer than --min-known "
                              f"{self.config.min_known}; the other targets run")
                return None
        if self.config.control == "other_request":  # a negative control: another target's request, this one scored
            request = self.request(other_target(self.targets, target), scored=target)
        else:
            request = self.request(target)
        try:
            return self._run_target(target, request, t0, spent)
        finally:  # a no-op unless the target failed before its record
            self.weights.to_start()

    def _run_target(self, target: Target, request: ForgetRequest, t0: float, spent: dict[str, float]) -> dict:
        ev, config = self.evaluator, self.config
        with timed(spent, "untouched"):
            before = ev.untouched(target)
            ev.reference()
        with timed(spent, "attacks"):
            attacks = self.attacks.prepare(target, request)
            controls = self.attacks.controls(target, attacks)
        edit, cost, info = self._unlearn(target, request, spent)
        if info is None:
            self.progress(f"warning: {config.method} on {target.id} left non-finite weights; "
                          f"recorded as a diverged deletion (no metrics), excluded from tables")
            self._restore(spent)
            return self.recorder.diverged(target, cost, edit.info, self._stated(request, t0, spent))
        self.progress(f"{config.method} on {target.id}: evaluating")
        with timed(spent, "evaluate"):
            after = ev.scores(edit.model, target)
            if edit.evaluation_info is not None:
                info.update(edit.evaluation_info(self.scope.probe_sets(target)))
        if config.sequential:
            info["sequence_step"] = self.targets.index(target) + 1
        if config.save_model:
            self._save(edit, target)
        with timed(spent, "extra"):
            extra_after = self.task.extra_scores(edit.model, self.tokenizer, self.bench, target)
        with timed(spent, "alignment"):
            alignment = ev.alignment(edit.model)
        if config.sequential:  # the next deletion starts from this one's result, not from its attack
            with timed(spent, "restore"):
                self.weights.keep(edit.model)
        with timed(spent, "attacks"):
            attacked = self.attacks.after(edit.model, target, attacks)
        self._restore(spent)
        measured = Measured(before, after, extra_after, alignment, attacked, controls)
        return self.recorder.record(target, request, measured, cost, info, self._stated(request, t0, spent))

    def _restore(self, spent: dict[str, float]) -> None:
        """Put the model back where the next deletion starts (phase ``restore``)."""
        with timed(spent, "restore"):
            self.weights.to_start()

    def _stated(self, request: ForgetRequest, t0: float, spent: dict[str, float]) -> dict[str, Any]:
        """The record's provenance, its wall seconds counted from ``t0``."""
        return provenance(self._facts, self._built, request, self._once, time.time() - t0, spent, self.device)

    def _unlearn(self, target: Target, request: ForgetRequest,
                 spent: dict[str, float]) -> tuple[Edit, Cost, dict | None]:
        """The method's deletion, in place on the model the run is at, measured (``seconds``,
        ``peak_mem_mb``), and its info with the method's diagnostics, taken on the model before
        the deletion (``None``: it left non-finite weights or buffers, a diverged deletion); its wall
        seconds, diagnostics included, go to ``spent["unlearn"]``."""
        with timed(spent, "unlearn"):
            diagnostics = self.method.diagnostics(self.weights.to_start(), request, self.ctx)
            torch.manual_seed(self.config.seed)
            model = self.weights.edited()
            self.progress(f"{self.config.method} on {target.id}: unlearning")
            with measure(self.device) as cost, metered(model, (request.retain, self.ctx.retain_pool)) as spend:
                edit = self.checked(self._call_unlearn(model, request, target))
            spend.weights_changed = self.weights.changed_share(edit.model)
            spend.retain_in_setup = self.retain_in_setup
            cost.budget = spend.to_json()
            computed = [*edit.model.parameters(), *(b for b in edit.model.buffers() if b.is_floating_point())]
            if not all(torch.isfinite(t).all() for t in computed):
                return edit, cost, None
            if self.config.control == "random_step":  # a negative control: the step's size, not its direction
                self.weights.randomize_step(edit.model, step_seed(self.config.seed, target.id))
            return edit, cost, {**edit.info, **diagnostics}

    def _origin(self) -> str:
        """The method as an error names it: its name and the distribution it comes from."""
        return f"method {self.config.method!r} (distribution {self.versions()[f'method:{self.config.method}']})"

    def _call_unlearn(self, model: torch.nn.Module, request: ForgetRequest, target: Target) -> Any:
        """``unlearn()``; an exception it raises is the method's bug: its traceback, then one
        line naming the method and the target (a UserError or an interrupt passes through)."""
        try:
            return self.method.unlearn(model, request, self.ctx)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's bug, named
            self.progress(traceback.format_exc().rstrip())
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UserError(f"{self._origin()} raised {type(exc).__name__} in unlearn() on target {target.id}: {first}; "
                            f"its traceback is above (a bug of the method's: report it to its authors).") from None

    def checked(self, edit: Any) -> Edit:
        """What ``unlearn()`` returned, checked as it returns (not after the evaluation): an
        :class:`Edit` whose ``info`` can be stored as JSON."""
        origin = self._origin()
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
            write_pretrained(edit.model, self.tokenizer, tmp)
        self.progress(f"{self.config.method} on {target.id}: unlearned model saved to {path}")
