"""`fleetrl model init` and `fleetrl serve`: checkpoints written, and clean refusals."""

import torch
import transformers
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import bundled_tokenizer

runner = CliRunner()


def test_model_init_writes_a_checkpoint_transformers_loads(tmp_path):
    out = tmp_path / "tiny"
    result = runner.invoke(app, ["model", "init", str(out), "--layers", "2", "--hidden", "64"])
    assert result.exit_code == 0, result.output
    ours = load_pretrained(out)
    ref = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    text = "def f(x):\n    return x + 1\n"
    ids = bundled_tokenizer().encode(text)
    assert hf_tokenizer(text)["input_ids"] == ids
    with torch.no_grad():
        diff = (ours(torch.tensor([ids])).logits - ref(torch.tensor([ids])).logits).abs().max()
    assert diff < 1e-4
    assert ours.config.eos_token_id == bundled_tokenizer().eos_id


def test_model_init_moe_and_refusals(tmp_path):
    out = tmp_path / "moe"
    result = runner.invoke(
        app, ["model", "init", str(out), "--moe", "--layers", "1", "--hidden", "64"]
    )
    assert result.exit_code == 0, result.output
    assert load_pretrained(out).config.is_moe
    again = runner.invoke(app, ["model", "init", str(out)])
    assert again.exit_code == 2 and "not empty" in again.output
    assert "Traceback" not in again.output
    bad = runner.invoke(app, ["model", "init", str(tmp_path / "x"), "--hidden", "65"])
    assert bad.exit_code == 2 and "divisible" in bad.output


def test_serve_rejects_a_directory_that_is_not_a_checkpoint(tmp_path):
    result = runner.invoke(app, ["serve", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a checkpoint directory" in result.output
    assert "Traceback" not in result.output
