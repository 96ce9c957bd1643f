"""Real Hugging Face causal LMs, by hub name, local folder or GGUF file: checking the name
before anything loads, loading in a dtype and across devices, their cache key, and the
first-layers proxy cut from a model (``--proxy first-layers:N``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import UserError, described
from .config import DTYPES
from .gguf_models import check_gguf, gguf_folder, is_gguf
from .identity import folder_digest

def check_model_path(name_or_path: str) -> None:
    """One line, before anything loads, for a local model path that does not exist (a
    GGUF file: also one it cannot load, :func:`.gguf_models.check_gguf`)."""
    if is_gguf(name_or_path):
        check_gguf(Path(name_or_path).expanduser())
    elif name_or_path.startswith((".", "/", "~")) and not Path(name_or_path).expanduser().exists():
        raise UserError(f"model path {name_or_path} does not exist; pass a local directory with safetensors weights, "
                        f"or a hub name such as mistralai/Mistral-7B-v0.1.")


def decoder_layers(name_or_path: str) -> int | None:
    """How many decoder layers a model has, read without loading it (a GGUF file's metadata,
    a folder's ``config.json``, a hub model's in the local hub cache; nothing is downloaded);
    ``None`` where none is recorded (a hub model not yet cached: known once loaded)."""
    if is_gguf(name_or_path):
        return check_gguf(Path(name_or_path).expanduser())
    folder = Path(name_or_path).expanduser()
    config = folder / "config.json" if folder.is_dir() else cached_hub_file(name_or_path, "config.json")
    try:
        fields = json.loads(config.read_text(encoding="utf-8")) if config is not None and config.is_file() else {}
    except (OSError, ValueError):
        return None
    n = fields.get("num_hidden_layers", fields.get("n_layer")) if isinstance(fields, dict) else None
    return n if isinstance(n, int) else None


def cached_hub_file(name: str, filename: str) -> Path | None:
    """``filename`` of the hub model ``name`` where the local hub cache holds it (no network)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, filename)
    except ValueError:  # not a valid hub name (HFValidationError)
        return None
    return Path(found) if isinstance(found, str) else None


def pretrained_key(model: torch.nn.Module, loaded_from: str) -> str:
    """The key of a loaded model's weights (what evaluations of it are cached by): the bytes
    of a local folder's weight and config files, else the hub name at its commit."""
    folder = Path(loaded_from)
    if not folder.is_dir():
        return f"hub:{loaded_from}@{getattr(model.config, '_commit_hash', None)}"
    return folder_digest(folder)


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
        raise UserError(f"cannot load model {name_or_path!r} ({described(exc)}); pass a causal LM as a local "
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
