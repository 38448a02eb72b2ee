"""`fleetrl bench mismatch`: the train/inference mismatch per engine, dtype and routing
replay (`fleetrl.bench.mismatch`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from fleetrl.cli.common import ConfigOption, SetOption, fail, run_config


def bench_mismatch_command(
    model: Annotated[
        list[str] | None,
        typer.Option(
            help="Checkpoint to measure, a folder or a shipped name; repeat it to measure "
            "several (a dense and an MoE one). Default: base."
        ),
    ] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option(
            help="Engine(s): fleetrl, vllm (needs the vllm extra). Default: both "
            "where vLLM is installed, else fleetrl."
        ),
    ] = None,
    dtype: Annotated[
        list[str] | None,
        typer.Option(help="Serving dtype(s) of the engine: float32, bfloat16. Default: both."),
    ] = None,
    tasks: Annotated[int, typer.Option(help="Held-out tasks, one episode each.")] = 16,
    config_file: ConfigOption = None,
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """The mismatch between an engine's logprobs and the trainer's on the tokens it sampled.

    Per arm (model x engine x serving dtype) the engine samples one episode on each of
    --tasks held-out tasks (the run configuration's suite and harness, T = 1); the
    trainer's float32 model scores those tokens, an MoE one twice: with the engine's
    routing replayed and routing itself. Reports k3 KL, mean and p99 |delta logprob|, the
    shares of tokens the TIS correction truncates and MIS masks (trainer.correction_cap),
    and for MoE the share of positions whose top-k experts differ from the engine's, per
    layer and in any layer. An engine that returns no routing (vLLM on CPU) has no replay
    row. Speeds and rewards are not measured."""
    from fleetrl.inference.vllm_engine import vllm_available

    models = model or ["base"]
    engines = engine or (["fleetrl", "vllm"] if vllm_available() else ["fleetrl"])
    dtypes = dtype or ["float32", "bfloat16"]
    if tasks < 1:
        raise fail(f"--tasks must be >= 1, got {tasks}")
    if bad := [e for e in engines if e not in ("fleetrl", "vllm")]:
        raise fail(f"--engine {bad[0]!r}: choose fleetrl or vllm")
    if bad := [d for d in dtypes if d not in ("float32", "bfloat16")]:
        raise fail(f"--dtype {bad[0]!r}: choose float32 or bfloat16")
    if "vllm" in engines and not vllm_available():
        raise fail("--engine vllm needs vLLM: pip install 'fleetrl[vllm]' (docs/engines.md)")
    from fleetrl.model.checkpoint import resolve_checkpoint

    for name in models:
        if not (resolve_checkpoint(name) / "config.json").is_file():
            raise fail(f"--model {name}: not a checkpoint directory (no config.json)")
    config = run_config(config_file, set_, {})
    from dataclasses import asdict

    from fleetrl.bench.mismatch import bench_mismatch

    def echo(line: str) -> None:
        if not as_json:
            typer.echo(line)

    rows = [asdict(arm) for arm in bench_mismatch(config, models, engines, dtypes, tasks, echo)]
    if as_json:
        typer.echo(json.dumps({"tasks": tasks, "split": config.eval.split, "arms": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"train/inference mismatch ({tasks} {config.eval.split} episodes per arm)")
    columns = ["model", "engine", "dtype", "scoring", "tokens", "kl_k3", "abs_logprob_mean",
               "abs_logprob_p99", "tis_truncated", "mis_masked", "routing_differs_any"]  # fmt: skip
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(row[c]) for c in columns))
    Console().print(table)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)
