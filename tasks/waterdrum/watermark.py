"""Waterfall watermark verification (Lau et al. 2024, "Waterfall: Framework for Robust and
Scalable Text Watermarking") and the WaterDrum metric built on it (Lu et al. 2025,
"WaterDrum: Watermarking for Data-centric Unlearning Metric").

**Verification** of a text under an owner's key (id ``mu``, frequency ``k_p``), done with
the watermarking model's tokenizer (vocabulary size N): for every token ``t_j`` after the
first ``n_gram - 1``, the preceding ``n_gram - 1`` tokens seed a permutation of the
vocabulary (NumPy's legacy ``RandomState((mu, *previous))``); ``x_j`` is the token's index
under it. The score is the ``k_p``-th Fourier coefficient (real part) of the normalised
histogram of the ``x_j``, i.e. ``q = mean_j cos(2 pi k_p x_j / N)``. Waterfall writes a
watermarked text by pushing tokens toward indices where that cosine is high, so the
owner's texts, and the outputs of a model that learned them, score clearly above 0;
anything else scores about 0 (spread ``1/sqrt(2L)`` for L tokens).

**WaterDrum** on a set of an owner's queries: each query gets ``GENERATIONS`` samples at
temperature 1 of up to ``MAX_NEW_TOKENS`` new tokens (the official
``generate_and_verify_watermark.py`` settings); the query's score is the mean ``q`` of its
samples weighted by their token counts; the metric is the mean over queries. It needs no
retrained model: one that never learned the owner's data scores about 0.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from ...errors import UserError

GENERATIONS = 10
MAX_NEW_TOKENS = 200
WORDS = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class WatermarkSpec:
    """How an owner's watermark is verified: the watermarking model's tokenizer (a Hugging
    Face name or path, or ``words:<N>``, the word-hash stand-in of the bundled sample),
    the Fourier frequency ``k_p`` and the n-gram order that seeds the permutations."""

    tokenizer: str
    k_p: int = 1
    n_gram: int = 2


@lru_cache(maxsize=256)
def _permutation(seed: tuple[int, ...], n: int) -> np.ndarray:
    return np.random.RandomState(seed).permutation(n).astype(np.uint32)


class Verifier:
    """Waterfall's verification operator for one tokenizer."""

    def __init__(self, encode: Callable[[str], list[int]], vocab_size: int, k_p: int = 1, n_gram: int = 2) -> None:
        if not 1 <= k_p < vocab_size // 2 or n_gram < 2:
            raise UserError(f"watermark k_p must be in 1..{vocab_size // 2 - 1} and n_gram at least 2, got {k_p} and {n_gram}.")
        self.encode, self.n, self.k_p, self.window = encode, vocab_size, k_p, n_gram - 1

    def indices(self, tokens: Sequence[int], key: int) -> list[int]:
        """Permuted index of every scored token (scoring stops at an out-of-vocabulary id)."""
        out = []
        for j in range(self.window, len(tokens)):
            if tokens[j] >= self.n:
                break
            seed = (key, *map(int, tokens[j - self.window:j]))
            out.append(int(_permutation(seed, self.n)[tokens[j]]))
        return out

    def strength(self, text: str, key: int) -> tuple[float, int]:
        """Waterfall's q score of ``text`` under ``key``, and the number of tokens scored."""
        x = np.asarray(self.indices(self.encode(text), key), dtype=np.float64)
        if not len(x):
            return 0.0, 0
        return float(np.cos(2 * np.pi * self.k_p * x / self.n).mean()), len(x)


def word_encoder(vocab_size: int) -> Callable[[str], list[int]]:
    """The sample's stand-in tokenizer: lower-cased words and punctuation, hashed (CRC-32)."""
    return lambda text: [zlib.crc32(w.encode()) % vocab_size for w in WORDS.findall(text.lower())]


@lru_cache(maxsize=4)
def load_verifier(spec: WatermarkSpec) -> Verifier:
    """The verifier ``spec`` names; a Hugging Face tokenizer is loaded once."""
    if spec.tokenizer.startswith("words:"):
        size = spec.tokenizer.split(":", 1)[1]
        if not size.isdigit():
            raise UserError(f"bad watermark tokenizer {spec.tokenizer!r}; write words:<vocabulary size>, e.g. words:4096.")
        return Verifier(word_encoder(int(size)), int(size), spec.k_p, spec.n_gram)
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(spec.tokenizer)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot load the watermark tokenizer {spec.tokenizer!r} ({first}); WaterDrum verifies with "
                        f"the watermarking model's tokenizer: log in with access to it or set a local path in waterdrum.json.") from None
    return Verifier(lambda text: tok.encode(text, add_special_tokens=False), tok.vocab_size, spec.k_p, spec.n_gram)


def waterdrum_score(generations: Sequence[Sequence[str]], verifier: Verifier, key: int) -> float:
    """WaterDrum on a set of queries: per query the token-weighted mean strength of its
    generations, averaged over queries."""
    per_query = []
    for texts in generations:
        scored = [verifier.strength(t, key) for t in texts]
        tokens = sum(n for _, n in scored)
        per_query.append(sum(q * n for q, n in scored) / max(tokens, 1))
    return float(np.mean(per_query)) if per_query else float("nan")
