"""The trajectory channel: groups read exactly once, in order, across restarts."""

from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
from fleetrl.types import Segment, Trajectory


def group(reward: float, n: int = 2) -> list[Trajectory]:
    segment = Segment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.25], [-1, 3, 4], [[[0, 1]]] * 3)
    return [Trajectory("t", [segment], reward, "finish", 2, 1, 0, 0.5) for _ in range(n)]


def test_append_and_read_exactly_once(tmp_path):
    channel = TrajectoryChannel(str(tmp_path))
    report = RegionReport("a", 3, [0.5, 0.5], [{"pause_s": 0.001, "fetch_s": 0.1, "bytes": 10}])
    first = channel.append("a", group(1.0), report)
    channel.append("b", group(0.0), RegionReport("b", 3))
    cursor: dict[str, int] = {}
    records = channel.read_new(cursor)
    assert [(r.region, r.seq) for r in records] == [("a", 0), ("b", 0)]
    assert records[0].trajectories == first.trajectories
    assert records[0].report == report
    assert channel.read_new(cursor) == []
    channel.append("a", group(0.5), RegionReport("a", 4))
    assert [(r.region, r.seq) for r in channel.read_new(cursor)] == [("a", 1)]
    assert cursor == {"a": 1, "b": 0} and channel.count() == 3 and channel.count("a") == 2


def test_restarted_region_continues_numbering_and_gaps_wait(tmp_path):
    TrajectoryChannel(str(tmp_path)).append("a", group(1.0), RegionReport("a", 0))
    restarted = TrajectoryChannel(str(tmp_path))
    assert restarted.append("a", group(1.0), RegionReport("a", 0)).seq == 1
    # An object written out of order (seq 3 before 2) waits until the gap closes.
    restarted.store.put("trajectories/a/0000000003.json.zst", b"not yet readable")
    cursor: dict[str, int] = {}
    assert [r.seq for r in restarted.read_new(cursor)] == [0, 1]
    assert cursor == {"a": 1}
