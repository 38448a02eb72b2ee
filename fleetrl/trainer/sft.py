"""Supervised fine-tuning (SFT) on expert demonstrations: how the shipped base model is made.

    demos (token ids + loss mask, as the harness recorded them)
        ─▶ shuffled batches of whole episodes, right-padded          (an epoch = every demo once)
        ─▶ forward ─▶ cross-entropy on the expert's tokens only      (loss_mask == 1)
        ─▶ backward ─▶ clip ─▶ AdamW, linear warmup then cosine decay
        ─▶ every `val_every` steps: the loss on validation demos     (stop at a plateau)
        ─▶ Hugging Face checkpoint (weights, tokenizer, sft.json with the run's figures)

Only the replies (tool calls and their closing `<|im_end|>`) are targets: the prompt and the
tool results are context the model reads, never text it should learn to write. The loss is
the mean over target tokens of the batch, so long and short episodes weigh per token.

The validation loss is the same loss over demonstrations of tasks the model never trains
on. With `patience`, training stops once that many validation losses in a row fail to
beat the best one, and the best weights are saved: SFT until validation loss stops
improving, which is how the shipped base model is made. `max_seconds` stops on wall time
instead (continued SFT at the same compute as an RL run).

Contract: the same demos, config (`fleetrl.config.SftSection`), seed and thread count give
the same weights on one machine (no dropout; batches are drawn from a seeded generator).
The model trains in float32. Demos come from `fleetrl.rollout.demos`; the `fleetrl sft`
command's job is `fleetrl.orchestrate.sft`. Ctrl-C stops training once the step in progress
is done and saves as at the end (`stopped`: "interrupted"); a second Ctrl-C interrupts at
once. Not covered: packing several episodes into one row, several processes, resuming
with the optimizer's state (start again with `init` pointing at a saved checkpoint).
"""

from __future__ import annotations

import json
import math
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from fleetrl.config import SftSection
from fleetrl.model.checkpoint import save_pretrained
from fleetrl.model.config import ModelConfig
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Demo

STATE_FILE = "sft.json"  # written beside the weights: config, data and loss figures of the run
BUCKET = 8  # batches per length-sorting window (see _batches)


@dataclass
class SFTResult:
    """What a run did, also written to `sft.json` in the checkpoint."""

    steps: int
    final_loss: float  # mean target-token loss over the last `log_every` steps
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, mean loss) per log
    val_losses: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)
    best_step: int | None = None  # step of the lowest validation loss (None: not measured)
    kept_step: int = 0  # the step whose weights were saved: best_step with patience, else last
    stopped: str = "steps"  # why training ended: "steps", "plateau", "time" or "interrupted"
    target_tokens: int = 0  # tokens trained on (loss_mask == 1), all steps together
    duration_s: float = 0.0
    parameters: int = 0


@dataclass
class Batch:
    """B right-padded episodes for teacher forcing. Shapes: [B, T], T = longest - 1."""

    inputs: torch.Tensor  # token ids fed to the model (episode[:-1]; pad where absent)
    targets: torch.Tensor  # the next token at each position (episode[1:])
    mask: torch.Tensor  # 1.0 where the target is an expert token, 0.0 elsewhere and on pads


def model_config(tokenizer: Tokenizer, hidden: int = 256, layers: int = 4) -> ModelConfig:
    """A fresh model's shape. The defaults are the shipped base model: Qwen3, 4 layers of
    width 256, 4 heads sharing 2 key/value heads, ~3.4 M parameters (~14 MB in float32),
    the tokenizer's vocabulary, tied embeddings."""
    return ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_id,
    )


def lr_at(step: int, config: SftSection) -> float:
    """Learning rate of 0-based `step`: linear warmup (at most steps - 1 long), then cosine
    down to lr * min_lr_ratio at the last step."""
    warmup = min(config.warmup_steps, config.steps - 1)
    if step < warmup:
        return config.lr * (step + 1) / warmup
    span = max(config.steps - warmup - 1, 1)
    progress = min((step - warmup) / span, 1.0)
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def collate(demos: list[Demo], pad_id: int) -> Batch:
    """Pad episodes to the longest and shift by one: position t predicts token t + 1."""
    width = max(len(d.token_ids) for d in demos) - 1
    inputs = torch.full((len(demos), width), pad_id, dtype=torch.long)
    targets = torch.full((len(demos), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(demos), width))
    for row, demo in enumerate(demos):
        n = len(demo.token_ids) - 1
        inputs[row, :n] = torch.tensor(demo.token_ids[:-1])
        targets[row, :n] = torch.tensor(demo.token_ids[1:])
        mask[row, :n] = torch.tensor(demo.loss_mask[1:], dtype=torch.float32)
    return Batch(inputs, targets, mask)


def sft_loss(model: Qwen3, batch: Batch, bf16: bool = False) -> torch.Tensor:
    """Mean cross-entropy of the expert's tokens (a scalar); padding sits after every real
    token of its row, so causal attention keeps it from influencing them. `bf16` runs the
    forward under bfloat16 autocast; the loss itself is computed in float32, and logits
    only at the expert's tokens (the rest of a demonstration is never scored)."""
    device = batch.inputs.device.type
    at = batch.mask.bool()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        logits = model(batch.inputs, logits_at=at).logits  # [N, V]
    per_token = F.cross_entropy(logits.float(), batch.targets[at], reduction="none")
    return per_token.sum() / batch.mask.sum().clamp(min=1.0)


def by_length(demos: list[Demo], size: int, pad_id: int) -> Iterator[Batch]:
    """`demos` collated `size` at a time, shortest first, so each batch pads little."""
    ordered = sorted(demos, key=lambda d: len(d.token_ids))
    for start in range(0, len(ordered), size):
        yield collate(ordered[start : start + size], pad_id)


def backward_in_micro_batches(
    model: Qwen3, demos: list[Demo], pad_id: int, micro_batch_size: int, bf16: bool = False
) -> tuple[float, int]:
    """Backpropagate the batch's mean cross-entropy (`sft_loss` over all of `demos`) a few
    episodes at a time, which is faster on a CPU (small activations stay in cache) and
    gives the same gradient; returns the loss and the number of target tokens."""
    total = sum(sum(d.loss_mask[1:]) for d in demos)
    loss_sum = 0.0
    for batch in by_length(demos, micro_batch_size, pad_id):
        loss = sft_loss(model, batch, bf16) * (batch.mask.sum() / max(total, 1))
        loss.backward()
        loss_sum += loss.item()
    return loss_sum, total


@torch.no_grad()
def validation_loss(model: Qwen3, demos: list[Demo], pad_id: int, batch_size: int) -> float:
    """Mean cross-entropy of the expert's tokens over all of `demos` (weighted per token,
    like the training loss), without touching the weights."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0.0
    for batch in by_length(demos, batch_size, pad_id):
        weight = batch.mask.sum().item()
        total += sft_loss(model, batch).item() * weight
        tokens += weight
    model.train(was_training)
    return total / max(tokens, 1.0)


def _batches(demos: list[Demo], batch_size: int, seed: int) -> Iterator[list[Demo]]:
    """Endless batches: each epoch a fresh seeded permutation of all demos. Within windows
    of BUCKET batches, demos of similar length share a batch (padding cost ~17% of the
    compute without it, ~3% with it); the batches of a window come in random order."""
    rng = random.Random(seed)
    while True:
        order = list(range(len(demos)))
        rng.shuffle(order)
        if len(order) < batch_size:  # fewer demos than a batch: every step takes them all
            yield [demos[j] for j in order]
            continue
        window = batch_size * BUCKET
        for start in range(0, len(order), window):
            chunk = sorted(order[start : start + window], key=lambda j: len(demos[j].token_ids))
            batches = [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
            rng.shuffle(batches)
            yield from ([demos[j] for j in batch] for batch in batches if len(batch) == batch_size)


def _optimizer(model: Qwen3, config: SftSection) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (norm gains stay free, as is customary)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)


def save_checkpoint(
    model: Qwen3, tokenizer: Tokenizer, path: Path, state: dict[str, object]
) -> None:
    """Write a loadable Hugging Face checkpoint plus `sft.json` describing the run."""
    save_pretrained(model, path)
    tokenizer.save(path)
    (path / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


@contextmanager
def _ctrl_c_ends_the_step() -> Iterator[Callable[[], bool]]:
    """Yield a check for "was Ctrl-C pressed?": while inside, the first SIGINT only asks
    training to stop after the step in progress (so the weights saved are those of whole
    steps) and the second one raises KeyboardInterrupt as usual. Signals reach only the
    main thread; elsewhere the check is always False."""
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set
        return

    def ask(signum: int, frame: object) -> None:
        asked.set()
        signal.signal(signal.SIGINT, previous)

    previous = signal.signal(signal.SIGINT, ask)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def train_sft(
    model: Qwen3,
    demos: list[Demo],
    tokenizer: Tokenizer,
    out: Path,
    config: SftSection,
    about: dict[str, object] | None = None,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    val_demos: list[Demo] | None = None,
) -> SFTResult:
    """Fine-tune `model` on `demos` in place and save it to `out` (HF layout).

    `about` (e.g. the command and the demo statistics) is recorded in `sft.json` with the
    config and the loss curves; `echo` receives the periodic loss lines. `val_demos` give
    the validation loss every `config.val_every` steps (and the plateau to stop at, with
    `config.patience`).
    """
    if not demos:
        raise ValueError("no demonstrations to train on")
    torch.manual_seed(config.seed)
    model.train()
    optimizer = _optimizer(model, config)
    batches = _batches(demos, config.batch_size, config.seed)
    result = SFTResult(steps=0, final_loss=float("nan"))
    result.parameters = sum(p.numel() for p in model.parameters())
    window: list[float] = []
    start = time.monotonic()
    best_loss, best_state, misses = float("inf"), None, 0
    bar_to_beat = float("inf")  # a loss counts as progress below this (min_delta)

    def validate(step: int) -> bool:
        """Record the validation loss after `step` steps; True when training should stop."""
        nonlocal best_loss, best_state, misses, bar_to_beat
        loss = validation_loss(model, val_demos or [], tokenizer.pad_id, config.batch_size)
        result.val_losses.append((step, loss))
        if loss < best_loss:
            best_loss, result.best_step = loss, step
            if config.patience:
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if loss < bar_to_beat:
            misses, bar_to_beat = 0, loss * (1 - config.min_delta)
        else:
            misses += 1
        echo(f"step {step}/{config.steps}  validation loss {loss:.4f}  (best {best_loss:.4f})")
        return bool(config.patience) and misses >= config.patience

    validating = bool(val_demos) and config.val_every > 0
    if validating:
        validate(0)

    def state() -> dict[str, object]:
        return {"about": about or {}, "config": config.model_dump(), "result": asdict(result)}

    columns = [
        TextColumn("sft"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TimeRemainingColumn(),
    ]
    with (
        Progress(*columns, disable=not progress, transient=True) as bar,
        _ctrl_c_ends_the_step() as interrupted,
    ):
        bar_task = bar.add_task("sft", total=config.steps, loss="-")
        for step in range(config.steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, config)
            optimizer.zero_grad(set_to_none=True)
            loss, tokens = backward_in_micro_batches(
                model, next(batches), tokenizer.pad_id, config.micro_batch_size, config.bf16
            )
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            window.append(loss)
            result.steps = step + 1
            result.target_tokens += tokens
            bar.update(bar_task, advance=1, loss=f"{loss:.3f}")
            if result.steps % config.log_every == 0 or result.steps == config.steps:
                mean = sum(window) / len(window)
                result.losses.append((result.steps, mean))
                result.final_loss, window = mean, []
                elapsed = time.monotonic() - start
                echo(
                    f"step {result.steps}/{config.steps}  loss {mean:.4f}  "
                    f"lr {lr_at(step, config):.2e}  {elapsed:.0f} s"
                )
            every = config.save_every
            if every and result.steps % every == 0 and result.steps < config.steps:
                result.duration_s, result.kept_step = time.monotonic() - start, result.steps
                save_checkpoint(model, tokenizer, out / f"step-{result.steps:06d}", state())
            last = result.steps == config.steps
            if (
                validating
                and (result.steps % config.val_every == 0 or last)
                and validate(result.steps)
            ):
                result.stopped = "plateau"
                break
            if config.max_seconds and time.monotonic() - start >= config.max_seconds:
                result.stopped = "time"
                break
            if interrupted():
                result.stopped = "interrupted"
                echo(f"interrupted after step {result.steps}: saving the weights")
                break
    result.duration_s = time.monotonic() - start
    result.kept_step = result.steps
    if best_state is not None:  # early stopping keeps the best validation loss's weights
        model.load_state_dict(best_state)
        result.kept_step = result.best_step or 0
    model.eval()
    save_checkpoint(model, tokenizer, out, state())
    return result
