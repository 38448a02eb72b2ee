"""Object store access: flat keys to bytes, over any fsspec URL, plus a simulated slow link.

Role: the only thing trainer and regions share (invariant 3). `open_store(url)` gives a
local folder for a path or `file://` URL (the default, one machine) and an S3-compatible
bucket for `s3://bucket/prefix` (real deployments; tested against SeaweedFS).

Contract:
- `put` is atomic for readers: they see the whole new object or the old one, never a
  part (local: write a temporary file, then rename; S3: one PUT, or a multipart upload
  that appears on completion). Ordering across keys is the caller's job (WeightStore
  writes data first, its manifest after, LATEST last).
- `get` of a missing key raises ObjectNotFound, whatever the backend.
- Keys are relative, '/'-separated, and never start with '/'.

S3 credentials and endpoint come from `storage_options` (s3fs arguments: `key`, `secret`,
`endpoint_url`, …) or s3fs's usual environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, …).

Not covered: conditional writes (compare-and-swap on LATEST: one publisher per store is
assumed), listing consistency beyond what the backend offers, retries (s3fs retries).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem


class ObjectNotFound(FileNotFoundError):
    """A key that does not exist in the store."""


class ObjectStore(ABC):
    """Flat keys ('weights/v00000042/manifest.json') mapped to immutable-ish bytes."""

    url: str  # where the store lives, for messages and logs

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's bytes; raises ObjectNotFound when the key does not exist."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Create or replace an object; readers see all of `data` or the old object."""

    @abstractmethod
    def create(self, key: str, data: bytes) -> bool:
        """Create an object only if `key` does not exist (a conditional write); False when
        it does. Of several processes creating one key, exactly one gets True: the fence
        behind run-wide claims such as a trainer's incarnation."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether the key exists now."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Sorted keys that start with `prefix` (a folder-like prefix ending in '/')."""

    @abstractmethod
    def delete(self, keys: list[str]) -> None:
        """Remove objects; keys that do not exist are ignored."""


def open_store(url: str, storage_options: dict[str, Any] | None = None) -> ObjectStore:
    """The store at `url`: a local path, `file://…`, `s3://bucket/prefix`, or any fsspec URL."""
    return FsspecStore(url, storage_options)


class FsspecStore(ObjectStore):
    """ObjectStore over an fsspec filesystem (local folder, S3 via s3fs, …)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        options = dict(storage_options or {})
        if url.startswith("s3://"):
            # Listings must reflect deletes and new versions at once, not a cached past.
            options.setdefault("use_listings_cache", False)
        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url, **options)
        self.root = root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)
        if self.local:
            self.fs.makedirs(self.root, exist_ok=True)

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def get(self, key: str) -> bytes:
        """See ObjectStore.get."""
        try:
            return self.fs.cat_file(self._path(key))
        except FileNotFoundError as err:
            raise ObjectNotFound(f"{self.url}: no object {key!r}") from err

    def put(self, key: str, data: bytes) -> None:
        """See ObjectStore.put."""
        path = self._path(key)
        if not self.local:
            self.fs.pipe_file(path, data)  # one PUT (multipart past 5 GiB): atomic
            return
        self.fs.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            with open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, path)  # rename within a folder: atomic on POSIX
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(temporary)

    def create(self, key: str, data: bytes) -> bool:
        """See ObjectStore.create: S3's `If-None-Match: *`; locally a hard link of a
        complete temporary file, which fails if the name exists."""
        path = self._path(key)
        if not self.local:
            try:
                self.fs.pipe_file(path, data, mode="create")
                return True
            except OSError:  # 412 Precondition Failed comes back as a plain OSError
                if self.exists(key):
                    return False
                raise
        self.fs.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            with open(temporary, "wb") as f:
                f.write(data)
            os.link(temporary, path)
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(temporary)

    def exists(self, key: str) -> bool:
        """See ObjectStore.exists."""
        return self.fs.exists(self._path(key))

    def list(self, prefix: str) -> list[str]:
        """See ObjectStore.list; a local store hides temporary files of writes in progress."""
        start = len(self.root) + 1
        try:
            found = self.fs.find(self._path(prefix), detail=True)
        except FileNotFoundError:
            return []
        # Files only: S3 gateways may report an emptied folder as a directory entry.
        paths = (path for path, info in found.items() if info.get("type") == "file")
        return sorted(p[start:] for p in paths if ".tmp-" not in p)

    def delete(self, keys: list[str]) -> None:
        """See ObjectStore.delete; a local store also drops the folders this empties."""
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self._path(key))
        if self.local:
            for folder in sorted({os.path.dirname(self._path(k)) for k in keys}, reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)  # only succeeds when empty


@dataclass
class LinkStats:
    """What went through a ThrottledStore: the bytes that crossed the simulated link."""

    bytes_down: int = 0  # bytes read through the link (get)
    bytes_up: int = 0  # bytes written through the link (put)
    requests: int = 0  # calls of any kind
    reads: Counter[str] = field(default_factory=Counter)  # key → times read


class ThrottledStore(ObjectStore):
    """Another store seen through a slow link (a cross-region hop), counting what crosses it.

    Every call waits `latency_s`; a transfer then holds the link for size / bandwidth
    seconds, one transfer at a time, as a single shared pipe would.
    """

    def __init__(
        self, inner: ObjectStore, bytes_per_s: float | None = None, latency_s: float = 0.0
    ) -> None:
        self.inner = inner
        self.url = inner.url
        self.bytes_per_s = bytes_per_s  # None: unlimited bandwidth
        self.latency_s = latency_s
        self.stats = LinkStats()
        self._lock = threading.Lock()  # counters
        self._link = threading.Lock()  # one transfer on the pipe at a time

    def _cross(self, nbytes: int) -> None:
        if self.latency_s:
            time.sleep(self.latency_s)
        if self.bytes_per_s and nbytes:
            with self._link:
                time.sleep(nbytes / self.bytes_per_s)

    def get(self, key: str) -> bytes:
        """See ObjectStore.get."""
        data = self.inner.get(key)
        self._cross(len(data))
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_down += len(data)
            self.stats.reads[key] += 1
        return data

    def put(self, key: str, data: bytes) -> None:
        """See ObjectStore.put."""
        self._cross(len(data))
        self.inner.put(key, data)
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_up += len(data)

    def create(self, key: str, data: bytes) -> bool:
        """See ObjectStore.create."""
        self._cross(len(data))
        created = self.inner.create(key, data)
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_up += len(data)
        return created

    def exists(self, key: str) -> bool:
        """See ObjectStore.exists."""
        self._cross(0)
        with self._lock:
            self.stats.requests += 1
        return self.inner.exists(key)

    def list(self, prefix: str) -> list[str]:
        """See ObjectStore.list."""
        self._cross(0)
        with self._lock:
            self.stats.requests += 1
        return self.inner.list(prefix)

    def delete(self, keys: list[str]) -> None:
        """See ObjectStore.delete."""
        self._cross(0)
        with self._lock:
            self.stats.requests += 1
        self.inner.delete(keys)
