"""Fixtures shared by the tiers: the private cache, the tiny checkpoint, store locations.

    tests/unit         pure code, in this process (`make test-fast`, under a minute)
    tests/env          sandboxes, subprocesses (git, pytest, the CLI), SeaweedFS
    tests/integration  processes and training: the trainer loop, servers, benchmarks

Expensive fixtures are session-scoped and read-only for the tests that share them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fleetrl.model.checkpoint import init_model, save_pretrained
from fleetrl.model.config import ModelConfig
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.store.objectstore import ObjectStore, open_store


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Task repositories, verifier plugins and cached evaluations go to a temporary
    cache, never to the user's ~/.cache/fleetrl (subprocesses inherit it)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("FLEETRL_CACHE", str(tmp_path_factory.mktemp("fleetrl-cache")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random one-layer Qwen3 with the project tokenizer, in Hugging Face layout.

    Built once per run and shared: tests read it (load it, train from it into their own
    folders) and never write into it."""
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
    path = tmp_path_factory.mktemp("tiny-model")
    save_pretrained(init_model(config, seed=0), path)
    tokenizer.save(path)
    return path


@pytest.fixture
def without_pytest(monkeypatch: pytest.MonkeyPatch):
    """This process as if pytest were not installed, for the verifier's grader runner (a
    runtime-only install once lacked it). Yields the runner module."""
    import importlib.util

    from fleetrl.envs.verifier import runner

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else real(name, *a)
    )
    runner._runner_source.cache_clear()
    yield runner
    runner._runner_source.cache_clear()


# -- store locations ------------------------------------------------------------------------
# Store tests take `location` (or `new_location`) and run on the backend(s) that their tier's
# `store_backend` fixture names: a local folder in tests/unit/store, SeaweedFS (the
# `s3_server` fixture) in tests/env/store.


@dataclass
class Location:
    """Where one test's store lives: a URL plus the options to open it."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def open(self) -> ObjectStore:
        return open_store(self.url, self.storage_options)


@pytest.fixture
def new_location(
    request: pytest.FixtureRequest, store_backend: str, tmp_path: Path
) -> Callable[[], Location]:
    """Make fresh, empty store locations on the tier's backend."""
    if store_backend == "s3":
        server = request.getfixturevalue("s3_server")
        return lambda: Location(
            f"s3://{server.bucket}/{uuid.uuid4().hex}", server.storage_options()
        )
    counter = iter(range(1_000_000))
    return lambda: Location(f"file://{tmp_path}/store{next(counter)}")


@pytest.fixture
def location(new_location: Callable[[], Location]) -> Location:
    """One fresh, empty store location on the tier's backend."""
    return new_location()
