"""A run's configuration: everything a run is given. Most fields determine its results and
so its store key; those that only say where or how fast things run (``output``, ``threads``
and the rest of :data:`r2f_bench.results.store.WHERE_FIELDS`) and fields added later, at
their old behaviour (:data:`~r2f_bench.results.store.LATER_DEFAULTS`), are left out of it.

Each field that is also a command-line option declares that option once, in its
metadata (:func:`option`): help, and where they apply its flag, choices, range and how
its text parses. :data:`OPTIONS` completes each from its field (name, type, default);
the commands' parsers (:mod:`r2f_bench.cli.options`) and :func:`check_bounds` are
made from it.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any, Callable, Literal

from ..attack import canonical_attacks
from ..errors import UserError
from ..unlearner import INPUTS, Unlearner, parse_assignments

SPLITS = ("eval", "dev")
DTYPES = ("float32", "bfloat16", "float16")
CHAT_TEMPLATES = ("auto", "on", "off")  # --chat-template
CONTROLS = ("none", "other_request", "random_step")  # --control: r2f_bench.engine.controls
# a pretrained model taught a knowledge world (engine/world_teaching): TOFU fine-tunes 5 epochs; a small
# peak rate for a model that already speaks the language (TOFU: 1e-5 to 2e-5 at 1.3B-7B parameters)
TEACH_EPOCHS, TEACH_LR, TEACH_THREADS = 5, 5e-5, 1
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # Accelerate's placement strategies
FAMILIES = ("mistral", "llama", "gpt2")  # embedded model families (transformers model types)
MAX_VIEWS = 64  # views per fact: the paper uses 5, the views ablation 1-8
MAX_SEED = 2**32 - 1  # every generator seeded from --seed (torch, numpy, random) accepts it

# How ``r2f-bench sweep`` takes an option: "one" value for every job (unset: the run's
# default), "each" of several comma-separated values in jobs of their own, or "kept": the
# run's default when unset, because the sweep reads the value itself.
SweepForm = Literal["one", "each", "kept"]


def names(text: str | None) -> list[str] | None:
    """A comma-separated option as a list (``None`` when unset or empty)."""
    return [n.strip() for n in text.split(",") if n.strip()] or None if text else None


@dataclass(frozen=True)
class Option:
    """The command-line option of a :class:`RunConfig` field. The declared part: ``help``
    (``%(default)s`` names the default), ``flag`` (default ``--<field-name>``), ``metavar``,
    ``choices``, the range of a count (``least``, ``most``; see :func:`check_bounds`),
    ``parse`` (the given text, a list of texts when ``repeatable``, to the field's value),
    ``evaluation_only`` (only for commands that evaluate) and ``sweep`` (its
    :data:`SweepForm`; ``None``: not a sweep option). ``name``, ``kind`` (int, float, str
    or bool) and ``default`` come from the field."""

    help: str
    flag: str = ""
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    least: float | None = None
    most: float | None = None
    parse: Callable[[Any], Any] | None = None
    repeatable: bool = False
    evaluation_only: bool = False
    sweep: SweepForm | None = "one"
    name: str = ""
    kind: type = str
    default: Any = None


def option(help: str, **declared: Any) -> dict[str, Option]:
    """A field's metadata declaring its command-line option (see :class:`Option`)."""
    return {"option": Option(help, **declared)}


@dataclass
class RunConfig:
    """Everything a run is given (what enters its store key: the module docstring)."""

    method: str
    task: str
    seed: int = field(default=0, metadata=option(
        "replicate: sets the embedded models' initialisation and teaching, LoRA init, views and retain sample",
        least=0, most=MAX_SEED, sweep=None))
    model: str = field(default="embedded", metadata=option(
        "the model to edit: hub name, local path, or embedded[:family-hH-lL] (default: the embedded demo model)", sweep="each"))
    proxy: str = field(default="embedded-proxy", metadata=option(
        "proxy model, for methods that use one (R2F's decoder): hub name, local path, embedded:family-hH-lL, or "
        "first-layers:N (the --model's own first N decoder layers, cut from its untouched weights)",
        sweep="each"))
    data_dir: str | None = field(default=None, metadata=option(
        "benchmark data in its official layout: a local folder, or hf:<owner>/<dataset> to download it "
        "(default: for RWKU the synthetic knowledge world, for the others their bundled sample)"))
    targets: list[str] | None = field(default=None, metadata=option("comma-separated target ids or names", parse=names))
    limit: int | None = field(default=None, metadata=option("number of evaluation targets (default 3)", least=1))
    params: dict[str, str] = field(default_factory=dict, metadata=option(
        "override a method hyper-parameter (repeatable); see `r2f-bench methods`", flag="--set", metavar="NAME=VALUE",
        parse=parse_assignments, repeatable=True))
    views: int = field(default=5, metadata=option(
        "views per fact: the fact as asked plus paraphrases (default %(default)s, as in the paper)",
        least=1, most=MAX_VIEWS))
    paraphraser: str = field(default="benchmark", metadata=option(
        "benchmark (its own alternative probes, then templates; default), templates, self, or hf:<seq2seq model>"))
    dev_targets: int = field(default=2, metadata=option(
        "targets held out for fitting and tuning, never evaluated (default %(default)s)", least=0))
    forget_source: str | None = field(default=None, metadata=option(  # None: the task's default
        "what the deletion request holds, where the task offers a choice (RWKU: corpus, the target's forget corpus, "
        "default; probes, its FB cloze facts); see docs/tasks.md"))
    retain_items: int = field(default=64, metadata=option(  # the same number in both splits
        "retain items each request carries, sampled with --seed (default %(default)s)", least=0))
    min_known: int = field(default=0, metadata=option(  # decides which targets get records, not what they hold
        "skip a target whose untouched model knows fewer of its held-out forget probes, with a line saying so "
        "(default %(default)s: run every target; `r2f-bench scan` counts them per target)", least=0))
    attacks: str = field(default="rap", metadata=option(
        "attacks after each deletion, comma-separated, each also run on the untouched model as its control "
        "(`r2f-bench attacks` lists them): rap, relearn_unrelated:K, quantize:nf4 or :int8, fewshot:K, leak_at_k:K "
        "(default %(default)s; none: no attack)", metavar="A[:V],...", parse=canonical_attacks))
    rap_steps: int = field(default=5, metadata=option(
        "steps of the relearning attacks (RAP, relearn_unrelated) after each deletion (default %(default)s); 0: "
        "none, their scores not measured (n/a), e.g. when the attack's optimiser state does not fit beside the model",
        least=0))
    rap_lr: float = field(default=1e-3, metadata=option("learning rate of the relearning attacks (default %(default)s)",
                                                        least=1e-8, most=1.0))
    output: str = field(default="r2f-output", metadata=option(
        "results directory: one record per target in jobs/, exported to results.jsonl (default: %(default)s/)",
        sweep="kept"))
    trust_remote_code: bool = field(default=False, metadata=option(
        "allow custom model code from the hub (off by default)"))
    split: str = field(default="eval", metadata=option(
        "targets to unlearn: the evaluation targets (default) or the dev targets (hyper-parameter search)",
        choices=SPLITS, evaluation_only=True, sweep=None))
    control: str = field(default="none", metadata=option(
        "a negative control in place of the deletion, scored as the deletion is: other_request (the method unlearns "
        "the next evaluation target's request, so what this target loses is collateral), random_step (the method's "
        "edit replaced by a random one of the same norm, tensor by tensor); none (default): the deletion",
        choices=CONTROLS, evaluation_only=True))
    sequential: bool = field(default=False, metadata=option(
        "apply the targets' deletions one after another to the same model (MUSE's sustainability)",
        evaluation_only=True, sweep=None))
    save_model: str | None = field(default=None, metadata=option(
        "write each unlearned model to DIR/<target>/ (safetensors), e.g. for lm_eval", metavar="DIR",
        evaluation_only=True, sweep=None))
    threads: int | None = field(default=None, metadata=option(  # None: see distributed.cpu_threads; in no key
        "CPU threads per process (default: OMP_NUM_THREADS, else the cores shared among the run's processes); pin it "
        "when you compare seconds", least=1))
    teach_epochs: int = field(default=TEACH_EPOCHS, metadata=option(  # part of a taught model's key
        "passes over the knowledge world when a pretrained model (--model NAME, DIR or FILE.gguf) is taught it "
        "(default %(default)s, TOFU's); the embedded models keep their own schedule", least=1))
    teach_lr: float = field(default=TEACH_LR, metadata=option(
        "peak learning rate of that teaching (default %(default)s)", least=1e-8, most=1.0))
    teach_threads: int = field(default=TEACH_THREADS, metadata=option(  # part of a taught model's key: threads round sums apart
        "CPU threads that teaching runs on (default %(default)s; another count is another taught model, since a sum "
        "split over threads rounds differently: on a multi-core CPU more is much faster, and later runs must pass "
        "the same count to read it back)", least=1))
    eval_batch_size: int = field(default=32, metadata=option(  # in no key, like threads
        "generation requests per lm-eval batch, at most (default %(default)s; a batch also holds no more padded "
        "prompt tokens than that many prompts of the median length); on a GPU 256 or more is much faster "
        "(left-padded batches can differ from one another only in the last bits of a tie)", least=1))
    dtype: str = field(default="float32", metadata=option(  # embedded models are taught in float32, then cast
        "weights of the model and proxy (default %(default)s)", choices=DTYPES))
    chat_template: str = field(default="auto", metadata=option(
        "ask the probes through the tokenizer's chat template, as an instruct model is asked: auto (when the "
        "tokenizer has one; an embedded model never does), on, or off (default %(default)s)",
        choices=CHAT_TEMPLATES))
    device_map: str | None = field(default=None, metadata=option(  # not part of any key
        "spread the model over the available GPUs, then CPU, with Accelerate (for models larger than one device)",
        choices=DEVICE_MAPS))
    target_modules: list[str] | None = field(default=None, metadata=option(  # None: the architecture's default
        "comma-separated linear layers the methods adapt or step, for architectures other than Llama/Mistral/GPT-2 "
        "(e.g. query_key_value,dense; default: the architecture's own, q_proj,...,down_proj)", metavar="NAMES",
        parse=names, sweep=None))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _options() -> dict[str, Option]:
    """Every declared option, completed with its field's name, flag, kind and default."""
    hints = typing.get_type_hints(RunConfig)
    options = {}
    for f in fields(RunConfig):
        if "option" not in f.metadata:
            continue
        hint = hints[f.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: X
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        declared: Option = f.metadata["option"]
        options[f.name] = replace(declared, name=f.name, flag=declared.flag or "--" + f.name.replace("_", "-"),
                                  kind=typing.get_origin(hint) or hint,
                                  default=f.default_factory() if f.default is MISSING else f.default)
    return options


OPTIONS = _options()  # RunConfig field -> its command-line option, in field order
# the RunConfig fields that set each input a method may read (:data:`r2f_bench.unlearner.INPUTS`)
INPUT_FIELDS = {"views": ("views", "paraphraser"), "retain": ("retain_items",), "target_modules": ("target_modules",)}
assert INPUT_FIELDS.keys() == INPUTS


def unread_fields(method: type[Unlearner], params: Any, attacks: str | None = None) -> tuple[str, ...]:
    """The RunConfig fields that set an input ``method`` does not read with ``params``
    (:meth:`~r2f_bench.unlearner.Unlearner.reads`) and the run does not read either: a value of
    theirs changes nothing its records hold. A relearning attack among ``attacks`` (default: the
    run's) relearns on the request's views past the first, so with one the views are read."""
    from ..attack import parse_attacks  # the attacks' registry, loaded when asked

    reads = set(method.reads(params))
    if any(a.relearns for _, a in parse_attacks(attacks or OPTIONS["attacks"].default)):
        reads.add("views")
    return tuple(f for name, names_ in INPUT_FIELDS.items() if name not in reads for f in names_)


def for_method(values: dict[str, Any], method: type[Unlearner], params: Any) -> dict[str, Any]:
    """``values`` (RunConfig fields) less those :func:`unread_fields` names: what a sweep, frontier
    or search of several methods gives this one, so the same work is run and stored once."""
    unread = unread_fields(method, params, values.get("attacks"))
    return {k: v for k, v in values.items() if k not in unread}


def check_bounds(config: RunConfig) -> None:
    """One line for a numeric option that is not finite or lies outside its range
    (:attr:`Option.least`, :attr:`Option.most`)."""
    for opt in OPTIONS.values():
        value = getattr(config, opt.name)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{opt.flag} must be a finite number, got {value}.")
        if opt.least is not None and value < opt.least:
            raise UserError(f"{opt.flag} must be at least {opt.least}, got {value}.")
        if opt.most is not None and value > opt.most:
            raise UserError(f"{opt.flag} must be at most {opt.most}, got {value}.")
