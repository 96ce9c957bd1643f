"""The built-in attacks on unlearned models (``--attacks``), registered through the same
hook a third party uses: relearning on the request's paraphrases (RAP) and on unrelated
data, weight quantisation, few-shot prompting, and sampled answers (Leak@k)."""

from __future__ import annotations

from typing import Callable

from ..hookspecs import hookimpl
from .prompting import FewShot, LeakAtK
from .quantize import Quantize
from .relearn import Rap, RelearnUnrelated


@hookimpl
def register_attacks(register: Callable[[type], None]) -> None:
    for cls in (Rap, RelearnUnrelated, Quantize, FewShot, LeakAtK):
        register(cls)
