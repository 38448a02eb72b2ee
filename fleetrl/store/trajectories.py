"""The trajectory channel: finished groups travel from regions to the trainer.

    region A ─ append(group) ─▶ trajectories/A/0000000000.json.zst, 0000000001, ...
    region B ─ append(group) ─▶ trajectories/B/0000000000.json.zst, ...
                                            │
    trainer ─ read_new(cursor) ◀────────────┘  cursor = {region: last seq read}

Objects are append-only and written once (atomic puts), one group per object, numbered
per region. The trainer keeps the cursor in its checkpoint, so after a restart it reads
exactly the groups it had not trained on: nothing lost, nothing twice. A region that
restarts continues its numbering from what the store already holds.

Alongside the group, a region sends `RegionReport`s (weight syncs, rollout timings) so
that every number the run logs travels through the store too.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field

import zstandard

from fleetrl.store.objectstore import ObjectStore, open_store
from fleetrl.types import Segment, Trajectory

PREFIX = "trajectories/"
SUFFIX = ".json.zst"


@dataclass
class RegionReport:
    """What a region measured while producing one group."""

    region: str
    policy_version: int  # version the region's engine held when the group finished
    episode_s: list[float] = field(default_factory=list)  # wall time per episode
    syncs: list[dict[str, float]] = field(default_factory=list)  # weight syncs since last


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
    return GroupRecord(raw["region"], raw["seq"], trajectories, RegionReport(**raw["report"]))


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

    def _keys(self) -> list[tuple[str, int, str]]:
        parsed = ((_parse(key), key) for key in self.store.list(PREFIX))
        return [(p[0], p[1], key) for p, key in parsed if p is not None]

    def count(self, region: str | None = None) -> int:
        """Groups in the channel (of one region, or of all)."""
        return sum(1 for r, _, _ in self._keys() if region is None or r == region)

    def append(
        self, region: str, trajectories: list[Trajectory], report: RegionReport
    ) -> GroupRecord:
        """Write one finished group; safe to call from several threads of one region."""
        with self._lock:
            if region not in self._next:
                seqs = [seq for r, seq, _ in self._keys() if r == region]
                self._next[region] = max(seqs, default=-1) + 1
            seq = self._next[region]
            self._next[region] += 1
        record = GroupRecord(region, seq, trajectories, report)
        self.store.put(f"{PREFIX}{region}/{seq:010d}{SUFFIX}", encode_record(record))
        return record

    def read_new(self, cursor: dict[str, int]) -> list[GroupRecord]:
        """Groups after `cursor` (region -> last seq read), oldest first per region; the
        cursor is advanced in place only past groups returned."""
        records = []
        for region, seq, key in sorted(self._keys()):
            # Skip what was read, and stop at a gap: an earlier object is not visible yet.
            if seq == cursor.get(region, -1) + 1:
                records.append(decode_record(self.store.get(key)))
                cursor[region] = seq
        return records
