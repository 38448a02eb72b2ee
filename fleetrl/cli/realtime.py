"""Real-time RL's commands besides `fleetrl serve --store`: the `gate` role, and `rollback`
of the served version (docs/realtime.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from fleetrl.cli.common import fail
from fleetrl.cli.runs import StoreOption, WorkdirOption, lost_store


def gate_command(store: StoreOption = "", workdir: WorkdirOption = None) -> None:
    """Real-time RL's gate: serve a new version only if it does no worse on held-out tasks.

    Pass@1 of the newest version against the served version's on the first gate.tasks
    tasks of gate.split (`val`: held out from training, apart from the reported eval.split),
    paired per task: served unless worse beyond noise. Exits after the trainer's last step.
    Each verdict is kept in the store (`fleetrl status` shows them); a rejected version is
    never served."""
    if not store:
        raise fail("--store is required")
    from fleetrl.orchestrate.gate import Gate
    from fleetrl.orchestrate.roles import START_ERRORS, start_gate
    from fleetrl.store.objectstore import StoreUnreachable

    try:
        gate = Gate(start_gate(store, workdir))
    except StoreUnreachable as err:
        raise lost_store(err) from None
    except START_ERRORS as err:
        raise fail(str(err)) from None
    try:
        gate.run()
    except StoreUnreachable as err:
        raise lost_store(err) from None


def rollback_command(
    store: StoreOption = "",
    to: Annotated[int, typer.Option("--to", help="The version to serve again.")] = -1,
) -> None:
    """Serve an earlier version again, at once (one of the last served, or the base, 0).

    Every `fleetrl serve --store` process swaps it in within a poll."""
    if not store:
        raise fail("--store is required")
    if to < 0:
        raise fail("--to VERSION is required (a version served before, or 0: the base)")
    from fleetrl.store.errors import StoreAccessError
    from fleetrl.store.objectstore import BadStoreURL, StoreUnreachable, open_store
    from fleetrl.store.serving import rollback_targets, serve_version, served_version

    try:
        opened = open_store(store)
        serving, targets = served_version(opened), rollback_targets(opened)
        if to not in targets:
            listed = ", ".join(map(str, targets))
            raise fail(f"version {to} cannot be rolled back to; versions served lately: {listed}")
        if to == serving:
            typer.echo(f"version {to} is served already")
            return
        serve_version(opened, to, "rollback")
    except (BadStoreURL, StoreUnreachable, StoreAccessError) as err:
        raise fail(str(err)) from None
    typer.echo(f"serving version {to} (was {serving})")
