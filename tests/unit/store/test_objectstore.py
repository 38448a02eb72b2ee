"""ObjectStore contract and the throttled link on a local folder (tests/env/store reruns
the checks that take `location` on SeaweedFS)."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from fleetrl.store.objectstore import (
    BadStoreURL,
    ObjectNotFound,
    StoreUnreachable,
    ThrottledStore,
    open_store,
)
from tests.unit.store.failing_store import closed_port


def test_put_get_list_delete(location):
    store = location.open()
    assert store.list("weights/") == []
    store.put("weights/v00000001/a.bin", b"a" * 10)
    store.put("weights/v00000001/b.bin", b"")
    store.put("weights/LATEST", b"1\n")
    store.put("other/x", b"x")
    assert store.get("weights/v00000001/a.bin") == b"a" * 10
    assert store.get("weights/v00000001/b.bin") == b""
    assert store.list("weights/") == [
        "weights/LATEST",
        "weights/v00000001/a.bin",
        "weights/v00000001/b.bin",
    ]
    assert store.exists("weights/LATEST") and not store.exists("weights/nope")
    store.put("weights/LATEST", b"2\n")  # replace
    assert store.get("weights/LATEST") == b"2\n"
    store.delete(["weights/v00000001/a.bin", "weights/v00000001/b.bin", "weights/missing"])
    assert store.list("weights/") == ["weights/LATEST"]
    with pytest.raises(ObjectNotFound, match=r"weights/v00000001/a\.bin"):
        store.get("weights/v00000001/a.bin")


def test_local_put_is_atomic_and_leaves_no_temporaries(tmp_path):
    store = open_store(f"file://{tmp_path}/s")
    big = os.urandom(8 << 20)
    seen: list[int] = []
    stop = threading.Event()

    def reader() -> None:  # a reader sees the old or the new object, never a part
        while not stop.is_set():
            try:
                seen.append(len(store.get("k")))
            except ObjectNotFound:
                seen.append(-1)

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(5):
        store.put("k", big if i % 2 else b"small")
    stop.set()
    thread.join()
    assert set(seen) <= {-1, len(b"small"), len(big)}
    assert store.list("") == ["k"]
    assert sorted(os.listdir(tmp_path / "s")) == ["k"]


def test_throttled_store_counts_and_delays(location):
    inner = location.open()
    link = ThrottledStore(inner, bytes_per_s=1_000_000, latency_s=0.01)
    start = time.perf_counter()
    link.put("a", b"x" * 100_000)  # 0.1 s on the wire
    assert link.get("a") == b"x" * 100_000
    link.get("a")
    elapsed = time.perf_counter() - start
    assert elapsed >= 0.3
    assert link.stats.bytes_up == 100_000
    assert link.stats.bytes_down == 200_000
    assert link.stats.reads["a"] == 2
    assert link.stats.requests == 3


def test_create_is_a_conditional_write_one_of_many_creators_wins(location):
    store = location.open()
    assert store.create("control/claims/00001", b"first")
    assert not store.create("control/claims/00001", b"second")
    assert store.get("control/claims/00001") == b"first"
    # Many threads racing for one key: exactly one wins, and its bytes are what is stored.
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: store.create("race", str(i).encode()), range(16)))
    assert won.count(True) == 1
    assert store.get("race") == str(won.index(True)).encode()
    assert store.list("control/") == ["control/claims/00001"]  # no temporary left behind


def test_list_starts_after_a_key(location):
    store = location.open()
    keys = [f"t/{region}/{seq:04d}" for region in "ab" for seq in range(4)]
    for key in keys:
        store.put(key, b"x")
    store.put("u/0000", b"x")
    assert store.list("t/") == keys
    assert store.list("t/a/", start_after="t/a/0001") == ["t/a/0002", "t/a/0003"]
    assert store.list("t/", start_after="t/a/0003") == keys[4:]  # across folders
    assert store.list("t/a/", start_after="t/a/00015") == ["t/a/0002", "t/a/0003"]  # no such key
    assert store.list("t/a/", start_after="t/") == keys[:4]  # before the prefix: all
    assert store.list("t/a/", start_after="t/a/0003") == []
    assert ThrottledStore(store).list("t/b/", "t/b/0002") == ["t/b/0003"]


def test_list_folders_one_level_down(location):
    store = location.open()
    assert store.list_folders("t/") == []
    for key in ["t/b/0000", "t/a/0000", "t/a/0001", "t/a/deeper/0000", "t/file", "u/c/0000"]:
        store.put(key, b"x")
    assert store.list_folders("t/") == ["t/a/", "t/b/"]
    assert store.list_folders("t/a/") == ["t/a/deeper/"]
    assert store.list_folders("") == ["t/", "u/"]
    assert ThrottledStore(store).list_folders("u/") == ["u/c/"]


# -- mistakes in the URL, and a store that does not answer ----------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("foo://x", "unknown store URL scheme 'foo' (use a folder or s3://bucket/prefix)"),
        ("s3://", "store URL s3:// names no bucket"),
        ("s3:///prefix", "store URL s3:///prefix names no bucket"),
    ],
)
def test_open_store_refuses_a_url_that_names_no_store(url, message):
    with pytest.raises(BadStoreURL) as caught:
        open_store(url)
    assert message in str(caught.value)


def test_open_store_names_the_package_a_known_backend_lacks():
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    with pytest.raises(BadStoreURL, match=r"gs://b/x: .*install gcsfs"):
        open_store("gs://b/x")


def test_open_store_refuses_a_file_where_the_folder_would_be(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("not a store")
    with pytest.raises(BadStoreURL, match=r"afile is a file, not a store folder"):
        open_store(str(afile))
    with pytest.raises(BadStoreURL, match=r"afile is a file, not a folder"):
        open_store(f"file://{afile}/sub")
    assert open_store(str(tmp_path / "new" / "store")).list("") == []  # yet to be made: fine
    assert not (tmp_path / "new").exists()


def test_an_unreachable_s3_store_is_given_up_after_its_outage_window(caplog):
    options = {
        "endpoint_url": f"http://127.0.0.1:{closed_port()}",
        "key": "key",
        "secret": "secret",
        "config_kwargs": {"retries": {"max_attempts": 1}},  # botocore's own retries: none
    }
    store = open_store("s3://bkt/pfx", options, outage_s=3.0)
    start = time.monotonic()
    unreachable = pytest.raises(StoreUnreachable, match=r"^cannot reach store s3://bkt/pfx: ")
    with caplog.at_level(logging.WARNING, logger="fleetrl.store.objectstore"), unreachable:
        store.get("run/config.toml")
    assert time.monotonic() - start < 20  # the window given, far from the default 120 s
    assert "retrying in 0.5 s" in caplog.text  # the user sees the outage being ridden out


def test_an_s3_store_without_credentials_is_unreachable_at_once(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    store = open_store("s3://bkt/pfx", {"endpoint_url": f"http://127.0.0.1:{closed_port()}"})
    with pytest.raises(StoreUnreachable, match=r"credentials .*AWS_ACCESS_KEY_ID"):
        store.get("run/config.toml")
