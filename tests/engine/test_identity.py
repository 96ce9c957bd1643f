import hashlib

from r2f_bench.engine.identity import content_id, identities


def test_a_local_file_is_its_content_and_any_other_spec_is_itself(tmp_path, monkeypatch):
    """A GGUF file by its absolute path, a relative one, a link of another name (a hub cache's
    snapshot) or a copy is one model: the hash of its bytes; rewritten, another."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "m.gguf").write_bytes(b"GGUF one")
    (tmp_path / "link.gguf").symlink_to(model)
    monkeypatch.chdir(tmp_path / "copy")
    first = content_id(str(model))
    assert first == "sha256:" + hashlib.sha256(b"GGUF one").hexdigest()[:16]
    assert content_id("m.gguf") == content_id("../m.gguf") == content_id("../link.gguf") == first
    model.write_bytes(b"GGUF two!")
    assert content_id(str(model)) != first
    for spec in ("embedded", "embedded:llama-h32-l2", "HuggingFaceTB/SmolLM2-135M-Instruct", "first-layers:8"):
        assert content_id(spec) == spec


def test_the_fields_a_key_holds_otherwise():
    """A hub model and the bundled data stay as written; a proxy is named only where it is read."""
    hub = {"model": "org/model", "proxy": "org/small", "data_dir": None}
    assert identities(hub, uses_proxy=True) == {}
    assert identities(hub, uses_proxy=False) == {"proxy": "embedded-proxy"}
    assert identities({**hub, "proxy": "embedded-proxy"}, uses_proxy=False) == {}


def test_an_input_the_method_does_not_read_is_keyed_at_its_default():
    """Gradient ascent at --views 3 is the work of gradient ascent at the default: one key, one row;
    plain NPO reads no retain items, NPO with a retain term does."""
    from r2f_bench.engine.config import unread_fields
    from r2f_bench.plugins import registry

    config = {"model": "org/model", "views": 3, "paraphraser": "hf:org/p", "retain_items": 8,
              "target_modules": ["q_proj"]}
    ga, npo = registry().method("grad_ascent"), registry().method("npo")
    assert identities(config, False, unread_fields(ga, ga.parse_params(), "none")) == {
        "proxy": "embedded-proxy", "views": 5, "paraphraser": "benchmark", "retain_items": 64, "target_modules": None}
    # the relearning attack (the default) relearns on the views past the first: they are read, whatever the method
    assert "views" not in identities(config, False, unread_fields(ga, ga.parse_params()))
    assert identities(config, False, unread_fields(npo, npo.parse_params()))["retain_items"] == 64
    assert "retain_items" not in identities(config, False, unread_fields(npo, npo.parse_params({"retain_weight": "1"})))
    assert identities({**config, "views": 5, "paraphraser": "benchmark", "retain_items": 64, "target_modules": None},
                      False, unread_fields(ga, ga.parse_params(), "none")) == {"proxy": "embedded-proxy"}


def test_a_model_folder_is_every_file_in_it(tmp_path):
    """Weights, configuration, tokenizer and the chat template all make the model; renaming the folder does not."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("model.safetensors", "config.json", "tokenizer.model"):
        (folder / name).write_bytes(name.encode())
    first = content_id(str(folder))
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs")  # hidden: not the model
    assert content_id(str(folder)) == first
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    second = content_id(str(folder))
    folder.rename(tmp_path / "renamed")
    assert first != second == content_id(str(tmp_path / "renamed"))


def test_a_local_paraphrase_model_is_its_content_and_a_hub_one_its_name(tmp_path):
    """Before: ``--paraphraser hf:DIR`` entered a key as typed, so two folders reached by one relative
    path were one job (a sweep skipped the second), and one folder by two paths two jobs."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"t5 weights")
    same = [identities({"paraphraser": f"hf:{tmp_path / name}"}, uses_proxy=True) for name in ("a", "b")]
    assert same[0] == same[1] == {"paraphraser": "hf:" + content_id(str(tmp_path / "a"))}
    (tmp_path / "b" / "model.safetensors").write_bytes(b"other weights")
    assert identities({"paraphraser": f"hf:{tmp_path / 'b'}"}, uses_proxy=True) != same[0]
    assert identities({"paraphraser": "hf:humarin/chatgpt_paraphraser_on_T5_base"}, uses_proxy=True) == {}
    assert identities({"paraphraser": "self"}, uses_proxy=True) == {}


def test_a_file_a_parameter_names_is_keyed_by_its_content(tmp_path):
    """Before: R2F's ``decoder_path`` entered the key as typed: a refitted decoder written over the
    same file was found done, and a copy elsewhere ran again."""
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.engine.plan import Plan

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "decoder.safetensors").write_bytes(b"decoder one")
    resolved = lambda name: Plan(RunConfig(method="r2f", task="rwku", limit=1, output=str(tmp_path / "out"),
                                           params={"decoder_path": str(tmp_path / name / "decoder.safetensors")}),
                                 progress=lambda m: None).resolved_params()["decoder_path"]
    first = resolved("a")
    assert first == resolved("b") == content_id(str(tmp_path / "a" / "decoder.safetensors"))
    (tmp_path / "a" / "decoder.safetensors").write_bytes(b"decoder refitted")
    assert resolved("a") != first
