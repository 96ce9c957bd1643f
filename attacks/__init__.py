"""The built-in attacks on unlearned models (``--attacks``), registered through the same
hook a third party uses: relearning on the request's paraphrases (RAP, and a stated few of
them) and on unrelated data, weight quantisation, few-shot and adversarial prompts, and
sampled answers (Leak@k)."""

from __future__ import annotations

from typing import Callable

from ..hookspecs import hookimpl
from .prompting import AdversarialPrompt, FewShot, LeakAtK
from .quantize import Quantize
from .relearn import Rap, RelearnRelated, RelearnUnrelated


@hookimpl
def register_attacks(register: Callable[[type], None]) -> None:
    for cls in (Rap, RelearnRelated, RelearnUnrelated, Quantize, FewShot, AdversarialPrompt, LeakAtK):
        register(cls)
