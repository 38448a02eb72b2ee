"""The trajectory channel: finished groups travel from regions to the trainer.

    region A ─ append(group) ─▶ trajectories/A/0000000000.json.zst, 0000000001, ...
    region B ─ append(group) ─▶ trajectories/B/0000000000.json.zst, ...
                                            │
    trainer ─ read_new(cursor) ◀────────────┘  cursor = {region: last seq read}

Objects are append-only and written once (atomic puts), one group per object, numbered
per region. The trainer keeps the cursor in its checkpoint, so after a restart it reads
exactly the groups it had not trained on: nothing lost, nothing twice. A region that
restarts continues its numbering from what the store already holds.

A poll costs one folder listing (the regions) plus, per region, a listing that starts
after the cursor's key: proportional to what is new, not to the run's history. Once a
checkpoint covers a cursor, `delete_before(cursor)` removes the groups it read, each
region's last one excepted: that one carries the region's numbering over a restart.

Alongside the group, a region sends `RegionReport`s (weight swaps, rollout timings) so
that every number the run logs travels through the store too.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import zstandard

from fleetrl.store.objectstore import ObjectStore, open_store
from fleetrl.store.region_metrics import VersionApplied
from fleetrl.types import Segment, Trajectory

PREFIX = "trajectories/"
SUFFIX = ".json.zst"


@dataclass
class RegionReport:
    """What a region measured while producing one group."""

    region: str
    policy_version: int  # version the region's engine held when the group finished
    episode_s: list[float] = field(default_factory=list)  # wall time per episode
    # Versions the engine swapped in since the last report (its first load is not a swap).
    swaps: list[VersionApplied] = field(default_factory=list)
    # Episodes that failed since the last report (this group's, and those of groups dropped
    # for too few completed episodes), by reason: "ExceptionType: first line of message".
    failed_episodes: dict[str, int] = field(default_factory=dict)
    handed_in: float = 0.0  # unix time the group was written (0: not recorded)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RegionReport:
        """A report back from its JSON form (`dataclasses.asdict`)."""
        return cls(**{**raw, "swaps": [VersionApplied(**s) for s in raw["swaps"]]})


@dataclass
class GroupRecord:
    """One object of the channel: a group of trajectories of one task."""

    region: str
    seq: int  # position in the region's sequence
    trajectories: list[Trajectory]
    report: RegionReport


def encode_record(record: GroupRecord) -> bytes:
    """The stored form of a group: zstd-compressed JSON."""
    return zstandard.ZstdCompressor(level=3).compress(json.dumps(asdict(record)).encode())


def decode_record(data: bytes) -> GroupRecord:
    """A group back from its stored form."""
    raw = json.loads(zstandard.ZstdDecompressor().decompress(data))
    trajectories = [
        Trajectory(**{**t, "segments": [Segment(**s) for s in t["segments"]]})
        for t in raw["trajectories"]
    ]
    report = RegionReport.from_dict(raw["report"])
    return GroupRecord(raw["region"], raw["seq"], trajectories, report)


def _key(region: str, seq: int) -> str:
    return f"{PREFIX}{region}/{seq:010d}{SUFFIX}"


def _parse(key: str) -> tuple[str, int] | None:
    """(region, seq) of a channel key, None for anything else."""
    if not (key.startswith(PREFIX) and key.endswith(SUFFIX)):
        return None
    region, _, name = key[len(PREFIX) : -len(SUFFIX)].rpartition("/")
    return (region, int(name)) if region and name.isdigit() else None


class TrajectoryChannel:
    """Append groups (regions) and read them exactly once in order (trainer)."""

    def __init__(self, store: ObjectStore | str) -> None:
        self.store = open_store(store) if isinstance(store, str) else store
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def regions(self) -> list[str]:
        """Regions that have appended to the channel, sorted (one folder listing)."""
        return sorted(folder[len(PREFIX) : -1] for folder in self.store.list_folders(PREFIX))

    def _groups(self, region: str, after: int = -1) -> list[tuple[int, str]]:
        """(seq, key) of the region's groups numbered above `after`, in order: one listing
        of the region's folder that starts after that group's key."""
        start = _key(region, after) if after >= 0 else None
        parsed = ((_parse(key), key) for key in self.store.list(f"{PREFIX}{region}/", start))
        return [(p[1], key) for p, key in parsed if p is not None and p[0] == region]

    def _next_seq(self, region: str) -> int:
        groups = self._groups(region)
        return groups[-1][0] + 1 if groups else 0

    def count(self, region: str | None = None) -> int:
        """Groups appended so far, by one region or by all: the next sequence numbers, so
        groups already deleted (`delete_before`) still count."""
        regions = self.regions() if region is None else [region]
        return sum(self._next_seq(r) for r in regions)

    def append(
        self, region: str, trajectories: list[Trajectory], report: RegionReport
    ) -> GroupRecord:
        """Write one finished group; safe to call from several threads of one region."""
        if not region or "/" in region:
            raise ValueError(f"region name {region!r}: must be non-empty, without '/'")
        with self._lock:
            if region not in self._next:
                self._next[region] = self._next_seq(region)
            seq = self._next[region]
            self._next[region] += 1
        record = GroupRecord(region, seq, trajectories, report)
        self.store.put(_key(region, seq), encode_record(record))
        return record

    def read_new(self, cursor: dict[str, int]) -> list[GroupRecord]:
        """Groups after `cursor` (region -> last seq read), oldest first per region; the
        cursor is advanced in place only past groups returned."""
        records = []
        for region in self.regions():
            for seq, key in self._groups(region, after=cursor.get(region, -1)):
                if seq != cursor.get(region, -1) + 1:
                    break  # a gap: an earlier object is not visible yet
                records.append(decode_record(self.store.get(key)))
                cursor[region] = seq
        return records

    def delete_before(self, cursor: dict[str, int]) -> int:
        """Delete the groups before `cursor` (region -> last seq read), once a trainer
        checkpoint covers them; the group at the cursor stays, so that a restarted region
        continues its numbering after it. Returns how many groups were deleted."""
        doomed = [
            key
            for region, last in cursor.items()
            for seq, key in self._groups(region)
            if seq < last
        ]
        self.store.delete(doomed)
        return len(doomed)
