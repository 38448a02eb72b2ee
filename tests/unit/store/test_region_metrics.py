"""Region metrics in the store: one immutable object per flush, read back in order by region;
a restarted region continues the numbering; nothing is lost when the store fails; the
garbage collectors leave them alone; the report shows them."""

from __future__ import annotations

import pytest
import torch

from fleetrl.observe.report import write_report
from fleetrl.store.region_metrics import (
    GroupDone,
    RegionMetricsWriter,
    VersionApplied,
    VersionRelayed,
    read_region_metrics,
    read_report_metrics,
)
from fleetrl.store.trajectories import TrajectoryChannel
from fleetrl.store.weights import WeightStore, WeightStoreOptions
from tests.unit.store.failing_store import FailingStore


def applied(version: int) -> VersionApplied:
    return VersionApplied(
        version=version,
        time=100.0 + version,
        pause_s=0.001,
        fetch_s=0.2,
        bytes=1000 * version,
        route=f"held {version - 1} + 1 delta",
    )


def test_records_come_back_by_region_in_order(location):
    store = location.open()
    west, east = RegionMetricsWriter(store, "west"), RegionMetricsWriter(store, "east")
    assert west.flush() == 0 and store.list("metrics/") == []  # nothing queued: no object
    west.append(applied(1))
    west.append(VersionRelayed(version=1, time=99.5, bytes=5000, fetch_s=1.0, publish_s=0.1,
                               route="held 0 + 1 delta"))  # fmt: skip
    assert west.flush() == 2
    west.append(GroupDone(group_id="west-0", time=102.0, versions=[0, 1], episode_s=[1.5, 2.5],
                          failures={"RuntimeError: boom": 1}))  # fmt: skip
    west.append(applied(2))
    east.append(GroupDone(group_id="east-0", time=103.0, versions=[], episode_s=[], dropped=True))
    assert west.flush() == 2 and east.flush() == 1
    keys = store.list("metrics/regions/")
    assert keys == [
        "metrics/regions/east/0000000000.jsonl",
        "metrics/regions/west/0000000000.jsonl",
        "metrics/regions/west/0000000001.jsonl",
    ]
    got = read_region_metrics(store)
    assert sorted(got) == ["east", "west"]
    assert [(r["kind"], r.get("version")) for r in got["west"]] == [
        ("applied", 1), ("relayed", 1), ("group", None), ("applied", 2),
    ]  # fmt: skip
    assert got["west"][1]["bytes"] == 5000
    assert got["west"][2]["failures"] == {"RuntimeError: boom": 1}
    assert got["west"][2]["versions"] == [0, 1] and got["west"][2]["episode_s"] == [1.5, 2.5]
    assert got["east"] == [
        {"kind": "group", "group_id": "east-0", "time": 103.0, "versions": [], "episode_s": [],
         "failures": {}, "dropped": True, "rewards": [], "draws": 1, "guided": False},
    ]  # fmt: skip


def test_an_altered_metrics_object_is_skipped_not_fatal(location, caplog):
    store = location.open()
    west = RegionMetricsWriter(store, "west")
    west.append(applied(1))
    west.flush()
    store.put("metrics/regions/west/0000000001.jsonl", b'{"kind": "applied", "vers')
    west.append(applied(2))
    west.flush()  # continues after the altered object
    got = read_region_metrics(store)
    assert [r["version"] for r in got["west"]] == [1, 2]
    assert "skipped region metrics metrics/regions/west/0000000001.jsonl" in caplog.text


def test_a_restarted_region_continues_and_never_overwrites(location):
    store = location.open()
    first = RegionMetricsWriter(store, "west")
    first.append(applied(1))
    first.flush()
    # A second process of the same region (a restart) while the first still writes.
    second = RegionMetricsWriter(store, "west")
    second.append(applied(2))
    second.flush()
    first.append(applied(3))  # the first's next number is taken: it skips past it
    first.flush()
    versions = [r["version"] for r in read_region_metrics(store)["west"]]
    assert sorted(versions) == [1, 2, 3] and len(store.list("metrics/regions/west/")) == 3


def test_a_failed_flush_keeps_the_records_for_the_next(location):
    store = FailingStore(location.open(), down=False)
    writer = RegionMetricsWriter(store, "west")
    writer.append(applied(1))
    store.down = True
    with pytest.raises(ConnectionError):
        writer.flush()
    writer.append(applied(2))
    store.down = False
    assert writer.flush() == 2
    assert [r["version"] for r in read_region_metrics(store)["west"]] == [1, 2]


def test_garbage_collection_leaves_region_metrics(location):
    store = location.open()
    writer = RegionMetricsWriter(store, "west")
    writer.append(applied(1))
    writer.flush()
    weights = WeightStore(store, WeightStoreOptions(full_every=1))
    for version in range(3):
        weights.publish(version, {"w": torch.full((4,), float(version))})
    assert weights.gc(keep_last=1) == [0, 1]
    TrajectoryChannel(store).delete_before({"west": 5})
    assert read_region_metrics(store)["west"][0]["version"] == 1


def test_bad_region_names_are_refused(location):
    with pytest.raises(ValueError, match="region name"):
        RegionMetricsWriter(location.open(), "a/b")


def test_the_report_shows_each_region(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = run_dir / "store"
    page = write_report(run_dir, read_report_metrics(str(store))).read_text()
    assert "no region metrics in the store" in page  # no store at all
    assert not store.exists()  # and reading made none
    writer = RegionMetricsWriter(WeightStore(str(run_dir / "store")).store, "west")
    writer.append(applied(3))
    writer.append(GroupDone(group_id="west-0", time=1.0, versions=[3], episode_s=[2.0, 4.0]))
    for i, rewards in enumerate(([0.0, 1.0], [0.0, 0.0])):  # drawn again: solved, not solved
        writer.append(GroupDone(group_id=f"west-{i + 1}", time=2.0, versions=[3],
                                episode_s=[1.0, 1.0], rewards=rewards, draws=3))  # fmt: skip
    # Failed whole after its draws, then guided: its success is the expert's, not solved.
    writer.append(GroupDone(group_id="west-3", time=3.0, versions=[3], episode_s=[1.0, 1.0],
                            rewards=[0.0, 1.0], draws=3, guided=True))  # fmt: skip
    writer.flush()
    page = write_report(run_dir, read_report_metrics(str(store))).read_text()
    row = page[page.index("<section id='regions'>") :].split("</section>")[0]
    assert "<th>west</th><td>1 (3)</td>" in row
    # groups sent / dropped, drawn again (then solved), guided, episodes (mean s)
    assert "<td>4 / 0</td><td>3 (1)</td><td>1</td><td>8 (1.5)</td>" in row
