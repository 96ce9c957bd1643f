"""Writing a model and its tokenizer as a Hugging Face folder (safetensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

def write_pretrained(model: torch.nn.Module, tok: Any, folder: Path) -> None:
    """Write ``model`` and ``tok`` as a Hugging Face folder from *this* process.

    Once torch.distributed is initialised (``accelerate launch``), transformers'
    ``save_pretrained`` writes the weights and config only on rank 0. Here every process
    writes folders of its own (a cache entry, an edited model), so a folder written on
    rank 1 held only the tokenizer: its cache entry was set aside and taught again, forever.
    """
    from safetensors.torch import save_model

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        model.config.save_pretrained(folder)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(folder)
        save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:  # save_pretrained also handles offloaded and sharded weights
        model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
