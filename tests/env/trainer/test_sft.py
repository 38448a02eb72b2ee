"""SFT for real: a tiny run on real demonstrations learns and writes a loadable,
deterministic checkpoint; the shipped base model loads and writes a tool call."""

import asyncio
import json
from pathlib import Path

import pytest
import torch

from fleetrl.config import HarnessSection, RolloutSection, SftSection
from fleetrl.envs.harness import run_episode
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.suites import load_tasks
from fleetrl.envs.workspace import ensure_repo
from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import init_model, load_pretrained
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.rollout.demos import generate_demos
from fleetrl.trainer.sft import STATE_FILE, model_config, train_sft
from fleetrl.types import SamplingParams

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()
BASE = Path(__file__).resolve().parents[3] / "fleetrl" / "model" / "assets" / "base"


@pytest.fixture(scope="module")
def demos():
    tasks = load_tasks(suite="micro", split="train")[:7]
    demos, stats = generate_demos(
        tasks, TOKENIZER, HarnessSection(), RolloutSection(), progress=False
    )
    assert stats.kept == 21
    return demos


def tiny_run(demos, out: Path, seed: int = 0):
    model = init_model(model_config(TOKENIZER, hidden=64, layers=2), seed=seed)
    config = SftSection(steps=30, batch_size=8, lr=1e-2, warmup_steps=3, seed=seed, log_every=5)
    result = train_sft(model, demos, TOKENIZER, out, config, progress=False, echo=lambda _: None)
    return model, result


def test_tiny_sft_run_learns_and_writes_a_loadable_checkpoint(demos, tmp_path):
    model, result = tiny_run(demos, tmp_path / "a")
    first, last = result.losses[0][1], result.final_loss
    assert result.steps == 30 and len(result.losses) == 6
    assert last < 0.4 * first, result.losses
    loaded = load_pretrained(tmp_path / "a")
    assert Tokenizer.from_pretrained(tmp_path / "a").encode("x = 1") == TOKENIZER.encode("x = 1")
    ids = torch.tensor([demos[0].token_ids])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    state = json.loads((tmp_path / "a" / STATE_FILE).read_text())
    assert state["config"]["steps"] == 30 and state["result"]["final_loss"] == last
    # Deterministic for a seed: a second run gives the same weights.
    again, _ = tiny_run(demos, tmp_path / "b")
    assert all(
        torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters(), strict=True)
    )


def test_shipped_base_model_loads_is_small_and_writes_a_tool_call():
    files = {path.name for path in BASE.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= files
    assert sum(path.stat().st_size for path in BASE.iterdir()) <= 30 * 1024 * 1024
    model = load_pretrained(BASE)
    assert model.config == model_config(TOKENIZER)
    tokenizer = Tokenizer.from_pretrained(BASE)
    assert tokenizer.backend.to_str() == TOKENIZER.backend.to_str()
    assert "fleetrl sft" in (BASE / "README.md").read_text()
    task = load_tasks(suite="micro", split="heldout")[0]
    harness = HarnessSection(max_turns=1)
    greedy = SamplingParams(temperature=0.0)

    async def first_turn():
        engine = Engine(model, max_batch_size=1)
        try:
            with open_sandbox(ensure_repo(task)) as sandbox:
                return await run_episode(engine, tokenizer, sandbox, task, harness, greedy)
        finally:
            await engine.close()

    episode = asyncio.run(first_turn())
    assert episode.trajectory.tool_errors == 0
    assert [r.name for r in episode.tool_log] in (["read_file"], ["list_dir"])
