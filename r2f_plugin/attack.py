"""The attack contract: is what a method removed gone, or hidden?

An attack takes the unlearned model and gives back what to evaluate again: the same model
changed in place (relearning, quantisation), a way of asking each scored probe (a prompt
attack), or a number of sampled answers per probe (Leak@k). The run puts the unlearned
weights back after each attack, runs every attack on the untouched model too (its
control), and scores the share of the forgotten known probes that come back
(:mod:`r2f_bench.engine.attacks`). Built-ins live in ``attacks/``; a third party registers
its own through the ``register_attacks`` hook.

An attack sees what a method sees (:class:`~r2f_bench.unlearner.Context`, the request),
never an evaluated string: the data it declares (:meth:`Attack.data`) goes through the
protocol's leak check before it runs.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from .data import ForgetRequest, Probe
from .errors import UserError
from .plugins import registry
from .unlearner import Context, NoParams, at_least, coerce

if TYPE_CHECKING:  # annotations only: the tables' import path (engine.config, results.cells) loads no torch
    import torch


NONE = "none"  # --attacks none: no attack


@dataclass(frozen=True)
class Budget:
    """The relearning budget a run gives every fine-tuning attack (``--rap-steps``, ``--rap-lr``)."""

    steps: int
    lr: float


@dataclass
class Attacked:
    """What to evaluate after an attack: ``model`` (the one given, changed in place or
    not), each scored probe asked through ``ask`` (``None``: as it is), the model's reply
    begun with ``reply`` (e.g. a compliant "Sure, here is the answer:"; through a chat
    template it opens the assistant's turn; empty: none), and ``samples`` answers per probe
    drawn at ``temperature`` (a probe counts as answered when any sample answers it;
    ``samples`` 1: the greedy answer, ``temperature`` unused)."""

    model: torch.nn.Module
    ask: Callable[[Probe], Probe] | None = None
    reply: str = ""
    samples: int = 1
    temperature: float = 1.0


class Attack(ABC):
    """Base class of every attack.

    Subclasses set ``name`` (what ``--attacks`` names), ``Params`` (a dataclass of typed,
    defaulted fields), ``spec_param`` (the field ``name:value`` sets, e.g. ``quantize:nf4``;
    by default the only field, if ``Params`` has one),
    ``edits_weights`` (whether :meth:`attack` changes the model's weights) and ``relearns``
    (whether it fine-tunes on the run's :class:`Budget`), and implement :meth:`attack`; one
    that trains or prompts on data returns it from :meth:`data`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    spec_param: ClassVar[str | None] = None  # None: the only field of Params, if it has one
    edits_weights: ClassVar[bool] = True
    relearns: ClassVar[bool] = False  # fine-tunes on the run's relearning budget (--rap-steps 0 turns it off)

    def __init__(self, params: Any | None = None) -> None:
        self.params = params if params is not None else self.Params()

    def data(self, request: ForgetRequest, ctx: Context) -> list[Probe]:
        """The items the attack trains on or shows the model (default: none)."""
        return []

    @abstractmethod
    def attack(self, model: torch.nn.Module, data: list[Probe], ctx: Context, budget: Budget) -> Attacked:
        """Attack ``model`` (in place where it changes weights) with ``data``."""

    def spec(self) -> str:
        """How ``--attacks``, records and tables name this attack: ``name``, or ``name:value``
        with the value of :meth:`spec_field` (``fewshot`` and ``fewshot:3`` are one attack)."""
        if (param := self.spec_field()) is None:
            return self.name
        spec = f"{self.name}:{getattr(self.params, param)}"
        if any(c in spec for c in ".,"):  # record paths are dotted; the option is comma-separated
            raise UserError(f"attack {spec!r}: a value with '.' or ',' cannot name a column; give {self.name} "
                            f"a value without them.")
        return spec

    @classmethod
    def spec_field(cls) -> str | None:
        """The ``Params`` field ``name:value`` sets: ``spec_param``, else the only field, if one."""
        fields = dataclasses.fields(cls.Params)
        return cls.spec_param or (fields[0].name if len(fields) == 1 else None)

    @classmethod
    def parse(cls, value: str | None) -> Any:
        """``Params`` with ``value`` (the part of ``name:value`` after the colon) in :meth:`spec_field`."""
        if value is None:
            return cls.Params()
        if (param := cls.spec_field()) is None:
            raise UserError(f"attack {cls.name!r} takes no value; write {cls.name} in --attacks, not {cls.name}:{value}.")
        f = next(f for f in dataclasses.fields(cls.Params) if f.name == param)
        return cls.Params(**{f.name: coerce(value, f, cls.Params, f"attack {cls.name!r}")})


def count(default: int, help: str, least: int = 1) -> type:
    """``Params`` of one count ``k`` (what ``name:k`` sets)."""
    return dataclasses.make_dataclass("CountParams", [("k", int, dataclasses.field(
        default=default, metadata={"help": help, "check": at_least(least)}))])


def split_spec(spec: str) -> tuple[str, str | None]:
    """``name`` and its value of one ``--attacks`` entry (``quantize:nf4`` -> ``("quantize", "nf4")``)."""
    name, colon, value = spec.strip().partition(":")
    return name, (value if colon else None)


def parse_attacks(text: str) -> list[tuple[str, Attack]]:
    """(spec, attack) of each ``--attacks`` entry, checked before any model loads (an unknown
    name or a bad value is one line); ``none`` gives none."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if entries == [NONE]:
        return []
    if not entries or NONE in entries:
        raise UserError(f"--attacks {text!r}: name attacks (comma-separated, `r2f-bench attacks` lists them), "
                        f"or none for no attack.")
    out: dict[str, Attack] = {}
    for entry in entries:
        name, value = split_spec(entry)
        cls = registry().attack(name)
        attack = cls(cls.parse(value))
        out.setdefault(attack.spec(), attack)
    return list(out.items())


def canonical_attacks(text: str) -> str:
    """``--attacks`` as each attack writes itself (``fewshot`` -> ``fewshot:3``), checked."""
    return ",".join(spec for spec, _ in parse_attacks(text)) or NONE
