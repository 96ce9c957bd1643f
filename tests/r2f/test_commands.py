"""``r2f-bench decoder``'s bad input: one line, before any model is built (before: a
traceback once the decoders had been fitted)."""

import pytest

from r2f_bench.cli import main


@pytest.mark.parametrize("option, message", [
    (["--compare", ""], "error: --compare names no row; choose from projection"),
    (["--compare", "projection,bogus"], "error: unknown --compare row 'bogus'; choose from projection"),
    (["--facts", "0"], "error: --facts is 0; evaluate on at least 1 held-out fact (default 30)."),
])
def test_decoder_eval_refuses_what_it_cannot_evaluate(option, message, capsys, monkeypatch):
    import r2f_bench.r2f.commands as commands

    monkeypatch.setattr(commands, "_run", lambda *a, **k: pytest.fail("prepared a run"))
    assert main(["decoder", "eval", *option]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)


def test_decoder_files_are_checked_before_any_run(tmp_path, capsys, monkeypatch):
    """Before: a missing --decoder failed once the model was built, and `fit --out DIR` only
    after the fit, naming --output."""
    import r2f_bench.r2f.commands as commands

    monkeypatch.setattr(commands, "_run", lambda *a, **k: pytest.fail("prepared a run"))
    assert main(["decoder", "eval", "--decoder", str(tmp_path / "typo.safetensors")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --decoder {tmp_path / 'typo.safetensors'} is not a file; "
                                               f"pass one `r2f-bench decoder fit --out` wrote.")
    assert main(["decoder", "fit", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"error: --out {tmp_path} is a directory; pass a file path")
    assert main(["--method", "r2f", "--task", "rwku", "--set", "decoder_path=typo.safetensors",
                 "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == ("error: parameter 'decoder_path' of method 'r2f' must be an existing "
                                               "file, got 'typo.safetensors'.")
