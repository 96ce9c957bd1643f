"""The embedded default models: tiny real architectures (Mistral by default; Llama and GPT-2
for transfer studies) built from a config, with a byte-level BPE tokenizer trained locally.
They exist because no weights can be downloaded where r2f-bench is developed and tested;
every result names them ``embedded:<family>-h<hidden>-l<layers>`` so nobody mistakes them
for real LLMs. What they are taught, and the cache: :mod:`.models`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import torch

from ..data import Probe
from ..errors import UserError
from ..training.encoding import MAX_LENGTH
from .config import FAMILIES

VOCAB_SIZE = 2048


@dataclass(frozen=True)
class EmbeddedSpec:
    """Architecture of an embedded model; ``family`` is a transformers model type."""

    family: str = "mistral"
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 384
    # Each family starts from its own initialisation, this offset (mistral 0, llama 1,
    # gpt2 2) added to the run seed's by init_seed: at these sizes a Mistral and a Llama
    # config define the same network (Mistral's sliding window never binds within 256
    # tokens), so one initialisation would make the two "families" bit-identical and a
    # Mistral-to-Llama transfer cell meaningless.
    family_offset: int = 0

    @property
    def label(self) -> str:
        return f"embedded:{self.family}-h{self.hidden}-l{self.layers}"

    def cache_fields(self) -> dict[str, Any]:
        """The fields as cache keys hash them and ``r2f_info.json`` records them."""
        # family_offset was first named seed: hashed under that name, every cached model keeps its key
        return {"seed" if k == "family_offset" else k: v for k, v in asdict(self).items()}

    @classmethod
    def parse(cls, text: str) -> "EmbeddedSpec":
        """``embedded`` or ``embedded:mistral-h128-l4`` (family, hidden size, layers)."""
        if text == "embedded":
            return cls()
        try:
            family, *rest = text.split(":", 1)[1].split("-")
            fields = {p[0]: int(p[1:]) for p in rest}
            hidden, layers = fields.get("h", 128), fields.get("l", 4)
        except (IndexError, ValueError):
            raise UserError(f"bad embedded model spec {text!r}; write embedded:<family>-h<hidden>-l<layers>, e.g. embedded:mistral-h128-l4.") from None
        if family not in FAMILIES:
            raise UserError(f"unknown embedded family {family!r}; choose one of {', '.join(FAMILIES)}.")
        heads = max(2, hidden // 32)
        if hidden < 16 or hidden % (2 * heads) or layers < 1:  # rotary halves need an even width per head
            raise UserError(f"bad embedded model spec {text!r}: hidden must be at least 16 and a multiple of "
                            f"{2 * heads}, layers at least 1; e.g. embedded:{family}-h64-l2.")
        return cls(family=family, hidden=hidden, layers=layers, heads=heads, kv_heads=max(1, heads // 2),
                   intermediate=3 * hidden, family_offset=FAMILIES.index(family))


# the embedded default is small enough to learn the knowledge world in minutes on a CPU
DEFAULT_MODEL = EmbeddedSpec.parse("embedded:mistral-h64-l2")


DEFAULT_PROXY = EmbeddedSpec.parse("embedded:mistral-h32-l2")


def _config(spec: EmbeddedSpec, tokenizer: Any):
    from transformers import GPT2Config, LlamaConfig, MistralConfig

    common = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                  tie_word_embeddings=True)
    if spec.family == "gpt2":
        return GPT2Config(n_embd=spec.hidden, n_layer=spec.layers, n_head=spec.heads, n_positions=MAX_LENGTH,
                          n_inner=spec.intermediate, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common)
    cls = MistralConfig if spec.family == "mistral" else LlamaConfig
    return cls(hidden_size=spec.hidden, num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
               num_key_value_heads=spec.kv_heads, intermediate_size=spec.intermediate,
               max_position_embeddings=MAX_LENGTH, **common)


def build_tokenizer(texts: Sequence[str]):
    """A byte-level BPE tokenizer trained on ``texts`` (any text still tokenizes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.padding_side = "left"
    return fast


def init_seed(spec: EmbeddedSpec, run_seed: int) -> int:
    """The seed of an embedded model's initialisation and teaching order: the family's
    offset for run seed 0, a different one for every other run seed (replicates)."""
    return spec.family_offset + 7919 * run_seed


def new_embedded_model(spec: EmbeddedSpec, tokenizer: Any, run_seed: int = 0) -> torch.nn.Module:
    """An untrained model of ``spec``'s architecture for ``tokenizer``, seeded by
    :func:`init_seed`."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(init_seed(spec, run_seed))
    return AutoModelForCausalLM.from_config(_config(spec, tokenizer))


def teaching_texts(facts: Sequence[Probe], extra: Sequence[str]) -> list[str]:
    return [f"{p.prompt} {p.answer}" for p in facts] + list(extra)
