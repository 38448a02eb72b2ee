"""Fixtures shared by the whole suite."""

import pytest

from fleetrl.model.checkpoint import init_model, save_pretrained
from fleetrl.model.config import ModelConfig
from fleetrl.model.tokenizer import bundled_tokenizer


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Task repositories, verifier plugins and cached evaluations go to a temporary
    cache, never to the user's ~/.cache/fleetrl (subprocesses inherit it)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("FLEETRL_CACHE", str(tmp_path_factory.mktemp("fleetrl-cache")))
    yield
    patch.undo()


@pytest.fixture
def tiny_checkpoint(tmp_path):
    """A random one-layer Qwen3 with the project tokenizer, in Hugging Face layout."""
    tokenizer = bundled_tokenizer()
    config = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    path = tmp_path / "tiny-model"
    save_pretrained(init_model(config, seed=0), path)
    tokenizer.save(path)
    return path
