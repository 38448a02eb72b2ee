"""`fleetrl model init` and `fleetrl serve`: checkpoints written, and clean refusals."""

import pytest
import torch
import transformers
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.inference import server
from fleetrl.model.checkpoint import BUNDLED_MODELS, load_pretrained
from fleetrl.model.config import ModelConfig
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


def test_model_init_refuses_a_file_as_its_directory(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    for extra in ([], ["--force"]):
        result = runner.invoke(app, ["model", "init", str(afile), *extra])
        assert result.exit_code == 2, result.output
        assert "not a directory" in result.output and "Traceback" not in result.output
    assert afile.read_text() == "keep me"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--heads", "0"], "--heads"),
        (["--kv-heads", "0"], "--kv-heads"),
        (["--hidden", "-8", "--heads", "2"], "--hidden"),
        (["--hidden", "0"], "--hidden"),
        (["--layers", "0"], "--layers"),
        (["--moe", "--experts", "0"], "--experts"),
        (["--hidden", "6", "--heads", "2", "--kv-heads", "1"], "--hidden / --heads"),
    ],
)
def test_model_init_refuses_bad_sizes_naming_the_option(tmp_path, options, named):
    out = tmp_path / "model"
    result = runner.invoke(app, ["model", "init", str(out), *options])
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_model_init_moe_with_one_expert_routes_each_token_to_it(tmp_path):
    out = tmp_path / "one-expert"
    options = ["--moe", "--experts", "1", "--layers", "1", "--hidden", "32"]
    result = runner.invoke(app, ["model", "init", str(out), *options])
    assert result.exit_code == 0, result.output
    model = load_pretrained(out)
    assert (model.config.num_experts, model.config.num_experts_per_tok) == (1, 1)
    assert model(torch.tensor([[1, 2, 3]])).logits.shape[:2] == (1, 3)


def test_model_config_refuses_empty_sizes():
    # A checkpoint's config.json with zero layers would load and then fail at its first use.
    with pytest.raises(ValueError, match="num_hidden_layers"):
        ModelConfig(num_hidden_layers=0).validate()
    with pytest.raises(ValueError, match="moe_intermediate_size"):
        ModelConfig(num_experts=4, moe_intermediate_size=0).validate()


def test_a_checkpoint_with_no_heads_is_refused_on_reading(tmp_path):
    from fleetrl.model.checkpoint import CheckpointError, read_config

    fields = '"model_type": "qwen3", "num_attention_heads": 0, "hidden_size": 64'
    (tmp_path / "config.json").write_text("{" + fields + "}")
    with pytest.raises(CheckpointError, match=r"config\.json: num_attention_heads must be >= 1"):
        read_config(tmp_path)


@pytest.fixture
def no_server(monkeypatch):
    """Replace the server with a recorder, so a test never starts one: the calls it got."""
    calls = []
    monkeypatch.setattr(server, "serve", lambda checkpoint, **options: calls.append(checkpoint))
    return calls


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--port", "99999"], "--port"),
        (["--port", "-1"], "--port"),
        (["--max-model-len", "-5"], "--max-model-len"),
        (["--max-model-len", "8192"], "max_position_embeddings"),
        (["--max-batch-size", "0"], "--max-batch-size"),
        (["--max-batch-size", "-1"], "--max-batch-size"),
        (["--threads", "-3"], "--threads"),
        (["--record", "--session-ttl", "0"], "--session-ttl"),
        (["--record", "--group-size", "0"], "--group-size"),
        (["--store", "runs/x"], "--store needs --record"),
        (["--record", "--region", "a/b"], "--region"),
    ],
)
def test_serve_refuses_bad_options_before_serving(tiny_checkpoint, no_server, options, named):
    result = runner.invoke(app, ["serve", str(tiny_checkpoint), *options])
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output
    assert no_server == []


def test_serve_accepts_the_shipped_base_model(no_server):
    result = runner.invoke(app, ["serve", "base", "--max-model-len", "0"])
    assert result.exit_code == 0, result.output
    assert no_server == [BUNDLED_MODELS["base"]]


def test_serve_record_refuses_a_store_without_a_run(tiny_checkpoint, no_server, tmp_path):
    result = runner.invoke(
        app, ["serve", str(tiny_checkpoint), "--record", "--store", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert "no run there" in result.output and no_server == []


def test_serve_help_documents_recording():
    result = runner.invoke(app, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for option in ("--record", "--session-ttl", "--group-size", "--store", "--region"):
        assert option in result.output
