"""A store that refuses this process: each call ends in one StoreAccessError line that names
the store and what to check, at once (never retried).

On SeaweedFS: wrong credentials, a read-only key (READER_KEY) writing, a bucket that does
not exist. On a local folder: a real PermissionError, from a process run as user nobody
(`as_nobody`), since root passes every permission check.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable

import pytest
import s3fs

from fleetrl.store.errors import StoreAccessError
from fleetrl.store.objectstore import ObjectStore, open_store
from tests.env.store.conftest import READER_KEY, READER_SECRET, as_nobody, locked_store

CHECK = "(check the credentials and the bucket's policy)"


def calls(store: ObjectStore | None) -> dict[str, Callable[[], object]]:
    """One call of each kind, by name, to run against `store`."""
    return {
        "get": lambda: store.get("run/config.toml"),
        "exists": lambda: store.exists("run/config.toml"),
        "list": lambda: store.list("run/"),
        "list_folders": lambda: store.list_folders("run/"),
        "put": lambda: store.put("run/config.toml", b"x"),
        "create": lambda: store.create("control/incarnations/000001", b"x"),
        "delete": lambda: store.delete(["run/config.toml"]),
    }


CALLS = list(calls(None))
READS = ("get", "exists", "list", "list_folders")


@pytest.mark.parametrize("call", CALLS)
def test_wrong_credentials_are_one_line_at_once(call, s3_server, caplog):
    url = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    store = open_store(url, {**s3_server.storage_options(), "secret": "wrong"})
    access = "read" if call in READS else "write"
    with caplog.at_level(logging.WARNING), pytest.raises(StoreAccessError) as caught:
        calls(store)[call]()
    assert str(caught.value) == f"store {url}: {access} access denied {CHECK}"
    assert "retrying" not in caplog.text  # an answer, not an outage


def test_a_key_without_write_permission_reads_but_cannot_write(s3_server):
    url = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    open_store(url, s3_server.storage_options()).put("run/config.toml", b"run")
    options = {**s3_server.storage_options(), "key": READER_KEY, "secret": READER_SECRET}
    store = open_store(url, options)
    assert store.get("run/config.toml") == b"run" and store.list("run/") == ["run/config.toml"]
    for call in ("put", "create", "delete"):
        with pytest.raises(StoreAccessError) as caught:
            calls(store)[call]()
        assert str(caught.value) == f"store {url}: write access denied {CHECK}", call
    assert store.get("run/config.toml") == b"run"


@pytest.mark.parametrize("call", CALLS)
def test_a_bucket_that_does_not_exist_is_named_and_never_made(call, s3_server):
    bucket = f"missing-{uuid.uuid4().hex[:12]}"
    url = f"s3://{bucket}/run"
    with pytest.raises(StoreAccessError) as caught:
        calls(open_store(url, s3_server.storage_options()))[call]()
    assert str(caught.value) == f"store {url}: bucket '{bucket}' does not exist"
    # SeaweedFS makes a bucket on a first PUT: the store's check comes before any.
    admin = s3fs.S3FileSystem(**s3_server.storage_options(), skip_instance_cache=True)
    assert not admin.exists(bucket)


# -- a local folder: a real PermissionError, from a process that file permissions bind ------


NOBODY_CALLS = """
import sys
from fleetrl.store.objectstore import open_store
from fleetrl.store.errors import StoreAccessError

store = open_store(sys.argv[1])
for call in ("get", "exists", "put", "create"):
    try:
        {"get": lambda: store.get("run/config.toml"),
         "exists": lambda: store.exists("run/config.toml"),
         "put": lambda: store.put("run/x", b"x"),
         "create": lambda: store.create("run/y", b"y")}[call]()
        print(call, "ok")
    except StoreAccessError as err:
        print(call, err)
"""


def test_a_local_folder_that_refuses_this_user_is_one_line(shared_dir):
    store = locked_store(shared_dir)
    done = as_nobody([sys.executable, "-c", NOBODY_CALLS, str(store)], shared_dir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"get store {store}: permission denied reading {store}/run/config.toml",
        f"exists store {store}: permission denied reading {store}/run/config.toml",
        f"put store {store}: permission denied writing {store}/run",
        f"create store {store}: permission denied writing {store}",  # os.makedirs' first
    ]
