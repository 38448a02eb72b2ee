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
- `list(prefix, start_after)` gives only the keys after `start_after`, so a poller that
  remembers the last key it saw pays for what is new, not for the history (S3: one
  ListObjectsV2 with StartAfter); `list_folders` gives the sub-folders one level down
  (S3: Delimiter "/"), so new writers are found without listing their objects.
- Keys are relative, '/'-separated, and never start with '/'.
- A remote store rides out outages: a call that fails for a transient reason (connection
  refused or reset, timeout, 5xx) is retried with exponential backoff for up to
  `outage_s` (default DEFAULT_OUTAGE_S, 120 s), each retry logged as a warning, then
  StoreUnreachable is raised (as it is at once without credentials). A missing key, an
  existing key (create) or a refused permission is an answer: never retried. A local
  folder is not retried.
- A store that refuses this process raises StoreAccessError, one line naming the store and
  what to check: S3 access denied (credentials, the bucket's policy), a local file or
  folder whose permissions refuse it, an S3 bucket that does not exist (checked by a store's
  first call, since a missing key and a missing bucket look alike to most calls).
- `open_store` refuses a URL that names no store (unknown scheme, a backend not
  installed, s3:// without a bucket, a file where the folder would be) with BadStoreURL,
  before any contact: the command line turns these errors into one line.

S3 credentials and endpoint come from `storage_options` (s3fs arguments: `key`, `secret`,
`endpoint_url`, …) or s3fs's usual environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, …).

Not covered: compare-and-swap on an existing key (LATEST: one publisher per store is
assumed), listing consistency beyond what the backend offers, outages longer than
`outage_s`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from fleetrl.files import file_in_the_way, write_whole
from fleetrl.store.errors import StoreAccessError

log = logging.getLogger(__name__)
T = TypeVar("T")

FIRST_WAIT_S, LONGEST_WAIT_S = 0.5, 8.0  # backoff between retries: doubles up to the longest
DEFAULT_OUTAGE_S = 120.0  # how long a remote store's call retries through an outage
CREATE_TOKEN = "fleetrl-create-token"  # S3 metadata naming the create() call that wrote an object


class ObjectNotFound(FileNotFoundError):
    """A key that does not exist in the store."""


class BadStoreURL(ValueError):
    """A URL that names no store: an unknown scheme, a backend whose package is not
    installed, s3:// without a bucket, or a local path where a file is in the way."""


class StoreUnreachable(ConnectionError):
    """A remote store that did not answer through the outage window, or that this process
    has no credentials for; the message names the store and the last failure."""


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
    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        """Sorted keys that start with `prefix` (a folder-like prefix ending in '/'), all
        of them or only those that sort after the key `start_after`."""

    @abstractmethod
    def list_folders(self, prefix: str) -> list[str]:
        """Sorted sub-folders one level below `prefix`, as prefixes: 'trajectories/' →
        ['trajectories/a/', 'trajectories/b/']. A folder emptied by deletes may remain."""

    @abstractmethod
    def delete(self, keys: list[str]) -> None:
        """Remove objects; keys that do not exist are ignored."""


def open_store(
    url: str, storage_options: dict[str, Any] | None = None, outage_s: float | None = None
) -> ObjectStore:
    """The store at `url`: a local path, `file://…`, `s3://bucket/prefix`, or any fsspec URL;
    a remote one retries a call through an outage of up to `outage_s` seconds (default
    DEFAULT_OUTAGE_S). Raises BadStoreURL, without contacting anything, for a URL that
    names no store (`check_store_url`)."""
    check_store_url(url)
    return FsspecStore(url, storage_options, outage_s)


def check_store_url(url: str) -> None:
    """Raise BadStoreURL when `url` cannot name a store: an unknown scheme, a backend whose
    package is missing, s3:// without a bucket, a file at (or above) a local path. Checked
    before any contact, so that a typo costs one sentence instead of a backend's traceback
    (or a copy that fails half-way with NotADirectoryError)."""
    protocol, path = fsspec.core.split_protocol(url)
    if protocol in (None, "file", "local"):
        blocker = file_in_the_way(Path(path))
        if blocker == Path(path):
            raise BadStoreURL(f"{url} is a file, not a store folder")
        if blocker is not None:
            raise BadStoreURL(f"store {url}: {blocker} is a file, not a folder")
        return
    for name in protocol.split("::"):  # a chained URL: simplecache::s3://…
        try:
            fsspec.get_filesystem_class(name)
        except ValueError:
            raise BadStoreURL(
                f"unknown store URL scheme {name!r} (use a folder or s3://bucket/prefix)"
            ) from None
        except ImportError as err:  # a known backend whose package is missing (gs: gcsfs)
            raise BadStoreURL(f"store {url}: {err}") from None
    if protocol.split("::")[-1] in ("s3", "s3a") and not path.split("/")[0]:
        raise BadStoreURL(f"store URL {url} names no bucket (use s3://bucket/prefix)")


def is_transient(err: BaseException) -> bool:
    """Whether `err` is the link or the server failing, which a later try may not meet,
    rather than the store's answer (no such key, key exists, bad request, no permission)."""
    if isinstance(err, FileNotFoundError | FileExistsError | PermissionError):
        return False
    if isinstance(err, OSError):  # refused connections, timeouts, 5xx as s3fs raises them
        # s3fs raises 400 Bad Request and 412 Precondition Failed as EINVAL.
        return err.errno != errno.EINVAL
    # botocore's EndpointConnectionError, ConnectionClosedError, … are no OSErrors; matched
    # by name so that a store without S3 needs no botocore.
    return any(
        cls.__module__ == "botocore.exceptions"
        and cls.__name__ in ("ConnectionError", "HTTPClientError")
        for cls in type(err).__mro__
    )


def lacks_credentials(err: BaseException) -> bool:
    """Whether `err` is botocore finding no (or half of the) credentials to sign with:
    matched by name, like `is_transient`, so that a store without S3 needs no botocore."""
    return type(err).__module__ == "botocore.exceptions" and type(err).__name__ in (
        "NoCredentialsError",
        "PartialCredentialsError",
    )


def retry_transient(
    what: str,
    call: Callable[[], T],
    total_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`call()`, tried again after each transient failure (`is_transient`) with waits of
    0.5 s doubling to 8 s, until the next wait would pass `total_s`; then the failure is
    raised. Each retry logs one warning naming `what`, so an outage shows in the logs."""
    start, wait = clock(), FIRST_WAIT_S
    while True:
        try:
            return call()
        except Exception as err:
            elapsed = clock() - start
            if not is_transient(err) or elapsed + wait > total_s:
                raise
            log.warning(
                "%s failed (%s: %s); retrying in %.1f s, %.1f s into the outage",
                what,
                type(err).__name__,
                err,
                wait,
                elapsed,
            )
            sleep(wait)
            wait = min(2 * wait, LONGEST_WAIT_S)


class FsspecStore(ObjectStore):
    """ObjectStore over an fsspec filesystem (local folder, S3 via s3fs, …)."""

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        outage_s: float | None = None,
    ) -> None:
        options = dict(storage_options or {})
        if url.startswith("s3://"):
            # Listings must reflect deletes and new versions at once, not a cached past.
            options.setdefault("use_listings_cache", False)
        self.url = url
        # How long a remote call retries through an outage (the default read now, not at
        # import, so that a test can shorten it).
        self.outage_s = DEFAULT_OUTAGE_S if outage_s is None else outage_s
        self.fs, root = fsspec.core.url_to_fs(url, **options)
        self.root = root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)
        protocols = self.fs.protocol
        self.s3 = "s3" in (protocols if isinstance(protocols, tuple) else (protocols,))
        bucket, _, base = self.root.partition("/")
        self._bucket, self._base = bucket, f"{base}/" if base else ""  # S3 key = base + key
        self._bucket_found = not self.s3  # set once a first call has seen the bucket

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _call(self, what: str, call: Callable[[], T]) -> T:
        """`call()`, retried through an outage when the store is remote. Raises
        StoreAccessError when the store refuses this process (`what`, "get KEY" or "put
        KEY", names the attempt), StoreUnreachable when the outage outlasts `outage_s` or
        there are no credentials."""
        try:
            if self.local:
                return call()
            return retry_transient(
                f"{self.url}: {what}", partial(self._with_bucket_check, call), self.outage_s
            )
        except StoreAccessError:
            raise
        except PermissionError as err:
            raise self._refused(what, err) from err
        except Exception as err:
            if self.local or not (is_transient(err) or lacks_credentials(err)):
                raise  # a local folder has no outage: its errors are its answer
            reason = str(err) or type(err).__name__
            if lacks_credentials(err):
                reason += " (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            raise StoreUnreachable(f"cannot reach store {self.url}: {reason}") from err

    def _with_bucket_check(self, call: Callable[[], T]) -> T:
        """`call()`, after one ListObjectsV2 of at most one key on an S3 store's first call:
        a missing bucket fails there, by name. Later, most calls would take it for a missing
        key, and some gateways (SeaweedFS) make the bucket on a first PUT. The listing is of
        the store's prefix, which a policy that grants only that prefix allows."""
        if not self._bucket_found:
            try:
                request = {"Bucket": self._bucket, "Prefix": self._base, "MaxKeys": 1}
                self.fs.call_s3("list_objects_v2", **request)
            except FileNotFoundError:  # NoSuchBucket: a listing has no other reason to fail
                message = f"store {self.url}: bucket {self._bucket!r} does not exist"
                raise StoreAccessError(message) from None
            self._bucket_found = True
        return call()

    def _refused(self, what: str, err: PermissionError) -> StoreAccessError:
        """The one-line error for a refused `what`: the local path the operating system
        refused, or S3's access denied (which names no object)."""
        reading = what.split()[0] in ("get", "exists", "list")
        if self.local:
            doing, path = "reading" if reading else "writing", err.filename or self.root
            return StoreAccessError(f"store {self.url}: permission denied {doing} {path}")
        access = "read" if reading else "write"
        return StoreAccessError(
            f"store {self.url}: {access} access denied "
            "(check the credentials and the bucket's policy)"
        )

    def get(self, key: str) -> bytes:
        """See ObjectStore.get."""
        try:
            return self._call(f"get {key}", partial(self.fs.cat_file, self._path(key)))
        except FileNotFoundError as err:
            raise ObjectNotFound(f"{self.url}: no object {key!r}") from err

    def put(self, key: str, data: bytes) -> None:
        """See ObjectStore.put."""
        path = self._path(key)
        # S3: one PUT (multipart past 5 GiB), atomic, and a retry writes the same bytes.
        write = partial(write_whole, Path(path)) if self.local else partial(self.fs.pipe_file, path)
        self._call(f"put {key}", partial(write, data))

    def create(self, key: str, data: bytes) -> bool:
        """See ObjectStore.create: S3's `If-None-Match: *`, tagged so that a retry knows
        its own write; locally a hard link of a complete temporary file, which fails if
        the name exists."""
        path = self._path(key)
        if self.local:
            return self._call(f"create {key}", partial(self._create_local, path, data))
        token = uuid.uuid4().hex
        return self._call(f"create {key}", partial(self._create_once, path, data, token))

    def _create_local(self, path: str, data: bytes) -> bool:
        """A local create: a hard link of a complete temporary file (see `create`)."""
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

    def _create_once(self, path: str, data: bytes, token: str) -> bool:
        """One try of a remote create. When the key exists, the object is ours if it
        carries `token`: an earlier try landed but its answer was lost in an outage."""
        try:
            self.fs.pipe_file(path, data, mode="create", Metadata={CREATE_TOKEN: token})
            return True
        except OSError as err:  # 412 Precondition Failed comes back as a plain OSError
            try:
                return self.fs.metadata(path).get(CREATE_TOKEN) == token
            except FileNotFoundError:
                raise err from None  # no such key: not a precondition failure

    def exists(self, key: str) -> bool:
        """See ObjectStore.exists; locally, a folder this process may not search raises
        StoreAccessError rather than answering False, as `os.path.exists` would."""
        check = _exists_locally if self.local else self.fs.exists
        return self._call(f"exists {key}", partial(check, self._path(key)))

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        """See ObjectStore.list; a local store hides temporary files of writes in progress."""
        lister = self._list_s3 if self.s3 else self._list_fsspec
        return self._call(f"list {prefix}", partial(lister, prefix, start_after))

    def list_folders(self, prefix: str) -> list[str]:
        """See ObjectStore.list_folders."""
        lister = self._folders_s3 if self.s3 else self._folders_fsspec
        return self._call(f"list folders {prefix}", partial(lister, prefix))

    def _list_fsspec(self, prefix: str, start_after: str | None) -> list[str]:
        start = len(self.root) + 1
        try:
            found = self.fs.find(self._path(prefix), detail=True)
        except FileNotFoundError:
            return []
        # Files only: gateways may report an emptied folder as a directory entry.
        keys = (path[start:] for path, info in found.items() if info.get("type") == "file")
        return sorted(
            k for k in keys if ".tmp-" not in k and (start_after is None or k > start_after)
        )

    def _folders_fsspec(self, prefix: str) -> list[str]:
        start = len(self.root) + 1
        try:
            entries = self.fs.ls(self._path(prefix), detail=True)
        except FileNotFoundError:
            return []
        return sorted(f"{e['name'][start:]}/" for e in entries if e["type"] == "directory")

    def _list_s3(self, prefix: str, start_after: str | None) -> list[str]:
        options = {} if start_after is None else {"StartAfter": self._base + start_after}
        pages = self._s3_pages(prefix, **options)
        keys = (c["Key"] for page in pages for c in page.get("Contents", []))
        # A key ending in '/' is a folder marker that some gateways and consoles create.
        return sorted(k[len(self._base) :] for k in keys if not k.endswith("/"))

    def _folders_s3(self, prefix: str) -> list[str]:
        pages = self._s3_pages(prefix, Delimiter="/")
        folders = (p["Prefix"] for page in pages for p in page.get("CommonPrefixes", []))
        return sorted(f[len(self._base) :] for f in folders)

    def _s3_pages(self, prefix: str, **options: str) -> list[dict[str, Any]]:
        """All pages (1,000 keys each) of one ListObjectsV2 of `prefix`."""
        request = {"Bucket": self._bucket, "Prefix": self._base + prefix, **options}
        pages = [self.fs.call_s3("list_objects_v2", **request)]
        while pages[-1].get("IsTruncated"):
            request["ContinuationToken"] = pages[-1]["NextContinuationToken"]
            pages.append(self.fs.call_s3("list_objects_v2", **request))
        return pages

    def delete(self, keys: list[str]) -> None:
        """See ObjectStore.delete; a local store also drops the folders this empties."""
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                self._call(f"delete {key}", partial(self.fs.rm_file, self._path(key)))
        if self.local:
            for folder in sorted({os.path.dirname(self._path(k)) for k in keys}, reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)  # only succeeds when empty


def _exists_locally(path: str) -> bool:
    """Whether a file or folder is at `path`; PermissionError when a folder above it may
    not be searched (the answer is unknown, not False)."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


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

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        """See ObjectStore.list."""
        self._cross(0)
        with self._lock:
            self.stats.requests += 1
        return self.inner.list(prefix, start_after)

    def list_folders(self, prefix: str) -> list[str]:
        """See ObjectStore.list_folders."""
        self._cross(0)
        with self._lock:
            self.stats.requests += 1
        return self.inner.list_folders(prefix)

    def delete(self, keys: list[str]) -> None:
        """See ObjectStore.delete."""
        self._cross(0)
        with self._lock:
            self.stats.requests += 1
        self.inner.delete(keys)
