"""SFT: the schedule and batches, a tiny real run on real demonstrations, the `sft` command's
errors, and the base model the repository ships."""

import asyncio
import json
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from fleetrl.envs.harness import micro_harness, run_episode
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks import ensure_repo, load_tasks
from fleetrl.inference import Engine
from fleetrl.model import Tokenizer, bundled_tokenizer, init_model, load_pretrained
from fleetrl.trainer.demos import Demo, generate_demos
from fleetrl.trainer.sft import (
    STATE_FILE,
    SFTConfig,
    _batches,
    collate,
    lr_at,
    model_config,
    sft_loss,
    train_sft,
)
from fleetrl.trainer.sft_cli import sft
from fleetrl.types import SamplingParams

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()
BASE = Path(__file__).resolve().parents[3] / "fleetrl" / "model" / "assets" / "base"


@pytest.fixture(scope="module")
def demos():
    tasks = load_tasks(suite="micro", split="train")[:7]
    demos, stats = generate_demos(tasks, TOKENIZER, progress=False)
    assert stats.kept == 21
    return demos


def test_lr_warms_up_then_decays_by_cosine():
    config = SFTConfig(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, config) == pytest.approx(1e-4)
    assert lr_at(9, config) == pytest.approx(1e-3)
    assert lr_at(99, config) == pytest.approx(1e-4)
    middle = lr_at(10 + 89 // 2, config)
    assert 4e-4 < middle < 7e-4
    assert all(lr_at(s, config) >= lr_at(s + 1, config) for s in range(9, 99))


def test_collate_shifts_and_masks():
    short = Demo("a", "fix", [1, 2, 3], [0, 1, 1])
    long = Demo("b", "fix", [4, 5, 6, 7, 8], [0, 0, 1, 0, 1])
    batch = collate([short, long], pad_id=0)
    assert batch.inputs.tolist() == [[1, 2, 0, 0], [4, 5, 6, 7]]
    assert batch.targets.tolist() == [[2, 3, 0, 0], [5, 6, 7, 8]]
    assert batch.mask.tolist() == [[1, 1, 0, 0], [0, 1, 0, 1]]


def test_batches_cover_an_epoch_once_and_group_similar_lengths():
    demos = [Demo(str(i), "fix", [1] * (5 + (i * 37) % 50), [1]) for i in range(203)]
    batches = _batches(demos, batch_size=8, seed=0)
    epoch = [next(batches) for _ in range(203 // 8)]
    ids = [d.task_id for batch in epoch for d in batch]
    assert len(ids) == len(set(ids)) == 200  # the 3 left over sit out this epoch
    spread = [max(len(d.token_ids) for d in b) - min(len(d.token_ids) for d in b) for b in epoch]
    assert sum(spread) / len(spread) < 10  # vs ~40 for random batches of these lengths
    again = _batches(demos, batch_size=8, seed=0)
    assert [d.task_id for d in next(again)] == [d.task_id for d in epoch[0]]


def test_loss_ignores_padding_and_context_tokens():
    model = init_model(model_config(TOKENIZER, hidden=32, layers=1), seed=0)
    demo = Demo("a", "fix", [5, 6, 7, 8, 9], [0, 0, 1, 1, 1])
    longer = Demo("b", "fix", [5, 6, 7, 8, 9, 10, 11, 12], [0, 0, 0, 0, 0, 0, 0, 1])
    alone = sft_loss(model, collate([demo], TOKENIZER.pad_id))
    with torch.no_grad():
        batch = collate([demo, longer], TOKENIZER.pad_id)
        logits = model(batch.inputs).logits
        logprobs = torch.log_softmax(logits, -1).gather(-1, batch.targets[..., None])[..., 0]
    padded_row = -(logprobs[0] * batch.mask[0]).sum() / 3
    assert padded_row.item() == pytest.approx(alone.item(), abs=1e-5)


def test_bf16_loss_is_close_to_float32_and_has_float32_gradients():
    model = init_model(model_config(TOKENIZER, hidden=32, layers=1), seed=0)
    batch = collate([Demo("a", "fix", [5, 6, 7, 8, 9], [0, 0, 1, 1, 1])], TOKENIZER.pad_id)
    fp32 = sft_loss(model, batch)
    bf16 = sft_loss(model, batch, bf16=True)
    assert bf16.dtype == torch.float32
    assert bf16.item() == pytest.approx(fp32.item(), rel=2e-2)
    bf16.backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())


def tiny_run(demos, out: Path, seed: int = 0):
    model = init_model(model_config(TOKENIZER, hidden=64, layers=2), seed=seed)
    config = SFTConfig(steps=30, batch_size=8, lr=1e-2, warmup_steps=3, seed=seed, log_every=5)
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


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(sft)
    return app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "--steps"),
        (["--lr", "0"], "--lr"),
        (["--hidden", "60"], "--hidden"),
        (["--init", "nowhere"], "not a checkpoint directory"),
    ],
)
def test_sft_cli_refuses_bad_options_cleanly(tmp_path, args, message):
    result = CliRunner().invoke(cli(), [str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_sft_cli_refuses_a_non_empty_output_and_has_help(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    result = CliRunner().invoke(cli(), [str(tmp_path)])
    assert result.exit_code == 2 and "--force" in result.output
    assert "demonstrations" in CliRunner().invoke(cli(), ["--help"]).output


def test_sft_cli_trains_a_tiny_model(tmp_path):
    args = ["--steps", "2", "--batch-size", "2", "--hidden", "32", "--layers", "1"]
    args += ["--max-tasks", "1", "--copies", "1", "--threads", "1"]
    args += ["--demos-cache", str(tmp_path / "cache")]
    result = CliRunner().invoke(cli(), [str(tmp_path / "out"), *args])
    assert result.exit_code == 0, result.output
    assert "4 demonstrations kept of 4 (3 graded by the verifier, 0 dropped)" in result.output
    assert load_pretrained(tmp_path / "out").config.hidden_size == 32


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
    harness = micro_harness()
    harness.max_turns, harness.sampling = 1, SamplingParams(temperature=0.0)

    async def first_turn():
        engine = Engine(model, max_batch_size=1)
        try:
            with open_sandbox(ensure_repo(task)) as sandbox:
                return await run_episode(engine, tokenizer, sandbox, task, harness)
        finally:
            await engine.close()

    episode = asyncio.run(first_turn())
    assert episode.trajectory.tool_errors == 0
    assert [r.name for r in episode.tool_log] in (["read_file"], ["list_dir"])
