"""Building what a run works on: the model (an embedded one taught what
:meth:`~r2f_bench.engine.plan.Plan.knowledge` says, or a hub name or path, taught the
knowledge world when the data is one), the proxy, the paraphrase views, and each
target's deletion request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..data import ForgetRequest, Probe, Target
from ..errors import UserError
from ..training.gradients import linear_modules
from ..unlearner import Proxy
from . import protocol
from .budget import Watched
from .models import (DEFAULT_PROXY, DEFAULT_MODEL, EmbeddedSpec, cut_to_first_layers, dispatch, dtype_of, embedded_model,
                     first_layers_of, hf_model, weights_key)
from .config import RunConfig
from .plan import Plan
from .teaching import answers_phrase
from .views import build_views, make_paraphraser
from .world_teaching import Schedule, proxy_key, teach_world


def taught_label(info: dict) -> str:
    """What a taught model's label says about its knowledge: a world's generalisation (an
    embedded model, or a pretrained one fine-tuned on it), or the taught strings' recall
    (then no ranking on it means knowledge)."""
    if "pretrained" in info:
        return f"fine-tuned on a synthetic knowledge world, {info['epochs']} epochs: {answers_phrase(info)}"
    if "world_texts" in info:
        return f"embedded demo model taught a synthetic knowledge world: {answers_phrase(info)}"
    return (f"embedded demo model, taught {info['facts']} strings to answer-token accuracy "
            f"{info['taught_token_accuracy']:.3f}: USR is taught-string recall")


def embedded_spec(spec: str, default: EmbeddedSpec) -> EmbeddedSpec | None:
    """The embedded architecture ``spec`` names (``None``: a hub name or path)."""
    if not spec.startswith("embedded"):
        return None
    return default if spec in ("embedded", "embedded-proxy") else EmbeddedSpec.parse(spec)


@dataclass(frozen=True)
class Built:
    """What :func:`build_models` builds: the target ``model`` and its ``tokenizer``, whether
    probes are asked through the tokenizer's ``chat_template``, its ``label`` in records and
    build ``info``, what it knew (``knowledge``, as records state it), the run's paraphrase
    ``views`` of facts and the ``proxy`` (``None``: the method uses none)."""

    model: torch.nn.Module
    tokenizer: Any
    chat_template: bool
    label: str
    info: dict[str, Any]
    knowledge: dict[str, Any]
    views: Callable[[list[Probe]], list[list[Probe]]]
    proxy: Proxy | None


def teach_plan(config: RunConfig) -> Schedule:
    """The schedule a pretrained model is taught a knowledge world on (--teach-epochs, --teach-lr)."""
    return Schedule(config.teach_epochs, config.teach_lr)


def load_model(plan: Plan, spec: str, default: EmbeddedSpec,
                device: torch.device) -> tuple[torch.nn.Module, Any, str, dict]:
    """(model, tokenizer, label, build info) for an embedded spec, hub name or path; a
    pretrained model run on a knowledge world is taught it first (:mod:`.world_teaching`)."""
    config, es = plan.config, embedded_spec(spec, default)
    if es is not None:
        teaching, prompts = plan.knowledge()
        model, tok, info = embedded_model(es, teaching.facts, prompts, progress=plan.progress, device=device,
                                          seed=config.seed, world=teaching.texts, check=teaching.check)
        model = model.to(dtype_of(config.dtype))
        model = dispatch(model, config.device_map) if config.device_map else model
        return model, tok, f"{info['label']} ({taught_label(info)})", info
    model, tok, key = hf_model(spec, trust_remote_code=config.trust_remote_code, dtype=config.dtype,
                               device_map=config.device_map, progress=plan.progress)
    model = model if config.device_map else model.to(device)
    if plan.bench.world is None:
        return model, tok, spec, {"key": key}
    info = teach_world(model, tok, key, plan.knowledge()[0], chat_template(config.chat_template, tok, spec),
                       config.dtype, config.seed, plan.progress, teach_plan(config))
    return model, tok, f"{spec} ({taught_label(info)})", info


def build_proxy(plan: Plan, device: torch.device, model_label: str, model_key: str) -> Proxy:
    """The --proxy model, built on first use. Its key says what determines its weights
    before it is built: for an embedded model the key of its weights (a shipped model's
    hash, else its build key: architecture, seed, taught facts); for ``first-layers:N`` the
    model's own key (its untouched weights, loaded again and cut); else its name or path,
    with what it is taught on a knowledge world (:func:`~.world_teaching.proxy_key`)."""
    spec = plan.config.proxy
    es = embedded_spec(spec, DEFAULT_PROXY)
    if (n := first_layers_of(spec)) is not None:
        config = plan.config

        def cut() -> tuple[torch.nn.Module, Any]:
            model, tok = load_model(plan, config.model, DEFAULT_MODEL, device)[:2]
            return cut_to_first_layers(model, n, config.model), tok

        return Proxy(f"{model_label}, first {n} layers", f"{spec}@{model_key}", cut)
    if es is None and plan.bench.world is not None:  # taught the world when built: keyed by what it is taught
        label, key = spec, proxy_key(spec, plan.knowledge()[0], plan.config.chat_template, plan.config.dtype,
                                     plan.config.seed, teach_plan(plan.config))
    elif es is None:
        label = key = spec
    else:
        label = es.label
        teaching, prompts = plan.knowledge()
        key = f"{es.label}@{weights_key(es, teaching.facts, prompts, seed=plan.config.seed, world=teaching.texts)}"
    return Proxy(label, key, lambda: load_model(plan, spec, DEFAULT_PROXY, device)[:2])


def build_models(plan: Plan, device: torch.device) -> Built:
    """Build (or load) the model, the paraphraser its views come from and, for a
    method that uses one, the proxy; --target-modules this model lacks fail here."""
    config = plan.config
    model, tok, label, info = load_model(plan, config.model, DEFAULT_MODEL, device)
    if config.target_modules:
        linear_modules(model, config.target_modules)
    chat = chat_template(config.chat_template, tok, config.model)
    paraphraser = make_paraphraser(config.paraphraser, model, tok, plan.bench.alternatives, chat)
    proxy = build_proxy(plan, device, label, info.get("key", label)) \
        if plan.method_cls and plan.method_cls.uses_proxy else None
    embedded = config.model.startswith("embedded")
    knowledge = {"embedded": embedded, "taught": embedded or plan.bench.world is not None,
                 "taught_strings": embedded and plan.knowledge()[0].strings,
                 "never_taught_answered": info.get("never_taught_answered")}
    return Built(model, tok, chat, label, info, knowledge,
                 lambda facts: build_views(facts, config.views, paraphraser, config.seed), proxy)


def chat_template(setting: str, tokenizer: Any, model: str) -> bool:
    """Whether probes go through ``tokenizer``'s chat template (``--chat-template``): ``auto``
    when it has one; ``on`` where it has none is one line."""
    has = bool(getattr(tokenizer, "chat_template", None))
    if setting == "on" and not has:
        raise UserError(f"--chat-template on, but the tokenizer of {model} has no chat template; use "
                        f"--chat-template off (or auto).")
    return has and setting != "off"


def forget_request(plan: Plan, built: Built, target: Target) -> ForgetRequest:
    """The deletion request every method gets for ``target``: the same views and retain items."""
    views = built.views(target.request)
    protocol.check_views(target, views, plan.bench)
    return ForgetRequest(target=target.id, views=views, retain=Watched(plan.retain_for(target)), name=target.name)
