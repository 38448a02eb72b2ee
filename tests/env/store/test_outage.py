"""A store outage: S3 calls retry through it, and nothing is lost or written twice.

The outage test runs its own SeaweedFS (the session's server stays up for the other tests),
kills it (SIGKILL) while a region writes and a trainer polls, and starts it again on the
same ports and data folder ten seconds later.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from botocore.exceptions import ConnectionClosedError

from fleetrl.store.objectstore import open_store
from fleetrl.store.trajectories import GroupRecord, RegionReport, TrajectoryChannel
from tests.env.store.conftest import SeaweedFS
from tests.unit.store.test_trajectories import group

GROUPS = 20
DOWN_S = 10


def test_writes_and_polls_ride_out_a_server_outage(tmp_path, caplog):
    weed = SeaweedFS(tmp_path)
    with weed as server, caplog.at_level(logging.WARNING, logger="fleetrl.store.objectstore"):
        url, options = f"s3://{server.bucket}/outage", server.storage_options()
        region, trainer = TrajectoryChannel(open_store(url, options)), open_store(url, options)
        written: list[int] = []
        read: list[GroupRecord] = []
        failures: list[BaseException] = []
        done = threading.Event()

        def write() -> None:  # a region: a group, an object and a claim every 0.2 s
            try:
                for i in range(GROUPS):
                    region.append("a", group(float(i)), RegionReport("a", i))
                    region.store.put(f"objects/{i:04d}", str(i).encode())
                    assert region.store.create(f"claims/{i:04d}", b"mine")
                    written.append(i)
                    time.sleep(0.2)
            except BaseException as err:
                failures.append(err)

        def poll() -> None:  # a trainer; its last poll comes after the last write
            channel, cursor = TrajectoryChannel(trainer), {}
            try:
                while True:
                    last = done.is_set()
                    read.extend(channel.read_new(cursor))
                    if last:
                        return
                    time.sleep(0.1)
            except BaseException as err:
                failures.append(err)

        threads = [threading.Thread(target=f, daemon=True) for f in (write, poll)]
        for thread in threads:
            thread.start()
        while len(written) < 3 and not failures:
            time.sleep(0.05)
        weed.kill()
        time.sleep(DOWN_S)
        during = len(written)
        weed.start()
        threads[0].join(timeout=300)
        done.set()
        threads[1].join(timeout=300)

        assert not failures, failures
        assert written == list(range(GROUPS)) and during < GROUPS  # the outage held the writer
        assert [(r.seq, r.trajectories[0].reward) for r in read] == [(i, i) for i in range(GROUPS)]
        assert any("retrying in" in r.getMessage() for r in caplog.records)
        # Each object once, as written (a fresh store: new connections, no cache).
        store = open_store(url, options)
        keys = [f"objects/{i:04d}" for i in range(GROUPS)]
        assert store.list("objects/") == keys
        assert [store.get(k) for k in keys] == [str(i).encode() for i in range(GROUPS)]
        assert store.list("claims/") == [f"claims/{i:04d}" for i in range(GROUPS)]
        assert TrajectoryChannel(store).count("a") == GROUPS


class LosesFirstAnswer:
    """An s3fs filesystem whose first write lands but whose answer is lost on the way."""

    def __init__(self, fs: Any) -> None:
        self.fs, self.lost = fs, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)

    def pipe_file(self, *args: Any, **kwargs: Any) -> Any:
        result = self.fs.pipe_file(*args, **kwargs)
        if not self.lost:
            self.lost = True
            raise ConnectionClosedError(endpoint_url="http://s3")  # as botocore raises it
        return result


def test_a_retried_create_knows_its_own_write(location):
    mine, theirs = location.open(), location.open()
    mine.fs = LosesFirstAnswer(mine.fs)
    assert mine.create("claims/0001", b"mine")  # landed, answer lost, retried: still ours
    assert mine.fs.lost
    assert not theirs.create("claims/0001", b"theirs")  # another creator's: False
    assert theirs.get("claims/0001") == b"mine"
