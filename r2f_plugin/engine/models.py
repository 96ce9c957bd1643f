"""Models: the embedded default (tiny, built from config and taught the task's
facts here) and real Hugging Face causal LMs by hub name or local path.

The embedded default exists because no weights can be downloaded where r2f-bench is
developed and tested. It is a real architecture (Mistral by default; Llama and GPT-2
for transfer studies) with a byte-level BPE tokenizer trained locally, fine-tuned on
the benchmark's probes until it answers them. Built models are cached on disk,
keyed by everything that determines them, and every result names them
``embedded:<family>-h<hidden>-l<layers>`` so nobody mistakes them for real LLMs.
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from ..atomic import atomic_dir, set_aside
from ..cache import cache_root
from . import demo_models
from .config import DTYPES, FAMILIES
from .gguf_models import check_gguf, gguf_folder, is_gguf
from ..data import Probe
from ..training.encoding import MAX_LENGTH
from ..errors import UserError
from .teaching import answer_accuracy, answers_phrase, finetune, teach_schedule, world_answers

CACHE_VERSION = "4"
VOCAB_SIZE = 2048
# Teaching starts over from the same initialisation at the next rate when a rate does
# not reach the target accuracy (a wide model on a few dozen facts can stall at the
# first); a model that learns at the first rate is what version 2 built.
TEACHING_RATES = (3e-3, 1e-3, 3e-4)
# A knowledge world is taught on a fixed schedule (teaching.teach_schedule): steps and
# peak rate, the same for every world, model and seed (never chosen on scored items).
WORLD_STEPS = 3000
WORLD_LR = 3e-3




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


@contextmanager
def one_thread() -> Iterator[None]:
    """Within the block torch runs on one intra-op thread. Teaching is seeded, but a sum
    split over two threads rounds differently from one, and 3,000 steps amplify it: the
    same seeds taught on 2 threads answered 91 % of never-taught questions, on 1, 75 %."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def embedded_model(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str],
                   progress: Callable[[str], None] = print, max_epochs: int = 120,
                   target_accuracy: float = 0.97, device: torch.device | str = "cpu",
                   seed: int = 0, world: Sequence[str] = (), check: Sequence[Probe] = (),
                   shipped: bool = True) -> tuple[torch.nn.Module, Any, dict]:
    """Build ``spec``, teach it, and cache the result.

    Without ``world`` it is taught ``facts`` until it answers them (strings recalled).
    With ``world`` (texts such as biographies) it is taught the texts and ``facts`` on
    the fixed :data:`WORLD_STEPS` schedule, then asked ``check`` (never-taught
    questions) to report how far its knowledge generalises. ``extra_texts`` only shape
    the tokenizer. ``seed`` (the run's) sets the initialisation and the teaching order,
    so every run seed is a real replicate with its own model. Returns (model, tokenizer,
    info) where info records the model's key and what was measured. A model shipped for
    the same recipe (:mod:`.demo_models`; unless ``shipped`` is false) is loaded first,
    then a cached one with the same key; only then is it taught.
    """
    recipe = recipe_key(spec, facts, extra_texts, max_epochs, target_accuracy, seed, world)
    folder = demo_models.verified(recipe, progress) if shipped else None
    if folder is not None:
        model, tok, info = _load(folder)
        info["key"] = demo_models.weights_key(recipe)
        progress(f"embedded model {spec.label}: the shipped demo model {folder.name} (taught on "
                 f"{info.get('taught_on', {}).get('cpu', 'an unrecorded machine')}; every file's SHA-256 verified)")
        return model.to(device).eval(), tok, info
    key = embedded_key(spec, facts, extra_texts, max_epochs, target_accuracy, seed, world)
    path = cache_path(spec, key)
    if path.exists():
        try:
            model, tok, info = _load(path)
            if info.get("key") != key:
                raise ValueError("r2f_info.json does not describe this model")
        except Exception as exc:  # truncated weights, broken JSON, a missing file or tensor: rebuild, never trust
            detail = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
            set_aside(path, f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__, progress)
        else:
            progress(f"embedded model {spec.label}: loaded from cache {path}")
            return model.to(device).eval(), tok, info

    texts = teaching_texts(facts, extra_texts) + list(world)
    tok = build_tokenizer(texts)
    with one_thread():  # the cached model must not depend on how many threads its first run had
        if world:
            model, info = _teach_world(spec, tok, world, facts, check, progress, device, seed)
        else:
            model, info = _teach_strings(spec, tok, facts, progress, device, seed, max_epochs, target_accuracy)
    info |= {"key": key, "recipe": recipe, "taught_on": demo_models.machine()}
    _save(model.eval(), tok, info, path)
    progress(f"embedded model {spec.label}: cached at {path}")
    return model, tok, info


def cache_path(spec: EmbeddedSpec, key: str) -> Path:
    """The cache entry of the embedded model of ``spec`` with build key ``key``."""
    return cache_root() / "models" / f"{spec.label.replace(':', '-')}-{key}"


def _load(folder: Path) -> tuple[torch.nn.Module, Any, dict]:
    """A saved embedded model, its tokenizer and its ``r2f_info.json``."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    info = json.loads((folder / "r2f_info.json").read_text())
    if not isinstance(info, dict):
        raise ValueError("r2f_info.json holds no object")
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    tok.padding_side = "left"
    model, loading = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, output_loading_info=True)
    missing = sorted(loading["missing_keys"]) + sorted(str(k) for k in loading["mismatched_keys"])
    if missing:  # transformers would initialise them at random: a different model under the same key
        raise ValueError(f"its weights lack or misshape {len(missing)} tensors ({', '.join(missing[:3])}, ...)")
    return model, tok, info


def _teach_strings(spec: EmbeddedSpec, tok: Any, facts: Sequence[Probe], progress: Callable[[str], None],
                   device: torch.device | str, seed: int, max_epochs: int,
                   target_accuracy: float) -> tuple[torch.nn.Module, dict]:
    """Teach ``facts`` until the model answers them, from the same initialisation at each
    of :data:`TEACHING_RATES` until one reaches ``target_accuracy``; the best try is kept."""
    best: tuple[float, torch.nn.Module, dict] | None = None
    for lr in TEACHING_RATES:
        model = new_embedded_model(spec, tok, seed).to(device)
        n = sum(p.numel() for p in model.parameters())
        progress(f"embedded model {spec.label}: {n / 1e6:.2f}M parameters, teaching its strings at lr {lr:g}")
        epochs = finetune(model, tok, list(facts), epochs=max_epochs, lr=lr, batch_size=32,
                          stop_accuracy=target_accuracy, progress=progress, seed=init_seed(spec, seed))
        acc = answer_accuracy(model, tok, list(facts))
        progress(f"embedded model {spec.label}: answer-token accuracy {acc:.3f} after {epochs} epochs at lr {lr:g}")
        info = {"label": spec.label, "spec": spec.cache_fields(), "seed": seed, "facts": len(facts), "epochs": epochs,
                "lr": lr, "taught_token_accuracy": acc, "parameters": n}
        if best is None or acc > best[0]:
            best = (acc, model, info)
        if acc >= target_accuracy:
            break
    acc, model, info = best
    if acc < target_accuracy:
        progress(f"warning: embedded model {spec.label} learned its facts only to answer-token accuracy {acc:.3f} "
                 f"(best of {len(TEACHING_RATES)} rates, kept: lr {info['lr']:g}); results count only the probes it "
                 f"answers before unlearning (known_forget_probes)")
    return model, info


def _teach_world(spec: EmbeddedSpec, tok: Any, world: Sequence[str], facts: Sequence[Probe],
                 check: Sequence[Probe], progress: Callable[[str], None], device: torch.device | str,
                 seed: int) -> tuple[torch.nn.Module, dict]:
    """Teach a knowledge world on the fixed schedule and measure what the model answers."""
    model = new_embedded_model(spec, tok, seed).to(device)
    n = sum(p.numel() for p in model.parameters())
    progress(f"embedded model {spec.label}: {n / 1e6:.2f}M parameters, teaching a knowledge world "
             f"({len(world)} texts, {len(facts)} questions, {WORLD_STEPS} steps)")
    start = time.time()
    teach_schedule(model, tok, world, facts, WORLD_STEPS, WORLD_LR, seed=init_seed(spec, seed), progress=progress)
    seconds = time.time() - start
    info = {"label": spec.label, "spec": spec.cache_fields(), "seed": seed, "world_texts": len(world), "facts": len(facts),
            "steps": WORLD_STEPS, "lr": WORLD_LR, "parameters": n, "teach_seconds": seconds,
            **world_answers(model, tok, facts, check)}
    progress(f"embedded model {spec.label}: taught in {seconds:.0f} s; {answers_phrase(info)}")
    return model.eval(), info


def _recipe(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str], max_epochs: int,
            target_accuracy: float, seed: int, world: Sequence[str]) -> list[Any]:
    texts = teaching_texts(facts, extra_texts)
    schedule = [WORLD_STEPS, WORLD_LR, list(world)] if world else [max_epochs, target_accuracy, TEACHING_RATES]
    return [CACHE_VERSION, spec.cache_fields(), seed, list(texts), *schedule, VOCAB_SIZE, MAX_LENGTH]


def digest(parts: list[Any]) -> str:
    """A short hash of JSON ``parts``: what cache entries are keyed by."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def recipe_key(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str],
               max_epochs: int = 120, target_accuracy: float = 0.97, seed: int = 0,
               world: Sequence[str] = ()) -> str:
    """A hash of what an embedded model is taught and how (architecture, seed, texts,
    schedule): what a shipped model is found by, whatever machine or library taught it."""
    return digest(_recipe(spec, facts, extra_texts, max_epochs, target_accuracy, seed, world))


def embedded_key(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str],
                 max_epochs: int = 120, target_accuracy: float = 0.97, seed: int = 0,
                 world: Sequence[str] = ()) -> str:
    """The cache key of the model :func:`embedded_model` teaches from the same arguments:
    its recipe and the torch and transformers versions (computed without building it)."""
    import transformers

    return digest(_recipe(spec, facts, extra_texts, max_epochs, target_accuracy, seed, world)
                   + [torch.__version__.split("+")[0], transformers.__version__])


def weights_key(spec: EmbeddedSpec, facts: Sequence[Probe], extra_texts: Sequence[str], seed: int = 0,
                world: Sequence[str] = ()) -> str:
    """The key of the weights :func:`embedded_model` returns for these arguments (what
    evaluations and decoders are cached by): a shipped model's, else the build key."""
    recipe = recipe_key(spec, facts, extra_texts, seed=seed, world=world)
    return demo_models.weights_key(recipe) or embedded_key(spec, facts, extra_texts, seed=seed, world=world)


def _save(model: torch.nn.Module, tok: Any, info: dict, path: Path) -> None:
    """Write the model directory atomically; a concurrent builder's finished copy wins."""
    if path.exists():
        return
    with atomic_dir(path) as tmp:
        write_pretrained(model, tok, tmp)
        (tmp / "r2f_info.json").write_text(json.dumps(info, indent=2))


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


def check_model_path(name_or_path: str) -> None:
    """One line, before anything loads, for a local model path that does not exist (a
    GGUF file: also one it cannot load, :func:`.gguf_models.check_gguf`)."""
    if is_gguf(name_or_path):
        check_gguf(Path(name_or_path).expanduser())
    elif name_or_path.startswith((".", "/", "~")) and not Path(name_or_path).expanduser().exists():
        raise UserError(f"model path {name_or_path} does not exist; pass a local directory with safetensors weights, "
                        f"or a hub name such as mistralai/Mistral-7B-v0.1.")


def pretrained_key(model: torch.nn.Module, loaded_from: str) -> str:
    """The key of a loaded model's weights (what evaluations of it are cached by): the bytes
    of a local folder's weight and config files, else the hub name at its commit."""
    folder = Path(loaded_from)
    if not folder.is_dir():
        return f"hub:{loaded_from}@{getattr(model.config, '_commit_hash', None)}"
    files = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".json") and p.is_file()):
        files.update(path.name.encode())
        with path.open("rb") as f:
            while chunk := f.read(1 << 24):
                files.update(chunk)
    return files.hexdigest()[:16]


FIRST_LAYERS = "first-layers:"  # --proxy first-layers:N: the model's own first N decoder layers


def first_layers_of(spec: str) -> int | None:
    """N of a ``first-layers:N`` proxy spec (``None``: another spec); one line if N is no
    positive integer."""
    if not spec.startswith(FIRST_LAYERS):
        return None
    text = spec[len(FIRST_LAYERS):]
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"--proxy {spec}: N in first-layers:N is the number of the model's decoder layers the proxy "
                        f"keeps, a positive integer; e.g. first-layers:8.")
    return int(text)


def cut_to_first_layers(model: torch.nn.Module, n: int, name: str) -> torch.nn.Module:
    """``model`` cut in place to its first ``n`` decoder layers, its embeddings, final norm and
    head kept: a shallower model of the same family, widths and tokenizer (a proxy). The
    layers are the module list as long as ``config.num_hidden_layers``."""
    config = model.config
    total = config.num_hidden_layers
    lists = [(parent, attr) for parent in model.modules() for attr, child in parent.named_children()
             if isinstance(child, torch.nn.ModuleList) and len(child) == total]
    if len(lists) != 1:
        raise UserError(f"cannot find the decoder layers of {name} ({type(model).__name__}) to cut; pass a smaller "
                        f"model of its family as --proxy instead.")
    if not 1 <= n < total:
        raise UserError(f"--proxy first-layers:{n}: {name} has {total} decoder layers; keep between 1 and {total - 1}.")
    parent, attr = lists[0]
    setattr(parent, attr, torch.nn.ModuleList(list(getattr(parent, attr))[:n]))
    config.num_hidden_layers = n
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:n]
    return model


def dtype_of(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise UserError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}.")
    return getattr(torch, name)


def hf_model(name_or_path: str, trust_remote_code: bool = False, dtype: str = "float32",
             device_map: str | None = None, progress: Callable[[str], None] = print) -> tuple[torch.nn.Module, Any, str]:
    """Load a Hugging Face causal LM and its tokenizer by hub name, local path or GGUF
    file (converted once into a cached safetensors folder, :mod:`.gguf_models`), and the
    key of its weights (:func:`pretrained_key`).

    With ``device_map`` (``auto``, ``balanced``, ``sequential``) Accelerate's big-model
    loading places the layers across the available GPUs (then CPU) as they are read,
    so a model larger than one device never has to fit on one.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_path(name_or_path)
    if is_gguf(name_or_path):
        name_or_path = str(gguf_folder(Path(name_or_path).expanduser(), progress))
    torch_dtype = dtype_of(dtype)
    placement = {"device_map": device_map} if device_map else {}
    try:
        tok = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, trust_remote_code=trust_remote_code,
                                                     dtype=torch_dtype, use_safetensors=True, **placement)
    except Exception as exc:  # missing files, corrupt weights, an architecture that is no causal LM, no network
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot load model {name_or_path!r} ({type(exc).__name__}: {first}); pass a causal LM as a local "
                        f"directory with safetensors weights, or a hub name reachable from here.") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return model.eval(), tok, pretrained_key(model, name_or_path)


def dispatch(model: torch.nn.Module, device_map: str | dict[str, Any], force_hooks: bool = False) -> torch.nn.Module:
    """Spread an already loaded model's layers over devices with Accelerate's hooks (each
    layer's inputs move to its device); ``device_map`` is a strategy such as ``auto``
    or an explicit ``{module name: device}``."""
    from accelerate import dispatch_model, infer_auto_device_map

    if isinstance(device_map, str):  # the strategy's balancing is from_pretrained's; here: fill devices in order
        device_map = infer_auto_device_map(model, no_split_module_classes=list(model._no_split_modules or []))
    return dispatch_model(model, device_map=device_map, force_hooks=force_hooks)
