"""GGUF files as a model source: converted once (cached by content), the same network back,
and one line for a file transformers cannot load, before any model loads."""

from __future__ import annotations

import pytest
import torch

from gguf_writer import write_gguf
from r2f_bench.engine.embedded import build_tokenizer, EmbeddedSpec, new_embedded_model
from r2f_bench.engine.pretrained import hf_model
from r2f_bench.errors import UserError

pytest.importorskip("gguf")
TEXTS = ["Ada Lovelace was born in London.", "The capital of France is Paris.", "Who is Stephen King?"] * 20


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test converts into a cache of its own (a conversion found cached converts nothing)."""
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def source():
    tok = build_tokenizer(TEXTS)
    return new_embedded_model(EmbeddedSpec.parse("embedded:llama-h64-l2"), tok).eval(), tok


def _logits(model, tok, text="Ada Lovelace was born in"):
    with torch.no_grad():
        return model(**tok(text, return_tensors="pt")).logits


@pytest.mark.parametrize("quantize, tolerance", [(None, 0.0), ("Q8_0", 0.02), ("Q5_0", 0.1), ("Q4_0", 0.2)])
def test_a_gguf_file_loads_as_the_model_it_was_written_from(source, tmp_path, quantize, tolerance):
    """Float32 comes back exactly; block-quantised weights within their rounding (logits of
    a model whose largest logit is about 1). Q5_0 is outside transformers' own GGUF kernels'
    table but read by its legacy loader (Gemma 3 270M's registry GGUF holds 81 such tensors)."""
    model, tok = source
    path = write_gguf(model, tok, tmp_path / "tiny.gguf", quantize=quantize)
    said = []
    loaded, loaded_tok, _ = hf_model(str(path), progress=said.append)
    for text in TEXTS[:3]:
        assert loaded_tok(text)["input_ids"] == tok(text)["input_ids"]
    assert (_logits(loaded, loaded_tok) - _logits(model, tok)).abs().max() <= tolerance
    assert sum("converting the GGUF file" in line for line in said) == 1
    hf_model(str(path), progress=said.append)  # the second time from the cache: no conversion
    assert sum("converting the GGUF file" in line for line in said) == 1


def test_the_conversion_is_keyed_by_the_files_content(source, tmp_path):
    model, tok = source
    path = write_gguf(model, tok, tmp_path / "m.gguf")
    said = []
    key = hf_model(str(path), progress=said.append)[2]
    with torch.no_grad():
        model.model.norm.weight.mul_(2.0)  # other weights, same file name
    try:
        write_gguf(model, tok, path)
        again, again_tok, again_key = hf_model(str(path), progress=said.append)
        assert torch.equal(_logits(again, again_tok), _logits(model, tok))
        assert again_key != key  # evaluations of the old weights are not read back for the new ones
    finally:
        with torch.no_grad():
            model.model.norm.weight.div_(2.0)
    assert sum("converting" in line for line in said) == 2


def test_files_it_cannot_load_get_one_line(source, tmp_path):
    from r2f_bench.engine.pretrained import check_model_path

    model, tok = source
    with pytest.raises(UserError, match="does not exist"):
        check_model_path(str(tmp_path / "absent.gguf"))
    (tmp_path / "text.gguf").write_text("not a model")
    with pytest.raises(UserError, match="cannot be read as a GGUF file"):
        check_model_path(str(tmp_path / "text.gguf"))
    with pytest.raises(UserError, match="architecture 'rwkv9'.*cannot load"):
        check_model_path(str(write_gguf(model, tok, tmp_path / "rwkv.gguf", architecture="rwkv9")))
    with pytest.raises(UserError, match="type Q8_1.*cannot dequantise for 'llama'"):
        check_model_path(str(write_gguf(model, tok, tmp_path / "q81.gguf", quantize="Q8_1")))
    with pytest.raises(UserError, match="holds no weights, not a whole model"):  # a vocabulary-only file
        check_model_path(str(write_gguf(model, tok, tmp_path / "vocab.gguf", keep=lambda name: False)))


def test_a_file_missing_weights_is_refused_not_filled_at_random(source, tmp_path):
    """transformers starts the weights a file lacks at random, with a warning among many."""
    from r2f_bench.engine.gguf_models import gguf_folder

    model, tok = source
    path = write_gguf(model, tok, tmp_path / "holed.gguf", keep=lambda name: not name.startswith("blk.1.ffn_down"))
    with pytest.raises(UserError, match=r"lacks 1 weight\(s\) of its architecture \(model.layers.1.mlp.down_proj.weight\)"):
        gguf_folder(path, progress=lambda m: None)


def test_a_file_is_checked_once_until_it_changes(source, tmp_path, monkeypatch):
    """Checking reads the file's metadata (seconds for a real vocabulary): a sweep plans every
    job's models, so the same file is read once, and again only when it changes."""
    import gguf

    from r2f_bench.engine.pretrained import check_model_path

    model, tok = source
    path = write_gguf(model, tok, tmp_path / "m.gguf")
    reads = []
    reader = gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *a, **k: reads.append(a) or reader(*a, **k))
    for _ in range(3):
        check_model_path(str(path))
    assert len(reads) == 1
    write_gguf(model, tok, path, quantize="Q8_1")  # another version of the file: checked again, and refused
    with pytest.raises(UserError, match="type Q8_1"):
        check_model_path(str(path))
    assert len(reads) == 2


def test_the_run_refuses_an_unloadable_gguf_before_any_model_loads(source, tmp_path, capsys, monkeypatch):
    from r2f_bench.cli import main
    from r2f_bench.engine import models

    model, tok = source
    path = write_gguf(model, tok, tmp_path / "q81.gguf", quantize="Q8_1")
    monkeypatch.setattr(models, "embedded_model", lambda *a, **k: pytest.fail("a model was built"))
    assert main(["--method", "fullgrad", "--task", "rwku", "--model", str(path), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: model") and "Q8_1" in err[0]


def test_a_first_layers_proxy_as_deep_as_the_model_is_refused_before_any_model_loads(source, tmp_path, capsys,
                                                                                       monkeypatch):
    """The depth comes from the file's metadata (and a folder's config.json); before, the
    range was checked only when the proxy was cut, after the model had been loaded twice."""
    from r2f_bench.cli import main
    from r2f_bench.engine import build
    from r2f_bench.engine.pretrained import decoder_layers

    from huggingface_hub import constants

    model, tok = source
    path = write_gguf(model, tok, tmp_path / "m.gguf")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # org/name is in no cache
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config.json").write_text('{"num_hidden_layers": 30}')
    assert (decoder_layers(str(path)), decoder_layers(str(tmp_path / "folder")), decoder_layers("org/name")) == (2, 30, None)
    monkeypatch.setattr(build, "hf_model", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(["--method", "r2f", "--task", "rwku", "--model", str(path), "--proxy", "first-layers:2",
                 "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == \
        f"error: --proxy first-layers:2: {path} has 2 decoder layers; keep between 1 and 1."


def test_a_cached_hub_models_depth_is_read_from_the_hub_cache(tmp_path, capsys, monkeypatch):
    """A hub model in the local hub cache has its depth checked before any model loads (before,
    only where the proxy was cut); an uncached one is left to the load (nothing is downloaded)."""
    from huggingface_hub import constants

    from r2f_bench.cli import main
    from r2f_bench.engine import build
    from r2f_bench.engine.pretrained import decoder_layers

    repo = tmp_path / "hub" / "models--org--deep"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("c0ffee")
    (repo / "snapshots" / "c0ffee").mkdir(parents=True)
    (repo / "snapshots" / "c0ffee" / "config.json").write_text('{"num_hidden_layers": 4}')
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert (decoder_layers("org/deep"), decoder_layers("org/uncached"), decoder_layers("not a name!")) == (4, None, None)
    monkeypatch.setattr(build, "hf_model", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(["--method", "r2f", "--task", "rwku", "--model", "org/deep", "--proxy", "first-layers:4",
                 "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: --proxy first-layers:4: org/deep has 4 decoder layers; keep between 1 and 3."
