"""A knowledge world taught into a pretrained model (TOFU's protocol: fine-tune a pretrained
LM on fictitious people, then forget some of them).

A pretrained model run on a knowledge world (the default data, or a world folder passed
with ``--data-dir``) knows none of its people. It is fine-tuned first, on a schedule fit for
a model that already speaks the language: by default :data:`EPOCHS` passes over the world's
biographies (language modelling) and its questions about other people (answer loss), AdamW
at peak :data:`LR` with warm-up and cosine decay, in float32 whatever the run's dtype
(``--teach-epochs`` and ``--teach-lr`` change both, for every target alike), on one CPU
thread unless ``--teach-threads`` says more (a sum split over threads rounds otherwise, so
the thread count is part of the taught model's key). The texts and the questions of a step
are two passes (``teach_schedule``'s ``apart``): a pretrained model's activations are what
its teaching holds in memory. Questions are
taught as they will be asked: through the chat template where the run uses one. No scored
probe is taught (the world holds none); the schedule is chosen before anything is scored,
on what the model answers of the world's unscored check questions, and a taught model that
answers fewer than :data:`GENERALISES` % of them gets one warning line (held-out USR would
rest on few known probes). The taught weights are cached by the pretrained weights' key,
the world as taught, the dtype, the seed (each run seed is its own taught model), the
schedule and the library versions, and read back into the loaded model in place (one copy
of the weights), after their names and shapes are checked. A teaching under way saves its
state every :data:`CHECKPOINT_SECONDS` (:class:`SavedState`): one that was cut off goes on
from there.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from ..atomic import atomic_dir, set_aside, write_safetensors
from ..cache import PARTIAL, cache_root
from ..data import Probe, Teaching
from ..errors import UserError
from ..training.encoding import as_asked
from .config import TEACH_EPOCHS, TEACH_LR, TEACH_THREADS
from .models import digest, pinned_threads
from .teaching import answers_phrase, teach_schedule, world_answers

VERSION = "2"  # 2: texts and questions taught in passes apart
EPOCHS, LR = TEACH_EPOCHS, TEACH_LR  # the default schedule (--teach-epochs, --teach-lr)
GENERALISES = 50.0  # % of never-taught check questions a taught model should answer (A1's bar)
TEXT_BATCH = 16  # biographies a step; the questions' batch keeps both sets at the same number of passes
WEIGHTS, INFO = "model.safetensors", "r2f_info.json"
CHECKPOINT_SECONDS = 600.0  # of teaching between saves of its state: a cut-off teaching loses at most this
MOMENTS = ("step", "exp_avg", "exp_avg_sq")  # AdamW's state of one parameter (none before its first gradient)


@dataclass(frozen=True)
class Schedule:
    """How long and how hard a pretrained model is taught the world, and on how many CPU threads."""
    epochs: int = EPOCHS
    lr: float = LR
    threads: int = TEACH_THREADS


def steps_and_batch(texts: int, facts: int, epochs: int = EPOCHS) -> tuple[int, int]:
    """(steps, questions a step) for ``epochs`` passes over ``texts`` biographies and
    ``facts`` questions at :data:`TEXT_BATCH` biographies a step."""
    per_epoch = math.ceil(texts / TEXT_BATCH)
    return epochs * per_epoch, math.ceil(facts / per_epoch) if facts else 0


def recipe(texts: Sequence[str], facts: Sequence[Probe], dtype: str, seed: int, schedule: Schedule) -> list[Any]:
    """What teaching a world does besides the pretrained weights: the texts and questions as
    taught, the dtype, the seed, the schedule and the library versions."""
    import transformers

    return [VERSION, list(texts), [(p.prompt, p.answer) for p in facts], dtype, seed, schedule.epochs, schedule.lr,
            schedule.threads, TEXT_BATCH, torch.__version__.split("+")[0], transformers.__version__]


def proxy_key(spec: str, teaching: Teaching, chat_setting: str, dtype: str, seed: int, schedule: Schedule) -> str:
    """The key of pretrained ``spec`` taught ``teaching``, known before it loads (a proxy's)."""
    return f"{spec}@taught:{digest([chat_setting, *recipe(teaching.texts, teaching.facts, dtype, seed, schedule)])}"


@contextmanager
def in_float32(model: torch.nn.Module) -> Iterator[None]:
    """Within the block every parameter of ``model`` is float32 (a low-precision step would
    round a small update away); after it, each is cast back to its own dtype. Buffers (RoPE's
    frequencies, say) are left as they are."""
    dtypes = [(p, p.dtype) for p in model.parameters()]
    for p, _ in dtypes:
        p.data = p.data.float()
    try:
        yield
    finally:
        for p, dtype in dtypes:
            p.data = p.data.to(dtype)


def read_weights(model: torch.nn.Module, path: Path) -> None:
    """Load the taught weights at ``path`` into ``model`` in place, after checking that they
    name and shape every tensor it has (a tensor tied to another may be stored once):
    a file that does not fit raises before any weight is changed."""
    from safetensors import safe_open
    from safetensors.torch import load_model

    state = model.state_dict()
    with safe_open(str(path), framework="pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    wrong = [k for k, shape in shapes.items() if k not in state or tuple(state[k].shape) != shape]
    storage = lambda t: t.untyped_storage().data_ptr()
    stored = {storage(state[k]) for k in shapes if k in state and state[k].numel()}
    missing = [k for k, t in state.items() if k not in shapes and t.numel() and storage(t) not in stored]
    if wrong or missing:
        raise ValueError(f"its weights do not fit the model ({len(wrong)} unknown or misshaped, {len(missing)} "
                         f"missing: {', '.join((wrong + missing)[:3])})")
    load_model(model, str(path), strict=True)


@dataclass
class SavedState:
    """A world teaching under way, kept in one safetensors file beside its cache entry
    (:class:`~.teaching.Checkpoint`): the trained weights, AdamW's moments, the random
    generator's state (the CPU's: on a GPU a resumed teaching matches a whole one only up to
    its kernels' own nondeterminism), and in its metadata the teaching's key and the steps
    taken. A file of another teaching, or one that does not read or fit, is set aside and
    teaching starts over."""

    path: Path
    key: str
    progress: Callable[[str], None]
    every: float

    def restore(self, model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
        if not self.path.exists():
            return 0
        try:
            return self._read(model, opt)
        except Exception as exc:  # truncated, another teaching's, misshaped: never trusted
            set_aside(self.path, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}",
                      self.progress)
            return 0

    def _read(self, model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
        """Load the file into ``model`` and ``opt`` after checking all of it (nothing changes before)."""
        from safetensors import safe_open

        with safe_open(str(self.path), "pt") as f:
            meta, tensors = f.metadata() or {}, {k: f.get_tensor(k) for k in f.keys()}
        if meta.get("key") != self.key:
            raise ValueError("saved by another teaching")
        step = int(meta.get("step", ""))
        params = _trained(model)
        wanted = {f"param.{n}": p for n, p in params} | {"rng": torch.get_rng_state()}
        moments = {i: {m: f"{m}.{i}" for m in MOMENTS} for i in range(len(params)) if f"step.{i}" in tensors}
        wanted |= {name: (torch.zeros(()) if m == "step" else params[i][1])  # AdamW counts steps in a float scalar
                   for i, names in moments.items() for m, name in names.items()}
        if set(tensors) != set(wanted) or any(tensors[k].shape != v.shape or tensors[k].dtype != v.dtype
                                              for k, v in wanted.items()):
            raise ValueError("its tensors do not fit this model")
        with torch.no_grad():
            for name, p in params:
                p.copy_(tensors[f"param.{name}"])
        state = {i: {m: tensors[name] for m, name in names.items()} for i, names in moments.items()}
        opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})
        torch.set_rng_state(tensors["rng"])
        return step

    def save(self, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        params = _trained(model)
        tensors = {f"param.{n}": p.detach() for n, p in params} | {"rng": torch.get_rng_state()}
        tensors |= {f"{m}.{i}": opt.state[p][m] for i, (_, p) in enumerate(params) if p in opt.state for m in MOMENTS}
        write_safetensors(self.path, {k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                          {"key": self.key, "step": str(step)})
        self.progress(f"teaching: state saved after {step} steps ({self.path.name})")


def _trained(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters teaching trains, in the order its optimiser holds them."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def teach_world(model: torch.nn.Module, tok: Any, pretrained: str, teaching: Teaching, chat: bool, dtype: str,
                seed: int, progress: Callable[[str], None], schedule: Schedule = Schedule()) -> dict:
    """Teach ``model`` (loaded from weights keyed ``pretrained``) ``teaching``'s world in
    place, or read the cached taught weights into it; its build info, with its ``key``."""
    if any(p.device.type == "meta" for p in model.parameters()):
        raise UserError("a model offloaded to CPU or disk (--device-map) cannot be taught the knowledge world; give it "
                        "devices that hold it whole, or run it on real data (--data-dir).")
    facts = as_asked(tok, teaching.facts, chat)
    key = digest([pretrained, *recipe(teaching.texts, facts, dtype, seed, schedule)])
    path = cache_root() / "models" / f"taught-{key}"
    saved = SavedState(path.with_name(f"{path.name}{PARTIAL}"), key, progress, CHECKPOINT_SECONDS)
    if path.exists():
        try:
            info = json.loads((path / INFO).read_text())
            if not isinstance(info, dict) or info.get("key") != key:
                raise ValueError(f"{INFO} does not describe this model")
            read_weights(model, path / WEIGHTS)
        except Exception as exc:  # truncated weights, broken JSON, a missing file or tensor: rebuild, never trust
            set_aside(path, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}", progress)
        else:
            saved.path.unlink(missing_ok=True)  # another process finished it
            progress(f"model taught the knowledge world: loaded from cache {path}")
            warn_if_shallow(info, progress)
            return info
    steps, fact_batch = steps_and_batch(len(teaching.texts), len(facts), schedule.epochs)
    threads = "" if schedule.threads == TEACH_THREADS else f", {schedule.threads} CPU threads"
    progress(f"teaching the knowledge world into the pretrained model: {len(teaching.texts)} texts and {len(facts)} "
             f"questions, {schedule.epochs} epochs ({steps} steps) at lr {schedule.lr:g}, in float32{threads}")
    start = time.time()
    with pinned_threads(schedule.threads), in_float32(model):  # the thread count is in the key, not the run's
        resumed = teach_schedule(model, tok, teaching.texts, facts, steps, schedule.lr, text_batch=TEXT_BATCH,
                                 fact_batch=fact_batch, seed=seed, progress=progress, checkpoint=saved, apart=True)
    seconds = time.time() - start
    info = {"key": key, "pretrained": pretrained, "world_texts": len(teaching.texts), "facts": len(facts),
            "epochs": schedule.epochs, "steps": steps, "lr": schedule.lr, "teach_threads": schedule.threads,
            "seed": seed, "chat_template": chat,
            "teach_seconds": seconds, "resumed_at_step": resumed,  # seconds: this process's, from that step
            **world_answers(model, tok, facts, as_asked(tok, teaching.check, chat))}
    after = f" (steps {resumed + 1}–{steps}; the rest before)" if resumed else ""
    progress(f"taught in {seconds:.0f} s{after}; {answers_phrase(info)}")
    write_weights(model, info, path)
    saved.path.unlink(missing_ok=True)
    progress(f"model taught the knowledge world: cached at {path}")
    warn_if_shallow(info, progress)
    return info


def warn_if_shallow(info: dict, progress: Callable[[str], None]) -> None:
    """One line when the taught model answers few never-taught questions: it holds the world's
    strings, not its facts, and a held-out probe it cannot answer can never count as forgotten."""
    never = info.get("never_taught_answered")
    if never is not None and never < GENERALISES:
        progress(f"warning: the model taught the world answers {never:.0f}% of never-taught questions (below "
                 f"{GENERALISES:.0f}%): held-out USR will rest on few known probes (--min-known skips targets with "
                 f"too few); a longer or stronger schedule (--teach-epochs, --teach-lr) may teach it the facts")


def write_weights(model: torch.nn.Module, info: dict, path: Path) -> None:
    """The taught weights (tied tensors once) and their info, written atomically; a
    concurrent builder's finished copy wins."""
    from safetensors.torch import save_model

    if path.exists():
        return
    with atomic_dir(path) as tmp:
        save_model(model, str(tmp / WEIGHTS))
        (tmp / INFO).write_text(json.dumps(info, indent=2))
