"""The contract every unlearning method implements.

A method is a subclass of :class:`Unlearner` registered through the
``register_unlearners`` hook. It covers three shapes of method:

* weight editing (R2F, FullGrad, LoRA, gradient ascent, SKU, DeepCUT): ``unlearn``
  edits the model it is given and returns it;
* methods that need a frozen copy (SCRUB): they copy what they need inside
  ``unlearn`` with :func:`copy.deepcopy`;
* inference-time methods (ECO): they leave every weight as it is and return a
  model whose forward pass is wrapped (hooks), evaluated by the same code path.

A run hands each deletion the run's one model at the weights it starts from
(the untouched ones, or the last result with ``--sequential``). A method may edit
it in place freely: afterwards the run puts back its weights, the hooks it added,
its ``requires_grad`` flags and its mode from a snapshot on disk
(:mod:`~r2f_bench.engine.snapshot`), so no second copy of the model is held. It must leave
the module tree as it found it (detach adapters: PEFT's ``unload()``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

from .data import ForgetRequest, Probe, Target
from .errors import UserError

if TYPE_CHECKING:  # annotations only: the contract imports without torch
    import torch


# what a method may read besides the request's facts and the model: the request's paraphrased
# views (also :attr:`Context.make_views`), its retain items and :attr:`Context.target_modules`
INPUTS = frozenset({"views", "retain", "target_modules"})


@dataclass
class NoParams:
    """A method without hyper-parameters."""


@dataclass
class Edit:
    """What a method returns: the model to evaluate and what it wants recorded.

    ``evaluation_info``, if set, is called once the evaluation has run, with the scored
    probe sets by name, and returns more to record (ECO: the share of each set its
    classifier flags). The edit is final by then: it is a report, not an input.
    """

    model: torch.nn.Module
    info: dict[str, Any] = field(default_factory=dict)
    evaluation_info: Callable[[dict[str, list[Probe]]], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Strength:
    """A method's strength knob: the one ``Params`` field that trades forgetting against
    utility, and the range to search it over on a log scale, from weak (``low``) to
    strong (``high``). ``r2f-bench frontier`` sweeps it; a method without one cannot be
    placed on a frontier."""

    param: str
    low: float
    high: float

    def points(self, n: int) -> list[float]:
        """``n`` log-spaced values from ``low`` to ``high`` (:func:`log_spaced`)."""
        if n < 2:
            raise UserError(f"a frontier needs at least 2 strengths, got {n}.")
        return log_spaced(self.low, self.high, n)


def log_spaced(low: float, high: float, n: int) -> list[float]:
    """``n`` (at least 2) log-spaced values from ``low`` to ``high``, both included, rounded to
    3 significant digits."""
    ratio = (high / low) ** (1 / (n - 1))
    return [float(f"{low * ratio ** i:.3g}") for i in range(n)]


def continued(values: Sequence[float], n: int) -> list[float]:
    """``n`` values past the last of ``values`` (at least 2, in order) at the ratio of its last
    two, rounded to 3 significant digits: a search pushed on past its range's end."""
    value, ratio = values[-1], values[-1] / values[-2]
    out = []
    for _ in range(n):
        value = float(f"{value * ratio:.3g}")
        out.append(value)
    return out


@dataclass
class Proxy:
    """A second, smaller model for methods that learn something once on a cheap stand-in
    of the target (``--proxy``; R2F fits its gradient decoder on it). A method that sets
    :attr:`Unlearner.uses_proxy` receives one in :attr:`Context.proxy`; it is built on
    the first :meth:`load` and taught the same facts as the model."""

    label: str  # names the proxy (shown in results)
    key: str  # what determines its weights: key anything derived from them by it
    build: Callable[[], tuple[torch.nn.Module, Any]]
    _loaded: tuple[torch.nn.Module, Any] | None = field(default=None, repr=False)

    def load(self) -> tuple[torch.nn.Module, Any]:
        """(model, tokenizer), built once."""
        if self._loaded is None:
            self._loaded = self.build()
        return self._loaded


@dataclass
class Context:
    """What the run gives a method besides the model and the request.

    It holds only what a method may see (:mod:`r2f_bench.engine.protocol`): the dev split
    (targets disjoint from the evaluation targets, with their requests and probes, for
    fitting and tuning, and the role each of their probe sets plays:
    :data:`r2f_bench.task.ROLES`) and the retain pool; never an evaluation probe, the
    utility set or the identity-alignment prompts.
    """

    tokenizer: Any
    dev_targets: list[Target]
    retain_pool: list[Probe]
    seed: int
    cache_dir: Path
    make_views: Callable[[list[Probe]], list[list[Probe]]]  # the run's paraphrase views of facts
    probe_roles: dict[str, str] = field(default_factory=dict)  # the dev targets' probe sets -> role
    proxy: Proxy | None = None  # only for methods with ``uses_proxy``
    target_modules: tuple[str, ...] | None = None  # --target-modules (None: the architecture's default, lora.target_modules)
    progress: Callable[[str], None] = print


class Unlearner(ABC):
    """Base class of every unlearning method.

    Subclasses set ``name`` (the ``--method`` value), ``Params`` (a dataclass whose
    fields are the method's hyper-parameters, each with a default, a type annotation and
    a ``metadata={"help": ...}``), optionally ``strength`` (the knob ``r2f-bench tune``
    and ``frontier`` sweep), and implement :meth:`unlearn`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""  # one line for `r2f-bench methods` (default: the module docstring's first paragraph)
    Params: ClassVar[type] = NoParams
    edits_weights: ClassVar[bool] = True
    # the knob that trades forgetting against utility (``r2f-bench frontier`` sweeps it)
    strength: ClassVar[Strength | None] = None
    # whether the method needs ``Context.proxy`` (the run then builds the --proxy model)
    uses_proxy: ClassVar[bool] = False
    # which of :data:`INPUTS` it reads (:meth:`reads`; a method whose settings change that overrides it)
    inputs: ClassVar[frozenset[str]] = INPUTS
    # keys of the deletion's info (``Edit.info`` or :meth:`diagnostics`) that become result
    # columns of their own, beside the metrics every method gets
    result_columns: ClassVar[tuple[str, ...]] = ()
    # the presets of ``r2f-bench sweep --ablation`` that vary this method's settings (rank, views, transfer)
    ablations: ClassVar[tuple[str, ...]] = ()
    # whether the cost table states every method's time and memory as a ratio to this one's
    # (the first registered method that says so; the built-ins: FullGrad, the exact full-gradient step)
    cost_reference: ClassVar[bool] = False

    def __init__(self, params: Any | None = None) -> None:
        self.params = params if params is not None else self.Params()

    @classmethod
    def reads(cls, params: Any) -> frozenset[str]:
        """Which of :data:`INPUTS` the method reads with ``params``: ``views`` (the request's views
        past the first, :func:`Context.make_views`), ``retain`` (the request's retain items) and
        ``target_modules``. An option that sets one it does not read (--views and --paraphraser,
        --retain-items, --target-modules) is refused by a run, left out by a sweep and held at its
        default in a store key: the same work is stored once. Default: :attr:`inputs`."""
        return cls.inputs

    @classmethod
    def dev_split_needed(cls, params: Any) -> str | None:
        """Why :meth:`setup` with ``params`` needs the dev split's facts (``Context.retain_pool``),
        as the fix to print when the run has none (checked before any model loads); ``None``
        (the default): it does not."""
        return None

    def setup(self, model: torch.nn.Module, ctx: Context) -> None:
        """One-time preparation shared by all deletions (e.g. fitting R2F's decoder).

        Not counted in per-deletion time or memory. The default does nothing.
        """

    def diagnostics(self, original: torch.nn.Module, request: ForgetRequest, ctx: Context) -> dict[str, Any]:
        """Evaluation-only measurements, untimed, taken just before the deletion on the model it
        starts from (R2F: decoded-vs-exact gradient cosine). Default: none."""
        return {}

    @abstractmethod
    def unlearn(self, model: torch.nn.Module, request: ForgetRequest, ctx: Context) -> Edit:
        """Remove the request's knowledge from ``model`` and return the model to evaluate."""

    # -- hyper-parameters ---------------------------------------------------
    @classmethod
    def parse_params(cls, overrides: dict[str, str] | None = None) -> Any:
        """Build ``Params`` from defaults plus ``--set name=value`` strings."""
        fields = {f.name: f for f in dataclasses.fields(cls.Params)}
        values: dict[str, Any] = {}
        for key, raw in (overrides or {}).items():
            if key not in fields:
                known = ", ".join(fields) or "none"
                raise UserError(f"method {cls.name!r} has no parameter {key!r}; its parameters are: {known}.")
            values[key] = coerce(raw, fields[key], cls.Params, f"method {cls.name!r}")
        return cls.Params(**values)

    @classmethod
    def describe_params(cls) -> list[dict[str, Any]]:
        return [{"name": f.name, "default": f.default, "help": f.metadata.get("help", "")}
                for f in dataclasses.fields(cls.Params)]


def tuned(params: type, **defaults: Any) -> type:
    """The dataclass ``params`` with other default values (same fields, help and order):
    how a method records what ``r2f-bench tune`` chose for it (docs/tuning.md)."""
    known = {f.name: f for f in dataclasses.fields(params)}
    unknown = sorted(set(defaults) - set(known))
    if unknown:
        raise TypeError(f"{params.__name__} has no field {unknown[0]!r}")
    changed = [(name, known[name].type, field(default=value, metadata=known[name].metadata))
               for name, value in defaults.items()]
    return dataclasses.make_dataclass(params.__name__, changed, bases=(params,))


# Checks a Params field may declare as ``metadata["check"]``: each returns what a valid
# value must be (shown to the user), or ``None`` when the value is valid.
Check = Callable[[Any], "str | None"]


def positive(value: float) -> str | None:
    return None if value > 0 else "> 0"


def positives(values: tuple[float, ...]) -> str | None:
    return None if values and all(v > 0 for v in values) else "one or more values, all > 0"


def fraction(value: float) -> str | None:
    return None if 0 < value <= 1 else "in (0, 1]"


def at_least(bound: float) -> Check:
    return lambda value: None if value >= bound else f">= {bound}"


def existing_file(value: str) -> str | None:
    """An empty value means unset; any other names a file that exists."""
    return None if not value or Path(value).expanduser().is_file() else "an existing file"


def one_of(*choices: str) -> Check:
    return lambda value: None if value in choices else f"one of {', '.join(choices)}"


def coerce(raw: str, f: dataclasses.Field, params: type, owner: str) -> Any:
    """``raw`` converted by the field's type annotation (``int``, ``float``, ``str``,
    ``bool``, ``tuple[T, ...]`` / ``list[T]`` as comma-separated values, ``T | None``
    with ``none``), then checked: finite numbers, and the field's declared ``check``;
    ``owner`` names the plugin in the error line (``method 'r2f'``)."""
    annotation = typing.get_type_hints(params)[f.name]
    try:
        value = _convert(raw, annotation)
    except ValueError:
        raise UserError(f"parameter {f.name!r} of {owner} expects {_describe(annotation)}, got {raw!r}.") from None
    problem = None
    if isinstance(value, float) and not math.isfinite(value):
        problem = "a finite number"
    elif isinstance(value, (tuple, list)) and not all(math.isfinite(x) for x in value if isinstance(x, float)):
        problem = "finite numbers"
    elif value is not None and "check" in f.metadata:
        problem = f.metadata["check"](value)
    if problem:
        raise UserError(f"parameter {f.name!r} of {owner} must be {problem}, got {raw!r}.")
    return value


def _convert(raw: str, annotation: Any) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and raw.strip().lower() in ("none", "null"):
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(raw, inner)
    if origin in (tuple, list):
        return origin(_convert(x.strip(), args[0] if args else str) for x in raw.split(",") if x.strip())
    if annotation is bool:
        if raw.lower() not in {"true", "false", "1", "0", "yes", "no"}:
            raise ValueError(raw)
        return raw.lower() in {"true", "1", "yes"}
    return annotation(raw)


def _describe(annotation: Any, article: str = "a ") -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("none" if a is type(None) else _describe(a, article) for a in args)
    if origin in (tuple, list):
        return f"comma-separated {_describe(args[0], '') if args else 'str'} values"
    return f"{article}{getattr(annotation, '__name__', annotation)}"


def method_variant(entry: str) -> tuple[str, dict[str, str]]:
    """``name`` or ``name@param=value@...``, a method with some parameters set (e.g.
    ``r2f@decoder=learned``, so variants of one method sit side by side), as
    (name, parameter overrides)."""
    name, *sets = entry.split("@")
    if not name or any("=" not in s or not s.partition("=")[0].strip() for s in sets):
        raise UserError(f"bad method entry {entry!r}; write name or name@param=value, e.g. r2f@decoder=learned.")
    return name, parse_assignments(sets)


def parse_assignments(items: list[str]) -> dict[str, str]:
    """Turn ``["a=1", "b=x"]`` into a dict, with a clear error for malformed items."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects name=value, got {item!r}.")
        out[key.strip()] = value.strip()
    return out
