"""The shipped base model loads, is small, and writes a tool call in a real sandbox. A tiny
SFT run on real demonstrations is tested in tests/integration/trainer/test_sft.py."""

import asyncio
from pathlib import Path

import torch

from fleetrl.config import HarnessSection
from fleetrl.envs.harness.loop import run_episode
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.trainer.sft import model_config
from fleetrl.types import SamplingParams

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()
BASE = Path(__file__).resolve().parents[3] / "fleetrl" / "model" / "assets" / "base"


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
