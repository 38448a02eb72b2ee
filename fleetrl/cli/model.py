"""`fleetrl model init` and `fleetrl serve`: make a checkpoint, serve one."""

from __future__ import annotations

import math
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleetrl.cli.common import fail

if TYPE_CHECKING:
    from fleetrl.inference.recording import GroupSink
    from fleetrl.orchestrate.roles import Started

model_app = typer.Typer(
    help="Create and inspect policy checkpoints.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@model_app.command("init")
def model_init(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the checkpoint into.")],
    moe: Annotated[bool, typer.Option("--moe", help="Qwen3-MoE variant instead of dense.")] = False,
    layers: Annotated[int, typer.Option(help="Decoder layers.")] = 4,
    hidden: Annotated[int, typer.Option(help="Hidden size.")] = 256,
    heads: Annotated[int, typer.Option(help="Attention heads (head_dim = hidden / heads).")] = 4,
    kv_heads: Annotated[int, typer.Option(help="Key/value heads (grouped-query attention).")] = 2,
    experts: Annotated[
        int,
        typer.Option(
            help="Experts per MoE layer (with --moe); each token goes to 2 of them (1 if only 1)."
        ),
    ] = 8,
    seed: Annotated[int, typer.Option(help="Random seed of the weights.")] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite a non-empty directory.")
    ] = False,
) -> None:
    """Write a small random Qwen3 model with the project tokenizer, in Hugging Face layout."""
    if out_dir.exists() and not out_dir.is_dir():
        raise fail(f"{out_dir} exists and is not a directory")
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise fail(f"{out_dir} is not empty (use --force to overwrite)")
    sizes = {"--layers": layers, "--hidden": hidden, "--heads": heads, "--kv-heads": kv_heads}
    if moe:
        sizes["--experts"] = experts
    for option, value in sizes.items():
        if value < 1:
            raise fail(f"{option} must be >= 1, got {value}")
    if hidden % heads or heads % kv_heads:
        raise fail("--hidden must be divisible by --heads, and --heads by --kv-heads")
    if (hidden // heads) % 2:
        raise fail(
            f"--hidden / --heads is the head size, {hidden // heads}; "
            "it must be even (rotary position embeddings rotate pairs)"
        )
    from fleetrl.model.checkpoint import init_model, save_pretrained
    from fleetrl.model.config import ModelConfig
    from fleetrl.model.tokenizer import bundled_tokenizer

    tokenizer = bundled_tokenizer()
    config = ModelConfig.small(
        tokenizer.vocab_size,
        hidden,
        layers,
        heads=heads,
        num_key_value_heads=kv_heads,
        num_experts=experts if moe else 0,
        num_experts_per_tok=min(2, experts) if moe else 2,
        moe_intermediate_size=hidden,
        eos_token_id=tokenizer.eos_id,
    )
    try:
        config.validate()
    except ValueError as err:
        raise fail(str(err)) from None
    model = init_model(config, seed=seed)
    save_pretrained(model, out_dir)
    tokenizer.save(out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    typer.echo(f"wrote {config.model_type} model ({n_params / 1e6:.2f} M parameters) to {out_dir}")


def serve(
    checkpoint: Annotated[
        Path | None,
        typer.Argument(
            help="Hugging Face checkpoint directory, or `base`; none with --store: the "
            "run's served version, followed as it changes (real-time RL)."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free one).")] = 8000,
    admin_token: Annotated[
        str | None,
        typer.Option(
            envvar="FLEETRL_ADMIN_TOKEN",
            help="Bearer token for POST /update_weights; without one, updates are refused.",
        ),
    ] = None,
    max_batch_size: Annotated[int, typer.Option(help="Requests decoded together.")] = 64,
    max_model_len: Annotated[
        int,
        typer.Option(
            help="Context length (prompt + output); 0: the model's own maximum, at most 4096."
        ),
    ] = 2048,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16, float16 or auto.")] = "auto",
    threads: Annotated[
        int | None, typer.Option(help="torch CPU threads (default: torch's own choice).")
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="Record each chat session (the request's `user`) as a token-level trajectory; "
            "GET /v1/sessions/ID reads it, POST /v1/sessions/ID/reward ends it "
            "(docs/serving.md).",
        ),
    ] = False,
    session_ttl: Annotated[
        float,
        typer.Option(
            help="With --record: seconds a session may go without a turn or reward before it "
            "expires (counted in GET /v1/sessions, never trained on)."
        ),
    ] = 3600.0,
    group_size: Annotated[
        int | None,
        typer.Option(
            help="With --record: rewarded sessions of one task_id that form a group "
            "(default: the run's rollout.group_size, 1 for an online run; else 8)."
        ),
    ] = None,
    store: Annotated[
        str,
        typer.Option(
            "--store",
            help="A run's object store (folder or s3://bucket/prefix, as `fleetrl run "
            "create`): rewarded groups go into its trajectory channel. Without a "
            "CHECKPOINT: serve, record and follow the run's served version.",
        ),
    ] = "",
    signal: Annotated[
        list[str] | None,
        typer.Option(
            help="With --record: an outcome signal POST /v1/feedback may carry and its "
            "weight, NAME=WEIGHT (repeatable); reward = sum of weight x value."
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="With --store and no CHECKPOINT: work folder (default runs/RUN/serve/REGION)."
        ),
    ] = None,
    region: Annotated[
        str,
        typer.Option(help="With --store: the name the groups carry in the channel."),
    ] = "serve",
    engine: Annotated[
        str,
        typer.Option(
            help="What samples: fleetrl (the built-in engine) or vllm (`pip install "
            "'fleetrl[vllm]'`; --dtype auto serves it in bfloat16)."
        ),
    ] = "fleetrl",
) -> None:
    """Serve a checkpoint, or a run's served version: OpenAI API, /generate, updates.

    With --store URL and no CHECKPOINT the server is real-time RL's serving fleet: it
    serves the version the run's gate passed (`fleetrl gate`), swaps each new one in
    flight, and records every session (`user`) into the run, rewarded through
    POST /v1/feedback (docs/realtime.md)."""
    if not 0 <= port <= 65535:
        raise fail(f"--port must be in 0..65535, got {port}")
    if max_batch_size < 1:
        raise fail(f"--max-batch-size must be >= 1, got {max_batch_size}")
    if max_model_len < 0:
        raise fail(f"--max-model-len must be >= 1, or 0 for the model's own, got {max_model_len}")
    if threads is not None and threads < 1:
        raise fail(f"--threads must be >= 1, got {threads}")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise fail(f"--dtype must be auto, float32, bfloat16 or float16, not {dtype!r}")
    if engine not in ("fleetrl", "vllm"):
        raise fail(f"--engine must be fleetrl or vllm, not {engine!r}")
    if engine == "vllm" and dtype == "float16":
        raise fail("--engine vllm serves float32 or bfloat16 (--dtype auto: bfloat16)")
    if not session_ttl > 0:
        raise fail(f"--session-ttl must be > 0 seconds, got {session_ttl}")
    if group_size is not None and group_size < 1:
        raise fail(f"--group-size must be >= 1, got {group_size}")
    if checkpoint is None and not store:
        raise fail("give a CHECKPOINT to serve, or --store URL to serve a run's served version")
    if store and not record and checkpoint is not None:
        raise fail("--store needs --record (only recorded sessions are sent to a run)")
    if not region.replace("-", "").replace("_", "").isalnum():
        raise fail(f"--region {region!r}: use letters, digits, '-' and '_'")
    signals = parse_signals(signal or [])
    sink = channel_sink(store, region) if store else None
    follow, journal = None, None
    if checkpoint is None:  # real-time RL: the run's served version, followed
        started = start_serving_or_fail(store, region, workdir)
        checkpoint = Path(started.config.model.path)
        record = True
        if group_size is None:
            online = started.config.trainer.mode == "online"
            group_size = 1 if online else started.config.rollout.group_size
        from fleetrl.orchestrate.roles import follow_served

        follow = partial(follow_served, started, region)
        journal = started.workdir / "sessions"  # a restart here takes its sessions back
    from fleetrl.model.checkpoint import CheckpointError, read_config, resolve_checkpoint

    path = resolve_checkpoint(checkpoint)
    if not (path / "config.json").is_file():
        raise fail(f"{checkpoint} is not a checkpoint directory (no config.json)")
    try:
        positions = read_config(path).max_position_embeddings
    except CheckpointError as err:
        raise fail(str(err)) from None
    if max_model_len > positions:
        raise fail(
            f"--max-model-len {max_model_len} is longer than the {positions} positions the "
            f"model was made for (max_position_embeddings); use {positions} or less, or 0"
        )
    from fleetrl.inference.backends import EngineUnavailable
    from fleetrl.inference.server import ListenError
    from fleetrl.inference.server import serve as run_server

    try:
        run_server(
            path,
            host=host,
            port=port,
            admin_token=admin_token,
            max_batch_size=max_batch_size,
            max_model_len=max_model_len,
            dtype=dtype,
            threads=threads,
            record=record,
            session_ttl_s=session_ttl,
            group_size=group_size or 8,
            sink=sink,
            region=region,
            backend=engine,
            signals=signals,
            follow=follow,
            journal=journal,
        )
    except (CheckpointError, FileNotFoundError, ListenError, EngineUnavailable) as err:
        raise fail(str(err)) from None


def parse_signals(items: list[str]) -> dict[str, float]:
    """--signal NAME=WEIGHT options as {name: weight}; fails on anything else."""
    weights = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            weight = float(value)
        except ValueError:
            raise fail(f"--signal {item!r}: expected NAME=WEIGHT, e.g. accepted=1.0") from None
        if not name or not math.isfinite(weight):
            raise fail(f"--signal {item!r}: expected NAME=WEIGHT, e.g. accepted=1.0")
        weights[name] = weight
    return weights


def start_serving_or_fail(url: str, region: str, workdir: Path | None) -> Started:
    """The run at `url` opened for serving (`orchestrate.roles.start_serving`), or one line
    and exit 2 for a user's mistake."""
    from fleetrl.orchestrate.roles import START_ERRORS, start_serving

    try:
        return start_serving(url, region, workdir)
    except START_ERRORS as err:
        raise fail(str(err)) from None


def channel_sink(url: str, region: str) -> GroupSink:
    """Rewarded groups into the trajectory channel of the run in the store at `url`, as
    region `region` (`fleetrl.store.trajectories`); fails at once when no run is there."""
    from fleetrl.store.errors import StoreAccessError
    from fleetrl.store.objectstore import BadStoreURL, StoreUnreachable, open_store
    from fleetrl.store.run import CONFIG_KEY
    from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
    from fleetrl.types import Trajectory

    try:
        store = open_store(url)
        if not store.exists(CONFIG_KEY):
            raise fail(f"--store {url}: no run there (make one with `fleetrl run create`)")
    except (BadStoreURL, StoreUnreachable, StoreAccessError) as err:
        raise fail(str(err)) from None
    channel = TrajectoryChannel(store)

    def send(group: list[Trajectory]) -> None:
        versions = [v for t in group for s in t.segments for v in s.versions if v >= 0]
        durations = [t.duration_s for t in group]
        report = RegionReport(region, max(versions, default=0), durations, handed_in=time.time())
        channel.append(region, group, report)

    return send
