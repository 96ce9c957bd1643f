"""The embedded models taught what a run needs (:mod:`.embedded`): a knowledge world's
texts and questions, or the data's strings until it answers them, on one thread, cached on
disk keyed by everything that determines them (a shipped demo model is read instead:
:mod:`.demo_models`). Real models: :mod:`.pretrained`.
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from ..atomic import atomic_dir, set_aside
from ..cache import cache_root
from ..data import Probe
from ..errors import described
from ..training.encoding import MAX_LENGTH
from . import demo_models
from .checkpoint import write_pretrained
from .embedded import VOCAB_SIZE, EmbeddedSpec, build_tokenizer, init_seed, new_embedded_model, teaching_texts
from .teaching import answer_accuracy, answers_phrase, finetune, teach_schedule, world_answers

CACHE_VERSION = "4"
# Teaching starts over from the same initialisation at the next rate when a rate does
# not reach the target accuracy (a wide model on a few dozen facts can stall at the
# first); a model that learns at the first rate is what version 2 built.
TEACHING_RATES = (3e-3, 1e-3, 3e-4)
# A knowledge world is taught on a fixed schedule (teaching.teach_schedule): steps and
# peak rate, the same for every world, model and seed (never chosen on scored items).
WORLD_STEPS = 3000
WORLD_LR = 3e-3


@contextmanager
def pinned_threads(n: int = 1) -> Iterator[None]:
    """Within the block torch runs on ``n`` intra-op threads (one by default). Teaching is seeded,
    but a sum split over two threads rounds differently from one, and 3,000 steps amplify it: the
    same seeds taught on 2 threads answered 91 % of never-taught questions, on 1, 75 %."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def embedded_model(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str],
                   progress: Callable[[str], None] = print, max_epochs: int = 120,
                   target_accuracy: float = 0.97, device: torch.device | str = "cpu",
                   seed: int = 0, world: Sequence[str] = (), check: Sequence[Probe] = (),
                   shipped: bool = True) -> tuple[torch.nn.Module, Any, dict]:
    """Build ``spec``, teach it, and cache the result.

    Without ``world`` it is taught ``facts`` until it answers them (strings recalled).
    With ``world`` (texts such as biographies) it is taught the texts and ``facts`` on
    the fixed :data:`WORLD_STEPS` schedule, then asked ``check`` (never-taught
    questions) to report how far its knowledge generalises. ``extra_texts`` only shape
    the tokenizer. ``seed`` (the run's) sets the initialisation and the teaching order,
    so every run seed is a real replicate with its own model. Returns (model, tokenizer,
    info) where info records the model's key and what was measured. A model shipped for
    the same recipe (:mod:`.demo_models`; unless ``shipped`` is false) is loaded first,
    then a cached one with the same key; only then is it taught.
    """
    recipe = recipe_key(spec, facts, extra_texts, max_epochs, target_accuracy, seed, world)
    folder = demo_models.verified(recipe, progress) if shipped else None
    if folder is not None:
        model, tok, info = _load(folder)
        info["key"] = demo_models.weights_key(recipe)
        progress(f"embedded model {spec.label}: the shipped demo model {folder.name} (taught on "
                 f"{info.get('taught_on', {}).get('cpu', 'an unrecorded machine')}; every file's SHA-256 verified)")
        return model.to(device).eval(), tok, info
    key = embedded_key(spec, facts, extra_texts, max_epochs, target_accuracy, seed, world)
    path = cache_path(spec, key)
    if path.exists():
        try:
            model, tok, info = _load(path)
            if info.get("key") != key:
                raise ValueError("r2f_info.json does not describe this model")
        except Exception as exc:  # truncated weights, broken JSON, a missing file or tensor: rebuild, never trust
            set_aside(path, described(exc, 160), progress)
        else:
            progress(f"embedded model {spec.label}: loaded from cache {path}")
            return model.to(device).eval(), tok, info

    texts = teaching_texts(facts, extra_texts) + list(world)
    tok = build_tokenizer(texts)
    with pinned_threads():  # the cached model must not depend on how many threads its first run had
        if world:
            model, info = _teach_world(spec, tok, world, facts, check, progress, device, seed)
        else:
            model, info = _teach_strings(spec, tok, facts, progress, device, seed, max_epochs, target_accuracy)
    info |= {"key": key, "recipe": recipe, "taught_on": demo_models.machine()}
    _save(model.eval(), tok, info, path)
    progress(f"embedded model {spec.label}: cached at {path}")
    return model, tok, info


def cache_path(spec: EmbeddedSpec, key: str) -> Path:
    """The cache entry of the embedded model of ``spec`` with build key ``key``."""
    return cache_root() / "models" / f"{spec.label.replace(':', '-')}-{key}"


def _load(folder: Path) -> tuple[torch.nn.Module, Any, dict]:
    """A saved embedded model, its tokenizer and its ``r2f_info.json``."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    info = json.loads((folder / "r2f_info.json").read_text())
    if not isinstance(info, dict):
        raise ValueError("r2f_info.json holds no object")
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    tok.padding_side = "left"
    model, loading = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, output_loading_info=True)
    missing = sorted(loading["missing_keys"]) + sorted(str(k) for k in loading["mismatched_keys"])
    if missing:  # transformers would initialise them at random: a different model under the same key
        raise ValueError(f"its weights lack or misshape {len(missing)} tensors ({', '.join(missing[:3])}, ...)")
    return model, tok, info


def _teach_strings(spec: EmbeddedSpec, tok: Any, facts: Sequence[Probe], progress: Callable[[str], None],
                   device: torch.device | str, seed: int, max_epochs: int,
                   target_accuracy: float) -> tuple[torch.nn.Module, dict]:
    """Teach ``facts`` until the model answers them, from the same initialisation at each
    of :data:`TEACHING_RATES` until one reaches ``target_accuracy``; the best try is kept."""
    best: tuple[float, torch.nn.Module, dict] | None = None
    for lr in TEACHING_RATES:
        model = new_embedded_model(spec, tok, seed).to(device)
        n = sum(p.numel() for p in model.parameters())
        progress(f"embedded model {spec.label}: {n / 1e6:.2f}M parameters, teaching its strings at lr {lr:g}")
        epochs = finetune(model, tok, list(facts), epochs=max_epochs, lr=lr, batch_size=32,
                          stop_accuracy=target_accuracy, progress=progress, seed=init_seed(spec, seed))
        acc = answer_accuracy(model, tok, list(facts))
        progress(f"embedded model {spec.label}: answer-token accuracy {acc:.3f} after {epochs} epochs at lr {lr:g}")
        info = {"label": spec.label, "spec": spec.cache_fields(), "seed": seed, "facts": len(facts), "epochs": epochs,
                "lr": lr, "taught_token_accuracy": acc, "parameters": n}
        if best is None or acc > best[0]:
            best = (acc, model, info)
        if acc >= target_accuracy:
            break
    acc, model, info = best
    if acc < target_accuracy:
        progress(f"warning: embedded model {spec.label} learned its facts only to answer-token accuracy {acc:.3f} "
                 f"(best of {len(TEACHING_RATES)} rates, kept: lr {info['lr']:g}); results count only the probes it "
                 f"answers before unlearning (known_forget_probes)")
    return model, info


def _teach_world(spec: EmbeddedSpec, tok: Any, world: Sequence[str], facts: Sequence[Probe],
                 check: Sequence[Probe], progress: Callable[[str], None], device: torch.device | str,
                 seed: int) -> tuple[torch.nn.Module, dict]:
    """Teach a knowledge world on the fixed schedule and measure what the model answers."""
    model = new_embedded_model(spec, tok, seed).to(device)
    n = sum(p.numel() for p in model.parameters())
    progress(f"embedded model {spec.label}: {n / 1e6:.2f}M parameters, teaching a knowledge world "
             f"({len(world)} texts, {len(facts)} questions, {WORLD_STEPS} steps)")
    start = time.time()
    teach_schedule(model, tok, world, facts, WORLD_STEPS, WORLD_LR, seed=init_seed(spec, seed), progress=progress)
    seconds = time.time() - start
    info = {"label": spec.label, "spec": spec.cache_fields(), "seed": seed, "world_texts": len(world), "facts": len(facts),
            "steps": WORLD_STEPS, "lr": WORLD_LR, "parameters": n, "teach_seconds": seconds,
            **world_answers(model, tok, facts, check)}
    progress(f"embedded model {spec.label}: taught in {seconds:.0f} s; {answers_phrase(info)}")
    return model.eval(), info


def _recipe(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str], max_epochs: int,
            target_accuracy: float, seed: int, world: Sequence[str]) -> list[Any]:
    texts = teaching_texts(facts, extra_texts)
    schedule = [WORLD_STEPS, WORLD_LR, list(world)] if world else [max_epochs, target_accuracy, TEACHING_RATES]
    return [CACHE_VERSION, spec.cache_fields(), seed, list(texts), *schedule, VOCAB_SIZE, MAX_LENGTH]


def digest(parts: list[Any]) -> str:
    """A short hash of JSON ``parts``: what cache entries are keyed by."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def recipe_key(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str],
               max_epochs: int = 120, target_accuracy: float = 0.97, seed: int = 0,
               world: Sequence[str] = ()) -> str:
    """A hash of what an embedded model is taught and how (architecture, seed, texts,
    schedule): what a shipped model is found by, whatever machine or library taught it."""
    return digest(_recipe(spec, facts, extra_texts, max_epochs, target_accuracy, seed, world))


def embedded_key(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str],
                 max_epochs: int = 120, target_accuracy: float = 0.97, seed: int = 0,
                 world: Sequence[str] = ()) -> str:
    """The cache key of the model :func:`embedded_model` teaches from the same arguments:
    its recipe and the torch and transformers versions (computed without building it)."""
    import transformers

    return digest(_recipe(spec, facts, extra_texts, max_epochs, target_accuracy, seed, world)
                   + [torch.__version__.split("+")[0], transformers.__version__])


def weights_key(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str], seed: int = 0,
                world: Sequence[str] = ()) -> str:
    """The key of the weights :func:`embedded_model` returns for these arguments (what
    evaluations and decoders are cached by): a shipped model's, else the build key."""
    recipe = recipe_key(spec, facts, extra_texts, seed=seed, world=world)
    return demo_models.weights_key(recipe) or embedded_key(spec, facts, extra_texts, seed=seed, world=world)


def _save(model: torch.nn.Module, tok: Any, info: dict, path: Path) -> None:
    """Write the model directory atomically; a concurrent builder's finished copy wins."""
    if path.exists():
        return
    with atomic_dir(path) as tmp:
        write_pretrained(model, tok, tmp)
        (tmp / "r2f_info.json").write_text(json.dumps(info, indent=2))


