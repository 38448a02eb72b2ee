"""SFT for real: a tiny run on real demonstrations learns and writes a loadable,
deterministic checkpoint (two 30-step runs on demonstrations generated once per run)."""

import json

import pytest
import torch

from fleetrl.config import HarnessSection, RolloutSection, SftSection
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.model.checkpoint import init_model, load_pretrained
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.rollout.demos import generate_demos
from fleetrl.trainer.sft import STATE_FILE, model_config, train_sft

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()


@pytest.fixture(scope="module")
def demos():
    """The expert's demonstrations of 7 training tasks (by each plan `fleetrl sft` uses by
    default), through the rollout worker: sandboxes and the verifier. Only this module
    trains on them."""
    tasks = load_tasks(suite="micro", split="train")[:7]
    plans = SftSection().plans
    demos, stats = generate_demos(
        tasks, TOKENIZER, HarnessSection(), RolloutSection(), plans, progress=False
    )
    assert stats.kept == 7 * len(plans) == 21
    return demos


def tiny_run(demos, out, seed: int = 0):
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
