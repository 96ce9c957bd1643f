"""Write a model folder of a given shape with random (untaught) weights, for scale runs.

    python benchmarks/shaped_model.py --shape mistral-7b --dtype bfloat16 --out /tmp/mistral-7b-shaped
    python benchmarks/shaped_model.py --shape embedded:mistral-h768-l14 --out /tmp/mistral-100m

``mistral-7b`` is Mistral-7B's shape (hidden 4096, 32 layers, 32 heads, 8 KV heads, MLP
14336, a 32,000-row vocabulary: 7.24B parameters), ``smollm2-135m`` SmolLM2-135M's (Llama:
hidden 576, 30 layers, 9 heads, 3 KV heads, MLP 1536, a tied 49,152-row vocabulary:
134.5M parameters); an ``embedded:`` spec is one of the embedded architectures. The weights are built directly in ``--dtype`` (a 7B model never
exists in float32 here) and saved as safetensors with a byte-level tokenizer trained on
the default RWKU data, so ``r2f-bench --model <folder> --dtype <dtype>`` runs on it. What
it knows is nothing: use it for time and memory, never for scores.
"""

from __future__ import annotations

import argparse
import sys

import torch

from r2f_bench.cli.main import script
from r2f_bench.atomic import atomic_dir
from r2f_bench.errors import UserError
from r2f_bench.engine.embedded import _config, build_tokenizer, EmbeddedSpec, teaching_texts
from r2f_bench.tasks.rwku import RWKU

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MISTRAL_7B = dict(vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, intermediate_size=14336, max_position_embeddings=4096,
                  tie_word_embeddings=False)
# SmolLM2-135M(-Instruct)'s shape (Llama: 134.5M parameters with its tied 49,152-row vocabulary)
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, intermediate_size=1536, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
SHAPES = {"mistral-7b": ("MistralConfig", MISTRAL_7B), "smollm2-135m": ("LlamaConfig", SMOLLM2_135M)}


def config_for(shape: str, tokenizer, layers: int | None = None):
    """The transformers config of ``shape`` (a name of :data:`SHAPES` or an ``embedded:``
    spec), with ``layers`` transformer blocks instead of its own number if given."""
    import transformers

    if shape in SHAPES:
        ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
        name, fields = SHAPES[shape]
        config = getattr(transformers, name)(**fields, **ids)
    elif shape.startswith("embedded:"):
        config = _config(EmbeddedSpec.parse(shape), tokenizer)
    else:
        raise UserError(f"unknown shape {shape!r}; use {', '.join(SHAPES)} or embedded:<family>-h<hidden>-l<layers>.")
    if layers is not None:
        config.num_hidden_layers = layers  # GPT-2's n_layer is an alias of it
    return config


def depth(config) -> int:
    return config.num_hidden_layers


def build(shape: str, tokenizer, dtype: torch.dtype, layers: int | None = None, seed: int = 0,
          device: str = "cpu") -> torch.nn.Module:
    """A model of ``shape`` with random weights made directly in ``dtype`` on ``device``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config_for(shape, tokenizer, layers), dtype=dtype).eval()


def parameters(shape: str, tokenizer, layers: int | None = None) -> int:
    """The number of parameters of ``shape``, counted without allocating its weights."""
    return sum(p.numel() for p in build(shape, tokenizer, torch.float32, layers, device="meta").parameters())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="mistral-7b", help=f"{', '.join(SHAPES)}, or an embedded spec")
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    parser.add_argument("--out", required=True, help="the folder to write (replaced atomically)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the random weights are made (a GPU makes a 7B model in seconds, a CPU in minutes)")
    args = parser.parse_args(argv)
    bench = RWKU().load(None, None, None, n_dev=2)
    texts = teaching_texts(bench.teaching_set(), bench.general_prompts)
    tokenizer = build_tokenizer(texts + (list(bench.world.texts) if bench.world is not None else []))
    model = build(args.shape, tokenizer, DTYPES[args.dtype], seed=args.seed, device=args.device)
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.shape}: {n / 1e9:.3f}B parameters, {n * DTYPES[args.dtype].itemsize / 2**30:.2f} GiB of "
          f"{args.dtype} weights; writing {args.out}", flush=True)
    with atomic_dir(args.out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True, max_shard_size="2GB")
        tokenizer.save_pretrained(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
