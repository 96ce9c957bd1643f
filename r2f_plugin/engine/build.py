"""Building what a run works on: the model (an embedded one taught what
:meth:`~r2f_bench.engine.plan.Plan.knowledge` says, or a hub name or path, taught the
knowledge world when the data is one), the proxy, the paraphrase views, and each
target's deletion request. Each step takes the values it reads (:class:`BuildInputs`,
:class:`~.scope.Scope`), never the run's plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..data import ForgetRequest, Probe, Target, Teaching
from ..errors import UserError
from ..training.gradients import linear_modules
from ..unlearner import Proxy
from . import protocol
from .budget import Watched
from .config import RunConfig
from .embedded import DEFAULT_MODEL, DEFAULT_PROXY, EmbeddedSpec
from .identity import content_id
from .models import embedded_model, weights_key
from .pretrained import cut_to_first_layers, dispatch, dtype_of, first_layers_of, hf_model
from .scope import Scope
from .teaching import answers_phrase
from .views import build_views, make_paraphraser
from .world_teaching import Schedule, proxy_key, teach_world

if TYPE_CHECKING:
    from .plan import Plan


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


@dataclass(frozen=True)
class BuildInputs:
    """What building the run's models reads: the run's ``config``; ``knowledge``, what a model
    is taught and the prompts an embedded tokenizer sees (computed on first call: only an
    embedded model or a knowledge world needs it); whether the data is a knowledge ``world``;
    its paraphrase ``alternatives``; whether the method ``uses_proxy``."""

    config: RunConfig
    knowledge: Callable[[], tuple[Teaching, list[str]]]
    world: bool
    alternatives: Any
    uses_proxy: bool
    progress: Callable[[str], None]

    @classmethod
    def of(cls, plan: "Plan") -> "BuildInputs":
        return cls(plan.config, plan.knowledge, plan.bench.world is not None, plan.bench.alternatives,
                   bool(plan.method_cls and plan.method_cls.uses_proxy), plan.progress)


def schedule_of(config: RunConfig) -> Schedule:
    """The schedule a pretrained model is taught a knowledge world on (--teach-epochs, --teach-lr, --teach-threads)."""
    return Schedule(config.teach_epochs, config.teach_lr, config.teach_threads)


def load_model(inputs: BuildInputs, spec: str, default: EmbeddedSpec,
               device: torch.device) -> tuple[torch.nn.Module, Any, str, dict]:
    """(model, tokenizer, label, build info) for an embedded spec, hub name or path; a
    pretrained model run on a knowledge world is taught it first (:mod:`.world_teaching`)."""
    config, es = inputs.config, embedded_spec(spec, default)
    if es is not None:
        teaching, prompts = inputs.knowledge()
        model, tok, info = embedded_model(es, teaching.facts, prompts, progress=inputs.progress, device=device,
                                          seed=config.seed, world=teaching.texts, check=teaching.check)
        model = model.to(dtype_of(config.dtype))
        model = dispatch(model, config.device_map) if config.device_map else model
        return model, tok, f"{info['label']} ({taught_label(info)})", info
    model, tok, key = hf_model(spec, trust_remote_code=config.trust_remote_code, dtype=config.dtype,
                               device_map=config.device_map, progress=inputs.progress)
    model = model if config.device_map else model.to(device)
    if not inputs.world:
        return model, tok, spec, {"key": key}
    info = teach_world(model, tok, key, inputs.knowledge()[0], chat_template(config.chat_template, tok, spec),
                       config.dtype, config.seed, inputs.progress, schedule_of(config))
    return model, tok, f"{spec} ({taught_label(info)})", info


def build_proxy(inputs: BuildInputs, device: torch.device, model_label: str, model_key: str) -> Proxy:
    """The --proxy model, built on first use. Its key says what determines its weights
    before it is built: for an embedded model the key of its weights (a shipped model's
    hash, else its build key: architecture, seed, taught facts); for ``first-layers:N`` the
    model's own key (its untouched weights, loaded again and cut); else its hub name or a
    local file's or folder's content (:func:`~.identity.content_id`: a file replaced at the
    same path is another proxy), with what it is taught on a knowledge world
    (:func:`~.world_teaching.proxy_key`)."""
    config = inputs.config
    spec = config.proxy
    es = embedded_spec(spec, DEFAULT_PROXY)
    if (n := first_layers_of(spec)) is not None:

        def cut() -> tuple[torch.nn.Module, Any]:
            model, tok = load_model(inputs, config.model, DEFAULT_MODEL, device)[:2]
            return cut_to_first_layers(model, n, config.model), tok

        return Proxy(f"{model_label}, first {n} layers", f"{spec}@{model_key}", cut)
    if es is None and inputs.world:  # taught the world when built: keyed by what it is taught
        label, key = spec, proxy_key(content_id(spec), inputs.knowledge()[0], config.chat_template, config.dtype,
                                     config.seed, schedule_of(config))
    elif es is None:
        label, key = spec, content_id(spec)
    else:
        label = es.label
        teaching, prompts = inputs.knowledge()
        key = f"{es.label}@{weights_key(es, teaching.facts, prompts, seed=config.seed, world=teaching.texts)}"
    return Proxy(label, key, lambda: load_model(inputs, spec, DEFAULT_PROXY, device)[:2])


def build_models(inputs: BuildInputs, device: torch.device) -> Built:
    """Build (or load) the model, the paraphraser its views come from and, for a
    method that uses one, the proxy; --target-modules this model lacks fail here."""
    config = inputs.config
    model, tok, label, info = load_model(inputs, config.model, DEFAULT_MODEL, device)
    if config.target_modules:
        linear_modules(model, config.target_modules)
    chat = chat_template(config.chat_template, tok, config.model)
    paraphraser = make_paraphraser(config.paraphraser, model, tok, inputs.alternatives, chat)
    proxy = build_proxy(inputs, device, label, info.get("key", label)) if inputs.uses_proxy else None
    embedded = config.model.startswith("embedded")
    knowledge = {"embedded": embedded, "taught": embedded or inputs.world,
                 "taught_strings": embedded and inputs.knowledge()[0].strings,
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


def forget_request(scope: Scope, built: Built, target: Target, scored: Target | None = None) -> ForgetRequest:
    """The deletion request every method gets for ``target``: the same views and retain items.
    ``scored``: the target scored after it, where another (``--control other_request``), whose
    evaluated strings the views must not reproduce either."""
    views = built.views(target.request)
    protocol.check_views(target, views, scope.bench)
    if scored is not None:
        protocol.check_views(scored, views, scope.bench, request_of=target)
    return ForgetRequest(target=target.id, views=views, retain=Watched(scope.retain_for(target)), name=target.name)
