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
  record a SyncRecord; heartbeat to the store (gc keeps our deltas) ─┘

A request in flight keeps its KV cache across the swap; its later tokens carry the new
version (Completion.versions spans old → new), which the trainer's off-policy correction
expects.

Not covered: pulling across regions (a RegionRelay does that once per region; point
followers at the region's store), swapping in place without a copy (the Engine's
update_weights takes whole tensors), rolling back to an older version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

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
class SyncRecord:
    """One applied version: what it cost to get and to swap in."""

    version: int  # version the engine serves now
    previous: int | None  # version it served before (None: weights not from this store)
    route: str  # how the version was rebuilt, e.g. "held 41 + 1 delta"
    bytes_read: int  # bytes downloaded from the store, manifests included
    tensors: int  # tensors copied into the engine
    fetch_s: float  # wall seconds to download, decode and verify (decoding went on)
    pause_s: float  # seconds decoding stood still for the swap
    time: float  # unix time the engine began serving `version` (the swap's end)


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
    ) -> None:
        self.store = store
        self.engine = engine
        self.name = name  # heartbeat name; unique per engine
        self.held = held  # store version the engine's weights are, if known
        self.poll_s = poll_s
        self.records: list[SyncRecord] = []
        self.stats = FollowerStats()

    async def sync_once(self) -> SyncRecord | None:
        """Apply the latest version if it is newer than the one held; None when up to date."""
        latest = await asyncio.to_thread(self.store.latest)
        if latest is None or (self.held is not None and latest <= self.held):
            return None
        result = await self._fetch(latest)
        pause = await self.engine.update_weights(result.tensors, latest)
        record = SyncRecord(
            version=latest,
            previous=self.held,
            route=result.route,
            bytes_read=result.bytes_read,
            tensors=len(result.tensors),
            fetch_s=result.fetch_s,
            pause_s=pause,
            time=time.time(),
        )
        self.held = latest
        self.records.append(record)
        self.stats.syncs += 1
        self.stats.bytes_read += result.bytes_read
        await asyncio.to_thread(self.store.register_follower, self.name, latest)
        return record

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Sync every `poll_s` seconds until `stop` is set; store errors are logged, not fatal."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await self.sync_once()
            except WeightStoreError as err:
                log.warning("follower %s: %s", self.name, err)
                self.stats.errors = [*self.stats.errors[-19:], str(err)]
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
