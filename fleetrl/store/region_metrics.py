"""A region's own metrics, in the run's store: what it measured, readable wherever it ran.

    region ── append(record) ─▶ buffer ── flush() with each heartbeat and at exit ─▶
        metrics/regions/NAME/0000000000.jsonl, 0000000001.jsonl, …   (one object per flush)
    report, bench ── read_region_metrics(store) ─▶ {region: [record, …]}

Each flush creates one new object (an exclusive `create`), JSON lines, one record each,
so objects are immutable and a restarted region, or a zombie of it, never overwrites what
an earlier process wrote: it continues the numbering after the last object it finds.
Nothing collects them: the weight and trajectory garbage collectors delete only under
weights/ and trajectories/.

Records (`kind` names each):
- "applied": a policy version the region's engine began serving (`VersionApplied`);
- "relayed": a version its relay copied across regions into its own store (`VersionRelayed`);
- "group": a finished or dropped group (`GroupDone`).

Not covered: records lost when a process dies between two flushes (a few seconds' worth),
compaction of the many small objects of a long run.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from fleetrl.store.objectstore import BadStoreURL, ObjectNotFound, ObjectStore, open_store

log = logging.getLogger(__name__)

PREFIX = "metrics/regions/"
SUFFIX = ".jsonl"


@dataclass(frozen=True, kw_only=True)
class VersionApplied:
    """One version the engine swapped in: a `WeightFollower`'s record, which the region
    keeps here and sends to the trainer in its reports (`RegionReport.swaps`)."""

    kind: ClassVar[str] = "applied"
    version: int  # the version the engine serves from `time` on
    time: float  # unix time the engine began serving it
    pause_s: float  # s: decoding stood still for the swap
    fetch_s: float  # s: download, decode and verify (decoding went on)
    bytes: int  # bytes read from the store the engine follows (regional or origin)
    route: str  # how it was rebuilt, e.g. "held 41 + 1 delta"


@dataclass(frozen=True, kw_only=True)
class VersionRelayed:
    """One version the region's relay carried from the origin into the region's store."""

    kind: ClassVar[str] = "relayed"
    version: int  # the version now held by the regional store
    time: float  # unix time it was committed in the regional store
    bytes: int  # bytes that crossed regions for it (manifests included)
    fetch_s: float  # s: pulling it over the cross-region link, verified
    publish_s: float  # s: writing it into the regional store
    route: str  # how it was rebuilt from the origin, e.g. "held 41 + 1 delta"


@dataclass(frozen=True, kw_only=True)
class GroupDone:
    """A group that finished: sent to the trainer, or dropped for too few episodes."""

    kind: ClassVar[str] = "group"
    group_id: str  # the id its trajectories carry
    time: float  # unix time it finished
    versions: list[int]  # distinct policy versions that sampled its tokens, ascending
    episode_s: list[float]  # wall seconds of each completed episode
    failures: dict[str, int] = field(default_factory=dict)  # failed episodes by reason
    dropped: bool = False  # too few episodes completed: nothing sent
    rewards: list[float] = field(default_factory=list)  # of each completed episode
    draws: int = 1  # more when the group failed whole and was drawn again (explore_rounds)
    guided: bool = False  # failed whole: a sample gave way to the expert's (guide_failed_groups)


Record = VersionApplied | VersionRelayed | GroupDone


def _key(region: str, seq: int) -> str:
    return f"{PREFIX}{region}/{seq:010d}{SUFFIX}"


def _seq(key: str) -> int | None:
    name = key.rpartition("/")[2]
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else ""
    return int(stem) if stem.isdigit() else None


class RegionMetricsWriter:
    """Buffers one region's records and writes them to the store, one object per flush.

    `append` never touches the store (safe on an event loop); `flush` does (call it in a
    worker thread). Both are safe from several threads.
    """

    def __init__(self, store: ObjectStore, region: str) -> None:
        if not region or "/" in region:
            raise ValueError(f"region name {region!r}: must be non-empty, without '/'")
        self.store = store
        self.region = region
        self._lines: list[str] = []
        self._next: int | None = None  # next object number, found at the first flush
        self._buffer = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time keeps objects in order

    def append(self, record: Record) -> None:
        """Queue one record for the next flush."""
        line = json.dumps({"kind": record.kind, **asdict(record)})
        with self._buffer:
            self._lines.append(line)

    def flush(self) -> int:
        """Write the queued records as one new object; returns how many were written. On a
        store error the records stay queued for the next flush and the error is raised."""
        with self._flushing:
            with self._buffer:
                lines, self._lines = self._lines, []
            if not lines:
                return 0
            try:
                self._create("\n".join(lines) + "\n")
            except BaseException:
                with self._buffer:
                    self._lines = lines + self._lines
                raise
            return len(lines)

    def _create(self, text: str) -> None:
        if self._next is None:
            keys = self.store.list(f"{PREFIX}{self.region}/")
            self._next = max((s for k in keys if (s := _seq(k)) is not None), default=-1) + 1
        # Another process of the same name (a restart racing its predecessor) may take a
        # number first: skip past it rather than overwrite.
        while not self.store.create(_key(self.region, self._next), text.encode()):
            self._next += 1
        self._next += 1


def read_region_metrics(store: ObjectStore) -> dict[str, list[dict]]:
    """Every region's records, by region, in the order they were written; each record a
    dict with its `kind` (the fields of `VersionApplied`, `VersionRelayed` or `GroupDone`)."""
    regions: dict[str, list[dict]] = {}
    for folder in store.list_folders(PREFIX):
        region = folder[len(PREFIX) : -1]
        keys = sorted((s, k) for k in store.list(folder) if (s := _seq(k)) is not None)
        records = regions.setdefault(region, [])
        for _, key in keys:
            try:
                text = store.get(key).decode()
                records += [json.loads(line) for line in text.splitlines() if line.strip()]
            except ObjectNotFound:
                continue
            except ValueError as err:  # objects are written whole: this one was altered
                log.warning("skipped region metrics %s: not JSON lines (%s)", key, err)
    return regions


def read_report_metrics(url: str, outage_s: float = 10.0) -> dict[str, list[dict]]:
    """The region metrics in the run's store at `url`, for the report; empty when there is
    no store to read (a local folder that is not there). A remote store is given
    `outage_s` to answer, then skipped with a warning."""
    if "://" not in url and not Path(url).is_dir():
        return {}
    try:
        return read_region_metrics(open_store(url, outage_s=outage_s))
    except (OSError, BadStoreURL) as err:
        log.warning("no region metrics from %s: %s", url, err)
        return {}
