"""RegionRelay: one per region; each version crosses regions once, whatever the engine count.

    origin store (the trainer's)                        region store (the region's cache)
      weights/… ═══ cross-region link ═══▶ RegionRelay ──▶ weights/… ──▶ WeightFollower ─▶ Engine
               (link_bytes_per_s to simulate one)                        WeightFollower ─▶ Engine
                                                                         … N engines

    ┌──────────────────────── every poll_s ────────────────────────┐
    ▼                                                              │
  origin.latest() ── not newer than the region's latest ──────────┤
    │ newer                                                        │
    ▼                                                              │
  origin.fetch(latest, have=region.held())   deltas only, verified │
    ▼                                                              │
  region.publish(latest, tensors)   re-encoded here; the region    │
    │                               makes its own full snapshots   │
    ▼                                                              │
  heartbeat to the origin (its gc keeps our deltas); region.gc ───┘

The region store is an ordinary WeightStore (a folder on a region node, or a bucket in
the region), so engines follow it exactly as they would follow the origin. Full
snapshots for engines that join late are written inside the region from the relay's
own copy: after its first sync the relay pulls deltas only.

Not covered: several relays per region (one publisher per store), pushing instead of
polling, relaying trajectories (they flow the other way through their own channel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from fleetrl.store.objectstore import ThrottledStore
from fleetrl.store.weights import WeightStore, WeightStoreError

log = logging.getLogger(__name__)


@dataclass
class RelayRecord:
    """One version carried into the region."""

    version: int
    route: str  # how it was rebuilt from the origin, e.g. "held 41 + 1 delta"
    bytes_in: int  # bytes that crossed regions for it, manifests included
    region_bytes: int  # bytes written into the region store (delta, snapshot, manifest)
    fetch_s: float  # wall seconds to pull and verify across the link
    publish_s: float  # wall seconds to re-encode and write into the region
    time: float  # unix time the version was committed in the region store


class RegionRelay:
    """Mirrors the origin's newest version into a region store, pulling deltas only."""

    def __init__(
        self,
        origin: WeightStore,
        region: WeightStore,
        name: str,
        poll_s: float = 1.0,
        keep_last: int | None = 8,
        link_bytes_per_s: float | None = None,
    ) -> None:
        """`link_bytes_per_s`: simulate a cross-region link of this bandwidth (every
        transfer from the origin then takes size / bandwidth seconds); None: as fast as
        the origin answers."""
        if link_bytes_per_s is not None:
            origin = WeightStore(ThrottledStore(origin.store, link_bytes_per_s))
        self.origin = origin
        self.region = region
        self.name = name  # heartbeat name at the origin; unique per region
        self.poll_s = poll_s
        self.keep_last = keep_last  # region gc after each version; None: never collect
        self.records: list[RelayRecord] = []

    def sync_once(self) -> RelayRecord | None:
        """Carry the origin's latest version into the region if it is newer (blocking)."""
        latest = self.origin.latest()
        current = self.region.latest()
        if latest is None or (current is not None and latest <= current):
            return None
        started = time.perf_counter()
        result = self.origin.fetch(latest, have=self.region.held())
        fetched = time.perf_counter()
        published = self.region.publish(latest, result.tensors)
        self.origin.register_follower(self.name, latest)
        if self.keep_last is not None:
            self.region.gc(keep_last=self.keep_last)
        record = RelayRecord(
            version=latest,
            route=result.route,
            bytes_in=result.bytes_read,
            region_bytes=published.delta_bytes + published.full_bytes + published.manifest_bytes,
            fetch_s=fetched - started,
            publish_s=time.perf_counter() - fetched,
            time=time.time(),
        )
        self.records.append(record)
        return record

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Sync every `poll_s` seconds (in a worker thread) until `stop` is set."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.sync_once)
            except WeightStoreError as err:
                log.warning("relay %s: %s", self.name, err)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_s)
