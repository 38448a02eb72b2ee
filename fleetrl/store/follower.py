"""WeightFollower: keeps one Engine on the newest published policy version, in flight.

    ┌───────────────────────── every poll_s ─────────────────────────┐
    ▼                                                                │
  store.latest() ── not newer than the version held ────────────────┤
    │ newer                                                          │
    ▼                                                                │
  store.fetch(latest, have=engine's weights, changed_only)           │
    │   worker thread: the engine keeps decoding meanwhile           │
    │   CorruptWeights (held weights not what we think) ─▶ refetch   │
    │                                   from the nearest full snapshot
    ▼                                                                │
  engine.update_weights(changed tensors, latest)                     │
    │   applied between two decode steps: the only pause            │
    ▼                                                                │
  record a VersionApplied; heartbeat (so the gc keeps our deltas) ──┘

A request in flight keeps its KV cache across the swap; its later tokens carry the new
version (Completion.versions spans old → new), which the trainer's off-policy correction
expects.

Rolling back (a target older than the version held) rebuilds the target from its nearest
full snapshot: deltas only go forward.

Not covered: pulling across regions (a RegionRelay does that once per region; point
followers at the region's store), swapping in place without a copy (the Engine's
update_weights takes whole tensors).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from fleetrl.store.region_metrics import VersionApplied
from fleetrl.store.weights import CorruptWeights, FetchResult, Held, WeightStore, WeightStoreError

log = logging.getLogger(__name__)


class WeightSink(Protocol):
    """What a follower needs of an engine (`fleetrl.inference.engine.Engine` is one)."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights the engine serves now, by name."""
        ...

    async def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Swap in these tensors (all or some) between two decode steps; the pause in s."""
        ...


@dataclass
class FollowerStats:
    """Counters an operator reads."""

    syncs: int = 0  # versions applied
    bytes_read: int = 0  # over all syncs
    errors: list[str] = field(default_factory=list)  # last failures, newest last (max 20)


class WeightFollower:
    """Polls a WeightStore and applies each new version to an engine, in flight."""

    def __init__(
        self,
        store: WeightStore,
        engine: WeightSink,
        name: str,
        held: int | None = None,
        poll_s: float = 1.0,
        target: Callable[[], int | None] | None = None,
    ) -> None:
        """`target`: the version to hold (default: the store's latest; the serving fleet
        follows the served version, `fleetrl.store.serving`, which may also go back)."""
        self.store = store
        self.target = target or store.latest
        self.engine = engine
        self.name = name  # heartbeat name; unique per engine
        self.held = held  # store version the engine's weights are, if known
        self.poll_s = poll_s
        self.records: list[VersionApplied] = []  # every version applied, oldest first
        self.stats = FollowerStats()

    async def sync_once(self) -> VersionApplied | None:
        """Apply the target version (the latest, by default) if it is not the one held;
        None when up to date."""
        latest = await asyncio.to_thread(self.target)
        if latest is None or latest == self.held:
            return None
        result = await self._fetch(latest)
        pause = await self.engine.update_weights(result.tensors, latest)
        record = VersionApplied(
            version=latest,
            time=time.time(),
            pause_s=pause,
            fetch_s=result.fetch_s,
            bytes=result.bytes_read,
            route=result.route,
        )
        self.held = latest
        self.records.append(record)
        self.stats.syncs += 1
        self.stats.bytes_read += result.bytes_read
        await asyncio.to_thread(self.store.register_follower, self.name, latest)
        return record

    async def run(
        self, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None
    ) -> None:
        """Sync every `poll_s` seconds until `stop` is set; store errors are logged, not
        fatal. `ready` is set once the first sync was tried (a server opens after it, so
        that it answers with the target version from its first request)."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await self.sync_once()
            except WeightStoreError as err:
                log.warning("follower %s: %s", self.name, err)
                self.stats.errors = [*self.stats.errors[-19:], str(err)]
            if ready is not None:
                ready.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_s)

    async def _fetch(self, version: int) -> FetchResult:
        if self.held is None:
            return await asyncio.to_thread(self.store.fetch, version)
        have = Held(self.held, self.engine.state_dict())
        try:
            return await asyncio.to_thread(self.store.fetch, version, have, True)
        except CorruptWeights as err:
            # Our weights are not the version we think (or a delta is damaged): start over
            # from the nearest full snapshot, which does not depend on them.
            log.warning("follower %s: %s; fetching a full snapshot", self.name, err)
            return await asyncio.to_thread(self.store.fetch, version)
