"""A real store whose writes of some keys fail (a crash mid-publish, or an outage), and a
local port that refuses connections, for an S3 store that is down."""

from __future__ import annotations

import socket

import pytest

from fleetrl.store.objectstore import ObjectStore


def closed_port() -> int:
    """A local TCP port that nothing listens on, so that a connection to it is refused at
    once (the unit tier may not bind a socket to make one: rarely served ports are tried)."""
    for port in (9, 1, 7, 13):  # discard, tcpmux, echo, daytime
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return port
    pytest.skip("every candidate port of 127.0.0.1 has a listener")


class FailingStore(ObjectStore):
    """Writes (put, create) of keys containing `fail_when` raise while `down` is set, as a
    dying writer's or an unreachable store's would; everything else reaches `inner`."""

    def __init__(self, inner: ObjectStore, fail_when: str = "", down: bool = True) -> None:
        self.inner, self.url, self.fail_when, self.down = inner, inner.url, fail_when, down

    def _check(self, key: str) -> None:
        if self.down and self.fail_when in key:
            raise ConnectionError(f"simulated crash writing {key}")

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        self._check(key)
        self.inner.put(key, data)

    def create(self, key: str, data: bytes) -> bool:
        self._check(key)
        return self.inner.create(key, data)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        return self.inner.list(prefix, start_after)

    def list_folders(self, prefix: str) -> list[str]:
        return self.inner.list_folders(prefix)

    def delete(self, keys: list[str]) -> None:
        self.inner.delete(keys)
