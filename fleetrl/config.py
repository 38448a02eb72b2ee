"""The run configuration of `fleetrl train`: a typed tree, loaded from a short TOML file.

Every knob has a default that works on a 2-core laptop with the shipped base model, so an
empty file (or none) is a valid run. Unknown keys, wrong types and impossible combinations
are refused with an error naming the key (`trainer.lr: ...`). The fully resolved config is
written to `runs/NAME/config.toml`. This module imports neither torch nor the rest of
fleetrl, so checking a config is instant.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the key to change."""


RUN_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # one folder inside runs/: no '/', no '..'


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSection(_Section):
    path: str = "base"
    """Checkpoint directory to start from; `base` is the shipped base model."""


class TasksSection(_Section):
    suite: str = "micro"
    """Bundled task suite to train on (ignored when `tasks_dir` is set)."""
    split: str = "train"
    """Split of the suite (or of the task folder) to train on."""
    tasks_dir: str | None = None
    """A task folder written by `fleetrl tasks make`, instead of a bundled suite. Relative
    in a config file: to the file's folder."""
    skip_solved: str | None = None
    """An evaluation of the starting model on `split` (the JSON of `fleetrl eval MODEL
    --split train --samples K --json`): RL does not draw the tasks it passed in all K
    samples, whose groups would all pass and carry no signal (offline difficulty
    filtering). SFT and evaluations are not affected. Relative in a config file: to the
    file's folder. Empty (`--set tasks.skip_solved=`): off, as when unset."""

    @field_validator("tasks_dir", "skip_solved")
    @classmethod
    def _empty_is_unset(cls, value: str | None) -> str | None:
        return value or None


# The suites that summarise by default (`harness.summarise_at` unset), at this fraction.
SUMMARISE_AT = {"long": 0.8}


class HarnessSection(_Section):
    """Prompting and budgets of one agent episode (`fleetrl.envs.harness.loop`). The defaults are
    the preset of the bundled `micro` suite and the small models trained on it; SFT,
    evaluation and RL all use them."""

    system_prompt: str = "Fix the bug. Tools: read_file, edit_file, run, finish."
    """System turn of every episode (empty: none)."""
    describe_tools: bool = False
    """List the tool specs in the system prompt (Qwen3 style); the micro models learn the
    tools from demonstrations instead."""
    task_template: str = "{problem_statement}"
    """The user turn; `{problem_statement}` is replaced by the task's."""
    max_turns: int = Field(6, ge=1)
    """Assistant replies per episode."""
    max_tokens: int = Field(512, ge=1)
    """Sampled tokens per episode, all turns together."""
    max_reply_tokens: int = Field(128, ge=1)
    """Sampled tokens per reply."""
    max_context: int = Field(1024, ge=16)
    """Tokens in the context window (prompt, replies, tool results); it sizes the engine."""
    wall_s: float = Field(60.0, gt=0)
    """Wall time per episode, checked between turns."""
    max_output_chars: int = Field(1000, ge=16)
    """Longer tool results keep their head and tail."""
    run_timeout_s: float = Field(10.0, gt=0)
    """Default and ceiling of the `run` tool's timeout."""
    max_file_bytes: int = Field(1 << 20, ge=1)
    """read_file / edit_file refuse larger files."""
    summarise_at: float | None = Field(None, ge=0, le=1)
    """Self-summarisation: when the next turn would take the context past this fraction of
    `max_context`, the policy is asked for a summary (`summary_prompt`, trained like any
    reply) and goes on in a fresh context: system prompt, task, summary (`resume_template`;
    the last tool result is not carried over). 0: off, the episode ends at `context_full`;
    unset: the suite's default (SUMMARISE_AT on `long`, off elsewhere)."""
    max_segments: int = Field(4, ge=1)
    """Context windows per episode with summarisation: the first, and one per summary."""
    max_summary_tokens: int = Field(128, ge=8)
    """Sampled tokens per summary."""
    summary_prompt: str = "Your context is full. Write notes for yourself: the facts you still need (file paths, names, values, lines) and what is left to do."  # noqa: E501
    """The user turn asking for a summary."""
    resume_template: str = Field("Your notes from before:\n{summary}", pattern=r"\{summary\}")
    """The user turn that opens the next context window; `{summary}` is the summary."""
    truncate: bool = False
    """Drop the oldest turns until the next fits instead of ending at `context_full` (a
    benchmark arm, `fleetrl bench horizon`); off while summarising."""

    def summary_limit(self, suite: str) -> int | None:
        """Tokens of context past which a task of `suite` is summarised; None: never."""
        fraction = SUMMARISE_AT.get(suite, 0.0) if self.summarise_at is None else self.summarise_at
        return int(fraction * self.max_context) if fraction > 0 else None


class RolloutSection(_Section):
    group_size: int = Field(8, ge=2)
    """Samples per task drawn together; advantages compare samples of one group."""
    max_concurrent_groups: int = Field(8, ge=1)
    """Groups a region runs at once (C of the admission gate)."""
    explore_rounds: int = Field(0, ge=0)
    """A group in which every sample failed is drawn again, up to this many times, until
    one succeeds; the last draw is the group handed in. The hard tasks a group fails whole
    (and dynamic sampling skips) then give their rare successes, at the cost of the
    discarded draws' rollout time."""
    guide_failed_groups: bool = False
    """A group in which every sample failed (after any explore rounds) gets one sample
    replaced by the episode of the task's guide (the scripted expert on micro tasks, the
    gold-patch guide on a task folder's, inside mini-swe-agent its bash form: all read the
    gold patch), verified like any other; the trainer learns it off-policy at importance
    weight 1 (LUFFY-style guidance).
    Uses the train split's gold patches, which plain RL never sees: say so when comparing
    against SFT. Dense models only (docs/trainer.md)."""
    guide_recovery: bool = False
    """With `guide_failed_groups`: where a failed sample had an edit refused before any
    was applied, the guide finishes that sample instead of starting afresh: its replies
    up to the refusal are replayed (masked out of the loss), then the guide sends the
    correct edit, checks and finishes. Teaches recovery from the policy's own mistakes;
    the harness needs room for the guide's turns after the refusal (the expert's 3)."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature of rollouts and evaluations; the trainer computes its logprobs
    at the temperature each segment was sampled at. 0: greedy, for evaluation only (its
    logprobs are those of temperature 1; the trainer refuses it)."""
    sandbox_backend: Literal["bwrap", "local"] = "bwrap"
    """Where tools run: `bwrap` (isolated); `local` only for development."""
    sandbox_wall_s: float = Field(30.0, gt=0)
    """Default wall-clock limit of one command in an episode's sandbox."""
    sandbox_memory_mb: int = Field(1024, ge=64)
    """RAM of one command in an episode's sandbox, all its processes together."""
    max_concurrent_verify: int = Field(2, ge=1)
    """Gradings at once per region (each runs pytest in a sandbox)."""
    verify_timeout_s: float = Field(60.0, gt=0)
    """Wall-time limit of the hidden tests of one grading."""
    threads: int = Field(1, ge=1)
    """CPU threads of a region's engine (torch's; vLLM's worker is bound to this many
    cores)."""
    engine: Literal["fleetrl", "vllm"] = "fleetrl"
    """What samples: fleetrl's own engine (PyTorch, in process), or vLLM (`pip install
    fleetrl[vllm]`; its own processes, weights swapped in place from the store). Both
    give each token's logprob at the sampling temperature and its policy version
    (`fleetrl.inference.backends`)."""
    engine_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """The dtype the engine serves in; the trainer keeps float32 masters either way.
    auto: float32 for fleetrl's engine, bfloat16 for vLLM (as production serves)."""
    env_latency_s: float = Field(0.0, ge=0)
    """Benchmarks only: simulated environment wait per tool turn (log-normal, this mean)."""
    harness: Literal["fleetrl", "mini-swe-agent"] = "fleetrl"
    """The agent harness of rollouts: fleetrl's own (`fleetrl.envs.harness`), or
    mini-swe-agent as published (`pip install fleetrl[mswe]`; its agent loop, parser and
    prompts, bash in the sandbox, `fleetrl.rollout.mswe`), its episodes recorded token by
    token through an endpoint the region serves itself. The harness section's budgets
    apply to both (turns, reply tokens, wall time, a command's timeout, output cut)."""

    def check_installed(self) -> None:
        """Refuse an engine or harness whose package is missing, naming the extra."""
        for knob, value, module, extra in (
            ("engine", self.engine, "vllm", "vllm"),
            ("harness", self.harness, "minisweagent", "mswe"),
        ):
            if value != "fleetrl" and importlib.util.find_spec(module) is None:
                raise ConfigError(
                    f"rollout.{knob} = {value} needs the {module} package: "
                    f"pip install 'fleetrl[{extra}]' (or set rollout.{knob} = fleetrl)"
                )

    @model_validator(mode="after")
    def _harness_fits(self) -> RolloutSection:
        if self.harness == "mini-swe-agent" and self.guide_recovery:
            raise ValueError(
                "rollout.guide_recovery replays fleetrl's own tool calls: set it to false "
                "with rollout.harness = mini-swe-agent (rollout.guide_failed_groups works)"
            )
        if self.harness == "mini-swe-agent" and self.env_latency_s:
            raise ValueError("rollout.env_latency_s is fleetrl's harness only: set it to 0")
        return self


class TrainerSection(_Section):
    steps: int = Field(6, ge=1)
    """Trainer steps: one batch each, and one policy version published after each (with
    `minibatches` > 1 a step takes that many optimizer steps). The default is a short run;
    `make demo` takes 12 (the `demo` preset, chosen on `val`: docs/benchmarks.md)."""
    mode: Literal["groups", "online"] = "groups"
    """groups: simulation RL, group-relative advantages over a task's samples. online:
    real-time RL from served sessions (`fleetrl serve --store`), one sample per prompt,
    the advantage taken against a running mean of its task's rewards (docs/realtime.md)."""
    groups_per_step: int = Field(8, ge=1)
    """Groups per step (P); a batch is P x group_size samples."""
    online_sessions: int = Field(16, ge=1)
    """online: sessions per step: a version every N sessions."""
    online_interval_s: float = Field(600.0, gt=0)
    """online: a step also trains fewer sessions once this long passed since the last one
    (at least one version every T seconds while sessions arrive)."""
    baseline_decay: float = Field(0.8, ge=0, lt=1)
    """online: a task's baseline after each of its rewards r: d * baseline + (1 - d) * r."""
    minibatches: int = Field(2, ge=1)
    """PPO minibatches per batch: the proximal logprobs are computed once, then each part
    takes its own optimizer step, so from the second on the ratio π_θ/π_prox moves away
    from 1 and the clip acts. 1: one update per batch (the ratio stays 1)."""
    dynamic_sampling: bool = True
    """Fill each batch with groups that carry signal (reward variance): groups without it
    are skipped as they arrive, counted, and given back to the admission budget (DAPO).
    Off: a step takes the next P groups and trains on those with signal."""
    max_skip_batches: int = Field(2, ge=1)
    """With dynamic sampling, a step skips at most this many x P groups without signal,
    then trains on the informative groups it has (fewer than P, or none), so a policy
    that fails or solves every task still steps."""
    max_staleness: int = Field(1, ge=0)
    """Versions a token may lag the trainer; older groups are dropped (0: synchronous)."""
    lr: float = Field(4e-5, gt=0)
    """AdamW learning rate of the weights (the final norm's gain too, unless
    `output_norm_lr` is set). On the shipped base model 1e-4 and above made held-out
    pass@1 worse within 24 steps (docs/benchmarks.md)."""
    output_norm_lr: float | None = Field(None, gt=0)
    """Learning rate of the final norm's gain, which scales every output logit (per hidden
    dimension, an inverse temperature); unset, it learns at `lr` like the rest. At 5e-2 it
    rises 1.34 -> 1.52 in 6 steps, which only sharpens: with each model evaluated at the
    temperature it does best at on val, that was no better than leaving it at `lr`
    (docs/benchmarks.md, "Output-norm learning rate")."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping."""
    advantage: Literal["drgrpo", "grpo", "rloo"] = "drgrpo"
    """Group advantage estimator."""
    clip_low: float = Field(0.2, ge=0, lt=1)
    """PPO ratio clipped below at 1 - clip_low."""
    clip_high: float = Field(0.28, ge=0)
    """PPO ratio clipped above at 1 + clip_high."""
    correction: Literal["tis", "mis", "none"] = "tis"
    """Behaviour/proximal importance weight: truncated (tis) or masked (mis)."""
    correction_cap: float = Field(2.0, gt=1)
    """C of TIS / MIS."""
    kl_coef: float = Field(0.0, ge=0)
    """β of a k3 KL penalty to the starting model (0: none, no reference model kept)."""
    router_replay: bool = True
    """MoE: recompute logprobs with the experts the engine routed each token to (rollout
    routing replay). Off, the trainer routes by itself, and wherever its router picks
    other experts than the engine's the token's logprob drifts (`fleetrl bench mismatch`
    measures both). Segments an engine returned without routes are never replayed."""
    aggregation: Literal["seq_sum_norm", "token_mean"] = "seq_sum_norm"
    """How token losses become the batch loss: the sum over tokens divided by the
    trajectories times `norm_tokens` (Dr. GRPO: no length bias, and an episode of several
    context windows counts once), or the mean over all tokens of the batch."""
    norm_tokens: int = Field(256, ge=1)
    """Dr. GRPO's constant per-trajectory token denominator."""
    micro_batch_size: int = Field(4, ge=1)
    """Sequences per forward/backward. The loss does not depend on it; the speed does: on
    a CPU small micro-batches keep the activations in cache (4 was fastest; 16 took 10-20%
    longer: docs/benchmarks.md); on an accelerator take the largest that fits."""
    checkpoint_every: int = Field(10, ge=1)
    """Steps between checkpoints (model, optimizer, RNG, trajectory cursor)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Checkpoints kept in the store, the newest ones; more keep earlier steps' models for
    choosing a step count on val after the run."""
    seed: int = 0
    """Seed of the trainer's and regions' random choices."""
    threads: int = Field(1, ge=1)
    """torch CPU threads of the trainer."""
    bf16: bool | None = None
    """Trainer matmuls in bfloat16 (float32 master weights; the mismatch it adds is measured
    and corrected). Unset: on where bfloat16 is fast (CUDA, CPUs with AVX512-BF16 or AMX),
    where it is about 2x faster; off elsewhere."""


class StoreSection(_Section):
    url: str = ""
    """Object store URL (local folder or s3://...); empty: runs/NAME/store."""
    full_every: int = Field(10, ge=1)
    """A full snapshot every K versions, deltas in between."""
    publish_dtype: Literal["bfloat16", "float32"] = "bfloat16"
    """Dtype of the published versions (what engines serve): the float32 masters rounded
    once per publish. bf16 leaves most elements bit-identical from one version to the
    next, so deltas are small; float32 ships every element of every version."""
    collect_garbage: bool = True
    """After each checkpoint, delete the trajectories it covers and the weight versions no
    follower needs; off keeps everything (benchmarks read the channel afterwards)."""


class EvalSection(_Section):
    split: str = "heldout"
    """Split evaluated at the end of the run."""
    episodes: int = Field(100, ge=1)
    """At least this many episodes in the end-of-run evaluation on `split` (tasks x
    samples): 100 is one sample of each of the 310 held-out tasks (the interval is over
    tasks either way); it keeps `make demo` within 15 minutes on 2 cores."""
    best_temperature: bool = True
    """The end-of-run evaluation first chooses each model's temperature on `val_split`,
    then reports `split` at it (off: at `rollout.temperature`)."""
    val_split: str = "val"
    """Split on which temperatures are chosen; never the training or the reported split."""
    temperatures: list[float] = Field(default=[0.0, 0.3, 0.5, 0.7, 1.0], min_length=1)
    """Temperatures swept on `val_split` (0: greedy)."""
    val_samples: int = Field(1, ge=1)
    """Samples per task and temperature in the sweep (greedy always takes one)."""
    sweep_tasks: int = Field(62, ge=0)
    """The sweep runs on the first N tasks of `val_split` (0: all): on the bundled suites
    one instance of each template/bug pair, five temperatures in ~1 min per model on 2
    cores. The whole split (310) is for choosing settings between runs."""
    samples: int = Field(8, ge=1)
    """Samples per task of `fleetrl eval` on the reported split (pass@8 needs 8)."""
    max_tasks: int = Field(0, ge=0)
    """Evaluate on the split's first N tasks only (0: all), for quick checks."""
    base: bool = True
    """Also evaluate the starting model, for the before/after comparison."""
    enabled: bool = True
    """Evaluate at the end of the run at all."""
    max_concurrent: int = Field(32, ge=1)
    """Episodes in flight at once during an evaluation (generation batches across them)."""
    max_concurrent_verify: int = Field(4, ge=1)
    """Gradings at once during an evaluation."""
    threads: int = Field(1, ge=1)
    """torch CPU threads of an evaluation (`fleetrl eval`, the end of `fleetrl train`, the
    learning bench). One: the episodes' tests run beside the engine, and on 2 cores a
    second engine thread made an evaluation 14% slower (docs/benchmarks.md)."""

    @model_validator(mode="after")
    def _val_apart(self) -> EvalSection:
        if any(t < 0 for t in self.temperatures):
            raise ValueError(f"eval.temperatures must be >= 0, got {self.temperatures}")
        if self.val_split == self.split:
            raise ValueError(
                f"eval.val_split is the reported split {self.split!r}: a temperature chosen "
                "on the tasks it is reported on flatters; set eval.val_split to another split"
            )
        return self


class GateSection(_Section):
    """Real-time RL's gate (`fleetrl gate`): what a version must show before it is served."""

    split: str = "val"
    """The simulation suite's split the gate judges on: held out from training, and not
    `eval.split`, on which the served versions are reported (a gate that chose versions on
    the reported split would bias the report)."""
    tasks: int = Field(60, ge=1)
    """Tasks (the first N of `split`) each candidate and the served version are run on,
    one episode each; the verdict pairs them per task."""
    temperature: float = Field(0.0, ge=0)
    """Sampling temperature of those episodes (0: greedy, the least noisy)."""
    poll_s: float = Field(5.0, gt=0)
    """Seconds between looks at the store for a newer version."""


class SftSection(_Section):
    """`fleetrl sft`: supervised fine-tuning on expert demonstrations of the train split."""

    steps: int = Field(800, ge=1)
    """Optimizer steps."""
    batch_size: int = Field(32, ge=1)
    """Episodes per step."""
    micro_batch_size: int = Field(8, ge=1)
    """Episodes per forward/backward within a step: the same gradient as the whole batch
    at once, and faster on a CPU (8 of 32 saved about 15%: docs/benchmarks.md)."""
    lr: float = Field(1e-3, gt=0)
    """Peak learning rate, reached after warmup (AdamW)."""
    warmup_steps: int = Field(50, ge=0)
    """Linear ramp from 0 to `lr` (capped at steps - 1)."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """The cosine decays to lr * this at the last step."""
    weight_decay: float = Field(0.1, ge=0)
    """AdamW weight decay; not applied to norms (1-d weights)."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping."""
    seed: int = 0
    """Batch order, and the initial weights when training from scratch."""
    bf16: bool = False
    """Matmuls in bfloat16 under autocast, float32 weights: 2x faster on CPUs with
    AVX512-BF16, slower without it. Off, so the base model's recipe reproduces anywhere."""
    threads: int = Field(2, ge=1)
    """torch CPU threads."""
    hidden: int = Field(256, ge=8, multiple_of=8)
    """Hidden size of a fresh model (4 heads, even head size)."""
    layers: int = Field(4, ge=1)
    """Decoder layers of a fresh model."""
    init: str | None = None
    """Start from this checkpoint (and its tokenizer) instead of a fresh model."""
    experts: int = Field(0, ge=0)
    """0: keep the model's architecture. N >= 2: make it a mixture of N experts, top-2
    (sparse upcycling, `fleetrl.model.checkpoint.upcycle`: each MLP copied into every
    expert behind a fresh router), then fine-tune it: a small MoE model from a dense one."""
    copies: int = Field(16, ge=0)
    """Renamed copies per task demonstrated on top of the originals (fresh names)."""
    plans: list[str] = ["fix", "look_first", "reproduce"]
    """The scripted expert's plans demonstrated (keys of fleetrl.envs.micro.expert.PLANS);
    "slip" (a refused edit, then the retry) is left out by default: see docs/benchmarks.md,
    "Demonstrated recovery"; so is "retry" (a wrong fix applied, seen to fail, then the
    fix)."""
    max_tasks: int = Field(0, ge=0)
    """Demonstrate only the first N training tasks, and validate on the first N
    validation tasks (0: all)."""
    val_split: str = "val"
    """Split whose demonstrations (originals, no copies) give the validation loss."""
    val_every: int = Field(50, ge=0)
    """Steps between validation losses, also measured before the first step (0: none)."""
    patience: int = Field(0, ge=0)
    """Stop once this many validation losses in a row fail to beat the best, and save the
    weights of the best one: SFT until validation loss stops improving (0: run all steps,
    save the last weights)."""
    min_delta: float = Field(0.02, ge=0, lt=1)
    """A validation loss counts as progress for `patience` only when it is this fraction
    below the last one that did (0.02: 2 % lower); the weights kept are still those of the
    lowest loss."""
    max_seconds: float = Field(0.0, ge=0)
    """Stop after this much training wall time (0: no limit); `fleetrl bench learning` gives
    continued SFT the wall time RL took."""
    log_every: int = Field(25, ge=1)
    """Steps between loss lines."""
    save_every: int = Field(0, ge=0)
    """Also save OUT/step-NNNNNN/ every N steps (0: only at the end)."""
    demos_cache: str | None = None
    """Folder caching the demonstrations (default: the fleetrl cache)."""


class ObserveSection(_Section):
    """Where a run's metrics go besides metrics.jsonl and report.html: the same records
    (`fleetrl/observe/records.py`), each numeric field a scalar `<kind>/<field>`
    (`train/reward`, `sync/sync_bytes`, `eval/pass_at_1`) at the record's step. The trainer
    writes `train` and `sync`, the launcher's end-of-run evaluation `eval`; regions nothing."""

    tensorboard: bool = False
    """Also write TensorBoard event files to runs/NAME/tensorboard/ (`tensorboard --logdir
    runs`). Needs the extra: pip install 'fleetrl[tensorboard]'."""
    wandb: bool = False
    """Also log to Weights & Biases, offline unless WANDB_MODE is set (files in
    runs/NAME/wandb/; `wandb sync runs/NAME/wandb/offline-run-*` uploads them). Needs the
    extra: pip install 'fleetrl[wandb]'."""
    wandb_project: str = Field("fleetrl", min_length=1)
    """W&B project of the run; the W&B run is named after the run (`name`)."""

    def check_installed(self) -> None:
        """Refuse an enabled export whose package is missing, naming the extra."""
        for knob, module in (("tensorboard", "tensorboard"), ("wandb", "wandb")):
            if getattr(self, knob) and importlib.util.find_spec(module) is None:
                raise ConfigError(
                    f"observe.{knob} = true needs the {module} package: "
                    f"pip install 'fleetrl[{knob}]' (or set observe.{knob} = false)"
                )


class RunConfig(_Section):
    """The whole tree: `fleetrl train`, `eval`, `sft` and `bench pipeline` all read it."""

    name: str = Field("run", pattern=RUN_NAME)
    """Run name: the run directory is runs/NAME (letters, digits, '.', '-', '_', so that
    it names one folder inside runs/)."""
    model: ModelSection = Field(default_factory=ModelSection)
    tasks: TasksSection = Field(default_factory=TasksSection)
    harness: HarnessSection = Field(default_factory=HarnessSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    store: StoreSection = Field(default_factory=StoreSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    gate: GateSection = Field(default_factory=GateSection)
    sft: SftSection = Field(default_factory=SftSection)
    observe: ObserveSection = Field(default_factory=ObserveSection)

    @model_validator(mode="after")
    def _fits_together(self) -> RunConfig:
        if self.sft.patience and not self.sft.val_every:
            raise ValueError("sft.patience needs validation losses: set sft.val_every > 0")
        if self.sft.val_every and self.sft.val_split == self.tasks.split:
            raise ValueError(
                f"sft.val_split is the training split {self.tasks.split!r}: set it to a "
                "split the model does not train on, or sft.val_every = 0"
            )
        if self.eval.enabled and self.eval.split == self.tasks.split:
            raise ValueError(
                f"eval.split is the training split {self.tasks.split!r}: the evaluation "
                "would measure memorised tasks; set eval.split to a held-out split"
            )
        if self.eval.val_split == self.tasks.split:
            raise ValueError(
                f"eval.val_split is the training split {self.tasks.split!r}: set it to a "
                "split the model does not train on"
            )
        return self


def check_trainable(config: RunConfig) -> None:
    """Refuse, before anything starts, a configuration that evaluates but cannot train
    (here: the metric exports it asks for need packages this machine lacks)."""
    if config.rollout.temperature == 0:
        raise ConfigError(
            "rollout.temperature: 0 (greedy) is for evaluation; RL trains on sampled "
            "tokens, set it above 0"
        )
    config.observe.check_installed()
    config.rollout.check_installed()
