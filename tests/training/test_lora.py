"""LoRA adapters and probes: a rank the adapted layers cannot hold is one line."""

from __future__ import annotations

import pytest

from r2f_bench.engine.embedded import build_tokenizer, EmbeddedSpec, new_embedded_model
from r2f_bench.errors import UserError
from r2f_bench.training.lora import lora_adapters, lora_probe


@pytest.mark.parametrize("attach", [lambda m, r: lora_probe(m, r), lambda m, r: lora_adapters(m, r).__enter__()])
def test_a_rank_wider_than_the_narrowest_layer_is_one_line(attach):
    """Before: `--set rank=5000` on a width-64 model ran for minutes (and took ~57 s to stop)."""
    model = new_embedded_model(EmbeddedSpec.parse("embedded:llama-h32-l1"), build_tokenizer(["a b c d"]))
    widths = {max(m.weight.shape) for name, m in model.named_modules() if name.endswith(("q_proj", "k_proj", "v_proj"))}
    with pytest.raises(UserError, match=rf"^LoRA rank 5000 is more than the narrowest adapted layer's width "
                                        rf"\({min(widths)}, model\.layers\.0\.\S+\); pass --set rank={min(widths)} or less\.$"):
        attach(model, 5000)
    with pytest.raises(UserError, match="LoRA rank must be at least 1, got 0"):
        attach(model, 0)
    attach(model, min(widths))  # the widest rank that fits is accepted
