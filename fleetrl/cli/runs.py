"""Runs that live in an object store: `fleetrl run create`, the `trainer` and `region`
roles, `status`, and `report` of a run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from fleetrl.cli.common import SetOption, fail, run_config

run_app = typer.Typer(
    help="Runs that live in an object store.", no_args_is_help=True, rich_markup_mode="markdown"
)

# How long `status` and the first contact of `run create` retry an unreachable remote store
# (each retry is logged): a user waits at the terminal, unlike the long-lived roles, which
# ride out outages of the store's default window.
QUICK_OUTAGE_S = 10.0

StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        help="The run's object store: a folder or s3://bucket/prefix (credentials and "
        "endpoint from the AWS_* variables).",
    ),
]
WorkdirOption = Annotated[
    Path | None,
    typer.Option(help="Local work folder (default: runs/NAME, or runs/NAME/regions/REGION)."),
]


@run_app.command("create")
def run_create(
    config_file: Annotated[
        Path | None,
        typer.Argument(
            help="TOML run configuration, or a shipped preset's name: `demo` is what "
            "`make demo` runs (default: built-in)."
        ),
    ] = None,
    store: StoreOption = "",
    set_: SetOption = None,
) -> None:
    """Write a run into a store: config, base checkpoint, tasks, base weights as version 0.

    Then `fleetrl trainer --store URL` and `fleetrl region --store URL --name NAME`, on
    any machines that reach the store, run it."""
    if not store:
        raise fail("--store is required (a folder or s3://bucket/prefix)")
    config = run_config(config_file, set_, {})
    from fleetrl.model.checkpoint import resolve_checkpoint
    from fleetrl.orchestrate.run import RunExists, create_run
    from fleetrl.store.errors import StoreAccessError
    from fleetrl.store.objectstore import BadStoreURL, StoreUnreachable, open_store
    from fleetrl.store.run import CONFIG_KEY

    # The store first: a bad URL, an unreachable or refusing store or an existing run fails
    # at once, before the tasks are loaded (create_run checks again, with the full outage
    # window).
    try:
        if open_store(store, outage_s=QUICK_OUTAGE_S).exists(CONFIG_KEY):
            raise fail(f"{store} already holds a run ({CONFIG_KEY})")
    except (BadStoreURL, StoreUnreachable, StoreAccessError) as err:
        raise fail(str(err)) from None

    base = resolve_checkpoint(config.model.path)
    if not (base / "config.json").is_file():
        raise fail(f"model.path {config.model.path!r} is not a checkpoint directory")
    from fleetrl.envs.tasks.records import TaskError
    from fleetrl.envs.tasks.suites import training_tasks

    try:
        training_tasks(config.tasks, base)
    except TaskError as err:
        raise fail(str(err)) from None
    try:
        create_run(config, store)
    except (RunExists, OSError) as err:  # OSError: StoreAccessError (no write access) among them
        raise fail(str(err)) from None
    typer.echo(f"created run {config.name!r} in {store}")


def trainer_command(store: StoreOption = "", workdir: WorkdirOption = None) -> None:
    """The trainer of a run in a store; exits 0 when the run's steps are done.

    Exit code 3: a newer trainer of the same run has started (this one was fenced off)."""
    if not store:
        raise fail("--store is required")
    from fleetrl.config import ConfigError
    from fleetrl.orchestrate.roles import START_ERRORS, start_trainer, train
    from fleetrl.store.errors import StoreAccessError
    from fleetrl.store.objectstore import StoreUnreachable

    try:
        started = start_trainer(store, workdir)
    except StoreUnreachable as err:  # an outage, perhaps: a restart may find the store
        raise lost_store(err) from None
    except START_ERRORS as err:
        raise fail(str(err)) from None
    try:
        code = train(started)
    except (ConfigError, StoreAccessError) as err:  # a setting or a store that refuses: one line
        raise fail(str(err)) from None
    except StoreUnreachable as err:
        raise lost_store(err) from None
    raise typer.Exit(code)


def lost_store(err: Exception) -> typer.Exit:
    """The store stayed away longer than the outage window (at start-up or mid-run): not a
    bug and maybe not a mistake, so one line and exit 1 (a crash, which a supervisor
    restarts up to its limit; the run resumes from the store)."""
    typer.secho(f"error: {err}; start this role again once the store is back", err=True)
    return typer.Exit(code=1)


def region_command(
    store: StoreOption = "",
    name: Annotated[str, typer.Option(help="Region name, unique in the run.")] = "",
    workdir: WorkdirOption = None,
    regional_store: Annotated[
        str | None,
        typer.Option(
            help="The region's own weight store (e.g. a bucket in its region): a relay "
            "copies each version into it once and the engine follows it there."
        ),
    ] = None,
    link_mbps: Annotated[
        float | None,
        typer.Option(
            help="Simulate a cross-region link of this many megabits/s between the run's "
            "store and --regional-store: the relay's copy of each version takes its "
            "size / bandwidth (benchmarks)."
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override this region's own rollout settings, e.g. --set "
            "rollout.env_latency_s=2 (repeatable; rollout.* only).",
        ),
    ] = None,
) -> None:
    """A rollout region of a run in a store: exits 0 after the trainer's stop signal."""
    if not store or not name:
        raise fail("--store and --name are required")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise fail(f"--name {name!r}: use letters, digits, '-' and '_'")
    if link_mbps is not None and (link_mbps <= 0 or not regional_store):
        raise fail("--link-mbps needs --regional-store and a bandwidth > 0")
    from fleetrl.config import ConfigError
    from fleetrl.config_files import parse_overrides
    from fleetrl.orchestrate.roles import START_ERRORS, roll_out, start_region
    from fleetrl.store.errors import StoreAccessError
    from fleetrl.store.objectstore import StoreUnreachable

    link = link_mbps * 1e6 / 8 if link_mbps is not None else None
    try:
        overrides = parse_overrides(set_ or [])
        started = start_region(store, name, workdir, regional_store, overrides)
    except StoreUnreachable as err:
        raise lost_store(err) from None
    except START_ERRORS as err:
        raise fail(str(err)) from None
    try:
        code = roll_out(started, name, link)
    except (ConfigError, StoreAccessError) as err:
        raise fail(str(err)) from None
    except StoreUnreachable as err:
        raise lost_store(err) from None
    raise typer.Exit(code)


def status_command(
    store: StoreOption = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Where a run stands, read from the store alone.

    The trainer's version and step; each region's version, groups in flight, last
    heartbeat and staleness."""
    if not store:
        raise fail("--store is required")
    from fleetrl.orchestrate.status import as_json as status_json
    from fleetrl.orchestrate.status import run_status
    from fleetrl.store.errors import StoreAccessError
    from fleetrl.store.objectstore import BadStoreURL, StoreUnreachable, open_store
    from fleetrl.store.run import RunNotFound, read_config_text

    try:
        opened = open_store(store, outage_s=QUICK_OUTAGE_S)
        read_config_text(opened)
        status = run_status(opened)
    except (BadStoreURL, StoreUnreachable, StoreAccessError, RunNotFound) as err:
        raise fail(str(err)) from None
    if as_json:
        typer.echo(json.dumps(status_json(status), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    waiting = f", waiting {status.waiting_s:.0f} s" if status.waiting_s else ""
    typer.echo(
        f"trainer: version {status.trainer_version} (latest published "
        f"{status.latest_version}), step {status.step}, incarnation {status.incarnation}, "
        f"{status.trained_samples} samples trained, {status.dropped_samples} dropped{waiting}"
        + (" — run finished" if status.stopped else "")
    )
    table = Table(title="regions")
    for column in ("region", "held", "staleness", "in flight", "handed in", "granted"):
        table.add_column(column, justify="right")
    table.add_column("failed", justify="right")
    table.add_column("heartbeat", justify="right")
    for r in status.regions:
        table.add_row(
            r.name,
            str(r.held),
            str(r.staleness),
            str(r.in_flight),
            str(r.submitted),
            str(r.granted),
            str(r.failed_episodes),
            f"{r.heartbeat_age_s:.0f} s ago",
        )
    Console().print(table)
    if status.verdicts:
        typer.echo(f"served: version {status.served_version}; the gate's verdicts:")
        for verdict in status.verdicts:
            outcome = "passed" if verdict.passed else "REJECTED"
            typer.echo(f"  version {verdict.version}: {outcome}: {verdict.reason}")


def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (runs/NAME).")],
    compare: Annotated[
        Path | None,
        typer.Option(
            help="Another run directory: its reward and mismatch curves beside this run's, "
            "in one plot on top of the report."
        ),
    ] = None,
) -> None:
    """Write RUN_DIR/report.html: plots of reward, staleness, sync, mismatch, throughput.

    Each region's own metrics come from the run's store, wherever the regions ran."""
    for folder in (run_dir, *([compare] if compare is not None else [])):
        if not folder.is_dir():
            raise fail(f"{folder} is not a directory")
        if not (folder / "metrics.jsonl").exists() and not (folder / "config.toml").exists():
            raise fail(f"{folder} is not a run directory (no metrics.jsonl, no config.toml)")
    from fleetrl.observe import write_report
    from fleetrl.store.region_metrics import read_report_metrics

    url = run_store_url(run_dir)
    regions = read_report_metrics(url) if url is not None else {}
    try:
        typer.echo(f"wrote {write_report(run_dir, regions, compare)}")
    except ValueError as err:  # a metrics.jsonl line corrupted before its end
        raise fail(str(err)) from None


def run_store_url(run_dir: Path) -> str | None:
    """The store of the run whose work folder is `run_dir`: the one its config.toml names
    (without one, or with none named, run_dir/store); None, with a warning, when that
    config.toml is not a valid config."""
    import logging

    from fleetrl.config import ConfigError
    from fleetrl.config_files import load_config
    from fleetrl.store.control import store_url

    configured = ""
    if (run_dir / "config.toml").is_file():
        try:
            configured = load_config(run_dir / "config.toml").store.url
        except ConfigError as err:
            logging.getLogger(__name__).warning("no region metrics: %s", err)
            return None
    return store_url(configured, run_dir)
