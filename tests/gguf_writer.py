"""A GGUF file written from a Llama-architecture model, as llama.cpp's converter lays one
out (tensor names, the Q/K row permutation, a byte-level BPE tokenizer as ``gpt2``), for
tests that must not download a real one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

LAYER_TENSORS = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order for Q and K (rotary halves interleaved per head)."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def write_gguf(model: torch.nn.Module, tokenizer: Any, path: Path, architecture: str = "llama",
               quantize: str | None = None, keep: Callable[[str], bool] = lambda name: True) -> Path:
    """Write ``model`` (Llama/Mistral layout, tied embeddings) and ``tokenizer`` to ``path``;
    ``quantize`` (e.g. ``"Q8_0"``) stores the 2-D weight matrices in that block type (zero
    blocks for a type the gguf package cannot quantise, e.g. ``"Q8_1"``); only the tensors
    whose GGUF name ``keep`` accepts are written (to make damaged files)."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    tokens = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    special = set(tokenizer.all_special_ids)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in special else 1 for i in range(len(tokens))])  # 3: control
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_pad_token_id(tokenizer.pad_token_id)
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}

    def add(name: str, x: np.ndarray) -> None:
        if not keep(name):
            return
        if quantize and x.ndim == 2:
            kind = gguf.GGMLQuantizationType[quantize]
            try:
                blocks = gguf.quants.quantize(x, kind)
            except NotImplementedError:  # a type the package cannot write: zero blocks, for refusals
                block, size = gguf.GGML_QUANT_SIZES[kind]
                blocks = np.zeros((x.shape[0], x.shape[1] // block * size), dtype=np.uint8)
            w.add_tensor(name, blocks, raw_dtype=kind)
        else:
            w.add_tensor(name, np.ascontiguousarray(x, dtype=np.float32))

    add("token_embd.weight", state["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        for hf, name in LAYER_TENSORS.items():
            x = state[f"model.layers.{i}.{hf}.weight"]
            x = _permute(x, cfg.num_attention_heads) if name == "attn_q" else x
            x = _permute(x, cfg.num_key_value_heads) if name == "attn_k" else x
            add(f"blk.{i}.{name}.weight", x)
    add("output_norm.weight", state["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
