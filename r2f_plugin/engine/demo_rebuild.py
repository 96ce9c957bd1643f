"""Teaching the shipped demo models' recipes on this machine and saying how the result
differs from what ships (``r2f-bench cache build``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..data import Teaching
from . import demo_models
from ..errors import UserError
from ..plugins import registry
from .embedded import DEFAULT_MODEL, DEFAULT_PROXY, EmbeddedSpec
from .models import cache_path, embedded_key, embedded_model, recipe_key


@dataclass(frozen=True)
class Rebuilt:
    """One recipe taught here beside the model shipped for it: where it is cached, the
    never-taught questions each answers (%), and their largest weight difference
    (``None``: no model ships for the recipe)."""

    label: str
    seed: int
    recipe: str
    cached: Path
    never_taught_here: float | None
    never_taught_shipped: float | None
    max_weight_diff: float | None

    def line(self) -> str:
        head = f"{self.label} seed {self.seed} (recipe {self.recipe}):"
        here = _share(self.never_taught_here)
        if self.max_weight_diff is None:
            return f"{head} taught here, answers {here} of never-taught questions; no shipped model to compare"
        same = ("bit-identical to" if self.max_weight_diff == 0
                else f"largest weight difference {self.max_weight_diff:.3g} from")
        return (f"{head} {same} the shipped model; never-taught questions answered: here {here}, "
                f"shipped {_share(self.never_taught_shipped)}")


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def rebuild(task: str, seeds: list[int], ship: bool, progress: Callable[[str], None]) -> list[Rebuilt]:
    """Teach the target and proxy of ``task``'s default knowledge world for each run seed
    here (one already in this machine's cache is loaded, not taught again), compare each
    with the shipped one, and with ``ship`` make the ones taught here the shipped ones."""
    teaching, prompts = default_world(task)
    return [_one(spec, seed, teaching, prompts, ship, progress) for seed in seeds for spec in (DEFAULT_MODEL, DEFAULT_PROXY)]


def default_world(task: str) -> tuple[Teaching, list[str]]:
    """What the embedded models are taught on ``task``'s default data (a knowledge world),
    and the prompts their tokenizer sees, as :meth:`~.plan.Plan.knowledge` gives a run."""
    plugin = registry().task(task)()
    bench = plugin.load(plugin.locate(None), None, None, 0, plugin.forget_sources[0] if plugin.forget_sources else None)
    if bench.world is None:
        raise UserError(f"task {task!r} has no knowledge world as its default data, so no demo model is taught for "
                        f"it; pick a task whose default data is one (rwku).")
    return bench.world, list(bench.general_prompts)


def _one(spec: EmbeddedSpec, seed: int, teaching: Teaching, prompts: list[str], ship: bool,
         progress: Callable[[str], None]) -> Rebuilt:
    args, world = (spec, teaching.facts, prompts), teaching.texts
    model, _, info = embedded_model(*args, progress=progress, seed=seed, world=world, check=teaching.check,
                                    shipped=False)
    recipe = recipe_key(*args, seed=seed, world=world)
    diff = shipped_share = None
    if demo_models.verified(recipe, progress) is not None:
        theirs, _, their_info = embedded_model(*args, progress=lambda m: None, seed=seed, world=world)
        mine = dict(model.named_parameters())
        with torch.no_grad():
            diff = max(float((p - mine[n]).abs().max()) for n, p in theirs.named_parameters())
        shipped_share = their_info.get("never_taught_answered")
    folder = cache_path(spec, embedded_key(*args, seed=seed, world=world))
    if ship:
        name = f"{spec.label.replace(':', '-')}-seed{seed}-{recipe}"
        progress(f"shipped {spec.label} seed {seed} as {demo_models.ship(recipe, folder, name)}")
    return Rebuilt(spec.label, seed, recipe, folder, info.get("never_taught_answered"), shipped_share, diff)
