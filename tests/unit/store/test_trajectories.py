"""The trajectory channel: groups read exactly once, in order, across restarts; polls that
list only what is new; deletion of what a checkpoint covers (tests/env/store reruns the
checks that take `location` on SeaweedFS)."""

from __future__ import annotations

import pytest

from fleetrl.store.objectstore import FsspecStore
from fleetrl.store.region_metrics import VersionApplied
from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
from fleetrl.types import Segment, Trajectory


def group(reward: float, n: int = 2) -> list[Trajectory]:
    segment = Segment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.25], [-1, 3, 4], [[[0, 1]]] * 3)
    return [Trajectory("t", [segment], reward, "finish", 2, 1, 0, 0.5) for _ in range(n)]


class CountingStore(FsspecStore):
    """A real store that records each listing: (what, prefix, how many entries it returned)."""

    def __init__(self, url: str, storage_options: dict) -> None:
        super().__init__(url, storage_options)
        self.listings: list[tuple[str, str, int]] = []

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        keys = super().list(prefix, start_after)
        self.listings.append(("list", prefix, len(keys)))
        return keys

    def list_folders(self, prefix: str) -> list[str]:
        folders = super().list_folders(prefix)
        self.listings.append(("folders", prefix, len(folders)))
        return folders


def test_append_and_read_exactly_once(location):
    channel = TrajectoryChannel(location.open())
    swap = VersionApplied(
        version=3, time=1.5, pause_s=0.001, fetch_s=0.1, bytes=10, route="held 2 + 1 delta"
    )
    report = RegionReport("a", 3, [0.5, 0.5], [swap], {"OSError: x": 1})
    first = channel.append("a", group(1.0), report)
    channel.append("b", group(0.0), RegionReport("b", 3))
    cursor: dict[str, int] = {}
    records = channel.read_new(cursor)
    assert [(r.region, r.seq) for r in records] == [("a", 0), ("b", 0)]
    assert records[0].trajectories == first.trajectories
    assert records[0].report == report  # typed through the store's JSON: the swaps too
    assert isinstance(records[0].report.swaps[0], VersionApplied)
    assert channel.read_new(cursor) == []
    channel.append("a", group(0.5), RegionReport("a", 4))
    assert [(r.region, r.seq) for r in channel.read_new(cursor)] == [("a", 1)]
    assert cursor == {"a": 1, "b": 0} and channel.count() == 3 and channel.count("a") == 2


def test_restarted_region_continues_numbering_and_gaps_wait(location):
    TrajectoryChannel(location.open()).append("a", group(1.0), RegionReport("a", 0))
    restarted = TrajectoryChannel(location.open())
    assert restarted.append("a", group(1.0), RegionReport("a", 0)).seq == 1
    # An object written out of order (seq 3 before 2) waits until the gap closes.
    restarted.store.put("trajectories/a/0000000003.json.zst", b"not yet readable")
    cursor: dict[str, int] = {}
    assert [r.seq for r in restarted.read_new(cursor)] == [0, 1]
    assert cursor == {"a": 1}
    with pytest.raises(ValueError, match="without '/'"):
        restarted.append("a/b", group(1.0), RegionReport("a/b", 0))


def test_a_poll_lists_only_what_is_new(location):
    store = CountingStore(location.url, location.storage_options)
    channel = TrajectoryChannel(store)
    for seq in range(10):
        for region in ("a", "b", "c"):
            channel.append(region, group(seq), RegionReport(region, seq))
    cursor: dict[str, int] = {}
    assert len(channel.read_new(cursor)) == 30
    channel.append("b", group(1.0), RegionReport("b", 10))
    store.listings.clear()
    assert [(r.region, r.seq) for r in channel.read_new(cursor)] == [("b", 10)]
    # One folder listing, then one listing per region that starts after its cursor: the
    # 30 groups read before are not listed again.
    assert store.listings == [
        ("folders", "trajectories/", 3),
        ("list", "trajectories/a/", 0),
        ("list", "trajectories/b/", 1),
        ("list", "trajectories/c/", 0),
    ]
    # A region's count and a restarted region's numbering list its own folder only.
    store.listings.clear()
    assert channel.count("c") == 10
    assert TrajectoryChannel(store).append("c", group(0.0), RegionReport("c", 0)).seq == 10
    assert [prefix for _, prefix, _ in store.listings] == ["trajectories/c/"] * 2


def test_delete_before_keeps_the_numbering_and_the_unread(location):
    channel = TrajectoryChannel(location.open())
    for region, n in (("a", 5), ("b", 3), ("c", 2)):
        for seq in range(n):
            channel.append(region, group(seq), RegionReport(region, seq))
    cursor = {"a": 3, "b": 2}  # what a checkpoint covers: c was not read at all
    assert [r.seq for r in channel.read_new({"a": 1, "b": 2, "c": 1})] == [2, 3, 4]
    assert channel.delete_before(cursor) == 3 + 2
    assert channel.store.list("trajectories/") == [
        f"trajectories/{key}.json.zst"
        for key in ("a/0000000003", "a/0000000004", "b/0000000002", "c/0000000000", "c/0000000001")
    ]
    assert channel.delete_before(cursor) == 0
    # Reading resumes at the cursor; counts and restarted regions' numbers are unchanged.
    assert [(r.region, r.seq) for r in channel.read_new(cursor)] == [
        ("a", 4),
        ("c", 0),
        ("c", 1),
    ]
    assert channel.count() == 10 and channel.count("b") == 3
    restarted = TrajectoryChannel(location.open())
    assert restarted.append("b", group(0.0), RegionReport("b", 0)).seq == 3
    assert [(r.region, r.seq) for r in restarted.read_new(cursor)] == [("b", 3)]
